"""Kafka's metadata.version feature levels and their names (MetadataVersion of Kafka 4.4).

A cluster reports its finalized ``metadata.version`` as a number (ApiVersions' finalized
features); people and Kafka's own messages use the name ("4.3-IV0"). Cordoning log
directories (KIP-1066) is the reason kraftsman reads it: Kafka refuses ``cordoned.log.dirs``
below 4.3-IV0 (MetadataVersion.isCordonedLogDirsSupported), and kraftsman says so up front
rather than failing half way through a broker removal.
"""

from __future__ import annotations

# feature level -> name, MetadataVersion.IBP_3_3_IV3 (level 7, the KRaft minimum) onwards
NAMES: dict[int, str] = {
    7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0",
    13: "3.6-IV1", 14: "3.6-IV2", 15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3",
    19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0", 22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2",
    25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1", 28: "4.2-IV0", 29: "4.2-IV1", 30: "4.3-IV0",
    31: "4.4-IV0", 32: "4.4-IV1", 33: "4.4-IV2", 34: "4.5-IV0",
}
LEVELS: dict[str, int] = {name: level for level, name in NAMES.items()}
# What `kafka-storage format` gives a new Kafka 4.4 cluster (MetadataVersion.LATEST_PRODUCTION).
LATEST_PRODUCTION = 33
# MetadataVersion.isCordonedLogDirsSupported: at least IBP_4_3_IV0.
CORDON_MIN_LEVEL = 30


def name_of(level: int) -> str:
    """``4.3-IV0`` for 30; a level this table does not know is shown as its number."""
    return NAMES.get(level, f"level {level}")


def cordon_supported(level: int) -> bool:
    return level >= CORDON_MIN_LEVEL


def cordon_unsupported_message(level: int) -> str:
    """What kraftsman says instead of cordoning, on a cluster too old for KIP-1066."""
    return (f"cordoning needs metadata.version {name_of(CORDON_MIN_LEVEL)} (the cluster has "
            f"{name_of(level)}); the brokers are drained without it")
