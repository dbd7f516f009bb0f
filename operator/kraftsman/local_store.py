"""The CLI's local state directory (default ``.kraftsman/``), standing in for the API server.

Layout::

    lock                               held (flock) by the one kraftsman using the directory
    clusters/<name>/spec.json          the applied KafkaCluster spec
    clusters/<name>/metadata/...       the embedded cluster's metadata log and snapshots
    clusters/<name>/dataplane.json     its data plane checkpoint
    resources/<Kind>/<name>.json       applied spec + status of every other resource

Every write is atomic, so an interrupted command leaves the previous or the new state; and
one command at a time uses the directory (:class:`StateLock`), so two never interleave.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.storage.framing import CorruptFileError, write_atomically
from kraftsman.cli_errors import UsageError

DEFAULT_STATE_DIR = Path(".kraftsman")
LOCK_FILE = "lock"
LOCK_WAIT_ENV = "KRAFTSMAN_LOCK_WAIT"  # seconds a second command waits for the lock
DEFAULT_LOCK_WAIT_SECONDS = 5.0
LOCK_POLL_SECONDS = 0.1


class StateLock:
    """An exclusive ``flock`` on ``DIR/lock`` for the whole of one command.

    The holder writes who it is (pid, command, and for ``cluster serve`` its listener) into
    the file, and empties it on release, so a read-only command leaves the directory's bytes
    as they were. The kernel drops the lock when the holder dies, even by ``kill -9``: a stale
    file never blocks anyone. A second command waits up to ``KRAFTSMAN_LOCK_WAIT`` seconds
    (default 5), then gives up with exit 2; a running server is not waited for.
    """

    def __init__(self, root: Path, command: str, *, create: bool,
                 wait_seconds: float | None = None) -> None:
        self.root = root
        self.command = command
        self.create = create
        self.wait_seconds = wait_seconds if wait_seconds is not None else _lock_wait()
        self._fd: int | None = None

    def __enter__(self) -> StateLock:
        if not self.root.is_dir():
            if not self.create:
                return self  # nothing there to protect; the command reports what is missing
            self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(fd)
                if "listen" in holder or time.monotonic() >= deadline:
                    os.close(fd)
                    raise StateBusy(_busy_message(self.root, holder),
                                    _holder_text(self.root, holder)) from None
                time.sleep(LOCK_POLL_SECONDS)
        self._fd = fd
        self.announce()
        return self

    def announce(self, **extra: Any) -> None:
        """Say who holds the lock (``cluster serve`` adds ``listen=HOST:PORT`` once bound)."""
        if self._fd is None:
            return
        doc = orjson.dumps({"pid": os.getpid(), "command": self.command, **extra})
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, doc, 0)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _lock_wait() -> float:
    text = os.environ.get(LOCK_WAIT_ENV, "")
    try:
        return max(0.0, float(text)) if text else DEFAULT_LOCK_WAIT_SECONDS
    except ValueError:
        raise UsageError(f"{LOCK_WAIT_ENV}={text!r}: expected a number of seconds") from None


def _holder(fd: int) -> dict[str, Any]:
    try:
        doc = orjson.loads(os.pread(fd, 4096, 0) or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


class StateBusy(UsageError):
    """The directory is held by another process; ``holder`` says who, without advice."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def _holder_text(root: Path, holder: dict[str, Any]) -> str:
    pid = holder.get("pid", "?")
    what = holder.get("command", "kraftsman")
    return f"another kraftsman (pid {pid}) is using {root}: `{what}`"


def _busy_message(root: Path, holder: dict[str, Any]) -> str:
    msg = _holder_text(root, holder)
    if "listen" in holder:
        return (msg + f" serves this cluster on {holder['listen']}; stop it first, or reach the "
                "cluster through that listener with a Kafka client")
    return msg + f"; wait for it to finish (or raise {LOCK_WAIT_ENV}, in seconds) and retry"


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    # -- clusters -------------------------------------------------------------------------------
    def cluster_dir(self, name: str) -> Path:
        return self.root / "clusters" / name

    def cluster_names(self) -> list[str]:
        base = self.root / "clusters"
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / "spec.json").exists())

    def saved_cluster_spec(self, name: str) -> EmbeddedClusterSpec | None:
        path = self.cluster_dir(name) / "spec.json"
        if not path.exists():
            return None
        return EmbeddedClusterSpec.model_validate_json(path.read_bytes())

    def save_cluster_spec(self, name: str, spec: EmbeddedClusterSpec) -> None:
        d = self.cluster_dir(name)
        d.mkdir(parents=True, exist_ok=True)
        write_atomically(d / "spec.json", spec.model_dump_json(by_alias=True).encode())

    def open_cluster(self, name: str, spec: EmbeddedClusterSpec | None = None, *,
                     read_only: bool = False) -> EmbeddedCluster:
        """Open a cluster; ``read_only``: as it stands, for views (nothing starts or changes)."""
        spec = spec or self.saved_cluster_spec(name)
        if spec is None:
            known = ", ".join(self.cluster_names()) or "none"
            raise UsageError(
                f"cluster {name!r} not found in {self.root} (known: {known}); "
                "apply a KafkaCluster first or pass --state-dir")
        try:
            if read_only:
                return EmbeddedCluster.open_read_only(self.cluster_dir(name), spec)
            cluster = EmbeddedCluster.open(self.cluster_dir(name), spec)
        except CorruptFileError as e:
            raise UsageError(f"cluster {name!r}: {e}") from None
        self.save_cluster_spec(name, spec)
        return cluster

    def pick_cluster(self, name: str | None) -> str:
        if name:
            return name
        names = self.cluster_names()
        if len(names) == 1:
            return names[0]
        if not names:
            raise UsageError(f"no cluster in {self.root}; run `kraftsman apply -f cluster.yaml` "
                             "first or pass --state-dir")
        raise UsageError(f"several clusters in {self.root} ({', '.join(names)}); pick one with "
                         "--cluster NAME")

    # -- other resources --------------------------------------------------------------------------
    def _resource_path(self, kind: str, name: str) -> Path:
        return self.root / "resources" / kind / f"{name}.json"

    def load(self, kind: str, name: str) -> dict[str, Any] | None:
        path = self._resource_path(kind, name)
        if not path.exists():
            return None
        doc: dict[str, Any] = orjson.loads(path.read_bytes())
        return doc

    def save(self, kind: str, name: str, doc: dict[str, Any]) -> None:
        path = self._resource_path(kind, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))

    def names(self, kind: str) -> list[str]:
        d = self.root / "resources" / kind
        return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []
