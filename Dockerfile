# The kraftsman operator image: `kraftsman operator run` as a non-root user.
# Build from the repository root:  docker build -t ghcr.io/kraftsman/kraftsman:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY controller_core ./controller_core
COPY operator ./operator
RUN pip install --no-cache-dir --prefix=/install ".[operator]"

FROM python:3.11-slim
COPY --from=build /install /usr/local
# Read-only root filesystem at run time: no bytecode caches, unbuffered logs.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --gid 65532 kraftsman \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin kraftsman \
 && mkdir -p /var/lib/kraftsman && chown 65532:65532 /var/lib/kraftsman
USER 65532:65532
VOLUME ["/var/lib/kraftsman"]
EXPOSE 8080
ENTRYPOINT ["kraftsman"]
CMD ["operator", "run", "--all-namespaces", "--state-dir=/var/lib/kraftsman", \
     "--liveness=http://0.0.0.0:8080/healthz"]
