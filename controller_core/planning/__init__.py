"""Balanced, minimal-movement reassignment plans (the PySpark planning pipeline).

Importing this package needs neither Spark nor Java: Spark, pyarrow, numpy, pandas and
matplotlib are imported inside the functions that use them. See README.md here.
"""

from __future__ import annotations

from controller_core.planning.goals import Goal, GoalError, check_goal, parse_goal
from controller_core.planning.schema import SCHEMA_VERSION
from controller_core.planning.snapshot import Broker, PartitionTable, Snapshot, SnapshotError

__all__ = [
    "SCHEMA_VERSION",
    "Broker",
    "Goal",
    "GoalError",
    "PartitionTable",
    "Snapshot",
    "SnapshotError",
    "check_goal",
    "parse_goal",
]
