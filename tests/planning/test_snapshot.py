"""Snapshot schema and validation: every bad input is named by file, row and field."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from controller_core.planning.schema import (
    BROKERS_FILE,
    MANIFEST_FILE,
    PARTITIONS_FILE,
    SCHEMA_VERSION,
)
from controller_core.planning.snapshot import (
    Broker,
    PartitionTable,
    Snapshot,
    SnapshotError,
    read_snapshot,
    validate,
    write_snapshot,
)
from controller_core.planning.synthetic import make_snapshot


def small() -> Snapshot:
    t = PartitionTable()
    t.append("orders", 0, [0, 1], 0, 100, 1.0, 2.0)
    t.append("orders", 1, [1, 2], 2, 200, 1.5, 0.0)
    brokers = [Broker(i, f"r{i}", 10_000, 1e6, 1e6) for i in range(3)]
    return Snapshot(brokers, t, "demo", "2026-01-01T00:00:00Z")


def problems_of(snapshot: Snapshot) -> list[str]:
    with pytest.raises(SnapshotError) as e:
        validate(snapshot)
    return e.value.problems


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    snap = make_snapshot(brokers=4, partitions=20, racks=2, replication_factor=2, seed=3)
    write_snapshot(snap, tmp_path / "s")
    back = read_snapshot(tmp_path / "s")
    assert back.brokers == snap.brokers
    assert back.partitions.columns() == snap.partitions.columns()
    assert back.cluster_name == "demo"
    manifest = json.loads((tmp_path / "s" / MANIFEST_FILE).read_text())
    assert manifest["schemaVersion"] == SCHEMA_VERSION


def test_inconsistent_partitions_are_named_by_row_and_field() -> None:
    snap = small()
    snap.partitions.append("orders", 1, [0, 7], 5, -1, 1.0, 1.0)
    snap.partitions.append("orders", 3, [1, 1], 1, 5, 1.0, 1.0)
    p = problems_of(snap)
    text = "\n".join(p)
    assert "row 2 (orders-1): duplicate partition" in text
    assert "row 2 (orders-1): field 'replicas' names unknown broker(s) [7]" in text
    assert "row 2 (orders-1): field 'leader' 5 is not among replicas [0, 7]" in text
    assert "row 2 (orders-1): field 'size_bytes' is negative" in text
    assert "row 3 (orders-3): field 'replicas' [1, 1] repeats a broker" in text
    assert all(line.startswith("partitions.parquet") for line in p)


def test_broker_problems() -> None:
    snap = small()
    snap.brokers = [Broker(0, "r0", 0, 1.0, 1.0), Broker(0, None, 5, 1.0, -1.0),
                    Broker(2, "r2", 5, 1.0, 1.0)]
    text = "\n".join(problems_of(snap))
    assert "brokers.parquet: row 0 (broker 0): field 'disk_capacity_bytes' must be > 0" in text
    assert "field 'id' repeats broker 0" in text
    assert "field 'network_out_capacity_bytes_per_second' must be > 0" in text
    assert "field 'rack' is set on some brokers but null on [0]" in text


def test_many_problems_are_capped() -> None:
    snap = small()
    for i in range(40):
        snap.partitions.append("t", i, [9], 9, 1, 0.0, 0.0)
    p = problems_of(snap)
    assert len(p) == 21 and p[-1].startswith("... and ")


def test_missing_column_and_wrong_type(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write_snapshot(small(), d)
    table = pq.read_table(d / PARTITIONS_FILE).drop(["leader"])
    table = table.set_column(table.schema.get_field_index("size_bytes"), "size_bytes",
                             pa.array(["x", "y"]))
    pq.write_table(table, d / PARTITIONS_FILE)
    with pytest.raises(SnapshotError) as e:
        read_snapshot(d)
    text = "\n".join(e.value.problems)
    assert "partitions.parquet: missing column 'leader'" in text
    assert "partitions.parquet: column 'size_bytes' has type string; expected int" in text


def test_nulls_in_required_fields(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write_snapshot(small(), d)
    table = pq.read_table(d / BROKERS_FILE)
    idx = table.schema.get_field_index("disk_capacity_bytes")
    table = table.set_column(idx, "disk_capacity_bytes", pa.array([1, None, 3], pa.int64()))
    pq.write_table(table, d / BROKERS_FILE)
    with pytest.raises(SnapshotError, match=r"brokers.parquet: row 1: field "
                                            r"'disk_capacity_bytes' is null"):
        read_snapshot(d)


def test_manifest_problems(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="no such snapshot directory"):
        read_snapshot(tmp_path / "nope")
    d = tmp_path / "s"
    write_snapshot(small(), d)
    (d / MANIFEST_FILE).write_text(json.dumps({"schemaVersion": 99}))
    with pytest.raises(SnapshotError, match="'schemaVersion' is 99"):
        read_snapshot(d)
    (d / MANIFEST_FILE).unlink()
    with pytest.raises(SnapshotError, match=r"snapshot\.json: missing"):
        read_snapshot(d)
    (d / MANIFEST_FILE).write_text("{")
    with pytest.raises(SnapshotError, match="not valid JSON"):
        read_snapshot(d)


def test_missing_parquet_file(tmp_path: Path) -> None:
    d = tmp_path / "s"
    write_snapshot(small(), d)
    (d / PARTITIONS_FILE).unlink()
    with pytest.raises(SnapshotError, match=r"partitions\.parquet: missing"):
        read_snapshot(d)


def test_write_refuses_a_non_empty_directory_and_leaves_no_temp(tmp_path: Path) -> None:
    d = tmp_path / "s"
    d.mkdir()
    (d / "keep").write_text("x")
    with pytest.raises(SnapshotError, match="exists and is not empty"):
        write_snapshot(small(), d)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
    bad = small()
    bad.partitions.leader[0] = 9
    with pytest.raises(SnapshotError):
        write_snapshot(bad, tmp_path / "t")
    assert not (tmp_path / "t").exists()
