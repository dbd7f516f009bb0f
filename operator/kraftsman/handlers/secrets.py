"""Read the Secret named by a KafkaCluster's ``spec.authSecretRef`` through kopf's own API
access (the credentials kopf logged in with; no second Kubernetes client).

Only ``get`` of one named Secret in the resource's namespace — the RBAC grants nothing more.
Values are decoded here and handed to the kafka backend; no message built here or upstream
contains a value, only the Secret's name and key names.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import kopf
from kopf._cogs.clients import api as kopf_api  # kopf's authenticated request (its vault)
from kopf._cogs.clients import errors as kopf_errors

from controller_core.backends.security import decode_secret_data


class SecretUnavailable(Exception):
    """The Secret cannot be read; ``reason`` is a CamelCase condition reason and the message
    names the field and the fix."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


async def read_secret(namespace: str, name: str, settings: kopf.OperatorSettings,
                      logger: logging.Logger | logging.LoggerAdapter[Any]) -> dict[str, str]:
    """The Secret's data, base64-decoded (SecretError, a ValueError, names a bad key)."""
    url = f"/api/v1/namespaces/{quote(namespace)}/secrets/{quote(name)}"
    where = f"spec.authSecretRef.name: Secret {name!r} in namespace {namespace}"
    try:
        response = await kopf_api.request("get", url, settings=settings, logger=logger,
                                          backoffs=[])  # one attempt; the timer retries
        async with response:
            doc = await response.json()
    except kopf_errors.APINotFoundError:
        raise SecretUnavailable("SecretNotFound",
                                f"{where} does not exist; create it or fix the name") from None
    except kopf_errors.APIForbiddenError:
        raise SecretUnavailable("SecretForbidden", (
            f"{where}: the operator may not read it; grant `get` on secrets in that namespace "
            "(chart value rbac.secretNamespaces; manifests/21-rbac-secrets.yaml)")) from None
    except (kopf_errors.APIError, OSError, TimeoutError) as e:
        raise SecretUnavailable("SecretUnavailable",
                                f"{where}: cannot be read ({type(e).__name__})") from None
    data = doc.get("data") or {}
    string_data = doc.get("stringData") or {}  # the API server folds it into data; kept for
    out = decode_secret_data(data)              # emulators that store it as written
    out.update({k: str(v) for k, v in string_data.items()})
    return out
