"""Generate the CustomResourceDefinitions from the pydantic models the operator parses with.

pydantic's JSON Schema is mapped onto the structural-schema subset Kubernetes accepts: $refs
are inlined, `X | None` becomes an optional X, `const` becomes `enum`, draft-2020
`exclusiveMinimum: n` becomes OpenAPI 3.0's `minimum: n, exclusiveMinimum: true`, titles go.
What a schema can say but pydantic does not express per field (list uniqueness, "exactly one
of") is added here as `x-kubernetes-list-type` and CEL `x-kubernetes-validations`, mirroring
the models' validators, so the API server rejects at admission what it can.

The YAML is rendered with jinja2 templates into `crds/` (plain CRDs, for `kubectl apply`) and
into the Helm chart (the same CRDs wrapped in `crds.install` / `crds.keep` switches).
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml
from pydantic import BaseModel

from kraftsman import monitoring
from kraftsman.resources import (
    BROKERS_REFUSED,
    BROKERS_REQUIRED,
    CANCEL_WITH_DRY_RUN,
    DISKS_REFUSED,
    DISKS_REQUIRED,
    GOALS_WITH_BROKERS,
    GROUP,
    KINDS,
    UNREGISTER_REFUSED,
    VERSION,
)
from kraftsman.status import STATUS_MODELS

TEMPLATES = Path(__file__).parent / "templates"
CHART_DIR = Path("charts") / "kraftsman"
CHART_CRD_DIR = CHART_DIR / "templates" / "crds"
CRD_DIR = Path("crds")
ARGOCD_DIR = Path("manifests") / "argocd"
ARGOCD_SCRIPTS = ARGOCD_DIR / "resource_customizations" / GROUP
CHART_ARGOCD_DIR = Path("charts") / "kraftsman" / "files" / "argocd"
DASHBOARD_NAME = "kraftsman-dashboard.json"
RULES_NAME = "kraftsman-alerts.yaml"
CATEGORY = "kraftsman"


@dataclass(frozen=True)
class Column:
    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class KindInfo:
    kind: str
    plural: str
    singular: str
    short_names: list[str]
    description: str
    columns: list[Column] = field(default_factory=list)


def _cond(type_: str) -> str:
    return f'.status.conditions[?(@.type=="{type_}")].status'


CLUSTER_COL = Column("Cluster", ".spec.clusterRef.name", description="KafkaCluster acted on.")
AGE_COL = Column("Age", ".metadata.creationTimestamp", "date")

KIND_INFO: dict[str, KindInfo] = {
    "KafkaCluster": KindInfo(
        "KafkaCluster", "kafkaclusters", "kafkacluster", ["kc"],
        "A Kafka cluster kraftsman operates on: an embedded (in-process) one or a real one.", [
        Column("Backend", ".status.backend", description="embedded or kafka."),
        Column("Brokers", ".status.brokers", "integer"),
        Column("Partitions", ".status.partitions", "integer"),
        Column("URP", ".status.underReplicatedPartitions", "integer",
               "Under-replicated partitions."),
        Column("Leader", ".status.quorumLeaderId", "integer", "Active controller."),
        Column("Ready", _cond("Ready")),
        Column("Phase", ".status.phase"),
        AGE_COL,
    ]),
    "KafkaQuorum": KindInfo(
        "KafkaQuorum", "kafkaquorums", "kafkaquorum", ["kq"],
        "The KRaft metadata quorum of a KafkaCluster: its desired voters (KIP-853).", [
        CLUSTER_COL,
        Column("Leader", ".status.leaderId", "integer", "LeaderId."),
        Column("Epoch", ".status.leaderEpoch", "integer", "LeaderEpoch."),
        Column("HW", ".status.highWatermark", "integer", "HighWatermark."),
        Column("Voters", ".status.currentVoters", description="CurrentVoters."),
        Column("Target", ".spec.voters", description="Desired voters."),
        Column("Lag", ".status.maxFollowerLag", "integer", "MaxFollowerLag.", 1),
        Column("Phase", ".status.phase", priority=1),
        AGE_COL,
    ]),
    "PartitionReassignment": KindInfo(
        "PartitionReassignment", "partitionreassignments", "partitionreassignment", ["preas"],
        "Move partitions to new replicas, as kafka-reassign-partitions does (KIP-455).", [
            CLUSTER_COL,
            Column("Phase", ".status.phase"),
            Column("Progress", ".status.progress", description="Done, by bytes."),
            Column("Moving", ".status.moving", "integer"),
            Column("Done", ".status.done", "integer"),
            Column("Total", ".status.counts.total", "integer", priority=1),
            Column("Failed", ".status.counts.failed", "integer", priority=1),
            Column("ETA(s)", ".status.etaSeconds", "number", "Seconds left.", 1),
            Column("Throttle", ".status.throttleBytesPerSecond", "integer", priority=1),
            AGE_COL,
        ]),
    "LeaderElection": KindInfo(
        "LeaderElection", "leaderelections", "leaderelection", ["le"],
        "Elect preferred or unclean leaders, as kafka-leader-election does (KIP-460).", [
        CLUSTER_COL,
        Column("Type", ".spec.electionType"),
        Column("Phase", ".status.phase"),
        Column("Elected", ".status.elected", "integer"),
        Column("Failed", ".status.failed", "integer"),
        Column("Mode", ".spec.mode", priority=1),
        Column("Imbalance", ".status.imbalancePercent", "number", priority=1),
        AGE_COL,
    ]),
    "KafkaRebalance": KindInfo(
        "KafkaRebalance", "kafkarebalances", "kafkarebalance", ["kr"],
        "A plan for a KafkaCluster, proposed by the planner Job, executed on approval as "
        "PartitionReassignments one after another.", [
        CLUSTER_COL,
        Column("Goal", ".spec.goal"),
        Column("Phase", ".status.phase"),
        Column("Moves", ".status.moves", "integer", "Replicas the proposal copies."),
        Column("Data", ".status.data", description="Bytes the proposal copies."),
        Column("ETA", ".status.eta", description="Estimated duration at the throttle."),
        Column("Progress", ".status.progress", description="Reassignments completed/total.",
               priority=1),
        Column("Approval", ".spec.approval", priority=1),
        Column("Proposal", ".status.proposalId", "integer", priority=1),
        AGE_COL,
    ]),
}

# The most partitions one PartitionReassignment may hold (docs/operator.md "Size limits"): a
# model of the stored object (tests/operator/object_size.py) puts etcd's 1.5 MiB there; a
# real kube-apiserver stores more (bench/api_size_bench.py), at a cost of seconds per write.
MAX_PARTITIONS_PER_RESOURCE = 8266

# The largest integer a float64 holds exactly (kube-apiserver compares defaults with bounds so).
FLOAT_EXACT = 2**53

# Per (model, field) schema additions that pydantic cannot express.
_SET = {"x-kubernetes-list-type": "set"}
# CEL: spec.goal is one of the goals that take spec.brokers
_GOAL_TAKES_BROKERS = "(has(self.goal) && (" + " || ".join(
    f"self.goal == '{g}'" for g in GOALS_WITH_BROKERS) + "))"
FIELD_EXTRAS: dict[tuple[str, str], dict[str, Any]] = {
    ("KafkaQuorumSpec", "voters"): _SET,
    ("EmbeddedClusterSpec", "controllers"): _SET,
    ("EmbeddedClusterSpec", "brokers"): {"x-kubernetes-list-type": "map",
                                         "x-kubernetes-list-map-keys": ["id"]},
    ("EmbeddedClusterSpec", "topics"): {"x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["name"]},
    ("PartitionMove", "replicas"): _SET,
    # "any" or an absolute path, as the model says (the model also wants one per replica:
    # a CEL rule per entry of an 8,266-entry list would exceed the API server's cost budget)
    ("PartitionMove", "log_dirs"): {"items": {"type": "string", "pattern": "^(any|/.*)$"}},
    # A plan's partition lists are atomic, not list-maps: the API server records every key of
    # a list-map in metadata.managedFields (~130 bytes per partition, 2.4x the spec itself),
    # and every write of the object pays for decoding, validating and encoding it (see
    # docs/operator.md "Size limits"). A partition listed twice is refused by the operator.
    ("PartitionReassignmentSpec", "partitions"): {
        "x-kubernetes-list-type": "atomic",
        # One more would be stored only to have the operator's first status write refused
        # (etcd's 1.5 MiB object limit): refused at admission instead, saying what to do.
        "x-kubernetes-validations": [{
            "rule": f"size(self) <= {MAX_PARTITIONS_PER_RESOURCE}",
            "message": f"at most {MAX_PARTITIONS_PER_RESOURCE:,} partitions in one "
                       "PartitionReassignment (with its status it must stay under etcd's "
                       "1.5 MiB per object, and every write of a larger one costs the API "
                       "server seconds); split the plan into several resources that run one "
                       "after another (kraftsman plan --max-partitions-per-resource does)"}]},
    ("LeaderElectionSpec", "partitions"): {"x-kubernetes-list-type": "atomic"},
    ("LeaderElectionSpec", "topics"): _SET,
    ("*", "conditions"): {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    # An operation acts on one cluster: moving it mid-way would leave the first cluster
    # mid-reassignment with throttles on every broker (a transition rule: updates only).
    **{(model, "clusterRef"): {"x-kubernetes-validations": [{
        "rule": "self == oldSelf",
        "message": "spec.clusterRef is immutable: an operation stays on the cluster it "
                   "started on; delete this resource and create a new one for another "
                   "cluster"}]}
       for model in ("PartitionReassignmentSpec", "LeaderElectionSpec", "KafkaQuorumSpec",
                     "KafkaRebalanceSpec")},
    ("KafkaRebalanceSpec", "brokers"): _SET,
    ("KafkaRebalanceSpec", "disks"): {"x-kubernetes-list-type": "map",
                                      "x-kubernetes-list-map-keys": ["broker", "logDir"]},
}

# CEL rules mirroring the models' cross-field validators (checked at admission, K8s >= 1.25).
MODEL_RULES: dict[str, list[dict[str, str]]] = {
    "KafkaClusterSpec": [
        {"rule": "has(self.embedded) != has(self.bootstrapServers)",
         "message": "set exactly one of spec.embedded or spec.bootstrapServers"},
        {"rule": "!has(self.authSecretRef) || has(self.bootstrapServers)",
         "message": "spec.authSecretRef only applies with spec.bootstrapServers"},
    ],
    "PartitionReassignmentSpec": [
        {"rule": "!(has(self.cancel) && self.cancel && has(self.dryRun) && self.dryRun)",
         "message": CANCEL_WITH_DRY_RUN},
    ],
    "KafkaRebalanceSpec": [
        {"rule": f"!{_GOAL_TAKES_BROKERS} || has(self.brokers)",
         "message": BROKERS_REQUIRED},
        {"rule": f"{_GOAL_TAKES_BROKERS} || !has(self.brokers)",
         "message": BROKERS_REFUSED},
        {"rule": "!has(self.unregister) || !self.unregister || (has(self.goal) && "
                 "self.goal == 'remove-brokers')",
         "message": UNREGISTER_REFUSED},
        {"rule": "!(has(self.goal) && self.goal == 'remove-disks') || has(self.disks)",
         "message": DISKS_REQUIRED},
        {"rule": "(has(self.goal) && self.goal == 'remove-disks') || !has(self.disks)",
         "message": DISKS_REFUSED},
    ],
    "LeaderElectionSpec": [
        {"rule": "(has(self.partitions) ? 1 : 0) + (has(self.topics) ? 1 : 0) + "
                 "((has(self.allTopicPartitions) && self.allTopicPartitions) ? 1 : 0) == 1",
         "message": "set exactly one of spec.partitions, spec.topics or "
                    "spec.allTopicPartitions: true"},
    ],
}

_KEEP = {"type", "description", "properties", "required", "items", "enum", "minimum", "maximum",
         "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems",
         "maxItems", "default", "format", "additionalProperties", "nullable"}


def structural_schema(model: type[BaseModel], *, defaults: bool = True) -> dict[str, Any]:
    """The OpenAPI v3 structural schema of `model`, on the wire (camelCase).

    `defaults=False` leaves out `default`s (status is written only by the operator; the API
    server should not invent one).
    """
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _ordered(_convert(raw, defs, model.__name__), defaults)
    return schema


def _ordered(node: Any, defaults: bool) -> Any:
    """type and description first (readable YAML); drop defaults when asked."""
    if isinstance(node, list):
        return [_ordered(v, defaults) for v in node]
    if not isinstance(node, dict):
        return node
    first = [k for k in ("type", "description") if k in node]
    out = {k: node[k] for k in first}
    for k, v in node.items():
        if k in first or (k == "default" and not defaults):
            continue
        out[k] = v if k in ("default", "enum") else _ordered(v, defaults)
    if "properties" in node:  # property names are data, not keywords: keep their order
        out["properties"] = {p: _ordered(v, defaults) for p, v in node["properties"].items()}
    return out


def _exact_bounds_only(out: dict[str, Any]) -> None:
    """kube-apiserver reads a schema's bounds as float64s and refuses, at admission, every
    object of a field whose bound a float64 cannot hold exactly ("Maximum boundary value must
    be of type integer (default format)": 2**63 - 1, Kafka's LONG, is one), and the whole
    CRD when such a field has a default. Such a bound is left out; the operator's model
    checks it (Degraded/InvalidSpec naming the field), as it does where no schema is
    enforced."""
    for bound in ("minimum", "maximum"):
        if abs(out.get(bound, 0)) > FLOAT_EXACT:
            del out[bound]
            out.pop(f"exclusive{bound.capitalize()}", None)


def _convert(node: dict[str, Any], defs: dict[str, Any], model_name: str | None) -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        target = _convert(defs[name], defs, name)
        target.update({k: v for k, v in _convert(node, defs, None).items() if k != "type"})
        return target
    for combiner in ("anyOf", "oneOf"):
        if combiner in node:
            options = [o for o in node.pop(combiner) if o.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"{model_name}: cannot map {combiner} of {options} to a "
                                 "structural schema")
            inner = _convert(options[0], defs, None)
            outer = _convert(node, defs, None)
            outer.pop("type", None)
            inner.update(outer)
            _exact_bounds_only(inner)
            return inner
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = _convert(node.pop("allOf")[0], defs, None)
        inner.update({k: v for k, v in _convert(node, defs, None).items() if k != "type"})
        return inner
    if "const" in node:
        node["enum"] = [node.pop("const")]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP:
            continue
        if key == "properties":
            props = {}
            for prop, sub in value.items():
                converted = _convert(sub, defs, None)
                extra = FIELD_EXTRAS.get((model_name or "", prop)) or FIELD_EXTRAS.get(("*", prop))
                if extra and model_name is not None:
                    converted.update(copy.deepcopy(extra))
                props[prop] = converted
            out["properties"] = props
        elif key == "items":
            out["items"] = _convert(value, defs, None)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _convert(value, defs, None)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "default":
            if value is not None:
                out[key] = value
        else:
            out[key] = value
    _exact_bounds_only(out)
    if "properties" in out:
        out.setdefault("type", "object")
        out["required"] = [r for r in out.get("required", []) if r in out["properties"]]
        if not out["required"]:
            del out["required"]
    if model_name in MODEL_RULES:
        out["x-kubernetes-validations"] = copy.deepcopy(MODEL_RULES[model_name])
    if "type" not in out and "enum" in out:
        out["type"] = "string"
    return out


def crd_schema(kind: str) -> dict[str, Any]:
    """The whole openAPIV3Schema of a kind: apiVersion, kind, metadata, spec, status."""
    spec = structural_schema(KINDS[kind])
    status = structural_schema(STATUS_MODELS[kind], defaults=False)
    return {
        "type": "object",
        "description": KIND_INFO[kind].description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True, autoescape=False)
    env.filters["toyaml"] = lambda v: yaml.safe_dump(
        v, sort_keys=False, default_flow_style=False, width=100).rstrip("\n")
    return env


def render_crd(kind: str) -> str:
    info = KIND_INFO[kind]
    return _env().get_template("crd.yaml.j2").render(
        group=GROUP, version=VERSION, info=info, category=CATEGORY,
        schema=crd_schema(kind))


def render_health_script(kind: str) -> str:
    """The Argo CD health script of `kind`: the shared prelude and the kind's body.

    Argo CD runs each script alone (no `require`), so the prelude (condition lookup, the
    generation check, Degraded) is written into every script from one source,
    `templates/argocd/prelude.lua`, by the kind's `templates/argocd/<Kind>.lua.j2`.
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True, trim_blocks=True, autoescape=False)
    return env.get_template(f"argocd/{kind}.lua.j2").render()


def render_all() -> dict[Path, str]:
    """Every generated file, by path relative to the repository root.

    The Argo CD health scripts (`health.lua` per kind, the chart's copies and the argocd-cm
    snippet) are generated from `templates/argocd/`.
    """
    env = _env()
    out: dict[Path, str] = {}
    for kind, info in KIND_INFO.items():
        text = render_crd(kind)
        name = f"{info.plural}.{GROUP}.yaml"
        out[CRD_DIR / name] = text
        out[CHART_CRD_DIR / name] = env.get_template("chart-crd.yaml.j2").render(crd=text)
    peering = env.get_template("kopf-peering.yaml.j2").render()
    out[CRD_DIR / "kopfpeerings.kopf.dev.yaml"] = peering
    # kopf's peering CRD never changes, and the chart's ClusterKopfPeering object needs it
    # before templates are applied: Helm's crds/ directory does exactly that.
    out[CHART_DIR / "crds" / "kopfpeerings.kopf.dev.yaml"] = peering
    scripts = {kind: render_health_script(kind) for kind in KIND_INFO}
    out[ARGOCD_DIR / "argocd-cm-health.yaml"] = env.get_template("argocd-cm.yaml.j2").render(
        group=GROUP, scripts={kind: script.rstrip("\n") for kind, script in scripts.items()})
    for kind, script in scripts.items():
        out[ARGOCD_SCRIPTS / kind / "health.lua"] = script
        out[CHART_ARGOCD_DIR / f"{kind}.lua"] = script
    # The Grafana dashboard and the alerting rules: for use by hand, and the chart's copies
    board, rules = monitoring.render_dashboard(), monitoring.render_rules()
    out[Path("manifests") / "grafana" / DASHBOARD_NAME] = board
    out[CHART_DIR / "files" / "grafana" / DASHBOARD_NAME] = board
    out[Path("manifests") / "prometheus" / RULES_NAME] = rules
    out[CHART_DIR / "files" / "prometheus" / RULES_NAME] = rules
    return out


def stale_files(root: Path) -> list[str]:
    """Unified diffs of every generated file that differs from what is committed under root."""
    problems = []
    for rel, text in render_all().items():
        path = root / rel
        current = path.read_text() if path.exists() else ""
        if current != text:
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(),
                                        f"{rel} (committed)", f"{rel} (generated)", lineterm="",
                                        n=1)
            problems.append("\n".join(list(diff)[:40]))
    return problems


def write_all(root: Path) -> list[Path]:
    written = []
    for rel, text in render_all().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(rel)
    return written
