"""The embedded cluster's metadata quorum keeps a bounded log (KIP-630 snapshots).

Kafka's controller snapshots its image (QuorumController / SnapshotGenerator) and the raft
layer drops the log below (KafkaMetadataLog.deleteBeforeSnapshot); a restart loads the
latest snapshot and the log after it (KafkaRaftClient's handleLoadSnapshot + log replay).
"""

from __future__ import annotations

import itertools
import shutil
import tracemalloc
from pathlib import Path

import pytest

from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.raft.snapshot import snapshot_files
from controller_core.storage.framing import CorruptFileError
from tests.core.test_storage import image_state
from tests.helpers import cluster, spec, tp


def churn(c: EmbeddedCluster, rounds: int) -> None:
    for i in range(rounds):
        rate = str(1000 + i)
        c.incremental_alter_configs({("BROKER", str(b)): {
            "leader.replication.throttled.rate": rate,
            "follower.replication.throttled.rate": rate} for b in range(6)})


def quorum_dirs(path: Path) -> list[Path]:
    return sorted((path / "quorum").glob("node-*"))


def test_quorum_log_is_truncated_below_the_snapshot_and_restart_loads_it(
        tmp_path: Path) -> None:
    c = cluster(tmp_path, snapshotEveryRecords=50)
    churn(c, 40)  # 480 config records: snapshots every 50
    c.alter_partition_reassignments({tp("orders", 0): [3, 4, 5]})
    before = image_state(c)
    ends = {n: c.quorum.q.node(n).log.end_offset for n in c.quorum.nodes()}
    starts = {n: c.quorum.q.node(n).log_start_offset for n in c.quorum.nodes()}
    assert all(s > 0 for s in starts.values()), starts
    assert c.quorum.committed_start() > 0, "committed entries below the snapshot are dropped"
    c.close()
    ids = set()
    for d in quorum_dirs(tmp_path):
        (sid, _), = snapshot_files(d)
        ids.add(sid)
        segments = sum(1 for _ in d.glob("*.log"))
        assert segments <= 1, (d, segments)  # only the log after the snapshot
    assert len(ids) == 1 and next(iter(ids)).end_offset > 0, ids  # followers took it too
    again = EmbeddedCluster.open(tmp_path, spec(snapshotEveryRecords=50), fsync=False)
    assert image_state(again) == before
    for n in again.quorum.nodes():
        node = again.quorum.q.node(n)
        assert node.log_start_offset >= starts[n] and node.log.end_offset >= ends[n]
        # loaded snapshot + tail: the log in memory holds only what follows the snapshot
        assert len(node.log.batches) < 40


def test_a_snapshot_is_also_due_after_so_many_bytes_as_kafka_does(tmp_path: Path) -> None:
    """metadata.log.max.record.bytes.between.snapshots: a few large records (a long
    throttled-replica list, rewritten as moves start and end) are snapshotted by their
    bytes, however few they are, so the log the controllers keep in memory stays bounded."""
    c = cluster(tmp_path, snapshotEveryRecords=1_000_000, snapshotEveryBytes=20_000)
    replicas = ",".join(f"{p}:{b}" for p in range(300) for b in range(6))  # ~11 kB
    for i in range(8):
        c.incremental_alter_configs({("TOPIC", "orders"): {
            "leader.replication.throttled.replicas": replicas if i % 2 else "0:0"}})
    starts = [c.quorum.q.node(n).log_start_offset for n in c.quorum.nodes()]
    assert all(s > 0 for s in starts), starts  # 8 records, each snapshotted past 20 kB
    for n in c.quorum.nodes():  # what each controller holds in memory: under two snapshots' worth
        held = sum(len(r) for b in c.quorum.q.node(n).log.batches for r in b.records)
        assert held < 40_000, (n, held)
    before = image_state(c)
    c.close()
    again = EmbeddedCluster.open(tmp_path, spec(snapshotEveryRecords=1_000_000,
                                                snapshotEveryBytes=20_000), fsync=False)
    assert image_state(again) == before


def test_the_log_in_memory_holds_what_its_records_weigh(tmp_path: Path) -> None:
    """A committed entry stays in every controller's log until the next snapshot: it must
    not carry the spare buffer orjson grew while encoding it (for a long throttled-replica
    list, three to four times the JSON's length: 87 MiB held for 20 MiB of records with
    40,000 partitions moving)."""
    c = cluster(tmp_path, snapshotEveryRecords=1_000_000, snapshotEveryBytes=1 << 30)
    replicas = ",".join(f"{p}:{b}" for p in range(20_000) for b in range(6))  # ~1 MB
    tracemalloc.start()
    try:
        c.incremental_alter_configs({("TOPIC", "orders"): {
            "leader.replication.throttled.replicas": replicas}})
        batches = c.quorum.q.node(c.quorum.leader() or 0).log.batches
        (entry,) = [r for b in batches for r in b.records if len(r) > len(replicas)]
        traced = tracemalloc.get_object_traceback(entry)
        held = sum(s.size for s in tracemalloc.take_snapshot().statistics("traceback")
                   if s.traceback == traced)
    finally:
        tracemalloc.stop()
    assert traced is not None
    assert held < 1.1 * len(entry), (held, len(entry))


def test_metadata_directory_older_than_the_quorum_snapshot_is_rebuilt_from_it(
        tmp_path: Path) -> None:
    """A local metadata log behind the quorum's log start (restored from an old backup)
    loads the quorum's snapshot instead of missing the compacted entries."""
    c = cluster(tmp_path, snapshotEveryRecords=20)
    churn(c, 3)
    c.close()
    shutil.copytree(tmp_path / "metadata", tmp_path / "metadata-backup")
    c = EmbeddedCluster.open(tmp_path, spec(snapshotEveryRecords=20), fsync=False)
    churn(c, 10)
    c.alter_partition_reassignments({tp("orders", 2): [3, 4, 5]})
    before = image_state(c)[:-1]  # all but the local record count
    c.close()
    shutil.rmtree(tmp_path / "metadata")
    (tmp_path / "metadata-backup").rename(tmp_path / "metadata")
    again = EmbeddedCluster.open(tmp_path, spec(snapshotEveryRecords=20), fsync=False)
    assert image_state(again)[:-1] == before
    assert again.list_partition_reassignments()


def test_a_damaged_quorum_snapshot_is_an_error_naming_the_file(tmp_path: Path) -> None:
    c = cluster(tmp_path, snapshotEveryRecords=20)
    churn(c, 5)
    c.close()
    (_, path), = snapshot_files(quorum_dirs(tmp_path)[0])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=path.name):
        EmbeddedCluster.open(tmp_path, spec(snapshotEveryRecords=20), fsync=False)


def test_restart_does_not_read_local_segments_below_the_newest_snapshot(
        tmp_path: Path) -> None:
    """Restart cost is snapshot + tail: a segment wholly below the newest metadata snapshot
    (kept as the fallback of the older one) is not even read."""
    c = cluster(tmp_path, snapshotEveryRecords=20)
    churn(c, 6)
    before = image_state(c)
    c.close()
    newest = c.log.snapshot_offset
    segments = sorted((tmp_path / "metadata").glob("log-*.log"))
    below = [p for p, nxt in itertools.pairwise(segments)
             if int(nxt.name[4:24]) <= newest]
    assert below, [p.name for p in segments]
    for p in below:
        p.write_bytes(b"\xff" * 64)  # would be a CorruptFileError if it were read
    again = EmbeddedCluster.open(tmp_path, spec(snapshotEveryRecords=20), fsync=False)
    assert image_state(again) == before
