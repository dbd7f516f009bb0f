"""When each object of a kind turns ``Succeeded=True``, seen by a watch in a process of its own.

``operator_bench.py latency`` runs it beside its creates. In the creating process the watch
shared the interpreter lock with 50 creates in flight, fell behind, and the API server closed
it as an unresponsive watcher (its cache gives a slow watcher ~100 ms): completions were then
timed at the next list, up to seconds late (3,188 of 10,000 in one run). Alone here it reads
as fast as the server sends.

    watch_completions.py URL COUNT [--ca F --cert F --key F]

Prints ``done NAME T`` (``T``: CLOCK_MONOTONIC seconds, the same clock as the caller's
``time.monotonic()``), ``relisted NAME T`` for a completion first seen in a list after the
watch ended (timed late), ``restart`` when it ends, and exits after COUNT completions or when
its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time
from typing import Any

import aiohttp


def succeeded(o: dict[str, Any]) -> bool:
    return any(c.get("type") == "Succeeded" and c.get("status") == "True"
               for c in (o.get("status") or {}).get("conditions") or [])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("count", type=int)
    ap.add_argument("--ca")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    args = ap.parse_args()
    context: ssl.SSLContext | None = None
    if args.ca:
        context = ssl.create_default_context(cafile=args.ca)
        context.load_cert_chain(args.cert, args.key)
    done: set[str] = set()

    def see(o: dict[str, Any], word: str) -> None:
        name = o["metadata"]["name"]
        if name not in done and succeeded(o):
            done.add(name)
            sys.stdout.write(f"{word} {name} {time.monotonic():.6f}\n")
            sys.stdout.flush()

    async def watch(session: aiohttp.ClientSession) -> None:
        rv = ""
        while len(done) < args.count:
            why, began, events = "closed by the server", time.monotonic(), 0
            query = "?watch=true&allowWatchBookmarks=true" + (
                f"&resourceVersion={rv}" if rv else "")
            async with session.get(args.url + query,
                                   timeout=aiohttp.ClientTimeout(total=None)) as r:
                async for line in r.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    events += 1
                    if event.get("type") == "ERROR":  # 410 Gone: list again
                        why = "ERROR " + json.dumps(event.get("object", {}).get("message"))
                        rv = ""
                        break
                    rv = event["object"]["metadata"].get("resourceVersion", rv)
                    if event.get("type") != "BOOKMARK":
                        see(event["object"], "done")
                    if len(done) >= args.count:
                        return
            sys.stdout.write(f"restart after {time.monotonic() - began:.1f} s and {events} "
                             f"events: {why}\n")
            async with session.get(args.url) as r:
                listing = await r.json()
            for o in listing.get("items", []):
                see(o, "relisted")
            rv = listing["metadata"]["resourceVersion"]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        closed = asyncio.create_task(asyncio.to_thread(sys.stdin.read))
        watching = asyncio.create_task(watch(session))
        await asyncio.wait({closed, watching}, return_when=asyncio.FIRST_COMPLETED)
        if watching.done():
            watching.result()
    sys.stdout.flush()
    os._exit(0)  # not waiting for the thread blocked reading stdin


if __name__ == "__main__":
    asyncio.run(main())
