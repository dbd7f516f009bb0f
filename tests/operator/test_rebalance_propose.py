"""`kraftsman rebalance propose` — the planner Job's command — run as the Job runs it: the
installed console script as a subprocess, logged in through $KUBECONFIG to the kmock API
emulator that holds the KafkaRebalance and its KafkaCluster, over

* an embedded cluster in the operator's state-volume layout (read-only, as the Job mounts it),
* a real cluster: `kraftsman cluster serve` (a subprocess) with SASL/SCRAM, the KafkaCluster
  naming bootstrapServers and a credentials Secret (the kafka backend).

Spark is slow on the shared 2-core machine: each backend is planned once (module fixtures) and
compared with `kraftsman plan` once; every error path stops before Spark starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
import pytest
import yaml
from deployed import write_kubeconfig
from harness import Emulator, declare, status_error

from controller_core.backends import RetryPolicy, open_kafka_admin
from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.planning.fingerprint import admin_fingerprint
from kraftsman.commands.plan import embedded_snapshot
from kraftsman.handlers.runtime import embedded_cluster_dir
from kraftsman.proposal import PART_LIMIT, data_patch, pack, resource_key
from kraftsman.rebalance_propose import ProposeError, check_goal_fits, goal_of, parse_rebalance
from kraftsman.resources import API_VERSION, GROUP, VERSION, PartitionReassignmentSpec

pytest.importorskip("pyspark")

BIN = Path(sys.executable).parent / "kraftsman"
NS = "team-a"
SPARK = ["--master", "local[1]", "--spark-conf", "spark.sql.shuffle.partitions=2",
         "spark.default.parallelism=1", "spark.driver.memory=1g"]
# 4 brokers on 2 racks, every replica on brokers 0 and 1: a rebalance must move half of them.
CLUSTER: dict[str, Any] = {
    "brokers": [{"id": i, "rack": "ab"[i % 2]} for i in range(4)],
    "controllers": [0, 1, 2],
    "replicationBytesPerSecond": 2_000_000,
    "topics": [{"name": "orders", "partitions": 8, "replicationFactor": 2,
                "sizeBytesPerPartition": 1_000_000,
                "assignment": [[0, 1], [1, 0]] * 4}],
}
REBALANCE = {"goal": "rebalance", "throttleBytesPerSecond": 1_000_000, "maxConcurrentMoves": 3,
             "maxPartitionsPerResource": 2}
AUTH = ("users:\n  - {name: planner, password: planner-secret}\n"
        "acls:\n  - {principal: \"User:planner\", operations: [ALL]}\n")


# ---------------------------------------------------------------------------------------
# the API emulator, shared by the module (it runs on its own event loop thread)


class RefusingEmulator(Emulator):  # type: ignore[misc]
    """harness.Emulator that answers chosen requests itself, as an API server that refuses
    them: nothing is stored (a kmock reaction would answer, but kmock stores the object
    anyway)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: list[tuple[Callable[[Any], bool], Callable[[], Any]]] = []

    async def _serve(self, request: Any) -> Any:
        for matches, answer in self.answers:
            if matches(request):
                return answer()
        return await super()._serve(request)


class Kube:
    """kmock's emulator (harness.Emulator) on 127.0.0.1, plus what kubectl would do."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def start(self) -> Kube:
        self.thread.start()

        async def up() -> None:
            self.handler = RefusingEmulator()
            await self.handler.__aenter__()
            self.server = kmock.Server(self.handler)
            await self.server.__aenter__()
            declare(self.handler)  # our kinds, Secrets and ConfigMaps

        self._run(up())
        self.url = str(self.handler.url).rstrip("/")
        return self

    def stop(self) -> None:
        async def down() -> None:
            await self.server.__aexit__(None, None, None)
            await self.handler.__aexit__(None, None, None)

        self._run(down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, None

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> str:
        plural = {"KafkaCluster": "kafkaclusters", "KafkaRebalance": "kafkarebalances"}[kind]
        uid = f"uid-{kind}-{name}"
        status, _ = self.request("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{plural}", {
            "apiVersion": API_VERSION, "kind": kind, "spec": spec,
            "metadata": {"name": name, "namespace": NS, "uid": uid}})
        assert status < 300, status
        return uid

    def secret(self, name: str, string_data: dict[str, str]) -> None:
        status, _ = self.request("POST", f"/api/v1/namespaces/{NS}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
            "stringData": string_data})
        assert status < 300, status

    def config_map(self, name: str) -> dict[str, Any] | None:
        status, doc = self.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{name}")
        return doc if status == 200 else None

    def config_maps(self, rebalance: str) -> list[dict[str, Any]]:
        _, doc = self.request("GET", f"/api/v1/namespaces/{NS}/configmaps")
        return [cm for cm in doc["items"]
                if (cm["metadata"].get("labels") or {}).get("kraftsman.io/rebalance")
                == rebalance]


@pytest.fixture(scope="module")
def kube() -> Iterator[Kube]:
    k = Kube().start()
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture(scope="module")
def kubeconfig(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig", kube.url,
                            namespace=NS)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def propose(kubeconfig: Path, name: str, proposal_id: str, state_dir: Path, *extra: str,
            timeout: float = 900) -> Run:
    """The Job's container: command and args as the contract gives them, KUBECONFIG set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    env["KUBECONFIG"] = str(kubeconfig)
    r = subprocess.run([str(BIN), "rebalance", "propose", "--namespace", NS, "--name", name,
                        "--proposal-id", proposal_id, "--state-dir", str(state_dir), *extra],
                       capture_output=True, text=True, timeout=timeout, env=env)
    return Run(r.returncode, r.stdout, r.stderr)


def embedded_state(state_dir: Path, name: str, uid: str) -> EmbeddedClusterSpec:
    """An embedded KafkaCluster where the operator keeps it, as the operator left it."""
    spec = EmbeddedClusterSpec.model_validate(CLUSTER)
    c = EmbeddedCluster.open(embedded_cluster_dir(state_dir, (NS, name), uid), spec,
                             fsync=False)
    c.close()
    return spec


def files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def documents(kube: Kube, index: dict[str, Any]) -> list[str]:
    """The PartitionReassignment documents in apply order: parts as listed, keys sorted."""
    out: list[str] = []
    for part in json.loads(index["data"]["parts"]):
        cm = kube.config_map(part)
        assert cm is not None, part
        out += [cm["data"][k] for k in sorted(cm["data"])]
    return out


def reference_plan(snapshot_dir: Path, out: Path, cluster: str) -> list[str]:
    """What `kraftsman plan` writes for the same snapshot and the KafkaRebalance's options."""
    r = subprocess.run([str(BIN), "plan", "--snapshot", str(snapshot_dir), "--goal", "rebalance",
                        "--out", str(out), "--throttle", "1000000", "--max-concurrent-moves",
                        "3", "--max-partitions-per-resource", "2", "--cluster-name", cluster,
                        *SPARK], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return [p.read_text() for p in sorted((out / "reassignments").iterdir())]


def check_proposal(kube: Kube, name: str, uid: str, cluster: str) -> tuple[dict[str, Any],
                                                                            list[str]]:
    """The index and parts as the contract has them; returns (summary, documents)."""
    cms = kube.config_maps(name)
    index = kube.config_map(f"{name}-proposal-1")
    assert index is not None
    assert set(index["data"]) == {"summary.json", "parts"}, index["data"]
    parts = json.loads(index["data"]["parts"])
    assert parts == [f"{name}-proposal-1-{k}" for k in range(1, len(parts) + 1)]
    assert sorted(cm["metadata"]["name"] for cm in cms) == sorted([*parts, f"{name}-proposal-1"])
    for cm in cms:
        meta = cm["metadata"]
        assert meta["labels"] == {"kraftsman.io/rebalance": name, "kraftsman.io/proposal-id": "1"}
        assert meta["ownerReferences"] == [{"apiVersion": API_VERSION, "kind": "KafkaRebalance",
                                            "name": name, "uid": uid, "controller": True}]
        size = sum(len(k.encode()) + len(v.encode()) for k, v in cm["data"].items())
        assert size < PART_LIMIT
    docs = documents(kube, index)
    for n, text in enumerate(docs, start=1):
        doc = yaml.safe_load(text)
        assert doc["kind"] == "PartitionReassignment" and doc["apiVersion"] == API_VERSION
        spec = PartitionReassignmentSpec.model_validate(doc["spec"])
        assert spec.cluster_ref.name == cluster
        assert spec.throttle_bytes_per_second == 1_000_000 and spec.max_concurrent_moves == 3
        assert len(spec.partitions) <= 2
        assert f"Step {n} of {len(docs)}" in text
    summary = json.loads(index["data"]["summary.json"])
    assert summary["resources"] == len(docs) >= 2
    assert summary["partitionsTotal"] == 8 and summary["partitionsInPlan"] >= 2
    assert summary["throttleBytesPerSecond"] == 1_000_000
    for key in ("goal", "replicasToMove", "bytesToMove", "maxOverMean", "estimatedSeconds",
                "violations", "shortfalls", "fingerprint", "createdAt", "sources"):
        assert key in summary, key
    before = summary["maxOverMean"]["replicas"]["before"]
    assert before == 2.0 and summary["maxOverMean"]["replicas"]["after"] < before
    return summary, docs


# ---------------------------------------------------------------------------------------
# the embedded backend


@pytest.fixture(scope="module")
def embedded(kube: Kube, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Any]:
    """One planned proposal over an embedded cluster; a failed earlier attempt of the same
    proposal left an index with `error` and a part, which the run must replace."""
    tmp = tmp_path_factory.mktemp("embedded")
    state = tmp / "state"
    cluster_uid = kube.create("KafkaCluster", "demo", {"embedded": CLUSTER})
    spec = embedded_state(state, "demo", cluster_uid)
    uid = kube.create("KafkaRebalance", "spread", {"clusterRef": {"name": "demo"}, **REBALANCE})
    for name, data in [("spread-proposal-1", {"error": "an earlier attempt failed"}),
                       ("spread-proposal-1-1", {"resource-0001.yaml": "stale"})]:
        kube.request("POST", f"/api/v1/namespaces/{NS}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "data": data, "metadata": {
                "name": name, "namespace": NS, "labels": {"kraftsman.io/rebalance": "spread",
                                                          "kraftsman.io/proposal-id": "1"}}})
    before = files(state)
    run = propose(kubeconfig, "spread", "1", state, *SPARK)
    assert run.returncode == 0, run.stderr[-3000:]
    assert files(state) == before  # read-only: nothing written
    # the same snapshot, taken in-process with the same code, planned by `kraftsman plan`
    c = EmbeddedCluster.open_read_only(embedded_cluster_dir(state, (NS, "demo"), cluster_uid),
                                       spec)
    try:
        snap = embedded_snapshot(c, spec, "demo", default_disk_bytes=1 << 40,
                                 consumer_fanout=1.0)
        fingerprint = admin_fingerprint(c)
    finally:
        c.close()
    from controller_core.planning.snapshot import write_snapshot

    write_snapshot(snap, tmp / "snap")
    return {"run": run, "uid": uid, "fingerprint": fingerprint,
            "reference": reference_plan(tmp / "snap", tmp / "plan", "demo")}


@pytest.mark.spark
def test_embedded_proposal_is_what_kraftsman_plan_writes(kube: Kube,
                                                         embedded: dict[str, Any]) -> None:
    summary, docs = check_proposal(kube, "spread", embedded["uid"], "demo")
    assert docs == embedded["reference"]
    assert summary["fingerprint"] == embedded["fingerprint"]
    assert summary["sources"]["sizeBytes"] == "the embedded cluster's replica logs"
    assert "proposal spread-proposal-1 written" in embedded["run"].stdout


@pytest.mark.spark
def test_a_retried_job_replaces_its_config_maps(kube: Kube, embedded: dict[str, Any]) -> None:
    """The earlier attempt's `error` is gone and its part holds the new documents: one
    ConfigMap per name, no duplicates."""
    index = kube.config_map("spread-proposal-1")
    assert index is not None and "error" not in index["data"]
    part = kube.config_map("spread-proposal-1-1")
    assert part is not None and "stale" not in part["data"].values()
    names = [cm["metadata"]["name"] for cm in kube.config_maps("spread")]
    assert len(names) == len(set(names))


def test_a_demote_proposal_reorders_the_demoted_brokers_partitions(
        kube: Kube, kubeconfig: Path, tmp_path: Path) -> None:
    """goal demote-brokers, on the driver engine (the Job's heap setting is no request for
    Spark): broker 0's four partitions get broker 1 as preferred leader, nothing is copied,
    and every step elects the preferred leaders once reordered."""
    cluster_uid = kube.create("KafkaCluster", "maint", {"embedded": CLUSTER})
    embedded_state(tmp_path, "maint", cluster_uid)
    uid = kube.create("KafkaRebalance", "maint-0", {
        "clusterRef": {"name": "maint"}, "goal": "demote-brokers", "brokers": [0],
        "throttleBytesPerSecond": 1_000_000, "maxConcurrentMoves": 3,
        "maxPartitionsPerResource": 2})
    run = propose(kubeconfig, "maint-0", "1", tmp_path, "--spark-conf",
                  "spark.driver.memory=1g")
    assert run.returncode == 0, run.stderr[-3000:]
    index = kube.config_map("maint-0-proposal-1")
    assert index is not None and set(index["data"]) == {"summary.json", "parts"}, index
    summary = json.loads(index["data"]["summary.json"])
    assert (summary["goal"], summary["partitionsInPlan"], summary["replicasToMove"],
            summary["bytesToMove"]) == ("demote-brokers 0", 4, 0, 0)
    docs = [yaml.safe_load(d) for d in documents(kube, index)]
    assert len(docs) == 2 and all(d["spec"]["electPreferredLeaders"] for d in docs)
    moves = [m for d in docs for m in d["spec"]["partitions"]]
    assert sorted(m["partition"] for m in moves) == [0, 2, 4, 6]  # [0, 1] in CLUSTER
    assert all(m["replicas"] == [1, 0] for m in moves)
    cm = kube.config_map("maint-0-proposal-1-1")
    assert cm is not None and cm["metadata"]["ownerReferences"][0]["uid"] == uid


# ---------------------------------------------------------------------------------------
# the kafka backend: `kraftsman cluster serve` with SASL/SCRAM


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("served")
    (tmp / "cluster.yaml").write_text(yaml.safe_dump({
        "apiVersion": API_VERSION, "kind": "KafkaCluster", "metadata": {"name": "rehearsal"},
        "spec": {"embedded": CLUSTER}}))
    (tmp / "auth.yaml").write_text(AUTH)
    made = subprocess.run([str(BIN), "apply", "-f", str(tmp / "cluster.yaml"), "--state-dir",
                           str(tmp / "server")], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    proc = subprocess.Popen([str(BIN), "cluster", "serve", "--state-dir", str(tmp / "server"),
                             "--listen", "127.0.0.1:0", "--time-scale", "0", "--auth",
                             str(tmp / "auth.yaml")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield line.split()[-1]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


SCRAM = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
         "sasl.username": "planner", "sasl.password": "planner-secret"}


@pytest.fixture(scope="module")
def kafka(kube: Kube, kubeconfig: Path, served: str,
          tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    kube.secret("kafka-planner", SCRAM)
    kube.create("KafkaCluster", "prod", {"bootstrapServers": served,
                                         "authSecretRef": {"name": "kafka-planner"}})
    uid = kube.create("KafkaRebalance", "prod-spread", {"clusterRef": {"name": "prod"},
                                                        **REBALANCE})
    empty = tmp_path_factory.mktemp("no-state")  # a kafka cluster needs no state volume
    run = propose(kubeconfig, "prod-spread", "1", empty, *SPARK)
    assert run.returncode == 0, run.stderr[-3000:]
    admin = open_kafka_admin(served, SCRAM, retry=RetryPolicy(total_seconds=10))
    try:
        fingerprint = admin_fingerprint(admin)
    finally:
        admin.close()
    return {"run": run, "uid": uid, "fingerprint": fingerprint, "bootstrap": served}


@pytest.mark.spark
def test_kafka_backend_proposal(kube: Kube, kafka: dict[str, Any],
                                embedded: dict[str, Any]) -> None:
    """The credentials come from the KafkaCluster's Secret (SCRAM); the assignment is the
    embedded test's, so the fingerprint is the same through the kafka backend as in-process."""
    summary, _ = check_proposal(kube, "prod-spread", kafka["uid"], "prod")
    assert summary["fingerprint"] == kafka["fingerprint"] == embedded["fingerprint"]
    assert summary["sources"]["brokers"] == f"Metadata (DescribeCluster) of {kafka['bootstrap']}"
    assert summary["sources"]["sizeBytes"].startswith("DescribeLogDirs")


# ---------------------------------------------------------------------------------------
# error paths: exit 2, one line on stderr, the same line as the index's `error`


def failed(kube: Kube, run: Run, name: str, proposal_id: str = "1") -> str:
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("error: ")
    index = kube.config_map(f"{name}-proposal-{proposal_id}")
    assert index is not None
    assert index["data"] == {"error": lines[0].removeprefix("error: ")}
    assert index["metadata"]["labels"]["kraftsman.io/rebalance"] == name
    return lines[0]


def test_missing_rebalance(kube: Kube, kubeconfig: Path, tmp_path: Path) -> None:
    run = propose(kubeconfig, "nothing-here", "3", tmp_path)
    line = failed(kube, run, "nothing-here", "3")
    assert f"--name nothing-here: KafkaRebalance {NS}/nothing-here not found" in line
    index = kube.config_map("nothing-here-proposal-3")
    assert index is not None and "ownerReferences" not in index["metadata"]  # no owner to name
    again = propose(kubeconfig, "nothing-here", "3", tmp_path)  # a retry: the same one object
    assert failed(kube, again, "nothing-here", "3") == line
    assert [cm["metadata"]["name"] for cm in kube.config_maps("nothing-here")] == [
        "nothing-here-proposal-3"]


def test_missing_cluster(kube: Kube, kubeconfig: Path, tmp_path: Path) -> None:
    uid = kube.create("KafkaRebalance", "orphan", {"clusterRef": {"name": "gone"},
                                                   "goal": "rebalance"})
    line = failed(kube, propose(kubeconfig, "orphan", "1", tmp_path), "orphan")
    assert f"spec.clusterRef.name: KafkaCluster {NS}/gone not found" in line
    index = kube.config_map("orphan-proposal-1")
    assert index is not None and index["metadata"]["ownerReferences"][0]["uid"] == uid


@pytest.mark.parametrize(("spec", "expected"), [
    ({"goal": "shuffle"}, "spec.goal: Input should be 'rebalance'"),
    ({"goal": "add-brokers", "brokers": [9]}, "spec.brokers (goal add-brokers): unknown"),
    ({"goal": "demote-brokers", "brokers": [0, 1, 2, 3]},
     "spec.brokers 0,1,2,3 (goal demote-brokers): would leave no broker to lead; the snapshot "
     "knows [0, 1, 2, 3] — leave at least one broker undemoted"),
    # the embedded cluster's snapshot records no log directories (yet)
    ({"goal": "remove-disks", "disks": [{"broker": 0, "logDir": "/data/d1"}]},
     "spec.disks 0:/data/d1 (goal remove-disks): the snapshot has no log-dir information"),
])
def test_bad_goal_or_brokers(kube: Kube, kubeconfig: Path, tmp_path: Path, spec: dict[str, Any],
                             expected: str) -> None:
    """The Job's run: one refused by the spec alone, one only once the cluster is known."""
    name = f"bad-{spec['goal']}"
    cluster_uid = kube.create("KafkaCluster", f"{name}-c", {"embedded": CLUSTER})
    embedded_state(tmp_path, f"{name}-c", cluster_uid)
    kube.create("KafkaRebalance", name, {"clusterRef": {"name": f"{name}-c"}, **spec})
    before = files(tmp_path)
    line = failed(kube, propose(kubeconfig, name, "1", tmp_path), name)
    assert expected in line, line
    assert f"KafkaRebalance {name}" in line
    assert files(tmp_path) == before  # the snapshot (add-brokers: taken) wrote nothing


@pytest.mark.parametrize(("spec", "expected"), [
    ({"goal": "add-brokers"}, "spec.brokers: required for goals add-brokers, remove-brokers "
     "and demote-brokers"),
    ({"goal": "demote-brokers"}, "spec.brokers: required for goals add-brokers, remove-brokers "
     "and demote-brokers; list the broker ids to add, remove or demote"),
    ({"goal": "demote-brokers", "brokers": [3], "balance": True},
     "spec.balance: only with goal add-brokers or remove-brokers (goal is demote-brokers"),
    ({"goal": "remove-brokers", "brokers": []}, "spec.brokers: List should have at least 1"),
    ({"goal": "rebalance", "brokers": [1]}, "spec.brokers: only for goals add-brokers"),
    ({"goal": "remove-brokers", "brokers": [2, 2]}, "lists a broker twice"),
    ({"goal": "remove-brokers", "brokers": [-1]}, "spec.brokers[0]: Input should be greater"),
    ({"goal": "leader-balance", "balance": True}, "spec.balance: only with goal"),
    ({"goal": "rebalance", "maxConcurrentMoves": 0}, "spec.maxConcurrentMoves: Input should"),
    ({"goal": "rebalance", "throttle": 5}, "spec.throttle: unknown field"),
    ({"goal": "rebalance", "throttleBytesPerSecond": -1}, "spec.throttleBytesPerSecond: Input "
     "should be greater than or equal to 0; give a whole number of bytes per second from 1 to "
     "9223372036854775807, 0 for none, or leave the field out for the default 50000000"),
    ({"goal": "rebalance", "throttleBytesPerSecond": 0}, None),
    ({"goal": "rebalance", "throttleBytesPerSecond": 2**63}, "spec.throttleBytesPerSecond: "
     "Input should be less than or equal to 9223372036854775807; give a whole number"),
    ({"goal": "rebalance"}, None),
    ({"goal": "remove-brokers", "brokers": [3], "balance": True}, None),
    ({"goal": "demote-brokers", "brokers": [3, 4]}, None),
    ({"goal": "remove-disks"}, "spec.disks: required for goal remove-disks; list the log "
     "directories to empty, e.g. disks: [{broker: 3, logDir: /data/d1}]"),
    ({"goal": "remove-disks", "disks": [{"broker": 3, "logDir": "/d1"}], "brokers": [3]},
     "spec.brokers: only for goals"),
    ({"goal": "rebalance", "disks": [{"broker": 3, "logDir": "/d1"}]},
     "spec.disks: only for goal remove-disks; remove spec.disks or change spec.goal (goal is "
     "rebalance)"),
    ({"goal": "remove-disks", "disks": []}, "spec.disks: List should have at least 1"),
    ({"goal": "remove-disks", "disks": [{"broker": 3}]}, "spec.disks[0].logDir: Field required"),
    ({"goal": "remove-disks", "disks": [{"broker": 3, "logDir": "/a,/b"}]},
     "spec.disks[0].logDir: String should match pattern"),
    ({"goal": "remove-disks", "disks": [{"broker": 3, "logDir": "/d1"},
                                        {"broker": 3, "logDir": "/d1"}]},
     "spec.disks lists a log directory twice"),
    ({"goal": "remove-disks", "disks": [{"broker": 3, "logDir": "/d1"}], "balance": True},
     "spec.balance: only with goal add-brokers or remove-brokers (goal is remove-disks"),
    ({"goal": "remove-disks", "disks": [{"broker": 3, "logDir": "/d1"},
                                        {"broker": 4, "logDir": "/d2"}]}, None),
])
def test_spec_checks(spec: dict[str, Any], expected: str | None) -> None:
    """The same checks in-process (each also reached by the console script above)."""
    doc = {"clusterRef": {"name": "c"}, "approval": "Approved", **spec}
    if expected is None:
        goal = goal_of("r", parse_rebalance("r", doc))
        assert (goal.kind, goal.brokers, goal.balance) == (
            spec["goal"], tuple(spec.get("brokers", ())), spec.get("balance", False))
        assert goal.disks == tuple((d["broker"], d["logDir"]) for d in spec.get("disks", ()))
        return
    with pytest.raises(ProposeError, match=re.escape(expected)):
        goal_of("r", parse_rebalance("r", doc))


def test_goal_problems_name_the_spec_field() -> None:
    from controller_core.planning.goals import Goal
    from controller_core.planning.synthetic import make_snapshot

    snap = make_snapshot(brokers=4, partitions=8, seed=1)
    with pytest.raises(ProposeError, match=re.escape(
            "spec.brokers 0,1,2 (goal remove-brokers): leaves 1 broker(s)")):
        check_goal_fits("r", Goal("remove-brokers", (0, 1, 2)), snap)
    with pytest.raises(ProposeError, match=re.escape(
            "KafkaRebalance r: spec.brokers 2,7 (goal demote-brokers): unknown broker(s) [7]; "
            "the snapshot knows [0, 1, 2, 3] — name brokers of this cluster")):
        check_goal_fits("r", Goal("demote-brokers", (2, 7)), snap)


def test_a_remove_disks_proposal_moves_replicas_between_the_dirs_of_their_broker(
        tmp_path: Path) -> None:
    """The Job's planning step (rebalance_propose.plan, as `make` calls it once the snapshot
    is taken) on a snapshot with log dirs: the documents name each replica's dir, the named
    dirs empty into the other dirs of their broker, no replica changes broker; a refusal
    names spec.disks. (Today's snapshots of the embedded cluster and of a real one record
    no log dirs: the console-script run above is refused saying so.)"""
    from controller_core.planning.goals import Goal
    from controller_core.planning.synthetic import make_snapshot, with_log_dirs
    from kraftsman.rebalance_propose import ProposeRequest, plan

    snap = with_log_dirs(make_snapshot(brokers=4, partitions=40, seed=3,
                                       disk_capacity_bytes=40_000_000_000), dirs=2,
                         first_share=0.3, seed=1)
    spec = parse_rebalance("jbod", {"clusterRef": {"name": "demo"}, "goal": "remove-disks",
                                    "disks": [{"broker": 2, "logDir": "/data/d0"}],
                                    "maxPartitionsPerResource": 5})
    goal = goal_of("jbod", spec)
    assert goal == Goal("remove-disks", disks=((2, "/data/d0"),))
    req = ProposeRequest(namespace="default", name="jbod", proposal_id="1", state_dir=tmp_path)
    summary, docs = plan(req, "jbod", spec, snap, goal)
    assert summary["goal"] == "remove-disks 2:/data/d0"
    assert summary["disksTotal"] == 8 and len(summary["disks"]) == 8
    assert summary["bytesToMove"] == 0 and summary["bytesToMoveBetweenDirs"] > 0
    assert [(d["broker"], d["logDir"], d["usedBytesAfter"]) for d in summary["disks"]
            if d["removed"]] == [(2, "/data/d0", 0)]
    moves = [m for doc in docs for m in yaml.safe_load(doc)["spec"]["partitions"]]
    assert len(docs) > 1 and all(len(yaml.safe_load(doc)["spec"]["partitions"]) <= 5
                                 for doc in docs)
    assert snap.partitions.log_dirs is not None
    rows = {(t, p): (r, d) for t, p, r, d in zip(
        snap.partitions.topic, snap.partitions.partition, snap.partitions.replicas,
        snap.partitions.log_dirs, strict=True)}
    assert {(m["topic"], m["partition"]) for m in moves} == {
        k for k, (r, d) in rows.items() if (2, "/data/d0") in set(zip(r, d, strict=True))}
    for m in moves:
        reps, dirs = rows[(m["topic"], m["partition"])]
        assert m["replicas"] == reps
        assert m["log_dirs"] == [("/data/d1" if b == 2 else d)
                                 for b, d in zip(reps, dirs, strict=True)]
    with pytest.raises(ProposeError, match=re.escape(
            "KafkaRebalance jbod: spec.disks 2:/data/d9 (goal remove-disks): broker 2 has no "
            "log directory '/data/d9'; its directories are ['/data/d0', '/data/d1']")):
        check_goal_fits("jbod", Goal("remove-disks", disks=((2, "/data/d9"),)), snap)


def test_a_proposal_lists_at_most_100_log_dirs_the_removed_ones_first() -> None:
    """summary.json lives in the index ConfigMap (1 MiB): a big JBOD cluster's directories
    are cut to the removed ones, then those whose utilisation changes most."""
    from kraftsman.rebalance_propose import PROPOSAL_DISK_ROWS, disks_shown

    rows = [{"broker": b, "logDir": f"/d{i}", "removed": (b, i) == (7, 3),
             "utilisationBefore": 0.5, "utilisationAfter": 0.5 + (0.3 if b == 9 else 0.0)
             + i / 1000} for b in range(20) for i in range(10)]
    cut = disks_shown(rows)
    assert cut["disksTotal"] == 200 and len(cut["disks"]) == PROPOSAL_DISK_ROWS == 100
    keys = [(d["broker"], d["logDir"]) for d in cut["disks"]]
    assert keys == sorted(keys)  # shown in broker, dir order
    assert (7, "/d3") in keys and all((9, f"/d{i}") in keys for i in range(10))
    assert (0, "/d0") not in keys  # unchanged: the first left out


def test_embedded_state_not_mounted(kube: Kube, kubeconfig: Path, tmp_path: Path) -> None:
    kube.create("KafkaCluster", "unmounted", {"embedded": CLUSTER})
    kube.create("KafkaRebalance", "unmounted-r", {"clusterRef": {"name": "unmounted"},
                                                  "goal": "rebalance"})
    line = failed(kube, propose(kubeconfig, "unmounted-r", "1", tmp_path), "unmounted-r")
    assert f"--state-dir {tmp_path}: no state of the embedded KafkaCluster" in line
    assert "mount the operator's state volume" in line


def test_unreachable_cluster(kube: Kube, kubeconfig: Path, tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube.create("KafkaCluster", "far", {"bootstrapServers": f"127.0.0.1:{port}"})
    kube.create("KafkaRebalance", "far-r", {"clusterRef": {"name": "far"}, "goal": "rebalance"})
    run = propose(kubeconfig, "far-r", "1", tmp_path, "--connect-timeout", "2")
    line = failed(kube, run, "far-r")
    assert f"KafkaCluster far: spec.bootstrapServers 127.0.0.1:{port}:" in line
    assert "check the address" in line


@pytest.mark.parametrize(("case", "expected"), [
    ("invalid-cluster", "KafkaCluster invalid-cluster-c: spec: set exactly one of spec.embedded"),
    ("no-secret", "spec.authSecretRef.name: Secret team-a/absent not found; create it"),
    ("bad-secret", "spec.authSecretRef.name: Secret 'bad-secret-s': "),
])
def test_cluster_problems(kube: Kube, kubeconfig: Path, tmp_path: Path, case: str,
                          expected: str) -> None:
    cname = f"{case}-c"
    if case == "invalid-cluster":
        kube.create("KafkaCluster", cname, {"embedded": CLUSTER, "bootstrapServers": "h:9092"})
    elif case == "no-secret":
        kube.create("KafkaCluster", cname, {"bootstrapServers": "127.0.0.1:9",
                                            "authSecretRef": {"name": "absent"}})
    else:
        kube.secret(f"{case}-s", {"sasl.mechanism": "GSSAPI"})
        kube.create("KafkaCluster", cname, {"bootstrapServers": "127.0.0.1:9",
                                            "authSecretRef": {"name": f"{case}-s"}})
    kube.create("KafkaRebalance", case, {"clusterRef": {"name": cname}, "goal": "rebalance"})
    line = failed(kube, propose(kubeconfig, case, "1", tmp_path), case)
    assert expected in line, line


def test_a_cluster_without_partitions_gets_an_empty_proposal(kube: Kube, kubeconfig: Path,
                                                               tmp_path: Path) -> None:
    """Removing a broker from a cluster that holds no partition (no topic yet) is nothing
    to move, not a failure: the empty proposal lets the rebalance cordon, check and
    unregister the broker on approval (before, the snapshot was refused: "no partitions;
    nothing to plan", and the KafkaRebalance failed)."""
    bare = {**CLUSTER, "topics": []}
    uid = kube.create("KafkaCluster", "bare-c", {"embedded": bare})
    EmbeddedCluster.open(embedded_cluster_dir(tmp_path, (NS, "bare-c"), uid),
                         EmbeddedClusterSpec.model_validate(bare), fsync=False).close()
    kube.create("KafkaRebalance", "bare", {"clusterRef": {"name": "bare-c"},
                                           "goal": "remove-brokers", "brokers": [1]})
    run = propose(kubeconfig, "bare", "1", tmp_path, "--spark-conf", "spark.driver.memory=1g")
    assert run.returncode == 0, run.stderr[-3000:]
    index = kube.config_map("bare-proposal-1")
    assert index is not None and set(index["data"]) == {"summary.json", "parts"}, index
    summary = json.loads(index["data"]["summary.json"])
    assert (summary["goal"], summary["partitionsTotal"], summary["resources"],
            summary["replicasToMove"]) == ("remove-brokers 1", 0, 0, 0)
    assert json.loads(index["data"]["parts"]) == []


def test_no_credentials(tmp_path: Path) -> None:
    """Nothing can be written without a login: exit 2, one line saying what is missing."""
    run = propose(tmp_path / "missing-kubeconfig", "any", "1", tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        f"error: kubeconfig {tmp_path / 'missing-kubeconfig'}: cannot be read (No such file or "
        "directory); pass an existing file to --kubeconfig or KUBECONFIG"]


def test_refusals_by_the_api_name_the_rbac_fix() -> None:
    from kraftsman.kube_client import KubeError
    from kraftsman.rebalance_propose import _kube_problem

    what = "KafkaCluster team-a/x"
    assert str(_kube_problem(KubeError(403, "Forbidden"), what, "fix", "get on kafkaclusters")
               ) == (f"{what}: the Job's service account may not read it (HTTP 403); grant get "
                     "on kafkaclusters to the planner ServiceAccount")
    assert str(_kube_problem(KubeError(404, "Not Found"), what, "create it", "get")) == (
        f"{what} not found; create it")
    assert "cannot be read (HTTP 500 boom)" in str(_kube_problem(KubeError(500, "boom"), what,
                                                                 "x", "y"))


# ---------------------------------------------------------------------------------------
# the API refuses a ConfigMap write: exit 2, one line naming the ConfigMap, the API's answer
# and the fix; the error recorded in the index where the API lets it be, else said why not

PLANNER = "system:serviceaccount:kraftsman-system:kraftsman-planner"
# What kube-apiserver answers (status, reason, message) for each refusal.
REFUSALS = {
    403: ("Forbidden", f'configmaps is forbidden: User "{PLANNER}" cannot create resource '
                       f'"configmaps" in API group "" in the namespace "{NS}"'),
    409: ("Conflict", 'Operation cannot be fulfilled on configmaps "{name}": the object has '
                      "been modified; please apply your changes to the latest version and try "
                      "again"),
    422: ("Invalid", 'ConfigMap "{name}" is invalid: metadata.labels: Invalid value: "x"'),
    500: ("InternalError", "etcdserver: request timed out"),
}


def refuse_write(kube: Kube, name: str, code: int) -> str:
    """Make the emulator refuse every write of ConfigMap ``name`` — its create, and the
    merge patch that follows a create answered AlreadyExists — with ``code``, as the API
    server does (a Status object). Returns the Status message."""
    reason, message = REFUSALS[code]
    message = message.format(name=name)

    def writes_it(r: Any) -> bool:
        if getattr(r.resource, "plural", None) != "configmaps":
            return False
        if r.action == kmock.action.UPDATE:
            return bool(r.name == name)
        meta = ((r.data or {}).get("metadata") or {}) if isinstance(r.data, dict) else {}
        return bool(r.action == kmock.action.CREATE and meta.get("name") == name)

    kube.handler.answers.append((writes_it, lambda: status_error(code, reason, message)))
    return message


def one_error_line(run: Run) -> str:
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    return lines[0]


FIXES = {
    403: f"; grant get, create and patch on configmaps in namespace {NS} to the planner "
         "ServiceAccount",
    409: ": another writer changed it meanwhile; plan again with kubectl annotate kr -n "
         f"{NS} {{rb}} kraftsman.io/rebalance=refresh",
    422: ": the API server refused it as invalid; report it with the Job's log",
    500: f"; plan again with kubectl annotate kr -n {NS} {{rb}} kraftsman.io/rebalance=refresh",
}


@pytest.mark.parametrize("code", sorted(REFUSALS))
def test_an_error_that_cannot_be_recorded_says_why(kube: Kube, kubeconfig: Path,
                                                   tmp_path: Path, code: int) -> None:
    """The proposal failed (its KafkaCluster is missing) and the API refuses the index that
    would record it: the one line carries both, the refusal with its fix."""
    rb = f"unrecorded-{code}"
    kube.create("KafkaRebalance", rb, {"clusterRef": {"name": "absent"}, "goal": "rebalance"})
    index = f"{rb}-proposal-1"
    if code == 409:  # an earlier attempt's index exists: create is AlreadyExists, then patch
        kube.request("POST", f"/api/v1/namespaces/{NS}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "data": {"error": "earlier attempt"},
            "metadata": {"name": index, "namespace": NS}})
    message = refuse_write(kube, index, code)
    line = one_error_line(propose(kubeconfig, rb, "1", tmp_path))
    assert line == (
        f"error: KafkaRebalance {rb}: spec.clusterRef.name: KafkaCluster {NS}/absent not found; "
        f"create it or fix the name (and the error could not be recorded: ConfigMap "
        f"{NS}/{index}: cannot be written (HTTP {code} {reason_phrase(code)}: {message})"
        f"{FIXES[code].format(rb=rb)})")
    left = kube.config_map(index)
    assert (left or {}).get("data") == ({"error": "earlier attempt"} if code == 409 else None)


def reason_phrase(code: int) -> str:
    from http import HTTPStatus

    return HTTPStatus(code).phrase


@pytest.mark.spark
def test_a_refused_proposal_write_is_recorded_in_the_index(
        kube: Kube, kubeconfig: Path, tmp_path: Path) -> None:
    """Planned, but the API server fails the part's write (500): exit 2, and the index — a
    ConfigMap of its own, which the API takes — records the line, so the operator reports
    it (PlannerFailed) instead of waiting for a proposal."""
    state = tmp_path / "state"
    cluster_uid = kube.create("KafkaCluster", "refused-c", {"embedded": CLUSTER})
    embedded_state(state, "refused-c", cluster_uid)
    uid = kube.create("KafkaRebalance", "refused", {"clusterRef": {"name": "refused-c"},
                                                    **REBALANCE})
    message = refuse_write(kube, "refused-proposal-1-1", 500)
    run = propose(kubeconfig, "refused", "1", state, *SPARK)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
    # Spark's JVM logs its start on stderr; the Job's own output is one line, the last
    errors = [x for x in run.stderr.splitlines() if x.startswith("error")]
    line = run.stderr.strip().splitlines()[-1]
    assert errors == [line], run.stderr[-3000:]
    assert line == (
        f"error: ConfigMap {NS}/refused-proposal-1-1: cannot be written (HTTP 500 Internal "
        f"Server Error: {message}); plan again with kubectl annotate kr -n {NS} refused "
        "kraftsman.io/rebalance=refresh")
    index = kube.config_map("refused-proposal-1")
    assert index is not None and index["data"] == {"error": line.removeprefix("error: ")}
    assert index["metadata"]["ownerReferences"][0]["uid"] == uid


def test_an_internal_error_is_one_line_and_recorded(kube: Kube, kubeconfig: Path,
                                                    tmp_path: Path) -> None:
    """The catch-all: the API answers the KafkaRebalance's GET with a JSON list instead of
    the object (a misbehaving proxy in front of it). One line naming the failure, exit 2, no
    traceback, and the line in the index."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/kafkarebalances/garbled"
    kube.handler.answers.append((lambda r: r.method == kmock.method.GET and r.url.path == path,
                                 lambda: aiohttp.web.json_response(["not", "an", "object"])))
    line = one_error_line(propose(kubeconfig, "garbled", "1", tmp_path))
    assert line == ("error: internal error (ValueError: dictionary update sequence element #0 "
                    "has length 3; 2 is required); report it with the Job's log")
    index = kube.config_map("garbled-proposal-1")
    assert index is not None and index["data"] == {"error": line.removeprefix("error: ")}


def test_an_internal_error_before_the_api_is_reached_is_one_line(tmp_path: Path) -> None:
    """The catch-all around the whole Job: a kubeconfig whose server is not a URL fails in
    the Kubernetes client's setup, before any ConfigMap could be written."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://[::1", namespace=NS)
    line = one_error_line(propose(kubeconfig, "any", "1", tmp_path))
    assert line == ("error: internal error (ValueError: Invalid IPv6 URL); report it with the "
                    "Job's log")


# ---------------------------------------------------------------------------------------
# the ConfigMap format, pure


def test_parts_stay_under_the_limit_and_keep_the_order() -> None:
    docs = [f"# doc {n}\n" + "x" * 150_000 for n in range(1, 14)]
    parts = pack(docs)
    assert len(parts) == 3  # 6 + 6 + 1 documents of ~150 kB under 900 KiB
    flat = [(k, v) for part in parts for k, v in part.items()]
    assert [k for k, _ in flat] == [resource_key(n) for n in range(1, 14)]
    assert [v for _, v in flat] == docs
    for part in parts:
        assert sum(len(k) + len(v) for k, v in part.items()) <= PART_LIMIT
    with pytest.raises(ValueError, match=r"resource-0001\.yaml"):
        pack(["x" * (PART_LIMIT + 1)])


def test_an_update_removes_keys_the_new_data_lacks() -> None:
    assert data_patch({"error": "e"}, {"summary.json": "{}", "parts": "[]"}) == {
        "error": None, "summary.json": "{}", "parts": "[]"}
    assert data_patch(None, {"error": "e"}) == {"error": "e"}


def test_kubeconfig_credentials_reach_the_client(tmp_path: Path) -> None:
    """Embedded certificate data (base64 in a kubeconfig) becomes files for the client; a
    token becomes the Bearer header; a CA path is used as it is."""
    import base64

    import kopf

    from kraftsman.kube_client import configuration

    enc = {k: base64.b64encode(v.encode()).decode() for k, v in
           {"ca": "CA PEM", "crt": "CERT PEM", "key": "KEY PEM"}.items()}
    cfg = configuration(kopf.ConnectionInfo(
        server="https://api.example:6443/", ca_data=enc["ca"], certificate_data=enc["crt"],
        private_key_data=enc["key"], token="t0ken"), tmp_path)
    assert cfg.host == "https://api.example:6443" and cfg.verify_ssl
    assert [Path(p).read_text() for p in (cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file)] == [
        "CA PEM", "CERT PEM", "KEY PEM"]
    assert cfg.get_api_key_with_prefix("authorization") == "Bearer t0ken"
    plain = configuration(kopf.ConnectionInfo(server="https://h", ca_path="/ca.crt",
                                              insecure=True), tmp_path)
    assert plain.ssl_ca_cert == "/ca.crt" and not plain.verify_ssl
    assert plain.get_api_key_with_prefix("authorization") is None


@pytest.mark.parametrize(("throttle", "planned"), [(0, None), (1_000_000, 1_000_000)])
def test_a_rebalance_throttle_of_zero_plans_unthrottled_reassignments(
        tmp_path: Path, throttle: int, planned: int | None) -> None:
    """KafkaRebalance's throttleBytesPerSecond has a default, so 0 is how a spec asks for
    none: the plan is made as `kraftsman plan --throttle 0` makes it."""
    from kraftsman.rebalance_propose import plan_request

    doc = {"clusterRef": {"name": "c"}, "goal": "remove-brokers", "brokers": [3],
           "balance": True, "throttleBytesPerSecond": throttle}
    spec = parse_rebalance("r", doc)
    req = plan_request(spec, goal_of("r", spec), tmp_path, master="local[2]", cluster="c",
                       spark_conf={})
    assert req.throttle == planned
    assert req.goal == ["remove-brokers", "3"] and req.balance
    assert req.snapshot_dir == tmp_path / "snapshot" and req.out == tmp_path / "plan"


def test_a_rebalance_log_dir_throttle_goes_to_the_plan(tmp_path: Path) -> None:
    from kraftsman.rebalance_propose import plan_request

    doc = {"clusterRef": {"name": "c"}, "goal": "remove-disks",
           "disks": [{"broker": 0, "logDir": "/data/d1"}],
           "logDirThrottleBytesPerSecond": 300_000}
    spec = parse_rebalance("r", doc)
    req = plan_request(spec, goal_of("r", spec), tmp_path, master="local[2]", cluster="c",
                       spark_conf={})
    assert (req.throttle, req.log_dir_throttle) == (50_000_000, 300_000)
    unset = parse_rebalance("r", {**doc, "logDirThrottleBytesPerSecond": None})
    assert plan_request(unset, goal_of("r", unset), tmp_path, master="local[2]", cluster="c",
                        spark_conf={}).log_dir_throttle is None
