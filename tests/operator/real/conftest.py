"""Fixtures of the tests against a real Kubernetes API server (tests/realk8s): one server per
test session, with the operator installed as a user installs it — real kubectl applies
``crds/`` (server-side), then ``manifests/``, and the chart as Helm's engine renders it (release
``kraftsman-chart`` in its own namespace, so its RBAC is proven apart from the manifests').

Each test gets its own namespace and an :class:`Api` client (cluster-admin) bound to it; the
operator it starts (``deployed``) is the Deployment's command and args as a subprocess that
logs in ONLY with a token of its ServiceAccount (a kubeconfig with the token and the CA), so a
verb its RBAC lacks is a 403 and a failing test. At the end of a test its operators are
stopped and what it created is removed, so the next test's operator (all namespaces) starts
on a clean server.

Without the binaries (tools/build-real-apiserver) these tests are skipped, saying so; with
``CI`` set they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from deployed import ROOT, OperatorProcess, PodTemplate
from harness import Api
from real_install import CHART_NAMESPACE, Installer, chart, cleanup, namespace_for

from tests.realk8s.apiserver import BUILD, RealServer, bin_dir, missing_binaries, up


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    missing = missing_binaries()
    if missing:
        reason = (f"the real API server is not built ({', '.join(missing)} missing in "
                  f"{bin_dir()}): run {BUILD.relative_to(ROOT)}")
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {reason} (.ci/run builds it)")
        pytest.skip(reason)
    server = up(tmp_path_factory.mktemp("real-apiserver"))
    try:
        # As README's "On Kubernetes" says: the CRDs server-side, then the manifests.
        server.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        server.kubectl("wait", "--for=condition=Established", "crd", "--all",
                       "--timeout=60s")
        server.kubectl("apply", "-f", str(ROOT / "manifests"))
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def installer(real_server: RealServer) -> Installer:
    inst = Installer(real_server)
    inst.apply(chart().install, "helm")  # the chart, default values
    return inst


@pytest.fixture
def namespace(real_server: RealServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """The test's own namespace; what the test left in it goes at the end (after its
    operators have stopped: ``deployed`` depends on this fixture)."""
    ns = namespace_for(request.node.name)
    real_server.kubectl("create", "namespace", ns)
    yield ns
    cleanup(real_server, ns, set())


@pytest.fixture
async def api(real_server: RealServer, installer: Installer, namespace: str
              ) -> AsyncIterator[Api]:
    """cluster-admin, as a user with kubectl; objects go to the test's namespace."""
    context = real_server.ssl_context()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        yield Api(real_server.url, session, namespace)


@pytest.fixture
async def deployed(real_server: RealServer, installer: Installer, namespace: str,
                   tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await deployed(pod=None, env=None, login=True, state_dir=None)``: one replica of the
    operator as its Deployment runs it (default: the chart, default values), its install
    applied, logged in with a token of its ServiceAccount; waits for its liveness endpoint.
    Stopped (SIGTERM, then kill -9) at teardown."""
    running: list[OperatorProcess] = []
    job_namespaces: set[str] = set()

    async def start(pod: PodTemplate | None = None, env: dict[str, str] | None = None,
                    login: bool = True, state_dir: Path | None = None) -> OperatorProcess:
        pod = pod or chart()
        installer.apply(pod.install, "helm" if pod.namespace == CHART_NAMESPACE
                        else "kubectl")
        job_namespaces.add(pod.namespace)
        workdir = tmp_path / f"pod-{len(running)}"
        workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = real_server.token_kubeconfig(workdir / "kubeconfig",
                                                  pod.service_account, pod.namespace)
        proc = OperatorProcess(pod, workdir=workdir,
                               pod_name=f"kraftsman-5d8f7c-{len(running)}x{id(pod) % 997}",
                               kubeconfig=kubeconfig if login else None, env=env,
                               state_dir=state_dir)
        running.append(proc.start())
        await proc.wait_healthy()
        return proc

    yield start
    for proc in running:
        await proc.stop()
    cleanup(real_server, None, job_namespaces)

