"""A Produce answer, and its frame encoded without kio's generic writer.

A producer sending small batches to many partitions gets thousands of Produce answers a
second. Building each as kio's nested dataclasses (three frozen dataclasses per one-partition
answer, every field set through ``object.__setattr__``) and then walking them with kio's
writer (a chain of per-field callables, a temporary buffer per flexible entity for its
tagged fields) cost more than the append itself. So ``handle_produce`` answers a
``ProduceAnswer`` of plain tuples, and this module writes its bytes with a few ``struct``
packs; anything else that wants kio's classes gets them from ``ProduceAnswer.to_kio``.

Layout (Kafka's ProduceResponse.json, versions 3-11 as tierlog serves them): ``responses``
[``name`` (string), ``partition_responses`` [``index`` (int32), ``error_code`` (int16),
``base_offset`` (int64), ``log_append_time_ms`` (int64), ``log_start_offset`` (int64, v5+),
``record_errors`` [``batch_index`` (int32), ``batch_index_error_message`` (nullable
string)] (v8+), ``error_message`` (nullable string, v8+)]], ``throttle_time_ms`` (int32).
From v9 (flexible) strings and arrays have unsigned-varint lengths plus one and every
struct ends with its tagged fields. The tagged fields (``current_leader`` of a partition
and the response's ``node_endpoints``, v10+) are written only when set, which happens with
NOT_LEADER_OR_FOLLOWER and similar errors: then, and for any version outside 3-11, this
module declines (``None``) and kio encodes the answer (``to_kio``), so one rule decides what
a tagged field looks like. The tests compare the two encodings on every version.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from core.records.varint import encode_unsigned_varint
from core.server.kio_build import make, nested, nested_optional

_HEAD = struct.Struct(">ii")  # size prefix, correlation id
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # + log start offset
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

LOWEST_VERSION, HIGHEST_VERSION = 3, 11
_FIRST_FLEXIBLE = 9
_FIRST_TAGGED = 10  # current_leader, node_endpoints
_NO_THROTTLE = datetime.timedelta(0)
# Compact lengths below 127 (every count and most strings of an answer) are one byte.
_SMALL_VARINTS = tuple(bytes([n]) for n in range(128))


class PartitionAnswer(NamedTuple):
    """One partition of a Produce answer; the fields a version lacks are not written."""

    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1  # -1: CreateTime (kio's None)
    log_start_offset: int = -1  # v5+
    record_errors: tuple[tuple[int, str | None], ...] = ()  # (batch index, message), v8+
    error_message: str | None = None  # v8+
    # KIP-951 hint (v10+): kio's LeaderIdAndEpoch of the version, or None for none.
    current_leader: Any = None


@dataclass(frozen=True, slots=True)
class ProduceAnswer:
    """A Produce response as ``handle_produce`` builds it: per topic, its partitions'
    answers in request order. ``throttle_time`` is the field kio's ProduceResponse names
    so (core.server.quota_enforcement replaces it when a quota throttles the request);
    ``node_endpoints`` are kio's NodeEndpoint objects of the version (v10+)."""

    topics: tuple[tuple[str, tuple[PartitionAnswer, ...]], ...]
    throttle_time: datetime.timedelta = _NO_THROTTLE
    node_endpoints: tuple[Any, ...] = ()

    def to_kio(self, response_type: type) -> Any:
        """The same answer as an instance of ``response_type`` (kio's ProduceResponse of
        the version), for kio's writer."""
        partition_cls = nested(response_type, "PartitionProduceResponse")
        record_error_cls = nested_optional(response_type, "BatchIndexAndErrorMessage")

        def partition(p: PartitionAnswer) -> Any:
            record_errors: tuple[Any, ...] = ()
            if record_error_cls is not None:
                record_errors = tuple(
                    make(record_error_cls, batch_index=i, batch_index_error_message=m)
                    for i, m in p.record_errors
                )
            hint = {} if p.current_leader is None else {"current_leader": p.current_leader}
            return make(
                partition_cls,
                index=p.index,
                error_code=ErrorCode(p.error_code),
                base_offset=p.base_offset,
                log_append_time=None
                if p.log_append_time_ms < 0
                else datetime.datetime.fromtimestamp(p.log_append_time_ms / 1000, tz=datetime.UTC),
                log_start_offset=p.log_start_offset,
                record_errors=record_errors,
                error_message=p.error_message,
                **hint,
            )

        topic_cls = nested(response_type, "TopicProduceResponse")
        return make(
            response_type,
            responses=tuple(
                make(topic_cls, name=name, partition_responses=tuple(map(partition, partitions)))
                for name, partitions in self.topics
            ),
            throttle_time=self.throttle_time,
            node_endpoints=self.node_endpoints,
        )


def _varint(n: int) -> bytes:
    return _SMALL_VARINTS[n] if n < 128 else encode_unsigned_varint(n)


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    data = value.encode()
    if flexible:
        return _varint(len(data) + 1) + data
    return _I16.pack(len(data)) + data


def _array_length(n: int, flexible: bool) -> bytes:
    return _varint(n + 1) if flexible else _I32.pack(n)


def _ms(value: datetime.timedelta) -> int:
    """A duration in milliseconds, rounded as kio rounds it."""
    return round(value.total_seconds() * 1000)


def encode_produce_response(
    correlation_id: int, version: int, answer: ProduceAnswer
) -> bytes | None:
    """The whole response frame (size prefix, response header, body) of ``answer`` at
    ``version``; None when it must go through kio's writer (``ProduceAnswer.to_kio``: a
    version outside 3-11, or a tagged field set)."""
    if not LOWEST_VERSION <= version <= HIGHEST_VERSION:
        return None
    flexible = version >= _FIRST_FLEXIBLE
    tagged = version >= _FIRST_TAGGED
    if tagged and answer.node_endpoints:
        return None
    parts = [b"\x00"] if flexible else []  # the response header's tagged fields (v1)
    append = parts.append
    append(_array_length(len(answer.topics), flexible))
    for name, partitions in answer.topics:
        append(_string(name, flexible))
        append(_array_length(len(partitions), flexible))
        for index, error, base, append_ms, start, record_errors, message, leader in partitions:
            if (
                tagged
                and leader is not None
                and (leader.leader_id != -1 or leader.leader_epoch != -1)
            ):
                return None
            if version >= 5:
                append(_PARTITION_V5.pack(index, error, base, append_ms, start))
            else:
                append(_PARTITION_V3.pack(index, error, base, append_ms))
            if version >= 8:
                append(_array_length(len(record_errors), flexible))
                for batch_index, batch_message in record_errors:
                    append(_I32.pack(batch_index))
                    append(_string(batch_message, flexible))
                    if flexible:
                        append(b"\x00")
                append(_string(message, flexible))
            if flexible:
                append(b"\x00")
        if flexible:
            append(b"\x00")
    throttle = answer.throttle_time
    append(_I32.pack(_ms(throttle) if throttle else 0))
    if flexible:
        append(b"\x00")
    body = b"".join(parts)
    return _HEAD.pack(len(body) + 4, correlation_id) + body
