"""The `kraftsman` console script against a real Kafka protocol server — `kraftsman cluster
serve`, itself started as a subprocess with `--auth` (and TLS) — over SASL/PLAIN,
SASL/SCRAM and TLS, configured the way a user configures the Kafka tools: `--bootstrap-server`
and a `--command-config` client-properties file.

One scenario per security setup: describe, a reassignment whose throttle is changed while it
moves, a cancel, a preferred election, a voter change, and the refusals (a wrong password at
once, embedded-only commands with exit 2). Nothing sleeps in place of the core: `apply`
without --no-wait polls the cluster until the run ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.tls_certs import make_pki

BIN = Path(sys.executable).parent / "kraftsman"
CLUSTER = """\
apiVersion: kraftsman.io/v1alpha1
kind: KafkaCluster
metadata: {name: rehearsal}
spec:
  embedded:
    brokers: [{id: 0, rack: a}, {id: 1, rack: b}, {id: 2, rack: c},
              {id: 3, rack: a}, {id: 4, rack: b}, {id: 5, rack: c}]
    controllers: [0, 1, 2]
    replicationBytesPerSecond: 2000000
    topics:
      - name: orders
        partitions: 4
        replicationFactor: 3
        sizeBytesPerPartition: 20000000
        assignment: [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
"""
AUTH = """\
users:
  - {name: admin, password: admin-secret}
acls:
  - {principal: "User:admin", operations: [ALL]}
"""
JAAS = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
        "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
        "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def reassignment(name: str, throttle: int, moves: list[tuple[int, list[int]]]) -> str:
    parts = "\n".join(f"    - {{topic: orders, partition: {p}, replicas: {r}}}" for p, r in moves)
    return (f"apiVersion: kraftsman.io/v1alpha1\nkind: PartitionReassignment\n"
            f"metadata: {{name: {name}}}\nspec:\n  clusterRef: {{name: prod}}\n"
            f"  throttleBytesPerSecond: {throttle}\n  maxConcurrentMoves: 4\n"
            f"  partitions:\n{parts}\n")


@dataclass
class Served:
    bootstrap: str
    config: Path  # --command-config
    state: Path  # the client's state dir (the server has its own)
    tmp: Path
    mechanism: str
    protocol: str

    def run(self, *args: str, config: Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN), *args, "--bootstrap-server", self.bootstrap, "--command-config",
             str(config or self.config), "--state-dir", str(self.state)],
            capture_output=True, text=True, timeout=timeout)

    def json(self, *args: str) -> object:
        r = self.run(*args, "-o", "json")
        assert r.returncode == 0, r.stderr
        return orjson.loads(r.stdout)

    def properties(self, password: str) -> Path:
        lines = [f"security.protocol={self.protocol}", f"sasl.mechanism={self.mechanism}",
                 f'sasl.jaas.config={JAAS[self.mechanism]} required \\',
                 f'    username="admin" password="{password}";']
        if self.protocol == "SASL_SSL":
            lines += ["ssl.truststore.type=PEM", "ssl.truststore.location=pki/ca.pem"]
        path = self.tmp / f"client-{password}.properties"
        path.write_text("\n".join(lines) + "\n")
        return path


# TLS + SCRAM by default; each variant costs about a minute on a loaded 2-core machine (every
# CLI call is a fresh process), so PLAIN and SCRAM-SHA-256 run with --soak.
SETUPS = [pytest.param(("SASL_SSL", "SCRAM-SHA-512"), id="SASL_SSL-SCRAM-SHA-512"),
          pytest.param(("SASL_PLAINTEXT", "PLAIN"), id="SASL_PLAINTEXT-PLAIN",
                       marks=pytest.mark.slow),
          pytest.param(("SASL_PLAINTEXT", "SCRAM-SHA-256"), id="SASL_PLAINTEXT-SCRAM-SHA-256",
                       marks=pytest.mark.slow)]


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    assert BIN.exists(), f"console script {BIN} not installed (pip install -e .)"
    protocol, mechanism = request.param
    server_state = tmp_path / "server-state"
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "auth.yaml").write_text(AUTH)
    made = subprocess.run([str(BIN), "apply", "-f", str(tmp_path / "cluster.yaml"),
                           "--state-dir", str(server_state)],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    cmd = [str(BIN), "cluster", "serve", "--state-dir", str(server_state), "--listen",
           "127.0.0.1:0", "--time-scale", "5", "--auth", str(tmp_path / "auth.yaml")]
    if protocol == "SASL_SSL":
        pki = make_pki(tmp_path / "pki")
        cmd += ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), (line, proc.stderr and proc.stderr.read())
        s = Served(line.split()[-1], Path(), tmp_path / "client-state", tmp_path, mechanism,
                   protocol)
        s.config = s.properties("admin-secret")
        yield s
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert proc.returncode == 0, err[-2000:]


def throttles(s: Served) -> dict[str, str]:
    """leader/follower.replication.throttled.rate per broker, read with kafka-python."""
    from controller_core.backends.client_properties import load_command_config
    from controller_core.backends.kafka_admin import RetryPolicy, open_kafka_admin

    admin = open_kafka_admin(s.bootstrap, load_command_config(s.config),
                             retry=RetryPolicy(total_seconds=10))
    try:
        configs = admin.describe_configs([("BROKER", str(b)) for b in range(6)])
    finally:
        admin.close()
    return {f"{res[1]}:{k}": v for res, c in configs.items() for k, v in c.items()
            if k.endswith("replication.throttled.rate")}


@pytest.mark.parametrize("served", SETUPS, indirect=True)
def test_cli_against_a_served_cluster(served: Served) -> None:
    s = served
    desc = s.json("describe", "cluster")
    assert isinstance(desc, dict) and len(desc["brokers"]) == 6
    cluster_id = desc["clusterId"]

    # -- a reassignment whose throttle changes mid-flight ------------------------------------
    moves = [(0, [3, 4, 5]), (1, [4, 5, 3])]
    f = s.tmp / "move.yaml"
    # The executor starts a batch before it places its throttles (unlike Kafka's
    # ReassignPartitionsCommand, which throttles first): the first few wall-clock milliseconds
    # copy at full bandwidth, so the bandwidth and the time scale here are kept low.
    f.write_text(reassignment("move", 1_000, moves))  # would take an hour of wall time
    r = s.run("apply", "-f", str(f), "--no-wait")
    assert r.returncode == 0, r.stderr
    state = s.state / "kafka" / cluster_id / "resources" / "PartitionReassignment" / "move.json"
    assert state.is_file(), "operation state is kept by cluster id for the next invocation"
    listed = s.run("reassignments", "list")
    assert "orders-0" in listed.stdout and "orders-1" in listed.stdout, listed.stdout
    assert set(throttles(s).values()) == {"1000"}
    status = s.run("reassignments", "status")
    assert status.returncode == 0 and "orders-0" in status.stdout, status.stdout
    f.write_text(reassignment("move", 5_000_000, moves))
    r = s.run("apply", "-f", str(f), "--no-wait")
    assert r.returncode == 0, r.stderr
    # the new limit is on the brokers at once (the executor re-places changed limits)
    assert set(throttles(s).values()) == {"5000000"}
    r = s.run("apply", "-f", str(f), "--tick", "0.2")  # resumes and runs to the end
    assert r.returncode == 0, r.stderr
    assert "completed" in (r.stdout + r.stderr).lower()
    assert s.run("reassignments", "list").stdout.strip() == "No partition reassignments found."
    assert throttles(s) == {}, "every throttle the run placed is removed at the end"
    topics = s.json("describe", "topics", "--topic", "orders")
    assert isinstance(topics, list)
    assert {(t["partition"], tuple(sorted(t["replicas"]))) for t in topics
            if t["partition"] in (0, 1)} == {(0, (3, 4, 5)), (1, (3, 4, 5))}

    # -- a cancel ------------------------------------------------------------------------------
    f2 = s.tmp / "slow.yaml"
    f2.write_text(reassignment("slow", 1_000, [(2, [5, 4, 3])]))
    assert s.run("apply", "-f", str(f2), "--no-wait").returncode == 0
    cancel = s.run("reassignments", "cancel")  # everything in flight
    assert cancel.returncode == 0, cancel.stderr
    assert "Successfully cancelled partition reassignments for: " in cancel.stdout
    assert "orders-2" in cancel.stdout
    assert s.run("reassignments", "list").stdout.strip() == "No partition reassignments found."

    # -- a preferred election --------------------------------------------------------------------
    elect = s.run("elect", "--election-type", "preferred", "--all-topic-partitions")
    assert elect.returncode == 0, elect.stderr

    # -- a voter change ---------------------------------------------------------------------------
    alter = s.run("quorum", "alter", "--voters", "0,1,3")
    assert alter.returncode == 0, alter.stderr
    assert "adding voter 3" in alter.stdout and "removing voter 2" in alter.stdout
    q = s.json("quorum", "describe")
    assert isinstance(q, dict) and sorted(q["currentVoters"]) == [0, 1, 3]

    # -- refusals -------------------------------------------------------------------------------
    adv = s.run("cluster", "advance", "10")
    assert adv.returncode == 2 and "embedded cluster only" in adv.stderr
    started = time.monotonic()
    bad = s.run("describe", "cluster", config=s.properties("wrong-password"))
    took = time.monotonic() - started
    print(f"{s.protocol}/{s.mechanism}: wrong password refused in {took:.2f} s "
          "(whole CLI process)")
    assert bad.returncode == 2, bad.stderr
    assert "SASL_AUTHENTICATION_FAILED" in bad.stderr and "wrong-password" not in bad.stderr
    assert "check sasl.jaas.config in --command-config" in bad.stderr
    assert "Traceback" not in bad.stderr and "Unable to bootstrap" not in bad.stderr
    assert took < 15  # generous: documents that the 30 s bootstrap timeout is not waited for


def test_embedded_only_commands_and_bad_flags_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before connecting (in-process: no server needed)."""
    from kraftsman.cli import main

    def run(*args: str) -> tuple[int, str]:
        rc = main([*args, "--state-dir", str(tmp_path)])
        return rc, capsys.readouterr().err

    for cmd in (["cluster", "fail-broker", "1"], ["cluster", "restore-controller", "0"],
                ["cluster", "advance", "5"]):
        rc, err = run(*cmd, "--bootstrap-server", "127.0.0.1:1")
        assert rc == 2 and "embedded cluster only" in err, err
    rc, err = run("describe", "cluster", "--bootstrap-server", "no-port")
    assert rc == 2 and "--bootstrap-server 'no-port': expected HOST:PORT" in err, err
    rc, err = run("describe", "cluster", "--command-config", str(tmp_path / "x.properties"))
    assert rc == 2 and "needs --bootstrap-server" in err
    rc, err = run("describe", "cluster", "--cluster", "nope", "--command-config", "x")
    assert rc == 2 and "needs --bootstrap-server" in err
    rc, err = run("describe", "cluster", "--bootstrap-server", "h:1", "--connect-timeout", "0")
    assert rc == 2 and "--connect-timeout" in err
    move = tmp_path / "move.yaml"
    move.write_text(CLUSTER.replace("name: rehearsal", "name: prod") + "---\n"
                    + reassignment("m", 1, [(0, [3, 4, 5])]))
    rc, err = run("apply", "-f", str(move), "--bootstrap-server", "127.0.0.1:1")
    assert rc == 2 and "leave out KafkaCluster/prod or the flag" in err, err
    move.write_text(reassignment("m", 1, [(0, [3, 4, 5])]))
    rc, err = run("apply", "-f", str(move), "--command-config", "x.properties")
    assert rc == 2 and "--command-config: no real cluster here" in err, err
    props = tmp_path / "jks.properties"
    props.write_text("security.protocol=SSL\nssl.truststore.location=/etc/ts.jks\n"
                     "ssl.truststore.type=JKS\n")
    rc, err = run("describe", "cluster", "--bootstrap-server", "127.0.0.1:1",
                  "--command-config", str(props))
    assert rc == 2 and "ssl.truststore.type" in err and "PEM" in err
    with socket_closed_port() as port:
        started = time.monotonic()
        rc, err = run("reassignments", "list", "--bootstrap-server", f"127.0.0.1:{port}",
                      "--connect-timeout", "1")
    assert rc == 2 and "cannot reach bootstrap servers" in err, err
    assert time.monotonic() - started < 30  # --connect-timeout, not the default 30 s


class socket_closed_port:
    """A loopback port nothing listens on (bound, then closed)."""

    def __enter__(self) -> int:
        import socket
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port: int = sock.getsockname()[1]
        sock.close()
        return self.port

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("served", [("SASL_PLAINTEXT", "PLAIN")], indirect=True,
                         ids=["SASL_PLAINTEXT-PLAIN"])
def test_kafka_cluster_resource_with_bootstrap_servers(served: Served) -> None:
    """`apply` of a KafkaCluster with bootstrapServers registers it; later commands name it
    with --cluster; authSecretRef is supplied as --command-config. Over SASL/PLAIN, so the
    default run covers PLAIN end to end too."""
    s = served
    f = s.tmp / "prod.yaml"
    f.write_text("apiVersion: kraftsman.io/v1alpha1\nkind: KafkaCluster\nmetadata: {name: prod}\n"
                 f"spec:\n  bootstrapServers: \"{s.bootstrap}\"\n"
                 "  authSecretRef: {name: prod-admin}\n---\n"
                 + reassignment("one", 50_000_000, [(3, [3, 1, 2])]))
    base = ["--state-dir", str(s.state)]
    r = subprocess.run([str(BIN), "apply", "-f", str(f), *base], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "spec.authSecretRef" in r.stderr and "--command-config" in r.stderr
    r = subprocess.run([str(BIN), "apply", "-f", str(f), "--command-config", str(s.config),
                        "--tick", "0.2", *base], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "KafkaCluster/prod connected" in r.stdout + r.stderr
    r = subprocess.run([str(BIN), "describe", "topics", "--cluster", "prod", "--command-config",
                        str(s.config), "-o", "json", *base], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    rows = orjson.loads(r.stdout)
    assert next(t for t in rows if t["partition"] == 3)["replicas"] == [3, 1, 2]
