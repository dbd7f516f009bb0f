"""`cluster serve` over TLS (optionally mutual) and SASL/SCRAM-SHA-256/512, driven by
kraftsman's `kafka` backend as a client.

SCRAM follows Kafka's ``ScramSaslServer``/``ScramFormatter`` (RFC 5802, RFC 7677): the server
keeps only salt, StoredKey and ServerKey; an unknown user and a wrong proof get the same
answer; the authorization id must be the user name."""

from __future__ import annotations

import base64
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller_core.backends import RetryPolicy, open_kafka_admin
from controller_core.errors import KafkaApiError
from controller_core.model import TopicPartition
from controller_core.wire.auth import AuthFile, Authorizer
from controller_core.wire.scram import INVALID, ScramError, ScramServer, make_credential
from tests.helpers import SlowClient, cluster
from tests.serve.harness import ServedCluster, served
from tests.tls_certs import Pki, make_pki

RETRY = RetryPolicy(total_seconds=10)


def test_rfc7677_exchange() -> None:
    """The SCRAM-SHA-256 example of RFC 7677 §3, byte for byte."""
    cred = make_credential("SCRAM-SHA-256", "pencil",
                           salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = ScramServer("SCRAM-SHA-256", {"user": cred}, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def _rfc_server() -> ScramServer:
    cred = make_credential("SCRAM-SHA-256", "pencil",
                           salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    return ScramServer("SCRAM-SHA-256", {"user": cred}, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")


@pytest.mark.parametrize(("first", "final", "message"), [
    (b"n,,n=nobody,r=abc", None, INVALID),  # unknown user: same words as a wrong password
    (b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
     b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
     b"p=AHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", INVALID),  # one bit of the proof
    (b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
     b"c=biws,r=rOprNGfwEbeRWgbNEkqOXX,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
     "nonce"),
    (b"n,a=someone,n=user,r=abc", None, "authorization id"),
    (b"p=tls-unique,,n=user,r=abc", None, "channel binding"),
    (b"\xff\xfe", None, "Invalid SCRAM message"),
])
def test_scram_refusals(first: bytes, final: bytes | None, message: str) -> None:
    server = _rfc_server()
    with pytest.raises(ScramError, match=message):
        server.evaluate(first)
        assert final is not None
        server.evaluate(final)
    assert not server.complete and server.username is None
    with pytest.raises(ScramError):  # a failed exchange stays failed
        server.evaluate(first)


def _authorizer(**extra: object) -> Authorizer:
    return Authorizer.from_file(AuthFile.model_validate({
        "users": [{"name": "admin", "password": "admin-secret"}],
        "acls": [{"principal": "User:admin", "operations": ["ALL"]},
                 {"principal": "User:CN=admin,O=kraftsman-tests", "operations": ["DESCRIBE"]}],
        **extra}))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server_tls(pki: Pki, *, mutual: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    if mutual:
        ctx.load_verify_locations(cafile=str(pki.ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@pytest.fixture
def tls_server(tmp_path: Path, pki: Pki) -> Iterator[ServedCluster]:
    with served(cluster(tmp_path / "c"), _authorizer(), time_scale=0,
                ssl_context=_server_tls(pki)) as s:
        yield s


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_each_mechanism(tls_server: ServedCluster, pki: Pki, mechanism: str) -> None:
    admin = open_kafka_admin(tls_server.bootstrap, {
        "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "sasl.username": "admin",
        "sasl.password": "admin-secret", "ca.crt": pki.ca.read_text()}, retry=RETRY)
    try:
        assert admin.describe_cluster().cluster_id == tls_server.cluster.image.cluster_id
        assert {d.tp.partition for d in admin.describe_partitions(["orders"])} == set(range(6))
    finally:
        admin.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_refused_at_once(tls_server: ServedCluster, pki: Pki,
                                           mechanism: str) -> None:
    """kafka-python's bootstrap loop retries a refused login until its timeout (here 10 s)
    and then says "Unable to bootstrap"; the backend stops at the first refusal."""
    started = time.monotonic()
    with pytest.raises(KafkaApiError) as e:
        open_kafka_admin(tls_server.bootstrap, {
            "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
            "sasl.username": "admin", "sasl.password": "nope", "ca.crt": pki.ca.read_text()},
            retry=RETRY)
    took = time.monotonic() - started
    print(f"{mechanism}: refused after {took:.3f} s")
    assert e.value.error.name == "SASL_AUTHENTICATION_FAILED"
    assert "nope" not in str(e.value)
    assert took < 5, "the refusal waited for the bootstrap timeout"
    assert any(f"SASL/{mechanism} authentication failed" in line for line in tls_server.logs)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_refusal_read_with_the_close_is_still_the_refusal(tls_server: ServedCluster,
                                                            pki: Pki, mechanism: str) -> None:
    slow = SlowClient().on()
    try:
        with pytest.raises(KafkaApiError) as e:
            open_kafka_admin(tls_server.bootstrap, {
                "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.username": "admin", "sasl.password": "nope", "ca.crt": pki.ca.read_text()},
                retry=RetryPolicy(total_seconds=6))
    finally:
        slow.off()
    assert e.value.error.name == "SASL_AUTHENTICATION_FAILED", e.value


def test_disabled_mechanism_is_refused_with_the_enabled_ones(tmp_path: Path) -> None:
    with served(cluster(tmp_path / "c"), _authorizer(mechanisms=["SCRAM-SHA-512"]),
                time_scale=0) as s, pytest.raises(KafkaApiError) as e:
        open_kafka_admin(s.bootstrap, {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "admin", "sasl.password": "admin-secret"}, retry=RETRY)
    assert e.value.error.name == "UNSUPPORTED_SASL_MECHANISM"
    assert "sasl.mechanism" in str(e.value)


def test_untrusted_server_certificate_is_a_tls_error(tls_server: ServedCluster,
                                                     pki: Pki) -> None:
    with pytest.raises(KafkaApiError) as e:
        open_kafka_admin(tls_server.bootstrap, {
            "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
            "sasl.password": "admin-secret", "ca.crt": pki.other_ca.read_text()}, retry=RETRY)
    assert "certificate was not accepted" in str(e.value) and "ca.crt" in str(e.value)


def test_mutual_tls_principal_is_the_certificate_dn(tmp_path: Path, pki: Pki) -> None:
    """Kafka's SSL principal is ``User:`` + the subject DN (RFC 2253 order); here that
    principal may DESCRIBE but not ALTER, so the ACL is really applied to it."""
    with served(cluster(tmp_path / "c"), _authorizer(), time_scale=0,
                ssl_context=_server_tls(pki, mutual=True)) as s:
        admin = open_kafka_admin(s.bootstrap, {
            "security.protocol": "SSL", "ca.crt": pki.ca.read_text(),
            "tls.crt": pki.client_cert.read_text(), "tls.key": pki.client_key.read_text()},
            retry=RETRY)
        try:
            assert admin.describe_cluster().cluster_id == s.cluster.image.cluster_id
            with pytest.raises(KafkaApiError) as e:
                admin.alter_partition_reassignments({TopicPartition("orders", 0): None})
            assert "AUTHORIZATION" in e.value.error.name
        finally:
            admin.close()
        with pytest.raises(KafkaApiError):  # no client certificate: the handshake fails
            open_kafka_admin(s.bootstrap, {"security.protocol": "SSL",
                                           "ca.crt": pki.ca.read_text()},
                             retry=RetryPolicy(total_seconds=2))
