"""AddRaftVoter and RemoveRaftVoter (KIP-853), which kafka-python 3.0 does not ship.

Declared with kafka-python's own message machinery from Kafka's JSON schemas (in
``schemas/``), so they encode and decode exactly like the built-in classes.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from controller_core.wire import schemas


class AddRaftVoterRequest(ApiMessage, load_json=schemas):  # type: ignore[misc,call-arg]
    pass


class AddRaftVoterResponse(ApiMessage, load_json=schemas):  # type: ignore[misc,call-arg]
    pass


class RemoveRaftVoterRequest(ApiMessage, load_json=schemas):  # type: ignore[misc,call-arg]
    pass


class RemoveRaftVoterResponse(ApiMessage, load_json=schemas):  # type: ignore[misc,call-arg]
    pass
