"""Start the operator the way its Deployment does: a subprocess, configured as in a pod.

The command is the image's ENTRYPOINT (the Dockerfile; a container ``command`` would override
it) resolved to the installed console script; the args are the container's ``args`` as Helm's
own engine renders the chart (helm-python-sdk) or as ``manifests/40-deployment.yaml`` has
them. The process logs in through a kubeconfig file in ``$KUBECONFIG`` — against the real API server
(tests/operator/real/), a bearer token of the pod's ServiceAccount and the server's CA; against
the kmock API emulator, plain HTTP — and gets ``POD_NAME`` as the Deployment's downward API
gives it.
Nothing is injected: no login handler, no registry, no clock. Only what names the pod's
machine is rewritten: the ``--state-dir`` volume (a directory of the test) and the liveness
address (127.0.0.1 on a free port instead of 0.0.0.0:8080).

Tests that need embedded clusters to move faster pass options the way a user does: the
chart's ``extraArgs`` value (``SPEED``), appended to the manifest's args likewise.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import helm_python as helm
import yaml

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kraftsman"
MANIFEST = ROOT / "manifests" / "40-deployment.yaml"
DOCKERFILE = ROOT / "Dockerfile"
NAMESPACE = "kraftsman-system"

# How the tests speed up embedded clusters: the chart's extraArgs, as a user would set them.
SPEED = ["--tick=0.2", "--time-scale=50"]
# The chart's multi-replica variant (several replicas need a ReadWriteMany state claim).
TWO_REPLICAS: dict[str, Any] = {
    "replicaCount": 2,
    "state": {"type": "persistentVolumeClaim",
              "persistentVolumeClaim": {"accessModes": ["ReadWriteMany"]}}}


@dataclass
class PodTemplate:
    """What a Deployment's pod runs: its container's command and args, its env, and the
    other objects of the same install the API server must hold (the ClusterKopfPeering)."""

    command: list[str]
    args: list[str]
    env: list[dict[str, Any]]
    replicas: int
    objects: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""
    namespace: str = NAMESPACE  # the Deployment's (POD_NAMESPACE)
    service_account: str = "kraftsman"  # the pod's serviceAccountName
    install: list[dict[str, Any]] = field(default_factory=list)  # every object of the install


def entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form) from the Dockerfile."""
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("ENTRYPOINT"):
            value = json.loads(line.removeprefix("ENTRYPOINT").strip())
            assert isinstance(value, list) and value, line
            return [str(v) for v in value]
    raise AssertionError("the Dockerfile has no ENTRYPOINT")


def _template(deployment: dict[str, Any], objects: list[dict[str, Any]],
              source: str, install: list[dict[str, Any]]) -> PodTemplate:
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "operator"]
    return PodTemplate(command=list(container.get("command") or entrypoint()),
                       args=[str(a) for a in container.get("args") or []],
                       env=list(container.get("env") or []),
                       replicas=int(deployment["spec"].get("replicas", 1)),
                       objects=objects, source=source,
                       namespace=deployment["metadata"]["namespace"],
                       service_account=pod["serviceAccountName"], install=install)


def render_chart(values: dict[str, Any], *, release: str = "kraftsman",
                 namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """Every object `helm install RELEASE charts/kraftsman -n NAMESPACE` creates from its
    templates (its crds/ directory aside: chart_crds())."""
    out = helm.Chart.load(CHART).render(values, name=release, namespace=namespace,
                                         is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(out.items()):
        if not path.endswith("NOTES.txt"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def chart_crds() -> list[dict[str, Any]]:
    """The chart's crds/ directory, which Helm installs before any template."""
    return [d for path in sorted((CHART / "crds").glob("*.yaml"))
            for d in yaml.safe_load_all(path.read_text()) if d]


def from_chart(values: dict[str, Any] | None = None, *, extra_args: Sequence[str] = SPEED,
               release: str = "kraftsman", namespace: str = NAMESPACE) -> PodTemplate:
    """The pod of the chart's Deployment, rendered with these values (+ extraArgs)."""
    values = {**(values or {}), "extraArgs": [*(values or {}).get("extraArgs", []),
                                              *extra_args]}
    docs = render_chart(values, release=release, namespace=namespace)
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    peerings = [d for d in docs if d["kind"] == "ClusterKopfPeering"]
    return _template(dep, peerings, f"chart {values}", chart_crds() + docs)


def manifests() -> list[dict[str, Any]]:
    """Every object `kubectl apply -f manifests/` creates (its top-level files, in order)."""
    return [d for path in sorted((ROOT / "manifests").glob("*.yaml"))
            for d in yaml.safe_load_all(path.read_text()) if d]


def from_manifests(*, extra_args: Sequence[str] = SPEED) -> PodTemplate:
    """The pod of manifests/40-deployment.yaml, with extra args appended."""
    (dep,) = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    peerings = [d for d in yaml.safe_load_all((ROOT / "manifests" / "30-peering.yaml")
                                              .read_text()) if d]
    pod = _template(dep, peerings, "manifests/40-deployment.yaml", manifests())
    pod.args += list(extra_args)
    return pod


def write_kubeconfig(path: Path, server: str, *, namespace: str = NAMESPACE) -> Path:
    """A kubeconfig with one context for the emulator (plain HTTP, a dummy token)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": server}}],
        "users": [{"name": "operator", "user": {"token": "kmock-token"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "operator",
                                                   "namespace": namespace}}]}))
    return path



def _console_script(name: str) -> str:
    """The console script installed next to this interpreter (as in the image's PATH)."""
    candidate = Path(sys.executable).parent / name
    assert candidate.exists(), f"{name} is not installed in {candidate.parent}"
    return str(candidate)


class OperatorProcess:
    """One replica: the container's command and args as a subprocess of the test."""

    def __init__(self, pod: PodTemplate, *, workdir: Path, pod_name: str,
                 kubeconfig: Path | None = None, env: dict[str, str] | None = None,
                 state_dir: Path | None = None) -> None:
        self.pod, self.workdir, self.pod_name = pod, workdir, pod_name
        # The state volume: the pod's own (emptyDir) unless replicas share a claim (RWX).
        self.state_dir = state_dir or workdir / "state"
        self.health_port = free_port()
        self.health_url = f"http://127.0.0.1:{self.health_port}/healthz"
        self.metrics_url = f"http://127.0.0.1:{free_port()}/metrics"
        self.log_path = workdir / "operator.log"
        self.argv = self._argv()
        self.env = self._env(kubeconfig, env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def _argv(self) -> list[str]:
        command = list(self.pod.command)
        command[0] = _console_script(command[0]) if "/" not in command[0] else command[0]
        local = {"--state-dir": f"--state-dir={self.state_dir}",
                 "--liveness": f"--liveness={self.health_url}"}
        args = [local.get(arg.split("=", 1)[0], arg) for arg in self.pod.args]
        for arg in self.pod.args:
            if arg.startswith("--liveness="):
                assert re.fullmatch(r"--liveness=http://0\.0\.0\.0:\d+/healthz", arg), arg
        assert all(value in args for value in local.values()), \
            f"{self.pod.source}: args {self.pod.args} lack --state-dir= or --liveness="
        # Metrics when the pod serves them (the chart's metrics.enabled), on a port of ours.
        for i, arg in enumerate(args):
            if arg.startswith("--metrics="):
                assert re.fullmatch(r"--metrics=http://0\.0\.0\.0:\d+/metrics", arg), arg
                args[i] = f"--metrics={self.metrics_url}"
        return command + args

    def _env(self, kubeconfig: Path | None, extra: dict[str, str]) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir),
               "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
        for var in self.pod.env:  # the container's env, with the downward API filled in
            if "value" in var:
                env[var["name"]] = str(var["value"])
            elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
                    "metadata.name":
                env[var["name"]] = self.pod_name
            elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
                    "metadata.namespace":
                env[var["name"]] = self.pod.namespace
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        env.update(extra)
        return env

    def start(self) -> OperatorProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.workdir,
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until kopf's liveness endpoint answers 200; fails at once if the process exits."""
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if not self.alive():
                    raise AssertionError(f"operator exited with {self.returncode}:\n"
                                         f"{self.log()[-4000:]}")
                try:
                    async with session.get(self.health_url) as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"no liveness answer in {timeout}s:\n{self.log()[-4000:]}")

    async def wait_log(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Until the operator's log matches ``pattern`` (a regex)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log())
            if found:
                return found
            if not self.alive():
                break
            await asyncio.sleep(0.1)
        raise AssertionError(f"log never matched {pattern!r}:\n{self.log()[-4000:]}")

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """kill -9, as when the node dies or the OOM killer strikes."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._close()

    async def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM as the kubelet sends it; kill -9 after ``timeout`` (the grace period).
        Waits in a thread, so the emulator on the test's loop serves kopf's goodbye."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()
        return self.returncode

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


async def apply(base: str, objects: Sequence[dict[str, Any]]) -> None:
    """Create objects in the emulator (what `helm install` / `kubectl apply` does), for the
    kinds it serves; an object that exists already is left as it is."""
    async with aiohttp.ClientSession() as session:
        for obj in objects:
            group_version = obj["apiVersion"]
            plural = {"ClusterKopfPeering": "clusterkopfpeerings"}[obj["kind"]]
            prefix = "api" if "/" not in group_version else "apis"
            url = f"{base.rstrip('/')}/{prefix}/{group_version}/{plural}"
            async with session.post(url, json=obj) as r:
                assert r.status < 300 or r.status == 409, await r.text()
