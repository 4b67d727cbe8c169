"""Encoding a Produce response frame without kio's generic writer.

A producer sending small batches to many partitions gets thousands of Produce answers a
second, and kio's writer walks every field of every nested entity through a chain of
per-field callables (with a temporary buffer per flexible entity for its tagged fields):
under the 100-partition load soak that was 6% of the event loop, more than the whole
decoding of the requests. This encoder writes the same bytes with a few ``struct`` packs.

Layout (Kafka's ProduceResponse.json, versions 3-11 as tierlog serves them): ``responses``
[``name`` (string), ``partition_responses`` [``index`` (int32), ``error_code`` (int16),
``base_offset`` (int64), ``log_append_time_ms`` (int64), ``log_start_offset`` (int64, v5+),
``record_errors`` [``batch_index`` (int32), ``batch_index_error_message`` (nullable
string)] (v8+), ``error_message`` (nullable string, v8+)]], ``throttle_time_ms`` (int32).
From v9 (flexible) strings and arrays have unsigned-varint lengths plus one and every
struct ends with its tagged fields. The tagged fields (``current_leader`` of a partition
and the response's ``node_endpoints``, v10+) are written only when set, which happens with
NOT_LEADER_OR_FOLLOWER and similar errors: then, and for any version outside 3-11, this
module declines (``None``) and kio encodes the answer, so one rule decides what a tagged
field looks like.
"""

from __future__ import annotations

import struct
from typing import Any

from core.records.varint import encode_unsigned_varint

_HEAD = struct.Struct(">ii")  # size prefix, correlation id
_PARTITION_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # + log start offset
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

LOWEST_VERSION, HIGHEST_VERSION = 3, 11
_FIRST_FLEXIBLE = 9
_FIRST_TAGGED = 10  # current_leader, node_endpoints


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    data = value.encode()
    if flexible:
        return encode_unsigned_varint(len(data) + 1) + data
    return _I16.pack(len(data)) + data


def _array_length(n: int, flexible: bool) -> bytes:
    return encode_unsigned_varint(n + 1) if flexible else _I32.pack(n)


def _ms(value: Any) -> int:
    """A kio timestamp or duration in milliseconds, rounded as kio rounds it."""
    if value is None:
        return -1
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * 1000)
    return round(value.total_seconds() * 1000)


def _untagged(partition: Any) -> bool:
    leader = partition.current_leader
    return leader.leader_id == -1 and leader.leader_epoch == -1


def encode_produce_response(correlation_id: int, version: int, response: Any) -> bytes | None:
    """The whole response frame (size prefix, response header, body) of a kio
    ``ProduceResponse`` of ``version``; None when it must go through kio's writer (a
    version outside 3-11, or a tagged field set)."""
    if not LOWEST_VERSION <= version <= HIGHEST_VERSION:
        return None
    flexible = version >= _FIRST_FLEXIBLE
    if version >= _FIRST_TAGGED and response.node_endpoints:
        return None
    parts = [b"\x00"] if flexible else []  # the response header's tagged fields (v1)
    append = parts.append
    append(_array_length(len(response.responses), flexible))
    for topic in response.responses:
        append(_string(topic.name, flexible))
        partitions = topic.partition_responses
        append(_array_length(len(partitions), flexible))
        for p in partitions:
            if version >= _FIRST_TAGGED and not _untagged(p):
                return None
            if version >= 5:
                append(
                    _PARTITION_V5.pack(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        _ms(p.log_append_time),
                        p.log_start_offset,
                    )
                )
            else:
                append(
                    _PARTITION_V3.pack(p.index, p.error_code, p.base_offset, _ms(p.log_append_time))
                )
            if version >= 8:
                append(_array_length(len(p.record_errors), flexible))
                for e in p.record_errors:
                    append(_I32.pack(e.batch_index))
                    append(_string(e.batch_index_error_message, flexible))
                    if flexible:
                        append(b"\x00")
                append(_string(p.error_message, flexible))
            if flexible:
                append(b"\x00")
        if flexible:
            append(b"\x00")
    append(_I32.pack(_ms(response.throttle_time)))
    if flexible:
        append(b"\x00")
    body = b"".join(parts)
    return _HEAD.pack(len(body) + 4, correlation_id) + body
