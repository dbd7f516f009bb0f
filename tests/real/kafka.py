"""A real Apache Kafka (KRaft) cluster on loopback, for the tests, the benchmarks and people.

The jars come from Maven Central through ``tests/real/pom.xml`` (``install``), cached outside
the work tree. ``up`` formats and starts a dynamic controller quorum (KIP-853, kraft.version 1)
of three dedicated controllers and four brokers with racks, with two listeners on every
broker: PLAINTEXT, and SASL_SSL with SCRAM-SHA-512 on a certificate made at start. The JVMs
run with small heaps and the C1 compiler only, so the whole cluster fits beside the test suite
on two cores. Everything a node writes (data, ``server.log``) stays in its directory, so a
failed test leaves its logs behind.

``python -m tests.real.kafka up DIR`` (``tools/real-kafka``) prints the bootstrap servers and
the client-properties file of the SASL_SSL listener; ``down DIR`` stops the cluster. The
pytest fixture (``tests/real/conftest.py``) and ``bench/`` use the same :class:`RealKafka`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
POM = Path(__file__).with_name("pom.xml")
KAFKA_VERSION = "4.4.0"
CACHE = Path(os.environ.get("KRAFTSMAN_CACHE", Path.home() / ".cache" / "kraftsman"))
LIBS = CACHE / f"kafka-{KAFKA_VERSION}" / "libs"
_INSTALLED = LIBS.parent / "installed"

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-secret"
CONTROLLERS = (100, 101, 102)
SPARE_CONTROLLERS = (103, 104)  # formatted without a quorum, started on demand (add-controller)
BROKERS = (0, 1, 2, 3)
RACKS = {0: "a", 1: "b", 2: "c", 3: "a"}
JVM = ["-Xms48m", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-XX:ActiveProcessorCount=1", "-Xss512k", "-XX:MaxDirectMemorySize=64m",
       "-Djava.awt.headless=true"]
TOOL_JVM = ["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-XX:ActiveProcessorCount=1"]
# Kafka's own tools by the names of their scripts.
TOOLS = {
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
}


class RealKafkaError(Exception):
    """The cluster could not be installed, started or reached; the message says where to look."""


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = Path(home, "bin", "java") if home else shutil.which("java")
    if not exe or not Path(exe).exists():
        raise RealKafkaError("java not found: install Java 17 or set JAVA_HOME")
    return str(exe)


def installed() -> bool:
    return _INSTALLED.exists() and _INSTALLED.read_text().strip() == _pom_digest()


def _pom_digest() -> str:
    import hashlib
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def install(quiet: bool = True) -> Path:
    """Copy Kafka's jars from Maven into the cache (once per pom)."""
    if installed():
        return LIBS
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RealKafkaError("mvn not found: Maven installs the real Kafka (tests/real/pom.xml)")
    if LIBS.exists():
        shutil.rmtree(LIBS)
    LIBS.mkdir(parents=True)
    cmd = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(POM),
           "dependency:copy-dependencies", f"-DoutputDirectory={LIBS}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RealKafkaError(f"{' '.join(cmd)} failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
    _INSTALLED.write_text(_pom_digest() + "\n")
    return LIBS


def classpath() -> str:
    if not installed():
        raise RealKafkaError(f"the real Kafka is not installed in {LIBS}: run "
                             "`tools/real-kafka install` (Maven, tests/real/pom.xml)")
    return str(LIBS / "*")



def run_tool(tool: str, *args: str, check: bool = True, timeout: float = 120,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's own tools (``kafka-reassign-partitions`` …) from the cached jars."""
    cmd = [java(), *TOOL_JVM, "-Dlog4j2.level=WARN", "-cp", classpath(), TOOLS[tool], *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check and done.returncode != 0:
        raise RealKafkaError(f"{tool} {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done


@dataclass
class Node:
    id: int
    roles: str  # "broker" or "controller"
    ports: dict[str, int]
    directory_id: str = ""
    rack: str | None = None


@dataclass
class Layout:
    """What ``up`` decided and ``down``/the fixtures read back (DIR/cluster.json)."""

    cluster_id: str
    nodes: dict[int, Node]
    voters: list[int]
    ca: str = ""
    client_properties: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Layout:
        doc = json.loads(path.read_text())
        nodes = {int(k): Node(**v) for k, v in doc.pop("nodes").items()}
        return cls(nodes=nodes, **doc)

    def save(self, path: Path) -> None:
        doc = asdict(self)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def _log4j(node_dir: Path) -> Path:
    path = node_dir / "log4j2.properties"
    path.write_text(
        "status = warn\n"
        "appender.file.type = File\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {node_dir / 'server.log'}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
        "logger.request.name = kafka.request.logger\n"
        "logger.request.level = WARN\n"
        "logger.authorizer.name = kafka.authorizer.logger\n"
        "logger.authorizer.level = WARN\n")
    return path


class RealKafka:
    """One cluster in one directory. Safe to re-open from another process (``Layout``)."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory).resolve()
        self.layout_path = self.dir / "cluster.json"
        self.layout: Layout | None = (Layout.load(self.layout_path)
                                      if self.layout_path.exists() else None)

    # -- addresses -------------------------------------------------------------------------------
    def _lay(self) -> Layout:
        if self.layout is None:
            raise RealKafkaError(f"no cluster in {self.dir} (run `up` first)")
        return self.layout

    @property
    def cluster_id(self) -> str:
        return self._lay().cluster_id

    def node(self, node_id: int) -> Node:
        return self._lay().nodes[node_id]

    @property
    def brokers(self) -> list[int]:
        return sorted(i for i, n in self._lay().nodes.items() if n.roles == "broker")

    @property
    def controllers(self) -> list[int]:
        return sorted(i for i, n in self._lay().nodes.items() if n.roles == "controller")

    def bootstrap(self, listener: str = "PLAINTEXT", brokers: Sequence[int] | None = None) -> str:
        ids = self.brokers if brokers is None else brokers
        return ",".join(f"127.0.0.1:{self.node(b).ports[listener]}" for b in ids)

    def controller_bootstrap(self, ids: Sequence[int] | None = None) -> str:
        ids = self._lay().voters if ids is None else ids
        return ",".join(f"127.0.0.1:{self.node(c).ports['CONTROLLER']}" for c in ids)

    def controller_endpoint(self, node_id: int) -> str:
        """The advertised controller listener, as AddRaftVoter and --controller take it."""
        return f"CONTROLLER://127.0.0.1:{self.node(node_id).ports['CONTROLLER']}"

    @property
    def client_properties(self) -> Path:
        return Path(self._lay().client_properties)

    @property
    def ca(self) -> Path:
        return Path(self._lay().ca)

    def node_dir(self, node_id: int) -> Path:
        return self.dir / f"node-{node_id}"

    def log(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "server.log"

    def log_dirs(self, node_id: int) -> list[str]:
        """The node's log directories: two on a broker (JBOD: moves between them, KIP-113),
        one on a controller (its metadata log)."""
        d = self.node_dir(node_id)
        names = ("data", "data-b") if node_id in BROKERS else ("data",)
        return [str(d / n) for n in names]

    # -- configuration ---------------------------------------------------------------------------
    def _properties(self, node: Node) -> str:
        lay = self._lay()
        lines = [
            f"node.id={node.id}",
            f"process.roles={node.roles}",
            f"log.dirs={','.join(self.log_dirs(node.id))}",
            f"controller.quorum.bootstrap.servers={self.controller_bootstrap(lay.voters)}",
            "controller.listener.names=CONTROLLER",
            # Reconnect quickly after a node is killed on purpose.
            "controller.quorum.fetch.timeout.ms=2000",
            "controller.quorum.election.timeout.ms=1000",
            "controller.quorum.election.backoff.max.ms=1000",
            "broker.heartbeat.interval.ms=1000",
            "broker.session.timeout.ms=9000",  # Kafka's default: no false fencing under load
            # A busy machine must not make a starting broker give up (Kafka's 60 s).
            "initial.broker.registration.timeout.ms=300000",
            # Leadership moves only when a test asks for it.
            "auto.leader.rebalance.enable=false",
            "num.network.threads=2",
            "num.io.threads=2",
            "background.threads=2",
            "num.replica.fetchers=1",
            "num.recovery.threads.per.data.dir=1",
            "log.cleaner.enable=false",
            # Small replica fetches, so a replication throttle holds a move back evenly: the
            # quota is checked before a fetch, so each fetch may take this much at once.
            "replica.fetch.max.bytes=65536",
            "replica.fetch.response.max.bytes=65536",
        ]
        if node.roles == "controller":
            lines += [
                f"listeners=CONTROLLER://127.0.0.1:{node.ports['CONTROLLER']}",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT",
            ]
        else:
            d_ssl = self.dir / "pki"
            lines += [
                f"broker.rack={node.rack}",
                f"listeners=PLAINTEXT://127.0.0.1:{node.ports['PLAINTEXT']},"
                f"SASL_SSL://127.0.0.1:{node.ports['SASL_SSL']}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.ports['PLAINTEXT']},"
                f"SASL_SSL://127.0.0.1:{node.ports['SASL_SSL']}",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                "SASL_SSL:SASL_SSL",
                "sasl.enabled.mechanisms=SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={d_ssl / 'broker-keystore.pem'}",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={d_ssl / 'ca.pem'}",
                "ssl.client.auth=none",
                "offsets.topic.replication.factor=3",
                "offsets.topic.num.partitions=1",
                "transaction.state.log.replication.factor=3",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=1",
                "share.coordinator.state.topic.replication.factor=3",
                "share.coordinator.state.topic.num.partitions=1",
                "group.initial.rebalance.delay.ms=0",
                "num.partitions=1",
                "default.replication.factor=3",
                "auto.create.topics.enable=false",
            ]
        return "\n".join(lines) + "\n"

    def _write_config(self, node: Node) -> Path:
        d = self.node_dir(node.id)
        d.mkdir(parents=True, exist_ok=True)
        path = d / "server.properties"
        path.write_text(self._properties(node))
        _log4j(d)
        return path

    # -- lifecycle -------------------------------------------------------------------------------
    def up(self, timeout: float = 180.0) -> RealKafka:
        """Format and start a new cluster in an empty directory; returns once every broker is
        registered and unfenced and the quorum has a leader."""
        if self.layout is not None:
            raise RealKafkaError(f"{self.dir} already holds a cluster: `down` it or use another "
                                 "directory")
        self.dir.mkdir(parents=True, exist_ok=True)
        storage = self.dir / "cluster.json.part"
        nodes: dict[int, Node] = {}
        for c in (*CONTROLLERS, *SPARE_CONTROLLERS):
            nodes[c] = Node(c, "controller", {"CONTROLLER": free_port()},
                            directory_id=_random_uuid() if c in CONTROLLERS else "")
        for b in BROKERS:
            nodes[b] = Node(b, "broker", {"PLAINTEXT": free_port(), "SASL_SSL": free_port()},
                            rack=RACKS[b])
        self.layout = Layout(_random_uuid(), nodes, list(CONTROLLERS))
        self._pki()
        initial = ",".join(f"{c}@127.0.0.1:{nodes[c].ports['CONTROLLER']}:{nodes[c].directory_id}"
                           for c in CONTROLLERS)
        scram = f"SCRAM-SHA-512=[name={ADMIN_USER},password={ADMIN_PASSWORD}]"
        formats = []
        for node in nodes.values():
            cfg = self._write_config(node)
            args = ["format", "-c", str(cfg), "--cluster-id", self.cluster_id]
            if node.id in CONTROLLERS:
                args += ["--initial-controllers", initial, "--add-scram", scram]
            else:
                args += ["--no-initial-controllers"]
            formats.append(self._spawn_tool("kafka-storage", args, node.id))
        for node_id, proc in formats:
            if proc.wait(timeout=120) != 0:
                out = (self.node_dir(node_id) / "format.log").read_text()
                raise RealKafkaError(f"formatting node {node_id} failed:\n{out[-3000:]}")
        for c in SPARE_CONTROLLERS:  # formatted without a quorum: it picked its own id
            nodes[c].directory_id = self._meta_directory_id(c)
        self.layout.save(storage)
        storage.rename(self.layout_path)
        deadline = time.monotonic() + timeout
        try:
            for node_id in CONTROLLERS:
                self.start(node_id)
            self.wait_quorum_committed(timeout=timeout)
            for node_id in BROKERS:
                self.start(node_id)
            self.wait_ready(timeout=max(deadline - time.monotonic(), 30.0))
        except BaseException:
            self.down()  # no JVM outlives a failed start; the logs stay in the directory
            raise
        return self

    def _pki(self) -> None:
        from tests.tls_certs import make_pki
        pki = make_pki(self.dir / "pki")
        keystore = self.dir / "pki" / "broker-keystore.pem"
        keystore.write_bytes(pki.server_key.read_bytes() + pki.server_cert.read_bytes())
        props = self.dir / "client-sasl-ssl.properties"
        props.write_text(
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{ADMIN_USER}" password="{ADMIN_PASSWORD}";\n'
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={pki.ca}\n")
        lay = self._lay()
        lay.ca = str(pki.ca)
        lay.client_properties = str(props)
        lay.extra["other_ca"] = str(pki.other_ca)

    def _meta_directory_id(self, node_id: int) -> str:
        meta = self.node_dir(node_id) / "data" / "meta.properties"
        for line in meta.read_text().splitlines():
            if line.startswith("directory.id="):
                return line.split("=", 1)[1].strip()
        raise RealKafkaError(f"{meta} names no directory.id")

    def _spawn_tool(self, tool: str, args: list[str], node_id: int
                    ) -> tuple[int, subprocess.Popen[bytes]]:
        log = (self.node_dir(node_id) / "format.log").open("wb")
        cmd = [java(), *TOOL_JVM, "-cp", classpath(), TOOLS[tool], *args]
        return node_id, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def pid_file(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "pid"

    def pid(self, node_id: int) -> int | None:
        try:
            pid = int(self.pid_file(node_id).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None

    def running(self, node_id: int) -> bool:
        return self.pid(node_id) is not None

    def start(self, node_id: int) -> None:
        """Start one node's JVM (a no-op if it runs). A spare controller whose port is taken
        takes a new one first: chosen when the cluster was made, its port stood unused for
        the minutes until a test started it, in which any other server could take it."""
        if self.running(node_id):
            return
        d = self.node_dir(node_id)
        node = self.node(node_id)
        if node_id in SPARE_CONTROLLERS and not _bindable(node.ports["CONTROLLER"]):
            node.ports["CONTROLLER"] = free_port()
            self._write_config(node)
            part = self.dir / "cluster.json.part"
            self._lay().save(part)
            part.rename(self.layout_path)
        if node_id in SPARE_CONTROLLERS:
            self._forget_own_vote(node_id)
        cfg = d / "server.properties"
        out = (d / "stdout.log").open("ab")
        cmd = [java(), *JVM, f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
               "-Dkafka.logs.dir=" + str(d), "-cp", classpath(), "kafka.Kafka", str(cfg)]
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid_file(node_id).write_text(f"{proc.pid}\n")

    def _forget_own_vote(self, node_id: int) -> None:
        """Kafka 4.4 exits at the start of a controller that was removed from the voters after
        it voted for itself in the current epoch: ``QuorumState.initialize`` builds a
        ``CandidateState`` from its quorum-state file, and that refuses a replica outside the
        voter set ("Local replica ... must be in the set of voters"). CI hit it: controller 103
        campaigned in epoch 3 (its own vote stored, then it followed 102), the restore removed
        it, and the next test's start of 103 died at once. A spare that is no voter of the
        cluster has no vote any majority counts, so its election state goes; one that is a
        voter (or when the quorum cannot be asked) keeps it, as Kafka requires."""
        state = self.node_dir(node_id) / "data" / "__cluster_metadata-0" / "quorum-state"
        if not state.exists():
            return
        try:
            with self.admin() as a:
                voters = a.describe_quorum().current_voters
        except Exception:  # cannot tell: Kafka's own behaviour
            return
        if node_id not in voters:
            state.unlink()

    def wait_observing(self, node_id: int, timeout: float = 120.0) -> None:
        """Until a controller that is no voter fetches (the leader lists it among the
        observers); otherwise fail saying whether its JVM runs, with the tail of its log."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not self.running(node_id):
                break
            try:
                with self.admin() as a:
                    q = a.describe_quorum()
                if node_id in {r.replica_id for r in q.replicas}:
                    return
                last = f"leader {q.leader_id} lists {sorted(r.replica_id for r in q.replicas)}"
            except Exception as e:  # any failure means "not yet"
                last = f"{type(e).__name__}: {e}"
            time.sleep(0.5)
        state = "runs" if self.running(node_id) else "is not running"
        raise RealKafkaError(
            f"controller {node_id} did not fetch within {timeout:.0f} s ({last}); its JVM "
            f"{state}, on port {self.node(node_id).ports['CONTROLLER']}; its log "
            f"{self.log(node_id)}:\n{_tail(self.log(node_id))}"
            f"{_tail(self.node_dir(node_id) / 'stdout.log')}")

    def kill(self, node_id: int, sig: int = signal.SIGKILL, timeout: float = 60.0) -> None:
        """Stop one node: SIGKILL (a crash) by default, SIGTERM for a controlled shutdown."""
        pid = self.pid(node_id)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while _alive(pid):
            _reap(pid)
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        self.pid_file(node_id).unlink(missing_ok=True)

    def down(self) -> None:
        """Stop every node: the brokers together with a controlled shutdown (which needs the
        controllers), then the controllers."""
        if self.layout is None:
            return
        for group in (self.brokers, self.controllers):
            for node_id in group:
                pid = self.pid(node_id)
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
            for node_id in group:
                self.kill(node_id, signal.SIGTERM, timeout=30.0)

    # -- readiness -------------------------------------------------------------------------------
    def admin(self, **kw: Any) -> Any:
        """kraftsman's own ``kafka`` backend on the PLAINTEXT listener."""
        from controller_core.backends.kafka_admin import RetryPolicy, open_kafka_admin
        retry = kw.pop("retry", RetryPolicy(total_seconds=30.0))
        return open_kafka_admin(self.bootstrap(), retry=retry, **kw)

    def _raise_if_exited(self, ids: Sequence[int]) -> None:
        """A node started (it has a pid file) whose JVM is gone: fail at once with its log."""
        for node_id in ids:
            if self.pid_file(node_id).exists() and not self.running(node_id):
                raise RealKafkaError(f"node {node_id} exited while starting; its log: "
                                     f"{self.log(node_id)}\n{_tail(self.log(node_id))}"
                                     f"{_tail(self.node_dir(node_id) / 'stdout.log')}")

    def wait_quorum_committed(self, timeout: float = 180.0) -> None:
        """Until the controllers' quorum has a leader whose high watermark is set, that is until
        the bootstrap voter records are committed. Brokers start only then: Kafka 4.4's
        ``KRaftControlRecordStateMachine.truncateNewEntries`` drops the voter set read from a
        leader whose epoch then lost, without reading the log again from the truncation, so a
        broker that fetched the first, uncommitted VotersRecord (offset 1) from controller 102,
        which lost to 101, never again learnt any controller's address: its heartbeat channel
        found no controller, "Unable to register the broker because the RPC got timed out
        before it could be sent" for three minutes (CI, broker 2). Once committed, the records
        are in every later leader's log, so no truncation reaches them."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            self._raise_if_exited(self.controllers)
            try:
                done = run_tool("kafka-metadata-quorum", "--bootstrap-controller",
                                self.controller_bootstrap(), "describe", "--status",
                                check=False, timeout=60)
            except subprocess.TimeoutExpired:
                last = "kafka-metadata-quorum did not answer within 60 s"
            else:
                status = quorum_status(done.stdout)
                if status is not None and status[0] >= 0 and status[1] > 0:
                    return
                last = (f"leader {status[0]}, high watermark {status[1]}" if status is not None
                        else (done.stderr or done.stdout).strip()[-300:] or "no answer yet")
            if time.monotonic() > deadline:
                raise RealKafkaError(f"the controllers in {self.dir} committed nothing within "
                                     f"{timeout:.0f} s ({last}); logs in {self.dir}/node-*/")
            time.sleep(0.5)

    def wait_ready(self, timeout: float = 180.0, brokers: Sequence[int] | None = None) -> None:
        """Until every broker asked (default: all that run) is registered and unfenced and the
        quorum has a leader; a node that died while starting is reported with its log."""
        from controller_core.backends.kafka_admin import RetryPolicy
        want = set(self.brokers if brokers is None else brokers)
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            self._raise_if_exited((*self.controllers, *self.brokers))
            try:  # briefly: a node that died is looked for between the attempts
                with self.admin(retry=RetryPolicy(total_seconds=5.0)) as a:
                    d = a.describe_cluster()
                    unfenced = {b.id for b in d.brokers if not b.fenced}
                    q = a.describe_quorum()
                    if want <= unfenced and q.leader_id >= 0:
                        return
                    last = f"unfenced brokers {sorted(unfenced)}, quorum leader {q.leader_id}"
            except Exception as e:  # the cluster is starting: any failure means "not yet"
                last = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise RealKafkaError(f"the real Kafka in {self.dir} was not ready within "
                                     f"{timeout:.0f} s ({last}); logs in {self.dir}/node-*/")
            time.sleep(0.5)


def quorum_status(text: str) -> tuple[int, int] | None:
    """(leader id, high watermark) from ``kafka-metadata-quorum describe --status``; None when
    the output holds neither (the tool could not reach the controllers)."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(fields["LeaderId"].strip()), int(fields["HighWatermark"].strip())
    except (KeyError, ValueError):
        return None


def _random_uuid() -> str:
    """A Kafka Uuid as Kafka prints it: URL-safe base64 of 16 bytes, without padding."""
    import base64
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka's Uuid.randomUuid avoids a leading '-'
            return text


def _alive(pid: int) -> bool:
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _bindable(port: int) -> bool:
    """Whether a server could listen on the port now (as the JVM binds: SO_REUSEADDR, so a
    connection of a node killed earlier, left in TIME_WAIT, does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
    except FileNotFoundError:
        return ""


@contextlib.contextmanager
def running_cluster(directory: Path) -> Iterator[RealKafka]:
    cluster = RealKafka(directory)
    try:
        yield cluster.up()
    finally:
        cluster.down()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/real-kafka",
        description="A real Apache Kafka (KRaft) cluster on loopback for kraftsman's tests.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="copy Kafka's jars from Maven into the cache")
    for name, text in (("up", "format and start a cluster in DIR"),
                       ("down", "stop the cluster in DIR"),
                       ("status", "what runs in DIR")):
        p = sub.add_parser(name, help=text)
        p.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            print(install())
            return 0
        cluster = RealKafka(args.dir)
        if args.command == "up":
            cluster.up()
            print(f"bootstrap servers (PLAINTEXT): {cluster.bootstrap()}")
            print(f"bootstrap servers (SASL_SSL):  {cluster.bootstrap('SASL_SSL')}")
            print(f"client properties (SASL_SSL):  {cluster.client_properties}")
            print(f"controllers:                   {cluster.controller_bootstrap()}")
            print(f"cluster id:                    {cluster.cluster_id}")
            return 0
        if args.command == "down":
            cluster.down()
            return 0
        for node_id in (*cluster.controllers, *cluster.brokers):
            state = "running" if cluster.running(node_id) else "stopped"
            print(f"node {node_id} ({cluster.node(node_id).roles}): {state}")
        return 0
    except RealKafkaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
