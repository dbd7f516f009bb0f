"""`kraftsman operator run` argument errors, and the runtime's backoff — no Kubernetes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from kraftsman.cli_errors import UsageError
from kraftsman.commands import operator as operator_cmd
from kraftsman.handlers.runtime import Backoff, Runtime, spec_digest


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    operator_cmd.register(p.add_subparsers())
    return p.parse_args(["operator", "run", *argv])


def test_bad_tick_and_time_scale_are_usage_errors(tmp_path: Path) -> None:
    args = parse("--state-dir", str(tmp_path), "--tick", "0")
    with pytest.raises(UsageError, match=r"--tick 0\.0: must be > 0"):
        args.handler(args)
    args = parse("--state-dir", str(tmp_path), "--time-scale", "-1")
    with pytest.raises(UsageError, match="--time-scale"):
        args.handler(args)


def test_unwritable_state_dir_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    args = parse("--state-dir", str(blocker / "state"))
    with pytest.raises(UsageError, match=r"--state-dir .*not writable"):
        args.handler(args)


def test_peering_and_standalone_are_exclusive() -> None:
    with pytest.raises(SystemExit):
        parse("--peering", "x", "--standalone")


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    b = Backoff(base=1.0, cap=5.0)
    assert [b.failed("k", 100.0) for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert not b.ready("k", 104.0) and b.ready("k", 105.0)
    b.succeeded("k")
    assert b.ready("k", 0.0) and b.failed("k", 0.0) == 1.0


def test_operation_state_round_trips_and_survives_a_new_runtime(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, fsync=False)
    assert rt.load_op("u1") is None
    rt.save_op("u1", {"digest": "d", "executor": {"phase": "Running"}})
    assert Runtime(tmp_path).load_op("u1") == {"digest": "d", "executor": {"phase": "Running"}}
    rt.op_path("u2").write_bytes(b"{not json")
    assert rt.load_op("u2") is None  # unreadable: start over rather than crash
    rt.forget_op("u1")
    assert rt.load_op("u1") is None


def test_spec_digest_ignores_key_order() -> None:
    assert spec_digest({"a": 1, "b": [1, 2]}) == spec_digest({"b": [1, 2], "a": 1})
    assert spec_digest({"a": 1}) != spec_digest({"a": 2})


def test_short_peering_lifetime_is_a_usage_error(tmp_path: Path) -> None:
    args = parse("--state-dir", str(tmp_path), "--peering-lifetime", "5")
    with pytest.raises(UsageError, match=r"--peering-lifetime 5: must be at least 15"):
        args.handler(args)


def test_default_priority_prefers_the_older_replica_and_never_ties() -> None:
    from kraftsman.handlers.runtime import default_priority

    started = 1_795_000_000.0
    older = [default_priority(started) for _ in range(50)]
    newer = [default_priority(started + 0.001) for _ in range(50)]
    assert min(older) > max(newer) > 0  # one millisecond later always stands by
    assert max(older) < 2**53  # exact in JSON (the peering object's status)


@pytest.mark.parametrize(("argv", "message"), [
    (["--planner-resources", "{cpu: 1}"], "--planner-resources: not JSON"),
    (["--planner-resources", '{"limits": {"memory": "lots"}}'],
     "--planner-resources: limits.memory 'lots' is not a Kubernetes quantity"),
    (["--planner-resources", '{"claims": []}'],
     "--planner-resources: an object with requests and/or limits"),
    (["--planner-image-pull-secret", "Reg_Cred"],
     "--planner-image-pull-secret 'Reg_Cred': not a Secret name"),
])
def test_bad_planner_job_settings_are_reported_by_kafkarebalances(
        tmp_path: Path, argv: list[str], message: str) -> None:
    """Found when the operator starts, not when its first Job is refused by the API — and
    reported by every KafkaRebalance instead of ending the operator (a crash loop over a
    chart value would stop every other resource too)."""
    from kraftsman.commands.operator import planner_settings
    from kraftsman.planner_job_spec import (
        DEFAULT_RESOURCES,
        PlannerConfig,
        PlannerUnavailable,
        planner_job,
    )

    resources, secrets, problem = planner_settings(parse("--state-dir", str(tmp_path), *argv))
    assert problem is not None and message in problem
    assert resources == DEFAULT_RESOURCES and secrets == ()
    config = PlannerConfig(image="kraftsman:1", resources=resources, problem=problem)
    with pytest.raises(PlannerUnavailable, match=re.escape(message)) as refused:
        planner_job(config, name="rb", namespace="default", uid="u", proposal_id=1,
                    embedded=False, spark_master=None)
    assert "fix the chart value" in str(refused.value)
    good = planner_settings(parse("--state-dir", str(tmp_path)))
    assert good == (DEFAULT_RESOURCES, (), None)
