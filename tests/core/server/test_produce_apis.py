"""Produce against real storage: a batch refused for some of its records names them (KIP-467).

Requests are framed, decoded and answered as a client sees them (``fake_broker.call``).
"""

from __future__ import annotations

import datetime
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from core.records.batch import TimestampType
from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey

from .fake_broker import FakeBroker, call, schema

TIMEOUT = datetime.timedelta(seconds=10)
HOUR_MS = 3_600_000
KEYLESS = "Compacted topic cannot accept message without key in topic partition {}."


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path)
    yield b
    b.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(records: Sequence[tuple[bytes | None, int]], **builder_args: Any) -> bytes:
    """One batch of ``(key, timestamp)`` records with values v0, v1, ..."""
    builder = RecordBatchBuilder(**builder_args)
    for i, (key, timestamp) in enumerate(records):
        builder.append(b"v%d" % i, key=key, timestamp=timestamp)
    return bytes(builder.build())


def produce(broker: FakeBroker, version: int, topic: str, records: bytes) -> Any:
    """One Produce of ``records`` to partition 0 with acks=1: the partition's answer."""
    s = schema(ApiKey.PRODUCE, version)
    request = s.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=TIMEOUT,
        topic_data=(
            s.TopicProduceData(
                name=topic,
                partition_data=(s.PartitionProduceData(index=i32(0), records=records),),
            ),
        ),
    )
    (answer,) = call(broker, ApiKey.PRODUCE, version, request).responses
    (partition,) = answer.partition_responses
    return partition


def log_end(broker: FakeBroker, topic: str) -> int:
    partition = broker.replica_manager.partition(topic, 0)
    assert partition is not None
    return partition.log.log_end_offset


def named(partition: Any) -> list[tuple[int, str | None]]:
    return [(e.batch_index, e.batch_index_error_message) for e in partition.record_errors]


@pytest.mark.parametrize("version", [8, 9, 11])
def test_keyless_records_to_a_compacted_topic_are_named(broker: FakeBroker, version: int) -> None:
    broker.make_topic("c", 1, {"cleanup.policy": "compact"})
    now = now_ms()
    records = [(b"a", now), (None, now), (b"c", now), (None, now), (b"e", now)]
    answer = produce(broker, version, "c", batch(records))
    assert answer.error_code == ErrorCode.invalid_record
    why = KEYLESS.format("c-0")
    assert named(answer) == [(1, why), (3, why)]
    assert answer.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{why}'), "
        f"RecordError(batchIndex=3, message='{why}')]"
    )
    # Nothing of the batch is appended; Kafka answers the log start offset with the error.
    assert (answer.base_offset, answer.log_start_offset) == (-1, 0)
    assert log_end(broker, "c") == 0
    # The valid records, sent again on their own, are appended.
    answer = produce(broker, version, "c", batch([records[0], records[2], records[4]]))
    assert (answer.error_code, answer.base_offset, answer.record_errors) == (ErrorCode.none, 0, ())
    assert log_end(broker, "c") == 3


def test_before_v8_only_the_error_code_tells(broker: FakeBroker) -> None:
    broker.make_topic("c", 1, {"cleanup.policy": "compact"})
    answer = produce(broker, 7, "c", batch([(None, now_ms())]))
    assert answer.error_code == ErrorCode.invalid_record
    assert not hasattr(answer, "record_errors") and not hasattr(answer, "error_message")
    assert log_end(broker, "c") == 0


def test_only_the_first_three_errors_are_in_the_message(broker: FakeBroker) -> None:
    broker.make_topic("c", 1, {"cleanup.policy": "compact"})
    answer = produce(broker, 11, "c", batch([(None, now_ms())] * 5))
    assert [i for i, _ in named(answer)] == [0, 1, 2, 3, 4]
    assert answer.error_message.startswith(
        "One or more records have been rejected due to 5 record errors in total"
    )
    assert answer.error_message.count("RecordError(") == 3


def test_compressed_batches_are_checked_record_by_record(broker: FakeBroker) -> None:
    from core.records.batch import Compression

    broker.make_topic("c", 1, {"cleanup.policy": "compact"})
    now = now_ms()
    records = batch([(b"a", now), (b"b", now), (None, now)], compression=Compression.GZIP)
    answer = produce(broker, 11, "c", records)
    assert answer.error_code == ErrorCode.invalid_record
    assert [i for i, _ in named(answer)] == [2]
    assert log_end(broker, "c") == 0


def test_timestamps_after_the_bound_are_named(broker: FakeBroker) -> None:
    # Kafka 4's default message.timestamp.after.max.ms: one hour.
    broker.make_topic("t", 1)
    now = now_ms()
    late = now + 2 * HOUR_MS
    answer = produce(broker, 11, "t", batch([(b"a", late), (b"b", now), (b"c", late + 5)]))
    assert answer.error_code == ErrorCode.invalid_timestamp
    assert answer.error_message == "One or more records have been rejected due to invalid timestamp"
    errors = named(answer)
    assert [i for i, _ in errors] == [0, 2]
    assert errors[0][1].startswith(f"Timestamp {late} of message with offset 0 is out of range.")
    assert errors[1][1].startswith(f"Timestamp {late + 5} of message with offset 2 is out of range")
    # The bounds are the broker's clock at the append plus and minus the settings.
    lower, upper = (int(x) for x in errors[0][1].split("[")[1].rstrip("]").split(", "))
    assert upper - lower == HOUR_MS + 2**63 - 1  # before.max.ms is Long.MAX by default
    assert now <= upper - HOUR_MS <= now_ms()
    assert log_end(broker, "t") == 0


def test_timestamps_before_the_bound_are_named(broker: FakeBroker) -> None:
    broker.make_topic("t", 1, {"message.timestamp.before.max.ms": "60000"})
    now = now_ms()
    answer = produce(broker, 11, "t", batch([(b"a", now), (b"b", now - HOUR_MS), (b"c", -1)]))
    assert answer.error_code == ErrorCode.invalid_timestamp
    (error,) = named(answer)  # the record without a timestamp (-1) is not checked
    assert error[0] == 1
    assert f"Timestamp {now - HOUR_MS} of message with offset 1 is out of range" in error[1]
    assert log_end(broker, "t") == 0


def test_log_append_time_topics_ignore_the_bounds(broker: FakeBroker) -> None:
    broker.make_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    answer = produce(broker, 11, "t", batch([(b"a", now_ms() + 10 * HOUR_MS)]))
    assert answer.error_code == ErrorCode.none
    assert log_end(broker, "t") == 1


def test_a_producer_may_not_claim_log_append_time(broker: FakeBroker) -> None:
    broker.make_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    now = now_ms()
    claimed = batch(
        [(b"a", now), (b"b", now)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=now,
    )
    answer = produce(broker, 11, "t", claimed)
    assert answer.error_code == ErrorCode.invalid_timestamp
    errors = named(answer)
    assert [i for i, _ in errors] == [0, 1]
    assert errors[0][1] == (
        f"Invalid timestamp type in message DefaultRecord(offset=0, timestamp={now}, key=1 bytes, "
        "value=2 bytes). Producer should not set timestamp type to LogAppendTime."
    )
    assert log_end(broker, "t") == 0


def test_key_and_timestamp_errors_together_answer_invalid_timestamp(broker: FakeBroker) -> None:
    broker.make_topic("c", 1, {"cleanup.policy": "compact"})
    now = now_ms()
    answer = produce(broker, 11, "c", batch([(None, now), (b"b", now + 3 * HOUR_MS), (b"c", now)]))
    assert answer.error_code == ErrorCode.invalid_timestamp
    errors = named(answer)
    assert [i for i, _ in errors] == [0, 1]
    assert errors[0][1] == KEYLESS.format("c-0")
    assert errors[1][1].startswith(f"Timestamp {now + 3 * HOUR_MS} of message with offset 1")


def test_other_partitions_of_the_request_are_appended(broker: FakeBroker) -> None:
    broker.make_topic("c", 1, {"cleanup.policy": "compact"})
    broker.make_topic("plain", 1)
    now = now_ms()
    s = schema(ApiKey.PRODUCE, 11)
    request = s.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=TIMEOUT,
        topic_data=(
            s.TopicProduceData(
                name="c",
                partition_data=(
                    s.PartitionProduceData(index=i32(0), records=batch([(None, now)])),
                ),
            ),
            s.TopicProduceData(
                name="plain",
                partition_data=(
                    s.PartitionProduceData(index=i32(0), records=batch([(None, now)])),
                ),
            ),
        ),
    )
    refused, accepted = call(broker, ApiKey.PRODUCE, 11, request).responses
    assert refused.partition_responses[0].error_code == ErrorCode.invalid_record
    assert accepted.partition_responses[0].error_code == ErrorCode.none
    assert accepted.partition_responses[0].record_errors == ()
    assert (log_end(broker, "c"), log_end(broker, "plain")) == (0, 1)


# -- Kafka's ProduceRequest rules: one batch of format v2 per partition ----------------------
def legacy_message(magic: int) -> bytes:
    """One message of the formats Kafka 4 removed (v0, v1): a key-less value "x"."""
    timestamp = struct.pack(">q", now_ms()) if magic == 1 else b""
    body = bytes([magic, 0]) + timestamp + struct.pack(">i", -1) + struct.pack(">i", 1) + b"x"
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


@pytest.mark.parametrize("magic", [0, 1])
def test_message_formats_v0_and_v1_are_refused_as_kafka_4_does(
    broker: FakeBroker, magic: int
) -> None:
    broker.make_topic("t", 1)
    answer = produce(broker, 9, "t", legacy_message(magic))
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.invalid_record,
        "Produce requests with version 9 are only allowed to contain record batches with "
        "magic version 2",
    )
    assert log_end(broker, "t") == 0


def test_an_unknown_magic_is_corrupt(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    records = bytearray(batch([(b"k", now_ms())]))
    records[16] = 3  # the magic byte
    answer = produce(broker, 11, "t", bytes(records))
    assert answer.error_code == ErrorCode.corrupt_message
    assert answer.error_message == "Invalid magic found in record: 3"


def test_one_batch_per_partition(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    now = now_ms()
    answer = produce(broker, 11, "t", batch([(b"a", now)]) + batch([(b"b", now)]))
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.invalid_record,
        "Produce requests with version 11 are only allowed to contain exactly one record batch "
        "per partition",
    )
    assert log_end(broker, "t") == 0


def test_zstd_needs_produce_v7(broker: FakeBroker) -> None:
    from core.records.batch import Compression

    broker.make_topic("t", 1)
    records = batch([(b"a", now_ms())], compression=Compression.ZSTD)
    for version in (3, 6):  # no error_message before v8: the code alone tells
        assert produce(broker, version, "t", records).error_code == (
            ErrorCode.unsupported_compression_type
        )
    assert log_end(broker, "t") == 0
    assert produce(broker, 7, "t", records).error_code == ErrorCode.none
    assert log_end(broker, "t") == 1
