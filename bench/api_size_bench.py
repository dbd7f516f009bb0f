"""The largest PartitionReassignment a real API server stores, measured against the kmock
emulator with the API server's limits (tests/operator/harness.py: 1.5 MiB per object, 256 KiB
of annotations, 3 MiB per request).

The object measured is the one stored once the operator handled it (tests/operator/
object_size.py): the spec (topic "orders", RF 3), the managedFields the API server records
for kubectl, the operator's finalizer and kopf's annotations, and the largest status the
operator writes for that many partitions. Two ways of creating it: `kubectl create` /
`kubectl apply --server-side` / `kraftsman apply`, and a client-side `kubectl apply` (Argo CD's
default), which copies the object into the last-applied-configuration annotation.

    .venv/bin/python bench/api_size_bench.py
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
import kmock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "operator"))
from harness import Emulator, declare
from object_size import as_stored, object_bytes, reassignment, worst_status

URL = "/apis/kraftsman.io/v1alpha1/namespaces/default/partitionreassignments"


async def fits(session: aiohttp.ClientSession, base: str, partitions: int,
               client_side_apply: bool) -> tuple[bool, int, str]:
    name = f"p{partitions}{'c' if client_side_apply else 's'}"
    obj = as_stored(reassignment(name, partitions, client_side_apply=client_side_apply),
                    worst_status(partitions))
    async with session.post(base + URL, json=obj) as r:
        body = await r.json()
        ok = r.status < 300
    if ok:
        async with session.delete(f"{base}{URL}/{name}") as r:
            assert r.status < 300
    return ok, object_bytes(obj), "" if ok else f"{body['code']} {body['reason']}"


async def largest(session: aiohttp.ClientSession, base: str, client_side_apply: bool) -> int:
    lo, hi = 1, 200_000  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, _, _ = await fits(session, base, mid, client_side_apply)
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo


async def main() -> None:
    emulator = Emulator()
    emulator.keep_history = False
    async with emulator as k8s, kmock.Server(k8s):
        declare(k8s)
        base = str(k8s.url).rstrip("/")
        async with aiohttp.ClientSession() as session:
            print("Largest PartitionReassignment stored (topic 'orders', RF 3, "
                  "operator's status and annotations included)")
            for label, csa in (("kubectl create / apply --server-side / kraftsman apply",
                                False), ("client-side kubectl apply (Argo CD default)", True)):
                n = await largest(session, base, csa)
                _, size, _ = await fits(session, base, n, csa)
                _, _, refused = await fits(session, base, n + 1, csa)
                print(f"  {label:56s} {n:>6} partitions ({size} bytes; {n + 1}: {refused})")


if __name__ == "__main__":
    asyncio.run(main())
