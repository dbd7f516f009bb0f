"""The stall watch (controller_core/orchestration/stall.py): a move in flight whose adding
replicas hold no more bytes than a window ago is named, with its brokers."""

from __future__ import annotations

from pathlib import Path

from controller_core.model import TopicPartition
from controller_core.orchestration.stall import StalledMove, StallWatch, copied, describe
from tests.helpers import cluster

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)


def test_a_move_that_copies_nothing_for_the_window_is_stalled_and_one_that_copies_is_not() -> None:
    w = StallWatch(window_ms=10_000)
    assert w.observe(0, {A: (0, [4, 3]), B: (0, [5])}) == []
    assert w.observe(9_999, {A: (0, [3, 4]), B: (100, [5])}) == []
    assert w.observe(10_000, {A: (0, [3, 4]), B: (100, [5])}) == [
        StalledMove(A, (3, 4), 0, 0)]
    # B grew at 9,999: its window runs from there
    assert w.observe(19_999, {A: (0, [3, 4]), B: (100, [5])}) == [StalledMove(A, (3, 4), 0, 0),
                                                                   StalledMove(B, (5,), 100, 9_999)]
    # A copies again: no longer stalled, and its window starts anew
    assert w.observe(20_000, {A: (1, [3, 4]), B: (101, [5])}) == []
    assert w.observe(29_999, {A: (1, [3, 4]), B: (101, [5])}) == []
    assert [m.tp for m in w.observe(30_000, {A: (1, [3, 4]), B: (101, [5])})] == [A, B]


def test_fewer_bytes_is_no_progress_but_lowers_the_mark() -> None:
    w = StallWatch(window_ms=10)
    w.observe(0, {A: (500, [3])})
    assert w.observe(10, {A: (200, [3])}) == [StalledMove(A, (3,), 200, 0)]  # a copy restarted
    assert w.observe(11, {A: (300, [3])}) == []  # growth from the lower mark is progress


def test_a_move_that_ends_is_forgotten_and_new_brokers_start_a_new_window() -> None:
    w = StallWatch(window_ms=10)
    w.observe(0, {A: (0, [3]), B: (0, [4])})
    assert [m.tp for m in w.observe(10, {B: (0, [4])})] == [B]  # A ended
    assert w.observe(20, {A: (0, [3]), B: (0, [5])}) == []  # A back, B re-targeted: anew
    assert [m.tp for m in w.observe(30, {A: (0, [3]), B: (0, [5])})] == [A, B]


def test_the_description_names_partitions_brokers_and_how_long() -> None:
    moves = [StalledMove(TopicPartition("t", p), (3, 4) if p else (5,), 10 * p, 0)
             for p in range(7)]
    text = describe(moves, now_ms=600_000)
    assert text.startswith("no byte progress: t-0 (adding on broker 5; 0 bytes copied, "
                           "none for 600 s); t-1 (adding on brokers 3, 4; 10 bytes copied")
    assert "t-4" in text and "t-5" not in text and text.endswith(" and 2 more")
    # copies between log directories (KIP-113) are not "adding"
    both = StalledMove(TopicPartition("t", 0), (0, 3), 0, 0, between=(0,))
    assert describe([both], 600_000).startswith(
        "no byte progress: t-0 (adding on broker 3, between log directories on broker 0; ")
    within = StalledMove(TopicPartition("t", 0), (0, 1), 0, 0, between=(0, 1))
    assert "(between log directories on brokers 0, 1; " in describe([within], 600_000)
    # how long: since the figure last grew, not since the epoch; five named, nothing more
    later = [StalledMove(TopicPartition("t", p), (3,), 5, 1_000_000) for p in range(5)]
    assert describe(later[:1], 1_600_000) == \
        "no byte progress: t-0 (adding on broker 3; 5 bytes copied, none for 600 s)"
    assert describe(later, 1_600_000).endswith("t-4 (adding on broker 3; 5 bytes copied, "
                                               "none for 600 s)")


def test_a_move_with_no_figure_is_no_progress_and_keeps_its_last_one() -> None:
    """None: no adding replica answered (its broker is dead). The copy stands still, and the
    figure said is the last one read, not 0."""
    w = StallWatch(window_ms=10)
    assert w.observe(0, {A: (None, [3]), B: (700, [4])}) == []
    assert w.observe(5, {A: (None, [3]), B: (None, [4])}) == []
    assert w.observe(10, {A: (None, [3]), B: (None, [4])}) == [StalledMove(A, (3,), 0, 0),
                                                                StalledMove(B, (4,), 700, 0)]
    assert w.observe(11, {A: (None, [3]), B: (701, [4])}) == [StalledMove(A, (3,), 0, 0)]


def test_copied_sums_what_answers_and_has_no_figure_when_nothing_does(tmp_path: Path) -> None:
    """On the twin as on Kafka, DescribeLogDirs is asked of the replica's broker: a dead
    one answers nothing (the kafka backend skips it rather than failing the pass)."""
    c = cluster(tmp_path)  # orders-0 on brokers 0, 1, 2; orders-1 on 1, 2, 0
    size = c.replica_log_sizes([(A, 0)])[(A, 0)]
    assert size > 0
    pairs = [(A, 0), (A, 1), (B, 1), (B, 2)]
    assert copied(c.replica_log_sizes(pairs), {A: [0, 1], B: [2]}) == \
        {A: (2 * size, [0, 1]), B: (size, [2])}
    c.fail_broker(1)
    assert c.replica_log_sizes([(A, 1), (A, 0)]) == {(A, 0): size}
    assert copied(c.replica_log_sizes(pairs), {A: [0, 1], B: [1]}) == \
        {A: (size, [0, 1]), B: (None, [1])}
