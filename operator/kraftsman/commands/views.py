"""Kafka-tool-like views and actions on a local embedded cluster or a real one.

`reassignments list|status|cancel` (kafka-reassign-partitions --list/--verify/--cancel),
`elect` (kafka-leader-election), `describe topics|cluster` (kafka-topics / kafka-cluster),
`cluster advance|fail-broker|restore-broker` to drive the simulation (embedded only), and
`cluster cordon|uncordon|unregister-broker` to take brokers out (commands/brokers_out.py).
`-o json` everywhere; `--bootstrap-server`/`--command-config` pick a real cluster (target.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from controller_core.admin import THROTTLE_MARKER_TOPIC, PartitionDescription
from controller_core.embedded.cluster import EmbeddedCluster
from controller_core.errors import ApiResult, KafkaApiError
from controller_core.metadata.controller import THROTTLE_RATE_KEYS, THROTTLE_REPLICA_KEYS
from controller_core.model import ElectionType, TopicPartition, is_whole_number
from controller_core.orchestration import brokers_out, throttles
from controller_core.orchestration.election import run_election
from controller_core.units import format_bytes
from kraftsman.cli_errors import UsageError
from kraftsman.commands import brokers_out as brokers_out_cli
from kraftsman.commands.target import (
    add_target_options,
    opened,
    refuse_real,
    resource_store,
    topic_names,
)
from kraftsman.local_store import DEFAULT_STATE_DIR, LocalStore
from kraftsman.progress_view import LIST_LIMIT, cap_list, format_election
from kraftsman.serve import add_parser as add_serve_parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    p.add_argument("--cluster", default=None, help="cluster name (default: the only one)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    add_target_options(p)


def register(sub: Any) -> None:
    re = sub.add_parser("reassignments", help="list, inspect or cancel partition reassignments")
    re_sub = re.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = re_sub.add_parser("list", help="partitions being reassigned (like --list)")
    _common(p)
    p.set_defaults(handler=cmd_list, read_only=True)
    p = re_sub.add_parser("status", help="KIP-179 lag of every moving replica")
    _common(p)
    p.set_defaults(handler=cmd_status, read_only=True)
    p = re_sub.add_parser("cancel", help="roll back reassignments in flight (like --cancel)")
    _common(p)
    p.add_argument("--partition", action="append", default=None, metavar="TOPIC-PARTITION",
                   help="cancel only these (repeatable); default: everything in flight")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="keep the replication throttles kraftsman placed (like "
                        "kafka-reassign-partitions --cancel --preserve-throttles)")
    p.set_defaults(handler=cmd_cancel)
    p = re_sub.add_parser("verify", help="what is still moving and the throttles in force "
                                         "(like --verify)")
    _common(p)
    p.set_defaults(handler=cmd_verify, read_only=True)

    p = sub.add_parser("elect", help="preferred or unclean leader election")
    _common(p)
    p.add_argument("--election-type", choices=["PREFERRED", "UNCLEAN"], default="PREFERRED",
                   type=str.upper)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--topic", help="every partition of this topic (with --partition: one)")
    group.add_argument("--all-topic-partitions", action="store_true")
    p.add_argument("--partition", type=int, default=None)
    p.set_defaults(handler=cmd_elect)

    d = sub.add_parser("describe", help="describe topics or the cluster")
    d_sub = d.add_subparsers(dest="what", metavar="WHAT", required=True)
    p = d_sub.add_parser("topics", help="partitions with leader, replicas, ISR (like kafka-topics)")
    _common(p)
    p.add_argument("--topic", default=None)
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose ISR is smaller than their replica set")
    p.set_defaults(handler=cmd_describe_topics, read_only=True)
    p = d_sub.add_parser("cluster", help="cluster id, brokers and racks")
    _common(p)
    p.set_defaults(handler=cmd_describe_cluster, read_only=True)
    p = d_sub.add_parser("log-dirs", help="each broker's log directories and the replicas in "
                                          "them, copies included (like kafka-log-dirs)")
    _common(p)
    p.add_argument("--broker", type=int, action="append", default=None,
                   help="only this broker (repeatable); default: every broker")
    p.add_argument("--topic", default=None, help="only the replicas of this topic")
    p.set_defaults(handler=cmd_describe_log_dirs, read_only=True)

    c = sub.add_parser("cluster", help="drive, fault-inject or serve the local embedded cluster")
    c_sub = c.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = c_sub.add_parser("advance", help="run the cluster for some simulated seconds")
    _common(p)
    p.add_argument("seconds", type=float)
    p.set_defaults(handler=cmd_advance)
    for name, helptext in (("fail-broker", "a broker dies (fenced after the session timeout)"),
                           ("restore-broker", "a failed broker comes back"),
                           ("fail-controller", "a controller (quorum node) is killed"),
                           ("restore-controller", "a killed controller restarts from disk")):
        p = c_sub.add_parser(name, help=helptext)
        _common(p)
        p.add_argument("broker", type=int, metavar="NODE_ID")
        if name == "fail-controller":
            p.add_argument("--keep-unflushed", action="store_true",
                           help="a clean kill: writes not yet fsynced survive")
        p.set_defaults(handler=cmd_broker, action_name=name)
    brokers_out_cli.add_parsers(c_sub, _common)
    add_serve_parser(c_sub)


__all__ = ["opened"]  # quorum.py opens its cluster the same way


def emit(args: argparse.Namespace, data: Any, text: Callable[[], list[str]]) -> None:
    if args.output == "json":
        print(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        for line in text():
            print(line)


def _result(r: ApiResult) -> dict[str, Any]:
    return {"error": r.error.name, "code": r.error.code, "message": r.message}


def cmd_list(args: argparse.Namespace) -> int:
    with opened(args) as c:
        listing = c.list_partition_reassignments()
    data = [{"topic": tp.topic, "partition": tp.partition, "replicas": list(o.replicas),
             "addingReplicas": list(o.adding), "removingReplicas": list(o.removing)}
            for tp, o in listing.items()]

    def text() -> list[str]:
        if not listing:
            return ["No partition reassignments found."]
        return ["Current partition reassignments:"] + [
            f"{tp}: replicas: {','.join(map(str, o.replicas))}. "
            f"adding: {','.join(map(str, o.adding))}. "
            f"removing: {','.join(map(str, o.removing))}." for tp, o in listing.items()]

    emit(args, data, text)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with opened(args) as c:
        statuses = c.replica_status()
    data = [{"topic": s.tp.topic, "partition": s.tp.partition, "broker": s.broker,
             "status": s.status, "lagMessages": s.lag_messages, "lagBytes": s.lag_bytes,
             "sizeBytes": s.size_bytes, "timeMs": s.time_ms} for s in statuses]

    def text() -> list[str]:
        if not statuses:
            return ["No partition reassignments found."]
        rows = [f"{'PARTITION':<24} {'BROKER':>6} {'LAG(MSGS)':>10} {'LAG(BYTES)':>12}  STATUS"]
        rows += [f"{s.tp!s:<24} {s.broker:>6} {s.lag_messages or 0:>10} {s.lag_bytes or 0:>12}  "
                 f"{s.status}" for s in statuses]
        return rows

    emit(args, data, text)
    return 0


def parse_tp(text: str, option: str = "--partition") -> TopicPartition:
    """``orders:0`` or ``orders-0`` (the form every list prints)."""
    for sep in (":", "-"):
        topic, found, part = text.rpartition(sep)
        if found and topic and is_whole_number(part):
            return TopicPartition(topic, int(part))
    raise UsageError(f"{option} {text!r}: expected TOPIC-PARTITION or TOPIC:PARTITION, "
                     "e.g. orders-0")


def _restart_notes(store: LocalStore, cancelled: set[TopicPartition]) -> list[str]:
    """A resource that was running these moves restarts them on its next `apply`: say so."""
    notes = []
    for name in store.names("PartitionReassignment"):
        doc = store.load("PartitionReassignment", name) or {}
        phase = (doc.get("executor") or {}).get("phase")
        if phase in (None, "Completed", "Cancelled", "Failed"):
            continue
        mine = {TopicPartition(m["topic"], m["partition"])
                for m in (doc.get("spec") or {}).get("partitions", [])} & cancelled
        if mine:
            notes.append(f"Note: PartitionReassignment/{name} still lists {len(mine)} of these; "
                         "a later `kraftsman apply` of it restarts them (set spec.cancel: true "
                         "to stop it for good)")
    return notes


def cmd_cancel(args: argparse.Namespace) -> int:
    tps = [parse_tp(t) for t in args.partition] if args.partition else None
    with opened(args) as c:
        targets = tps if tps is not None else list(c.list_partition_reassignments())
        results = c.alter_partition_reassignments(dict.fromkeys(targets))
        left: list[str] = []
        if not args.preserve_throttles:
            # what no movement needs any more goes, as --cancel does
            left = throttles.sync(c, {}, None).problems
        store = resource_store(args, c)
    ok = [str(tp) for tp in sorted(tp for tp, r in results.items() if r.ok)]
    bad = sorted(((tp, r) for tp, r in results.items() if not r.ok), key=lambda x: x[0])
    data: dict[str, Any] = {str(tp): _result(r) for tp, r in results.items()}
    if left:
        data["throttleProblems"] = left

    def text() -> list[str]:
        lines = [f"Could not remove the throttles kraftsman placed: {p}" for p in left[:5]]
        if not results:
            return [*lines, "No partition reassignments found."]
        if ok:
            lines.append(f"Successfully cancelled partition reassignments for: {cap_list(ok)}")
        for tp, r in bad[:LIST_LIMIT]:
            lines.append(f"Error cancelling partition reassignment for {tp}: "
                         f"{r.error.name}: {r.message}")
        if len(bad) > LIST_LIMIT:
            lines.append(f"  ... and {len(bad) - LIST_LIMIT} more")
        lines.extend(_restart_notes(store, {tp for tp, r in results.items() if r.ok}))
        return lines

    emit(args, data, text)
    return 1 if bad or left else 0


def cmd_elect(args: argparse.Namespace) -> int:
    kind = ElectionType(args.election_type)
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    with opened(args) as c:
        if args.all_topic_partitions:
            report = run_election(c, kind)
        elif args.partition is not None:
            report = run_election(c, kind, partitions=[TopicPartition(args.topic, args.partition)])
        else:
            report = run_election(c, kind, topics=[args.topic])
    data = {"electionType": kind.value, "elected": report.elected,
            "notNeeded": report.not_needed, "failed": report.failed,
            "unknownTopics": list(report.unknown_topics),
            "results": {str(tp): _result(r) for tp, r in sorted(report.results.items())}}
    emit(args, data, lambda: format_election(report, kind))
    return 1 if report.failed else 0


def cmd_describe_topics(args: argparse.Namespace) -> int:
    with opened(args) as c:
        parts = sorted(c.describe_partitions(topics=[args.topic] if args.topic else None),
                       key=lambda d: d.tp)  # by topic name, then partition number
        if args.topic is not None and not parts:
            names = sorted({d.tp.topic for d in c.describe_partitions()})
            raise UsageError(f"--topic: topic {args.topic!r} does not exist; topics: "
                             f"{', '.join(names) or 'none'}")
        topic_ids = ({n: t.topic_id for n, t in c.image.topics.items()}
                     if isinstance(c, EmbeddedCluster) else {})
    topics: dict[str, list[PartitionDescription]] = {}
    for d in parts:
        topics.setdefault(d.tp.topic, []).append(d)
    urp = args.under_replicated_partitions
    if urp:  # like kafka-topics --under-replicated-partitions: partition lines only
        parts = [d for d in parts if len(d.isr) < len(d.replicas)]
    data = [{"topic": d.tp.topic, "partition": d.tp.partition, "leader": d.leader,
             "leaderEpoch": d.leader_epoch, "replicas": list(d.replicas), "isr": list(d.isr),
             "addingReplicas": list(d.adding), "removingReplicas": list(d.removing),
             "offlineReplicas": list(d.offline), "sizeBytes": d.size_bytes} for d in parts]

    def text() -> list[str]:
        lines = []
        by_topic: dict[str, list[PartitionDescription]] = {}
        for d in parts:
            by_topic.setdefault(d.tp.topic, []).append(d)
        for name, rows in topics.items():
            rf = len(set(rows[0].replicas) - set(rows[0].removing))
            topic_id = f"\tTopicId: {topic_ids[name]}" if name in topic_ids else ""
            if not urp:
                lines.append(f"Topic: {name}{topic_id}\tPartitionCount: "
                             f"{len(rows)}\tReplicationFactor: {rf}")
            for d in by_topic.get(name, []):
                line = (f"\tTopic: {name}\tPartition: {d.tp.partition}\tLeader: "
                        f"{d.leader if d.leader >= 0 else 'none'}\tReplicas: "
                        f"{','.join(map(str, d.replicas))}\tIsr: {','.join(map(str, d.isr))}")
                if d.adding or d.removing:
                    line += (f"\tAdding Replicas: {','.join(map(str, d.adding))}"
                             f"\tRemoving Replicas: {','.join(map(str, d.removing))}")
                if d.offline:
                    line += f"\tOffline: {','.join(map(str, d.offline))}"
                lines.append(line)
        return lines

    emit(args, data, text)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """What `kafka-reassign-partitions --verify` answers without a plan file: which
    partitions are still moving, and which replication throttles are in force where."""
    with opened(args) as c:
        listing = c.list_partition_reassignments()
        brokers = [b.id for b in c.describe_cluster().brokers]
        resources = [("BROKER", str(b)) for b in brokers] + [
            ("TOPIC", t) for t in topic_names(c)]
        configs = c.describe_configs(resources)
        sizes = c.replica_log_sizes([(tp, r) for tp, o in listing.items() for r in o.adding])
        full = {d.tp: d.size_bytes for d in c.describe_partitions(partitions=list(listing))}
        try:
            markers, unreadable = throttles.placed(c), ""
        except KafkaApiError as e:
            markers, unreadable = {}, e.message
    legacy = sorted(int(name) for (kind, name), cfg in configs.items()
                    if kind == "BROKER" and throttles.LEGACY_MARKER_KEY in cfg)
    rates = {int(name): {k: v for k, v in cfg.items() if k in THROTTLE_RATE_KEYS}
             for (kind, name), cfg in configs.items() if kind == "BROKER"}
    rates = {b: v for b, v in rates.items() if v}
    replicas = {name: {k: v for k, v in cfg.items() if k in THROTTLE_REPLICA_KEYS and v}
                for (kind, name), cfg in configs.items() if kind == "TOPIC"}
    replicas = {t: v for t, v in replicas.items() if v}
    moving = [{"topic": tp.topic, "partition": tp.partition, "target": list(o.target),
               "adding": {str(r): {"bytes": sizes.get((tp, r), 0), "of": full.get(tp) or 0}
                          for r in o.adding}} for tp, o in listing.items()]
    data = {"moving": moving, "brokerThrottles": {str(b): v for b, v in rates.items()},
            "topicThrottles": replicas,
            "placedByKraftsman": {str(b): {"rate": m.rate, "replicas": len(m.entries)}
                                  for b, m in sorted(markers.items())}}
    if legacy:
        data["legacyMarkerConfigs"] = legacy
    if unreadable:
        data["markersUnreadable"] = unreadable

    def text() -> list[str]:
        lines = ["Status of partition reassignment:"]
        if not listing:
            lines.append("No partition reassignments in progress.")
        for m in moving[:LIST_LIMIT]:
            copies = ", ".join(f"{r} has {format_bytes(v['bytes'])} of {format_bytes(v['of'])}"
                               for r, v in m["adding"].items())
            lines.append(f"Reassignment of partition {m['topic']}-{m['partition']} is still in "
                         f"progress (to {','.join(map(str, m['target']))}: {copies or 'copied'})")
        if len(moving) > LIST_LIMIT:
            lines.append(f"  ... and {len(moving) - LIST_LIMIT} more")
        lines.append("Throttles in force:" if rates or replicas else "No throttles in force.")
        for b, v in rates.items():
            lines.append(f"  broker {b}: " + ", ".join(
                f"{k} {format_bytes(int(float(x)))}/s" for k, x in sorted(v.items())))
        for t, v in replicas.items():
            lines.append(f"  topic {t}: " + "; ".join(
                f"{k}={cap_list(x.split(','), 5)}" for k, x in sorted(v.items())))
        if markers:
            lines.append(f"Placed by kraftsman (its markers in {THROTTLE_MARKER_TOPIC}):")
            for b, m in sorted(markers.items())[:LIST_LIMIT]:
                rate = f"rate {format_bytes(int(m.rate))}/s" if is_whole_number(
                    m.rate or "") else "no rate"
                lines.append(f"  broker {b}: {rate}, {len(m.entries)} replica entries")
        if unreadable:
            lines.append(f"Cannot tell which throttles kraftsman placed: {unreadable}")
        if legacy:
            lines.append(f"An older kraftsman's {throttles.LEGACY_MARKER_KEY} config is on "
                         f"broker(s) {', '.join(map(str, legacy))}; the next throttle change "
                         "of a run (or `reassignments cancel`) deletes it.")
        if not listing and (rates or replicas):
            lines.append("Nothing is moving but throttles remain: they slow normal replication. "
                         "Remove them with a cancel of the resource that placed them, or by hand.")
        return lines

    emit(args, data, text)
    return 0


def cmd_describe_cluster(args: argparse.Namespace) -> int:
    with opened(args) as c:
        desc = c.describe_cluster()
        try:  # DescribeConfigs of each running broker: not a reason to fail the whole view
            cordoned, unknown = brokers_out.cordoned_brokers(c), None
        except KafkaApiError as e:
            cordoned, unknown = {}, e.message
        embedded = isinstance(c, EmbeddedCluster)
        alive = {b.id: c.alive(b.id) if embedded else not b.fenced for b in desc.brokers}
        now = c.now if embedded else None
    data = {"clusterId": desc.cluster_id, "controllerId": desc.controller_id,
            "timeSeconds": now,
            "brokers": [{"id": b.id, "rack": b.rack, "fenced": b.fenced, "alive": alive[b.id],
                         "cordonedLogDirs": cordoned.get(b.id)} for b in desc.brokers],
            **({"cordonUnknown": unknown} if unknown else {})}

    def text() -> list[str]:
        lines = [f"Cluster ID: {desc.cluster_id}", f"Controller ID: {desc.controller_id}",
                 *([f"Simulated time: {now:.1f} s"] if now is not None else []), "Brokers:"]
        for b in desc.brokers:
            state = "fenced" if b.fenced else ("down" if not alive[b.id] else "online")
            if b.id in cordoned:
                state += f", cordoned ({cordoned[b.id]})"
            lines.append(f"  {b.id}\track: {b.rack or '-'}\t{state}")
        if unknown:
            lines.append(f"Cordoned brokers: unknown ({unknown})")
        return lines

    emit(args, data, text)
    return 0


def cmd_describe_log_dirs(args: argparse.Namespace) -> int:
    with opened(args) as c:
        known = [b.id for b in c.describe_cluster().brokers]
        brokers = args.broker if args.broker else known
        unknown = sorted(set(brokers) - set(known))
        if unknown:
            raise UsageError(f"--broker {unknown[0]}: no such broker; the cluster has {known}")
        partitions = None
        if args.topic is not None:
            partitions = [d.tp for d in c.describe_partitions(topics=[args.topic])]
            if not partitions:
                raise UsageError(f"--topic {args.topic}: no such topic")
        dirs = c.describe_log_dirs(brokers, partitions)
    data = [{"broker": d.broker, "path": d.path, "error": d.error,
             "totalBytes": d.total_bytes, "usableBytes": d.usable_bytes,
             "cordoned": d.cordoned,
             "replicas": [{"topic": r.tp.topic, "partition": r.tp.partition,
                           "sizeBytes": r.size_bytes, "offsetLag": r.offset_lag,
                           "future": r.future} for r in d.replicas]}
            for b in brokers for d in dirs.get(b, ())]
    silent = [b for b in brokers if b not in dirs]

    def text() -> list[str]:
        lines = []
        for d in data:
            extra = [f"error {d['error']}"] if d["error"] else []
            if d["totalBytes"] is not None:
                extra.append(f"{d['usableBytes']:,} of {d['totalBytes']:,} bytes free")
            if d["cordoned"]:
                extra.append("cordoned")
            lines.append(f"broker {d['broker']}  {d['path']}"
                         + (f"  ({', '.join(extra)})" if extra else ""))
            for r in d["replicas"]:  # type: ignore[attr-defined]
                copy = "  (future: a copy being made here)" if r["future"] else ""
                lines.append(f"  {r['topic']}-{r['partition']}\t{r['sizeBytes']:,} bytes{copy}")
        lines += [f"broker {b}: did not answer (down?)" for b in silent]
        return lines

    emit(args, data, text)
    return 0


def cmd_advance(args: argparse.Namespace) -> int:
    if args.seconds < 0:
        raise UsageError("seconds: must not be negative")
    refuse_real(args, "cluster advance")
    with opened(args) as c:
        c.advance(args.seconds)
        now = c.now
    emit(args, {"timeSeconds": now}, lambda: [f"Simulated time is now {now:.1f} s"])
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    refuse_real(args, f"cluster {args.action_name}")
    with opened(args) as c:
        if args.action_name.endswith("controller"):
            try:
                if args.action_name == "fail-controller":
                    c.fail_controller(args.broker, lose_unflushed=not args.keep_unflushed)
                    msg = f"Controller {args.broker} is down"
                else:
                    c.restore_controller(args.broker)
                    msg = f"Controller {args.broker} restarted"
            except ValueError as e:
                raise UsageError(f"NODE_ID: {e}") from None
            emit(args, {"node": args.broker, "action": args.action_name}, lambda: [msg])
            return 0
        known = sorted({*c.image.brokers, *(b.id for b in c.spec.brokers)})
        if args.broker not in known:  # an unregistered broker of the spec can restart
            raise UsageError(f"broker: unknown broker {args.broker}; brokers are {known}")
        if args.action_name == "fail-broker":
            if args.broker not in c.image.brokers:
                raise UsageError(f"broker: broker {args.broker} is not registered (it was "
                                 "unregistered); `cluster restore-broker` starts it again")
            c.fail_broker(args.broker)
            msg = f"Broker {args.broker} is down (fenced after the session timeout)"
        else:
            c.restore_broker(args.broker)
            msg = f"Broker {args.broker} is back"
    emit(args, {"broker": args.broker, "action": args.action_name}, lambda: [msg])
    return 0
