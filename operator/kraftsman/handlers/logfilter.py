"""What kopf logs per object, as a platform user wants it at the default level (INFO).

kopf logs "Timer 'reconcile' succeeded." at INFO for every object on every tick (880 lines a
minute with 13 objects), and every retry of a handler that waits — a KafkaCluster whose
deletion waits for the operations that use it, a reassignment rolling back — at ERROR, every
1-2 s ("failed temporarily"), and posts each as an Event. Waiting is normal: a handler raises
:class:`Waiting` (a kopf TemporaryError), and :class:`QuietLogs`, on kopf's per-object logger,
says it at INFO once per object until the message changes, then at DEBUG; a timer's success
is said once per object and timer (which replica acts on what stays visible), then goes to
DEBUG. Real failures keep kopf's own level.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import kopf

KOPF_OBJECTS = "kopf.objects"
_TEMPORARY = " failed temporarily: "
_KNOWN_CAP = 10_000  # distinct waiting messages / objects remembered (oldest dropped first)
_waiting: OrderedDict[str, None] = OrderedDict()


def _remember(table: OrderedDict[str, None], key: str) -> None:
    table[key] = None
    table.move_to_end(key)
    while len(table) > _KNOWN_CAP:
        table.popitem(last=False)


class Waiting(kopf.TemporaryError):  # type: ignore[misc]
    """A handler waits for something that is not a fault (another resource to go, moves to
    roll back); kopf calls it again after ``delay``."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message, delay=delay)
        _remember(_waiting, message)


class QuietLogs(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._said: dict[str, str] = {}  # object uid (or name) -> the waiting message said
        self._ticked: OrderedDict[str, None] = OrderedDict()  # (object, timer) said once

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        ref = getattr(record, "k8s_ref", None) or {}
        who = str(ref.get("uid") or ref.get("name") or "")
        if msg.startswith("Timer ") and msg.endswith(" succeeded."):
            first = f"{who} {msg}" not in self._ticked
            _remember(self._ticked, f"{who} {msg}")
            return True if first else self._demote(record, logging.DEBUG)
        if _TEMPORARY in msg:
            reason = msg.split(_TEMPORARY, 1)[1]
            if reason in _waiting:
                if self._said.get(who) == reason:
                    return self._demote(record, logging.DEBUG)
                if len(self._said) >= _KNOWN_CAP:
                    self._said.clear()
                self._said[who] = reason
                record.msg, record.args = msg.replace(_TEMPORARY, " waits: ", 1), None
                return self._demote(record, logging.INFO)
        elif msg.endswith(" succeeded."):
            self._said.pop(who, None)  # a handler that waited is done: say the next wait
        return True

    @staticmethod
    def _demote(record: logging.LogRecord, level: int) -> bool:
        if record.levelno > level:
            record.levelno, record.levelname = level, logging.getLevelName(level)
        return logging.getLogger(KOPF_OBJECTS).isEnabledFor(record.levelno)


def install() -> None:
    """Put the filter on kopf's per-object logger (once per process)."""
    logger = logging.getLogger(KOPF_OBJECTS)
    if not any(isinstance(f, QuietLogs) for f in logger.filters):
        logger.addFilter(QuietLogs())
