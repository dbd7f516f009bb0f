"""Replication throttles that exist exactly while some movement needs them.

What kraftsman placed is written in the cluster itself: a marker for every broker where
kraftsman set a rate or added a replica to a topic's ``*.replication.throttled.replicas`` —
the record of that broker's id in kraftsman's compacted topic ``__kraftsman_throttles``
(:data:`~controller_core.admin.THROTTLE_MARKER_TOPIC`). It holds the rate kraftsman wrote, the
rate values it replaced, and the replica entries naming that broker that kraftsman added. So
any executor — another run sharing the broker, or the same run resumed with its local state
wiped after a crash — can tell its throttles from an operator's, and remove exactly those:

* a replica entry stays while its partition moves (in this plan, or in any reassignment the
  cluster lists, e.g. another executor's); it goes once nothing moves that partition;
* a broker's rate stays while any kraftsman entry names the broker; with the last entry gone
  the rate is restored to what it was before kraftsman (a rate someone changed after us is
  theirs and stays), and the marker goes.

The markers claim everything of kraftsman's at every moment: a pass first writes the markers
that claim more (a new entry, a new rate), then changes the configs, then writes the markers
that claim less (a tombstone for one that goes). A pass cut short anywhere leaves nothing
unclaimed, and the next one finishes it.

A fenced broker's configs can be neither read nor changed (Kafka serves a broker's own
configs on that broker alone): its rate is set, or restored, once it is back. Until then its
marker keeps what is owed, and :func:`sync` names the broker as waiting so that the caller
syncs again — a finished run too, or the rate it wrote would stay on that broker for good.

Older versions kept the marker in a broker config ``kraftsman.throttle``. A real broker
accepts that name but hides it as sensitive (DescribeConfigs answers null), so it was never
read back there, and what it claimed cannot be known: a pass that finds the key deletes it.
(The embedded cluster, where those versions could read it, moves it into the marker topic
when it opens.)

Like ``kafka-reassign-partitions``, replicas that exist are throttled as leaders and the
replicas being added as followers. A replica copied between two log directories of its broker
(KIP-113) is a ``D`` entry, kept in the marker alone (Kafka has no per-replica list for
those): while a broker has one, its ``replica.alter.log.dirs.io.max.bytes.per.second`` is
the log-dir rate (a broker-wide cap on every such copy, which kraftsman therefore sets only
where its own plan copies between directories; by default the replication rate, as
``kafka-reassign-partitions --replica-alter-log-dirs-throttle`` is a rate of its own),
restored like the replication rates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from itertools import islice
from typing import NamedTuple

import orjson

from controller_core import bitmaps, errors
from controller_core.admin import LEGACY_MARKER_CONFIG, ClusterAdmin
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.metadata.controller import (
    ALTER_LOG_DIRS_RATE,
    RATE_KEYS,
    THROTTLE_RATE_KEYS,
    format_throttled_replicas_by_broker,
    parse_throttled_replicas_by_broker,
)
from controller_core.model import TopicPartition
from controller_core.orchestration.throttle_entries import Entry, EntrySet, Key

__all__ = ["Entry", "EntrySet", "Marker", "Move", "Synced", "placed", "sync", "wanted_entries"]

LEADER_REPLICAS, FOLLOWER_REPLICAS = (
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
_SIDES = {"L": LEADER_REPLICAS, "F": FOLLOWER_REPLICAS}  # the sides kept in topic configs
LOG_DIR_SIDE = "D"  # a replica copied between log directories of its broker
# Which broker rate keys each kind of entry needs.
_RATE_KEYS = {"L": THROTTLE_RATE_KEYS, "F": THROTTLE_RATE_KEYS,
              LOG_DIR_SIDE: (ALTER_LOG_DIRS_RATE,)}
LEGACY_MARKER_KEY = LEGACY_MARKER_CONFIG  # the broker config older versions wrote
_LIST_SLICE = 10_000  # partitions per ListPartitionReassignments of a sync
_REFUSALS = {errors.TOPIC_AUTHORIZATION_FAILED.code, errors.CLUSTER_AUTHORIZATION_FAILED.code}


@dataclass(slots=True)
class Marker:
    """What kraftsman placed on one broker (its record in the marker topic)."""

    rate: str | None = None  # the value kraftsman wrote to the rate keys
    previous: dict[str, str | None] = field(default_factory=dict)  # their values before
    entries: EntrySet = field(default_factory=EntrySet)
    # rates kraftsman wrote before ``rate`` that may still be in force: a rate change whose
    # config write has not been confirmed yet
    also: set[str] = field(default_factory=set)
    dir_rate: str | None = None  # the value kraftsman wrote to the log-dir rate key

    def __post_init__(self) -> None:
        if not isinstance(self.entries, EntrySet):  # a set of Entry (views and tests)
            self.entries = EntrySet.of(self.entries)

    def encode(self) -> str:
        doc: dict[str, object] = {"rate": self.rate, "previous": self.previous,
                                  "replicas": self.entries.encode()}
        if self.also:
            doc["also"] = sorted(self.also)
        if self.dir_rate is not None:
            doc["dirRate"] = self.dir_rate
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode()

    @classmethod
    def decode(cls, value: str | None, broker: int) -> Marker | None:
        if not value:
            return None
        try:
            doc = orjson.loads(value)
            entries = EntrySet.decode(doc.get("replicas", []), broker)
            previous = {str(k): (None if v is None else str(v))
                        for k, v in dict(doc.get("previous", {})).items()}
            rate = doc.get("rate")
            also = {str(v) for v in doc.get("also", [])}
            dir_rate = doc.get("dirRate")
            return cls(None if rate is None else str(rate), previous, entries, also,
                       None if dir_rate is None else str(dir_rate))
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            return None  # not ours to interpret: leave it alone

    def written(self) -> set[str]:
        """The rate values of kraftsman's that may be in force on the broker."""
        return {r for r in (self.rate, self.dir_rate) if r is not None} | self.also

    def copy(self) -> Marker:
        return Marker(self.rate, dict(self.previous), self.entries, set(self.also),
                      self.dir_rate)


class Move(NamedTuple):
    original: tuple[int, ...]  # replicas that hold the data: throttled as leaders
    adding: tuple[int, ...]  # replicas being added: throttled as followers
    between_dirs: tuple[int, ...] = ()  # brokers copying it between their log directories


class Synced(NamedTuple):
    """What a sync left undone: ``problems`` the cluster reported, and the fenced brokers
    whose rate waits until they are back (set, or restored to what it was before
    kraftsman). Either way the caller syncs again later; the markers keep what is owed."""

    problems: list[str]
    waiting: tuple[int, ...] = ()

    @property
    def settled(self) -> bool:
        return not self.problems and not self.waiting


def wanted_entries(moves: Mapping[TopicPartition, Move], *, network: bool = True,
                   between_dirs: bool = True) -> EntrySet:
    """The entries the moves need: ``network`` the replication ones (L, F), ``between_dirs``
    the log-dir ones (D)."""
    groups: dict[Key, list[int]] = {}
    for tp, move in moves.items():
        t, p = tp.topic, tp.partition
        if network and move.adding:  # a move between directories alone copies nothing
            for r in move.original:
                groups.setdefault((t, "L", r), []).append(p)
            for r in move.adding:
                groups.setdefault((t, "F", r), []).append(p)
        if between_dirs:
            for r in move.between_dirs:
                groups.setdefault((t, LOG_DIR_SIDE, r), []).append(p)
    return EntrySet.grouped(groups)


def _keys_needed(sides: Iterable[str]) -> set[str]:
    return {k for side in sides for k in _RATE_KEYS[side]}


def sync(admin: ClusterAdmin, moves: Mapping[TopicPartition, Move], rate: int | None,
         scope: Set[TopicPartition] = frozenset(), *, legacy_check: bool = True,
         dir_rate: int | None = None) -> Synced:
    """Throttle ``moves`` at ``rate`` (None: not at all), their copies between log
    directories at ``dir_rate`` (None: at ``rate``), and remove every kraftsman throttle
    no movement needs any more. ``scope``: the partitions of the caller's plan — its entries
    there go as soon as the caller stops moving them, even if the cluster still lists a
    reassignment (someone else's) for the partition. ``legacy_check``: also look for an
    older kraftsman's broker-config marker when there is nothing else to do (it costs a
    DescribeConfigs of every broker — most of a second at the start of an unthrottled run
    on a busy real cluster — so a run does it at its end). Returns what is left undone (the
    next call tries again)."""
    decided = _decide(admin, moves, rate, scope, legacy_check=legacy_check,
                      dir_rate=dir_rate)
    # the sets of every entry that decided it are gone before the cluster applies the writes
    return decided if isinstance(decided, Synced) else _apply(admin, decided)


def _decide(admin: ClusterAdmin, moves: Mapping[TopicPartition, Move], rate: int | None,
            scope: Set[TopicPartition], *, legacy_check: bool, dir_rate: int | None
            ) -> Synced | _Writes:
    dir_rate = rate if dir_rate is None else dir_rate
    want = wanted_entries(moves, network=rate is not None, between_dirs=dir_rate is not None)
    try:
        stored = admin.read_throttle_markers()
    except KafkaApiError as refused:
        if refused.error.code not in _REFUSALS:
            raise
        if want:
            return Synced([refused.message])
        # Nothing to place, and a principal that may not read the markers could not have
        # written any: an unthrottled run does not need the marker topic.
        stored = {}
    markers = _decoded(stored)
    if not want and not markers and not legacy_check:
        return Synced([])  # nothing to place, and no marker claims anything
    # A fenced broker's configs can be neither read nor changed (Kafka takes a broker's
    # own configs only on that broker): its throttles are looked at once it is back.
    brokers = [b.id for b in admin.describe_cluster().brokers if not b.fenced]
    broker_cfg = admin.describe_configs([("BROKER", str(b)) for b in brokers])
    legacy = {b for b in brokers if LEGACY_MARKER_KEY in broker_cfg[("BROKER", str(b))]}
    if not want and not markers and not legacy:
        return Synced([])  # nothing to place, and nothing of kraftsman's in the cluster
    # Every run on the cluster shares the markers (20 runs of 5,000 moves: 480,000
    # entries): they are worked on as bitmaps (EntrySet), never as an object per entry.
    owned = EntrySet.union(m.entries for m in markers.values())
    in_scope = _partition_bits(scope)
    listed = owned.where(sides=_SIDES).partitions()
    elsewhere = (TopicPartition(t, p) for t, bits in sorted(listed.items())
                 for p in bitmaps.members(bits & ~in_scope.get(t, 0)))
    reassigning: dict[str, int] = {}
    # asked a slice at a time: the answer for every other run's partition (75,000 in
    # flight) decoded at once was the operator's peak
    while part := list(islice(elsewhere, _LIST_SLICE)):
        for t, bits in _partition_bits(admin.list_partition_reassignments(part)).items():
            reassigning[t] = reassigning.get(t, 0) | bits
    copying = _still_copying(owned.where(sides=(LOG_DIR_SIDE,)).masked(
        {t: ~bits for t, bits in in_scope.items()}, ~0), admin)
    # kept: wanted, still copying between directories, or outside the caller's plan and
    # still reassigned (by another run, or anyone)
    droppable = {t: in_scope.get(t, 0) | ~reassigning.get(t, 0)
                 for t in owned.topics()}
    drop = (owned - want - copying).masked(droppable, ~0)
    new_owned = owned - drop
    changes: dict[tuple[str, str], dict[str, str | None]] = {}
    topics = sorted({k[0] for k in (*drop.keys(), *want.keys()) if k[1] in _SIDES})
    topic_cfg = admin.describe_configs([("TOPIC", t) for t in topics])
    currents: dict[tuple[str, str], dict[int, int]] = {}
    for t in topics:
        for side, key in _SIDES.items():
            current = parse_throttled_replicas_by_broker(
                topic_cfg[("TOPIC", t)].get(key) or "")
            if isinstance(current, dict):  # "*" or junk written by someone else: not ours
                currents[(t, side)] = current
    del topic_cfg
    # A broker answers DescribeConfigs from its copy of the metadata, which may not have
    # another run's latest entries yet: what the markers claim and a movement still needs is
    # written back whatever this read says, never dropped by it.
    drop_at, want_at, owned_at = drop.by_list(), want.by_list(), new_owned.by_list()
    nothing = EntrySet()
    added = []  # the wanted entries the lists lack: kraftsman's once written
    for (t, side), current in currents.items():
        listed_now = EntrySet({(t, side, b): bits for b, bits in current.items()})
        mine_drop = drop_at.get((t, side), nothing)
        mine_want = want_at.get((t, side), nothing)
        missing = owned_at.get((t, side), nothing) - listed_now
        added.append(mine_want - listed_now)
        merged = (listed_now - mine_drop) | mine_want | missing
        # ... and an entry to drop is written away even if the read no longer shows it:
        # skipped, a stale read on the last pass would leave it for good, unclaimed
        if merged != listed_now or mine_drop:
            changes.setdefault(("TOPIC", t), {})[_SIDES[side]] = (
                format_throttled_replicas_by_broker({b: bits for (_, _, b), bits
                                                     in merged.items()}) or None)
    # the log-dir entries are kept in the marker alone
    new_owned = EntrySet.union([new_owned, *added, want.where(sides=(LOG_DIR_SIDE,))])
    rate_str = str(rate)  # used for the wanted brokers only: with no rate, none is wanted
    dir_rate_str = str(dir_rate)

    def value(key: str) -> str:
        return dir_rate_str if key == ALTER_LOG_DIRS_RATE else rate_str
    want_at_broker = want.by_broker()
    wanted_brokers = set(want_at_broker)
    by_broker = new_owned.by_broker()
    claim: dict[int, Marker | None] = {}  # written before the configs change
    final: dict[int, Marker | None] = {}  # written after
    registered = set(brokers)
    waiting: set[int] = set()
    for b in sorted(registered | set(markers) | set(by_broker)):  # fenced ones with entries too
        cfg = broker_cfg.get(("BROKER", str(b)), {})
        cur = markers.get(b)
        entries = by_broker.get(b, EntrySet())
        out: dict[str, str | None] = {}
        if b in legacy:
            out[LEGACY_MARKER_KEY] = None
        if cur is None and not entries and b not in wanted_brokers:
            if out:
                changes[("BROKER", str(b))] = out
            continue
        m = cur.copy() if cur is not None else Marker()
        # A fenced broker's rate waits until it is back (its configs are served by it alone:
        # a write would be retried against a dead broker for the whole retry budget — a
        # minute of `kraftsman apply` per pass on Kafka 4.4 — and its rates before kraftsman
        # cannot be read to record them). Its replica entries are placed like any other.
        wanted_keys = _keys_needed(want_at_broker.get(b, nothing).sides())
        network = any(k in wanted_keys for k in THROTTLE_RATE_KEYS)
        between = ALTER_LOG_DIRS_RATE in wanted_keys
        if b in wanted_brokers and b not in registered:
            if (network and m.rate != rate_str) or (between and m.dir_rate != dir_rate_str):
                waiting.add(b)
        elif b in wanted_brokers:
            first = m.rate is None and m.dir_rate is None  # nothing of ours in force yet
            fresh = set()  # keys whose value before kraftsman is recorded now
            for k in (k for k in RATE_KEYS if k in wanted_keys):
                if first or k not in m.previous:
                    m.previous[k] = cfg.get(k)
                    fresh.add(k)
                # ours (or unset, or what it was before us) follows the limit; a value someone
                # set after us is theirs
                ours = k in fresh or cfg.get(k) in (None, m.previous.get(k), *m.written())
                if ours and cfg.get(k) != value(k):
                    out[k] = value(k)
            if network:
                m.rate = rate_str
            if between:
                m.dir_rate = dir_rate_str
        fin: Marker | None
        if not entries and b not in wanted_brokers and b not in registered and m.written():
            # Nothing of ours moves through it, but the rate we wrote there can be restored
            # only once it is back: the marker, its entries gone, keeps what to restore.
            m.entries = EntrySet()
            fin = m
            waiting.add(b)
        elif not entries and b not in wanted_brokers:
            # Nothing of kraftsman's moves through this broker any more: its rates go back
            # to what they were, unless someone changed them after us (then they are theirs).
            _restore(m, cfg, m.previous, out)
            fin = None
        else:
            if b in registered:  # a kind of copy that ended here: its rate goes back
                needed = _keys_needed(entries.sides()) | wanted_keys
                _restore(m, cfg, [k for k in m.previous if k not in needed], out)
            m.entries = entries
            m.also = set()
            fin = m
        claim[b] = _claiming(cur, fin)
        final[b] = fin
        if out:
            changes[("BROKER", str(b))] = out
    # Each marker encoded once (one of a busy broker holds 10^5 entries); the final one is
    # most often the claim itself.
    claim_text = {b: None if m is None else m.encode() for b, m in claim.items()}
    final_text = {b: claim_text[b] if m == claim[b] else None if m is None else m.encode()
                  for b, m in final.items()}
    return _Writes(stored, claim_text, changes, final_text, tuple(sorted(waiting)))


class _Writes(NamedTuple):
    """What a sync writes, in order: the claiming markers, the configs, the final markers
    (encoded; None: a tombstone)."""

    stored: Mapping[int, str]
    claim: dict[int, str | None]
    changes: dict[tuple[str, str], dict[str, str | None]]
    final: dict[int, str | None]
    waiting: tuple[int, ...]


def _apply(admin: ClusterAdmin, w: _Writes) -> Synced:
    # Markers first: they say which topic entries and rates are kraftsman's, so nothing is
    # written before a marker claims it, and nothing stops being claimed before it is gone.
    problems = _write(admin, w.stored, w.claim)
    if problems:
        return Synced(problems)
    written = {**w.stored, **{b: v for b, v in w.claim.items() if v is not None}}
    for kind in ("BROKER", "TOPIC"):
        batch = {r: c for r, c in w.changes.items() if r[0] == kind}
        problems = _problems(admin.incremental_alter_configs(batch))
        if problems:
            return Synced(problems)
    return Synced(_write(admin, written, w.final), w.waiting)


def _partition_bits(tps: Iterable[TopicPartition]) -> dict[str, int]:
    """topic -> the bitmap of its partitions among ``tps``."""
    groups: dict[str, list[int]] = {}
    for tp in tps:
        groups.setdefault(tp.topic, []).append(tp.partition)
    return {t: bitmaps.from_members(ps) for t, ps in groups.items()}


def _still_copying(entries: EntrySet, admin: ClusterAdmin) -> EntrySet:
    """The log-dir entries (another run's) whose broker still makes a future replica of the
    partition: the others' copies ended, and so does the need for their rate."""
    if not entries:
        return EntrySet()
    listed = list(entries)
    dirs = admin.describe_log_dirs(sorted({e.broker for e in listed}),
                                   sorted({e.tp for e in listed}))
    copying = {(r.tp, b) for b, ds in dirs.items() for d in ds for r in d.replicas if r.future}
    # a broker that did not answer (down) keeps its entries: it cannot be asked
    return EntrySet.of(e for e in listed if (e.tp, e.broker) in copying or e.broker not in dirs)


def _restore(m: Marker, cfg: Mapping[str, str | None], keys: Iterable[str],
             out: dict[str, str | None]) -> None:
    """Put ``keys`` back to their values before kraftsman (a key someone changed after us is
    left as theirs), and forget them: a later copy records them anew."""
    for k in list(keys):
        if cfg.get(k) in m.written():
            out[k] = m.previous.get(k)
        m.previous.pop(k, None)
    # no longer written by us (the claim written before the configs change still names it:
    # see _claiming)
    if not any(k in m.previous for k in THROTTLE_RATE_KEYS):
        m.rate = None
    if ALTER_LOG_DIRS_RATE not in m.previous:
        m.dir_rate = None


def _claiming(cur: Marker | None, fin: Marker | None) -> Marker | None:
    """The marker that claims both what ``cur`` claimed and what ``fin`` will."""
    if fin is None or cur is None:
        return cur if fin is None else fin
    # its ``previous`` is cur's, unless cur had no rate to replace any; its entries are
    # fin's own set when that holds cur's (no copy of 10^5 entries; neither changes again)
    entries = fin.entries if cur.entries <= fin.entries else fin.entries | cur.entries
    return Marker(fin.rate, dict(fin.previous), entries, cur.written() - fin.written(),
                  fin.dir_rate)


def _write(admin: ClusterAdmin, stored: Mapping[int, str],
           markers: Mapping[int, str | None]) -> list[str]:
    """Write the (encoded) markers that differ from ``stored`` (None: a tombstone where one
    is)."""
    changes: dict[int, str | None] = {}
    for b, encoded in markers.items():
        if stored.get(b) != encoded:
            changes[b] = encoded
    return admin.write_throttle_markers(changes) if changes else []


def _decoded(stored: Mapping[int, str]) -> dict[int, Marker]:
    out = {}
    for b, value in stored.items():
        m = Marker.decode(value, b)
        if m is not None:
            out[b] = m
    return out


def _problems(results: Mapping[tuple[str, str], ApiResult]) -> list[str]:
    return [f"{r[0].lower()} {r[1]}: {res.message or res.error.name}"
            for r, res in results.items() if not res.ok]


def placed(admin: ClusterAdmin, brokers: Iterable[int] | None = None) -> dict[int, Marker]:
    """The kraftsman markers in the cluster (for views and tests)."""
    markers = _decoded(admin.read_throttle_markers())
    if brokers is None:
        return markers
    wanted = set(brokers)
    return {b: m for b, m in markers.items() if b in wanted}
