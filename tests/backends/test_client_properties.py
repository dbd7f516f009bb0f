"""`--command-config`: the Kafka tools' client-properties file → the backend's settings.
Every refusal names the key; values (passwords) never appear in a message."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from controller_core.backends.client_properties import (
    PropertiesError,
    load_command_config,
    parse_properties,
    secret_data_from_properties,
)
from controller_core.backends.security import connection_settings
from tests.tls_certs import make_pki


def test_properties_format() -> None:
    text = ("# comment\n! also a comment\nsecurity.protocol = SASL_SSL\n"
            "sasl.mechanism: SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\\n"
            "    required username=\"ad\\\\min\" password=\"p=w;d\";\n"
            "ssl.endpoint.identification.algorithm=\n")
    props = parse_properties(text)
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["ssl.endpoint.identification.algorithm"] == ""
    data = secret_data_from_properties(props)
    assert data["sasl.username"] == "admin" and data["sasl.password"] == "p=w;d"
    assert data["ssl.check.hostname"] == "false"


def test_plain_login_module_unquoted_values() -> None:
    data = secret_data_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                            "username=alice password=\"s3cret\";"})
    settings = connection_settings(data)
    assert settings["sasl_mechanism"] == "PLAIN"
    assert (settings["sasl_plain_username"], settings["sasl_plain_password"]) == ("alice",
                                                                                  "s3cret")


def test_pem_truststore_and_keystore_files(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SSL\nssl.truststore.type=PEM\n"
                 "ssl.truststore.location=pki/ca.pem\nssl.keystore.type=PEM\n"
                 "ssl.keystore.location=pki/client-keystore.pem\n")
    data = load_command_config(f)  # relative locations: from the file's directory
    assert "BEGIN CERTIFICATE" in data["ca.crt"]
    assert "PRIVATE KEY" in data["tls.key"] and "BEGIN CERTIFICATE" in data["tls.crt"]
    assert isinstance(connection_settings(data)["ssl_context"], ssl.SSLContext)
    inline = secret_data_from_properties({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pki.ca.read_text(),
        "ssl.keystore.certificate.chain": pki.client_cert.read_text(),
        "ssl.keystore.key": pki.client_key.read_text()})
    assert inline["tls.crt"] == pki.client_cert.read_text()


@pytest.mark.parametrize(("props", "key"), [
    ({"ssl.truststore.type": "JKS", "ssl.truststore.location": "/x.jks"},
     "ssl.truststore.type"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/x.p12"}, "ssl.keystore.type"),
    ({"ssl.truststore.location": "BINARY"}, "ssl.truststore.location"),
    ({"ssl.truststore.location": "/does/not/exist.pem"}, "ssl.truststore.location"),
    ({"ssl.keystore.location": "NOKEY"}, "ssl.keystore.location"),
    ({"sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config":
      "org.apache.kafka.common.security.scram.ScramLoginModule required username=a "
      "password=\"TOPSECRET\";"}, "sasl.jaas.config"),
    ({"sasl.mechanism": "GSSAPI", "sasl.jaas.config":
      "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
     "sasl.jaas.config"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config":
      "org.apache.kafka.common.security.plain.PlainLoginModule required username=a;"},
     "password"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": "garbage"}, "sasl.jaas.config"),
    ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name"),
    ({"ssl.keystore.key": "x"}, "ssl.keystore.certificate.chain"),
    ({"ssl.endpoint.identification.algorithm": "ldap"},
     "ssl.endpoint.identification.algorithm"),
])
def test_refusals_name_the_key(tmp_path: Path, props: dict[str, str], key: str) -> None:
    (tmp_path / "BINARY").write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02\xff")
    (tmp_path / "NOKEY").write_text("-----BEGIN CERTIFICATE-----\nAA==\n"
                                    "-----END CERTIFICATE-----\n")
    with pytest.raises(PropertiesError) as e:
        secret_data_from_properties(props, tmp_path)
    assert key in str(e.value)
    assert "TOPSECRET" not in str(e.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PropertiesError, match="--command-config"):
        load_command_config(tmp_path / "missing.properties")
