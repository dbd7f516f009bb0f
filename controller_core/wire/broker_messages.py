"""UnregisterBroker (API key 64, KIP-631; KIP-1073 relies on it), which kafka-python 3.0 does
not ship.

Declared like :mod:`controller_core.wire.raft_voter_messages`: kafka-python's own message
machinery over Kafka 4.4's JSON schemas (in ``schemas/``), so the classes encode and decode
exactly like the built-in ones.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from controller_core.wire import schemas


class UnregisterBrokerRequest(ApiMessage, load_json=schemas):  # type: ignore[misc,call-arg]
    pass


class UnregisterBrokerResponse(ApiMessage, load_json=schemas):  # type: ignore[misc,call-arg]
    pass
