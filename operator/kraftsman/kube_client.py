"""A few synchronous Kubernetes calls for one-shot commands (the planner Job), with the
credentials the operator logs in with (:mod:`kraftsman.handlers.login`: in-cluster service
account or a kubeconfig), through the official ``kubernetes`` client.

Errors come back as :class:`KubeError` with the HTTP status, so callers can say which object
is missing or forbidden and what to do.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kopf
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from kraftsman.proposal import data_patch
from kraftsman.resources import GROUP, VERSION

MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    """An API call that failed: the HTTP status (0: no answer), its reason and the API
    server's own message (a Status object's ``message``: what is invalid, who is forbidden)."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        text = f"HTTP {status} {reason}"
        super().__init__(f"{text}: {one_line(message)}" if message else text)
        self.status = status
        self.reason = reason
        self.message = message


def one_line(text: str) -> str:
    return " ".join(text.split())


def _status_message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status answer, if the body is one."""
    import json

    try:
        doc = json.loads(body) if isinstance(body, (str, bytes)) and body else None
    except ValueError:
        return ""
    return str(doc.get("message") or "") if isinstance(doc, dict) else ""


def _file(data: str | bytes, tmp: Path, name: str) -> str:
    """kubeconfig *-data fields are base64; the client wants files."""
    raw = base64.b64decode(data)
    path = tmp / name
    path.write_bytes(raw)
    return str(path)


def configuration(info: kopf.ConnectionInfo, tmp: Path) -> k8s.Configuration:
    cfg = k8s.Configuration()
    cfg.host = info.server.rstrip("/")
    cfg.verify_ssl = not info.insecure
    if info.ca_path:
        cfg.ssl_ca_cert = str(info.ca_path)
    elif info.ca_data:
        cfg.ssl_ca_cert = _file(info.ca_data, tmp, "ca.crt")
    if info.certificate_path:
        cfg.cert_file = str(info.certificate_path)
    elif info.certificate_data:
        cfg.cert_file = _file(info.certificate_data, tmp, "client.crt")
    if info.private_key_path:
        cfg.key_file = str(info.private_key_path)
    elif info.private_key_data:
        cfg.key_file = _file(info.private_key_data, tmp, "client.key")
    if info.token:
        cfg.api_key = {"authorization": info.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    if info.username:
        cfg.username, cfg.password = info.username, info.password or ""
    return cfg


class KubeClient:
    """get a kraftsman.io object or a Secret; create-or-update a ConfigMap."""

    def __init__(self, info: kopf.ConnectionInfo) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="kraftsman-kube-")
        self.api = k8s.ApiClient(configuration(info, Path(self._tmp.name)))
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)

    def close(self) -> None:
        self.api.close()
        self._tmp.cleanup()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except ApiException as e:
            raise KubeError(int(e.status or 0), str(e.reason or ""),
                            _status_message(e.body)) from None
        except OSError as e:  # urllib3 wraps refusals in MaxRetryError, an OSError
            raise KubeError(0, f"cannot reach the API server ({type(e).__name__})") from None

    def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        obj = self._call(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace,
                         plural, name)
        return dict(obj)

    def secret_data(self, namespace: str, name: str) -> tuple[dict[str, str], dict[str, str]]:
        """(data as stored: base64, stringData as some emulators keep it)."""
        raw = self._call(self.core.read_namespaced_secret, name, namespace,
                         _preload_content=False)
        doc = _json(raw)
        return dict(doc.get("data") or {}), {k: str(v) for k, v in
                                             (doc.get("stringData") or {}).items()}

    def upsert_config_map(self, obj: Mapping[str, Any]) -> None:
        """Create; if it exists (a retried Job), merge-patch it to exactly ``obj``'s data,
        labels and owner."""
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        try:
            self._call(self.core.create_namespaced_config_map, ns, dict(obj))
            return
        except KubeError as e:
            if e.status != 409:
                raise
        current = _json(self._call(self.core.read_namespaced_config_map, name, ns,
                                   _preload_content=False))
        patch_meta: dict[str, Any] = {"labels": meta.get("labels") or {}}
        if meta.get("ownerReferences"):
            patch_meta["ownerReferences"] = meta["ownerReferences"]
        patch = {"metadata": patch_meta, "data": data_patch(current.get("data"), obj["data"])}
        self._call(self.core.patch_namespaced_config_map, name, ns, patch,
                   _content_type=MERGE_PATCH)


def _json(response: Any) -> dict[str, Any]:
    import json

    doc = json.loads(response.data)
    return doc if isinstance(doc, dict) else {}
