"""How many admin requests per second `cluster serve` sustains on loopback, and Metadata for
100,000 partitions end to end.

    .venv/bin/python bench/serve_bench.py [--seconds 5] [--partitions 100000]

The server runs in a subprocess (its own interpreter, as `kraftsman cluster serve` would);
clients are asyncio connections in this process, each with one request in flight (as Kafka
serves a connection), sending pre-encoded kafka-python requests and reading whole responses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_server(state: Path, spec_json: str) -> None:
    from controller_core.config import EmbeddedClusterSpec
    from controller_core.embedded.cluster import EmbeddedCluster
    from controller_core.wire.auth import Authorizer
    from controller_core.wire.server import ClusterServer, ServeConfig

    spec = EmbeddedClusterSpec.model_validate_json(spec_json)
    cluster = EmbeddedCluster.open(state, spec, fsync=False)

    async def main() -> None:
        server = ClusterServer(cluster, Authorizer.open(), ServeConfig(port=0, time_scale=1.0))
        await server.start()
        assert server.bootstrap is not None
        print(f"{server.bootstrap.host}:{server.bootstrap.port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def encoded(name: str, version: int) -> bytes:
    from kafka.protocol.admin import (
        DescribeQuorumRequest,
        ElectLeadersRequest,
        ListPartitionReassignmentsRequest,
    )
    from kafka.protocol.metadata import MetadataRequest
    req: Any
    if name == "ElectLeaders":
        req = ElectLeadersRequest(election_type=0, topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic="orders", partitions=[0, 1, 2])],
            timeout_ms=1000, version=version)
    elif name == "ListPartitionReassignments":
        req = ListPartitionReassignmentsRequest(timeout_ms=1000, topics=None, version=version)
    elif name == "DescribeQuorum":
        t = DescribeQuorumRequest.TopicData
        req = DescribeQuorumRequest(topics=[t(topic_name="__cluster_metadata", partitions=[
            t.PartitionData(partition_index=0)])], version=version)
    else:
        req = MetadataRequest(topics=None, allow_auto_topic_creation=False, version=version)
    req.with_header(correlation_id=1, client_id="bench")
    return bytes(req.encode(header=True, framed=True))


async def one_client(host: str, port: int, payload: bytes, stop_at: float) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    n = 0
    while time.monotonic() < stop_at:
        writer.write(payload)
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)
        n += 1
    writer.close()
    return n


async def rate(host: str, port: int, payload: bytes, clients: int, seconds: float) -> float:
    stop_at = time.monotonic() + seconds
    counts = await asyncio.gather(*(one_client(host, port, payload, stop_at)
                                    for _ in range(clients)))
    return sum(counts) / seconds


def served_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    from kafka import KafkaAdminClient
    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {int(k): v for k, v in a.api_versions().items()}
    finally:
        a.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--server", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.server:
        run_server(Path(args.server[0]), args.server[1])
        return
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(6)],
                "topics": [{"name": "orders", "partitions": 6, "replicationFactor": 3}]}
        proc = subprocess.Popen([sys.executable, __file__, "--server", f"{tmp}/small",
                                 json.dumps(spec)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            bootstrap = proc.stdout.readline().strip()
            host, port = bootstrap.rsplit(":", 1)
            versions = served_versions(bootstrap)
            print(f"cluster serve on {bootstrap}; {args.seconds:.0f} s per figure")
            for name, key in (("ElectLeaders", 43), ("ListPartitionReassignments", 46),
                              ("DescribeQuorum", 55)):
                if key not in versions:
                    print(f"  {name:<28} not served by this build (no quorum on the port)")
                    continue
                payload = encoded(name, versions[key][1])
                for clients in (1, 50):
                    r = asyncio.run(rate(host, int(port), payload, clients, args.seconds))
                    print(f"  {name:<28} {clients:>3} client(s): {r:>9.0f} requests/s")
        finally:
            proc.terminate()
            proc.wait()
        big = {"brokers": [{"id": i, "rack": "abc"[i % 3]} for i in range(6)],
               "topics": [{"name": "big", "partitions": args.partitions,
                           "replicationFactor": 3}]}
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, __file__, "--server", f"{tmp}/big",
                                 json.dumps(big)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            bootstrap = proc.stdout.readline().strip()
            print(f"{args.partitions} partitions: cluster created and served in "
                  f"{time.monotonic() - t0:.1f} s")
            from kafka import KafkaAdminClient
            a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
            for attempt in range(3):
                t0 = time.monotonic()
                [topic] = a.describe_topics(["big"])
                dt = time.monotonic() - t0
                assert len(topic["partitions"]) == args.partitions
                print(f"  Metadata(big) via KafkaAdminClient.describe_topics, run {attempt + 1}:"
                      f" {dt:.2f} s end to end ({args.partitions / dt:,.0f} partitions/s)")
            a.close()
            host, port = bootstrap.rsplit(":", 1)

            async def raw() -> tuple[float, int]:
                reader, writer = await asyncio.open_connection(host, int(port))
                t0 = time.monotonic()
                writer.write(encoded("Metadata", 12))
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                await reader.readexactly(size)
                writer.close()
                return time.monotonic() - t0, size

            dt, size = asyncio.run(raw())
            print(f"  Metadata(all topics) raw request->last byte: {dt:.2f} s, "
                  f"{size / 1e6:.1f} MB response")
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
