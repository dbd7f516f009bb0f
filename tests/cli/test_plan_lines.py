"""The plan-line shortcut of ``kraftsman apply`` (issue 22) reads a file exactly as the YAML
loader does: big plans, quoted and odd topic names, entries among other YAML, markers that
land in a block scalar, and errors reported at the same line."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kraftsman.commands import plan_lines
from kraftsman.commands.apply import PlanLoader


def _loader(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=PlanLoader))


def _entries(n: int, topic: str = "t0", indent: str = "    ") -> list[str]:
    return [f"{indent}- {{topic: {topic}, partition: {p}, replicas: [{p % 7}, {p % 5 + 7}]}}"
            for p in range(n)]


def _plan(entries: list[str], head: str = "") -> str:
    return "\n".join(["apiVersion: kraftsman.io/v1alpha1", "kind: PartitionReassignment",
                      "metadata: {name: big}", "spec:", head + "  clusterRef: {name: demo}",
                      "  partitions:", *entries, "  maxConcurrentMoves: 5", ""])


@pytest.mark.parametrize("topic", ["t0", '"t0"', "orders.v2-x_y", "true", "null", "Yes",
                                   "1e3", "_x", '"007"', "y"])
def test_reads_as_the_loader(topic: str) -> None:
    lines = _entries(6000, topic)
    lines[100] = "    - {topic: other, partition: 0123, replicas: [1]}"  # octal: not taken
    lines[200] = "    # a comment splits the run"
    lines[300] = "    - {topic: t0, partition: 1, replicas: [1, 2]}  # trailing comment"
    text = _plan(lines) + "---\n" + _plan(_entries(3000, "second"))
    assert len(text) >= plan_lines.MIN_BYTES
    assert plan_lines.load_all(text, _loader) == _loader(text)


def test_a_block_scalar_that_looks_like_entries_falls_back() -> None:
    block = ["  note: |", *_entries(6000, indent="    ")]
    text = _plan(_entries(10), head="") + "\n".join(["extra:", *block, ""])
    assert plan_lines.load_all(text, _loader) == _loader(text)


def test_an_error_is_reported_at_the_same_line() -> None:
    text = _plan(_entries(6000)) + "broken: [unclosed\n"
    with pytest.raises(yaml.YAMLError) as fast:
        plan_lines.load_all(text, _loader)
    with pytest.raises(yaml.YAMLError) as slow:
        _loader(text)
    assert fast.value.problem_mark.line == slow.value.problem_mark.line  # type: ignore[attr-defined]
    assert str(fast.value) == str(slow.value)
