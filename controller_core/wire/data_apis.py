"""Produce, ListOffsets and Fetch for kraftsman's throttle-marker topic, from the embedded
cluster's metadata log — so the ``kafka`` backend keeps its markers against ``cluster serve``
exactly as against a real Kafka cluster.

The embedded cluster simulates how fast replicas copy; it keeps no record data. So this is no
general data plane: the marker topic (:data:`~controller_core.admin.THROTTLE_MARKER_TOPIC`) is
served, every other existing topic is answered ``KAFKA_STORAGE_ERROR`` — what a Kafka broker
answers for a partition whose log it cannot serve (an offline log directory) — and an unknown
one ``UNKNOWN_TOPIC_OR_PARTITION`` (``UNKNOWN_TOPIC_ID`` when named by id), as Kafka does.
Within the marker topic the answers follow Kafka's: WRITE / READ / DESCRIBE on the topic (the
embedded authorizer's grants stand for every resource), NOT_LEADER_OR_FOLLOWER from a broker
that does not lead it, one record batch per partition of a Produce, no key-less record in a
compacted topic, batches up to max.message.bytes, OFFSET_OUT_OF_RANGE outside the log.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.record import MemoryRecords, MemoryRecordsBuilder

from controller_core import errors
from controller_core.admin import THROTTLE_MARKER_TOPIC
from controller_core.errors import ErrorCode, KafkaApiError
from controller_core.metadata.controller import MAX_MESSAGE_BYTES
from controller_core.model import NO_LEADER, TopicPartition
from controller_core.wire import apis
from controller_core.wire.auth import Operation

if TYPE_CHECKING:
    from controller_core.wire.handlers import Handlers, Session

FETCH_SESSION_ID_NOT_FOUND = ErrorCode.for_code(70)
_ZERO_UUID = uuid.UUID(int=0)
NO_RESPONSE = object()  # Produce with acks=0: Kafka sends nothing back


@dataclass(frozen=True, slots=True)
class _Target:
    """One partition a data request names, resolved — or the error to answer for it."""

    name: str | None
    topic_id: uuid.UUID
    error: ErrorCode = errors.NONE
    message: str = ""
    leader: int = NO_LEADER
    leader_epoch: int = -1


def _resolve(h: Handlers, session: Session, name: str | None, topic_id: uuid.UUID | None,
             partition: int, op: Operation) -> _Target:
    image = h.cluster.image
    tid = topic_id or _ZERO_UUID
    if not name and tid != _ZERO_UUID:
        name = next((n for n, t in image.topics.items() if t.topic_id == str(tid)), None)
        if name is None:
            return _Target(None, tid, errors.UNKNOWN_TOPIC_ID,
                           f"no topic has the id {tid}")
    if not h._allowed(session, op):
        return _Target(name, tid, errors.TOPIC_AUTHORIZATION_FAILED,
                       f"{op.value} on TOPIC {name} is not granted to {session.principal}")
    topic = image.topics.get(name or "")
    if topic is None:
        return _Target(name, tid, errors.UNKNOWN_TOPIC_OR_PARTITION,
                       f"This server does not host this topic-partition: {name}-{partition}")
    tid = uuid.UUID(topic.topic_id)
    p = image.partition(TopicPartition(topic.name, partition))
    if p is None:
        return _Target(name, tid, errors.UNKNOWN_TOPIC_OR_PARTITION,
                       f"This server does not host this topic-partition: {name}-{partition}")
    if name != THROTTLE_MARKER_TOPIC:
        return _Target(name, tid, errors.KAFKA_STORAGE_ERROR,
                       f"the embedded cluster keeps no record data: only {THROTTLE_MARKER_TOPIC} "
                       "answers Produce and Fetch")
    if p.leader != session.broker_id:
        return _Target(name, tid, errors.NOT_LEADER_OR_FOLLOWER,
                       f"broker {session.broker_id} is not the leader of {name}-{partition}",
                       p.leader, p.leader_epoch)
    return _Target(name, tid, leader=p.leader, leader_epoch=p.leader_epoch)


def _log_start(h: Handlers) -> int:
    image = h.cluster.image
    return min((off for off, _ in image.markers.values()), default=image.marker_end)


# -- Produce ---------------------------------------------------------------------------------
def produce(h: Handlers, request: Any, version: int, session: Session) -> Any:
    cls = apis.RESPONSES[0]
    topic_cls = cls.TopicProduceResponse
    part_cls = topic_cls.PartitionProduceResponse
    responses = []
    for t in request.topic_data:
        parts = []
        for pd in t.partition_data:
            target = _resolve(h, session, getattr(t, "name", None) if version < 13 else None,
                              getattr(t, "topic_id", None) if version >= 13 else None,
                              pd.index, Operation.WRITE)
            error, message, base = target.error, target.message, -1
            record_errors: list[tuple[int, str]] = []
            if error.ok:
                error, message, base, record_errors = _append(h, pd.records)
            leader = (part_cls.LeaderIdAndEpoch(leader_id=target.leader,
                                                leader_epoch=target.leader_epoch)
                      if error == errors.NOT_LEADER_OR_FOLLOWER else None)
            parts.append(part_cls(
                index=pd.index, error_code=error.code, base_offset=base, log_append_time_ms=-1,
                log_start_offset=_log_start(h) if error.ok else -1,
                record_errors=[part_cls.BatchIndexAndErrorMessage(
                    batch_index=i, batch_index_error_message=m) for i, m in record_errors],
                error_message=message or None, current_leader=leader))
        responses.append(topic_cls(name=getattr(t, "name", None) or "",
                                   topic_id=getattr(t, "topic_id", None) or _ZERO_UUID,
                                   partition_responses=parts))
    if request.acks == 0:
        return NO_RESPONSE
    return cls(version=version, responses=responses, throttle_time_ms=0, node_endpoints=[])


def _append(h: Handlers, raw: Any) -> tuple[ErrorCode, str, int, list[tuple[int, str]]]:
    """Validate one partition's records as Kafka's LogValidator does, then append them."""
    data = bytes(raw or b"")
    if len(data) > MAX_MESSAGE_BYTES:
        return errors.MESSAGE_TOO_LARGE, "", -1, []
    try:
        batches = list(MemoryRecords(data))
        if len(batches) != 1:
            return (errors.INVALID_RECORD, "Produce requests are only allowed to contain "
                    f"exactly one record batch, not {len(batches)}", -1, [])
        batch = batches[0]
        if not batch.validate_crc():
            return errors.CORRUPT_MESSAGE, "the record batch fails its CRC check", -1, []
        items = [(r.key, r.value) for r in batch]
    except Exception as e:  # a malformed batch is the client's error, answered as Kafka does
        return errors.CORRUPT_MESSAGE, f"the records cannot be read: {e}", -1, []
    why = ("Compacted topic cannot accept message without key in topic partition "
           f"{THROTTLE_MARKER_TOPIC}-0")
    keyless = [(i, why) for i, (key, _) in enumerate(items) if key is None]
    if keyless:  # Kafka's LogValidator words, the first three errors shown
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in keyless[:3])
        return (errors.INVALID_RECORD, f"One or more records have been rejected due to "
                f"{len(keyless)} record errors in total, and only showing the first three "
                f"errors at most: [{shown}]", -1, keyless)
    records: list[tuple[str, str | None]] = []
    for key, value in items:
        try:
            records.append((bytes(key).decode(), None if value is None else bytes(value).decode()))
        except UnicodeDecodeError:
            return (errors.INVALID_RECORD, "the embedded cluster keeps UTF-8 keys and values "
                    "only", -1, [])
    try:
        return errors.NONE, "", h.cluster.produce_markers(records), []
    except KafkaApiError as e:
        return e.error, e.message, -1, []


# -- ListOffsets -----------------------------------------------------------------------------
def list_offsets(h: Handlers, request: Any, version: int, session: Session) -> Any:
    cls = apis.RESPONSES[2]
    topic_cls = cls.ListOffsetsTopicResponse
    part_cls = topic_cls.ListOffsetsPartitionResponse
    image = h.cluster.image
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            target = _resolve(h, session, t.name, None, p.partition_index, Operation.DESCRIBE)
            offset = -1
            if target.error.ok:
                if p.timestamp in (-2, -4):  # EARLIEST, EARLIEST_LOCAL
                    offset = _log_start(h)
                elif p.timestamp == -1:  # LATEST: the high watermark
                    offset = image.marker_end
                elif p.timestamp == -3:  # MAX_TIMESTAMP: the records carry none; the last
                    offset = image.marker_end - 1 if image.marker_end else -1
                # a timestamp: the records carry none, so no offset answers it (-1, as Kafka
                # answers when no record is that recent)
            parts.append(part_cls(partition_index=p.partition_index,
                                  error_code=target.error.code, old_style_offsets=[],
                                  timestamp=-1, offset=offset,
                                  leader_epoch=target.leader_epoch if target.error.ok else -1))
        topics.append(topic_cls(name=t.name, partitions=parts))
    return cls(version=version, throttle_time_ms=0, topics=topics)


# -- Fetch -----------------------------------------------------------------------------------
def fetch(h: Handlers, request: Any, version: int, session: Session) -> Any:
    cls = apis.RESPONSES[1]
    topic_cls = cls.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    if getattr(request, "session_id", 0):  # no fetch session is ever created here
        return cls(version=version, throttle_time_ms=0,
                   error_code=FETCH_SESSION_ID_NOT_FOUND.code, session_id=0, responses=[],
                   node_endpoints=[])
    image = h.cluster.image
    responses = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            target = _resolve(h, session, getattr(t, "topic", None) if version < 13 else None,
                              getattr(t, "topic_id", None) if version >= 13 else None,
                              p.partition, Operation.READ)
            error, records = target.error, b""
            start, end = _log_start(h), image.marker_end
            if error.ok:
                if not start <= p.fetch_offset <= end:
                    error = errors.OFFSET_OUT_OF_RANGE
                else:
                    records = _batch(h, p.fetch_offset)
            ok = error.ok
            parts.append(part_cls(
                partition_index=p.partition, error_code=error.code,
                high_watermark=end if ok else -1, last_stable_offset=end if ok else -1,
                log_start_offset=start if ok else -1, aborted_transactions=None,
                preferred_read_replica=-1, records=records))
        responses.append(topic_cls(topic=getattr(t, "topic", None) or "",
                                   topic_id=getattr(t, "topic_id", None) or _ZERO_UUID,
                                   partitions=parts))
    return cls(version=version, throttle_time_ms=0, error_code=0, session_id=0,
               responses=responses, node_endpoints=[])


def _batch(h: Handlers, from_offset: int) -> bytes:
    """The records from ``from_offset`` as one batch with the compacted log's offset gaps
    (what Kafka's log cleaner leaves); uncompressed, as the metadata log keeps them."""
    rows = sorted((off, key, value) for key, (off, value) in h.cluster.image.markers.items()
                  if off >= from_offset)
    if not rows:
        return b""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=2**31 - 1,
                                   offset=rows[0][0])
    for off, key, value in rows:
        builder.skip(off - builder.next_offset())
        builder.append(-1, key.encode(), None if value is None else value.encode())
    builder.close()
    return bytes(builder.buffer())
