"""The planner JVM's class archive: `kraftsman spark-archive` records it, local plans map it.

The end-to-end test starts the console script as a user does and looks at what the JVM
actually maps (/proc/PID/maps), not at the options kraftsman meant to pass."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from controller_core.planning import class_archive
from controller_core.planning.snapshot import write_snapshot
from controller_core.planning.synthetic import make_snapshot
from kraftsman.cli import main

BIN = Path(sys.executable).parent / "kraftsman"


def fake_java(directory: Path, version: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2025-04-15' >&2\n")
    java.chmod(0o755)
    return str(java)


def test_the_default_name_changes_with_the_java_build_and_the_jars(tmp_path: Path) -> None:
    """An upgraded JVM or pyspark must find no archive rather than map a stale one (the JVM
    maps an archive without checking its contents)."""
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"x" * 10)
    java = fake_java(tmp_path / "a", "17.0.15")
    first = class_archive.digest(java, jars)
    assert class_archive.digest(java, jars) == first
    assert class_archive.digest(fake_java(tmp_path / "b", "17.0.16"), jars) != first
    (jars / "spark-core.jar").write_bytes(b"x" * 11)
    second = class_archive.digest(java, jars)
    assert second != first
    (jars / "spark-sql.jar").write_bytes(b"y")
    assert class_archive.digest(java, jars) != second


def test_where_the_archive_lives(tmp_path: Path) -> None:
    java = fake_java(tmp_path / "j", "17.0.15")
    home = {"HOME": str(tmp_path / "home")}
    path = class_archive.archive_path(java, home)
    assert path is not None and path.parent == tmp_path / "home" / ".cache" / "kraftsman"
    assert path.name.startswith("spark-") and path.suffix == ".jsa"
    xdg = class_archive.archive_path(java, {**home, "XDG_CACHE_HOME": str(tmp_path / "x")})
    assert xdg is not None and xdg.parent == tmp_path / "x" / "kraftsman"
    own = class_archive.archive_path(java, {**home, "XDG_CACHE_HOME": str(tmp_path / "x"),
                                            "KRAFTSMAN_CACHE_DIR": str(tmp_path / "k")})
    assert own is not None and own.parent == tmp_path / "k"
    named = class_archive.archive_path(java, {**home, class_archive.ENV: str(tmp_path / "a")})
    assert named == tmp_path / "a"
    assert class_archive.archive_path(java, {**home, class_archive.ENV: "off"}) is None


def test_an_archive_is_mapped_only_when_it_exists(tmp_path: Path) -> None:
    java = fake_java(tmp_path / "j", "17.0.15")
    archive = tmp_path / "spark.jsa"
    env = {"HOME": str(tmp_path), class_archive.ENV: str(archive)}
    assert class_archive.use_options(java, env) == []
    hint = class_archive.hint(java, env)
    assert hint is not None and "kraftsman spark-archive" in hint and "=off" in hint
    archive.write_bytes(b"\0" * 8)
    assert class_archive.use_options(java, env) == [f"-XX:SharedArchiveFile={archive}"]
    assert class_archive.hint(java, env) is None
    off = {"HOME": str(tmp_path), class_archive.ENV: "OFF"}
    assert class_archive.use_options(java, off) == [] and class_archive.hint(java, off) is None


@pytest.mark.spark
def test_a_local_plan_without_an_archive_says_how_to_record_one(
        spark: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    snap = tmp_path / "snap"
    write_snapshot(make_snapshot(brokers=6, partitions=30, seed=2), snap)
    monkeypatch.setenv(class_archive.ENV, str(tmp_path / "missing.jsa"))
    args = ["plan", "--snapshot", str(snap), "--goal", "rebalance", "--master", "local[2]",
            "--engine", "spark"]
    assert main([*args, "--out", str(tmp_path / "p1")]) == 0
    assert "kraftsman spark-archive" in capsys.readouterr().err
    monkeypatch.setenv(class_archive.ENV, "off")
    assert main([*args, "--out", str(tmp_path / "p2")]) == 0
    assert "spark-archive" not in capsys.readouterr().err


def test_recording_with_the_archive_turned_off_is_refused(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.ENV, "off")
    assert main(["spark-archive"]) == 2
    err = capsys.readouterr().err
    assert "KRAFTSMAN_SPARK_CLASS_ARCHIVE=off" in err and "--out" in err
    assert "Traceback" not in err


def test_recording_where_it_cannot_be_written_is_refused_before_spark_starts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["spark-archive", "--out", str(blocker / "spark.jsa")]) == 2
    err = capsys.readouterr().err
    assert f"cannot create {blocker}" in err and "--out" in err
    real_access = os.access
    read_only = tmp_path / "ro"
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
        Path(path) != read_only and real_access(path, mode, **kw)))  # (tests run as root)
    assert main(["spark-archive", "--out", str(read_only / "spark.jsa")]) == 2
    err = capsys.readouterr().err
    assert "is not writable" in err and "Traceback" not in err
    assert not list(read_only.iterdir())


def mapped_by_tree(root: int, path: Path) -> bool:
    """Whether some process under ``root`` maps ``path`` right now."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    todo, tree = [root], []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += [c for c, p in parents.items() if p == pid]
    for pid in tree:
        try:
            if str(path) in Path(f"/proc/{pid}/maps").read_text():
                return True
        except OSError:
            continue
    return False


@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_recorded_archive_is_mapped_by_the_next_plan(tmp_path: Path) -> None:
    """`kraftsman spark-archive` as a user runs it, then `kraftsman plan`: the plan's JVM
    maps the archive, and the command says nothing about recording one."""
    archive = tmp_path / "cache" / "spark.jsa"
    env = {**os.environ, class_archive.ENV: str(archive)}
    r = subprocess.run([str(BIN), "spark-archive"], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert archive.stat().st_size > 10_000_000
    assert [p.name for p in archive.parent.iterdir()] == ["spark.jsa"]  # no .part left
    assert "[warning][cds]" not in r.stdout + r.stderr
    again = subprocess.run([str(BIN), "spark-archive"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and "already recorded" in again.stdout

    snap = tmp_path / "snap"
    write_snapshot(make_snapshot(brokers=6, partitions=60, seed=3, skew=1.0), snap)
    proc = subprocess.Popen([str(BIN), "plan", "--snapshot", str(snap), "--goal", "rebalance",
                             "--out", str(tmp_path / "plan"), "--master", "local[2]",
                             "--engine", "spark"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mapped = False
    while proc.poll() is None:
        mapped = mapped or mapped_by_tree(proc.pid, archive)
        time.sleep(0.2)
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    assert "plan written to" in out and "rounds ran on: Spark (local[2])" in out
    assert mapped, "no process of the plan mapped the class archive"
    assert "spark-archive" not in err
