"""PartitionReassignment YAML for Git, rendered with Jinja2 and split to fit Kubernetes.

A plan becomes numbered resources ``<plan>-001``, ``<plan>-002``, ... Each partition is in
exactly one of them, so they never fight over a partition; they are meant to run one after
another (a new reassignment is refused while another is in progress), smallest partitions
first. Argo CD runs them in order through ``argocd.argoproj.io/sync-wave`` (a wave starts
when the previous one is Healthy, i.e. the reassignment Succeeded); ``kraftsman apply -f DIR``
applies the files in name order and waits for each.

Size limits: an object must stay under etcd's 1.5 MiB, and a client-side ``kubectl apply``
(Argo CD's default) copies it into the 256 KiB ``last-applied-configuration`` annotation, so
each resource is kept below ``max_bytes`` (default 200,000) and ``max_partitions``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import jinja2
import orjson

from controller_core.planning.result import PartitionMove

API_VERSION = "kraftsman.io/v1alpha1"
DEFAULT_MAX_BYTES = 200_000
DEFAULT_MAX_PARTITIONS = 1000

_RESOURCE = """\
# Step {{ step }} of {{ steps }} of plan {{ plan_id }} ({{ goal }}) \
for cluster {{ cluster | tojson }}.
# {{ partitions | length }} partition(s), {{ replicas_moved }} replica(s) to copy, \
{{ bytes_moved }} bytes.
{% if dir_replicas -%}
# {{ dir_replicas }} replica(s) to copy between log directories of their broker, \
{{ dir_bytes }} bytes.
{% endif -%}
{% if step > 1 -%}
# Runs after step {{ step - 1 }} has Succeeded (Argo CD: sync waves; kraftsman apply: file order).
{% else -%}
# Runs first (Argo CD sync wave 1).
{% endif -%}
apiVersion: {{ api_version }}
kind: PartitionReassignment
metadata:
  name: {{ name }}
  labels:
    app.kubernetes.io/managed-by: kraftsman-plan
    kraftsman.io/plan: {{ plan_id | tojson }}
  annotations:
    argocd.argoproj.io/sync-wave: {{ step | string | tojson }}
    kraftsman.io/plan-step: {{ (step | string ~ "/" ~ steps | string) | tojson }}
    kraftsman.io/plan-goal: {{ goal | tojson }}
spec:
  clusterRef:
    name: {{ cluster | tojson }}
{%- if throttle %}
  throttleBytesPerSecond: {{ throttle }}
{%- endif %}
{%- if log_dir_throttle and dir_replicas %}
  logDirThrottleBytesPerSecond: {{ log_dir_throttle }}
{%- endif %}
  maxConcurrentMoves: {{ max_concurrent_moves }}
{%- if per_broker %}
  maxConcurrentMovesPerBroker: {{ per_broker }}
{%- endif %}
  electPreferredLeaders: {{ "true" if elect else "false" }}
  partitions:
{%- for e in entries %}
  - {{ e }}
{%- endfor %}
"""

_env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                          autoescape=False)
_resource_tpl = _env.from_string(_RESOURCE)


@dataclass(frozen=True, slots=True)
class RenderOptions:
    cluster: str
    goal: str
    throttle_bytes_per_second: int | None = 50_000_000
    max_concurrent_moves: int = 10
    max_bytes: int = DEFAULT_MAX_BYTES
    max_partitions: int = DEFAULT_MAX_PARTITIONS
    max_concurrent_moves_per_broker: int | None = None
    # the copies between log directories (written only where a resource has some)
    log_dir_throttle_bytes_per_second: int | None = None


@dataclass(frozen=True, slots=True)
class RenderedResource:
    step: int
    name: str
    filename: str
    text: str
    moves: tuple[PartitionMove, ...]
    elect_preferred_leaders: bool
    max_concurrent_moves: int = 10  # the resource's spec.maxConcurrentMoves
    max_concurrent_moves_per_broker: int | None = None  # spec.maxConcurrentMovesPerBroker
    log_dir_throttle_bytes_per_second: int | None = None  # spec.logDirThrottleBytesPerSecond


K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def cluster_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a clusterRef.name (a Kubernetes object name), or None."""
    if K8S_NAME.match(name):
        return None
    return (f"cluster name {name!r} is not a Kubernetes object name (lowercase letters, digits, "
            f"'-' and '.'); pass --cluster-name {dns_label(name)!r} or the KafkaCluster's name")


def dns_label(text: str) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return s or "kafka"


def plan_id(moves: Sequence[PartitionMove], cluster: str, goal: str) -> str:
    """A short content hash: the same plan always has the same names."""
    # the lines hashed at once: the digest of the same bytes, without an update a move
    lines = "".join(map(_id_line, moves))
    return hashlib.sha256(f"{cluster}\n{goal}\n{lines}".encode()).hexdigest()[:8]


def _id_line(m: PartitionMove) -> str:
    dirs = "" if m.dirs_after is None else f"\0{list(m.dirs_after)}"
    return f"{m.topic}\0{m.partition}\0{list(m.after)}{dirs}\n"


def _entry(m: PartitionMove) -> str:
    """One partition of ``spec.partitions`` (flow style); ``log_dirs`` only when the plan
    knows the directories (a JBOD snapshot), aligned with ``replicas``."""
    dirs = "" if m.dirs_after is None else f", log_dirs: {json.dumps(list(m.dirs_after))}"
    # json.dumps of a list of ints, without its call per entry (twice a move, 290,000 moves
    # at 10^6 partitions); a topic's JSON once per topic
    return (f"{{topic: {_json_str(m.topic)}, partition: {m.partition}, "
            f"replicas: [{', '.join(map(str, m.after))}]{dirs}}}")


@functools.lru_cache(maxsize=65536)
def _json_str(text: str) -> str:
    return json.dumps(text)


def chunk(entries: Sequence[str], max_partitions: int, budget: int) -> list[range]:
    """Consecutive runs of the moves' entries (see ``_entry``) under both limits, as
    index ranges (order kept: smallest first)."""
    chunks: list[range] = []
    start = used = 0
    for i, e in enumerate(entries):
        size = len(f"  - {e}\n".encode())
        if i > start and (i - start >= max_partitions or used + size > budget):
            chunks.append(range(start, i))
            start, used = i, 0
        used += size
    if len(entries) > start:
        chunks.append(range(start, len(entries)))
    return chunks


def render(moves: Sequence[PartitionMove], opts: RenderOptions) -> list[RenderedResource]:
    """The numbered resources of a plan (empty when nothing changes)."""
    if not moves:
        return []
    pid = plan_id(moves, opts.cluster, opts.goal)
    base = f"{dns_label(opts.cluster)}-{dns_label(opts.goal.split()[0])}-{pid}"[:240]
    # each entry made once, for its size and for the text (290,000 at 10^6 partitions)
    entries = [_entry(m) for m in moves]
    # headroom for the header and metadata, which are a few hundred bytes
    chunks = chunk(entries, opts.max_partitions, max(opts.max_bytes - 2048, 1024))
    out: list[RenderedResource] = []
    for i, rows in enumerate(chunks, start=1):
        part = moves[rows.start:rows.stop]
        name = f"{base}-{i:03d}"
        elect = any(m.leader_changes for m in part)
        text = _resource_tpl.render(
            step=i, steps=len(chunks), plan_id=pid, goal=opts.goal, cluster=opts.cluster,
            api_version=API_VERSION, name=name, throttle=opts.throttle_bytes_per_second,
            log_dir_throttle=opts.log_dir_throttle_bytes_per_second,
            max_concurrent_moves=opts.max_concurrent_moves,
            per_broker=opts.max_concurrent_moves_per_broker, elect=elect, partitions=part,
            replicas_moved=sum(len(m.added) for m in part),
            bytes_moved=sum(m.bytes_moved for m in part),
            dir_replicas=(dir_replicas := sum(len(m.dir_moves) for m in part)),
            dir_bytes=sum(m.dir_bytes_moved for m in part),
            entries=entries[rows.start:rows.stop])
        if len(text.encode()) > opts.max_bytes:
            raise ValueError(f"internal: resource {name} renders to {len(text.encode())} bytes, "
                             f"over the {opts.max_bytes}-byte limit")
        out.append(RenderedResource(i, name, f"{i:03d}-{name}.yaml", text, tuple(part), elect,
                                    opts.max_concurrent_moves,
                                    opts.max_concurrent_moves_per_broker,
                                    opts.log_dir_throttle_bytes_per_second
                                    if dir_replicas else None))
    return out


def kafka_tool_json(moves: Sequence[PartitionMove], *, rollback: bool = False) -> str:
    """The same plan (or its rollback) as kafka-reassign-partitions --execute JSON:
    ``log_dirs`` aligned with ``replicas``, ``"any"`` when the snapshot had no log dirs.

    One partition a line, each encoded by orjson: a diff shows the partitions that changed,
    and 290,000 moves take a fraction of a second (``json.dumps(indent=...)`` runs
    Python's pure encoder: 8 s of a 1,000,000-partition plan, for two files)."""
    # one orjson call for all rows, then a line break before each: '{"topic":' after '},'
    # is a new row (in a JSON string a '"' is escaped)
    rows = orjson.dumps([{
        "topic": m.topic, "partition": m.partition,
        "replicas": list(m.before if rollback else m.after),
        "log_dirs": _dirs(m, rollback)} for m in moves])[1:-1]
    body = b"[\n" + rows.replace(b'},{"topic":', b'},\n{"topic":') + b"\n]" if moves \
        else b"[]"
    return '{"version": 1, "partitions": ' + body.decode() + "}\n"


def _dirs(m: PartitionMove, rollback: bool) -> list[str]:
    dirs = m.dirs_before if rollback else m.dirs_after
    if dirs is None:
        return ["any"] * len(m.before if rollback else m.after)
    return list(dirs)
