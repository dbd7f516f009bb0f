"""A PartitionReassignment that names log directories (KIP-113), applied with the console
script to the real Kafka (two directories per broker): a replica copied into the other
directory of its broker, and a replica added on a new broker straight into a named
directory, under the log-dir throttle, which is set while they copy and gone after; a
directory the broker does not have is refused before anything moves."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from controller_core.admin import LogDir
from controller_core.metadata.controller import ALTER_LOG_DIRS_RATE
from controller_core.model import TopicPartition
from tests.real.fixtures import Session
from tests.real.test_cli_real_kafka import BIN, Cli, topic


def _where(dirs: dict[int, tuple[LogDir, ...]], tp: TopicPartition, broker: int
           ) -> dict[str, bool]:
    return {d.path: r.future for d in dirs.get(broker, ()) for r in d.replicas if r.tp == tp}


def _plan(path: Path, name: str, entries: list[str], throttle: int | None = None) -> Path:
    lines = ["apiVersion: kraftsman.io/v1alpha1", "kind: PartitionReassignment",
             "metadata: {name: jbod}", "spec:", "  clusterRef: {name: prod}"]
    if throttle:
        lines.append(f"  throttleBytesPerSecond: {throttle}")
    lines.append("  partitions:")
    lines += [f"    - {e}" for e in entries]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_replicas_move_into_named_log_dirs_throttled(real_kafka: Session,
                                                     tmp_path: Path) -> None:
    c = real_kafka.cluster
    name = topic(real_kafka, [[0, 1, 2], [1, 2, 3]], mb=3)
    p0, p1 = TopicPartition(name, 0), TopicPartition(name, 1)
    with c.admin() as a:
        (current,) = _where(a.describe_log_dirs([0], [p0]), p0, 0)
    other = next(p for p in c.log_dirs(0) if p != current)
    target = c.log_dirs(0)[1]
    spec = _plan(tmp_path / "jbod.yaml", name, [
        f"{{topic: {name}, partition: 0, replicas: [0, 1, 2], log_dirs: [{other}, any, any]}}",
        f"{{topic: {name}, partition: 1, replicas: [1, 2, 0], log_dirs: [any, any, {target}]}}",
    ], throttle=300_000)
    cli = Cli(real_kafka, tmp_path / "state")
    conn = ["--bootstrap-server", c.bootstrap(), "--state-dir", str(tmp_path / "state")]
    run = subprocess.Popen([str(BIN), "apply", "-f", str(spec), *conn],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen_rate = seen_future = False
        deadline = time.monotonic() + 180
        while run.poll() is None and time.monotonic() < deadline:
            with c.admin() as a:
                cfg = a.describe_configs([("BROKER", "0")])[("BROKER", "0")]
                seen_rate |= cfg.get(ALTER_LOG_DIRS_RATE) == "300000"
                seen_future |= _where(a.describe_log_dirs([0], [p0]), p0, 0).get(other) is True
            time.sleep(0.3)
        out, err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out + err
    assert "completed: 2 moved" in out, out
    assert seen_rate, "the log-dir throttle was never seen on broker 0 while it copied"
    assert seen_future, "no future replica was seen in the other directory"
    with c.admin() as a:
        dirs = a.describe_log_dirs([0], [p0, p1])
        assert _where(dirs, p0, 0) == {other: False}
        assert _where(dirs, p1, 0) == {target: False}
        cfg = a.describe_configs([("BROKER", "0")])[("BROKER", "0")]
    assert ALTER_LOG_DIRS_RATE not in cfg and "leader.replication.throttled.rate" not in cfg
    assert "No partition reassignments found." in cli.ok("reassignments", "list")


def test_a_log_dir_the_broker_lacks_is_refused_before_anything_moves(
        real_kafka: Session, tmp_path: Path) -> None:
    c = real_kafka.cluster
    name = topic(real_kafka, [[0, 1, 2]])
    spec = _plan(tmp_path / "bad.yaml", name, [
        f"{{topic: {name}, partition: 0, replicas: [0, 1, 3], log_dirs: [/no/such, any, any]}}"])
    done = Cli(real_kafka, tmp_path / "state").run("apply", "-f", str(spec), plaintext=True)
    assert done.returncode == 2, done
    assert f"{name}-0: broker 0 has no log directory '/no/such'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    with c.admin() as a:
        assert a.list_partition_reassignments() == {}
        assert a.describe_partitions(partitions=[TopicPartition(name, 0)])[0].replicas == (
            0, 1, 2)
