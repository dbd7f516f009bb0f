"""Replication throttles that exist exactly while some movement needs them.

What kraftsman placed is written in the cluster itself, next to the throttle: a broker config
``kraftsman.throttle`` (JSON) on every broker where kraftsman set a rate or added a replica
to a topic's ``*.replication.throttled.replicas``. It holds the rate kraftsman wrote, the rate
values it replaced, and the replica entries naming that broker that kraftsman added. So any
executor — another run sharing the broker, or the same run resumed with its local state
wiped after a crash — can tell its throttles from an operator's, and remove exactly those:

* a replica entry stays while its partition moves (in this plan, or in any reassignment the
  cluster lists, e.g. another executor's); it goes once nothing moves that partition;
* a broker's rate stays while any kraftsman entry names the broker; with the last entry gone
  the rate is restored to what it was before kraftsman (a rate someone changed after us is
  theirs and stays), and the marker goes.

Like ``kafka-reassign-partitions``, replicas that exist are throttled as leaders and the
replicas being added as followers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import NamedTuple

import orjson

from controller_core.admin import ClusterAdmin, ConfigResource
from controller_core.errors import ApiResult
from controller_core.metadata.controller import (
    THROTTLE_MARKER_KEY,
    THROTTLE_RATE_KEYS,
    format_throttled_replicas,
    parse_throttled_replicas,
)
from controller_core.model import TopicPartition, is_whole_number

LEADER_REPLICAS, FOLLOWER_REPLICAS = (
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
_SIDES = {"L": LEADER_REPLICAS, "F": FOLLOWER_REPLICAS}


class Entry(NamedTuple):
    """One ``partition:broker`` item of a topic's leader (L) or follower (F) replica list."""

    topic: str
    partition: int
    broker: int
    side: str  # "L" | "F"

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def encode(self) -> str:
        return f"{self.side}:{self.partition}:{self.topic}"

    @classmethod
    def decode(cls, text: str, broker: int) -> Entry | None:
        side, _, rest = text.partition(":")
        part, _, topic = rest.partition(":")
        if side not in _SIDES or not is_whole_number(part) or not topic:
            return None
        return cls(topic, int(part), broker, side)


@dataclass(slots=True)
class Marker:
    """What kraftsman placed on one broker (the value of ``kraftsman.throttle``)."""

    rate: str | None = None  # the value kraftsman wrote to the rate keys
    previous: dict[str, str | None] = field(default_factory=dict)  # their values before
    entries: set[Entry] = field(default_factory=set)

    def encode(self) -> str:
        return orjson.dumps({"rate": self.rate, "previous": self.previous,
                             "replicas": sorted(e.encode() for e in self.entries)},
                            option=orjson.OPT_SORT_KEYS).decode()

    @classmethod
    def decode(cls, value: str | None, broker: int) -> Marker | None:
        if not value:
            return None
        try:
            doc = orjson.loads(value)
            entries = {Entry.decode(str(t), broker) for t in doc.get("replicas", [])}
            previous = {str(k): (None if v is None else str(v))
                        for k, v in dict(doc.get("previous", {})).items()}
            rate = doc.get("rate")
            return cls(None if rate is None else str(rate), previous,
                       {e for e in entries if e is not None})
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            return None  # not ours to interpret: leave it alone


class Move(NamedTuple):
    original: tuple[int, ...]  # replicas that hold the data: throttled as leaders
    adding: tuple[int, ...]  # replicas being added: throttled as followers


def wanted_entries(moves: Mapping[TopicPartition, Move]) -> set[Entry]:
    out: set[Entry] = set()
    for tp, move in moves.items():
        out.update(Entry(tp.topic, tp.partition, r, "L") for r in move.original)
        out.update(Entry(tp.topic, tp.partition, r, "F") for r in move.adding)
    return out


def sync(admin: ClusterAdmin, moves: Mapping[TopicPartition, Move], rate: int | None,
         scope: Set[TopicPartition] = frozenset()) -> list[str]:
    """Throttle ``moves`` at ``rate`` (None: not at all) and remove every kraftsman throttle
    no movement needs any more. ``scope``: the partitions of the caller's plan — its entries
    there go as soon as the caller stops moving them, even if the cluster still lists a
    reassignment (someone else's) for the partition. Returns the problems the cluster
    reported, if any (the next call tries again)."""
    want = wanted_entries(moves) if rate is not None else set()
    # A fenced broker's configs can be neither read nor changed (Kafka takes a broker's
    # own configs only on that broker): its throttles are looked at once it is back.
    brokers = [b.id for b in admin.describe_cluster().brokers if not b.fenced]
    broker_cfg, markers = _markers(admin, brokers)
    if not want and not markers:
        return []  # nothing to place, and nothing of kraftsman's in the cluster
    owned = {e for m in markers.values() for e in m.entries}
    elsewhere = sorted({e.tp for e in owned if e.tp not in scope})
    reassigning = set(admin.list_partition_reassignments(elsewhere))
    keep = want | {e for e in owned if e.tp not in scope and e.tp in reassigning}
    drop = owned - keep
    changes: dict[tuple[str, str], dict[str, str | None]] = {}
    topics = sorted({e.topic for e in want | drop})
    topic_cfg = admin.describe_configs([("TOPIC", t) for t in topics])
    new_owned = owned & keep
    for t in topics:
        for side, key in _SIDES.items():
            raw = topic_cfg[("TOPIC", t)].get(key, "")
            current = parse_throttled_replicas(raw)
            if not isinstance(current, set):
                continue  # "*" or junk written by someone else: not ours to edit
            mine_drop = {(e.partition, e.broker) for e in drop if e.topic == t and e.side == side}
            mine_want = {(e.partition, e.broker) for e in want if e.topic == t and e.side == side}
            added = mine_want - current
            new_owned |= {Entry(t, p, b, side) for p, b in added}
            merged = (current - mine_drop) | mine_want
            if merged != current:
                changes.setdefault(("TOPIC", t), {})[key] = (
                    format_throttled_replicas(merged) or None)
    rate_str = str(rate)  # used for the wanted brokers only: with no rate, none is wanted
    wanted_brokers = {e.broker for e in want}
    by_broker: dict[int, set[Entry]] = {}
    for e in new_owned:
        by_broker.setdefault(e.broker, set()).add(e)
    for b in brokers:
        res = ("BROKER", str(b))
        cfg = broker_cfg[res]
        m = markers.get(b)
        entries = by_broker.get(b, set())
        if m is None and not entries and b not in wanted_brokers:
            continue
        m = m if m is not None else Marker()
        out: dict[str, str | None] = {}
        if b in wanted_brokers:
            if m.rate is None:
                m.previous = {k: cfg.get(k) for k in THROTTLE_RATE_KEYS}
            for k in THROTTLE_RATE_KEYS:
                # ours (or unset) follows the limit; a value someone set after us is theirs
                ours = m.rate is None or cfg.get(k) in (m.rate, None)
                if ours and cfg.get(k) != rate_str:
                    out[k] = rate_str
            m.rate = rate_str
        if not entries and b not in wanted_brokers:
            # Nothing of kraftsman's moves through this broker any more: its rate goes back
            # to what it was, unless someone changed it after us (then it is theirs).
            for k in THROTTLE_RATE_KEYS:
                if m.rate is not None and cfg.get(k) == m.rate:
                    out[k] = m.previous.get(k)
            out[THROTTLE_MARKER_KEY] = None
        else:
            m.entries = entries
            encoded = m.encode()
            if cfg.get(THROTTLE_MARKER_KEY) != encoded:
                out[THROTTLE_MARKER_KEY] = encoded
        if out:
            changes[res] = out
    # Brokers first: their markers say which topic entries are kraftsman's, so a topic entry
    # is written only once its marker is (a broker refusing the rate — a value it does not
    # take, a missing ACL — must not leave entries that nothing would remove).
    brokers_first = [{r: c for r, c in changes.items() if r[0] == kind}
                     for kind in ("BROKER", "TOPIC")]
    for batch in brokers_first:
        problems = _problems(admin.incremental_alter_configs(batch))
        if problems:
            return problems
    return []


def _problems(results: Mapping[tuple[str, str], ApiResult]) -> list[str]:
    return [f"{r[0].lower()} {r[1]}: {res.message or res.error.name}"
            for r, res in results.items() if not res.ok]


def placed(admin: ClusterAdmin, brokers: Iterable[int] | None = None) -> dict[int, Marker]:
    """The kraftsman markers in the cluster (for views and tests)."""
    ids = [b.id for b in admin.describe_cluster().brokers] if brokers is None else list(brokers)
    return _markers(admin, ids)[1]


def _markers(admin: ClusterAdmin, brokers: list[int]
             ) -> tuple[dict[ConfigResource, dict[str, str]], dict[int, Marker]]:
    """The brokers' dynamic configs, and the kraftsman markers among them."""
    cfg = admin.describe_configs([("BROKER", str(b)) for b in brokers])
    markers = {}
    for b in brokers:
        m = Marker.decode(cfg[("BROKER", str(b))].get(THROTTLE_MARKER_KEY), b)
        if m is not None:
            markers[b] = m
    return cfg, markers
