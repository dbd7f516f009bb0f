"""Broker capacities for a snapshot of a real cluster: the Kafka admin API has none, so they
come from flags or a small YAML file::

    defaults: {diskBytes: 2000000000000, networkBytesPerSecond: 125000000}
    brokers:
      3: {diskBytes: 4000000000000}          # a bigger disk on broker 3
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class CapacityError(ValueError):
    """The capacity file is unreadable or invalid; the message names the field."""


class _Capacity(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    disk_bytes: int | None = Field(None, alias="diskBytes", gt=0)
    network_bytes_per_second: float | None = Field(None, alias="networkBytesPerSecond", gt=0)


class CapacityFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    defaults: _Capacity | None = None
    brokers: dict[int, _Capacity] = Field(default_factory=dict)


def load_capacity_file(path: Path) -> CapacityFile:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as e:
        raise CapacityError(f"--capacity-file {path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise CapacityError(f"--capacity-file {path}: not valid YAML: {e}") from None
    try:
        return CapacityFile.model_validate(doc)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CapacityError(f"--capacity-file {path}: {where}: {first['msg']} (fields: "
                            "defaults/brokers.<id> with diskBytes, networkBytesPerSecond)"
                            ) from None


def capacities(f: CapacityFile | None, brokers: list[int], *, disk_default: int,
               network_default: float) -> tuple[dict[int, int], dict[int, float], list[str]]:
    """Per-broker disk and network capacity; unknown broker ids in the file are problems."""
    f = f or CapacityFile()
    unknown = sorted(set(f.brokers) - set(brokers))
    problems = [f"--capacity-file: brokers.{b}: no such broker (brokers: {brokers})"
                for b in unknown]
    disk, net = {}, {}
    base = f.defaults
    for b in brokers:
        own = f.brokers.get(b)
        disk[b] = ((own and own.disk_bytes) or (base and base.disk_bytes) or disk_default)
        net[b] = float((own and own.network_bytes_per_second)
                       or (base and base.network_bytes_per_second) or network_default)
    return disk, net, problems
