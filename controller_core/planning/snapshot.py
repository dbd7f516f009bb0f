"""Reading, writing and validating cluster snapshots (the schema is in :mod:`.schema`).

Validation is plain Python over columns so that every problem can be named precisely:
the file, the row, the partition and the field, and what to do about it.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller_core.planning.schema import (
    BROKER_COLUMNS,
    BROKERS_FILE,
    MANIFEST_FILE,
    PARTITION_COLUMNS,
    PARTITIONS_FILE,
    SCHEMA_VERSION,
    Column,
    arrow_schema,
)

MAX_REPORTED_PROBLEMS = 20


class SnapshotError(Exception):
    """A snapshot that cannot be planned on; ``problems`` are one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True, slots=True)
class Broker:
    id: int
    rack: str | None
    disk_capacity_bytes: int
    network_in_capacity_bytes_per_second: float
    network_out_capacity_bytes_per_second: float


@dataclass(slots=True)
class PartitionTable:
    """Partitions column by column (a million rows stay cheap)."""

    topic: list[str] = field(default_factory=list)
    partition: list[int] = field(default_factory=list)
    replicas: list[list[int]] = field(default_factory=list)
    leader: list[int] = field(default_factory=list)
    size_bytes: list[int] = field(default_factory=list)
    bytes_in_per_second: list[float] = field(default_factory=list)
    bytes_out_per_second: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.topic)

    def append(self, topic: str, partition: int, replicas: list[int], leader: int,
               size_bytes: int, bytes_in: float, bytes_out: float) -> None:
        self.topic.append(topic)
        self.partition.append(partition)
        self.replicas.append(replicas)
        self.leader.append(leader)
        self.size_bytes.append(size_bytes)
        self.bytes_in_per_second.append(bytes_in)
        self.bytes_out_per_second.append(bytes_out)

    def columns(self) -> dict[str, list[Any]]:
        return {c.name: getattr(self, c.name) for c in PARTITION_COLUMNS}


@dataclass(slots=True)
class Snapshot:
    brokers: list[Broker]
    partitions: PartitionTable
    cluster_name: str = "kafka"
    created_at: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def broker_ids(self) -> list[int]:
        return [b.id for b in self.brokers]


def _pa() -> Any:
    return importlib.import_module("pyarrow")


def _pq() -> Any:
    return importlib.import_module("pyarrow.parquet")


# ---------------------------------------------------------------------------------------
# validation


def _check_columns(file: str, present: dict[str, str], columns: tuple[Column, ...],
                   problems: list[str]) -> None:
    """``present`` maps column name -> arrow type string."""
    for col in columns:
        if col.name not in present:
            problems.append(
                f"{file}: missing column '{col.name}' ({col.kind}: {col.description}); "
                f"add it (snapshot schema version {SCHEMA_VERSION})")
            continue
        t = present[col.name]
        ok = {
            "int": t.startswith(("int", "uint")),
            "float": t.startswith(("int", "uint", "float", "double", "decimal")),
            "string": t in ("string", "large_string"),
            "int_list": t.startswith(("list<", "large_list<")) and "int" in t,
        }[col.kind]
        if not ok:
            problems.append(f"{file}: column '{col.name}' has type {t}; expected {col.kind}")


def validate_brokers(brokers: Sequence[Broker], file: str = BROKERS_FILE) -> list[str]:
    problems: list[str] = []
    if not brokers:
        problems.append(f"{file}: no brokers; a snapshot needs at least one broker row")
    seen: set[int] = set()
    for row, b in enumerate(brokers):
        where = f"{file}: row {row} (broker {b.id})"
        if b.id < 0:
            problems.append(f"{where}: field 'id' is negative; broker ids are >= 0")
        if b.id in seen:
            problems.append(f"{where}: field 'id' repeats broker {b.id}; ids must be unique")
        seen.add(b.id)
        if b.disk_capacity_bytes <= 0:
            problems.append(f"{where}: field 'disk_capacity_bytes' must be > 0")
        if b.network_in_capacity_bytes_per_second <= 0:
            problems.append(f"{where}: field 'network_in_capacity_bytes_per_second' must be > 0")
        if b.network_out_capacity_bytes_per_second <= 0:
            problems.append(f"{where}: field 'network_out_capacity_bytes_per_second' must be > 0")
        if b.rack is not None and not b.rack:
            problems.append(f"{where}: field 'rack' is empty; use null for no rack")
    racked = sum(1 for b in brokers if b.rack is not None)
    if 0 < racked < len(brokers):
        missing = sorted(b.id for b in brokers if b.rack is None)
        problems.append(
            f"{file}: field 'rack' is set on some brokers but null on {missing}; "
            "give every broker a rack or none (as Kafka's rack-aware assignment requires)")
    return problems


def validate_partitions(table: PartitionTable, broker_ids: set[int],
                        file: str = PARTITIONS_FILE) -> list[str]:
    """Every row is checked; the caller caps how many problems it shows."""
    problems: list[str] = []
    seen: set[tuple[str, int]] = set()
    for row in range(len(table)):
        topic = table.topic[row]
        p = table.partition[row]
        replicas = table.replicas[row]
        where = f"{file}: row {row} ({topic}-{p})"
        if not topic:
            problems.append(f"{file}: row {row}: field 'topic' is empty")
        if p < 0:
            problems.append(f"{where}: field 'partition' is negative")
        key = (topic, p)
        if key in seen:
            problems.append(f"{where}: duplicate partition; each (topic, partition) once")
        seen.add(key)
        if not replicas:
            problems.append(f"{where}: field 'replicas' is empty")
        elif len(set(replicas)) != len(replicas):
            problems.append(f"{where}: field 'replicas' {replicas} repeats a broker")
        unknown = sorted({r for r in replicas if r not in broker_ids})
        if unknown:
            problems.append(
                f"{where}: field 'replicas' names unknown broker(s) {unknown}; "
                f"add them to {BROKERS_FILE} or fix the row")
        if table.leader[row] not in replicas:
            problems.append(
                f"{where}: field 'leader' {table.leader[row]} is not among replicas {replicas}")
        if table.size_bytes[row] < 0:
            problems.append(f"{where}: field 'size_bytes' is negative")
        if not table.bytes_in_per_second[row] >= 0:
            problems.append(f"{where}: field 'bytes_in_per_second' must be >= 0")
        if not table.bytes_out_per_second[row] >= 0:
            problems.append(f"{where}: field 'bytes_out_per_second' must be >= 0")
    if len(table) == 0:
        problems.append(f"{file}: no partitions; nothing to plan")
    return problems


def validate(snapshot: Snapshot) -> None:
    """Raise :class:`SnapshotError` listing (the first) problems; return if sound."""
    problems = validate_brokers(snapshot.brokers)
    problems += validate_partitions(snapshot.partitions, set(snapshot.broker_ids()))
    if problems:
        raise SnapshotError(_capped(problems))


def _capped(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_REPORTED_PROBLEMS:
        return problems
    rest = len(problems) - MAX_REPORTED_PROBLEMS
    return [*problems[:MAX_REPORTED_PROBLEMS], f"... and {rest} more problem(s) like these"]


# ---------------------------------------------------------------------------------------
# reading


def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST_FILE
    if not directory.is_dir():
        raise SnapshotError([f"{directory}: no such snapshot directory; "
                             "make one with `kraftsman snapshot --out DIR`"])
    if not path.is_file():
        raise SnapshotError([f"{path}: missing; a snapshot directory holds {MANIFEST_FILE} "
                             f'(e.g. {{"schemaVersion": {SCHEMA_VERSION}}}), {BROKERS_FILE} '
                             f"and {PARTITIONS_FILE}"])
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SnapshotError([f"{path}: not valid JSON ({e})"]) from e
    if not isinstance(manifest, dict):
        raise SnapshotError([f"{path}: must be a JSON object"])
    version = manifest.get("schemaVersion")
    if version != SCHEMA_VERSION:
        raise SnapshotError([f"{path}: field 'schemaVersion' is {version!r}; this kraftsman "
                             f"reads version {SCHEMA_VERSION} — re-export the snapshot"])
    return manifest


def _read_table(path: Path, columns: tuple[Column, ...]) -> tuple[dict[str, list[Any]], list[str]]:
    if not path.exists():
        return {}, [f"{path}: missing; the snapshot has no {path.name}"]
    try:
        table = _pq().read_table(str(path))
    except Exception as e:  # pyarrow raises several types for unreadable files
        return {}, [f"{path}: not a readable Parquet file ({e})"]
    present = {f.name: str(f.type) for f in table.schema}
    problems: list[str] = []
    _check_columns(path.name, present, columns, problems)
    if problems:
        return {}, problems
    data: dict[str, list[Any]] = {}
    for col in columns:
        values = table.column(col.name).to_pylist()
        if not col.nullable and any(v is None for v in values):
            row = next(i for i, v in enumerate(values) if v is None)
            problems.append(f"{path.name}: row {row}: field '{col.name}' is null; it is required")
        if col.kind == "int_list" and any(v is not None and None in v for v in values):
            row = next(i for i, v in enumerate(values) if v is not None and None in v)
            problems.append(f"{path.name}: row {row}: field '{col.name}' holds a null broker id")
        data[col.name] = values
    return data, problems


def read_snapshot(directory: Path) -> Snapshot:
    """Read and validate a snapshot directory; raise :class:`SnapshotError` on any problem."""
    manifest = read_manifest(directory)
    bdata, problems = _read_table(directory / BROKERS_FILE, BROKER_COLUMNS)
    pdata, pproblems = _read_table(directory / PARTITIONS_FILE, PARTITION_COLUMNS)
    problems += pproblems
    if problems:
        raise SnapshotError(_capped(problems))
    brokers = [
        Broker(int(i), r, int(d), float(ni), float(no))
        for i, r, d, ni, no in zip(
            bdata["id"], bdata["rack"], bdata["disk_capacity_bytes"],
            bdata["network_in_capacity_bytes_per_second"],
            bdata["network_out_capacity_bytes_per_second"], strict=True)
    ]
    table = PartitionTable(
        topic=pdata["topic"], partition=pdata["partition"], replicas=pdata["replicas"],
        leader=pdata["leader"], size_bytes=pdata["size_bytes"],
        bytes_in_per_second=[float(x) for x in pdata["bytes_in_per_second"]],
        bytes_out_per_second=[float(x) for x in pdata["bytes_out_per_second"]],
    )
    snapshot = Snapshot(brokers, table, str(manifest.get("clusterName") or "kafka"),
                        str(manifest.get("createdAt") or ""),
                        {k: v for k, v in manifest.items()
                         if k not in ("schemaVersion", "clusterName", "createdAt")})
    validate(snapshot)
    return snapshot


# ---------------------------------------------------------------------------------------
# writing


def write_snapshot(snapshot: Snapshot, directory: Path, *, overwrite: bool = False) -> None:
    """Write atomically: a temporary sibling directory renamed into place when complete."""
    validate(snapshot)
    pa, pq = _pa(), _pq()
    directory = directory.resolve()
    if directory.exists() and any(directory.iterdir()) and not overwrite:
        raise SnapshotError([f"{directory}: exists and is not empty; choose another --out "
                             "or remove it"])
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        brokers = {c.name: [getattr(b, c.name) for b in snapshot.brokers] for c in BROKER_COLUMNS}
        pq.write_table(pa.table(brokers, schema=arrow_schema(BROKER_COLUMNS)),
                       str(tmp / BROKERS_FILE))
        pq.write_table(pa.table(snapshot.partitions.columns(),
                                schema=arrow_schema(PARTITION_COLUMNS)),
                       str(tmp / PARTITIONS_FILE))
        manifest = {"schemaVersion": SCHEMA_VERSION, "clusterName": snapshot.cluster_name,
                    "createdAt": snapshot.created_at, **snapshot.extra}
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
        _replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace_dir(tmp: Path, target: Path) -> None:
    """Move a finished directory into place; an old one is moved aside first, then removed."""
    old: Path | None = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


replace_dir = _replace_dir
