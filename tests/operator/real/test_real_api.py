"""What only a real kube-apiserver shows: the CRDs' CEL rules and schema bounds enforced at
admission, the printer columns as `kubectl get -o wide` prints them, server-side apply by a
second field manager (as Argo CD applies), conflicting writes, and watches that end and must
be restarted (the server restarted under the operator). The operator is the chart's
Deployment pod with its ServiceAccount's token (conftest.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import yaml
from harness import Api, cond_is
from real_install import chart
from test_operator_kmock import CLUSTER, MOVES, REF

from kraftsman.crdgen import KIND_INFO
from kraftsman.resources import API_VERSION
from tests.realk8s.apiserver import RealServer

SHORT = {"KafkaCluster": "kc", "KafkaQuorum": "kq", "PartitionReassignment": "preas",
         "LeaderElection": "le", "KafkaRebalance": "kr"}


def manifest(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": API_VERSION, "kind": kind,
                           "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def kubectl(server: RealServer, *args: str, input: str | None = None,
            check: bool = True) -> Any:
    return server.kubectl(*args, input=input, check=check)


# -- admission: the CRDs' rules as the API server evaluates them --------------------------

@pytest.mark.parametrize("kind,spec", [
    ("PartitionReassignment", {**REF, "partitions": MOVES[:1]}),
    ("LeaderElection", {**REF, "topics": ["orders"]}),
    ("KafkaQuorum", {**REF, "voters": [0, 1, 2]}),
    ("KafkaRebalance", {**REF}),
])
def test_cluster_ref_is_immutable_at_admission(real_server: RealServer, namespace: str,
                                               kind: str, spec: dict[str, Any]) -> None:
    kubectl(real_server, "apply", "--server-side", "-f", "-",
            input=manifest(kind, "x", namespace, spec))
    done = kubectl(real_server, "patch", SHORT[kind], "x", "-n", namespace, "--type=merge",
                   "-p", json.dumps({"spec": {"clusterRef": {"name": "other"}}}), check=False)
    assert done.returncode == 1
    assert "spec.clusterRef: Invalid value" in done.stderr, done.stderr
    assert "spec.clusterRef is immutable" in done.stderr
    assert "delete this resource and create a new one for another cluster" in done.stderr
    got = kubectl(real_server, "get", SHORT[kind], "x", "-n", namespace,
                  "-o", "jsonpath={.spec.clusterRef.name}")
    assert got.stdout == "demo"


def test_cancel_with_dry_run_and_bad_throttles_are_refused_naming_the_field(
        real_server: RealServer, namespace: str) -> None:
    both = {**REF, "partitions": MOVES[:1], "cancel": True, "dryRun": True}
    done = kubectl(real_server, "create", "-f", "-", check=False,
                   input=manifest("PartitionReassignment", "both", namespace, both))
    assert done.returncode == 1
    assert "spec.cancel and spec.dryRun cannot both be true" in done.stderr, done.stderr
    # 2**63 - 1 as a schema maximum would make the server refuse every throttle (it reads
    # bounds as float64s: crdgen leaves that bound out); one more is no int64, refused so.
    for throttle, words in ((0, "should be greater than or equal to 1"),
                            (2**63, "must be of type integer")):
        bad = {**REF, "partitions": MOVES[:1], "throttleBytesPerSecond": throttle}
        done = kubectl(real_server, "create", "-f", "-", check=False,
                       input=manifest("PartitionReassignment", "bad", namespace, bad))
        assert done.returncode == 1
        assert "spec.throttleBytesPerSecond" in done.stderr, done.stderr
        assert words in done.stderr, done.stderr
    gone = kubectl(real_server, "get", "preas", "-n", namespace, "-o", "name")
    assert gone.stdout == ""
    largest = {**REF, "partitions": MOVES[:1], "throttleBytesPerSecond": 2**63 - 1}
    kubectl(real_server, "create", "-f", "-",
            input=manifest("PartitionReassignment", "largest", namespace, largest))


def test_a_non_numeric_bootstrap_port_is_refused_naming_the_field(
        real_server: RealServer, namespace: str) -> None:
    for servers in ("kafka-0:90x2", "kafka-0:9092,kafka-1"):
        done = kubectl(real_server, "create", "-f", "-", check=False,
                       input=manifest("KafkaCluster", "bad", namespace,
                                      {"bootstrapServers": servers}))
        assert done.returncode == 1
        assert "spec.bootstrapServers: Invalid value" in done.stderr, done.stderr
        assert "should match" in done.stderr, done.stderr
    kubectl(real_server, "create", "-f", "-", input=manifest(
        "KafkaCluster", "good", namespace, {"bootstrapServers": "kafka-0:9092, [::1]:9093"}))


# -- printer columns, server-side apply by a second manager --------------------------------

def header(table: str) -> list[str]:
    return table.splitlines()[0].split()


def row(table: str, name: str) -> list[str]:
    (line,) = [ln for ln in table.splitlines()[1:] if ln.split()[0] == name]
    return line.split()


async def test_argocd_applies_server_side_and_kubectl_get_wide_answers_where_it_stands(
        api: Api, deployed: Any, real_server: RealServer) -> None:
    """Argo CD applies with its own field manager (server-side); the operator adds its
    finalizer, annotations and status with its own; a second apply of a changed spec meets no
    conflict and keeps what the operator wrote. `kubectl get -o wide` prints the CRDs'
    printer columns with the operator's figures."""
    ns = api.namespace
    await deployed(chart())

    def argocd_apply(kind: str, name: str, spec: dict[str, Any]) -> None:
        kubectl(real_server, "apply", "--server-side", "--field-manager=argocd-controller",
                "-f", "-", input=manifest(kind, name, ns, spec))

    argocd_apply("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    move = {**REF, "partitions": MOVES, "maxConcurrentMoves": 1,
            "throttleBytesPerSecond": 50_000_000}
    argocd_apply("PartitionReassignment", "move", move)
    argocd_apply("KafkaQuorum", "q", {**REF, "voters": [0, 1, 2]})
    await api.wait("PartitionReassignment", "move", lambda o: (o.get("status") or {}).get(
        "observedGeneration") == 1 and "kraftsman.io/finalizer" in o["metadata"].get(
        "finalizers", []))
    argocd_apply("PartitionReassignment", "move", {**move, "maxConcurrentMoves": 3})
    done = await api.wait("PartitionReassignment", "move", lambda o: cond_is(
        "Succeeded", "True")(o) and o["status"]["observedGeneration"] == 2, timeout=90)
    assert done["metadata"]["generation"] == 2 and done["spec"]["maxConcurrentMoves"] == 3
    assert "kraftsman.io/finalizer" in done["metadata"]["finalizers"]
    managers = {(m["manager"], m.get("subresource", "")) for m in
                done["metadata"]["managedFields"]}
    assert ("argocd-controller", "") in managers
    assert any(sub == "status" and m != "argocd-controller" for m, sub in managers), managers
    # A later sync wave, as docs/operator.md says: elect once the data has moved.
    argocd_apply("LeaderElection", "pref", {**REF, "topics": ["orders"], "runId": "1"})
    await api.wait("LeaderElection", "pref", cond_is("Succeeded", "True"))
    await api.wait("KafkaQuorum", "q", cond_is("Ready", "True"))

    for kind in ("KafkaCluster", "KafkaQuorum", "PartitionReassignment", "LeaderElection"):
        table = kubectl(real_server, "get", SHORT[kind], "-n", ns, "-o", "wide").stdout
        print(table)
        columns = ["NAME", *[c.name.upper() for c in KIND_INFO[kind].columns]]
        assert header(table) == columns, (kind, table)
        narrow = kubectl(real_server, "get", SHORT[kind], "-n", ns).stdout
        assert header(narrow) == ["NAME", *[c.name.upper() for c in KIND_INFO[kind].columns
                                            if not c.priority]]
    preas = dict(zip(header(table := kubectl(real_server, "get", "preas", "-n", ns, "-o",
                                             "wide").stdout),
                     row(table, "move"), strict=True))
    assert (preas["PHASE"], preas["PROGRESS"], preas["DONE"], preas["TOTAL"]) == (
        "Completed", "100%", "6", "6"), table
    kc = dict(zip(header(table := kubectl(real_server, "get", "kc", "-n", ns).stdout),
                  row(table, "demo"), strict=True))
    assert (kc["BACKEND"], kc["BROKERS"], kc["READY"], kc["PHASE"]) == (
        "embedded", "6", "True", "Ready"), table
    le = dict(zip(header(table := kubectl(real_server, "get", "le", "-n", ns).stdout),
                  row(table, "pref"), strict=True))
    assert (le["TYPE"], le["PHASE"]) == ("PREFERRED", "Completed"), table
    every = kubectl(real_server, "get", "kraftsman", "-n", ns, "-o", "name").stdout.split()
    assert len(every) == 4, every  # the CRDs' category


# -- conflicting writes ---------------------------------------------------------------------

async def test_edits_racing_the_operators_writes_converge(api: Api, deployed: Any,
                                                         real_server: RealServer) -> None:
    """A user edits the spec again and again while the operator adds its finalizer and writes
    status: kopf's JSON patches carry a resourceVersion test that the real server fails
    (the emulator dropped it), so the operator must retry, and it ends on the last spec. A
    replace with a stale resourceVersion is refused with 409, as kubectl shows it."""
    op = await deployed(chart())
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("PartitionReassignment", "move", {
        **REF, "partitions": MOVES, "maxConcurrentMoves": 1, "throttleBytesPerSecond": 10**6})
    for n in range(2, 12):
        await api.set_spec("PartitionReassignment", "move", {"maxConcurrentMoves": n})
    obj = await api.wait("PartitionReassignment", "move", lambda o: (
        o.get("status") or {}).get("observedGeneration") == 11 and "kraftsman.io/finalizer" in
        o["metadata"].get("finalizers", []), timeout=60)
    assert obj["spec"]["maxConcurrentMoves"] == 11
    stale = dict(obj)
    stale["metadata"] = {**obj["metadata"], "resourceVersion": "1"}
    stale["spec"] = {**obj["spec"], "maxConcurrentMoves": 1}
    done = kubectl(real_server, "replace", "-f", "-", input=json.dumps(stale), check=False)
    assert done.returncode == 1
    assert "the object has been modified; please apply your changes to the latest version" \
        in done.stderr, done.stderr
    await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"), timeout=90)
    assert "Traceback" not in op.log()


# -- watches that end -----------------------------------------------------------------------

async def test_the_operator_carries_on_after_the_api_server_restarts(
        api: Api, deployed: Any, real_server: RealServer) -> None:
    """kube-apiserver restarts mid-move (every watch ends; the new server's watch cache starts
    at etcd's current revision, so resuming an older one is answered 410 Gone): the operator
    keeps its reassignment going, and a resource created afterwards is handled."""
    op = await deployed(chart())
    await api.create("KafkaCluster", "demo", CLUSTER)
    await api.wait("KafkaCluster", "demo", cond_is("Ready", "True"))
    await api.create("PartitionReassignment", "move", {
        **REF, "partitions": MOVES, "maxConcurrentMoves": 1, "throttleBytesPerSecond": 10**7})
    await api.wait("PartitionReassignment", "move",
                   lambda o: (o.get("status") or {}).get("moving", 0) >= 1)
    await asyncio.to_thread(real_server.restart_apiserver)
    await api.create("LeaderElection", "after", {**REF, "topics": ["orders"], "runId": "1"})
    # Handled: it ran to its end. (Not necessarily Succeeded: a partition whose move is in
    # flight may have its preferred leader, the first target replica, still catching up —
    # PREFERRED_LEADER_NOT_AVAILABLE, as Kafka 4.4 answers.)
    done = await api.wait("LeaderElection", "after", cond_is("Progressing", "False", "Completed"),
                          timeout=60)
    assert done["status"]["counts"]["total"] == 6, done["status"]
    await api.wait("PartitionReassignment", "move", cond_is("Succeeded", "True"), timeout=90)
    assert op.alive() and "Traceback" not in op.log()
