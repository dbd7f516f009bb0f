"""A KafkaRebalance proposal as ConfigMaps (docs/rebalance.md, "Planner Job"): pure builders.

The planner Job writes an index ConfigMap ``<rebalance>-proposal-<id>`` (``summary.json``
and ``parts``, or ``error``) and part ConfigMaps ``<rebalance>-proposal-<id>-<k>`` holding
the plan's PartitionReassignment documents as ``resource-NNNN.yaml``, in apply order. Parts
stay under ``PART_LIMIT`` bytes (ConfigMaps are capped at 1 MiB). Every ConfigMap carries the
proposal's labels and, when the KafkaRebalance exists, an ownerReference to it, so deleting
the KafkaRebalance deletes its proposals.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kraftsman.resources import API_VERSION

REBALANCE_KIND = "KafkaRebalance"
REBALANCE_PLURAL = "kafkarebalances"
LABEL_REBALANCE = "kraftsman.io/rebalance"
LABEL_PROPOSAL = "kraftsman.io/proposal-id"
SUMMARY_KEY, PARTS_KEY, ERROR_KEY = "summary.json", "parts", "error"
PART_LIMIT = 900 * 1024  # bytes of data per part ConfigMap (the API caps a ConfigMap at 1 MiB)


def index_name(rebalance: str, proposal_id: str) -> str:
    return f"{rebalance}-proposal-{proposal_id}"


def part_name(rebalance: str, proposal_id: str, k: int) -> str:
    return f"{index_name(rebalance, proposal_id)}-{k}"


def resource_key(n: int) -> str:
    """The data key of the n-th (1-based, in apply order) PartitionReassignment document."""
    return f"resource-{n:04d}.yaml"


def owner_reference(rebalance: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": REBALANCE_KIND, "name": rebalance, "uid": uid,
            "controller": True}


def config_map(name: str, namespace: str, rebalance: str, proposal_id: str,
               data: Mapping[str, str], owner_uid: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "namespace": namespace,
        "labels": {LABEL_REBALANCE: rebalance, LABEL_PROPOSAL: proposal_id}}
    if owner_uid is not None:
        meta["ownerReferences"] = [owner_reference(rebalance, owner_uid)]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def pack(documents: Sequence[str], limit: int = PART_LIMIT) -> list[dict[str, str]]:
    """The documents as consecutive parts (data maps) of at most ``limit`` bytes each
    (keys and values counted), numbered across parts; a document alone over the limit is
    refused (``kraftsman plan`` keeps each under 200 kB)."""
    parts: list[dict[str, str]] = []
    current: dict[str, str] = {}
    used = 0
    for n, text in enumerate(documents, start=1):
        key = resource_key(n)
        size = len(key.encode()) + len(text.encode())
        if size > limit:
            raise ValueError(f"{key}: {size} bytes, over the {limit}-byte part limit")
        if current and used + size > limit:
            parts.append(current)
            current, used = {}, 0
        current[key] = text
        used += size
    if current:
        parts.append(current)
    return parts


def proposal_config_maps(namespace: str, rebalance: str, proposal_id: str, owner_uid: str,
                         summary: Mapping[str, Any], documents: Sequence[str],
                         limit: int = PART_LIMIT) -> list[dict[str, Any]]:
    """Every ConfigMap of a finished proposal: the parts in apply order, then the index
    (written last, so an index that lists parts is never ahead of them)."""
    parts = pack(documents, limit)
    names = [part_name(rebalance, proposal_id, k) for k in range(1, len(parts) + 1)]
    out = [config_map(n, namespace, rebalance, proposal_id, data, owner_uid)
           for n, data in zip(names, parts, strict=True)]
    index = {SUMMARY_KEY: json.dumps(dict(summary), indent=1, sort_keys=True) + "\n",
             PARTS_KEY: json.dumps(names)}
    out.append(config_map(index_name(rebalance, proposal_id), namespace, rebalance,
                          proposal_id, index, owner_uid))
    return out


def error_config_map(namespace: str, rebalance: str, proposal_id: str, owner_uid: str | None,
                     message: str) -> dict[str, Any]:
    """The index of a failed proposal: ``error`` only, one line."""
    line = " ".join(message.split())
    return config_map(index_name(rebalance, proposal_id), namespace, rebalance, proposal_id,
                      {ERROR_KEY: line}, owner_uid)


def data_patch(old: Mapping[str, str] | None, new: Mapping[str, str]) -> dict[str, str | None]:
    """A JSON merge patch of ``data`` from old to new: keys only the old one has are removed
    (a retried Job's index loses a previous ``error``, or its ``summary.json`` on failure)."""
    patch: dict[str, str | None] = {k: None for k in (old or {}) if k not in new}
    patch.update(new)
    return patch
