"""How `kraftsman operator run` logs in, tested as its Deployment starts it (a subprocess with
the chart's command and args): the pod's service account (in-cluster, over TLS as the API
server serves it), a kubeconfig given by --kubeconfig, and nothing at all (exit 2, one line)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deployed import SPEED, OperatorProcess, from_chart, write_kubeconfig
from harness import Api, cond_is
from test_operator_kmock import CLUSTER

TOKEN = "sa-token-of-the-test"


def authorizations(kmock: Any) -> set[str]:
    return {r.headers.get("Authorization", "") for r in list(kmock._requests)}


async def test_kubeconfig_flag_logs_in(api: Api, deployed: Any, kmock: Any,
                                       tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "elsewhere.yaml", str(kmock.url))
    doc = yaml.safe_load(config.read_text())
    doc["users"][0]["user"]["token"] = "flag-token"
    config.write_text(yaml.safe_dump(doc))
    await deployed(from_chart(extra_args=[*SPEED, f"--kubeconfig={config}"]), login=False)
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    assert "Bearer flag-token" in authorizations(kmock)


@contextlib.asynccontextmanager
async def tls_front(backend: str, workdir: Path) -> AsyncIterator[tuple[int, Path]]:
    """A TLS endpoint on 127.0.0.1 in front of the emulator, as a real API server serves:
    a self-signed certificate for IP 127.0.0.1 (its CA file is the certificate itself)."""
    cert, key = workdir / "tls.crt", workdir / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=kubernetes", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    host, port = backend.rsplit("//", 1)[1].rstrip("/").split(":")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ctx)
    try:
        yield int(server.sockets[0].getsockname()[1]), cert
    finally:
        server.close()


async def test_in_cluster_service_account_logs_in_over_tls(api: Api, deployed: Any,
                                                           kmock: Any, tmp_path: Path) -> None:
    async with tls_front(str(kmock.url), tmp_path) as (port, cert):
        sa = tmp_path / "serviceaccount"
        sa.mkdir()
        (sa / "token").write_text(TOKEN + "\n")
        (sa / "ca.crt").write_bytes(cert.read_bytes())
        (sa / "namespace").write_text("kraftsman-system")
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(port)}
        pod = from_chart(extra_args=[*SPEED, f"--service-account-dir={sa}"])
        await deployed(pod, env=env, login=False)
        await api.create("KafkaCluster", "demo", CLUSTER)
        await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
        assert f"Bearer {TOKEN}" in authorizations(kmock)


def run_to_exit(pod_args: list[str], tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    proc = OperatorProcess(from_chart(extra_args=[*SPEED, *pod_args]), workdir=tmp_path / "pod",
                           pod_name="kraftsman-0", env=env)
    proc.start()
    assert proc.proc is not None
    code = proc.proc.wait(60)
    proc.kill()
    return code, proc.log()


@pytest.mark.parametrize(("args", "env", "message"), [
    ([], {}, "error: no Kubernetes credentials: not in a pod (KUBERNETES_SERVICE_HOST and "
             "KUBERNETES_SERVICE_PORT are not set) and no kubeconfig (pass --kubeconfig FILE "
             "or set KUBECONFIG)"),
    (["--kubeconfig=/nonexistent/config"], {},
     "error: kubeconfig /nonexistent/config: cannot be read (No such file or directory); "
     "pass an existing file to --kubeconfig or KUBECONFIG"),
    (["--service-account-dir=/nonexistent/sa"],
     {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
     "error: in-cluster login: Service token file does not exist. (service account "
     "directory /nonexistent/sa); mount the service account token "
     "(automountServiceAccountToken: true)"),
], ids=["nothing", "missing-kubeconfig", "pod-without-token"])
def test_without_credentials_exits_2_with_one_line(tmp_path: Path, args: list[str],
                                                   env: dict[str, str], message: str) -> None:
    code, log = run_to_exit(args, tmp_path, env)
    assert (code, log) == (2, message + "\n")
