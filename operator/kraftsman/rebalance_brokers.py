"""KafkaRebalance remove-brokers: the broker part of the state machine, pure like the rest.

``rebalance_flow.decide`` asks for these transitions; the handler performs the actions and
hands each outcome back to a function here, which writes it into the status and says which
Events go out — so every transition is tested without Kubernetes or Kafka
(tests/operator/test_rebalance_brokers_flow.py). The order and the rules are
``controller_core.orchestration.brokers_out``'s: cordon at approval, drain, verify, report
Drained (never while a broker holds anything), and with ``spec.unregister`` unregister each
broker once its process is gone. A reject or a cancelled step uncordons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kraftsman.resources import KafkaRebalanceSpec
from kraftsman.status import KafkaRebalanceStatus, RemovedBroker

BROKERS_DRAINED = "BrokersDrained"  # condition: every removed broker holds nothing
BROKERS_UNREGISTERED = "BrokersUnregistered"  # condition, with spec.unregister
PENDING_UNREGISTER = ("Drained", "WaitingForShutdown")


@dataclass(frozen=True)
class Cordon:
    brokers: tuple[int, ...]


@dataclass(frozen=True)
class Uncordon:
    brokers: tuple[int, ...]


@dataclass(frozen=True)
class Unregister:
    broker: int


@dataclass(frozen=True)
class Drain:
    """A broker's holdings, described afresh: (broker, drained, message)."""

    broker: int
    drained: bool
    message: str


@dataclass(frozen=True)
class Note:
    """What a transition tells: an Event (reason, message, warning) and, when ``condition``
    is set, that condition (status True/False) with the same reason and message."""

    reason: str
    message: str
    warning: bool = False
    condition: str | None = None
    status: bool = False


def removing(spec: KafkaRebalanceSpec) -> tuple[int, ...]:
    return tuple(spec.brokers or ()) if spec.goal == "remove-brokers" else ()


def start(st: KafkaRebalanceStatus, spec: KafkaRebalanceSpec) -> Cordon | None:
    """At approval: every broker Draining until the cordon's outcome says more."""
    brokers = removing(spec)
    if not brokers:
        return None
    st.brokers = [RemovedBroker(id=b, state="Draining") for b in brokers]
    st.cordon = None
    return Cordon(brokers)


def cordoned(st: KafkaRebalanceStatus, cordoned_ids: Sequence[int], note: str | None,
             problems: Sequence[str]) -> list[Note]:
    """The cordon's outcome (orchestration.brokers_out.CordonOutcome's fields)."""
    st.cordon = note or ("; ".join(problems) if problems else None)
    for b in st.brokers:
        if b.id in cordoned_ids:
            b.state, b.message = "Cordoned", "no new replica is placed on it while it drains"
        else:
            b.message = st.cordon or ""
    notes = []
    if cordoned_ids:
        notes.append(Note("Cordoned", f"brokers {_ids(cordoned_ids)} cordoned: no new replica "
                                      "is placed on them while they drain"))
    if note:
        notes.append(Note("CordonSkipped", note, warning=True))
    for p in problems:
        notes.append(Note("CordonFailed", f"{p}; the brokers are drained without it",
                          warning=True))
    return notes


def undo(st: KafkaRebalanceStatus) -> Uncordon | None:
    """A reject or a cancel: the brokers this rebalance cordoned are uncordoned."""
    ids = tuple(b.id for b in st.brokers if b.state == "Cordoned")
    return Uncordon(ids) if ids else None


def uncordoned(st: KafkaRebalanceStatus, brokers: Sequence[int],
               problems: Sequence[str]) -> list[Note]:
    if problems:
        for b in st.brokers:
            if b.id in brokers:
                b.message = "; ".join(problems)
        return [Note("UncordonFailed", "; ".join(problems), warning=True)]
    for b in st.brokers:
        if b.id in brokers:
            b.state, b.message = "Draining", "uncordoned: the removal was stopped"
    return [Note("Uncordoned", f"brokers {_ids(brokers)} uncordoned: the removal was "
                               "stopped")]


def verified(st: KafkaRebalanceStatus, checks: Sequence[Drain]) -> tuple[bool, list[Note]]:
    """After the last step: Drained only for a broker that holds nothing."""
    for c in checks:
        for b in st.brokers:
            if b.id == c.broker:
                b.state = "Drained" if c.drained else "NotDrained"
                b.message = c.message
    if not st.brokers:  # a status from before (or edited): record what was checked
        st.brokers = [RemovedBroker(id=c.broker, state="Drained" if c.drained else "NotDrained",
                                    message=c.message) for c in checks]
    left = [c for c in checks if not c.drained]
    if left:
        msg = "; ".join(c.message for c in left)
        return False, [Note("NotDrained", msg, warning=True, condition=BROKERS_DRAINED)]
    msg = f"brokers {_ids([c.broker for c in checks])} Drained: no replica, no leadership"
    return True, [Note("Drained", msg, condition=BROKERS_DRAINED, status=True)]


def wants_unregister(st: KafkaRebalanceStatus, spec: KafkaRebalanceSpec) -> bool:
    return spec.unregister and any(b.state in PENDING_UNREGISTER for b in st.brokers)


def unregister_step(st: KafkaRebalanceStatus, listed: Mapping[int, bool]
                    ) -> tuple[list[Unregister], list[Note]]:
    """``listed``: the brokers describe cluster lists, and whether each is fenced. A fenced
    Drained broker is unregistered; a running one waits for its process to stop."""
    actions: list[Unregister] = []
    notes: list[Note] = []
    for b in st.brokers:
        if b.state not in PENDING_UNREGISTER:
            continue
        if b.id not in listed:
            b.state, b.message = "Unregistered", "not registered any more"
        elif listed[b.id]:
            actions.append(Unregister(b.id))
        elif b.state != "WaitingForShutdown":
            b.state = "WaitingForShutdown"
            b.message = (f"broker {b.id} is Drained; stop its process: it is unregistered "
                         "once fenced")
            notes.append(Note("WaitingForShutdown", b.message))
    notes += _all_unregistered(st)
    return actions, notes


def unregistered(st: KafkaRebalanceStatus, broker: int, ok: bool, message: str) -> list[Note]:
    """UnregisterBroker's answer (through brokers_out.unregister's guard)."""
    for b in st.brokers:
        if b.id == broker:
            if ok:
                b.state, b.message = "Unregistered", "unregistered: describe cluster no " \
                                                     "longer lists it"
            else:
                b.message = f"cannot unregister: {message}"
    if not ok:
        return [Note("UnregisterFailed", f"broker {broker}: {message}", warning=True)]
    return [Note("Unregistered", f"broker {broker} unregistered"), *_all_unregistered(st)]


def _all_unregistered(st: KafkaRebalanceStatus) -> list[Note]:
    if st.brokers and all(b.state == "Unregistered" for b in st.brokers):
        return [Note(BROKERS_UNREGISTERED, f"brokers {_ids([b.id for b in st.brokers])} "
                     "unregistered", condition=BROKERS_UNREGISTERED, status=True)]
    return []


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(map(str, ids))
