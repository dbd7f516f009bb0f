"""TLS and SASL settings for kafka-python from the data of a Kubernetes Secret.

The Secret (named by KafkaCluster ``spec.authSecretRef``) holds, all optional::

    security.protocol   PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL  (default: inferred —
                        SASL_* when sasl.mechanism is set, *SSL when ca.crt/tls.crt is given)
    sasl.mechanism      PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    sasl.username, sasl.password
    ca.crt              PEM CA bundle to verify the brokers (default: the system's)
    tls.crt, tls.key    PEM client certificate and key (mutual TLS)
    tls.key.password    the key's passphrase
    ssl.check.hostname  "true" (default) | "false"

Values are the decoded strings (the operator base64-decodes ``Secret.data``; see
:func:`decode_secret_data`). No message ever contains a value — only key names.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KNOWN_KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
              "ca.crt", "tls.crt", "tls.key", "tls.key.password", "ssl.check.hostname")


class SecretError(ValueError):
    """The Secret's data is incomplete or inconsistent; names the key and the fix."""


def decode_secret_data(data: Mapping[str, str]) -> dict[str, str]:
    """``Secret.data`` (base64) → decoded strings, naming a key that does not decode."""
    out = {}
    for key, value in data.items():
        try:
            out[key] = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise SecretError(f"secret key {key!r}: not base64-encoded UTF-8 text") from None
    return out


def _text(data: Mapping[str, str | bytes], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else value


def connection_settings(data: Mapping[str, str | bytes] | None) -> dict[str, Any]:
    """kafka-python keyword arguments for the Secret's data (empty/None: PLAINTEXT)."""
    data = data or {}
    unknown = sorted(set(data) - set(KNOWN_KEYS))
    if unknown:
        raise SecretError(f"secret: unknown key(s) {unknown}; known keys: {list(KNOWN_KEYS)}")
    mechanism = _text(data, "sasl.mechanism")
    ca, cert, key = _text(data, "ca.crt"), _text(data, "tls.crt"), _text(data, "tls.key")
    protocol = _text(data, "security.protocol")
    if protocol is None:
        tls = ca is not None or cert is not None
        protocol = ("SASL_" if mechanism else "") + ("SSL" if tls else "PLAINTEXT")
        protocol = "SSL" if protocol == "SSL" else protocol
    protocol = protocol.upper()
    if protocol not in PROTOCOLS:
        raise SecretError(f"secret key 'security.protocol': must be one of {list(PROTOCOLS)}")
    out: dict[str, Any] = {"security_protocol": protocol}
    if protocol.startswith("SASL_"):
        if mechanism is None:
            raise SecretError("secret: security.protocol is SASL_* but 'sasl.mechanism' is "
                              f"missing; set it to one of {list(MECHANISMS)}")
        mechanism = mechanism.upper()
        if mechanism not in MECHANISMS:
            raise SecretError(f"secret key 'sasl.mechanism': must be one of {list(MECHANISMS)}")
        user, password = _text(data, "sasl.username"), _text(data, "sasl.password")
        missing = [k for k, v in (("sasl.username", user), ("sasl.password", password)) if not v]
        if missing:
            raise SecretError(f"secret: sasl.mechanism {mechanism} needs {missing}")
        out.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                   sasl_plain_password=password)
    elif mechanism is not None:
        raise SecretError(f"secret: 'sasl.mechanism' is set but security.protocol is {protocol};"
                          " use SASL_PLAINTEXT or SASL_SSL")
    if protocol.endswith("SSL"):
        check = (_text(data, "ssl.check.hostname") or "true").strip().lower()
        if check not in ("true", "false"):
            raise SecretError("secret key 'ssl.check.hostname': must be \"true\" or \"false\"")
        if (cert is None) != (key is None):
            raise SecretError("secret: mutual TLS needs both 'tls.crt' and 'tls.key'")
        out["ssl_context"] = _ssl_context(ca, cert, key, _text(data, "tls.key.password"),
                                          check == "true")
    elif ca or cert or key:
        raise SecretError(f"secret: TLS material is set but security.protocol is {protocol}; "
                          "use SSL or SASL_SSL")
    return out


def _ssl_context(ca: str | None, cert: str | None, key: str | None, password: str | None,
                 check_hostname: bool) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(cadata=ca) if ca else ssl.create_default_context()
    except ssl.SSLError:
        raise SecretError("secret key 'ca.crt': not a valid PEM certificate bundle") from None
    ctx.check_hostname = check_hostname
    if cert is not None and key is not None:
        # load_cert_chain reads files only: write both to a private directory, then remove it
        with tempfile.TemporaryDirectory(prefix="kraftsman-tls-") as d:
            cert_path, key_path = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
            for path, text in ((cert_path, cert), (key_path, key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
            try:
                ctx.load_cert_chain(cert_path, key_path, password=password)
            except ssl.SSLError:
                raise SecretError("secret keys 'tls.crt'/'tls.key': not a matching PEM "
                                  "certificate and key (or a wrong 'tls.key.password')") from None
    return ctx
