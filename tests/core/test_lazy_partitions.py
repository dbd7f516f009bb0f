"""TopicsPartitions: the lazy "every partition" an election without a partition set reports
(issue 22) reads as the list of partitions it stands for."""

from __future__ import annotations

import pytest

from controller_core.model import TopicPartition, TopicsPartitions


def test_reads_as_the_list_of_partitions() -> None:
    spans = TopicsPartitions([("a", 2), ("empty", 0), ("b", 3)])
    expected = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0),
                TopicPartition("b", 1), TopicPartition("b", 2)]
    assert len(spans) == 5
    assert list(spans) == expected and spans == expected and spans == tuple(expected)
    assert [spans[i] for i in range(-5, 5)] == expected + expected
    assert spans[1:4] == expected[1:4]
    assert TopicPartition("b", 2) in spans and TopicPartition("b", 3) not in spans
    assert TopicPartition("empty", 0) not in spans
    assert spans != expected[:4] and spans != [*expected[:4], TopicPartition("c", 0)]
    assert hash(spans) == hash(tuple(expected))
    with pytest.raises(IndexError):
        spans[5]


def test_empty() -> None:
    assert TopicsPartitions([]) == [] and len(TopicsPartitions([("a", 0)])) == 0
