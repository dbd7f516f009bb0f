"""The cluster snapshot: a versioned Parquet schema defined in one place.

A snapshot is a directory with three entries, and an optional fourth::

    snapshot.json        {"schemaVersion": 1, "clusterName": ..., "createdAt": ...}
    brokers.parquet      one row per broker
    partitions.parquet   one row per partition (a file, or a directory of Parquet parts)
    log_dirs.parquet     optional (JBOD): one row per log directory of a broker

Log directories are optional, as a pair: ``log_dirs.parquet`` lists each broker's log
directories with their capacity, and the partitions' optional column ``log_dirs`` names, for
each replica, the directory it lives in (aligned with ``replicas``). Either both are there or
neither: a snapshot without them is read as one anonymous directory per broker holding the
broker's ``disk_capacity_bytes`` (plans then write ``"any"`` for every replica, as before).
With them, a broker's ``disk_capacity_bytes`` is the sum of its directories' capacities.

The column lists below are the contract: the exporter writes them, the validator checks
them, the Spark job reads them. Adding a column is allowed within a version; renaming or
removing one needs a new ``SCHEMA_VERSION``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SCHEMA_VERSION = 1
MANIFEST_FILE = "snapshot.json"
BROKERS_FILE = "brokers.parquet"
PARTITIONS_FILE = "partitions.parquet"
LOG_DIRS_FILE = "log_dirs.parquet"

Kind = Literal["int", "float", "string", "int_list", "string_list"]


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    kind: Kind
    nullable: bool
    description: str


BROKER_COLUMNS: tuple[Column, ...] = (
    Column("id", "int", False, "broker id (node.id)"),
    Column("rack", "string", True, "broker.rack; null when the broker has none"),
    Column("disk_capacity_bytes", "int", False, "usable log-dir capacity, bytes"),
    Column("network_in_capacity_bytes_per_second", "float", False, "inbound bandwidth"),
    Column("network_out_capacity_bytes_per_second", "float", False, "outbound bandwidth"),
)

PARTITION_COLUMNS: tuple[Column, ...] = (
    Column("topic", "string", False, "topic name"),
    Column("partition", "int", False, "partition index"),
    Column("replicas", "int_list", False, "replica broker ids, preferred leader first"),
    Column("leader", "int", False, "current leader broker id (one of replicas)"),
    Column("size_bytes", "int", False, "size of one replica's log, bytes"),
    Column("bytes_in_per_second", "float", False, "producer rate into the partition"),
    Column("bytes_out_per_second", "float", False, "consumer rate out of the leader"),
)

# optional in partitions.parquet (with log_dirs.parquet; see the module's docstring)
PARTITION_LOG_DIRS = Column(
    "log_dirs", "string_list", False,
    "the log directory of each replica, aligned with replicas (one of that broker's "
    "directories in log_dirs.parquet)")
OPTIONAL_PARTITION_COLUMNS: tuple[Column, ...] = (PARTITION_LOG_DIRS,)

LOG_DIR_COLUMNS: tuple[Column, ...] = (
    Column("broker", "int", False, "broker id (one of brokers.parquet)"),
    Column("log_dir", "string", False, "the directory's path as the broker names it (log.dirs)"),
    Column("capacity_bytes", "int", False, "the directory's usable capacity, bytes"),
)


def arrow_schema(columns: tuple[Column, ...]) -> object:
    """The pyarrow schema of a column list (pyarrow is imported here, not at module load)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    types = {
        "int": pa.int64(),
        "float": pa.float64(),
        "string": pa.string(),
        "int_list": pa.list_(pa.int32()),
        "string_list": pa.list_(pa.string()),
    }
    return pa.schema([pa.field(c.name, types[c.kind], nullable=c.nullable) for c in columns])
