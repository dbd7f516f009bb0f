"""A simulated network for quorum nodes: delay, loss, duplication, reordering, partitions.

Everything is decided by the injected ``random.Random``, so a run replays from its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class NetworkConfig:
    one_way_delay_ms: float = 10.0
    delay_jitter_ms: float = 0.0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0  # probability that a message is held back up to reorder_max_ms
    reorder_max_ms: float = 50.0
    bandwidth_bytes_per_ms: float | None = None  # per link; None = unlimited

    def __post_init__(self) -> None:
        for name in ("loss", "duplicate", "reorder"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ValueError(f"NetworkConfig.{name} must be in [0, 1), got {v}")
        if self.one_way_delay_ms < 0 or self.delay_jitter_ms < 0 or self.reorder_max_ms < 0:
            raise ValueError("NetworkConfig delays must be >= 0")
        if self.bandwidth_bytes_per_ms is not None and self.bandwidth_bytes_per_ms <= 0:
            raise ValueError("NetworkConfig.bandwidth_bytes_per_ms must be > 0")


@dataclass(slots=True)
class SimulatedNetwork:
    config: NetworkConfig
    rng: random.Random
    blocked: set[tuple[int, int]] = field(default_factory=set)  # directed (src, dst)
    link_free_at: dict[tuple[int, int], float] = field(default_factory=dict)

    def can_deliver(self, src: int, dst: int) -> bool:
        return (src, dst) not in self.blocked

    def delays(self, src: int, dst: int, size_bytes: int, now: float) -> list[float]:
        """Arrival times of the copies of one message (empty: lost or blocked)."""
        c = self.config
        if not self.can_deliver(src, dst):
            return []
        if c.loss and self.rng.random() < c.loss:
            return []
        copies = 2 if c.duplicate and self.rng.random() < c.duplicate else 1
        out = []
        start = now
        if c.bandwidth_bytes_per_ms is not None:
            # the link serialises its messages: a big fetch response occupies it
            start = max(now, self.link_free_at.get((src, dst), 0.0))
            start += size_bytes / c.bandwidth_bytes_per_ms
            self.link_free_at[(src, dst)] = start
        for _ in range(copies):
            t = start + c.one_way_delay_ms
            if c.delay_jitter_ms:
                t += self.rng.random() * c.delay_jitter_ms
            if c.reorder and self.rng.random() < c.reorder:
                t += self.rng.random() * c.reorder_max_ms
            out.append(t)
        return out

    def partition(self, side_a: set[int], side_b: set[int], *, symmetric: bool = True) -> None:
        """Cut a -> b (and b -> a if symmetric)."""
        for a in side_a:
            for b in side_b:
                if a != b:
                    self.blocked.add((a, b))
                    if symmetric:
                        self.blocked.add((b, a))

    def heal(self) -> None:
        self.blocked.clear()
