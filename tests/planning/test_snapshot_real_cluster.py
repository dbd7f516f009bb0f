"""`kraftsman snapshot` of a real cluster: `cluster serve` as the cluster (SASL/SCRAM), a tiny
Prometheus query API on 127.0.0.1 for the rates, a capacity YAML; the manifest says where each
figure came from."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from controller_core.planning.snapshot import read_manifest, read_snapshot
from controller_core.wire.auth import AuthFile, Authorizer
from kraftsman.cli import main
from tests.helpers import cluster
from tests.serve.harness import ServedCluster, served

pytest.importorskip("pyarrow")

SERIES = {"bytesin": {"orders": 6000.0}, "bytesout": {"orders": 18000.0}}


class FakePrometheus(BaseHTTPRequestHandler):
    """Answers /api/v1/query like Prometheus: a vector per topic of the metric asked for."""

    queries: list[str] = []
    status = 200

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query).get("query", [""])[0]
        type(self).queries.append(query)
        if url.path != "/api/v1/query" or type(self).status != 200:
            self.send_response(type(self).status if url.path == "/api/v1/query" else 404)
            self.end_headers()
            self.wfile.write(b"boom")
            return
        family = "bytesin" if "bytesin_total" in query else "bytesout"
        result = [{"metric": {"topic": t}, "value": [1700000000.0, str(v)]}
                  for t, v in SERIES[family].items()]
        body = json.dumps({"status": "success",
                           "data": {"resultType": "vector", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def prometheus() -> Iterator[str]:
    FakePrometheus.queries = []
    FakePrometheus.status = 200
    httpd = HTTPServer(("127.0.0.1", 0), FakePrometheus)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[tuple[ServedCluster, Path]]:
    auth = Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "admin", "password": "pw"}],
        "acls": [{"principal": "User:admin", "operations": ["ALL"]}]}))
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule"
                     ' required username="admin" password="pw";\n')
    with served(cluster(tmp_path / "c"), auth, time_scale=0) as s:
        yield s, props


def test_snapshot_of_a_real_cluster(kafka: tuple[ServedCluster, Path], prometheus: str,
                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s, props = kafka
    caps = tmp_path / "caps.yaml"
    caps.write_text("defaults: {diskBytes: 500000000000, networkBytesPerSecond: 100000000}\n"
                    "brokers:\n  3: {diskBytes: 900000000000}\n")
    out = tmp_path / "snap"
    rc = main(["snapshot", "--bootstrap-server", s.bootstrap, "--command-config", str(props),
               "--out", str(out), "--capacity-file", str(caps), "--prometheus", prometheus,
               "--prometheus-labels", 'cluster="prod"', "--state-dir", str(tmp_path / "st")])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    snap = read_snapshot(out)
    image = s.call(lambda: s.cluster.image)
    assert {b.id: b.rack for b in snap.brokers} == {b: image.brokers[b].rack
                                                    for b in image.brokers}
    disk = {b.id: b.disk_capacity_bytes for b in snap.brokers}
    assert disk[3] == 900_000_000_000 and disk[0] == 500_000_000_000
    assert {b.network_in_capacity_bytes_per_second for b in snap.brokers} == {1e8}
    t = snap.partitions
    assert len(t) == 6 and set(t.topic) == {"orders"}
    assert t.size_bytes == [10_000_000] * 6  # DescribeLogDirs of the leader
    assert t.bytes_in_per_second == [1000.0] * 6  # 6000 B/s over 6 partitions
    assert t.bytes_out_per_second == [3000.0] * 6
    assert [sorted(r) for r in t.replicas] == [[0, 1, 2]] * 6
    assert any('cluster="prod"' in q and "bytesin_total" in q for q in FakePrometheus.queries)
    sources = read_manifest(out)["sources"]
    assert "Prometheus" in sources["bytesInPerSecond"]
    assert "DescribeLogDirs" in sources["sizeBytes"]
    assert "--capacity-file" in sources["diskCapacityBytes"]
    assert "bytesInPerSecond: Prometheus" in printed.out


def test_snapshot_without_prometheus_says_so(kafka: tuple[ServedCluster, Path],
                                             tmp_path: Path) -> None:
    s, props = kafka
    out = tmp_path / "snap"
    assert main(["snapshot", "--bootstrap-server", s.bootstrap, "--command-config", str(props),
                 "--out", str(out), "--state-dir", str(tmp_path / "st")]) == 0
    assert read_snapshot(out).partitions.bytes_in_per_second == [0.0] * 6
    assert "no --prometheus" in read_manifest(out)["sources"]["bytesInPerSecond"]


@pytest.mark.parametrize(("setup", "named"), [
    ("status500", "HTTP 500"),
    ("unreachable", "cannot reach"),
    ("file-url", "http:// or https://"),
    ("bad-caps", "brokers.9"),
    ("bad-caps-field", "diskbytes"),
])
def test_snapshot_refusals_name_the_option(kafka: tuple[ServedCluster, Path], prometheus: str,
                                           tmp_path: Path, setup: str, named: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    s, props = kafka
    args = ["snapshot", "--bootstrap-server", s.bootstrap, "--command-config", str(props),
            "--out", str(tmp_path / "snap"), "--state-dir", str(tmp_path / "st")]
    caps = tmp_path / "caps.yaml"
    if setup == "status500":
        FakePrometheus.status = 500
        args += ["--prometheus", prometheus]
    elif setup == "unreachable":
        args += ["--prometheus", "http://127.0.0.1:1"]
    elif setup == "file-url":
        args += ["--prometheus", "file:///etc/passwd"]
    elif setup == "bad-caps":
        caps.write_text("brokers:\n  9: {diskBytes: 1}\n")
        args += ["--capacity-file", str(caps)]
    else:
        caps.write_text("defaults: {diskbytes: 1}\n")
        args += ["--capacity-file", str(caps)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err, err
    assert not (tmp_path / "snap").exists()


@pytest.mark.spark
def test_the_plan_report_says_where_each_figure_came_from(
        spark: Any, kafka: tuple[ServedCluster, Path], prometheus: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    s, props = kafka
    snap = tmp_path / "snap"
    assert main(["snapshot", "--bootstrap-server", s.bootstrap, "--command-config", str(props),
                 "--out", str(snap), "--prometheus", prometheus,
                 "--state-dir", str(tmp_path / "st")]) == 0
    plan = tmp_path / "plan"
    rc = main(["plan", "--snapshot", str(snap), "--goal", "leader-balance", "--out", str(plan),
               "--master", "local[2]", "--cluster-name", "prod"])
    assert rc == 0, capsys.readouterr().err
    report = (plan / "report.md").read_text()
    section = report.split("## Where the figures come from")[1].split("\n## ")[0]
    assert f"- brokers: Metadata (DescribeCluster) of {s.bootstrap}" in section
    assert "- replica sizes (disk): DescribeLogDirs (the leader's partition size)" in section
    assert "- disk capacity: --default-disk-bytes 1099511627776" in section
    assert f"- bytes in: Prometheus {prometheus}: " in section and "bytesin_total" in section
    doc = json.loads((plan / "report.json").read_text())
    assert doc["summary"]["inputSources"]["sizeBytes"].startswith("DescribeLogDirs")
