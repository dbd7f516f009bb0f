# The kraftsman image: `kraftsman operator run` as a non-root user, and the planner Job of a
# KafkaRebalance (`kraftsman rebalance propose`, PySpark in local mode), which runs from this
# same image — so it carries the `plan` extra and a Java 17 runtime for Spark.
# Build from the repository root:  docker build -t ghcr.io/kraftsman/kraftsman:0.1.0 .
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY controller_core ./controller_core
COPY operator ./operator
RUN pip install --no-cache-dir --prefix=/install ".[operator,plan]"

FROM python:3.11-slim-bookworm
# Spark's driver JVM (openjdk-17, Debian bookworm's); procps: Spark's scripts call `ps`.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /install /usr/local
# Read-only root filesystem at run time: no bytecode caches, unbuffered logs.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MALLOC_ARENA_MAX=2
# Spark's classes, recorded once here (`kraftsman spark-archive`): the planner Job's JVM maps
# them instead of loading them, which halves its start.
ENV KRAFTSMAN_SPARK_CLASS_ARCHIVE=/usr/local/share/kraftsman/spark-classes.jsa
RUN kraftsman spark-archive
RUN groupadd --gid 65532 kraftsman \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin kraftsman \
 && mkdir -p /var/lib/kraftsman && chown 65532:65532 /var/lib/kraftsman
USER 65532:65532
VOLUME ["/var/lib/kraftsman"]
EXPOSE 8080 9090
ENTRYPOINT ["kraftsman"]
CMD ["operator", "run", "--all-namespaces", "--state-dir=/var/lib/kraftsman", \
     "--liveness=http://0.0.0.0:8080/healthz"]
