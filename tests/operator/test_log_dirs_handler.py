"""A PartitionReassignment naming log directories (KIP-113), through the handlers
(handler_driver.py) on an embedded cluster whose brokers have two directories: the copy
between directories runs to Completed with its bytes in the status; a directory the broker
lacks and log_dirs not one per replica are refused, naming the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from handler_driver import CLUSTER, REF, Driver, condition

from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.model import TopicPartition

TP0 = TopicPartition("orders", 0)


def jbod_cluster() -> dict[str, Any]:
    spec = copy.deepcopy(CLUSTER)
    for b in spec["embedded"]["brokers"]:
        b["logDirs"] = [{"path": f"/data/{b['id']}/a"}, {"path": f"/data/{b['id']}/b"}]
    return spec


@pytest.fixture
async def d(tmp_path: Path) -> Driver:
    drv = Driver(tmp_path)
    await drv.ready_cluster(spec=jbod_cluster())
    return drv


def dir_of(c: EmbeddedCluster, broker: int) -> str:
    (path,) = [dd.path for dd in c.describe_log_dirs([broker], [TP0])[broker]
               for r in dd.replicas if r.tp == TP0 and not r.future]
    return path


async def test_a_copy_between_directories_completes(d: Driver) -> None:
    (opened,) = d.rt.clusters.values()
    c = opened.cluster
    assert isinstance(c, EmbeddedCluster)
    here = dir_of(c, 0)
    there = "/data/0/b" if here == "/data/0/a" else "/data/0/a"
    pr = d.create("PartitionReassignment", "jbod", {**REF, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [0, 1, 2],
         "log_dirs": [there, "any", "any"]}]})
    for _ in range(40):
        await d.tick(pr)
        if pr["status"].get("phase") == "Completed":
            break
    st = pr["status"]
    assert st["phase"] == "Completed", st
    assert st["bytesToMove"] == 1_000_000 and st["done"] == 1
    assert dir_of(c, 0) == there


async def test_a_directory_the_broker_lacks_is_invalid(d: Driver) -> None:
    pr = d.create("PartitionReassignment", "bad", {**REF, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [0, 1, 2],
         "log_dirs": ["/nope", "any", "any"]}]})
    await d.tick(pr)
    assert pr["status"]["phase"] == "Invalid"
    deg = condition(pr, "Degraded")
    assert deg["reason"] == "LogDirNotFound", deg
    assert deg["message"] == (
        "spec.partitions[0] (orders-0): broker 0 has no log directory '/nope'; its log "
        "directories are ['/data/0/a', '/data/0/b'] (or give \"any\") [LOG_DIR_NOT_FOUND]; "
        "fix the plan"), deg


@pytest.mark.parametrize(("dirs", "words"), [
    (["any", "any"], "log_dirs has 2 entries for 3 replicas"),
    (["data", "any", "any"], "each entry is \"any\" or an absolute path"),
])
async def test_log_dirs_must_be_one_absolute_path_or_any_per_replica(
        d: Driver, dirs: list[str], words: str) -> None:
    pr = d.create("PartitionReassignment", "bad", {**REF, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [0, 1, 2], "log_dirs": dirs}]})
    await d.tick(pr)
    deg = condition(pr, "Degraded")
    assert pr["status"]["phase"] == "Invalid" and deg["reason"] == "InvalidSpec", deg
    assert deg["message"].startswith("spec.partitions[0]") and words in deg["message"], deg
