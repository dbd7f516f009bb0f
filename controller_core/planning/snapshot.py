"""Reading, writing and validating cluster snapshots (the schema is in :mod:`.schema`).

Validation is plain Python over columns so that every problem can be named precisely:
the file, the row, the partition and the field, and what to do about it. (A table whose
rows are all sound is recognised column by column in numpy first; any doubt, and every
table with a problem, goes to the per-row loop that names it.)
"""

from __future__ import annotations

import importlib
import itertools
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
    LOG_DIR_COLUMNS,
    LOG_DIRS_FILE,
    MANIFEST_FILE,
    OPTIONAL_PARTITION_COLUMNS,
    PARTITION_COLUMNS,
    PARTITION_LOG_DIRS,
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


@dataclass(frozen=True, slots=True)
class LogDir:
    """One log directory of a broker (JBOD), a row of ``log_dirs.parquet``."""

    broker: int
    log_dir: str
    capacity_bytes: int


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
    # per row, the log directory of each replica (aligned with ``replicas``); None: the
    # snapshot has no log-dir information
    log_dirs: list[list[str]] | None = None

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
        cols = {c.name: getattr(self, c.name) for c in PARTITION_COLUMNS}
        if self.log_dirs is not None:
            cols[PARTITION_LOG_DIRS.name] = self.log_dirs
        return cols


@dataclass(slots=True)
class Snapshot:
    brokers: list[Broker]
    partitions: PartitionTable
    cluster_name: str = "kafka"
    created_at: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # the brokers' log directories (JBOD); None: one anonymous directory per broker
    log_dirs: list[LogDir] | None = None

    def broker_ids(self) -> list[int]:
        return [b.id for b in self.brokers]

    def dirs_of(self) -> dict[int, list[LogDir]]:
        """Each broker's log directories in file order (empty: no log-dir information)."""
        out: dict[int, list[LogDir]] = {}
        for d in self.log_dirs or ():
            out.setdefault(d.broker, []).append(d)
        return out


def _pa() -> Any:
    return importlib.import_module("pyarrow")


def _pc() -> Any:
    return importlib.import_module("pyarrow.compute")


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
            "string_list": t.startswith(("list<", "large_list<")) and "string" in t,
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
    if _every_row_sound(table, broker_ids):
        return problems
    seen: set[tuple[str, int]] = set()
    for row, (topic, p, replicas, leader, size, rate_in, rate_out) in enumerate(zip(
            table.topic, table.partition, table.replicas, table.leader, table.size_bytes,
            table.bytes_in_per_second, table.bytes_out_per_second, strict=True)):
        key = (topic, p)
        duplicate = key in seen
        seen.add(key)
        brokers = set(replicas)
        # a good row in one test (10^6 rows: the messages' text only for rows that fail)
        if topic and p >= 0 and not duplicate and replicas and \
                len(brokers) == len(replicas) and brokers <= broker_ids and \
                leader in brokers and size >= 0 and rate_in >= 0 and rate_out >= 0:
            continue
        where = f"{file}: row {row} ({topic}-{p})"
        if not topic:
            problems.append(f"{file}: row {row}: field 'topic' is empty")
        if p < 0:
            problems.append(f"{where}: field 'partition' is negative")
        if duplicate:
            problems.append(f"{where}: duplicate partition; each (topic, partition) once")
        if not replicas:
            problems.append(f"{where}: field 'replicas' is empty")
        elif len(brokers) != len(replicas):
            problems.append(f"{where}: field 'replicas' {replicas} repeats a broker")
        unknown = sorted({r for r in replicas if r not in broker_ids})
        if unknown:
            problems.append(
                f"{where}: field 'replicas' names unknown broker(s) {unknown}; "
                f"add them to {BROKERS_FILE} or fix the row")
        if leader not in replicas:
            problems.append(
                f"{where}: field 'leader' {leader} is not among replicas {replicas}")
        if size < 0:
            problems.append(f"{where}: field 'size_bytes' is negative")
        if not rate_in >= 0:
            problems.append(f"{where}: field 'bytes_in_per_second' must be >= 0")
        if not rate_out >= 0:
            problems.append(f"{where}: field 'bytes_out_per_second' must be >= 0")
    return problems


def _every_row_sound(table: PartitionTable, broker_ids: set[int]) -> bool:
    """Whether every row passes :func:`validate_partitions`' test of a good row, column by
    column in numpy: the loop took ~2 s at 10^6 rows. False (also for any value that is not
    a plain integer or float) leaves the rows to the loop, which names each problem."""
    np = importlib.import_module("numpy")
    n = len(table.topic)
    columns = (table.partition, table.replicas, table.leader, table.size_bytes,
               table.bytes_in_per_second, table.bytes_out_per_second)
    if any(len(c) != n for c in columns):
        return False  # (the loop's zip refuses columns of different lengths)
    if n == 0 or not broker_ids or not all(table.topic):
        return n == 0
    try:
        lengths = np.fromiter(map(len, table.replicas), dtype=np.int64, count=n)
        flat = np.array(list(itertools.chain.from_iterable(table.replicas)))
        cols = [np.array(c) for c in (table.partition, table.leader, table.size_bytes)]
        rates = [np.array(c) for c in (table.bytes_in_per_second, table.bytes_out_per_second)]
    except (TypeError, ValueError, OverflowError):
        return False
    if int(lengths.min()) < 1 or any(c.ndim != 1 for c in (flat, *cols, *rates)) or \
            any(c.dtype.kind != "i" for c in (flat, *cols)) or \
            any(r.dtype.kind not in "if" for r in rates):
        return False
    part, leader, size = cols
    if not ((part >= 0).all() and (size >= 0).all() and all((r >= 0).all() for r in rates)):
        return False  # (a NaN rate is not >= 0 either)
    # every replica and leader a known broker: its index among them by a table over the ids
    known = sorted(broker_ids)
    if known[0] < 0 or known[-1] > 4 * len(flat) + 65536:
        return False
    index = np.full(known[-1] + 2, -1, dtype=np.int64)  # the last: any id outside
    index[known] = np.arange(len(known))
    slot = index[np.where((flat >= 0) & (flat <= known[-1]), flat, -1)]
    lead = index[np.where((leader >= 0) & (leader <= known[-1]), leader, -1)]
    if (slot < 0).any() or (lead < 0).any():
        return False
    # rows of slots, padded with -1, -2, ... (never equal to a slot nor to each other); a
    # row far longer than the others would make the matrix huge: the loop takes those
    width = int(lengths.max())
    if n * width > 4 * len(flat) + 65536:
        return False
    rows = np.full((n, width), -1, dtype=np.int64) - np.arange(width)
    at = np.repeat(np.arange(n), lengths)
    rows[at, np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = slot
    if not (rows == lead[:, None]).any(axis=1).all():
        return False  # a leader not among its replicas
    ordered = np.sort(rows, axis=1)
    if (ordered[:, 1:] == ordered[:, :-1]).any():
        return False  # a broker repeated in a row
    # (topic, partition) unique: topics numbered in order of appearance
    number: dict[str, int] = {}
    code = np.fromiter((number.setdefault(t, len(number)) for t in table.topic),
                       dtype=np.int64, count=n)
    span = int(part.max()) + 1
    if span > (2**62) // len(number):
        return len(set(zip(table.topic, table.partition, strict=True))) == n
    key = np.sort(code * span + part)
    return not (key[1:] == key[:-1]).any()


def validate_log_dirs(snapshot: Snapshot) -> list[str]:
    """The optional log-dir information: both parts or neither, every broker's directories
    adding up to its capacity, every replica in one of its broker's directories."""
    dirs, table = snapshot.log_dirs, snapshot.partitions
    col = f"{PARTITIONS_FILE}: column '{PARTITION_LOG_DIRS.name}'"
    if dirs is None and table.log_dirs is None:
        return []
    if dirs is None:
        return [f"{col} is present but {LOG_DIRS_FILE} is missing; add {LOG_DIRS_FILE} "
                "(broker, log_dir, capacity_bytes: each broker's log directories) or drop the "
                "column"]
    if table.log_dirs is None:
        return [f"{LOG_DIRS_FILE}: present but {PARTITIONS_FILE} has no column "
                f"'{PARTITION_LOG_DIRS.name}' (the log directory of each replica, aligned with "
                f"replicas); add the column or remove {LOG_DIRS_FILE}"]
    problems: list[str] = []
    brokers = {b.id: b for b in snapshot.brokers}
    seen: set[tuple[int, str]] = set()
    for row, d in enumerate(dirs):
        where = f"{LOG_DIRS_FILE}: row {row} (broker {d.broker}, {d.log_dir!r})"
        if d.broker not in brokers:
            problems.append(f"{where}: field 'broker' {d.broker} is not in {BROKERS_FILE}; "
                            "add the broker or remove the row")
        if not d.log_dir or d.log_dir == "any" or "," in d.log_dir:
            problems.append(f"{where}: field 'log_dir' must be the directory's path (not "
                            "empty, not 'any', no ','), as in the broker's log.dirs")
        if (d.broker, d.log_dir) in seen:
            problems.append(f"{where}: repeats broker {d.broker}'s directory {d.log_dir!r}; "
                            "list each directory once")
        seen.add((d.broker, d.log_dir))
        if d.capacity_bytes <= 0:
            problems.append(f"{where}: field 'capacity_bytes' must be > 0")
    of = snapshot.dirs_of()
    for b in snapshot.brokers:
        mine = of.get(b.id, [])
        if not mine:
            problems.append(f"{LOG_DIRS_FILE}: broker {b.id} has no log directory; add a row "
                            f"for each of its log.dirs")
            continue
        total = sum(d.capacity_bytes for d in mine)
        if total != b.disk_capacity_bytes:
            problems.append(
                f"{BROKERS_FILE}: broker {b.id}: field 'disk_capacity_bytes' is "
                f"{b.disk_capacity_bytes} but its log directories in {LOG_DIRS_FILE} hold "
                f"{total} bytes; set disk_capacity_bytes to the sum of its directories' "
                "capacity_bytes")
    if len(table.log_dirs) != len(table):
        return [*problems, f"{col} has {len(table.log_dirs)} rows for {len(table)} partitions"]
    names = {b: {d.log_dir for d in ds} for b, ds in of.items()}
    for row, (replicas, ldirs) in enumerate(zip(table.replicas, table.log_dirs, strict=True)):
        where = f"{col}: row {row} ({table.topic[row]}-{table.partition[row]})"
        if len(ldirs) != len(replicas):
            n = f"{len(ldirs)} log director{'y' if len(ldirs) == 1 else 'ies'}"
            problems.append(f"{where}: {n} {ldirs} for {len(replicas)} replicas {replicas}; "
                            "give one log directory per replica, in the order of replicas")
            continue
        for broker, ldir in zip(replicas, ldirs, strict=True):
            if broker in names and ldir not in names[broker]:
                problems.append(f"{where}: replica on broker {broker} is in {ldir!r}, not one "
                                f"of broker {broker}'s directories {sorted(names[broker])} in "
                                f"{LOG_DIRS_FILE}; fix the row or add the directory")
    return problems


def validate(snapshot: Snapshot) -> None:
    """Raise :class:`SnapshotError` listing (the first) problems; return if sound."""
    problems = validate_brokers(snapshot.brokers)
    problems += validate_partitions(snapshot.partitions, set(snapshot.broker_ids()))
    if not problems:
        problems += validate_log_dirs(snapshot)
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


def _read_table(path: Path, columns: tuple[Column, ...], optional: tuple[Column, ...] = ()
                ) -> tuple[dict[str, list[Any]], list[str]]:
    """The columns of a Parquet file (``optional`` ones only when the file has them)."""
    if not path.exists():
        return {}, [f"{path}: missing; the snapshot has no {path.name}"]
    try:
        table = _pq().read_table(str(path))
    except Exception as e:  # pyarrow raises several types for unreadable files
        return {}, [f"{path}: not a readable Parquet file ({e})"]
    present = {f.name: str(f.type) for f in table.schema}
    problems: list[str] = []
    columns = (*columns, *(c for c in optional if c.name in present))
    _check_columns(path.name, present, columns, problems)
    if problems:
        return {}, problems
    data: dict[str, list[Any]] = {}
    for col in columns:
        column = table.column(col.name)
        values = column.to_pylist()
        # Arrow counts the nulls (a scan of the Python values took ~2 s at 10^6 rows); the
        # row is looked for only when there is one
        null_items = col.kind in ("int_list", "string_list") and \
            _pc().list_flatten(column).null_count > 0
        if not col.nullable and column.null_count:
            row = next(i for i, v in enumerate(values) if v is None)
            problems.append(f"{path.name}: row {row}: field '{col.name}' is null; it is required")
        if col.kind == "int_list" and null_items:
            row = next(i for i, v in enumerate(values) if v is not None and None in v)
            problems.append(f"{path.name}: row {row}: field '{col.name}' holds a null broker id")
        if col.kind == "string_list" and null_items:
            row = next(i for i, v in enumerate(values) if v is not None and None in v)
            problems.append(f"{path.name}: row {row}: field '{col.name}' holds a null; name "
                            "every replica's directory")
        data[col.name] = values
    return data, problems


def read_snapshot(directory: Path) -> Snapshot:
    """Read and validate a snapshot directory; raise :class:`SnapshotError` on any problem."""
    manifest = read_manifest(directory)
    bdata, problems = _read_table(directory / BROKERS_FILE, BROKER_COLUMNS)
    pdata, pproblems = _read_table(directory / PARTITIONS_FILE, PARTITION_COLUMNS,
                                   OPTIONAL_PARTITION_COLUMNS)
    problems += pproblems
    ddata: dict[str, list[Any]] | None = None
    if (directory / LOG_DIRS_FILE).exists():
        ddata, dproblems = _read_table(directory / LOG_DIRS_FILE, LOG_DIR_COLUMNS)
        problems += dproblems
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
        log_dirs=pdata.get(PARTITION_LOG_DIRS.name),
    )
    log_dirs = None if ddata is None else [
        LogDir(int(b), str(d), int(c)) for b, d, c in zip(
            ddata["broker"], ddata["log_dir"], ddata["capacity_bytes"], strict=True)]
    snapshot = Snapshot(brokers, table, str(manifest.get("clusterName") or "kafka"),
                        str(manifest.get("createdAt") or ""),
                        {k: v for k, v in manifest.items()
                         if k not in ("schemaVersion", "clusterName", "createdAt")},
                        log_dirs)
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
        pcols = PARTITION_COLUMNS if snapshot.partitions.log_dirs is None else \
            (*PARTITION_COLUMNS, PARTITION_LOG_DIRS)
        pq.write_table(pa.table(snapshot.partitions.columns(), schema=arrow_schema(pcols)),
                       str(tmp / PARTITIONS_FILE))
        if snapshot.log_dirs is not None:
            ldirs = {c.name: [getattr(d, c.name) for d in snapshot.log_dirs]
                     for c in LOG_DIR_COLUMNS}
            pq.write_table(pa.table(ldirs, schema=arrow_schema(LOG_DIR_COLUMNS)),
                           str(tmp / LOG_DIRS_FILE))
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
