"""``__transaction_state`` records in Kafka's byte format (TransactionLogKey v0,
TransactionLogValue v0 written, v0 and v1 read)."""

from __future__ import annotations

import struct

import pytest

from core.server.coordinator_records import CoordinatorRecordError
from core.server.transaction_log import (
    TransactionLogValue,
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    transaction_partition_for,
)


def test_key_bytes() -> None:
    # int16 version 0, int16 length, UTF-8 id.
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == "tx"
    with pytest.raises(CoordinatorRecordError):
        decode_key(b"\x00\x01\x00\x02tx")


def test_ongoing_value_bytes() -> None:
    value = TransactionLogValue(
        producer_id=1000,
        producer_epoch=3,
        timeout_ms=60_000,
        state=TransactionState.ONGOING,
        partitions=frozenset({("b", 1), ("a", 2), ("a", 0)}),
        last_update_ms=1_700_000_000_123,
        start_ms=1_700_000_000_000,
    )
    expected = (
        struct.pack(">hqhib", 0, 1000, 3, 60_000, 1)
        + struct.pack(">i", 2)  # two topics, sorted
        + b"\x00\x01a" + struct.pack(">iii", 2, 0, 2)
        + b"\x00\x01b" + struct.pack(">ii", 1, 1)
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
    )  # fmt: skip
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_empty_state_has_null_partitions() -> None:
    value = TransactionLogValue(5, 0, 1000, TransactionState.EMPTY, frozenset(), 10, -1)
    data = encode_value(value)
    assert data[struct.calcsize(">hqhib") :][:4] == b"\xff\xff\xff\xff"
    assert decode_value(data) == value
    with pytest.raises(CoordinatorRecordError):
        encode_value(
            TransactionLogValue(5, 0, 1000, TransactionState.EMPTY, frozenset({("a", 0)}), 10, -1)
        )


def test_flexible_value_v1_is_read() -> None:
    # Kafka 4's v1: compact arrays and strings (length + 1), tagged fields (here none).
    data = (
        struct.pack(">hqhib", 1, 7, 2, 500, 2)
        + bytes([2])  # one topic
        + bytes([2]) + b"t" + bytes([3]) + struct.pack(">ii", 0, 4) + bytes([0])
        + struct.pack(">qq", 20, 10)
        + bytes([0])
    )  # fmt: skip
    value = decode_value(data)
    assert value == TransactionLogValue(
        7, 2, 500, TransactionState.PREPARE_COMMIT, frozenset({("t", 0), ("t", 4)}), 20, 10
    )


def test_unknown_state_and_truncation_are_refused() -> None:
    good = encode_value(TransactionLogValue(5, 0, 1000, TransactionState.EMPTY, frozenset(), 1, -1))
    with pytest.raises(CoordinatorRecordError):
        decode_value(good[:10])
    bad = bytearray(good)
    bad[struct.calcsize(">hqhi")] = 9
    with pytest.raises(CoordinatorRecordError):
        decode_value(bytes(bad))


def test_partition_is_kafkas_hash_rule() -> None:
    # Java: "my-txn".hashCode() == -1061187895; Utils.abs of it % 50 == 45.
    assert transaction_partition_for("my-txn", 50) == 45
    assert TransactionState.PREPARE_EPOCH_FENCE.kafka_name == "PrepareEpochFence"
    assert TransactionState.from_kafka_name("CompleteAbort") is TransactionState.COMPLETE_ABORT
