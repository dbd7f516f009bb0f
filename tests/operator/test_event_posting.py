"""Milestone Events are posted to the API server (kmock, in-process, over HTTP) exactly once:
a repeated name (a pass re-run after a restart) counts as posted, a refused Event stays in
the outbox with every later one, in order (opstate.post_events / Outbox.post)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kopf
import pytest
from harness import Api
from kopf._cogs.clients import auth  # kopf's authenticated requests read this vault
from kopf._cogs.structs import credentials

from kraftsman.handlers.opstate import (
    MAX_EVENT_MESSAGE,
    Outbox,
    event_name,
    has_outbox,
    post_events,
)

BODY = {"apiVersion": "kraftsman.io/v1alpha1", "kind": "PartitionReassignment",
        "metadata": {"name": "move", "namespace": "team-a", "uid": "0123456789abcdef"}}


@pytest.fixture
async def settings(kmock: Any, api: Api) -> AsyncIterator[kopf.OperatorSettings]:
    vault = credentials.Vault()
    await vault.populate({"test": credentials.ConnectionInfo(server=str(kmock.url),
                                                             insecure=True)})
    token = auth.vault_var.set(vault)
    s = kopf.OperatorSettings()
    s.posting.reporting_component = "kraftsman-test"
    s.posting.reporting_instance = "pod-1"
    s.networking.error_backoffs = [0.01]  # were a post retried in place, it shows at once
    yield s
    auth.vault_var.reset(token)
    await vault.close()


async def events(api: Api) -> list[dict[str, Any]]:
    return await api.events("move")


async def test_the_outbox_is_posted_once_in_order_with_its_fields(
        api: Api, settings: kopf.OperatorSettings) -> None:
    state: dict[str, Any] = {}
    box = Outbox(state)
    box.add("Started", "go")
    box.add("Failed", "x" * 2000, warning=True)
    await box.post(BODY, settings, logging.getLogger("test"))
    assert state["outbox"] == []
    got = await events(api)
    assert [(e["metadata"]["name"], e["type"], e["reason"], e["action"]) for e in got] == [
        ("move.01234567.1.started", "Normal", "Started", "Started"),
        ("move.01234567.2.failed", "Warning", "Failed", "Failed")]
    first = got[0]
    assert first["message"] == "go" and len(got[1]["message"]) == MAX_EVENT_MESSAGE
    assert first["metadata"]["namespace"] == "team-a"
    assert first["involvedObject"] == {"apiVersion": BODY["apiVersion"],
                                       "kind": "PartitionReassignment", "name": "move",
                                       "namespace": "team-a", "uid": "0123456789abcdef"}
    assert (first["reportingComponent"], first["reportingInstance"]) == (
        "kraftsman-test", "pod-1")
    assert first["source"] == {"component": "kraftsman-test"} and first["count"] == 1
    # One instant: the whole seconds of eventTime (MicroTime) are the two Time stamps.
    assert first["firstTimestamp"] == first["lastTimestamp"] == first["eventTime"][:19] + "Z"
    # A restarted operator posts the same milestones again: the names exist, one Event each.
    again = await post_events(BODY, [[1, "Started", "go", False]], settings,
                              logging.getLogger("test"))
    assert again == {1}
    assert len(await events(api)) == 2


# The layouts the API server parses an Event's times with (apimachinery metav1.Time is
# RFC 3339; metav1.MicroTime is RFC3339Micro, "2006-01-02T15:04:05.000000Z07:00", whose
# ".000000" Go's time.Parse takes as exactly six digits).
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
RFC3339_MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")


@pytest.fixture
def local_zone_not_utc() -> Iterator[None]:
    """The process's local time zone is 3 h 30 min behind UTC (a POSIX TZ: no tzdata needed)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "NST+3:30"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.mark.usefixtures("local_zone_not_utc")
async def test_an_event_is_a_core_v1_event_whose_times_a_real_api_server_parses(
        api: Api, settings: kopf.OperatorSettings) -> None:
    """The API server decodes the body as a core/v1 Event: an apiVersion or kind naming
    anything else is refused ("the API version in the data (...) does not match the expected
    API version (v1)"), and ``eventTime`` is a MicroTime that needs six fraction digits even
    at a whole second. kmock stores any body, so the posted body itself is checked."""
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp()  # a whole second
    clock = iter([at, at + 0.25]).__next__
    assert await post_events(BODY, [[1, "Started", "go", False], [2, "Completed", "ok", False]],
                             settings, logging.getLogger("test"), clock=clock) == {1, 2}
    first, second = await events(api)
    assert (first["apiVersion"], first["kind"]) == ("v1", "Event")
    assert (second["apiVersion"], second["kind"]) == ("v1", "Event")
    # UTC whatever the operator's local zone (here UTC-3:30).
    assert first["eventTime"] == "2026-01-02T03:04:05.000000Z"
    assert first["firstTimestamp"] == first["lastTimestamp"] == "2026-01-02T03:04:05Z"
    assert second["eventTime"] == "2026-01-02T03:04:05.250000Z"
    for e in (first, second):
        assert RFC3339_MICRO.match(e["eventTime"]), e["eventTime"]
        assert RFC3339.match(e["firstTimestamp"]) and RFC3339.match(e["lastTimestamp"])


async def test_events_are_stamped_with_the_time_they_are_posted(
        api: Api, settings: kopf.OperatorSettings) -> None:
    before = time.time()
    await Outbox({"outbox": [[1, "Started", "go", False]], "eventSeq": 1}).post(
        BODY, settings, logging.getLogger("test"))
    after = time.time()
    (got,) = await events(api)
    stamped = dt.datetime.strptime(got["eventTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.UTC).timestamp()
    assert before - 1e-6 <= stamped <= after + 1e-6


async def test_a_refused_event_waits_with_the_ones_after_it(
        api: Api, kmock: Any, settings: kopf.OperatorSettings,
        caplog: pytest.LogCaptureFixture) -> None:
    state: dict[str, Any] = {}
    box = Outbox(state)
    box.add("Started", "go")
    box.add("BatchDone", "1/2")
    kmock.refuse_events = True
    with caplog.at_level(logging.WARNING, logger="test"):
        await box.post(BODY, settings, logging.getLogger("test"))
    assert [e[1] for e in state["outbox"]] == ["Started", "BatchDone"]
    assert kmock.refused_events == 1  # not retried within the pass: the next pass retries
    assert "could not post Event Started; retrying next pass" in caplog.text
    assert "BatchDone" not in caplog.text  # stopped at the first refusal
    kmock.refuse_events = False
    await box.post(BODY, settings, logging.getLogger("test"))
    assert state["outbox"] == []
    assert [e["reason"] for e in await events(api)] == ["Started", "BatchDone"]


async def test_without_kopf_settings_nothing_is_posted(api: Api) -> None:
    state: dict[str, Any] = {}
    box = Outbox(state)
    box.add("Started", "go")
    await box.post(BODY, None, logging.getLogger("test"))
    assert len(state["outbox"]) == 1 and await events(api) == []


def test_event_names_fit_the_api_limit() -> None:
    body = {"metadata": {"name": "n" * 300, "uid": "u"}}
    assert len(event_name(body, 1, "Started")) == 253
    assert event_name({"metadata": {"name": "A", "uid": "ABCDEFGHIJ"}}, 3, "Done") == \
        "a.abcdefgh.3.done"


async def test_an_object_without_a_namespace_posts_to_default(
        api: Api, settings: kopf.OperatorSettings) -> None:
    body = {**BODY, "metadata": {"name": "move", "uid": "0123456789abcdef"}}
    assert await post_events(body, [[1, "Started", "go", False]], settings,
                             logging.getLogger("test")) == {1}
    got = await events(api)
    assert got[0]["metadata"]["namespace"] == "default"
    assert got[0]["involvedObject"]["namespace"] == "default"


def test_a_hand_edited_state_of_the_wrong_type_has_no_outbox() -> None:
    assert has_outbox({"operationState": {"outbox": [1]}}) is False
    assert has_outbox(None) is False
