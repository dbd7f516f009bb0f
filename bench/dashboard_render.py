"""Issue 23: the Grafana dashboard drawn from a real stalled-then-resumed move, to look at.

    .venv/bin/python bench/dashboard_render.py docs/images/dashboard.png

Grafana cannot run on these machines (AGPL: not installed here), so the panels are drawn by
tests/dashboard_render.py from Prometheus' own engine (the PromQL checker that
tools/build-promql-check builds), over scrapes of the shipped operator:

- a real kube-apiserver with etcd (tools/real-apiserver's code), the CRDs, manifests/ and the
  chart (metrics.enabled) applied with real kubectl;
- a real Kafka 4.4 cluster (tools/real-kafka's code: 3 controllers, brokers 0-3);
- the operator as the chart's Deployment runs it, logged in with its ServiceAccount's token,
  its ``/metrics`` scraped every ``--step`` seconds from the first object on;
- a PartitionReassignment adds broker 3 to both partitions of a topic of ``--mb`` MB per
  partition at ``--throttle`` B/s, ``stalledAfterSeconds: 10``; broker 3 is killed
  ``--kill-at`` s after the move starts and started again at ``--restart-at`` s (the move
  stalls, then resumes and completes); a LeaderElection naming a cluster that does not exist
  stays Degraded throughout.

Prints what happened when, with the move's status; writes the PNG and, beside it, the scrapes
as a promqltest load file (``.load``), so the picture can be redrawn. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "operator"),
                str(ROOT / "tests" / "operator" / "real")]

from deployed import OperatorProcess  # noqa: E402
from kafka import KafkaProducer  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from real_install import Installer, chart  # noqa: E402

from kraftsman import monitoring  # noqa: E402
from tests.dashboard_render import SeriesKey, load_script, panel_series, render_png, samples  # noqa: E402
from tests.real.kafka import RealKafka  # noqa: E402
from tests.realk8s.apiserver import up  # noqa: E402


class Scraper(threading.Thread):
    """Prometheus' part: a scrape every ``step`` seconds, on a fixed grid from its start."""

    def __init__(self, url: str, step: float) -> None:
        super().__init__(daemon=True)
        self.url, self.step = url, step
        self.scrapes: list[dict[SeriesKey, float]] = []
        self.started = time.monotonic()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=self.step) as r:
                    self.scrapes.append(samples(r.read().decode()))
            except OSError:
                self.scrapes.append({})  # a failed scrape: no samples (Prometheus' up 0)
            next_at = self.started + len(self.scrapes) * self.step
            self.halt.wait(max(0.0, next_at - time.monotonic()))

    def now(self) -> float:
        return time.monotonic() - self.started


def kubectl_yaml(server: Any, *args: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(server.kubectl(*args, "-o", "yaml").stdout)
    return doc


def create_topic(kafka: RealKafka, mb: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap())
    try:
        admin.create_topics([NewTopic("orders", -1, -1, replica_assignments={
            0: [0, 1, 2], 1: [1, 2, 0]})], timeout_ms=30_000)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap(), acks="all",
                             batch_size=64 * 1024, linger_ms=5)
    value = os.urandom(10_000)
    for partition in (0, 1):
        for _ in range(mb * 100):
            producer.send("orders", value=value, partition=partition)
    producer.flush()
    producer.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=int, default=3, help="MB per partition")
    ap.add_argument("--throttle", type=int, default=100_000, help="B/s")
    ap.add_argument("--kill-at", type=float, default=20.0)
    ap.add_argument("--restart-at", type=float, default=60.0)
    ap.add_argument("--after", type=float, default=30.0, help="s to scrape after completion")
    ap.add_argument("--step", type=float, default=5.0, help="scrape interval, s")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dashboard-render-"))
    kafka = RealKafka(work / "kafka")
    server = None
    op = None
    marks: list[tuple[float, str]] = []
    try:
        print(f"load average {os.getloadavg()[0]:.1f}; work in {work}", flush=True)
        server = up(work / "apiserver")
        server.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        server.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        kafka.up()
        create_topic(kafka, args.mb)
        pod = chart({"metrics": {"enabled": True}}, extra_args=["--tick=0.5"])
        Installer(server).apply(pod.install, "helm")
        kubeconfig = server.token_kubeconfig(work / "kubeconfig", pod.service_account,
                                             pod.namespace)
        op = OperatorProcess(pod, workdir=work / "pod", pod_name="kraftsman-7c9d-x1",
                             kubeconfig=kubeconfig).start()
        asyncio.run(op.wait_healthy(timeout=60))
        scraper = Scraper(op.metrics_url, args.step)
        scraper.start()

        def mark(text: str) -> None:
            marks.append((scraper.now(), text))
            print(f"t={scraper.now():6.1f} s  {text}", flush=True)

        objects = [
            {"apiVersion": "kraftsman.io/v1alpha1", "kind": "KafkaCluster",
             "metadata": {"name": "prod", "namespace": "default"},
             "spec": {"bootstrapServers": kafka.bootstrap()}},
            {"apiVersion": "kraftsman.io/v1alpha1", "kind": "LeaderElection",
             "metadata": {"name": "elsewhere", "namespace": "default"},
             "spec": {"clusterRef": {"name": "nowhere"}, "electionType": "PREFERRED",
                      "partitions": [{"topic": "orders", "partition": 0}]}},
        ]
        server.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
        server.kubectl("wait", "kafkacluster/prod", "--for=condition=Ready", "--timeout=120s")
        mark("cluster Ready")
        move = {"apiVersion": "kraftsman.io/v1alpha1", "kind": "PartitionReassignment",
                "metadata": {"name": "add-broker-3", "namespace": "default"},
                "spec": {"clusterRef": {"name": "prod"}, "throttleBytesPerSecond": args.throttle,
                         "stalledAfterSeconds": 10,
                         "partitions": [
                             {"topic": "orders", "partition": 0, "replicas": [3, 1, 2]},
                             {"topic": "orders", "partition": 1, "replicas": [3, 2, 0]}]}}
        server.kubectl("apply", "-f", "-", input=yaml.safe_dump(move))
        started = scraper.now()
        mark("move applied")
        killed = restarted = False
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            status = kubectl_yaml(server, "get", "preas/add-broker-3").get("status") or {}
            if not killed and scraper.now() - started >= args.kill_at:
                kafka.kill(3)
                killed = True
                mark("broker 3 killed")
            if killed and not restarted and scraper.now() - started >= args.restart_at:
                kafka.start(3)
                restarted = True
                mark("broker 3 started")
            stalled = [c for c in status.get("conditions", []) if c["type"] == "Stalled"]
            print(f"t={scraper.now():6.1f} s  {status.get('phase')}  "
                  f"{status.get('bytesMoved')}/{status.get('bytesToMove')} B  "
                  f"Stalled={stalled[0]['status'] if stalled else '-'}", flush=True)
            if status.get("phase") in ("Completed", "Failed"):
                mark(f"move {status['phase']}")
                break
            time.sleep(2)
        end = scraper.now() + args.after
        while scraper.now() < end:
            time.sleep(1)
        scraper.halt.set()
        scraper.join()
        step = int(args.step)
        load = load_script(scraper.scrapes, step)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".load").write_text(load)
        last = (len(scraper.scrapes) - 1) * step
        check = Path.home() / ".cache" / "kraftsman" / "promql-v0.316.0" / "promqlcheck.test"
        board = monitoring.dashboard()
        lines = panel_series(board, check, work / "queries", load, end_seconds=last,
                             step_seconds=step)
        render_png(board, lines, args.out, end_seconds=last, marks=marks)
        print(f"{len(scraper.scrapes)} scrapes every {step} s; wrote {args.out} and "
              f"{args.out.with_suffix('.load')}")
    finally:
        if op is not None:
            asyncio.run(op.stop())
        if kafka.layout is not None:
            kafka.down()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
