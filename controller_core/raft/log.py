"""The in-memory index of a node's replicated log (the durable copy lives in storage).

Offsets are record offsets, as in Kafka; a batch covers ``count`` of them. The log keeps
an epoch index (first offset of every epoch) for the Fetch divergence check and the list of
configuration records, so that truncating a configuration entry reverts the configuration.

Below ``start_offset`` the log is a KIP-630 snapshot (Kafka's log start offset): its id gives
the epoch of the record just before the start, its configuration is the first entry of the
configuration list, so the epoch index and the configuration queries work across it.
"""

from __future__ import annotations

from bisect import bisect_right

from controller_core.raft.records import Batch, VoterAssignment
from controller_core.raft.snapshot import SnapshotId


class RaftLog:
    def __init__(self, batches: list[Batch] | None = None, *,
                 snapshot: tuple[SnapshotId, VoterAssignment | None] | None = None) -> None:
        self._batches: list[Batch] = []
        self._bases: list[int] = []
        self._epochs: list[tuple[int, int]] = []  # (epoch, start offset), epochs increasing
        self._configs: list[tuple[int, VoterAssignment]] = []  # (offset, record)
        self.end_offset = 0
        self.start_offset = 0
        self.snapshot_id: SnapshotId | None = None
        if snapshot is not None:
            self.reset_to_snapshot(*snapshot)
        for b in batches or []:
            if b.end_offset <= self.start_offset:
                continue  # contained in the snapshot
            self.append(b.slice(self.start_offset, b.end_offset))

    # ------------------------------------------------------------------ queries
    @property
    def last_epoch(self) -> int:
        return self._epochs[-1][0] if self._epochs else 0

    @property
    def batches(self) -> list[Batch]:
        return self._batches

    def __len__(self) -> int:
        return len(self._batches)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` in the log, the offset just past its last record).

        ``(0, 0)`` when the log holds no epoch that old. This is Kafka's OffsetForLeaderEpoch
        answer and drives the Fetch divergence check.
        """
        i = bisect_right(self._epochs, epoch, key=lambda e: e[0]) - 1
        if i < 0:
            if self.snapshot_id is not None:
                # older than the snapshot: Kafka answers with the snapshot's id
                return self.snapshot_id.epoch, self.start_offset
            return 0, 0
        found = self._epochs[i][0]
        end = self._epochs[i + 1][1] if i + 1 < len(self._epochs) else self.end_offset
        return found, end

    def epoch_at(self, offset: int) -> int:
        """Epoch of the record at ``offset`` (0 for offset -1, i.e. before the log)."""
        if offset < 0:
            return 0
        if offset < self.start_offset:
            if offset == self.start_offset - 1 and self.snapshot_id is not None:
                return self.snapshot_id.epoch
            raise IndexError(f"offset {offset} is below the log start {self.start_offset} "
                             f"(it is in the snapshot)")
        if offset >= self.end_offset:
            raise IndexError(f"offset {offset} is past the log end {self.end_offset}")
        i = bisect_right(self._epochs, offset, key=lambda e: e[1]) - 1
        return self._epochs[i][0]

    def batch_index(self, offset: int) -> int:
        return bisect_right(self._bases, offset) - 1

    def read(self, start: int, max_bytes: int) -> list[Batch]:
        """Batches from ``start``; at least one batch if any, then up to ``max_bytes``."""
        if start >= self.end_offset:
            return []
        if start < self.start_offset:
            raise IndexError(f"offset {start} is below the log start {self.start_offset} "
                             f"(it is in the snapshot)")
        i = self.batch_index(start)
        out: list[Batch] = []
        total = 0
        while i < len(self._batches):
            b = self._batches[i]
            if out and total + b.size_bytes > max_bytes:
                break
            if b.base_offset < start:
                b = b.slice(start, b.end_offset)
            out.append(b)
            total += b.size_bytes
            i += 1
        return out

    def batches_from(self, start: int) -> list[Batch]:
        return self.read(start, 1 << 62)

    def latest_config(self) -> tuple[int, VoterAssignment] | None:
        return self._configs[-1] if self._configs else None

    def config_at(self, offset: int) -> tuple[int, VoterAssignment] | None:
        """The configuration record in force for the entry at ``offset``."""
        i = bisect_right(self._configs, offset, key=lambda c: c[0]) - 1
        return self._configs[i] if i >= 0 else None

    @property
    def configs(self) -> list[tuple[int, VoterAssignment]]:
        return self._configs

    def cluster_id(self) -> str | None:
        return self._configs[0][1].cluster_id if self._configs else None

    # ---------------------------------------------------------------- mutation
    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(
                f"batch at offset {batch.base_offset} does not extend the log end "
                f"{self.end_offset}")
        if batch.epoch < self.last_epoch:
            raise ValueError(f"batch epoch {batch.epoch} is older than {self.last_epoch}")
        if batch.epoch > self.last_epoch:
            self._epochs.append((batch.epoch, batch.base_offset))
        self._batches.append(batch)
        self._bases.append(batch.base_offset)
        if isinstance(batch.control, VoterAssignment):
            self._configs.append((batch.base_offset, batch.control))
        self.end_offset = batch.end_offset

    def truncate(self, offset: int) -> None:
        """Remove every record at ``offset`` and beyond."""
        if offset >= self.end_offset:
            return
        if offset < self.start_offset:
            raise ValueError(f"cannot truncate to {offset}: below the log start "
                             f"{self.start_offset} (the snapshot is committed)")
        i = self.batch_index(offset)
        keep_partial = None
        if i >= 0 and self._batches[i].base_offset < offset:
            keep_partial = self._batches[i].slice(self._batches[i].base_offset, offset)
        cut = i if i >= 0 else 0
        del self._batches[cut:]
        del self._bases[cut:]
        if keep_partial is not None:
            self._batches.append(keep_partial)
            self._bases.append(keep_partial.base_offset)
        self.end_offset = offset
        while self._epochs and self._epochs[-1][1] >= offset:
            self._epochs.pop()
        if not self._epochs and self.snapshot_id is not None:
            self._epochs.append((self.snapshot_id.epoch, self.start_offset))
        while self._configs and self._configs[-1][0] >= offset:
            self._configs.pop()

    # ------------------------------------------------------------------ snapshots
    def reset_to_snapshot(self, sid: SnapshotId, config: VoterAssignment | None) -> None:
        """Drop the whole log and start it at the snapshot's end (Kafka's
        ``truncateFullyAndStartAt``, used when a follower installs a fetched snapshot)."""
        self._batches, self._bases = [], []
        self.start_offset = self.end_offset = sid.end_offset
        self.snapshot_id = sid
        self._epochs = [(sid.epoch, sid.end_offset)]
        self._configs = [(sid.end_offset - 1, config)] if config is not None else []

    def compact(self, sid: SnapshotId) -> VoterAssignment | None:
        """Drop every record below the snapshot ``sid`` (Kafka's ``deleteBeforeSnapshot``);
        returns the configuration in force at its end, which the snapshot carries."""
        end = sid.end_offset
        if not self.start_offset < end <= self.end_offset:
            raise ValueError(f"snapshot end {end} is not within the log "
                             f"({self.start_offset}, {self.end_offset}]")
        if self.epoch_at(end - 1) != sid.epoch:
            raise ValueError(f"snapshot {sid} does not match the log: offset {end - 1} has "
                             f"epoch {self.epoch_at(end - 1)}")
        at = self.config_at(end - 1)
        config = at[1] if at is not None else None
        keep = [b if b.base_offset >= end else b.slice(end, b.end_offset)
                for b in self._batches[max(0, self.batch_index(end)):] if b.end_offset > end]
        self._batches = keep
        self._bases = [b.base_offset for b in keep]
        self._epochs = [(sid.epoch, end)] + [e for e in self._epochs
                                             if e[1] >= end and e[0] > sid.epoch]
        self._configs = ([(end - 1, config)] if config is not None else []) + [
            c for c in self._configs if c[0] >= end]
        self.start_offset = end
        self.snapshot_id = sid
        return config
