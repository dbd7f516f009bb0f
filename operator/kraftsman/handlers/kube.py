"""A few Kubernetes API calls through kopf's own authenticated session (no second client):
get, create, merge-patch, delete and list by label. One attempt each; the timer retries."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote, urlencode

import kopf
from kopf._cogs.clients import api as kopf_api  # kopf's authenticated request (its vault)
from kopf._cogs.clients import errors as kopf_errors

Logger = logging.Logger | logging.LoggerAdapter[Any]


class KubeError(Exception):
    """An API call failed; the message says which call and what to grant or fix."""


def url(api_version: str, plural: str, namespace: str, name: str | None = None) -> str:
    prefix = "api" if "/" not in api_version else "apis"
    out = f"/{prefix}/{api_version}/namespaces/{quote(namespace)}/{plural}"
    return out + (f"/{quote(name)}" if name else "")


def _explain(method: str, what: str, e: Exception) -> KubeError:
    if isinstance(e, kopf_errors.APIForbiddenError):
        return KubeError(f"{method} {what}: forbidden; grant the operator's ServiceAccount "
                         f"`{method}` on it (the chart's and manifests/' RBAC do)")
    return KubeError(f"{method} {what}: {type(e).__name__}: {e}")


async def get(path: str, what: str, settings: kopf.OperatorSettings,
              logger: Logger) -> dict[str, Any] | None:
    """The object, or None when it does not exist."""
    try:
        response = await kopf_api.request("get", path, settings=settings, logger=logger,
                                          backoffs=[])
        async with response:
            return dict(await response.json())
    except kopf_errors.APINotFoundError:
        return None
    except (kopf_errors.APIError, OSError, TimeoutError) as e:
        raise _explain("get", what, e) from None


async def create(path: str, body: dict[str, Any], what: str, settings: kopf.OperatorSettings,
                 logger: Logger) -> bool:
    """Create; False when it exists already (the caller decides whether that one is ours)."""
    try:
        response = await kopf_api.request("post", path, payload=body, settings=settings,
                                          logger=logger, backoffs=[])
        async with response:
            return True
    except kopf_errors.APIConflictError:
        return False
    except (kopf_errors.APIError, OSError, TimeoutError) as e:
        raise _explain("create", what, e) from None


async def patch(path: str, body: dict[str, Any], what: str, settings: kopf.OperatorSettings,
                logger: Logger) -> None:
    try:
        response = await kopf_api.request(
            "patch", path, payload=body, settings=settings, logger=logger, backoffs=[],
            headers={"Content-Type": "application/merge-patch+json"})
        async with response:
            return
    except kopf_errors.APINotFoundError:
        return
    except (kopf_errors.APIError, OSError, TimeoutError) as e:
        raise _explain("patch", what, e) from None


async def delete(path: str, what: str, settings: kopf.OperatorSettings, logger: Logger) -> None:
    """Delete (in the background: a Job's pods go with it); gone already is fine."""
    try:
        response = await kopf_api.request(
            "delete", path, payload={"propagationPolicy": "Background"}, settings=settings,
            logger=logger, backoffs=[])
        async with response:
            return
    except kopf_errors.APINotFoundError:
        return
    except (kopf_errors.APIError, OSError, TimeoutError) as e:
        raise _explain("delete", what, e) from None


async def list_names(path: str, labels: dict[str, str], what: str,
                     settings: kopf.OperatorSettings, logger: Logger) -> list[str]:
    """Names of the objects at ``path`` carrying every label in ``labels``."""
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    try:
        response = await kopf_api.request(
            "get", f"{path}?{urlencode({'labelSelector': selector})}", settings=settings,
            logger=logger, backoffs=[])
        async with response:
            doc = await response.json()
    except (kopf_errors.APIError, OSError, TimeoutError) as e:
        raise _explain("list", what, e) from None
    out = []
    for item in doc.get("items") or []:
        meta = item.get("metadata") or {}
        # Checked here too: not every API server (or emulator) filters by label.
        if all((meta.get("labels") or {}).get(k) == v for k, v in labels.items()):
            out.append(str(meta.get("name")))
    return out
