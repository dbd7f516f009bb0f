"""The kopf handlers of kraftsman — thin: parse the resource, call the core, write status.

:func:`build_registry` puts every handler on a fresh kopf registry bound to one
:class:`~kraftsman.handlers.runtime.Runtime`, so a process (or a test) can run several
independent operators. :func:`configure` applies the settings they rely on.
"""

from __future__ import annotations

from typing import Any

import kopf

from kraftsman import metrics
from kraftsman.handlers import cluster, election, quorum, reassignment, rebalance
from kraftsman.handlers.common import FINALIZER, PLURALS, resource
from kraftsman.handlers.diffbase import DigestDiffBaseStorage
from kraftsman.handlers.logfilter import install as quiet_logs
from kraftsman.handlers.progress import UnmarkedAnnotationsProgressStorage
from kraftsman.handlers.runtime import Runtime
from kraftsman.resources import GROUP

__all__ = ["Runtime", "build_registry", "configure"]

# How often kopf looks again at a timer still running when its resource was deleted (kopf's
# default is 60 s): the finalizer stays until the timer has exited, and a reconcile pass in
# flight at the deletion that writes nothing afterwards wakes nobody earlier.
TIMER_EXIT_POLL_SECONDS = 1.0


def configure(settings: kopf.OperatorSettings, rt: Runtime) -> None:
    """kopf's own bookkeeping goes to annotations, so it never crowds (or is pruned from)
    the status a user reads; errors back off instead of crash-looping; a deleted resource
    goes within a second of its last reconcile pass."""
    settings.persistence.finalizer = FINALIZER
    # without kopf's marker annotation: one write less per new object (progress.py)
    settings.persistence.progress_storage = UnmarkedAnnotationsProgressStorage(prefix=GROUP)
    # A digest, not a copy of the spec: see diffbase.py (API server size limits).
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix=GROUP)
    settings.posting.level = 20  # INFO: milestones become Events
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]  # API errors back off
    settings.watching.server_timeout = 300
    # kube-apiserver's own limit per request (--request-timeout, 60 s): a client that gives
    # up sooner abandons writes the server would finish (a write of an 8,266-partition
    # PartitionReassignment took 22-30+ s on a busy real server; at 30 s each was cut, 504).
    settings.networking.request_timeout = 60
    settings.execution.max_workers = 8
    settings.background.cancellation_polling = TIMER_EXIT_POLL_SECONDS
    quiet_logs()  # no line per timer tick; waiting at INFO, once (logfilter.py)


def build_registry(rt: Runtime, *, serve_metrics: bool = False) -> kopf.OperatorRegistry:
    """``serve_metrics`` adds kopf indexes of every operation's status for ``/metrics``; an
    operator that serves none is spared their work on every watch event."""
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def _startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        configure(settings, rt)
        rt.settings = settings  # kopf's API access (reading Secrets) needs them
        if serve_metrics:
            # kopf's live indexes (kept current by its watches): what /metrics reads
            rt.operations = {kind: kwargs[metrics.index_id(kind)] for kind in PLURALS}

    if serve_metrics:
        for kind in PLURALS:
            # async: a few dict reads on every watch event of every kind, which kopf would
            # otherwise hand to its thread pool and back (a thread hop per event)
            @kopf.index(**resource(kind), registry=registry, id=metrics.index_id(kind))
            async def _operation(namespace: str, name: str, status: Any, **_: Any) -> Any:
                return {(namespace, name): metrics.operation(status)}

    @kopf.on.cleanup(registry=registry)
    def _cleanup(**_: Any) -> None:
        rt.close_all()

    cluster.register(registry, rt)
    reassignment.register(registry, rt)
    election.register(registry, rt)
    quorum.register(registry, rt)
    rebalance.register(registry, rt)
    return registry
