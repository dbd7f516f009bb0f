"""`kraftsman apply -f FILE`: reconcile custom resources against a local embedded cluster or
a real one (a KafkaCluster with ``bootstrapServers``, or ``--bootstrap-server``).

The same resources the operator reconciles, with no Kubernetes: the state lives in a
directory (default ``.kraftsman/``; a real cluster's under ``kafka/<cluster id>/``).
Resources are applied in the order given; a bounded operation (a reassignment) runs to its
end before the next starts unless ``--no-wait``. Everything is validated before anything is applied.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from controller_core.config import EmbeddedClusterSpec
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.gc_pause import paused
from controller_core.model import ElectionType, TopicPartition
from controller_core.orchestration.election import leader_imbalance
from controller_core.orchestration.reassignment import (
    DryRunReport,
    Phase,
    Progress,
    ReassignmentExecutor,
    dry_run,
    throttles_owed,
)
from controller_core.orchestration.stall import StallWatch, describe
from controller_core.orchestration.voters import WalkPhase, WalkProgress
from controller_core.storage.framing import write_atomically
from kraftsman import reconcile
from kraftsman.cli_errors import UsageError
from kraftsman.commands import plan_lines, removal
from kraftsman.commands.quorum import status_json, walk
from kraftsman.commands.target import (
    Cluster,
    RealCluster,
    Registered,
    add_target_options,
    check_bootstrap,
    cluster_id_of,
    connect,
    register_real_cluster,
    registered,
    retry_of,
    state_store,
)
from kraftsman.local_store import DEFAULT_STATE_DIR, LocalStore
from kraftsman.progress_view import ProgressView, cap_list, format_election
from kraftsman.resources import (
    API_VERSION,
    KafkaClusterSpec,
    KafkaQuorumSpec,
    LeaderElectionSpec,
    PartitionMove,
    PartitionReassignmentSpec,
    Resource,
    parse_resources,
)

# Kinds only the operator reconciles, with what to do on the command line instead.
OPERATOR_ONLY = {"KafkaRebalance": (
    "KafkaRebalance is reconciled by the operator only (its planner runs as a Kubernetes Job); "
    "on the command line run `kraftsman snapshot` and `kraftsman plan`, then apply the plan's "
    "resources/")}
ORDER = {"KafkaCluster": 0, "KafkaQuorum": 1, "PartitionReassignment": 2, "LeaderElection": 3}
ANNOUNCE_BYTES = 1_000_000  # files at least this big get a line before they are parsed
_TAG = "tag:yaml.org,2002:"


class PlanLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader on libyaml's C parser, with two shortcuts for plan files of
    10^5 entries: a plain scalar's tag is resolved once per distinct text (the resolver's
    regexes ran once per scalar), and strings, decimal ints, lists and maps are built
    directly; anything else (bools, floats, timestamps, merge keys, cycles) goes through
    the safe constructor unchanged. Same result as ``yaml.safe_load_all``, ~25% less CPU."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._tags: dict[str, str] = {}
        self._active: set[int] = set()

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            tag = self._tags.get(value)
            if tag is None:
                tag = self._tags[value] = super().resolve(kind, value, implicit)
            return tag
        return super().resolve(kind, value, implicit)

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            return self._build(node)
        except _Cycle:
            self._active.clear()
            return super().construct_document(node)

    def _build(self, node: yaml.Node) -> Any:
        tag, value = node.tag, node.value
        if tag == _TAG + "str":
            return value
        if tag == _TAG + "int" and value.isascii() and value.isdigit() and (
                len(value) == 1 or value[0] != "0"):  # YAML 1.1: 0123 is octal
            return int(value)
        if tag not in (_TAG + "seq", _TAG + "map") or (
                tag == _TAG + "map" and any(k.tag == _TAG + "merge" for k, _ in value)):
            return super().construct_document(node)
        if id(node) in self._active:
            raise _Cycle
        self._active.add(id(node))
        try:
            out = ([self._build(n) for n in value] if tag == _TAG + "seq"
                   else {self._build(k): self._build(v) for k, v in value})
        except TypeError:  # an unhashable key: the safe constructor says so, as a YAMLError
            self._active.clear()
            return super().construct_document(node)
        self._active.discard(id(node))
        return out


def _load_all(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=PlanLoader))


class _Cycle(Exception):
    """A recursive alias: left to the safe constructor, which builds it lazily."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "apply", help="reconcile resources against a local embedded cluster",
        description="Reconcile KafkaCluster (embedded), PartitionReassignment and "
                    "LeaderElection resources against a local embedded cluster, with live "
                    "progress, until done.")
    p.add_argument("-f", "--filename", action="append", required=True, type=Path,
                   help="YAML file of resources, a directory of them, or - for stdin "
                        "(repeatable)")
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                   help="where the local clusters and resources live (default .kraftsman)")
    p.add_argument("--no-wait", action="store_true",
                   help="start the operations and return; a later apply goes on from there")
    p.add_argument("--for", dest="for_seconds", type=float, default=None, metavar="SECONDS",
                   help="run at most this many simulated seconds, then leave the rest in flight")
    p.add_argument("--tick", type=float, default=1.0, metavar="SECONDS",
                   help="simulated seconds between two reconcile passes (default 1)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    add_target_options(p)
    p.set_defaults(handler=run, creates_state=True)


def load_documents(paths: list[Path]) -> list[tuple[str, Any]]:
    docs: list[tuple[str, Any]] = []
    problems: list[str] = []
    expanded: list[Path] = []
    for path in paths:  # like kubectl, -f DIR means every YAML file in it, in name order
        if path.is_dir():
            expanded.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")))
        else:
            expanded.append(path)
    for path in expanded:
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text()
        except OSError as e:
            problems.append(f"{path}: cannot read: {e.strerror}")
            continue
        if len(text) >= ANNOUNCE_BYTES:
            print(f"parsing {path} ({len(text) / 1e6:.1f} MB)...", file=sys.stderr, flush=True)
        try:
            docs.extend((str(path), d) for d in plan_lines.load_all(text, _load_all)
                        if d is not None)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
            problems.append(f"{path}: malformed YAML at {where}: "
                            f"{getattr(e, 'problem', None) or e}")
    if problems:
        raise UsageError(problems)
    if not docs:
        raise UsageError("no resources in the given file(s)")
    return docs


@dataclass
class Known:
    """What a cluster will hold once the KafkaClusters of this apply are in place."""

    brokers: set[int] = field(default_factory=set)
    partitions: dict[str, int] = field(default_factory=dict)  # topic -> partition count
    nodes: set[int] = field(default_factory=set)  # brokers and controllers: possible voters
    fenced: set[int] = field(default_factory=set)  # registered but offline
    # targets of the moves in flight (read only when a broker is fenced): a resumed run may
    # name a fenced broker its move is already heading for
    heading: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)


def _known(spec: EmbeddedClusterSpec) -> Known:
    brokers = {b.id for b in spec.brokers}
    return Known(brokers, {t.name: t.partitions for t in spec.topics}, brokers | set(spec.voters))


def known_of(c: RealCluster) -> Known:
    """What a real cluster holds, read through the kafka backend."""
    brokers = c.describe_cluster().brokers
    fenced = {b.id for b in brokers if b.fenced}
    heading = ({tp: o.target for tp, o in c.list_partition_reassignments().items()}
               if fenced else {})
    return Known({b.id for b in brokers}, c.topic_partition_counts(), c.quorum_node_ids(), fenced,
                 heading)


def validate(resources: list[Resource], store: LocalStore, problems: list[str] | None = None,
             unparsed_clusters: set[str] | None = None, real: dict[str, Known] | None = None,
             broken: Iterable[tuple[str, Any]] = ()) -> dict[str, EmbeddedClusterSpec]:
    """Check everything a schema cannot: references, brokers, topics, spec changes. Raises
    with every problem at once — those already in ``problems`` (the schema's) first.
    ``real``: what each real cluster named by the resources holds now; ``broken``: (source,
    document) of reassignments the schema refused, whose well-formed entries are checked
    against the cluster too."""
    problems = list(problems or [])
    clusters: dict[str, EmbeddedClusterSpec] = {}
    for r in resources:
        if r.kind != "KafkaCluster":
            continue
        spec: KafkaClusterSpec = r.spec
        if spec.embedded is None:
            continue  # a real cluster: checked by connecting to it (real_clusters)
        saved = store.saved_cluster_spec(r.name)
        if saved is not None:
            problems.extend(_spec_change_problems(r.where, saved, spec.embedded))
        clusters[r.name] = spec.embedded
    known = {name: _known(s) for name, s in clusters.items()}
    known.update(real or {})
    for name in store.cluster_names():
        if name not in known:
            saved_spec = store.saved_cluster_spec(name)
            assert saved_spec is not None
            known[name] = _known(saved_spec)
    for source, doc in broken:
        rname = (doc.get("metadata") or {}).get("name")
        problems.extend(_raw_reassignment_problems(
            f"{source}: PartitionReassignment/{rname}", doc, known))
    for r in resources:
        if r.kind == "KafkaCluster":
            continue
        ref = r.spec.cluster_ref.name
        k = known.get(ref)
        if k is None and ref in (unparsed_clusters or set()):
            continue  # its KafkaCluster's own problems are reported; no echo here
        if k is None:
            problems.append(f"{r.where}: spec.clusterRef.name: cluster {ref!r} not found; apply "
                            "its KafkaCluster first or in the same file")
            continue
        if r.kind == "KafkaQuorum":
            unknown = sorted(set(r.spec.voters) - k.nodes)
            if unknown:
                problems.append(f"{r.where}: spec.voters: unknown node id(s) {unknown}; cluster "
                                f"{ref!r} has nodes {sorted(k.nodes)}")
        elif r.kind == "PartitionReassignment":
            problems.extend(_reassignment_problems(r.where, ref, enumerate(r.spec.partitions), k))
        elif r.kind == "LeaderElection":
            problems.extend(_election_problems(r.where, ref, r.spec, k))
    if problems:
        raise UsageError(problems)
    return clusters


def _spec_change_problems(key: str, old: EmbeddedClusterSpec,
                          new: EmbeddedClusterSpec) -> list[str]:
    problems = []
    removed = sorted({b.id for b in old.brokers} - {b.id for b in new.brokers})
    if removed:
        problems.append(f"{key}: spec.embedded.brokers: broker(s) {removed} were removed; "
                        "removing brokers is not supported — move their replicas away first")
    old_topics = {t.name: t for t in old.topics}
    for t in new.topics:
        o = old_topics.get(t.name)
        if o is not None and (o.partitions, o.replication_factor) != (
                t.partitions, t.replication_factor):
            problems.append(
                f"{key}: spec.embedded.topics[{t.name}]: partitions/replicationFactor of an "
                "existing topic cannot change here; use a PartitionReassignment")
    return problems


def _reassignment_problems(key: str, cluster: str, moves: Iterable[tuple[int, PartitionMove]],
                           k: Known) -> list[str]:
    problems = []
    for i, m in moves:
        where = f"{key}: spec.partitions[{i}]"
        if m.topic not in k.partitions:
            problems.append(f"{where}.topic: topic {m.topic!r} does not exist in cluster "
                            f"{cluster!r}")
        elif m.partition >= k.partitions[m.topic]:
            problems.append(f"{where}.partition: {m.topic} has partitions 0.."
                            f"{k.partitions[m.topic] - 1}, not {m.partition}")
        unknown = sorted(set(m.replicas) - k.brokers)
        if unknown:
            problems.append(f"{where}.replicas: unknown broker id(s) {unknown}; cluster "
                            f"{cluster!r} has brokers {sorted(k.brokers)}")
        fenced = sorted(set(m.replicas) & k.fenced)
        resumed = k.heading.get(TopicPartition(m.topic, m.partition)) == tuple(m.replicas)
        if fenced and not resumed:  # as kafka-reassign-partitions: only listed brokers
            problems.append(f"{where}.replicas: broker(s) {fenced} are fenced (offline) in "
                            f"cluster {cluster!r}; a replica there cannot catch up — bring them "
                            f"back or choose from the live brokers {sorted(k.brokers - k.fenced)}")
    return problems


def _raw_reassignment_problems(key: str, doc: Any, known: dict[str, Known]) -> list[str]:
    """The cluster's view of a PartitionReassignment whose schema failed: every entry that
    is well-formed is still checked, so one run names a broker listed twice in one entry and
    an unknown topic or broker in another."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    ref = ((spec or {}).get("clusterRef") or {}).get("name") if isinstance(spec, dict) else None
    k = known.get(ref) if isinstance(ref, str) else None
    entries = spec.get("partitions") if isinstance(spec, dict) else None
    if k is None or not isinstance(ref, str) or not isinstance(entries, list):
        return []
    moves: list[tuple[int, PartitionMove]] = []
    for i, entry in enumerate(entries):
        with contextlib.suppress(ValueError, TypeError):  # the schema's problem, already said
            if isinstance(entry, dict):  # a broker listed twice still names its brokers
                entry = {**entry, "replicas": list(dict.fromkeys(entry.get("replicas") or []))}
            moves.append((i, PartitionMove.model_validate(entry)))
    return _reassignment_problems(key, ref, moves, k)


def _election_problems(key: str, cluster: str, spec: LeaderElectionSpec, k: Known) -> list[str]:
    problems = []
    for i, p in enumerate(spec.partitions or []):
        if p.topic not in k.partitions:
            problems.append(f"{key}: spec.partitions[{i}].topic: topic {p.topic!r} does not "
                            f"exist in cluster {cluster!r}")
        elif p.partition >= k.partitions[p.topic]:
            problems.append(f"{key}: spec.partitions[{i}].partition: {p.topic} has partitions "
                            f"0..{k.partitions[p.topic] - 1}, not {p.partition}")
    for i, t in enumerate(spec.topics or []):
        if t not in k.partitions:
            problems.append(f"{key}: spec.topics[{i}]: topic {t!r} does not exist in cluster "
                            f"{cluster!r}")
    return problems


def real_clusters(resources: list[Resource], args: argparse.Namespace) -> dict[str, Registered]:
    """The real clusters this apply acts on, by the name the resources use for them:
    ``--bootstrap-server`` (every clusterRef), KafkaClusters with ``bootstrapServers`` in the
    files, and those applied before."""
    refs = {r.spec.cluster_ref.name for r in resources if r.kind != "KafkaCluster"}
    if args.bootstrap_server:
        bootstrap = check_bootstrap(args.bootstrap_server)
        clusters = [r.key for r in resources if r.kind == "KafkaCluster"]
        if clusters:
            raise UsageError(f"--bootstrap-server: every resource acts on {bootstrap}; "
                             f"leave out {', '.join(clusters)} or the flag")
        return {name: Registered(name, bootstrap, None) for name in refs}
    out: dict[str, Registered] = {}
    for r in resources:
        if r.kind == "KafkaCluster" and r.spec.bootstrap_servers is not None:
            secret = r.spec.auth_secret_ref.name if r.spec.auth_secret_ref else None
            out[r.name] = Registered(r.name, check_bootstrap(
                r.spec.bootstrap_servers, f"{r.key}: spec.bootstrapServers"), secret)
    embedded = {r.name for r in resources if r.kind == "KafkaCluster"}
    for name in refs - set(out) - embedded:
        entry = registered(args.state_dir, name)
        if entry is not None:
            out[name] = entry
    for entry in out.values():
        if entry.auth_secret and args.command_config is None:
            raise UsageError(f"KafkaCluster/{entry.name}: spec.authSecretRef "
                             f"{entry.auth_secret!r} is a Kubernetes Secret the CLI cannot "
                             "read; pass the same credentials with --command-config FILE")
    if args.command_config is not None and not out:
        raise UsageError("--command-config: no real cluster here; it goes with "
                         "--bootstrap-server or a KafkaCluster with spec.bootstrapServers")
    return out


class Session:
    """One `apply`: the clusters it opened and how it reports."""

    def __init__(self, args: argparse.Namespace, store: LocalStore,
                 real: dict[str, Registered] | None = None) -> None:
        self.args = args
        self.store = store
        self.real = real or {}
        self.clusters: dict[str, Cluster] = {}
        self._stores: dict[str, LocalStore] = {}
        self.view = ProgressView(json_mode=args.output == "json")
        self.summary: list[dict[str, Any]] = []
        self.failed = False
        self.rollback_files: dict[str, str] = {}

    def cluster(self, name: str, spec: EmbeddedClusterSpec | None = None) -> Cluster:
        if name not in self.clusters:
            real = self.real.get(name)
            self.clusters[name] = (
                connect(real.bootstrap_servers, self.args.command_config, name,
                        retry=retry_of(self.args))
                if real is not None else self.store.open_cluster(name, spec))
        return self.clusters[name]

    def store_for(self, name: str) -> LocalStore:
        """Where the resources of cluster ``name`` keep their state: a real cluster's by
        its cluster id, so any later command against that cluster finds it."""
        c = self.cluster(name)
        if not isinstance(c, RealCluster):
            return self.store
        if name not in self._stores:
            self._stores[name] = state_store(self.args.state_dir,
                                             c.describe_cluster().cluster_id)
        return self._stores[name]

    def apply_real_cluster(self, r: Resource) -> None:
        c = self.cluster(r.name)
        assert isinstance(c, RealCluster)
        desc = c.describe_cluster()
        register_real_cluster(self.args.state_dir, self.real[r.name])
        self.view.line(f"{r.key} connected: {c.bootstrap_servers}, cluster id "
                       f"{desc.cluster_id}, {len(desc.brokers)} brokers")
        self.summary.append({"resource": r.key, "phase": "Ready", "clusterId": desc.cluster_id})

    def close(self) -> None:
        for c in self.clusters.values():
            c.close()

    # -- per kind -------------------------------------------------------------------------------
    def apply_cluster(self, r: Resource, spec: EmbeddedClusterSpec) -> None:
        existed = self.store.saved_cluster_spec(r.name) is not None
        c = self.cluster(r.name, spec)
        assert isinstance(c, EmbeddedCluster)
        verb = "configured" if existed else "created"
        self.view.line(f"{r.key} {verb}: {len(c.image.brokers)} brokers, "
                       f"{len(c.image.topics)} topics, {c.image.partition_count()} partitions")
        self.summary.append({"resource": r.key, "phase": "Ready",
                             "clusterId": c.image.cluster_id})

    def apply_quorum(self, r: Resource) -> None:
        spec: KafkaQuorumSpec = r.spec
        cluster = self.cluster(spec.cluster_ref.name)

        def show(p: WalkProgress) -> None:
            self.view.line(f"{r.key}: voters {','.join(map(str, p.current))} -> "
                           f"{','.join(map(str, p.target))}: {p.action}")

        p = walk(cluster, list(spec.voters), wait=not self.args.no_wait, on_step=show,
                 endpoints=spec.endpoints)
        q = cluster.describe_quorum()
        status = {"phase": "Ready" if p.phase is WalkPhase.COMPLETED else "Progressing",
                  **status_json(q, cluster_id_of(cluster))}
        self.store_for(spec.cluster_ref.name).save(r.kind, r.name,
                                                   {"spec": _dump(spec), "status": status})
        self.summary.append({"resource": r.key, **status})

    def apply_reassignment(self, r: Resource) -> None:
        spec: PartitionReassignmentSpec = r.spec
        cluster = self.cluster(spec.cluster_ref.name)
        store = self.store_for(spec.cluster_ref.name)
        stored = store.load(r.kind, r.name) or {}
        previous = (PartitionReassignmentSpec.model_validate(stored["spec"])
                    if "spec" in stored else None)
        ex, problems, retargeted = reconcile.executor_for(
            cluster, spec, stored.get("executor"), previous)
        if problems:
            raise UsageError([f"{r.key}: {p.message} ({p.error.name})" for p in problems])
        if spec.dry_run:
            bandwidth = None
            if isinstance(cluster, EmbeddedCluster):
                spec_c = cluster.spec
                per_broker = {b.id: b.replication_bytes_per_second or
                              spec_c.replication_bytes_per_second for b in spec_c.brokers}
                bandwidth = lambda b: per_broker.get(  # noqa: E731
                    b, spec_c.replication_bytes_per_second)
            report = dry_run(cluster, ex.plan, poll_seconds=self.args.tick, bandwidth=bandwidth)
            self.view.dry_run(r.key, report, ex.plan.limits)
            store.save(r.kind, r.name, {"spec": _dump(spec), "dryRun": _dry(report)})
            self.summary.append({"resource": r.key, "phase": "DryRun", **_dry(report)})
            return
        if retargeted:
            self.view.line(f"{r.key}: spec changed while moving — re-targeted")
        restarted = sorted(tp for tp in ex.pending if str(tp) in set(stored.get("moving", [])))
        if restarted and not spec.cancel:
            self.view.line(
                f"{r.key}: {len(restarted)} move(s) it had started were cancelled outside it "
                f"(e.g. `kraftsman reassignments cancel`) and are restarted: "
                f"{cap_list([str(tp) for tp in restarted])}; set spec.cancel: true (or remove "
                "them from spec.partitions) to stop them for good")

        def save() -> None:
            store.save(r.kind, r.name, {"spec": _dump(spec),
                                        "executor": ex.state.model_dump(mode="json"),
                                        "moving": [str(tp) for tp in sorted(ex.moving)]})

        removing = removal.removed_brokers(r)
        removal_summary: dict[str, Any] = {}
        if removing and spec.cancel:
            removal_summary["uncordonProblems"] = removal.on_cancel(cluster, removing,
                                                                    self.view.line)
        elif removing:
            removal_summary["cordon"] = removal.before_moves(cluster, removing, self.view.line)
        if "executor" not in stored or retargeted:
            self._write_rollback(r, spec, ex)
        progress = ex.step()
        save()
        deadline = None if self.args.for_seconds is None else cluster.now + self.args.for_seconds
        watch = StallWatch(spec.stalled_after_seconds * 1000.0)
        stalled = 0
        while not progress.phase.terminal and not self.args.no_wait:
            if deadline is not None and cluster.now >= deadline - 1e-9:
                break
            if progress.phase is Phase.PAUSED and not progress.moving:
                break  # paused: the moves in flight have finished and no more start
            cluster.advance(self.args.tick)
            progress = ex.step()
            save()
            self.view.progress(r.key, progress, cluster.now)
            now_ms = cluster.now_ms()
            stuck = [] if progress.phase.terminal else watch.observe(
                now_ms, ex.copied(), ex.between_dirs)
            if stuck and not stalled:
                self.view.line(f"{r.key}: stalled — {describe(stuck, now_ms)}; check those "
                               "brokers and the throttle")
            elif stalled and not stuck:
                self.view.line(f"{r.key}: the stalled moves copy again or have ended")
            stalled = len(stuck)
        self.view.finish(r.key, progress, cluster.now)
        owed = throttles_owed(ex.state)
        if owed:
            self.view.line(f"{r.key}: {owed.removeprefix('; ')}: apply the same file again "
                           "then")
        if progress.phase.value == "Failed":
            self.failed = True
        if removing and not spec.cancel and progress.phase.value == "Completed" \
                and removal.is_last_step(r):
            drained, removal_summary["brokers"] = removal.after_last_step(
                cluster, removing, self.view.line)
            self.failed |= not drained
        self.summary.append({"resource": r.key, **_progress(progress), **removal_summary,
                             **({"rollbackFile": self.rollback_files[r.key]}
                                if r.key in self.rollback_files else {}),
                             **({"cleanupOwed": {"brokers": list(ex.state.throttles_waiting),
                                                 "message": owed.removeprefix("; ")}}
                                if owed else {})})

    def _write_rollback(self, r: Resource, spec: PartitionReassignmentSpec,
                        ex: ReassignmentExecutor) -> None:
        """Like ``kafka-reassign-partitions --execute``, keep the current assignment for a
        rollback — as a resource `kraftsman apply -f` takes (its partitions are the Kafka
        tool's JSON entries)."""
        back = [(tp, ex.original[tp]) for tp in sorted(ex.plan.moves)
                if tp in ex.original and tuple(ex.plan.moves[tp]) != ex.original[tp]]
        if not back:
            return
        path = self.store_for(spec.cluster_ref.name).root / "rollback" / f"{r.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"# The assignment before {r.key} started; `kraftsman apply -f` this file to",
                 "# move back.", f"apiVersion: {API_VERSION}", "kind: PartitionReassignment",
                 f"metadata: {{name: {r.name}-rollback}}", "spec:",
                 f"  clusterRef: {{name: {spec.cluster_ref.name}}}", "  partitions:"]
        lines += [f"    - {{topic: {orjson.dumps(tp.topic).decode()}, partition: {tp.partition}, "
                  f"replicas: [{', '.join(map(str, replicas))}]}}" for tp, replicas in back]
        write_atomically(path, ("\n".join(lines) + "\n").encode())
        self.view.line(f"{r.key}: current assignment of the {len(back)} moving partition(s) "
                       f"saved for rollback in {path}")
        self.rollback_files[r.key] = str(path)

    def apply_election(self, r: Resource) -> None:
        spec: LeaderElectionSpec = r.spec
        cluster = self.cluster(spec.cluster_ref.name)
        store = self.store_for(spec.cluster_ref.name)
        stored = store.load(r.kind, r.name) or {}
        if stored.get("spec") == _dump(spec):
            self.view.line(f"{r.key}: already ran (runId {spec.run_id!r}); change spec.runId to "
                           "run it again")
            self.summary.append({"resource": r.key, **stored.get("status", {})})
            return
        if spec.mode == "Continuous":
            imbalance = leader_imbalance(cluster, spec.topics)
            if imbalance.percent <= spec.imbalance_threshold_percent:
                status = {"phase": "Balanced", "imbalancePercent": round(imbalance.percent, 2)}
                self.view.line(f"{r.key}: leader imbalance {imbalance.percent:.1f}% is within "
                               f"{spec.imbalance_threshold_percent}% — no election needed")
                store.save(r.kind, r.name, {"spec": _dump(spec), "status": status})
                self.summary.append({"resource": r.key, **status})
                return
        report = reconcile.election_of(cluster, spec)
        for text in format_election(report, ElectionType(spec.election_type)):
            self.view.line(text)
        status = {"phase": "Succeeded" if report.failed == 0 else "Failed",
                  "elected": report.elected, "notNeeded": report.not_needed,
                  "failed": report.failed}
        if report.failed:
            self.failed = True
        store.save(r.kind, r.name, {"spec": _dump(spec), "status": status})
        self.summary.append({"resource": r.key, **status})


def _dump(spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = spec.model_dump(mode="json", by_alias=True)
    return out


def _dry(report: DryRunReport) -> dict[str, Any]:
    return {"replicaMoves": report.replica_moves, "replicasRemoved": report.replicas_removed,
            "partitionsMoving": report.partitions_moving, "leaderMoves": report.leader_moves,
            "bytesToMove": report.bytes_to_move, "estimatedSeconds": report.estimated_seconds}


def _progress(p: Progress) -> dict[str, Any]:
    return {"phase": p.phase.value, "total": p.total, "done": p.done, "moving": p.moving,
            "pending": p.pending, "failed": p.failed, "cancelled": p.cancelled,
            "bytesTotal": p.bytes_total, "bytesMoved": p.bytes_moved,
            "percent": round(p.percent, 1), "message": p.message}


def run(args: argparse.Namespace) -> int:
    problems: list[str] = []
    unparsed: set[str] = set()
    broken: list[tuple[str, Any]] = []  # reassignments the schema refused, checked further
    resources: list[Resource] = []
    with paused():  # parsing: the collector would walk 10^5 new entries and find no cycle
        for source, doc in load_documents(args.filename):
            try:
                resources.extend(parse_resources([doc], source=source))
            except UsageError as e:
                problems.extend(e.problems)
                if isinstance(doc, dict) and doc.get("kind") == "KafkaCluster":
                    unparsed.add(str((doc.get("metadata") or {}).get("name")))
                elif isinstance(doc, dict) and doc.get("kind") == "PartitionReassignment":
                    broken.append((source, doc))
    for r in [r for r in resources if r.kind in OPERATOR_ONLY]:
        problems.append(f"{r.where}: {OPERATOR_ONLY[r.kind]}")
        resources.remove(r)
    keys = [r.key for r in resources]
    dups = sorted({k for k in keys if keys.count(k) > 1})
    problems += [f"{k} appears more than once; give each resource a unique name" for k in dups]
    store = LocalStore(args.state_dir)
    real = real_clusters(resources, args)
    session = Session(args, store, real)
    try:
        known = {}
        for name in real:
            c = session.cluster(name)
            assert isinstance(c, RealCluster)
            known[name] = known_of(c)
        cluster_specs = validate(resources, store, problems, unparsed, known, broken)
        for r in sorted(resources, key=lambda r: ORDER[r.kind]):
            if r.kind == "KafkaCluster" and r.name in real:
                session.apply_real_cluster(r)
            elif r.kind == "KafkaCluster":
                session.apply_cluster(r, cluster_specs[r.name])
            elif r.kind == "KafkaQuorum":
                session.apply_quorum(r)
            elif r.kind == "PartitionReassignment":
                session.apply_reassignment(r)
            elif r.kind == "LeaderElection":
                session.apply_election(r)
    finally:
        session.close()
    if args.output == "json":
        print(orjson.dumps(session.summary, option=orjson.OPT_INDENT_2).decode())
    return 1 if session.failed else 0

