"""``assignment_fingerprint``: what the planner Job writes and the operator re-checks before
executing an approved KafkaRebalance proposal (a different value = a stale proposal).

The value must be the same on every backend for the same assignment: checked on one cluster
read in-process (embedded) and over the Kafka protocol (the ``kafka`` backend against
``cluster serve``), with a reassignment in flight — Kafka's ``ReplicationControlManager``
reports R = target + removing during a move, and the fingerprint counts the target.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from controller_core.backends import RetryPolicy, open_kafka_admin
from controller_core.planning.export import snapshot_from_admin
from controller_core.planning.fingerprint import (
    admin_fingerprint,
    assignment_fingerprint,
    table_fingerprint,
)
from tests.helpers import cluster, tp
from tests.serve.harness import served

ROWS = [("orders", 0, [0, 1, 2]), ("orders", 1, [1, 2, 0]), ("audit", 0, [2, 0, 1])]


def test_the_encoding_is_sorted_json_lines_under_a_version_line() -> None:
    """The documented encoding, computed here independently: other tools can reproduce it."""
    h = hashlib.sha256(b"kraftsman-assignment-v1\n")
    for row in sorted(ROWS):
        h.update(json.dumps(list(row), separators=(",", ":")).encode() + b"\n")
    assert assignment_fingerprint(ROWS) == h.hexdigest()


def test_input_order_does_not_matter_but_replica_order_does() -> None:
    base = assignment_fingerprint(ROWS)
    assert assignment_fingerprint(reversed(ROWS)) == base
    assert assignment_fingerprint(tuple((t, p, tuple(r)) for t, p, r in ROWS)) == base
    # the preferred leader changes: leader-balance proposals depend on it
    assert assignment_fingerprint([("orders", 0, [1, 0, 2]), *ROWS[1:]]) != base
    assert assignment_fingerprint([("orders", 0, [0, 1, 3]), *ROWS[1:]]) != base
    assert assignment_fingerprint(ROWS[:2]) != base  # a partition more or less
    assert len(base) == 64 and int(base, 16) >= 0


def test_fields_cannot_run_into_each_other() -> None:
    assert assignment_fingerprint([("a", 12, [1])]) != assignment_fingerprint([("a1", 2, [1])])
    assert assignment_fingerprint([("a", 1, [23])]) != assignment_fingerprint([("a", 12, [3])])


def test_a_partition_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="orders-0 occurs twice"):
        assignment_fingerprint([*ROWS, ("orders", 0, [0, 1, 2])])


def test_embedded_and_kafka_backends_agree_during_a_move(tmp_path: Path) -> None:
    c = cluster(tmp_path / "c")
    before = admin_fingerprint(c)
    result = c.alter_partition_reassignments({tp("orders", 0): [3, 4, 5]})
    assert all(r.ok for r in result.values())
    assert c.list_partition_reassignments()  # still moving: nothing advanced the clock
    embedded = admin_fingerprint(c)
    assert embedded != before
    expected = [(p.tp.topic, p.tp.partition, list(p.replicas)) for p in c.describe_partitions()]
    expected = [(t, p, [3, 4, 5] if (t, p) == ("orders", 0) else r) for t, p, r in expected]
    assert embedded == assignment_fingerprint(expected)
    snap = snapshot_from_admin(c, cluster_name="demo", created_at="")
    assert table_fingerprint(snap.partitions) == embedded
    with served(c, time_scale=0) as s:
        admin = open_kafka_admin(s.bootstrap, retry=RetryPolicy(total_seconds=10))
        try:
            assert admin_fingerprint(admin) == embedded
        finally:
            admin.close()


def test_importing_it_needs_no_spark() -> None:
    """The operator calls it; the operator's process never loads Spark or pyarrow."""
    import subprocess
    import sys

    code = ("import sys, controller_core.planning.fingerprint; "
            "print(sorted(m for m in ('pyspark', 'pyarrow', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
