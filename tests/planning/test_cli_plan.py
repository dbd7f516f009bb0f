"""`kraftsman snapshot` / `kraftsman plan` end to end, and every bad input: exit 2, a
message naming the problem, and no output left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller_core.admin import THROTTLE_MARKER_TOPIC
from controller_core.planning.objective import DISK, LEADERS, REPLICAS, compute_loads, rate
from controller_core.planning.report import max_over_mean
from controller_core.planning.snapshot import read_snapshot, write_snapshot
from controller_core.planning.synthetic import make_snapshot
from kraftsman.cli import main

BIN = Path(sys.executable).parent / "kraftsman"

CLUSTER = """
apiVersion: kraftsman.io/v1alpha1
kind: KafkaCluster
metadata: {name: demo}
spec:
  embedded:
    brokers:
    - {id: 0, rack: a, diskBytes: 10000000000}
    - {id: 1, rack: b, diskBytes: 10000000000}
    - {id: 2, rack: c, diskBytes: 10000000000}
    - {id: 3, rack: a, diskBytes: 10000000000}
    - {id: 4, rack: b, diskBytes: 10000000000}
    - {id: 5, rack: c, diskBytes: 10000000000}
    replicationBytesPerSecond: 200000000
    topics:
    - {name: orders, partitions: 12, replicationFactor: 2, sizeBytesPerPartition: 20000000,
       assignment: [[0, 1], [1, 2], [2, 0], [0, 1], [1, 2], [2, 0], [0, 4], [1, 5], [2, 3],
                    [0, 1], [1, 2], [2, 0]]}
    - {name: events, partitions: 6, replicationFactor: 3, sizeBytesPerPartition: 5000000,
       assignment: [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2], [1, 2, 0], [2, 0, 1]]}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def snapshot_loads(d: Path) -> dict[int, list[int]]:
    """Per-broker loads of the snapshot's topics, but kraftsman's throttle-marker topic (the
    throttled apply of the plan makes it, after the plan was computed)."""
    s = read_snapshot(d)
    pt = s.partitions
    rows = [i for i, t in enumerate(pt.topic) if t != THROTTLE_MARKER_TOPIC]
    return compute_loads(s.broker_ids(), [pt.replicas[i] for i in rows],
                         [pt.leader[i] for i in rows], [pt.size_bytes[i] for i in rows],
                         [rate(pt.bytes_in_per_second[i]) for i in rows],
                         [rate(pt.bytes_out_per_second[i]) for i in rows])


@pytest.mark.spark
def test_plan_applied_on_the_embedded_cluster_balances_it_as_predicted(
        spark: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    assert run(capsys, "apply", "-f", str(tmp_path / "cluster.yaml"), "--state-dir", state)[0] == 0
    code, out, err = run(capsys, "snapshot", "--state-dir", state, "--out", str(tmp_path / "s1"))
    assert code == 0, err
    assert "6 brokers, 18 partitions" in out

    plan_dir = tmp_path / "plan"
    code, out, err = run(capsys, "plan", "--snapshot", str(tmp_path / "s1"), "--goal",
                         "rebalance", "--out", str(plan_dir), "--master", "local[2]",
                         "--throttle", "100000000", "--seed", "7",
                         "--max-concurrent-moves-per-broker", "2")
    assert code == 0, err
    assert "plan written to" in out and "rounds ran on: the driver (no JVM)" in out
    assert sorted(p.name for p in plan_dir.iterdir()) == [
        "plan.json", "reassignments", "report.json", "report.md", "report.png", "rollback.json"]
    assert (plan_dir / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((plan_dir / "report.json").read_text())
    summary = report["summary"]
    assert summary["violations"] == [] and summary["replicasToMove"] > 0
    assert summary["estimatedSeconds"] > 0
    docs = [yaml.safe_load(p.read_text())
            for p in sorted((plan_dir / "reassignments").iterdir())]
    assert docs and all(d["spec"]["throttleBytesPerSecond"] == 100_000_000 for d in docs)
    assert all(d["spec"]["maxConcurrentMovesPerBroker"] == 2 for d in docs)
    md = (plan_dir / "report.md").read_text()
    assert "| broker | rack | replicas |" in md
    sources = md.split("## Where the figures come from")[1].split("\n## ")[0]
    assert "- disk capacity: the KafkaCluster spec (brokers[].diskBytes)" in sources
    assert f"- replica sizes (disk): embedded cluster 'demo' in {state}: the leader's " \
        "log size" in sources
    assert "- bytes out: bytes in x --consumer-fanout 1" in sources

    code, out, err = run(capsys, "apply", "-f", str(plan_dir / "reassignments"),
                         "--state-dir", state)
    assert code == 0, err
    assert "completed" in out
    code, _, err = run(capsys, "snapshot", "--state-dir", state, "--out", str(tmp_path / "s2"))
    assert code == 0, err
    actual = snapshot_loads(tmp_path / "s2")
    predicted = {b["broker"]: [b["after"][k] for k in ("replicas", "leaders", "disk_bytes")]
                 for b in report["brokers"]}
    assert {b: [v[REPLICAS], v[LEADERS], v[DISK]] for b, v in actual.items()} == predicted
    before = snapshot_loads(tmp_path / "s1")
    assert max_over_mean(before, range(6), DISK) > 1.5
    assert max_over_mean(actual, range(6), DISK) <= 1.05
    assert max_over_mean(actual, range(6), REPLICAS) <= 1.05

    # Planned again, the balanced cluster needs nothing: the summary says so rather than
    # sending the user to `kraftsman apply` an empty directory (which only reports an error).
    code, out, err = run(capsys, "plan", "--snapshot", str(tmp_path / "s2"), "--goal",
                         "rebalance", "--out", str(tmp_path / "plan2"), "--master", "local[2]",
                         "--seed", "7")
    assert code == 0, err
    assert "  resources: none — no move improves the balance, nothing to apply" in out, out
    assert "apply in order" not in out
    assert list((tmp_path / "plan2" / "reassignments").iterdir()) == []


@pytest.fixture
def snap_dir(tmp_path: Path) -> Path:
    d = tmp_path / "snap"
    write_snapshot(make_snapshot(brokers=6, partitions=30, seed=2), d)
    return d


def assert_refused(capsys: pytest.CaptureFixture[str], out: Path, *argv: str) -> str:
    code, _, err = run(capsys, "plan", *argv, "--out", str(out))
    assert code == 2, err
    assert "Traceback" not in err
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    return err


def test_unknown_brokers_in_the_goal(capsys: pytest.CaptureFixture[str], snap_dir: Path,
                                     tmp_path: Path) -> None:
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir),
                         "--goal", "add-brokers", "7,8")
    assert "error: --goal add-brokers: unknown broker(s) [7, 8]" in err


def test_demoting_unknown_brokers_or_every_broker(capsys: pytest.CaptureFixture[str],
                                                  snap_dir: Path, tmp_path: Path) -> None:
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir),
                         "--goal", "demote-brokers", "4,9")
    assert "error: --goal demote-brokers 4,9: unknown broker(s) [9]; the snapshot knows " \
        "[0, 1, 2, 3, 4, 5] — name brokers of this cluster" in err
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir),
                         "--goal", "demote-brokers", "0,1,2,3,4,5")
    assert "error: --goal demote-brokers 0,1,2,3,4,5: would leave no broker to lead; " \
        "the snapshot knows [0, 1, 2, 3, 4, 5] — leave at least one broker undemoted" in err
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir),
                         "--goal", "demote-brokers", "3", "--balance")
    assert "--balance: only with --goal add-brokers or remove-brokers (got demote-brokers)" \
        in err


def test_goal_leaving_too_few_racks(capsys: pytest.CaptureFixture[str], snap_dir: Path,
                                    tmp_path: Path) -> None:
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir),
                         "--goal", "remove-brokers", "2,5")
    assert "leaves 2 rack(s)" in err


def test_inconsistent_snapshot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    snap = make_snapshot(brokers=4, partitions=10, seed=2, racks=0)
    d = tmp_path / "bad"
    write_snapshot(snap, d)
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(d / "partitions.parquet")
    idx = table.schema.get_field_index("leader")
    table = table.set_column(idx, "leader", pa.array([99] * 10, pa.int64()))
    pq.write_table(table, d / "partitions.parquet")
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(d), "--goal", "rebalance")
    assert "partitions.parquet: row 0 (topic-0-0): field 'leader' 99 is not among replicas" in err


def test_missing_snapshot_and_bad_options(capsys: pytest.CaptureFixture[str], snap_dir: Path,
                                          tmp_path: Path) -> None:
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(tmp_path / "none"),
                         "--goal", "rebalance")
    assert "no such snapshot directory" in err
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir), "--goal",
                         "rebalance", "--spark-conf", "novalue")
    assert "--spark-conf 'novalue': expected KEY=VALUE" in err
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir), "--goal",
                         "rebalance", "--cluster-name", "Prod_1")
    assert "pass --cluster-name 'prod-1'" in err
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir), "--goal",
                         "rebalance", "--balance")
    assert "error: --balance: only with --goal add-brokers or remove-brokers (got " \
        "rebalance)" in err



@pytest.mark.parametrize("value", ["-5", "9223372036854775808", "50MB", "1e9"])
def test_a_throttle_the_brokers_would_refuse_is_one_line_before_spark(
        capsys: pytest.CaptureFixture[str], snap_dir: Path, tmp_path: Path, value: str) -> None:
    """The resources would carry it to the executor, and a broker refuses a rate that is not a
    Kafka LONG >= 0 only once the move started."""
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir), "--goal",
                         "rebalance", "--throttle", value)
    assert err.splitlines() == [
        f"error: --throttle {value}: give a whole number of bytes per second from 1 to "
        "9223372036854775807, or 0 for no throttle"]


def test_a_throttle_of_zero_means_none_and_the_largest_long_is_kept() -> None:
    from kraftsman.commands.plan import throttle_of

    assert throttle_of("0") is None  # written without throttleBytesPerSecond
    assert throttle_of("1") == 1
    assert throttle_of("9223372036854775807") == 2**63 - 1


@pytest.mark.parametrize("flag", ["--max-concurrent-moves", "--max-concurrent-moves-per-broker"])
def test_a_move_limit_of_zero_is_refused(capsys: pytest.CaptureFixture[str], snap_dir: Path,
                                         tmp_path: Path, flag: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--snapshot", str(snap_dir), "--goal", "rebalance", flag, "0",
              "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"argument {flag}: 0 must be >= 1 (a limit of 0 moves nothing)" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_existing_output_is_not_overwritten(capsys: pytest.CaptureFixture[str], snap_dir: Path,
                                            tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    code, _, err = run(capsys, "plan", "--snapshot", str(snap_dir), "--goal", "rebalance",
                       "--out", str(out))
    assert code == 2 and "exists and is not empty" in err and "--force" in err
    assert (out / "mine.txt").read_text() == "keep"


def test_java_missing_says_what_to_install(capsys: pytest.CaptureFixture[str], snap_dir: Path,
                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir),
                         "--goal", "rebalance", "--engine", "spark")
    assert "no `java` on PATH and JAVA_HOME is not set" in err
    assert "openjdk-17-jre-headless" in err
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir),
                         "--goal", "rebalance", "--engine", "spark")
    assert f"JAVA_HOME={tmp_path} has no bin/java" in err
    # a large table on a local master, or any other master, needs Spark too
    err = assert_refused(capsys, tmp_path / "o", "--snapshot", str(snap_dir),
                         "--goal", "rebalance", "--master", "spark://host:7077")
    assert f"JAVA_HOME={tmp_path} has no bin/java" in err


def test_a_small_local_plan_runs_on_the_driver_without_java(
        capsys: pytest.CaptureFixture[str], snap_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--engine auto plans a small snapshot on a local master in this process: no JVM
    starts (so none is needed) and no class-archive hint is printed."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    code, out, err = run(capsys, "plan", "--snapshot", str(snap_dir), "--goal", "rebalance",
                         "--out", str(tmp_path / "p"), "--seed", "3")
    assert code == 0, err
    assert "plan written to" in out and "spark-archive" not in err
    assert "rounds ran on: the driver (no JVM)" in out
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    assert report["summary"]["replicasToMove"] > 0 and report["summary"]["violations"] == []
    with pytest.raises(SystemExit) as refused:
        run(capsys, "plan", "--snapshot", str(snap_dir), "--goal", "rebalance",
            "--out", str(tmp_path / "q"), "--engine", "turbo")
    assert refused.value.code == 2 and "invalid choice: 'turbo'" in capsys.readouterr().err


def test_snapshot_without_a_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "snapshot", "--state-dir", str(tmp_path / "st"),
                       "--out", str(tmp_path / "s"))
    assert code == 2 and "no cluster in" in err
    assert not (tmp_path / "s").exists()


def test_a_missing_pyspark_is_named_without_importing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """require_extra looks pyspark up instead of importing it (a second or more that a plan
    on the driver never needs), and still names the extra when it is not installed."""
    import importlib.util
    import sys

    from kraftsman.cli_errors import UsageError, require_extra

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyspark" else real(name, *a))
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)
    with pytest.raises(UsageError) as e:
        require_extra("plan", "plan")
    assert e.value.problems == ["`kraftsman plan` needs pyspark, which comes with the 'plan' "
                                "extra: pip install 'kraftsman[plan]'"]
    assert "pyspark" not in sys.modules


def test_auto_takes_the_heap_for_a_sizing_hint_and_other_spark_settings_for_spark() -> None:
    """The operator's planner Job passes only spark.driver.memory (sized from its limit): a
    small plan still runs on the driver; any other Spark setting, a remote master or a big
    table runs Spark."""
    from controller_core.planning.machine import Machine
    from controller_core.planning.pipeline import DRIVER_PLAN_PARTITIONS, PlanRequest, on_driver
    from kraftsman.planner_job_spec import PlannerConfig, planner_job

    req = PlanRequest(Path("snap"), ["rebalance"], Path("out"))
    assert on_driver(req, 10)
    job = planner_job(PlannerConfig(image="kraftsman:test", state_claim="state"), name="rb",
                      namespace="default", uid="uid", proposal_id=1, embedded=True,
                      spark_master=None)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--spark-conf"]
    assert confs == ["spark.driver.memory=2048m"]
    req.spark_conf = dict(c.split("=", 1) for c in confs)
    many_cores = Machine(cores=16, memory=64 << 30)
    assert on_driver(req, 10, many_cores) and on_driver(req, DRIVER_PLAN_PARTITIONS, many_cores)
    assert not on_driver(req, DRIVER_PLAN_PARTITIONS + 1, many_cores)
    req.spark_conf = {"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"}
    assert not on_driver(req, 10)
    req.spark_conf, req.master = {}, "spark://host:7077"
    assert not on_driver(req, 10)
    req.master, req.engine = "local[2]", "spark"
    assert not on_driver(req, 10)


def test_auto_plans_a_large_table_on_the_driver_on_two_cores_when_it_fits_in_memory() -> None:
    """Above 100,000 partitions the driver's one core still beats Spark on two (10^6: ~53 s
    against ~121 s), so ``auto`` keeps a large table on the driver for a master of at most 2
    cores — ``local[*]`` counts the machine's — if the estimate fits the memory; a master of
    more cores, unknown memory or too little of it runs Spark."""
    from controller_core.planning.machine import Machine
    from controller_core.planning.pipeline import (
        DRIVER_BASE_BYTES,
        DRIVER_BYTES_PER_PARTITION,
        PlanRequest,
        on_driver,
    )

    million = 1_000_000
    need = DRIVER_BASE_BYTES + million * DRIVER_BYTES_PER_PARTITION
    job = Machine(cores=2, memory=3 << 30)  # the planner Job's default limits
    assert need <= 3 << 30 < 2 * need
    req = PlanRequest(Path("snap"), ["rebalance"], Path("out"),
                      spark_conf={"spark.driver.memory": "2048m"})
    assert on_driver(req, million, job)
    assert not on_driver(req, 2 * million, job)  # does not fit: Spark holds it outside
    assert not on_driver(req, million, Machine(cores=2, memory=need - 1))
    assert on_driver(req, million, Machine(cores=2, memory=need))
    assert not on_driver(req, million, Machine(cores=2, memory=None))
    assert not on_driver(req, million, Machine(cores=4, memory=64 << 30))
    for master, cores, driver in (("local[2]", 8, True), ("local[3]", 8, False),
                                  ("local", 8, True), ("local[*]", 1, True),
                                  ("local-cluster[2,1,1024]", 2, False),
                                  ("spark://host:7077", 2, False)):
        req.master = master
        assert on_driver(req, million, Machine(cores=cores, memory=64 << 30)) is driver, master


def test_machine_reads_cgroup_limits_and_meminfo(tmp_path: Path) -> None:
    """The cores and memory ``auto`` weighs are a container's limits where it has them."""
    from controller_core.planning.machine import local_cores, memory_budget, usable_cores

    cg = tmp_path / "cgroup"
    cg.mkdir()
    meminfo, status = tmp_path / "meminfo", tmp_path / "status"
    meminfo.write_text("MemTotal: 24000000 kB\nMemAvailable: 20000000 kB\n")
    status.write_text("Name: python\nVmRSS: 100000 kB\n")
    assert usable_cores(cg) >= 1  # no cpu.max: the affinity mask
    (cg / "cpu.max").write_text("150000 100000\n")
    assert usable_cores(cg) == min(2, usable_cores(tmp_path / "none"))  # 1.5 cores: 2
    (cg / "cpu.max").write_text("max 100000\n")
    assert usable_cores(cg) == usable_cores(tmp_path / "none")
    (cg / "cpu.max").write_text("garbage\n")  # unreadable: the affinity mask
    assert usable_cores(cg) == usable_cores(tmp_path / "none")
    # no cgroup limit: MemAvailable plus what this process already holds
    assert memory_budget(cg, meminfo, status) == (20000000 + 100000) * 1024
    (cg / "memory.max").write_text("max\n")
    assert memory_budget(cg, meminfo, status) == (20000000 + 100000) * 1024
    # a 3 GiB limit with 500 MiB held by the cgroup, 100000 KiB of it this process
    (cg / "memory.max").write_text(f"{3 << 30}\n")
    (cg / "memory.current").write_text(f"{500 << 20}\n")
    assert memory_budget(cg, meminfo, status) == (3 << 30) - ((500 << 20) - 100000 * 1024)
    assert memory_budget(tmp_path / "none", tmp_path / "none", tmp_path / "none") is None
    (cg / "memory.current").write_text("garbage\n")  # unreadable: MemAvailable alone
    assert memory_budget(cg, meminfo, status) == (20000000 + 100000) * 1024
    assert [local_cores(m, 6) for m in ("local", "local[*]", "local[3]", "local[2,4]",
                                        "local[*, 3]", "yarn", "localhost")] == \
        [1, 6, 3, 2, 6, None, None]


def kraftsman(*argv: str) -> str:
    """The console script as a user runs it; its stdout (exit 0 asserted)."""
    done = subprocess.run([str(BIN), *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def assignment(d: Path) -> dict[tuple[str, int], tuple[list[int], int]]:
    """(topic, partition) -> (replicas, current leader) as the cluster reported them."""
    pt = read_snapshot(d).partitions
    return {(t, p): (list(r), ld) for t, p, r, ld in zip(
        pt.topic, pt.partition, pt.replicas, pt.leader, strict=True)
        if t != THROTTLE_MARKER_TOPIC}


def test_demote_applied_on_the_embedded_cluster_moves_leadership_and_no_data(
        tmp_path: Path) -> None:
    """demote-brokers 0 end to end with the console script on the embedded cluster: the plan
    only reorders broker 0's partitions, `apply` runs the preferred election after the
    reorder, and broker 0 leads nothing; a later leader-balance gives it its share back."""
    state = str(tmp_path / "state")
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    kraftsman("apply", "-f", str(tmp_path / "cluster.yaml"), "--state-dir", state)
    kraftsman("snapshot", "--state-dir", state, "--out", str(tmp_path / "s1"))
    before = assignment(tmp_path / "s1")
    led = {tp for tp, (reps, _) in before.items() if reps[0] == 0}
    assert len(led) == 6

    out = kraftsman("plan", "--snapshot", str(tmp_path / "s1"), "--goal", "demote-brokers",
                    "0", "--out", str(tmp_path / "demote"), "--engine", "driver")
    assert "goal: demote-brokers 0; partitions in plan: 6 of 18; replicas to copy: 0" in out
    summary = json.loads((tmp_path / "demote" / "report.json").read_text())["summary"]
    assert summary["partitionsReorderedOnly"] == 6 and summary["bytesToMove"] == 0
    docs = [yaml.safe_load(p.read_text())
            for p in sorted((tmp_path / "demote" / "reassignments").iterdir())]
    assert docs and all(d["spec"]["electPreferredLeaders"] is True for d in docs)
    assert "| 0 (demoted) |" in (tmp_path / "demote" / "report.md").read_text()

    applied = kraftsman("apply", "-f", str(tmp_path / "demote" / "reassignments"),
                        "--state-dir", state)
    assert "completed" in applied, applied
    kraftsman("snapshot", "--state-dir", state, "--out", str(tmp_path / "s2"))
    after = assignment(tmp_path / "s2")
    assert {tp: sorted(r) for tp, (r, _) in after.items()} == \
        {tp: sorted(r) for tp, (r, _) in before.items()}  # no replica moved
    assert [tp for tp, (reps, leader) in after.items() if 0 in (reps[0], leader)] == []
    assert {tp for tp, (r, _) in after.items() if r != before[tp][0]} == led  # nothing else

    # undone by a later plan: leader-balance gives broker 0 leadership again
    kraftsman("plan", "--snapshot", str(tmp_path / "s2"), "--goal", "leader-balance",
              "--out", str(tmp_path / "back"), "--engine", "driver")
    kraftsman("apply", "-f", str(tmp_path / "back" / "reassignments"), "--state-dir", state)
    kraftsman("snapshot", "--state-dir", state, "--out", str(tmp_path / "s3"))
    leads = snapshot_loads(tmp_path / "s3")
    assert abs(leads[0][LEADERS] - 3) <= 1, leads  # its share: 18 leaders over 6 brokers, ±1
