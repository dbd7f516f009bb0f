"""Harness: the real kopf operator against the kmock Kubernetes emulator, over real HTTP.

Used by tests/operator (via conftest) and bench/operator_bench.py.

kmock keeps objects as plain JSON (merge patches, finalizers, deletion); the small
:class:`Emulator` subclass adds the resourceVersion / generation / generateName semantics
of the API server that kopf and the handlers rely on.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import aiohttp.web
import kmock
import kopf
import orjson
from kmock._internal import dicts as kmock_dicts

from controller_core.backends import RetryPolicy
from kraftsman.handlers import Runtime, build_registry
from kraftsman.handlers.common import PLURALS
from kraftsman.resources import API_VERSION, GROUP, VERSION

SHORT = {"KafkaCluster": ["kc"], "KafkaQuorum": ["kq"], "PartitionReassignment": ["preas"],
         "LeaderElection": ["le"], "KafkaRebalance": ["kr"]}


def declare(kmock: Any) -> None:
    """The backbone kopf waits for, peering, events and our four kinds."""
    res = kmock.resources
    for key, kind, namespaced in [
        ("apiextensions.k8s.io/v1/customresourcedefinitions", "CustomResourceDefinition", False),
        ("v1/namespaces", "Namespace", False),
        ("kopf.dev/v1/clusterkopfpeerings", "ClusterKopfPeering", False),
    ]:
        res[key].kind, res[key].namespaced = kind, namespaced
        res[key].verbs = {"list", "watch", "get", "patch", "create"}
    res["v1/events"].kind, res["v1/events"].namespaced = "Event", True
    res["v1/events"].verbs = {"create", "list"}
    res["v1/secrets"].kind, res["v1/secrets"].namespaced = "Secret", True
    res["v1/secrets"].verbs = {"get", "create", "patch", "delete"}
    # KafkaRebalance: the planner Jobs (the test plays kubelet and job controller) and the
    # proposal ConfigMaps they write.
    res["batch/v1/jobs"].kind, res["batch/v1/jobs"].namespaced = "Job", True
    res["batch/v1/jobs"].verbs = {"list", "watch", "get", "create", "patch", "delete"}
    res["batch/v1/jobs"].subresources = {"status"}
    res["v1/configmaps"].kind, res["v1/configmaps"].namespaced = "ConfigMap", True
    res["v1/configmaps"].verbs = {"list", "get", "create", "patch", "update", "delete"}
    for kind, plural in PLURALS.items():
        key = f"{GROUP}/{VERSION}/{plural}"
        res[key].kind, res[key].namespaced = kind, True
        res[key].verbs = {"list", "watch", "get", "patch", "create", "delete"}
        res[key].subresources = {"status"}
        res[key].shortnames = set(SHORT[kind])
        res[key].categories = {"kraftsman"}


class Api:
    """A tiny Kubernetes client for the tests (what kubectl would do). Objects go to
    ``namespace`` unless a call names another (``ns``); given one, :meth:`events` are only
    those of objects in it (a real server holds other tests' namespaces too)."""

    def __init__(self, base: str, session: aiohttp.ClientSession,
                 namespace: str | None = None) -> None:
        self.base, self.session = base.rstrip("/"), session
        self.namespace, self._scoped = namespace or "default", namespace is not None

    def _url(self, kind: str, ns: str | None = "", name: str | None = None) -> str:
        """``ns`` "" is this client's namespace, None all namespaces."""
        url = f"{self.base}/apis/{GROUP}/{VERSION}"
        if ns is not None:
            url += f"/namespaces/{ns or self.namespace}"
        url += f"/{PLURALS[kind]}"
        return url + (f"/{name}" if name else "")

    async def create(self, kind: str, name: str, spec: dict[str, Any], ns: str = "",
                     **meta: Any) -> dict[str, Any]:
        body = {"apiVersion": API_VERSION, "kind": kind,
                "metadata": {"name": name, "namespace": ns or self.namespace,
                             "uid": f"uid-{kind}-{ns}-{name}", **meta}, "spec": spec}
        async with self.session.post(self._url(kind, ns), json=body) as r:
            assert r.status < 300, await r.text()
            return dict(await r.json())

    async def patch(self, kind: str, name: str, doc: dict[str, Any],
                    ns: str = "") -> dict[str, Any]:
        async with self.session.patch(self._url(kind, ns, name), json=doc, headers={
                "Content-Type": "application/merge-patch+json"}) as r:
            assert r.status < 300, await r.text()
            return dict(await r.json())

    async def set_spec(self, kind: str, name: str, spec: dict[str, Any],
                       ns: str = "") -> None:
        await self.patch(kind, name, {"spec": spec}, ns)  # the emulator bumps generation

    async def get(self, kind: str, name: str, ns: str = "") -> dict[str, Any] | None:
        async with self.session.get(self._url(kind, ns, name)) as r:
            if r.status == 404:
                return None
            assert r.status < 300, await r.text()
            return dict(await r.json())

    async def delete(self, kind: str, name: str, ns: str = "") -> None:
        async with self.session.delete(self._url(kind, ns, name)) as r:
            assert r.status < 300, await r.text()

    async def wait(self, kind: str, name: str, pred: Callable[[dict[str, Any]], bool],
                   timeout: float = 30.0, ns: str = "") -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            last = await self.get(kind, name, ns)
            if last is not None and pred(last):
                return last
            await asyncio.sleep(0.1)
        raise AssertionError(f"{kind}/{name} did not reach the state in {timeout}s; last: "
                             f"{(last or {}).get('status')}")

    async def put_secret(self, name: str, string_data: dict[str, str],
                         ns: str = "") -> None:
        """Create or replace a Secret (base64 `data`, as the API server stores it)."""
        import base64

        data = {k: base64.b64encode(v.encode()).decode() for k, v in string_data.items()}
        url = f"{self.base}/api/v1/namespaces/{ns or self.namespace}/secrets"
        async with self.session.delete(f"{url}/{name}") as r:
            assert r.status < 300 or r.status == 404, await r.text()
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": ns}, "data": data}
        async with self.session.post(url, json=body) as r:
            assert r.status < 300, await r.text()

    async def events(self, name: str) -> list[dict[str, Any]]:
        async with self.session.get(f"{self.base}/api/v1/events") as r:
            if r.status >= 300:
                return []
            items = (await r.json()).get("items", [])
        return [e for e in items if e.get("involvedObject", {}).get("name") == name
                and (not self._scoped or e["involvedObject"].get("namespace") == self.namespace)]

    async def wait_events(self, name: str, *reasons: str, timeout: float = 30.0,
                          where: Callable[[list[dict[str, Any]]], bool] | None = None,
                          ) -> list[dict[str, Any]]:
        """The Events of `name` once every reason in `reasons` is among them and `where`
        (if given) holds of them. Milestone Events are posted in the background by the pass
        after the one whose status recorded them, so a test that has seen the status must
        still wait for them."""
        deadline = time.monotonic() + timeout
        while True:
            events = await self.events(name)
            seen = {e.get("reason") for e in events}
            if set(reasons) <= seen and (where is None or where(events)):
                return events
            if time.monotonic() > deadline:
                raise AssertionError(f"Events of {name}: {sorted(map(str, seen))}, not all of "
                                     f"{list(reasons)}{' (or not as expected)' if where else ''}"
                                     f" after {timeout}s: "
                                     f"{[(e.get('reason'), e.get('message')) for e in events]}")
            await asyncio.sleep(0.1)

    async def wait_gone(self, kind: str, name: str, timeout: float = 60.0,
                        ns: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.get(kind, name, ns) is None:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{kind}/{name} still exists after {timeout}s")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def cond_is(type_: str, status: str, reason: str | None = None
            ) -> Callable[[dict[str, Any]], bool]:
    def pred(obj: dict[str, Any]) -> bool:
        c = condition(obj, type_)
        return c is not None and c["status"] == status and (reason is None or
                                                             c["reason"] == reason)
    return pred


class OperatorThread:
    """One kopf operator in its own thread and event loop (kopf cancels its loop's tasks)."""

    def __init__(self, server: str, state_dir: Path, *, peering: str | None = None,
                 priority: int = 0, tick: float = 0.2, time_scale: float = 50.0,
                 kafka_retry_seconds: float = 3.0) -> None:
        self.server, self.state_dir = server, state_dir
        self.peering, self.priority = peering, priority
        self.rt = Runtime(state_dir, tick_seconds=tick, time_scale=time_scale,
                          checkpoint_seconds=0.5, fsync=False,
                          kafka_retry=RetryPolicy(total_seconds=kafka_retry_seconds,
                                                  request_timeout_ms=3000))
        self.rt.backoff.cap = 2.0  # tests change things and look again within seconds
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.error: BaseException | None = None

    def _main(self) -> None:
        registry = build_registry(self.rt)

        @kopf.on.login(registry=registry)
        def _login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=self.server, insecure=True)

        try:
            asyncio.run(kopf.operator(
                registry=registry, clusterwide=True, standalone=self.peering is None,
                peering_name=self.peering, priority=self.priority,
                stop_flag=self.stop_flag, ready_flag=self.ready_flag))
        except BaseException as e:  # surfaced by stop()
            self.error = e

    def start(self) -> OperatorThread:
        self.thread.start()
        assert self.ready_flag.wait(20), "kopf did not become ready"
        return self

    async def astop(self) -> None:
        """Stop from a test: the test's loop keeps serving kmock while kopf says goodbye."""
        await asyncio.to_thread(self.stop)

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(20)
        assert not self.thread.is_alive(), "kopf did not stop"
        if self.error is not None:
            raise self.error


# A real API server's size limits (defaults of kube-apiserver and etcd).
MAX_REQUEST_BODY = 3 * 1024 * 1024  # apiserver's MaxRequestBodyBytes: 413 before decoding
MAX_OBJECT = 1536 * 1024  # etcd's --max-request-bytes (1.5 MiB): "request is too large", 413
MAX_ANNOTATIONS = 256 * 1024  # apimachinery's TotalAnnotationSizeLimitB: 422 Invalid


PATCH_MEDIA_TYPES = frozenset({"application/json-patch+json", "application/merge-patch+json",
                               "application/strategic-merge-patch+json",
                               "application/apply-patch+yaml"})


def status_error(code: int, reason: str, message: str, **details: Any) -> aiohttp.web.Response:
    return aiohttp.web.json_response({
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "code": code, "reason": reason, "message": message, "details": details}, status=code)


def annotations_size(obj: Any) -> int:
    """Counted as apimachinery's ValidateAnnotationsSize does: len(key) + len(value)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = (meta or {}).get("annotations") or {}
    return sum(len(k) + len(v or "") for k, v in annotations.items())


class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator plus what the API server does that kopf relies on:
    `metadata.generateName` (kopf posts Events that way), a `metadata.uid` on create, a new
    `resourceVersion` on every write (kopf matches watch events to its own patches by it),
    `metadata.generation` bumped on spec changes, and the API server's size limits (a request
    body over 3 MiB or an object over etcd's 1.5 MiB: 413 RequestEntityTooLarge; annotations
    over 256 KiB in total: 422 Invalid), so a resource that a real cluster would refuse fails
    here too. (kopf's resourceVersion *test* in JSON patches is dropped: see below.)"""

    enforce_limits = True

    _versions = itertools.count(2)
    _generated = itertools.count(1)


    # Benchmarks turn this off: kmock scans every stored object on each request, and two
    # Events per LeaderElection would make the emulator, not the operator, the bottleneck.
    store_events = True
    # Tests set this to make the API server refuse Events for a while (503).
    refuse_events = False
    # Tests set this to a list to keep every request served (the log below forgets them).
    recorded: list[Any] | None = None
    refused_events = 0  # Event posts refused so far
    # Tests set this to {plural: seconds} to make status writes of that resource slow, as a
    # loaded etcd makes them: the write is applied that late, and answered that much later
    # again (its watch event reaches the operator before the answer does).
    slow_status: dict[str, float] = {}

    # kmock keeps every version of every object; a benchmark with 10,000-partition specs
    # patched every second would measure that history, so it can keep only the latest.
    keep_history = True
    _writes = 0

    async def _handle(self, request: Any) -> Any:
        try:
            return await self._serve(request)
        finally:
            self._forget(request)

    async def _serve(self, request: Any) -> Any:
        if self.recorded is not None:
            self.recorded.append(request)
        method = str(getattr(request.method, "name", request.method)).upper()
        if method == "PATCH":
            # The API server applies a patch by its media type and refuses any other
            # (a plain application/json body included): 415 UnsupportedMediaType.
            headers = {k.lower(): v for k, v in (request.headers or {}).items()}
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media not in PATCH_MEDIA_TYPES:
                return status_error(415, "UnsupportedMediaType", (
                    "the body of the request was in an unknown format - accepted media types "
                    f"include: {', '.join(sorted(PATCH_MEDIA_TYPES))}"))
        if not self.keep_history:
            self._writes += 1
            if self._writes % 50 == 0:
                for obj in self.objects.values():
                    if len(obj.history) > 1:
                        del obj.history[:-1]
        if getattr(request.resource, "plural", None) == "events" \
                and "create" in str(request.action).lower():
            if self.refuse_events:
                self.refused_events += 1
                return status_error(503, "ServiceUnavailable", "events refused by the test")
            if not self.store_events:
                return aiohttp.web.json_response(request.data, status=201)
        data = getattr(request, "data", None)
        action = str(getattr(request, "action", ""))
        rv = str(next(self._versions))
        if isinstance(data, dict) and "create" in action.lower():
            meta = data.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{next(self._generated)}"
            meta["resourceVersion"] = rv
            meta.setdefault("generation", 1)
            # The API server gives every object a uid (objects the operator creates, too).
            meta.setdefault("uid", str(uuid.uuid4()))
        elif isinstance(data, dict) and "update" in action.lower():
            meta = data.setdefault("metadata", {})
            meta["resourceVersion"] = rv
            if "spec" in data and request.subresource is None:
                current = self._current(request)
                meta["generation"] = int(current.get("metadata", {}).get("generation", 1)) + 1
        elif isinstance(data, list) and "update" in action.lower():
            # kopf guards its finalizer JSON patches with a resourceVersion test; kmock would
            # answer a failed test with a 500 kopf retries verbatim, not the 409/422 the API
            # server sends, so the guard is dropped here (no concurrent writers in tests).
            data[:] = [op for op in data if not (
                op.get("op") == "test" and op.get("path") == "/metadata/resourceVersion")]
            data.append({"op": "replace", "path": "/metadata/resourceVersion", "value": rv})
        if self.enforce_limits:
            refused = self._refuse_oversize(request)
            if refused is not None:
                return refused
        slow = self.slow_status.get(str(getattr(request.resource, "plural", ""))) \
            if method == "PATCH" and request.subresource == "status" else None
        if slow is None:
            return await super()._handle(request)
        await asyncio.sleep(slow)
        response = await super()._handle(request)
        await asyncio.sleep(slow)
        return response

    def _forget(self, request: Any) -> None:
        """A served request leaves kmock's log: kmock matches each new request against its
        whole log (by identity, through every reaction's filters), so a log of every request
        ever served makes each request slower than the last. Only requests in flight (the
        current one, open watches) stay — all that matching needs."""
        log = self._requests
        for i in range(len(log) - 1, -1, -1):
            if log[i] is request:
                del log[i]
                return

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> Any:
        # aiohttp refuses bodies over 1 MiB by itself (a plain-text 413); let the API server's
        # own limits below decide instead.
        raw_request._client_max_size = 64 * 1024 * 1024
        return await super().__call__(raw_request)

    def _refuse_oversize(self, request: Any) -> aiohttp.web.Response | None:
        action = str(getattr(request, "action", "")).lower()
        if "create" not in action and "update" not in action:
            return None
        body = getattr(request, "body", b"") or b""
        if len(body) > MAX_REQUEST_BODY:
            return status_error(413, "RequestEntityTooLarge",
                                f"Request entity too large: limit is {MAX_REQUEST_BODY}")
        after = request.data
        if "update" in action:
            after = kmock_dicts.patch_dict(self._current(request), after)
        if annotations_size(after) > MAX_ANNOTATIONS:
            kind = (after.get("kind") or "object") if isinstance(after, dict) else "object"
            name = ((after.get("metadata") or {}).get("name") or request.name
                    if isinstance(after, dict) else request.name)
            return status_error(
                422, "Invalid", f'{kind} "{name}" is invalid: metadata.annotations: Too long: '
                f"may not be more than {MAX_ANNOTATIONS} bytes", name=name, kind=kind,
                causes=[{"reason": "FieldValueTooLong", "field": "metadata.annotations",
                         "message": f"Too long: may not be more than {MAX_ANNOTATIONS} bytes"}])
        if len(orjson.dumps(after)) > MAX_OBJECT:
            return status_error(413, "RequestEntityTooLarge", "etcdserver: request is too large")
        return None

    def _current(self, request: Any) -> dict[str, Any]:
        found = self._KubernetesEmulator__get_objs(request, True)
        return dict(found[0].raw) if found and not found[0].deleted else {}

    def _KubernetesEmulator__get_objs(self, request: Any, strict: bool) -> list[Any]:
        """kmock finds the object of a request by scanning every object it stores; with a
        name (and so the namespace) known, a dict lookup does: a request no longer costs
        more as the emulator holds more objects."""
        if strict and request.name is not None and request.resource is not None:
            key = (request.resource, request.namespace, request.name)
            obj = self._objects._objects.get(key)
            return [obj] if obj is not None else []
        return kmock.KubernetesEmulator._KubernetesEmulator__get_objs(  # type: ignore[no-any-return]
            self, request, strict)




def _jsonpath(obj: Any, path: str) -> Any:
    """The subset of JSONPath printer columns use: .a.b and [?(@.type=="X")]."""
    node = obj
    for part in re.findall(r'\[\?\(@\.type=="[^"]*"\)\]|[^.\[]+', path):
        if node is None:
            return None
        if part.startswith("[?"):
            want = part.split('"')[1]
            node = next((c for c in node or [] if c.get("type") == want), None)
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


def kubectl_get(objs: list[dict[str, Any]], kind: str, *, wide: bool = False) -> str:
    """Render objects like `kubectl get` does, from the CRD's printer columns."""
    from kraftsman.crdgen import KIND_INFO

    cols = [c for c in KIND_INFO[kind].columns if wide or not c.priority]
    rows = [["NAME", *[c.name.upper() for c in cols]]]
    for o in objs:
        row = [o["metadata"]["name"]]
        for c in cols:
            v = _jsonpath(o, c.json_path)
            if c.type == "date":
                v = "10s" if v or c.json_path.endswith("creationTimestamp") else None
            elif isinstance(v, list):
                v = "[" + ",".join(map(str, v)) + "]"
            row.append("<none>" if v is None else str(v))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)
