"""The Kafka tools' client-properties file (``--command-config``) → the backend's settings.

Reads what ``kafka-reassign-partitions --command-config`` reads::

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="admin" password="admin-secret";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/kafka/ca.pem       # or ssl.truststore.certificates=<PEM>
    ssl.keystore.type=PEM                            # mutual TLS, PEM only:
    ssl.keystore.location=/etc/kafka/client.pem      # key + certificate chain in one file,
    ssl.keystore.certificate.chain=...               # or both inline
    ssl.keystore.key=...
    ssl.key.password=...
    ssl.endpoint.identification.algorithm=           # empty: no hostname check

and turns it into the same keys as a KafkaCluster's auth Secret (:mod:`.security`), so one
validation serves both. kafka-python reads PEM only: a JKS or PKCS12 store is refused with
a message naming the key and the ``keytool``/``openssl`` conversion. Messages name keys,
never values.
"""

from __future__ import annotations

import re
from pathlib import Path

from controller_core.backends.security import SecretError

# Accepted but without effect on kafka-python (passwords of PEM stores, protocol lists).
IGNORED = frozenset({
    "ssl.truststore.password", "ssl.keystore.password", "ssl.protocol",
    "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.secure.random.implementation",
    "ssl.engine.factory.class", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "client.id", "request.timeout.ms", "default.api.timeout.ms", "retries", "retry.backoff.ms",
    "connections.max.idle.ms", "metadata.max.age.ms", "reconnect.backoff.ms",
    "reconnect.backoff.max.ms", "socket.connection.setup.timeout.ms",
    "socket.connection.setup.timeout.max.ms", "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
})
KNOWN = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.certificates", "ssl.keystore.type",
    "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.endpoint.identification.algorithm",
}) | IGNORED
_MODULES = {"PlainLoginModule": ("PLAIN",),
            "ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512")}
_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
                   r"(?P<options>.*?);?\s*$", re.DOTALL)
_OPTION = re.compile(r'\s*([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))')
_PEM_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
                      re.DOTALL)
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.DOTALL)


class PropertiesError(SecretError):
    """The --command-config file is unreadable or names something we cannot honour."""


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties' line format: ``key=value`` or ``key: value``, ``#``/``!``
    comments, a trailing backslash continues the line; ``\\n``/``\\t``/``\\\\`` escapes."""
    out: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        m = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", line, re.DOTALL)
        key, value = (m.group(1), m.group(2)) if m else (line, "")
        out[_unescape(key)] = _unescape(value.rstrip())
    return out


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1),
                                                                           m.group(1)), s)


def parse_jaas(text: str, mechanism: str | None) -> tuple[str, str]:
    """(username, password) from a PlainLoginModule/ScramLoginModule ``sasl.jaas.config``."""
    m = _JAAS.match(text)
    if m is None:
        raise PropertiesError("command config key 'sasl.jaas.config': expected "
                              "'<LoginModule class> required username=\"...\" "
                              "password=\"...\";'")
    module = m.group("module").rsplit(".", 1)[-1]
    if module not in _MODULES:
        raise PropertiesError(f"command config key 'sasl.jaas.config': login module {module} "
                              "is not supported; use PlainLoginModule (PLAIN) or "
                              "ScramLoginModule (SCRAM-SHA-256/512)")
    if mechanism is not None and mechanism.upper() not in _MODULES[module]:
        raise PropertiesError(f"command config keys 'sasl.mechanism'/'sasl.jaas.config': "
                              f"{module} does not do {mechanism}; it does "
                              f"{', '.join(_MODULES[module])}")
    options = {o.group(1): o.group(2) if o.group(2) is not None else o.group(3)
               for o in _OPTION.finditer(m.group("options"))}
    missing = [k for k in ("username", "password") if not options.get(k)]
    if missing:
        raise PropertiesError(f"command config key 'sasl.jaas.config': {' and '.join(missing)} "
                              f"missing in the {module} options")
    return _unescape(options["username"]), _unescape(options["password"])


def _read(key: str, location: str, base: Path) -> str:
    path = Path(location)
    path = path if path.is_absolute() else base / path
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise PropertiesError(f"command config key {key!r}: cannot read {path}: "
                              f"{e.strerror or e}") from None
    except UnicodeDecodeError:
        raise PropertiesError(f"command config key {key!r}: {path} is not a PEM text file "
                              "(a JKS or PKCS12 store?); kafka-python reads PEM only") from None


def _pem_only(key: str, store_type: str | None, kind: str) -> None:
    if store_type is not None and store_type.upper() != "PEM":
        conversion = ("keytool -exportcert -rfc -alias CA -keystore truststore.jks > ca.pem"
                      if kind == "truststore" else
                      "openssl pkcs12 -in keystore.p12 -nodes > client.pem")
        raise PropertiesError(
            f"command config key {key!r}: {store_type} stores cannot be read by kafka-python; "
            f"convert to PEM (e.g. `{conversion}`) and set {key}=PEM")


def secret_data_from_properties(props: dict[str, str], base: Path = Path(".")
                                ) -> dict[str, str]:
    """The auth Secret's keys (see :mod:`.security`) for a client-properties mapping."""
    unknown = sorted(k for k in props if k not in KNOWN)
    if unknown:
        raise PropertiesError(f"command config: unsupported key(s) {unknown}; supported: "
                              f"{sorted(KNOWN - IGNORED)}")
    data: dict[str, str] = {}
    if "security.protocol" in props:
        data["security.protocol"] = props["security.protocol"].strip()
    mechanism = props.get("sasl.mechanism", "").strip() or None
    if mechanism is not None:
        data["sasl.mechanism"] = mechanism
    if "sasl.jaas.config" in props:
        data["sasl.username"], data["sasl.password"] = parse_jaas(props["sasl.jaas.config"],
                                                                  mechanism)
    elif mechanism is not None:
        raise PropertiesError("command config: sasl.mechanism is set but 'sasl.jaas.config' "
                              "is missing; add the login module line with username and "
                              "password")
    _pem_only("ssl.truststore.type", props.get("ssl.truststore.type"), "truststore")
    _pem_only("ssl.keystore.type", props.get("ssl.keystore.type"), "keystore")
    if "ssl.truststore.certificates" in props:
        data["ca.crt"] = props["ssl.truststore.certificates"]
    elif "ssl.truststore.location" in props:
        data["ca.crt"] = _read("ssl.truststore.location", props["ssl.truststore.location"],
                               base)
    if "ca.crt" in data and not _PEM_CERT.search(data["ca.crt"]):
        key = ("ssl.truststore.certificates" if "ssl.truststore.certificates" in props
               else "ssl.truststore.location")
        raise PropertiesError(f"command config key {key!r}: no PEM certificate found "
                              "(a JKS or PKCS12 store? kafka-python reads PEM only)")
    cert = props.get("ssl.keystore.certificate.chain")
    key_pem = props.get("ssl.keystore.key")
    if "ssl.keystore.location" in props:
        if cert is not None or key_pem is not None:
            raise PropertiesError("command config: give either 'ssl.keystore.location' or "
                                  "'ssl.keystore.certificate.chain' + 'ssl.keystore.key'")
        text = _read("ssl.keystore.location", props["ssl.keystore.location"], base)
        key_match, certs = _PEM_KEY.search(text), _PEM_CERT.findall(text)
        if key_match is None or not certs:
            raise PropertiesError("command config key 'ssl.keystore.location': expected a PEM "
                                  "file with the private key and the certificate chain (a "
                                  "JKS or PKCS12 store? kafka-python reads PEM only)")
        key_pem, cert = key_match.group(0), "\n".join(certs)
    if (cert is None) != (key_pem is None):
        raise PropertiesError("command config: mutual TLS needs both "
                              "'ssl.keystore.certificate.chain' and 'ssl.keystore.key'")
    if cert is not None and key_pem is not None:
        data["tls.crt"], data["tls.key"] = cert, key_pem
        if props.get("ssl.key.password"):
            data["tls.key.password"] = props["ssl.key.password"]
    if "ssl.endpoint.identification.algorithm" in props:
        algorithm = props["ssl.endpoint.identification.algorithm"].strip().lower()
        if algorithm not in ("", "https"):
            raise PropertiesError("command config key 'ssl.endpoint.identification.algorithm':"
                                  " must be https or empty")
        data["ssl.check.hostname"] = "true" if algorithm == "https" else "false"
    return data


def load_command_config(path: Path) -> dict[str, str]:
    """Read ``--command-config FILE`` into the auth Secret's keys."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PropertiesError(f"--command-config {path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise PropertiesError(f"--command-config {path}: not a text properties file") from None
    return secret_data_from_properties(parse_properties(text), path.parent)
