"""``__transaction_state`` records: Kafka's TransactionLogKey and TransactionLogValue.

Byte-compatible with Apache Kafka's, so Kafka's tools can read a tierlog transaction log
and the reverse. Big-endian, non-flexible encoding for key v0 and value v0 (written);
value v1 (flexible: compact strings and arrays, tagged fields, written by Kafka 4 with
transactions v2) is read, its tagged fields skipped::

    key    int16 version (0), string transactional_id
    value  int16 version, int64 producer_id, int16 producer_epoch,
           int32 transaction_timeout_ms, int8 transaction_status,
           nullable array of (string topic, array of int32 partition),
           int64 last_update_timestamp_ms, int64 start_timestamp_ms

A tombstone (null value) deletes a transactional id (``transactional.id.expiration.ms``).
The partitions array is null for the Empty state, as Kafka writes it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from core.server.coordinator_records import (
    CoordinatorRecordError,
    _Reader,
    _string,
    partition_for,
)

KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


class TransactionState(enum.IntEnum):
    """Kafka's TransactionState, with the byte ids its log uses."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (Kafka's stateName)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        for state, text in _NAMES.items():
            if text == name:
                return state
        return None


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One transactional id's state as written to ``__transaction_state``."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int


def transaction_partition_for(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (Kafka's rule, the one
    groups use: ``Utils.abs(id.hashCode) % partitions``)."""
    return partition_for(transactional_id, partitions)


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(key: bytes) -> str:
    """The transactional id of a key.

    Raises:
        CoordinatorRecordError: truncated, malformed or of an unknown version.
    """
    r = _Reader(key)
    version = r.i16()
    if version != KEY_VERSION:
        raise CoordinatorRecordError(f"unknown TransactionLogKey version {version}")
    return r.string()


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return by_topic


def encode_value(value: TransactionLogValue) -> bytes:
    """Kafka's TransactionLogValue v0.

    Raises:
        CoordinatorRecordError: an Empty state with partitions (Kafka refuses it too).
    """
    if value.state is TransactionState.EMPTY and value.partitions:
        raise CoordinatorRecordError("an Empty transaction has no partitions")
    out = bytearray(
        _VALUE_HEAD.pack(
            VALUE_VERSION, value.producer_id, value.producer_epoch, value.timeout_ms, value.state
        )
    )
    if value.state is TransactionState.EMPTY:
        out += _I32.pack(-1)
    else:
        grouped = _grouped(value.partitions)
        out += _I32.pack(len(grouped))
        for topic, indexes in grouped.items():
            out += _string(topic)
            out += _I32.pack(len(indexes))
            for index in indexes:
                out += _I32.pack(index)
    out += _TIMES.pack(value.last_update_ms, value.start_ms)
    return bytes(out)


def decode_value(data: bytes) -> TransactionLogValue:
    """A TransactionLogValue of version 0 or 1.

    Raises:
        CoordinatorRecordError: truncated, malformed, an unknown version or state.
    """
    r = _Reader(data)
    version = r.i16()
    if version not in (0, 1):
        raise CoordinatorRecordError(f"unknown TransactionLogValue version {version}")
    r.flexible = version >= 1
    producer_id = r.i64()
    epoch = r.i16()
    timeout = r.i32()
    status = r._take(1)[0]
    try:
        state = TransactionState(status)
    except ValueError as e:
        raise CoordinatorRecordError(f"unknown transaction state {status}") from e
    partitions: set[TopicPartition] = set()
    count = r._length(wide=True)
    for _ in range(max(count, 0)):
        topic = r.string()
        for _ in range(r.array_length()):
            partitions.add((topic, r.i32()))
        r.skip_tags()
    last_update = r.i64()
    start = r.i64()
    r.skip_tags()
    return TransactionLogValue(
        producer_id, epoch, timeout, state, frozenset(partitions), last_update, start
    )
