"""The operation state kept in a resource's status: it round-trips, stays small at 100,000
moves in flight, and an unreadable value (a hand edit) reads as no state, not a crash."""

from __future__ import annotations

import base64
import random
import zlib

from kraftsman.handlers.opstate import (
    Outbox,
    _pack,
    _unpack,
    bump,
    decode,
    encode,
    event_name,
    has_outbox,
)

LEADER, FOLLOWER = ("leader.replication.throttled.replicas",
                    "follower.replication.throttled.replicas")


def big_state(n: int, rnd: random.Random) -> dict[str, object]:
    parts = sorted(rnd.sample(range(10 * n), n))
    return {"digest": "abc", "rev": 7, "eventSeq": 3, "outbox": [],
            "inFlight": sorted(["orders", p] for p in parts),
            "executor": {"phase": "running", "samples": [[1, 2], [3, 4]],
                         "placed_replicas": {"orders": {
                             LEADER: sorted(f"{p}:{rnd.randrange(30)}" for p in parts),
                             FOLLOWER: sorted(f"{p}:{30 + rnd.randrange(30)}" for p in parts)}}}}


def test_state_round_trips_and_100k_moves_in_flight_fit_an_object() -> None:
    rnd = random.Random(20261123)
    doc = big_state(100_000, rnd)
    text = encode(doc)
    assert decode(text) == doc
    assert len(text) < 512 * 1024  # far below the API server's 1.5 MiB per object


def test_garbage_reads_as_no_state() -> None:
    a_list = "z1:" + base64.b64encode(zlib.compress(b"[1, 2]")).decode()  # valid, not a state
    for bad in (None, 42, "", "z1:", "z1:!!!", "plain text", encode({"a": 1})[:-4], a_list):
        assert decode(bad) is None


def test_the_same_state_is_the_same_text_whatever_its_key_order() -> None:
    """A state read back from the status and the same state built in this process (keys in
    another order) encode alike, so a pass that changed nothing writes nothing."""
    assert encode({"digest": "x", "executor": {"a": 1, "b": 2}}) == encode(
        {"executor": {"b": 2, "a": 1}, "digest": "x"})


def test_revision_moves_only_when_the_state_changed() -> None:
    before = {"rev": 4, "digest": "x"}
    same = dict(before)
    bump(same, before)
    assert same["rev"] == 4
    changed = {"rev": 4, "digest": "y"}
    bump(changed, before)
    assert changed["rev"] == 5
    first = {"digest": "x"}  # the first state saved: newer than no state at all (0)
    bump(first, {})
    assert first["rev"] == 1


def test_outbox_numbers_events_and_names_them_by_uid_number_and_reason() -> None:
    state: dict[str, object] = {}
    box = Outbox(state)
    box.add("Started", "go")
    box.add("Completed", "done")
    assert [e[:2] for e in state["outbox"]] == [[1, "Started"], [2, "Completed"]]  # type: ignore[index]
    assert has_outbox({"operationState": encode(state)})
    body = {"metadata": {"name": "Move", "uid": "0123456789abcdef"}}
    assert event_name(body, 2, "Completed") == "move.01234567.2.completed"


def test_long_lists_are_packed_per_broker_and_topic_and_short_ones_kept() -> None:
    pairs = sorted(f"{p}:{b}" for p in (3, 10, 11, 40, 7) for b in (1, 2))  # 10 > 8 entries
    tps = sorted([t, p] for t in ("a", "b") for p in (5, 0, 9, 2, 30))
    mixed = ["1:2"] * 8 + ["x"]
    doc = {"pairs": pairs, "tps": tps, "short": ["1:2"] * 8, "mixed": mixed,
           "nested": [{"in": pairs}], "ints": list(range(9)), "n": 3, "nine": pairs[:9]}
    assert decode(encode(doc)) == {**doc, "pairs": pairs, "tps": tps}
    packed = _pack(doc)
    assert packed["pairs"] == {"~pb": {"1": [3, 4, 3, 1, 29], "2": [3, 4, 3, 1, 29]}}
    assert packed["tps"] == {"~tp": {"a": [0, 2, 3, 4, 21], "b": [0, 2, 3, 4, 21]}}
    assert packed["short"] == ["1:2"] * 8 and packed["mixed"] == mixed
    assert set(packed["nine"]) == {"~pb"}  # more than 8 entries: packed
    assert packed["ints"] == list(range(9)) and packed["nested"][0]["in"] == packed["pairs"]
    assert _unpack({"~pb": {"1": [3, 4]}, "x": 1}) == {"~pb": {"1": [3, 4]}, "x": 1}
