"""The CLI's local state directory (default ``.kraftsman/``), standing in for the API server.

Layout::

    clusters/<name>/spec.json          the applied KafkaCluster spec
    clusters/<name>/metadata/...       the embedded cluster's metadata log and snapshots
    clusters/<name>/dataplane.json     its data plane checkpoint
    resources/<Kind>/<name>.json       applied spec + status of every other resource

Every write is atomic, so an interrupted command leaves the previous or the new state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.storage.framing import CorruptFileError, write_atomically
from kraftsman.cli_errors import UsageError

DEFAULT_STATE_DIR = Path(".kraftsman")


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

    def open_cluster(self, name: str, spec: EmbeddedClusterSpec | None = None) -> EmbeddedCluster:
        spec = spec or self.saved_cluster_spec(name)
        if spec is None:
            known = ", ".join(self.cluster_names()) or "none"
            raise UsageError(
                f"cluster {name!r} not found in {self.root} (known: {known}); "
                "apply a KafkaCluster first or pass --state-dir")
        try:
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
