"""Removing brokers from the CLI: `kraftsman apply` of a remove-brokers plan cordons the
brokers before its moves and says Drained after them; a cancelled one uncordons; and
`kraftsman cluster cordon|uncordon|unregister-broker` do the steps by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller_core.planning.render import RenderOptions, render
from controller_core.planning.result import PartitionMove
from kraftsman.cli import main
from kraftsman.resources import parse_resource
from tests.helpers import cluster_yaml

ORDERS = ("{name: orders, partitions: 2, replicationFactor: 2, sizeBytesPerPartition: "
          "2000000, assignment: [[3, 1], [1, 3]]}")
CLUSTER = cluster_yaml(ORDERS)
OLD_CLUSTER = cluster_yaml(ORDERS, metadata_version="4.2-IV1")


def step(name: str, n: int, of: int, partitions: str, *, cancel: bool = False,
         goal: str = "remove-brokers 3") -> str:
    """A resource as `kraftsman plan` renders it (the annotations are what apply reads)."""
    return f"""
apiVersion: kraftsman.io/v1alpha1
kind: PartitionReassignment
metadata:
  name: {name}
  annotations:
    kraftsman.io/plan-step: "{n}/{of}"
    kraftsman.io/plan-goal: "{goal}"
spec:
  clusterRef: {{name: demo}}
  cancel: {"true" if cancel else "false"}
  partitions: {partitions}
"""


P0 = "[{topic: orders, partition: 0, replicas: [0, 1]}]"
P1 = "[{topic: orders, partition: 1, replicas: [1, 2]}]"
BOTH = "[{topic: orders, partition: 0, replicas: [0, 1]}, {topic: orders, partition: 1, " \
       "replicas: [1, 2]}]"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def describe(capsys: pytest.CaptureFixture[str], state: Path) -> dict[int, dict[str, object]]:
    code, out, _ = run(capsys, "describe", "cluster", "-o", "json", "--state-dir", str(state))
    assert code == 0
    return {b["id"]: b for b in json.loads(out)["brokers"]}


def test_the_plans_annotation_is_what_apply_reads() -> None:
    """`kraftsman plan` renders the goal apply parses, for one broker and for several."""
    from kraftsman.commands.removal import is_last_step, removed_brokers
    move = PartitionMove("orders", 0, (3, 1), (0, 1), 10, 3)
    for goal, brokers in (("remove-brokers 3", (3,)), ("remove-brokers 3,4 +balance", (3, 4)),
                          ("rebalance", ())):
        (res,) = render([move], RenderOptions(cluster="demo", goal=goal))
        import yaml
        r = parse_resource(yaml.safe_load(res.text.split("\n", 3)[-1]))
        assert removed_brokers(r) == brokers and is_last_step(r)


def test_apply_cordons_first_then_reports_drained(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    code, out, err = run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER),
                         "-f", write(tmp_path, "s1.yaml", step("rm-1", 1, 2, P0)),
                         "--state-dir", state)
    assert code == 0, err
    assert "broker 3: Cordoned (no new replica is placed on it)" in out
    assert "Drained" not in out  # step 1 of 2: not the end yet
    assert describe(capsys, tmp_path / "state")[3]["cordonedLogDirs"] == "*"
    code, out, err = run(capsys, "apply", "-f", write(tmp_path, "s2.yaml", step("rm-2", 2, 2, P1)),
                         "--state-dir", state, "-o", "json")
    assert code == 0, err
    (summary,) = json.loads(out)
    assert summary["phase"] == "Completed" and summary["cordon"]["cordoned"] == [3]
    assert summary["brokers"] == [{"id": 3, "state": "Drained",
                                   "message": "broker 3: Drained (no replica, leads nothing)"}]
    code, out, _ = run(capsys, "describe", "cluster", "--state-dir", state)
    assert "online, cordoned (*)" in out


def test_apply_says_when_a_broker_still_holds_something(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    """The plan's last step moved only p0 (p1 was left out): broker 3 is not Drained, and the
    apply exits 1 saying what it holds."""
    state = str(tmp_path / "state")
    code, out, _ = run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER),
                       "-f", write(tmp_path, "s.yaml", step("rm", 1, 1, P0)), "--state-dir", state)
    assert code == 1
    assert "broker 3 still holds orders-1 (replica) — not Drained" in out
    assert "unregister-broker" not in out


def test_a_cancelled_removal_uncordons(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    code, _, err = run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER),
                       "-f", write(tmp_path, "s.yaml", step("rm", 1, 1, P0)), "--state-dir", state,
                       "--no-wait")
    assert code == 0, err
    assert describe(capsys, tmp_path / "state")[3]["cordonedLogDirs"] == "*"
    code, out, err = run(capsys, "apply", "-f",
                         write(tmp_path, "x.yaml", step("rm", 1, 1, P0, cancel=True)),
                         "--state-dir", state)
    assert code == 0, err
    assert "brokers 3: uncordoned (the removal is cancelled)" in out
    assert describe(capsys, tmp_path / "state")[3]["cordonedLogDirs"] is None


def test_a_cluster_too_old_to_cordon_is_drained_without_it(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    code, out, err = run(capsys, "apply", "-f", write(tmp_path, "c.yaml", OLD_CLUSTER),
                         "-f", write(tmp_path, "s.yaml", step("rm", 1, 1, BOTH)),
                         "--state-dir", state)
    assert code == 0, err
    assert ("cordoning needs metadata.version 4.3-IV0 (the cluster has 4.2-IV1); the brokers "
            "are drained without it") in out
    assert "broker 3: Drained (no replica, leads nothing)" in out


def test_other_plans_neither_cordon_nor_verify(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    code, out, _ = run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER),
                       "-f", write(tmp_path, "s.yaml", step("rb", 1, 1, P0, goal="rebalance")),
                       "--state-dir", state)
    assert code == 0 and "Cordoned" not in out and "Drained" not in out


def test_cordon_uncordon_and_unregister_by_hand(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    s = ["--state-dir", state]
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), *s)[0] == 0
    code, out, _ = run(capsys, "cluster", "cordon", "2", "3", *s)
    assert code == 0 and out.splitlines() == ["broker 2: Cordoned", "broker 3: Cordoned"]
    code, out, _ = run(capsys, "cluster", "uncordon", "2", *s)
    assert code == 0 and out.strip() == "broker 2: uncordoned"
    code, _, err = run(capsys, "cluster", "cordon", "9", *s)
    assert code == 2 and "broker 9: cannot cordon: broker '9' is not registered" in err
    # running: refused by kraftsman, with what to do
    code, _, err = run(capsys, "cluster", "unregister-broker", "0", *s)
    assert code == 2 and "broker 0 is running (registered and unfenced): stop its process" in err
    # stopped but still holding replicas: refused too
    run(capsys, "cluster", "fail-broker", "3", *s)
    run(capsys, "cluster", "advance", "20", *s)
    code, _, err = run(capsys, "cluster", "unregister-broker", "3", *s)
    assert code == 2 and "broker 3 still holds orders-0 (replica), orders-1 (replica)" in err
    assert "kraftsman plan --goal remove-brokers 3" in err
    # drained and stopped: unregistered, once
    run(capsys, "cluster", "fail-broker", "2", *s)
    run(capsys, "cluster", "advance", "20", *s)
    code, out, _ = run(capsys, "cluster", "unregister-broker", "2", *s)
    assert code == 0 and "broker 2: unregistered" in out
    assert sorted(describe(capsys, tmp_path / "state")) == [0, 1, 3]
    code, _, err = run(capsys, "cluster", "unregister-broker", "2", *s)
    assert code == 2 and "Broker ID 2 is not currently registered (BROKER_ID_NOT_REGISTERED)" in err
    code, _, err = run(capsys, "cluster", "fail-broker", "2", *s)
    assert code == 2 and "broker 2 is not registered" in err
    code, out, _ = run(capsys, "cluster", "restore-broker", "2", *s)
    assert code == 0
    run(capsys, "cluster", "advance", "5", *s)
    assert describe(capsys, tmp_path / "state")[2]["fenced"] is False


def test_describe_cluster_without_the_right_to_read_configs_still_describes(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controller_core import errors
    from controller_core.errors import KafkaApiError
    from controller_core.orchestration import brokers_out

    def refused(admin: object) -> dict[int, str]:
        raise KafkaApiError(errors.CLUSTER_AUTHORIZATION_FAILED, "DescribeConfigs: needs "
                                                                 "DESCRIBE_CONFIGS")

    state = str(tmp_path / "state")
    assert run(capsys, "apply", "-f", write(tmp_path, "c.yaml", CLUSTER), "--state-dir",
               state)[0] == 0
    monkeypatch.setattr(brokers_out, "cordoned_brokers", refused)
    code, out, _ = run(capsys, "describe", "cluster", "--state-dir", state)
    assert code == 0 and "  3\track: a\tonline" in out
    assert out.rstrip().endswith("Cordoned brokers: unknown (DescribeConfigs: needs "
                                 "DESCRIBE_CONFIGS)")
