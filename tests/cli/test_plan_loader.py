"""apply's YAML loader gives exactly what PyYAML's safe loader gives, only faster."""

from __future__ import annotations

import pytest
import yaml

from kraftsman.commands.apply import PlanLoader

CASES = [
    "partitions: [{topic: orders, partition: 10, replicas: [3, 1, 2]}]",
    "a: 0123\nb: 0x1f\nc: -5\nd: +7\ne: 1_000\nf: 12.5\ng: 1e3\nh: .inf\n",
    "a: yes\nb: no\nc: ~\nd: null\ne: true\nf: 'true'\ng: \"12\"\nh: 2024-01-02\n",
    "base: &b {x: 1, y: [1, 2]}\nmerged:\n  <<: *b\n  y: 3\nalias: *b\n",
    "&a [1, *a]",
    "? [1, 2]\n: x\n",
    "- !!str 12\n- !!int '7'\n- !!float 1\n- !!binary aGk=\n- !!set {a: null}\n",
    "topic: \"1e3\"\nother: 1e3\nname: 'null'\nempty:\n",
    "---\na: 1\n---\n- 2\n...\n",
]


@pytest.mark.parametrize("text", CASES)
def test_same_result_as_the_safe_loader(text: str) -> None:
    try:
        expected = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        with pytest.raises(yaml.YAMLError):
            list(yaml.load_all(text, Loader=PlanLoader))
        assert e
        return
    got = list(yaml.load_all(text, Loader=PlanLoader))
    assert repr(got) == repr(expected)


def test_an_unhashable_key_is_a_yaml_error() -> None:
    with pytest.raises(yaml.YAMLError, match="unhashable"):
        list(yaml.load_all("{[1]: x, {a: 1}: y}", Loader=PlanLoader))
