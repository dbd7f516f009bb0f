"""Milestone Events are posted to the API server (kmock, in-process, over HTTP) exactly once:
a repeated name (a pass re-run after a restart) counts as posted, a refused Event stays in
the outbox with every later one, in order (opstate.post_events / Outbox.post)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
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
    assert first["firstTimestamp"] == first["lastTimestamp"] == first["eventTime"]
    # A restarted operator posts the same milestones again: the names exist, one Event each.
    again = await post_events(BODY, [[1, "Started", "go", False]], settings,
                              logging.getLogger("test"))
    assert again == {1}
    assert len(await events(api)) == 2


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
