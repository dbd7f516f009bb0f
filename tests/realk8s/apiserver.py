"""A real Kubernetes API server on loopback, envtest-style: etcd and kube-apiserver built from
their upstream Go modules by ``tools/build-real-apiserver`` (the release that
``tools/apiserver/go.mod`` pins), started as processes of this machine.

The server serves TLS (a CA made at start: tests/tls_certs.py), issues ServiceAccount tokens
(the TokenRequest API), authorizes with RBAC (and Node) and runs the default admission
plugins. ``DIR/kubeconfig`` holds cluster-admin credentials: a client certificate in the group
``system:masters``. There is no controller manager, scheduler or kubelet: no pod runs, no
garbage collector deletes dependents, a deleted namespace stays Terminating.

Used by ``tools/real-apiserver up|down DIR`` (``python -m tests.realk8s``) and by the tests'
session fixture (tests/operator/realk8s_fixtures.py). Everything it starts lives in ``DIR``:
pid files, logs (kept after ``down``), etcd's data, the certificates, the audit log of what
ServiceAccounts did.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.ports import free_port
from tests.tls_certs import make_pki, write_private_key

ROOT = Path(__file__).resolve().parents[2]
GO_MOD = ROOT / "tools" / "apiserver" / "go.mod"
BUILD = ROOT / "tools" / "build-real-apiserver"
BINARIES = ("etcd", "kube-apiserver", "kubectl")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# What ServiceAccounts do goes to DIR/audit.log (the verbs the operator used); the rest not.
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
                          {"level": "None"}]}


class ServerError(Exception):
    """The server cannot be built, started or stopped; the message says why in one line and
    what to do."""


def pinned_version() -> str:
    """The Kubernetes release tools/apiserver/go.mod pins (``v1.37.2``)."""
    for line in GO_MOD.read_text().splitlines():
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == "k8s.io/kubernetes" and words[1].startswith("v"):
            return words[1]
    raise ServerError(f"{GO_MOD} pins no k8s.io/kubernetes version")


def bin_dir() -> Path:
    """Where tools/build-real-apiserver puts the binaries: ``$KRAFTSMAN_K8S_BIN``, else
    ``${KRAFTSMAN_CACHE:-~/.cache/kraftsman}/k8s-<version>/bin``."""
    if os.environ.get("KRAFTSMAN_K8S_BIN"):
        return Path(os.environ["KRAFTSMAN_K8S_BIN"])
    cache = Path(os.environ.get("KRAFTSMAN_CACHE") or Path.home() / ".cache" / "kraftsman")
    return cache / f"k8s-{pinned_version()}" / "bin"


def missing_binaries(directory: Path | None = None) -> list[str]:
    directory = directory or bin_dir()
    return [b for b in BINARIES if not os.access(directory / b, os.X_OK)]



def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(server: str, ca: Path, user: dict[str, Any], namespace: str = "default",
               name: str = "real-apiserver") -> dict[str, Any]:
    """A kubeconfig document with one context: ``server``, its CA (inline) and ``user``."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": {
                "server": server, "certificate-authority-data": _b64(ca)}}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name,
                                                    "namespace": namespace}}]}


@dataclass
class Layout:
    """What ``up`` wrote to DIR/server.json: enough for ``down`` and for clients."""

    dir: str
    bin: str
    version: str
    url: str
    etcd_url: str
    etcd_peer_url: str
    port: int
    ca: str
    admin_cert: str
    admin_key: str
    sa_key: str
    kubeconfig: str


class RealServer:
    """A running (or stopped) etcd + kube-apiserver pair in one directory."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.dir = Path(layout.dir)
        self.bin = Path(layout.bin)
        self.url = layout.url
        self.kubeconfig = Path(layout.kubeconfig)
        self.ca = Path(layout.ca)

    # -- processes ------------------------------------------------------------------------
    def _pidfile(self, name: str) -> Path:
        return self.dir / f"{name}.pid"

    def _log(self, name: str) -> Path:
        return self.dir / f"{name}.log"

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with self._log(name).open("ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    cwd=self.dir, start_new_session=True)
        self._pidfile(name).write_text(f"{proc.pid}\n")
        return proc

    def pid(self, name: str) -> int | None:
        """The pid of ``name`` if it runs (its pid file names a live process of our binary)."""
        try:
            pid = int(self._pidfile(name).read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, ValueError):
            return None
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return None  # a zombie of ours: ended, not yet reaped
        return pid if cmdline == str(self.bin / name) else None

    def tail(self, name: str, lines: int = 15) -> str:
        path = self._log(name)
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _etcd_argv(self) -> list[str]:
        lay = self.layout
        return [str(self.bin / "etcd"), "--name=default", f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={lay.etcd_url}",
                f"--advertise-client-urls={lay.etcd_url}",
                f"--listen-peer-urls={lay.etcd_peer_url}",
                f"--initial-advertise-peer-urls={lay.etcd_peer_url}",
                f"--initial-cluster=default={lay.etcd_peer_url}",
                "--unsafe-no-fsync", "--log-level=warn"]

    def _apiserver_argv(self) -> list[str]:
        lay = self.layout
        pki = self.dir / "pki"
        return [str(self.bin / "kube-apiserver"),
                f"--etcd-servers={lay.etcd_url}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={lay.port}",
                f"--tls-cert-file={pki / 'server.pem'}",
                f"--tls-private-key-file={pki / 'server.key'}",
                f"--client-ca-file={lay.ca}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={lay.sa_key}",
                f"--service-account-signing-key-file={lay.sa_key}",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                # The "kubernetes" Service's endpoints would name a loopback address,
                # which the reconciler refuses (envtest runs without it too).
                "--endpoint-reconciler-type=none",
                f"--audit-policy-file={self.dir / 'audit-policy.yaml'}",
                f"--audit-log-path={self.dir / 'audit.log'}",
                "--audit-log-maxsize=200", "--audit-log-maxbackup=1",
                "--profiling=false"]

    def start_etcd(self, timeout: float = 60) -> None:
        proc = self._spawn("etcd", self._etcd_argv())
        self._wait("etcd", proc, f"{self.layout.etcd_url}/health", timeout,
                   lambda body: json.loads(body).get("health") == "true")

    def start_apiserver(self, timeout: float = 90) -> None:
        proc = self._spawn("kube-apiserver", self._apiserver_argv())
        self._wait("kube-apiserver", proc, f"{self.url}/readyz", timeout,
                   lambda body: body.strip() == "ok")

    def ssl_context(self) -> ssl.SSLContext:
        """A client context trusting the server's CA, presenting the admin certificate."""
        ctx = ssl.create_default_context(cafile=self.layout.ca)
        ctx.load_cert_chain(self.layout.admin_cert, self.layout.admin_key)
        return ctx

    def _wait(self, name: str, proc: subprocess.Popen[bytes], url: str, timeout: float,
              ok: Any) -> None:
        deadline = time.monotonic() + timeout
        context = self.ssl_context() if url.startswith("https") else None
        last = ""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServerError(f"{name} exited with {proc.returncode} at start; its log "
                                  f"{self._log(name)} ends:\n{self.tail(name)}")
            try:
                with urllib.request.urlopen(url, timeout=5, context=context) as r:
                    body = r.read().decode()
                    if ok(body):
                        return
                    last = body[:200]
            except (OSError, ValueError) as e:  # refused, 500 not ready yet, not JSON yet
                last = str(e)
            time.sleep(0.1)
        raise ServerError(f"{name} not ready after {timeout:.0f} s ({url}: {last}); its log "
                          f"{self._log(name)} ends:\n{self.tail(name)}")

    def stop_process(self, name: str, timeout: float = 20) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; the pid file goes, the log stays."""
        pid = self.pid(name)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.pid(name) is not None and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.05)
            if self.pid(name) is not None:
                os.kill(pid, signal.SIGKILL)
                while self.pid(name) is not None:
                    _reap(pid)
                    time.sleep(0.05)
            _reap(pid)
        self._pidfile(name).unlink(missing_ok=True)

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port and etcd: every open watch
        ends, and the new server's watch cache begins at etcd's current revision."""
        self.stop_process("kube-apiserver")
        self.start_apiserver()

    def stop(self) -> None:
        self.stop_process("kube-apiserver")
        self.stop_process("etcd")

    # -- clients --------------------------------------------------------------------------
    def kubectl(self, *args: str, kubeconfig: Path | None = None, input: str | None = None,
                check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl (cluster-admin unless ``kubeconfig``)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir),
               "KUBECONFIG": str(kubeconfig or self.kubeconfig)}
        done = subprocess.run([str(self.bin / "kubectl"), *args], env=env, input=input,
                              capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise ServerError(f"kubectl {' '.join(args)}: exit {done.returncode}: "
                              f"{done.stderr.strip()}")
        return done

    def token(self, service_account: str, namespace: str, duration: str = "2h") -> str:
        """A token of ``namespace/service_account`` from the TokenRequest API."""
        return self.kubectl("create", "token", service_account, "-n", namespace,
                            f"--duration={duration}").stdout.strip()

    def token_kubeconfig(self, path: Path, service_account: str, namespace: str) -> Path:
        """A plain kubeconfig: the server, its CA and a bearer token of the ServiceAccount."""
        doc = kubeconfig(self.url, self.ca, {"token": self.token(service_account, namespace)},
                         namespace=namespace, name=f"{namespace}-{service_account}")
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path


def _reap(pid: int) -> None:
    """Collect our own child's exit status (a process started by this one, e.g. by the test
    session), so it does not linger as a zombie; not ours: nothing to do."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def attach(directory: Path) -> RealServer:
    """The server ``up`` started in ``directory``."""
    try:
        layout = Layout(**json.loads((directory / "server.json").read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise ServerError(f"{directory}: no server started there ({e})") from None
    return RealServer(layout)


def up(directory: Path, *, binaries: Path | None = None) -> RealServer:
    """Start etcd and kube-apiserver with their state in ``directory``; wait for /readyz."""
    binaries = binaries or bin_dir()
    missing = missing_binaries(binaries)
    if missing:
        raise ServerError(f"{', '.join(missing)} not built in {binaries}: run {BUILD} "
                          "(needs Go and the Go module proxy; about 10 minutes the first time)")
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "server.json").exists():
        old = attach(directory)
        running = [n for n in ("etcd", "kube-apiserver") if old.pid(n) is not None]
        if running:
            raise ServerError(f"{directory}: {' and '.join(running)} already running there; "
                              f"stop them first (tools/real-apiserver down {directory})")
    for stale in ("etcd", "pki"):  # a fresh cluster each time
        subprocess.run(["rm", "-rf", str(directory / stale)], check=True)
    pki = make_pki(directory / "pki", client_cn="kraftsman-admin", client_org="system:masters")
    sa_key = write_private_key(directory / "pki" / "service-accounts.key")
    (directory / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    layout = Layout(dir=str(directory), bin=str(binaries.resolve()), version=pinned_version(),
                    url=url, etcd_url=f"http://127.0.0.1:{free_port()}",
                    etcd_peer_url=f"http://127.0.0.1:{free_port()}", port=port,
                    ca=str(pki.ca), admin_cert=str(pki.client_cert),
                    admin_key=str(pki.client_key), sa_key=str(sa_key),
                    kubeconfig=str(directory / "kubeconfig"))
    server = RealServer(layout)
    admin = kubeconfig(url, pki.ca, {"client-certificate-data": _b64(pki.client_cert),
                                     "client-key-data": _b64(pki.client_key)})
    server.kubeconfig.write_text(yaml.safe_dump(admin))
    server.kubeconfig.chmod(0o600)
    (directory / "server.json").write_text(json.dumps(asdict(layout), indent=2) + "\n")
    try:
        server.start_etcd()
        server.start_apiserver()
    except BaseException:
        server.stop()
        raise
    return server


def down(directory: Path) -> RealServer:
    """Stop what ``up`` started in ``directory`` (its logs stay)."""
    server = attach(directory.resolve())
    server.stop()
    return server


def service_account_calls(directory: Path) -> dict[str, dict[tuple[str, str, str], set[int]]]:
    """From DIR/audit.log: for each ServiceAccount, (verb, group/resource[/subresource],
    namespace or "*") -> the HTTP codes answered — what the operator and the planner did,
    and where RBAC refused them (403)."""
    out: dict[str, dict[tuple[str, str, str], set[int]]] = {}
    path = directory / "audit.log"
    for line in path.read_text().splitlines() if path.exists() else []:
        event = json.loads(line)
        user = event.get("user", {}).get("username", "")
        ref = event.get("objectRef") or {}
        if not user.startswith("system:serviceaccount:") or not ref:
            continue
        resource = "/".join(x for x in (ref.get("apiGroup") or "core", ref.get("resource"),
                                        ref.get("subresource")) if x)
        key = (event["verb"], resource, "*" if not ref.get("namespace") else "ns")
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        out.setdefault(user.removeprefix("system:serviceaccount:"), {}).setdefault(
            key, set()).add(code)
    return out
