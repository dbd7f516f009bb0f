"""Call the operator's kopf handlers directly, in-process: no kopf loop, no API server.

For fast tests of the handlers' rules (and for mutation testing: a mutant of a handler takes
effect only in the test's own process). The handlers are the ones ``build_registry`` puts on
a registry, called with the arguments kopf passes; a resource is a dict, and a pass applies
the handler's status patch as the API server does (a merge patch: null removes a field).
The clock is the test's (``Driver.now``), so an embedded cluster only moves when a test
advances it; Events go to ``Driver.events``. The end-to-end tests (test_operator_kmock.py)
run the same handlers under kopf's real event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
from kopf._core.engines import posting  # kopf's Event queue (set up by kopf.operator)

from kraftsman.handlers import Runtime, build_registry
from kraftsman.handlers.common import FINALIZER, PLURALS
from kraftsman.handlers.opstate import encode, saved_state
from kraftsman.resources import API_VERSION

# The embedded cluster of test_operator_kmock.py, smaller: 6 brokers, 6 partitions of 1 MB.
CLUSTER = {"embedded": {
    "brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(6)],
    "controllers": [0, 1, 2],
    "topics": [{"name": "orders", "partitions": 6, "replicationFactor": 3,
                "assignment": [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2], [1, 2, 0],
                               [2, 0, 1]],
                "sizeBytesPerPartition": 1_000_000}],
    "replicationBytesPerSecond": 1_000_000,
}}
REF = {"clusterRef": {"name": "demo"}}
CALL_TIMEOUT = 60.0  # seconds; a pass takes well under one
INDEXES = {"kafkaclusters": "KafkaCluster", "preas_users": "PartitionReassignment",
           "le_users": "LeaderElection", "kq_users": "KafkaQuorum",
           "auto_rebalances": "KafkaRebalance"}


class Driver:
    def __init__(self, state_dir: Path) -> None:
        self.now = 1000.0
        self.rt = Runtime(state_dir, tick_seconds=0.5, time_scale=1.0,
                          checkpoint_seconds=3600.0, fsync=False, clock=lambda: self.now)
        self.registry = build_registry(self.rt)
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []  # (type, reason, message)
        self.status_patch: dict[str, Any] = {}  # what the last call wrote to the status
        self.patch = kopf.Patch()  # the last call's whole patch (metadata too)
        self.settings = kopf.OperatorSettings()

    def exit(self) -> None:
        """This operator process ends (kill -9): nothing is saved or closed, and the kernel
        drops its holds on the embedded clusters' directories, so the next process opens
        them."""
        for opened in self.rt.clusters.values():
            if opened.dir_lock is not None:
                opened.dir_lock.__exit__(None, None, None)

    def handler(self, kind: str, id_: str) -> Callable[..., Any]:
        plural = PLURALS[kind]
        for reg in (self.registry._spawning, self.registry._changing,
                    self.registry._indexing):
            for h in reg.get_all_handlers():
                if h.id == id_ and h.selector is not None and h.selector.plural == plural:
                    return h.fn
        raise KeyError(f"no handler {id_} for {kind}")

    async def stop(self) -> None:
        """The operator stops: kopf runs the registry's cleanup handlers."""
        for h in self.registry._activities.get_all_handlers():
            if h.activity == "cleanup":  # kopf.Activity.CLEANUP (a StrEnum)
                result = h.fn(logger=logging.getLogger("test"))
                if asyncio.iscoroutine(result):
                    await result

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        obj = {"apiVersion": API_VERSION, "kind": kind,
               "metadata": {"name": name, "namespace": "default", "uid": f"uid-{kind}-{name}",
                            "generation": 1, "finalizers": [FINALIZER]},  # as kopf adds it
               "spec": dict(spec), "status": {}}
        self.objects[(kind, name)] = obj
        return obj

    def set_spec(self, obj: dict[str, Any], changes: dict[str, Any]) -> None:
        """A spec edit: a new generation."""
        for k, v in changes.items():
            if v is None:
                obj["spec"].pop(k, None)
            else:
                obj["spec"][k] = v
        obj["metadata"]["generation"] += 1

    def delete(self, obj: dict[str, Any]) -> None:
        self.objects.pop((obj["kind"], obj["metadata"]["name"]), None)

    async def index(self, index_id: str) -> dict[Any, list[Any]]:
        kind = INDEXES[index_id]
        fn = self.handler(kind, index_id)
        out: dict[Any, list[Any]] = {}
        for (k, _), obj in self.objects.items():
            if k != kind:
                continue
            got = await fn(namespace="default", name=obj["metadata"]["name"], spec=obj["spec"],
                           status=obj["status"], body=obj, meta=obj["metadata"])
            for key, value in (got or {}).items():
                out.setdefault(key, []).append(value)
        return out

    async def call(self, obj: dict[str, Any], id_: str, **extra: Any) -> Any:
        """One handler call; its status patch is applied to ``obj``; returns its result."""
        patch = self.patch = kopf.Patch()
        fn = self.handler(obj["kind"], id_)
        indexes = {i: await self.index(i) for i in INDEXES}
        queue: asyncio.Queue[Any] = asyncio.Queue()
        tokens: list[tuple[Any, Any]] = [
            (posting.settings_var, posting.settings_var.set(self.settings)),
            (posting.event_queue_var, posting.event_queue_var.set(queue)),
            (posting.event_queue_loop_var,
             posting.event_queue_loop_var.set(asyncio.get_running_loop()))]
        meta = obj["metadata"]
        try:
            # Bounded: a handler that awaits forever fails its test instead of hanging the
            # run (mutmut's timeout counts CPU seconds, and an await uses none).
            return await asyncio.wait_for(fn(
                spec=obj["spec"], status=obj["status"], meta=meta, body=obj, patch=patch,
                uid=meta["uid"], name=meta["name"], namespace=meta["namespace"],
                logger=logging.getLogger("test"), **{**indexes, **extra}), CALL_TIMEOUT)
        finally:
            for var, token in reversed(tokens):
                var.reset(token)
            while not queue.empty():
                e = queue.get_nowait()
                self.events.append((e.type, e.reason, e.message))
            self.status_patch = dict(patch.get("status") or {})
            for k, v in self.status_patch.items():
                if v is None:
                    obj["status"].pop(k, None)
                else:
                    obj["status"][k] = v

    async def ready_cluster(self, name: str = "demo",
                            spec: dict[str, Any] | None = None) -> dict[str, Any]:
        kc = self.create("KafkaCluster", name, spec or CLUSTER)
        await self.call(kc, "reconcile")
        assert kc["status"]["phase"] == "Ready", kc["status"]
        return kc

    async def tick(self, obj: dict[str, Any], seconds: float = 1.0, *,
                   cluster: str = "demo") -> None:
        """Time passes; the cluster's timer runs (it moves the embedded cluster), then the
        resource's."""
        self.now += seconds
        kc = self.objects.get(("KafkaCluster", cluster))
        if kc is not None:
            await self.call(kc, "reconcile")
        await self.call(obj, "reconcile")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"].get("conditions", []) if c["type"] == type_)


def outbox(obj: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The milestone Events the pass queued (rt.settings is None here: nothing is posted)."""
    state = saved_state(obj["status"]) or {}
    return [(reason, message, warning) for _, reason, message, warning in state.get("outbox", [])]


def deliver_events(obj: dict[str, Any]) -> None:
    """As if a later pass had posted the queued Events (opstate.post_events, which needs a
    real API server, is exercised by test_operator_kmock.py): the outbox empties."""
    state = saved_state(obj["status"])
    assert state is not None
    state["outbox"] = []
    state["rev"] = int(state.get("rev", 0)) + 1  # newer than the operator's own copy
    obj["status"]["operationState"] = encode(state)
