"""Secret data → client settings, retries with backoff, typed errors — without a network."""

from __future__ import annotations

import base64
from typing import Any

import kafka.errors as kerr
import pytest

from controller_core import errors
from controller_core.backends import KafkaAdmin, RetryPolicy, SecretError, connection_settings
from controller_core.backends.security import decode_secret_data
from controller_core.errors import ApiResult, KafkaApiError

ARABIC_ONE = "\u0661"  # str.isdigit() and int() take it; Kafka does not


def test_plaintext_by_default() -> None:
    assert connection_settings(None) == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_mechanisms(mechanism: str) -> None:
    s = connection_settings({"sasl.mechanism": mechanism, "sasl.username": "u",
                             "sasl.password": "hunter2"})
    assert s["security_protocol"] == "SASL_PLAINTEXT" and s["sasl_mechanism"] == mechanism
    assert s["sasl_plain_username"] == "u" and s["sasl_plain_password"] == "hunter2"


def test_sasl_ssl_inferred_with_ca() -> None:
    s = connection_settings({"sasl.mechanism": "PLAIN", "sasl.username": "u",
                             "sasl.password": "p", "ssl.check.hostname": "false"} | {})
    assert s["security_protocol"] == "SASL_PLAINTEXT"
    s = connection_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                             "sasl.username": "u", "sasl.password": "p",
                             "ssl.check.hostname": "false"})
    assert s["security_protocol"] == "SASL_SSL" and s["ssl_context"].check_hostname is False


@pytest.mark.parametrize(("data", "names"), [
    ({"sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "s3cr3t"},
     "sasl.mechanism"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.password"),
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"ca.crt": "not a pem", "sasl.password": "s3cr3t"}, "ca.crt"),
    ({"security.protocol": "SSL", "tls.crt": "x"}, "tls.key"),
    ({"security.protocol": "PLAINTEXT", "ca.crt": "x"}, "SSL"),
    ({"password": "s3cr3t"}, "unknown key"),
    ({"security.protocol": "SSL", "ssl.check.hostname": "maybe"}, "ssl.check.hostname"),
])
def test_bad_secret_names_the_key_never_the_value(data: dict[str, str], names: str) -> None:
    with pytest.raises(SecretError) as e:
        connection_settings(data)
    assert names in str(e.value) and "s3cr3t" not in str(e.value)


def test_decode_secret_data() -> None:
    assert decode_secret_data({"sasl.username": base64.b64encode(b"bob").decode()}) == {
        "sasl.username": "bob"}
    with pytest.raises(SecretError, match=r"sasl\.username"):
        decode_secret_data({"sasl.username": "%%%"})


class FakeClient:
    """Only what KafkaAdmin touches: the manager's run/send, the controller routing."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self._controller_id: int | None = 1
        self._manager = self

    def run(self, fn: Any, *args: Any) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def send(self, *args: Any) -> Any:  # pragma: no cover - run() intercepts
        raise AssertionError

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


class Resp:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def admin(answers: list[Any], total: float = 5.0) -> tuple[KafkaAdmin, Clock]:
    clock = Clock()
    return KafkaAdmin(FakeClient(answers), "kafka-0:9092,kafka-1:9092",
                      retry=RetryPolicy(total_seconds=total), sleep=clock.sleep,
                      clock=clock.now), clock


def ok_listing() -> Resp:
    return Resp(error_code=0, error_message=None, topics=[])


def test_retries_not_controller_and_disconnects_with_backoff() -> None:
    a, clock = admin([Resp(error_code=41, error_message="moved", topics=[]),
                      kerr.KafkaConnectionError("socket disconnected"),
                      Resp(error_code=7, error_message=None, topics=[]), ok_listing()])
    assert a.list_partition_reassignments() == {}
    assert clock.sleeps == [0.1, 0.2, 0.4]  # exponential backoff


def test_gives_up_within_the_total_time_naming_the_servers() -> None:
    a, clock = admin([kerr.KafkaConnectionError("down")] * 100, total=3.0)
    with pytest.raises(KafkaApiError) as e:
        a.list_partition_reassignments()
    assert clock.t <= 3.0 and "kafka-0:9092" in str(e.value)
    assert e.value.error.name == "NETWORK_EXCEPTION"


def test_non_retriable_errors_are_raised_at_once() -> None:
    a, clock = admin([Resp(error_code=31, error_message="needs ALTER", topics=[])])
    with pytest.raises(KafkaApiError) as e:
        a.list_partition_reassignments()
    assert e.value.error == errors.CLUSTER_AUTHORIZATION_FAILED and clock.sleeps == []


def test_authentication_failure_is_typed() -> None:
    a, _ = admin([kerr.SaslAuthenticationFailedError("bad password")])
    with pytest.raises(KafkaApiError) as e:
        a.list_partition_reassignments()
    assert e.value.error.name == "SASL_AUTHENTICATION_FAILED"
    assert "kafka-0:9092" in str(e.value)


def test_a_broker_config_goes_to_the_broker_its_name_is_in_ascii_digits() -> None:
    """Kafka names a broker's config resource by its id in ASCII digits; a name Python's
    int() also takes (U+0661 is Arabic-Indic one) is no broker: sent to any node, which refuses
    it, rather than read from broker 1."""
    assert KafkaAdmin._node_for(("BROKER", "3")) == 3
    assert KafkaAdmin._node_for(("BROKER", ARABIC_ONE)) is None
    assert KafkaAdmin._node_for(("BROKER", "")) is None
    assert KafkaAdmin._node_for(("TOPIC", "3")) is None


# -- removing brokers: cordoning and UnregisterBroker ---------------------------------------
def _altered(code: int = 0, message: str | None = None) -> Resp:
    return Resp(responses=[Resp(error_code=code, error_message=message)])


def _probe(cordoned: bool) -> Resp:
    message = ("The manual partition assignment includes broker 3, but all its log directories "
               "are cordoned.") if cordoned else None
    return Resp(topics=[Resp(error_code=39 if cordoned else 0, error_message=message)])


def test_a_cordon_returns_once_the_controller_sees_it() -> None:
    """The broker tells the controller in its next heartbeat: until then the probe (a
    validate-only CreateTopics onto the broker) is still accepted, and set_cordoned waits."""
    a, clock = admin([_altered(), _probe(False), _probe(False), _probe(True)])
    assert a.set_cordoned({3: True}) == {3: ApiResult(errors.NONE, "")}
    assert clock.sleeps == [0.1, 0.1]


def test_a_cordon_the_controller_never_sees_is_a_timeout_naming_the_broker() -> None:
    a, clock = admin([_altered()] + [_probe(False)] * 100, total=1.0)
    (r,) = a.set_cordoned({3: True}).values()
    assert r.error == errors.REQUEST_TIMED_OUT and clock.t <= 1.1
    assert r.message == ("broker 3 is cordoned in its config, but the controller did not see it "
                         "within 1 s: a broker reports it in its heartbeats; is it running?")


def test_a_refused_cordon_is_not_waited_for() -> None:
    a, clock = admin([_altered(42, "requirement failed: When cordoned.log.dirs is set to *, "
                                   "it must not contain other values")])
    assert a.set_cordoned({3: True})[3].error == errors.INVALID_REQUEST and clock.sleeps == []


def test_unregister_broker_answers_kafkas_result_and_retries_a_moving_controller() -> None:
    a, clock = admin([Resp(error_code=41, error_message="moved"),
                      Resp(error_code=102, error_message="Broker ID 9 is not currently "
                                                          "registered")])
    assert a.unregister_broker(9) == ApiResult(errors.BROKER_ID_NOT_REGISTERED,
                                               "Broker ID 9 is not currently registered")
    assert clock.sleeps == [0.1]


def test_metadata_version_is_the_finalized_feature_level_or_none() -> None:
    mv = Resp(name="metadata.version", max_version_level=29, min_version_level=29)
    a, _ = admin([Resp(error_code=0, finalized_features=[mv]),
                  Resp(error_code=0, finalized_features=[])])
    assert a.metadata_version() == 29
    assert a.metadata_version() is None
