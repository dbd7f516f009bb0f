"""The voter-change walker, unchanged, on both backends: the embedded cluster in-process and
the ``kafka`` backend (DescribeQuorum, AddRaftVoter, RemoveRaftVoter) against ``cluster
serve``. Polls with a wall-clock deadline; never a fixed sleep standing in for the core."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controller_core.backends import RetryPolicy, open_kafka_admin
from controller_core.orchestration.voters import QuorumAdmin, VoterChangeWalker, WalkPhase
from tests.helpers import cluster
from tests.serve.harness import served


def walk(admin: QuorumAdmin, target: list[int], tick: object, limit: float = 60.0) -> list[str]:
    walker = VoterChangeWalker(admin, target)
    actions: list[str] = []
    deadline = time.monotonic() + limit
    while True:
        p = walker.step()
        if not actions or actions[-1] != p.action:
            actions.append(p.action)
        if p.phase is WalkPhase.COMPLETED:
            return actions
        assert time.monotonic() < deadline, actions[-5:]
        tick()  # type: ignore[operator]


@pytest.mark.parametrize("backend", ["embedded", "kafka"])
def test_replace_a_voter_on_both_backends(backend: str, tmp_path: Path) -> None:
    c = cluster(tmp_path / "c")
    if backend == "embedded":
        actions = walk(c, [0, 1, 3], lambda: c.advance(0.5))
        final = c.describe_quorum()
    else:
        with served(c, time_scale=50) as s:
            admin = open_kafka_admin(s.bootstrap, retry=RetryPolicy(total_seconds=20))
            try:
                before = admin.describe_quorum()
                assert set(before.current_voters) == {0, 1, 2}
                assert before.leader_id == s.call(lambda: c.describe_quorum().leader_id)
                actions = walk(admin, [0, 1, 3], lambda: time.sleep(0.02))
                final = admin.describe_quorum()
            finally:
                admin.close()
    assert set(final.current_voters) == {0, 1, 3}
    assert 0 <= final.max_follower_lag_time_ms < 60_000  # against the leader's clock
    steps = [a for a in actions if a.startswith(("adding", "removing"))]
    assert steps[0] == "adding voter 3" and steps[-1] == "removing voter 2"


def test_refused_credentials_are_not_reported_as_unreachable(tmp_path: Path) -> None:
    from controller_core.errors import KafkaApiError
    from controller_core.wire.auth import AuthFile, Authorizer

    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "admin", "password": "right"}],
        "acls": [{"principal": "User:admin", "operations": ["ALTER"]}]}))
    with served(cluster(tmp_path / "c"), auth, time_scale=50) as s, \
            pytest.raises(KafkaApiError) as e:
        open_kafka_admin(s.bootstrap, {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "admin", "sasl.password": "wrong"},
            retry=RetryPolicy(total_seconds=3))
    assert e.value.error.name == "SASL_AUTHENTICATION_FAILED" and e.value.error.code == 58
    assert "wrong" not in str(e.value)  # never echo a secret
