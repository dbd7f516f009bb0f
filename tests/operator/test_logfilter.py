"""What the operator logs per object at the default level (handlers/logfilter.py): no line per
timer tick, and a handler that waits says so at INFO once per object and message, not at
ERROR on every retry (880 success lines a minute with 13 objects, 926 ERROR lines in 20
healthy minutes on a deployed operator)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import kopf
import pytest
from kopf._core.actions.loggers import LocalObjectLogger

from kraftsman.handlers import logfilter
from kraftsman.handlers.logfilter import Waiting


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelname, record.getMessage()))


@pytest.fixture
def captured() -> Iterator[Capture]:
    logger = logging.getLogger(logfilter.KOPF_OBJECTS)
    level, cap = logger.level, Capture()
    logger.setLevel(logging.INFO)  # the operator's default --log-level
    logger.addHandler(cap)
    logfilter.install()
    logfilter.install()  # once per process, however often kopf's startup runs
    try:
        yield cap
    finally:
        logger.removeHandler(cap)
        logger.setLevel(level)
        for f in [f for f in logger.filters if isinstance(f, logfilter.QuietLogs)]:
            logger.removeFilter(f)


def obj_logger(name: str) -> logging.LoggerAdapter:  # type: ignore[type-arg]
    body = {"apiVersion": "kraftsman.io/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}}
    return LocalObjectLogger(body=kopf.Body(body), settings=kopf.OperatorSettings())


def test_waiting_is_said_once_at_info_and_failures_keep_their_level(
        captured: Capture) -> None:
    assert len([f for f in logging.getLogger(logfilter.KOPF_OBJECTS).filters
                if isinstance(f, logfilter.QuietLogs)]) == 1
    demo, other = obj_logger("demo"), obj_logger("other")
    for _ in range(5):
        demo.info("Timer 'reconcile' succeeded.")
    wait = str(Waiting("still used by PartitionReassignment/move; delete or finish those "
                       "first", delay=1.0))
    for _ in range(5):
        demo.error(f"Handler 'teardown' failed temporarily: {wait}")
    other.error(f"Handler 'teardown' failed temporarily: {wait}")  # another object: said
    demo.error("Handler 'teardown' failed temporarily: connection refused")  # no waiting
    demo.info("Handler 'teardown' succeeded.")
    assert captured.lines == [
        ("INFO", "Timer 'reconcile' succeeded."),  # once per object: who acts stays visible
        ("INFO", f"Handler 'teardown' waits: {wait}"),
        ("INFO", f"Handler 'teardown' waits: {wait}"),
        ("ERROR", "Handler 'teardown' failed temporarily: connection refused"),
        ("INFO", "Handler 'teardown' succeeded."),
    ]
