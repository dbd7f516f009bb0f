"""A fingerprint of a cluster's replica assignment: is a proposal still about this cluster?

The planner Job of a KafkaRebalance writes the fingerprint of the assignment it planned
from; before executing an approved proposal the operator computes it again on the cluster.
A different value means some partition's replicas (or their order, i.e. the preferred
leader) changed since: the proposal is stale.

The value depends only on (topic, partition, replicas) — sorted by (topic, partition), the
replica order kept — so every backend gives the same value for the same assignment. A
partition being reassigned counts with its target replicas (the replicas it keeps), as the
snapshot plans from them (``export.snapshot_from_admin``). Pure, no Spark.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

from controller_core.admin import ClusterAdmin, PartitionDescription
from controller_core.planning.snapshot import PartitionTable

# Bumped if the encoding ever changes, so old and new values can never be equal by accident.
_VERSION = b"kraftsman-assignment-v1\n"

Assignment = Iterable[tuple[str, int, Sequence[int]]]


def assignment_fingerprint(assignment: Assignment) -> str:
    """Hex sha256 over the sorted (topic, partition, replicas) rows; input order is free.

    Raises ``ValueError`` when a (topic, partition) occurs twice: two assignments of one
    partition are not an assignment.
    """
    rows = sorted((str(t), int(p), [int(r) for r in replicas]) for t, p, replicas in assignment)
    h = hashlib.sha256(_VERSION)
    previous: tuple[str, int] | None = None
    for topic, partition, replicas in rows:
        if (topic, partition) == previous:
            raise ValueError(f"partition {topic}-{partition} occurs twice in the assignment")
        previous = (topic, partition)
        # JSON quotes the topic, so no topic name can run into the next field.
        h.update(json.dumps([topic, partition, replicas], separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def target_replicas(p: PartitionDescription) -> list[int]:
    """The replicas a partition keeps: during a move R = target + removing (KIP-455)."""
    removing = set(p.removing)
    return [r for r in p.replicas if r not in removing]


def admin_fingerprint(admin: ClusterAdmin) -> str:
    """The fingerprint of a live cluster, through the ``ClusterAdmin`` port (any backend)."""
    return assignment_fingerprint(
        (p.tp.topic, p.tp.partition, target_replicas(p)) for p in admin.describe_partitions())


def table_fingerprint(table: PartitionTable) -> str:
    """The fingerprint of a snapshot's partition table (what a plan was computed from)."""
    return assignment_fingerprint(zip(table.topic, table.partition, table.replicas, strict=True))
