"""A resource's timer survives its own writes on a slow API server.

kopf runs a timer only while its ``when=`` filter matches: a watch event that no longer
matches stops it, one that matches again starts it — unless the stopping timer has not
exited yet, in which case kopf keeps it and nothing is started, and the resource waits for
an event that may never come (kopf 1.45's ``spawn_daemons`` skips a handler id still in
memory). kopf writes a timer's patch as two requests, metadata then status, so a pass that
both consumes an annotation and moves the phase shows the API server a moment with the
annotation gone and the old status; if that moment looks idle to the filter and the status
write is slow, the timer is lost. CI saw it: a KafkaRebalance stuck in ``Rebalancing`` for
good while its step had long completed. Real kopf, kmock with slow status writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from handler_driver import CLUSTER
from harness import Api, OperatorThread, cond_is
from test_rebalance_handler import CMS, DOC, JOBS

from controller_core.planning.fingerprint import assignment_fingerprint
from kraftsman.planner_job_spec import PlannerConfig
from kraftsman.proposal import proposal_config_maps
from kraftsman.rebalance_flow import ANNOTATION

SLOW = 0.5  # seconds before a status write applies, and again before it is answered


async def post(api: Api, path: str, body: dict[str, Any]) -> None:
    async with api.session.post(api.base + path, json=body) as r:
        assert r.status < 300, await r.text()


async def merge(api: Api, path: str, body: dict[str, Any]) -> None:
    async with api.session.patch(api.base + path, json=body, headers={
            "Content-Type": "application/merge-patch+json"}) as r:
        assert r.status < 300, await r.text()


async def plan(api: Api, rb: dict[str, Any], steps: int) -> None:
    """The planner Job's work: the proposal's ConfigMaps, then the Job succeeds."""
    topic = CLUSTER["embedded"]["topics"][0]
    assignment = [(topic["name"], p, r) for p, r in enumerate(topic["assignment"])]
    summary = {"goal": "rebalance", "partitionsTotal": 6, "partitionsInPlan": steps,
               "replicasToMove": 3 * steps, "bytesToMove": 3_000_000 * steps,
               "resources": steps, "estimatedSeconds": 9.0,
               "fingerprint": assignment_fingerprint(assignment)}
    for cm in proposal_config_maps("default", "rb", "1", rb["metadata"]["uid"], summary,
                                   [DOC.format(n=n) for n in range(steps)]):
        await post(api, CMS, cm)
    await merge(api, f"{JOBS}/rb-plan-1/status", {"status": {
        "succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}})


async def test_an_approval_consumed_on_a_slow_api_server_runs_every_step(
        kmock: Any, api: Api, tmp_path: Path) -> None:
    """Approved by annotation while the proposal is computed (so the timer never idles
    before): the pass that approves removes the annotation and moves to Rebalancing; with
    status writes taking a second, both steps still run, to Ready. Fails when the
    annotation goes before the status says Rebalancing."""
    op = OperatorThread(str(kmock.url), tmp_path / "state")
    op.rt.planner = PlannerConfig(image="kraftsman:test", state_claim="kraftsman-state")
    op.start()
    try:
        await api.create("KafkaCluster", "demo", CLUSTER)
        await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
        rb = await api.create("KafkaRebalance", "rb", {"clusterRef": {"name": "demo"},
                                                       "goal": "rebalance"})
        await api.wait("KafkaRebalance", "rb",
                       lambda o: (o.get("status") or {}).get("phase") == "PendingProposal")
        await api.patch("KafkaRebalance", "rb",
                        {"metadata": {"annotations": {ANNOTATION: "approve"}}})
        kmock.slow_status = {"kafkarebalances": SLOW}
        await plan(api, rb, 2)
        done = await api.wait("KafkaRebalance", "rb", lambda o: (o.get("status") or {}).get(
            "phase") in ("Ready", "Failed"), timeout=60)
        st = done["status"]
        assert st["phase"] == "Ready", st
        assert [s["state"] for s in st["steps"]] == ["Completed", "Completed"]
        assert st["decidedBy"] == "annotation"
        assert ANNOTATION not in (done["metadata"].get("annotations") or {})
    finally:
        await op.astop()
