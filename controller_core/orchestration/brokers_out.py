"""Taking brokers out of a cluster: cordon, drain, verify, unregister — through the port only.

The order is the one Strimzi follows on Kafka 4.3+: the brokers are **cordoned** first
(KIP-1066: ``cordoned.log.dirs=*``), so that no topic or partition created while they drain
lands on them; the drain itself is a reassignment (the planner's remove-brokers goal, run by
the reassignment executor); then each broker is **verified** to hold no replica and lead
nothing before it is called Drained — never from the plan's word alone, since a topic created
on a cluster too old to cordon, or a reassignment made by hand, can put a replica back. Once
the broker processes are gone, **unregistering** them (UnregisterBroker) takes them out of
describe cluster, where KRaft otherwise keeps them, fenced, for good.

Cordoning is undone on a cancel or a reject (:func:`uncordon`): a cordoned broker also refuses
every reassignment that keeps a replica on it, a rollback included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller_core import errors
from controller_core.admin import CORDONED_LOG_DIRS, ClusterAdmin
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.metadata.versions import cordon_supported, cordon_unsupported_message
from controller_core.model import TopicPartition

DRAINED = "Drained"
CORDONED = "Cordoned"
DRAINING = "Draining"
HELD_LIMIT = 5  # partitions named in a "still holds" message; the count says the rest


@dataclass(frozen=True, slots=True)
class CordonOutcome:
    """``cordoned``: the brokers the controller now keeps new replicas off; ``note``: why
    none were cordoned (a cluster too old for it) — the drain goes on without; ``problems``:
    refusals, one line each."""

    cordoned: tuple[int, ...] = ()
    note: str | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerCheck:
    """What a broker being removed still holds: each partition with a replica on it, and
    whether it leads that partition. Empty: Drained."""

    broker: int
    held: tuple[tuple[TopicPartition, bool], ...] = ()

    @property
    def drained(self) -> bool:
        return not self.held

    @property
    def message(self) -> str:
        if self.drained:
            return f"broker {self.broker}: {DRAINED} (no replica, leads nothing)"
        shown = ", ".join(f"{tp} ({'replica, leader' if leads else 'replica'})"
                          for tp, leads in self.held[:HELD_LIMIT])
        more = len(self.held) - HELD_LIMIT
        if more > 0:
            shown += f" and {more} more partition(s)"
        return f"broker {self.broker} still holds {shown} — not {DRAINED}"


def _unsupported_note(admin: ClusterAdmin) -> str | None:
    level = admin.metadata_version()
    if level is not None and not cordon_supported(level):
        return cordon_unsupported_message(level)
    return None


def cordon(admin: ClusterAdmin, brokers: Sequence[int]) -> CordonOutcome:
    """Cordon every log directory of ``brokers``, where the cluster's metadata.version
    allows it; on an older cluster, nothing is sent and ``note`` says why."""
    if not brokers:
        return CordonOutcome()
    try:
        note = _unsupported_note(admin)
        if note is not None:
            return CordonOutcome(note=note)
        results = admin.set_cordoned(dict.fromkeys(brokers, True))
    except KafkaApiError as e:
        return CordonOutcome(problems=(f"cordoning brokers {list(brokers)}: {e.message}",))
    for r in results.values():
        # a cluster that does not report its metadata.version refuses by name
        if r.error == errors.INVALID_CONFIG and "metadata.version" in r.message:
            return CordonOutcome(note=f"cordoning is refused ({r.message}); the brokers are "
                                      "drained without it")
    return CordonOutcome(
        cordoned=tuple(b for b in brokers if results[b].ok),
        problems=tuple(f"broker {b}: cannot cordon: {r.message or r.error.name}"
                       for b, r in sorted(results.items()) if not r.ok))


def uncordon(admin: ClusterAdmin, brokers: Sequence[int]) -> list[str]:
    """Undo :func:`cordon` on the brokers still running; the problems, one line each (a
    broker that is not running keeps its cordon until it runs again)."""
    if not brokers:
        return []
    try:
        if _unsupported_note(admin) is not None:
            return []  # nothing was cordoned
        running = {b.id for b in admin.describe_cluster().brokers if not b.fenced}
        problems = [f"broker {b}: not running, so still cordoned (its cordoned.log.dirs "
                    "stays set until it runs again)" for b in brokers if b not in running]
        results = admin.set_cordoned({b: False for b in brokers if b in running})
    except KafkaApiError as e:
        return [f"uncordoning brokers {list(brokers)}: {e.message}"]
    return problems + [f"broker {b}: cannot uncordon: {r.message or r.error.name}"
                       for b, r in sorted(results.items()) if not r.ok]


def cordoned_brokers(admin: ClusterAdmin) -> dict[int, str]:
    """Every running broker with a non-empty ``cordoned.log.dirs``, and its value. A fenced
    broker is not asked: a broker's own configs are read on that broker, and a stopped one
    would only time the whole call out."""
    ids = [b.id for b in admin.describe_cluster().brokers if not b.fenced]
    configs = admin.describe_configs([("BROKER", str(b)) for b in ids])
    out = {}
    for b in ids:
        value = configs.get(("BROKER", str(b)), {}).get(CORDONED_LOG_DIRS)
        if value and value.strip():
            out[b] = value
    return out


def check_drained(admin: ClusterAdmin, brokers: Iterable[int]) -> list[BrokerCheck]:
    """Each broker's holdings as the cluster describes them now (replica lists include the
    replicas a move is still adding or removing)."""
    wanted = sorted(set(brokers))
    held: dict[int, list[tuple[TopicPartition, bool]]] = {b: [] for b in wanted}
    for d in admin.describe_partitions():
        for b in wanted:
            if b in d.replicas or d.leader == b:
                held[b].append((d.tp, d.leader == b))
    return [BrokerCheck(b, tuple(sorted(held[b]))) for b in wanted]


def unregister(admin: ClusterAdmin, broker: int) -> ApiResult:
    """UnregisterBroker, for a broker whose process is gone. Refused here for a running
    (unfenced) broker — Kafka 4.4 would unregister it anyway and leave the live broker
    outside the cluster — and for a broker that still holds a replica, which would point at
    a broker that no longer exists. An unknown id gets Kafka's own answer."""
    listed = {b.id: b for b in admin.describe_cluster().brokers}
    b = listed.get(broker)
    if b is not None and not b.fenced:
        return ApiResult(errors.INVALID_REQUEST, (
            f"broker {broker} is running (registered and unfenced): stop its process first, "
            "then unregister it once it is fenced — Kafka would unregister a running broker "
            "too, and it would stay outside the cluster (its heartbeats refused with "
            "STALE_BROKER_EPOCH) until restarted"))
    if b is not None:
        (check,) = check_drained(admin, [broker])
        if not check.drained:
            return ApiResult(errors.INVALID_REQUEST, (
                f"{check.message}: reassign its partitions first (kraftsman plan --goal "
                f"remove-brokers {broker}), then unregister it"))
    return admin.unregister_broker(broker)
