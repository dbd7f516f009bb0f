"""KIP-595 metadata quorum: a sans-IO Raft node with voter changes, its storage and a driver.

Entry points: :class:`~controller_core.raft.node.RaftNode` (the state machine),
:class:`~controller_core.raft.quorum.SimulatedQuorum` (N nodes on a simulated network and
clock, the driver the embedded cluster uses), :mod:`~controller_core.raft.describe` (the
DescribeQuorum result and the kafka-metadata-quorum tables).
"""
