"""JBOD: the snapshot's log directories, goal remove-disks, each landing replica's log
directory, and the plan's and report's view of them (driver engine; test_local_table.py
checks that Spark plans the same; test_cli_plan.py runs the console script)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from controller_core.planning import pipeline
from controller_core.planning.goals import Goal, GoalError, check_goal, parse_goal
from controller_core.planning.local_table import run_plan_on_driver
from controller_core.planning.result import PartitionMove, PlanResult
from controller_core.planning.snapshot import (
    Broker,
    LogDir,
    PartitionTable,
    Snapshot,
    SnapshotError,
    read_snapshot,
    validate,
    write_snapshot,
)
from controller_core.planning.synthetic import make_snapshot, with_log_dirs

BIN = Path(sys.executable).parent / "kraftsman"


def jbod(tweak: dict[tuple[int, str], int] | None = None) -> Snapshot:
    """Broker 0: /d1 (1000), /d2 (1000), /d3 (2000); broker 1: /d1, /d2 (1000 each);
    broker 2: /only (3000). ``tweak`` overrides capacities ((broker, dir) -> bytes; the
    broker's capacity follows)."""
    caps = {(0, "/d1"): 1000, (0, "/d2"): 1000, (0, "/d3"): 2000,
            (1, "/d1"): 1000, (1, "/d2"): 1000, (2, "/only"): 3000}
    caps.update(tweak or {})
    dirs = [LogDir(b, d, c) for (b, d), c in caps.items()]
    brokers = [Broker(b, None, sum(c for (x, _), c in caps.items() if x == b), 1e6, 1e6)
               for b in range(3)]
    t = PartitionTable()
    t.append("t", 0, [0, 1], 0, 300, 0.0, 0.0)
    t.append("t", 1, [1, 0], 0, 200, 0.0, 0.0)  # led by 0, though 1 is preferred
    t.append("t", 2, [0, 2], 0, 100, 0.0, 0.0)
    t.append("t", 3, [2, 1], 2, 50, 0.0, 0.0)
    t.append("t", 4, [0, 2], 0, 150, 0.0, 0.0)
    t.log_dirs = [["/d1", "/d1"], ["/d1", "/d1"], ["/d2", "/only"], ["/only", "/d2"],
                  ["/d3", "/only"]]
    return Snapshot(brokers, t, "jbod", log_dirs=dirs)


def plan(tmp: Path, snap: Snapshot, words: list[str]) -> PlanResult:
    d = tmp / "snap"
    write_snapshot(snap, d, overwrite=True)
    s = read_snapshot(d)
    goal = parse_goal(words)
    assert check_goal(goal, s) == []
    return run_plan_on_driver(d, s, goal)


# ---------------------------------------------------------------------------------------
# remove-disks


def test_remove_disks_moves_every_replica_of_the_dir_within_its_broker(tmp_path: Path) -> None:
    """0:/d1 holds t-0 (300 bytes) and t-1 (200): both go to broker 0's other directories,
    the one with the lowest used/capacity once the replica is there, largest first — t-0 to
    /d3 (450/2000 = 0.225 beats /d2's 400/1000, though /d3 holds more bytes), then t-1 to
    /d2 (300/1000 = 0.3 beats /d3's 650/2000). Replica lists and order unchanged, nothing
    crosses the network, nothing else moves."""
    res = plan(tmp_path, jbod(), ["remove-disks", "0:/d1"])
    assert [(m.topic, m.partition, m.before, m.after, m.dirs_before, m.dirs_after)
            for m in res.moves] == [
        ("t", 1, (1, 0), (1, 0), ("/d1", "/d1"), ("/d1", "/d2")),
        ("t", 0, (0, 1), (0, 1), ("/d1", "/d1"), ("/d3", "/d1")),
    ]
    assert res.bytes_moved == 0 and res.replicas_moved == 0
    assert res.dir_bytes_moved == 500 and res.replicas_moved_between_dirs == 2
    assert res.loads_after == res.loads_before
    assert res.violations == [] and res.shortfalls == []
    assert res.rounds == []  # no replica or leader rounds
    rows = {(d.broker, d.log_dir): (d.used_before, d.used_after, d.removed)
            for d in res.disks or ()}
    assert rows[(0, "/d1")] == (500, 0, True)
    assert rows[(0, "/d2")] == (100, 300, False)
    assert rows[(0, "/d3")] == (150, 450, False)
    assert rows[(1, "/d1")] == (500, 500, False)  # broker 1's /d1 is not named


def test_remove_disks_of_two_brokers_and_dirs_balanced_by_utilisation(tmp_path: Path) -> None:
    res = plan(tmp_path, jbod(), ["remove-disks", "0:/d1,1:/d1"])
    after = {m.partition: m.dirs_after for m in res.moves}
    assert after == {0: ("/d3", "/d2"), 1: ("/d2", "/d2")}
    rows = {(d.broker, d.log_dir): d.used_after for d in res.disks or ()}
    assert rows[(1, "/d1")] == 0 and rows[(1, "/d2")] == 550
    assert res.dir_bytes_moved == 1000 and res.bytes_moved == 0


def test_a_dir_only_move_elects_no_preferred_leader(tmp_path: Path) -> None:
    """t-1 is led by 0 though 1 is its preferred leader: a move of its log dirs alone must
    not set electPreferredLeaders (that would move leadership nobody asked to move)."""
    res = plan(tmp_path, jbod(), ["remove-disks", "0:/d1"])
    t1 = next(m for m in res.moves if m.partition == 1)
    assert t1.leader_before == 0 and not t1.leader_changes
    out = pipeline.run(pipeline.PlanRequest(snapshot_dir=tmp_path / "snap",
                                            goal=["remove-disks", "0:/d1"],
                                            out=tmp_path / "out", engine="driver"))
    [doc] = [yaml.safe_load(r.text) for r in out.resources]
    assert doc["spec"]["electPreferredLeaders"] is False
    assert doc["spec"]["partitions"] == [
        {"topic": "t", "partition": 1, "replicas": [1, 0], "log_dirs": ["/d1", "/d2"]},
        {"topic": "t", "partition": 0, "replicas": [0, 1], "log_dirs": ["/d3", "/d1"]}]
    assert "# 2 replica(s) to copy between log directories of their broker, 500 bytes." \
        in out.resources[0].text
    tool = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert tool["partitions"][1] == {"topic": "t", "partition": 0, "replicas": [0, 1],
                                     "log_dirs": ["/d3", "/d1"]}
    back = json.loads((tmp_path / "out" / "rollback.json").read_text())
    assert back["partitions"][1]["log_dirs"] == ["/d1", "/d1"]


def test_the_report_shows_every_dir_and_bytes_between_dirs_apart(tmp_path: Path) -> None:
    pipeline.run(pipeline.PlanRequest(snapshot_dir=_saved(tmp_path, jbod()),
                                      goal=["remove-disks", "0:/d1"], out=tmp_path / "out",
                                      engine="driver"))
    s = json.loads((tmp_path / "out" / "report.json").read_text())["summary"]
    assert (s["bytesToMove"], s["replicasToMove"]) == (0, 0)
    assert (s["bytesToMoveBetweenDirs"], s["replicasToMoveBetweenDirs"]) == (500, 2)
    assert s["partitionsInPlan"] == 2 and s["partitionsReorderedOnly"] == 0
    assert s["disks"][0] == {"broker": 0, "logDir": "/d1", "capacityBytes": 1000,
                             "usedBytesBefore": 500, "usedBytesAfter": 0,
                             "utilisationBefore": 0.5, "utilisationAfter": 0.0,
                             "removed": True}
    assert len(s["disks"]) == 6
    md = (tmp_path / "out" / "report.md").read_text()
    assert "- replicas to copy between log directories of their broker: 2; data: " in md
    assert "(500 bytes, not over the network)" in md
    assert md.index("- replicas to copy: 0;") < md.index("- replicas to copy between")
    assert "(copies between log directories not included" in md
    assert "Not a goal of remove-disks: replicas move only between the log directories" in md
    assert "## Log directories" in md
    assert "| 0 | `/d1` (removed) | 1.0 KB | 500 B → 0 B | 50.0 → 0.0 |" in md
    assert "| 0 | `/d3` | 2.0 KB | 150 B → 450 B | 7.5 → 22.5 |" in md


def _saved(tmp: Path, snap: Snapshot) -> Path:
    write_snapshot(snap, tmp / "snap", overwrite=True)
    return tmp / "snap"


def test_a_replica_no_single_dir_has_room_for_is_a_violation(tmp_path: Path) -> None:
    """The other dirs have room for the bytes together (so check_goal lets it through) but
    not for the one 300-byte replica: it is placed where it overflows least, and named."""
    snap = jbod({(0, "/d2"): 350, (0, "/d3"): 400})  # 250 + 250 free for 300 + 200
    res = plan(tmp_path, snap, ["remove-disks", "0:/d1"])
    [v] = res.violations
    assert v.constraint == "log dir capacity" and v.subject == "t-0 replica 0"
    assert v.reason.startswith("no log directory of broker 0 has 300 bytes free")


@pytest.mark.parametrize(("words", "message"), [
    (["remove-disks"], "--goal remove-disks: name the log directories as BROKER:DIR, e.g. "
                       "--goal remove-disks 3:/data/d1,4:/data/d2"),
    (["remove-disks", "3"], "'3' is not BROKER:DIR"),
    (["remove-disks", "x:/d1"], "'x:/d1' is not BROKER:DIR"),
    (["remove-disks", "3:"], "'3:' is not BROKER:DIR"),
    (["remove-disks", "-1:/d"], "'-1:/d' is not BROKER:DIR"),
    (["remove-disks", "3:/d1,3:/d1"], "3:/d1 is named twice"),
])
def test_remove_disks_parse_errors(words: list[str], message: str) -> None:
    with pytest.raises(GoalError, match=_re(message)):
        parse_goal(words)


def test_remove_disks_parses_and_describes() -> None:
    g = parse_goal(["remove-disks", "3:/data/d1,4:/data/d2"])
    assert g == Goal("remove-disks", disks=((3, "/data/d1"), (4, "/data/d2")))
    assert g.describe() == "remove-disks 3:/data/d1,4:/data/d2"
    assert not g.moves_data and not g.leader_rounds and g.brokers == ()
    with pytest.raises(GoalError, match="--balance: only with --goal add-brokers"):
        parse_goal(["remove-disks", "3:/d1"], balance=True)


def _re(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize(("snap", "disks", "message"), [
    (lambda: make_snapshot(brokers=3, partitions=6), "0:/d1",
     "--goal remove-disks 0:/d1: the snapshot has no log-dir information (no log_dirs.parquet "
     "and no partitions column 'log_dirs'); take a snapshot that records"),
    (jbod, "7:/d1", "--goal remove-disks 7:/d1: unknown broker 7; the snapshot knows [0, 1, 2]"),
    (jbod, "0:/d9", "--goal remove-disks 0:/d9: broker 0 has no log directory '/d9'; its "
                    "directories are ['/d1', '/d2', '/d3']"),
    (jbod, "2:/only", "--goal remove-disks 2:/only: broker 2 has no other log directory than "
                      "['/only']; a replica can only move to another directory of its broker"),
    (jbod, "0:/d1,0:/d2,0:/d3", "broker 0 has no other log directory than ['/d1', '/d2', "
                                "'/d3']"),
    (lambda: jbod({(1, "/d2"): 300}), "1:/d1",
     "--goal remove-disks 1:/d1: broker 1's other log directories ['/d2'] have 250 bytes free "
     "but ['/d1'] hold 500 bytes; free space there first, or remove fewer directories"),
])
def test_remove_disks_refusals(snap: object, disks: str, message: str) -> None:
    problems = check_goal(parse_goal(["remove-disks", disks]), snap())  # type: ignore[operator]
    assert any(message in p for p in problems), problems


# ---------------------------------------------------------------------------------------
# the per-broker disk balance of other goals


def test_replicas_landing_on_a_broker_go_to_its_emptiest_dir(tmp_path: Path) -> None:
    """Every replica sits in /data/d0 (80% full, /data/d1 empty): a rebalance places every
    replica it moves onto a broker in /data/d1, keeps the dirs of the replicas that stay,
    and moves exactly the replicas the same plan without log dirs moves."""
    base = make_snapshot(brokers=6, partitions=150, seed=5, skew=1.0)
    plain = plan(tmp_path / "a", base, ["rebalance"])
    base = make_snapshot(brokers=6, partitions=150, seed=5, skew=1.0)
    res = plan(tmp_path / "b", with_log_dirs(base, dirs=2, first_share=1.0), ["rebalance"])
    assert [(m.topic, m.partition, m.after) for m in res.moves] == \
        [(m.topic, m.partition, m.after) for m in plain.moves]
    assert res.replicas_moved > 10 and res.dir_bytes_moved == 0
    for m in res.moves:
        assert m.dirs_before == ("/data/d0",) * len(m.before)
        assert m.dirs_after is not None
        for b, d in zip(m.after, m.dirs_after, strict=True):
            assert d == ("/data/d0" if b in m.before else "/data/d1"), m
    assert plain.disks is None and all(m.dirs_after is None for m in plain.moves)


def test_landing_replicas_balance_a_brokers_dirs(tmp_path: Path) -> None:
    """Brokers 6-8 are new and empty, each with two equal dirs: the replicas that fill them
    split so that their dirs end within one replica's size of each other."""
    base = make_snapshot(brokers=9, partitions=240, seed=6, empty=(6, 7, 8))
    res = plan(tmp_path, with_log_dirs(base, dirs=2, seed=3), ["add-brokers", "6,7,8"])
    biggest = max(base.partitions.size_bytes)
    rows = {(d.broker, d.log_dir): d.used_after for d in res.disks or ()}
    for b in (6, 7, 8):
        d0, d1 = rows[(b, "/data/d0")], rows[(b, "/data/d1")]
        assert d0 > 0 and d1 > 0 and abs(d0 - d1) <= biggest, (b, d0, d1)


def test_without_log_dirs_the_plan_says_any_as_before(tmp_path: Path) -> None:
    out = pipeline.run(pipeline.PlanRequest(
        snapshot_dir=_saved(tmp_path, make_snapshot(brokers=6, partitions=80, seed=5,
                                                    skew=1.0)),
        goal=["rebalance"], out=tmp_path / "out", engine="driver"))
    tool = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert tool["partitions"] and all(p["log_dirs"] == ["any"] * len(p["replicas"])
                                      for p in tool["partitions"])
    assert all("log_dirs" not in r.text and "log directories" not in r.text
               for r in out.resources)
    assert "disks" not in out.summary and "bytesToMoveBetweenDirs" not in out.summary
    assert "## Log directories" not in (tmp_path / "out" / "report.md").read_text()


def test_dir_moves_count_only_replicas_that_stay_on_their_broker() -> None:
    m = PartitionMove("t", 0, (0, 1), (2, 1), 10, 0, ("/a", "/a"), ("/x", "/b"))
    assert m.added == (2,) and m.bytes_moved == 10
    assert m.dir_moves == (1,) and m.dir_bytes_moved == 10
    assert replace(m, dirs_before=None).dir_moves == ()


# ---------------------------------------------------------------------------------------
# snapshot validation


def test_log_dirs_round_trip_through_parquet(tmp_path: Path) -> None:
    snap = jbod()
    write_snapshot(snap, tmp_path / "s")
    assert (tmp_path / "s" / "log_dirs.parquet").is_file()
    back = read_snapshot(tmp_path / "s")
    assert back.log_dirs == snap.log_dirs
    assert back.partitions.log_dirs == snap.partitions.log_dirs
    plain = make_snapshot(brokers=3, partitions=6)
    write_snapshot(plain, tmp_path / "p")
    assert not (tmp_path / "p" / "log_dirs.parquet").exists()
    assert read_snapshot(tmp_path / "p").log_dirs is None


def _problems(snap: Snapshot) -> list[str]:
    with pytest.raises(SnapshotError) as e:
        validate(snap)
    return e.value.problems


def test_a_replica_in_a_dir_its_broker_lacks_is_refused() -> None:
    snap = jbod()
    assert snap.partitions.log_dirs is not None
    snap.partitions.log_dirs[2] = ["/d2", "/d1"]  # broker 2 has /only
    assert _problems(snap) == [
        "partitions.parquet: column 'log_dirs': row 2 (t-2): replica on broker 2 is in '/d1', "
        "not one of broker 2's directories ['/only'] in log_dirs.parquet; fix the row or add "
        "the directory"]


def test_a_dir_list_not_aligned_with_the_replicas_is_refused() -> None:
    snap = jbod()
    assert snap.partitions.log_dirs is not None
    snap.partitions.log_dirs[1] = ["/d1"]
    assert _problems(snap) == [
        "partitions.parquet: column 'log_dirs': row 1 (t-1): 1 log directory ['/d1'] for 2 "
        "replicas [1, 0]; give one log directory per replica, in the order of replicas"]


@pytest.mark.parametrize(("change", "message"), [
    ("no column", "log_dirs.parquet: present but partitions.parquet has no column 'log_dirs'"),
    ("no file", "partitions.parquet: column 'log_dirs' is present but log_dirs.parquet is "
                "missing; add log_dirs.parquet"),
    ("sum", "brokers.parquet: broker 1: field 'disk_capacity_bytes' is 2001 but its log "
            "directories in log_dirs.parquet hold 2000 bytes; set disk_capacity_bytes to the sum"),
    ("unknown broker", "log_dirs.parquet: row 6 (broker 9, '/x'): field 'broker' 9 is not in "
                       "brokers.parquet"),
    ("repeat", "log_dirs.parquet: row 6 (broker 2, '/only'): repeats broker 2's directory"),
    ("any", "log_dirs.parquet: row 6 (broker 2, 'any'): field 'log_dir' must be the "
            "directory's path"),
    ("zero", "log_dirs.parquet: row 0 (broker 0, '/d1'): field 'capacity_bytes' must be > 0"),
    ("no dirs", "log_dirs.parquet: broker 2 has no log directory; add a row for each of its "
                "log.dirs"),
])
def test_inconsistent_log_dir_information_is_refused(change: str, message: str) -> None:
    snap = jbod()
    assert snap.log_dirs is not None
    if change == "no column":
        snap.partitions.log_dirs = None
    elif change == "no file":
        snap.log_dirs = None
    elif change == "sum":
        snap.brokers[1] = replace(snap.brokers[1], disk_capacity_bytes=2001)
    elif change == "unknown broker":
        snap.log_dirs.append(LogDir(9, "/x", 5))
    elif change == "repeat":
        snap.log_dirs.append(LogDir(2, "/only", 5))
        snap.brokers[2] = replace(snap.brokers[2], disk_capacity_bytes=3005)
    elif change == "any":
        snap.log_dirs.append(LogDir(2, "any", 5))
        snap.brokers[2] = replace(snap.brokers[2], disk_capacity_bytes=3005)
    elif change == "zero":
        snap.log_dirs[0] = LogDir(0, "/d1", 0)
        snap.brokers[0] = replace(snap.brokers[0], disk_capacity_bytes=3000)
    elif change == "no dirs":
        snap.log_dirs = [d for d in snap.log_dirs if d.broker != 2]
    problems = _problems(snap)
    assert any(p.startswith(message) for p in problems), problems


def test_read_names_the_file_for_a_bad_log_dirs_column(tmp_path: Path) -> None:
    """Read from Parquet: a null in a replica's dir list, and a dirs file without its
    column — the file, the row and the field, as every snapshot problem."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    snap = jbod()
    write_snapshot(snap, tmp_path / "s")
    path = tmp_path / "s" / "partitions.parquet"
    table = pq.read_table(str(path))
    dirs = table.column("log_dirs").to_pylist()
    dirs[3] = ["/only", None]
    pq.write_table(table.set_column(table.schema.get_field_index("log_dirs"), "log_dirs",
                                    pa.array(dirs, pa.list_(pa.string()))), str(path))
    with pytest.raises(SnapshotError) as e:
        read_snapshot(tmp_path / "s")
    assert e.value.problems == ["partitions.parquet: row 3: field 'log_dirs' holds a null; "
                                "name every replica's directory"]
    pq.write_table(table.drop(["log_dirs"]), str(path))
    with pytest.raises(SnapshotError, match=_re("log_dirs.parquet: present but "
                                                "partitions.parquet has no column 'log_dirs'")):
        read_snapshot(tmp_path / "s")


# ---------------------------------------------------------------------------------------
# the console script


def kraftsman(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *argv], capture_output=True, text=True, timeout=300)


def test_console_script_plans_remove_disks_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    """`kraftsman plan --goal remove-disks` as users run it, on a snapshot with log dirs
    (a local master and a small table: the driver engine, no JVM)."""
    snap_dir = _saved(tmp_path, with_log_dirs(
        make_snapshot(brokers=6, partitions=120, seed=5), dirs=3, first_share=0.6, seed=2))
    done = kraftsman("plan", "--snapshot", str(snap_dir), "--goal", "remove-disks",
                     "1:/data/d0,4:/data/d0", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "goal: remove-disks 1:/data/d0,4:/data/d0; partitions in plan: " in done.stdout
    assert "replicas to copy: 0; data: 0 B" in done.stdout
    assert "  between log directories of one broker: " in done.stdout
    tool = json.loads((tmp_path / "out" / "plan.json").read_text())
    before = read_snapshot(snap_dir)
    assert before.partitions.log_dirs is not None
    rows = {(t, p): (r, d) for t, p, r, d in zip(
        before.partitions.topic, before.partitions.partition, before.partitions.replicas,
        before.partitions.log_dirs, strict=True)}
    gone = {(1, "/data/d0"), (4, "/data/d0")}
    on_removed = {k for k, (r, d) in rows.items() if gone & set(zip(r, d, strict=True))}
    assert {(p["topic"], p["partition"]) for p in tool["partitions"]} == on_removed
    for p in tool["partitions"]:
        reps, dirs = rows[(p["topic"], p["partition"])]
        assert p["replicas"] == reps  # same replicas, same order
        for b, old, new in zip(reps, dirs, p["log_dirs"], strict=True):
            if (b, old) in ((1, "/data/d0"), (4, "/data/d0")):
                assert new in ("/data/d1", "/data/d2")
            else:
                assert new == old
    report = json.loads((tmp_path / "out" / "report.json").read_text())["summary"]
    assert report["bytesToMove"] == 0 and report["bytesToMoveBetweenDirs"] > 0
    emptied = [d for d in report["disks"] if d["removed"]]
    assert [(d["broker"], d["logDir"], d["usedBytesAfter"]) for d in emptied] == [
        (1, "/data/d0", 0), (4, "/data/d0", 0)]

    for args, message in (
            (["9:/data/d0"], "error: --goal remove-disks 9:/data/d0: unknown broker 9"),
            (["1:/nope"], "broker 1 has no log directory '/nope'"),
            (["1"], "'1' is not BROKER:DIR")):
        bad = kraftsman("plan", "--snapshot", str(snap_dir), "--goal", "remove-disks", *args,
                        "--out", str(tmp_path / "bad"))
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr and not (tmp_path / "bad").exists()
    plain = _saved(tmp_path / "plain", make_snapshot(brokers=3, partitions=6))
    bad = kraftsman("plan", "--snapshot", str(plain), "--goal", "remove-disks", "1:/d",
                    "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "the snapshot has no log-dir information" in bad.stderr


def test_console_script_rebalance_writes_log_dirs(tmp_path: Path) -> None:
    snap_dir = _saved(tmp_path, with_log_dirs(
        make_snapshot(brokers=6, partitions=120, seed=5, skew=1.0), dirs=2, seed=2))
    done = kraftsman("plan", "--snapshot", str(snap_dir), "--goal", "rebalance",
                     "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    docs = [yaml.safe_load(p.read_text())
            for p in sorted((tmp_path / "out" / "reassignments").iterdir())]
    entries = [e for d in docs for e in d["spec"]["partitions"]]
    assert entries and all(len(e["log_dirs"]) == len(e["replicas"]) and
                           set(e["log_dirs"]) <= {"/data/d0", "/data/d1"} for e in entries)
    s = json.loads((tmp_path / "out" / "report.json").read_text())["summary"]
    assert s["bytesToMove"] > 0 and s["replicasToMove"] > 0
    assert (s["bytesToMoveBetweenDirs"], s["replicasToMoveBetweenDirs"]) == (0, 0)


def test_plan_ids_without_log_dirs_are_as_before() -> None:
    """The resources' names hash (cluster, goal, topic, partition, replicas) as before log
    dirs existed — a plan of a snapshot without them keeps its names; with them, the dirs
    count too (two plans differing only in dirs are two plans)."""
    import hashlib

    from controller_core.planning.render import plan_id

    m = PartitionMove("orders", 3, (0, 1), (2, 1), 10, 0)
    old = hashlib.sha256(b"demo\nrebalance\n")
    old.update(b"orders\x003\x00[2, 1]\n")
    assert plan_id([m], "demo", "rebalance") == old.hexdigest()[:8]
    jbod_a = replace(m, dirs_before=("/a", "/a"), dirs_after=("/a", "/a"))
    jbod_b = replace(m, dirs_before=("/a", "/a"), dirs_after=("/b", "/a"))
    ids = {plan_id([x], "demo", "rebalance") for x in (m, jbod_a, jbod_b)}
    assert len(ids) == 3
