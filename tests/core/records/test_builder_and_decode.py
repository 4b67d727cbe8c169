"""Builder and decoder of RecordBatch v2: exact bytes, header fields, records, control batches."""

from __future__ import annotations

import struct

import crc32c
import pytest

from core.errors import InvalidRecordError
from core.records.batch import (
    HEADER_SIZE,
    Compression,
    RecordBatchHeader,
    TimestampType,
    iter_batches,
)
from core.records.builder import RecordBatchBuilder, build_control_batch
from core.records.record import (
    ControlRecordType,
    EndTransactionMarker,
    Record,
    RecordColumns,
    decode_batch,
    decode_columns,
    decode_records,
    parse_control_type,
)

# Every test runs with each record decoder (tests/core/records/conftest.py).
pytestmark = pytest.mark.usefixtures("decoder")


def test_bytes_match_the_format_written_out_by_hand() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"v", key=b"k", timestamp=1000)
    # length 8 (zigzag 0x10), attributes, tsDelta 0, offsetDelta 0, key "k", value "v", 0 headers
    record = b"\x10" + b"\x00\x00\x00" + b"\x02k" + b"\x02v" + b"\x00"
    after_crc = struct.pack(">hiqqqhii", 0, 0, 1000, 1000, -1, -1, -1, 1) + record
    expected = (
        struct.pack(">qiib", 0, 61 - 12 + len(record), -1, 2)
        + struct.pack(">I", crc32c.crc32c(after_crc))
        + after_crc
    )
    assert bytes(builder.build()) == expected


def test_header_fields_of_an_idempotent_transactional_batch() -> None:
    builder = RecordBatchBuilder(
        compression=Compression.GZIP,
        base_offset=1_000_000,
        partition_leader_epoch=7,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=17,
        is_transactional=True,
    )
    for ts in (5000, 4000, 9000):  # out of order: max is not the last one
        builder.append(b"value", timestamp=ts)
    header = RecordBatchHeader(builder.build())
    header.validate()
    assert header.base_offset == 1_000_000
    assert header.last_offset == 1_000_002
    assert header.records_count == 3
    assert header.partition_leader_epoch == 7
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, 17)
    assert header.last_sequence == 19
    assert header.is_transactional and not header.is_control
    assert header.compression == Compression.GZIP
    assert header.base_timestamp == 5000
    assert header.max_timestamp == 9000
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert [r.timestamp for r in decode_records(header)] == [5000, 4000, 9000]


@pytest.mark.parametrize("codec", list(Compression))
def test_records_round_trip_with_nulls_and_headers(codec: Compression) -> None:
    builder = RecordBatchBuilder(compression=codec, base_offset=50)
    builder.append(b"v0", key=b"k0", timestamp=10, headers=[("a", b"1"), ("b", None)])
    builder.append(None, key=b"tombstone", timestamp=11)
    builder.append(b"", key=None, timestamp=12, headers=[("", b""), ("ü-key", b"\x00\xff")])
    builder.append(b"x" * 100_000, key=b"", timestamp=13)
    header = RecordBatchHeader(builder.build())
    assert header.compression == codec
    assert decode_records(header) == [
        Record(50, 10, b"k0", b"v0", (("a", b"1"), ("b", None))),
        Record(51, 11, b"tombstone", None),
        Record(52, 12, None, b"", (("", b""), ("ü-key", b"\x00\xff"))),
        Record(53, 13, b"", b"x" * 100_000),
    ]


def test_explicit_offsets_may_skip_like_a_compacted_batch() -> None:
    builder = RecordBatchBuilder(base_offset=10)
    builder.append(b"a", timestamp=1)
    builder.append(b"b", timestamp=1, offset=15)
    with pytest.raises(ValueError, match="offset 15 must be"):
        builder.append(b"c", timestamp=1, offset=15)
    header = RecordBatchHeader(builder.build())
    assert header.last_offset_delta == 5
    assert header.records_count == 2
    assert [r.offset for r in decode_records(header)] == [10, 15]


def test_log_append_time_gives_every_record_the_batch_max_timestamp() -> None:
    builder = RecordBatchBuilder(
        timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=1_700_000_000_000
    )
    builder.append(b"a", timestamp=5)
    builder.append(b"b", timestamp=6)
    header = RecordBatchHeader(builder.build())
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.base_timestamp == 5  # the create time stays in the batch
    assert [r.timestamp for r in decode_records(header)] == [1_700_000_000_000] * 2
    cols = decode_columns(header)
    assert cols.timestamps == [1_700_000_000_000] * 2
    assert cols.timestamp_types == [TimestampType.LOG_APPEND_TIME] * 2


def test_patching_base_offset_and_epoch_keeps_crc_valid() -> None:
    builder = RecordBatchBuilder(compression=Compression.LZ4)
    builder.append(b"v", key=b"k", timestamp=1)
    builder.append(b"w", timestamp=2)
    buf = builder.build()
    crc_before = RecordBatchHeader(buf).crc
    header = RecordBatchHeader(buf)
    header.set_base_offset(123_456_789_012)
    header.set_partition_leader_epoch(99)
    header.validate()  # raises on a CRC mismatch
    assert header.crc == crc_before
    assert header.partition_leader_epoch == 99
    assert [r.offset for r in decode_records(header)] == [123_456_789_012, 123_456_789_013]


def test_columns_accumulate_across_batches_and_skip_control_batches() -> None:
    data = bytearray()
    for base in (0, 3):
        builder = RecordBatchBuilder(
            base_offset=base,
            partition_leader_epoch=base,
            producer_id=9,
            producer_epoch=0,
            base_sequence=base,
            is_transactional=True,
        )
        for i in range(3):
            builder.append(b"v%d" % (base + i), key=None, timestamp=100 + base + i)
        data += builder.build()
        if base == 0:
            data += build_control_batch(
                ControlRecordType.COMMIT, producer_id=9, producer_epoch=0, base_offset=6
            )
    cols = RecordColumns()
    for header in iter_batches(data):
        decode_columns(header, cols, verify=False)
    assert len(cols) == 6
    assert cols.offsets == [0, 1, 2, 3, 4, 5]
    assert cols.values == [b"v0", b"v1", b"v2", b"v3", b"v4", b"v5"]
    assert cols.keys == [None] * 6
    assert cols.timestamps == [100, 101, 102, 103, 104, 105]
    assert cols.leader_epochs == [0, 0, 0, 3, 3, 3]
    assert cols.producer_ids == [9] * 6
    assert cols.headers == [()] * 6
    with_control = RecordColumns()
    for header in iter_batches(data):
        decode_columns(header, with_control, include_control=True)
    assert len(with_control) == 7


@pytest.mark.parametrize("marker", list(ControlRecordType))
def test_control_batch_matches_kafkas_marker_layout(marker: ControlRecordType) -> None:
    buf = build_control_batch(
        marker,
        producer_id=77,
        producer_epoch=5,
        coordinator_epoch=12,
        base_offset=40,
        partition_leader_epoch=2,
        timestamp=1234,
    )
    batch = decode_batch(RecordBatchHeader(buf))
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 5, -1)
    assert batch.partition_leader_epoch == 2
    assert batch.compression == Compression.NONE
    (record,) = batch.records
    assert record.offset == 40 and record.timestamp == 1234
    assert record.key == struct.pack(">hh", 0, marker)  # version 0, type
    assert record.value == struct.pack(">hi", 0, 12)  # version 0, coordinator epoch
    assert EndTransactionMarker.from_record(record) == EndTransactionMarker(marker, 12)


def test_control_key_parsing_rejects_malformed_keys() -> None:
    assert parse_control_type(struct.pack(">hh", 1, 5)) == 5  # newer types are plain ints
    with pytest.raises(InvalidRecordError, match="2 bytes, at least 4"):
        parse_control_type(b"\x00\x00")
    with pytest.raises(InvalidRecordError, match="null"):
        parse_control_type(None)
    with pytest.raises(InvalidRecordError, match="negative version -1"):
        parse_control_type(struct.pack(">hh", -1, 0))
    with pytest.raises(InvalidRecordError, match="type 3 is not a commit or abort"):
        EndTransactionMarker.from_record(Record(0, 0, struct.pack(">hh", 0, 3), b"\x00" * 6))
    with pytest.raises(InvalidRecordError, match="value is 2 bytes"):
        EndTransactionMarker.from_record(Record(0, 0, struct.pack(">hh", 0, 1), b"\x00" * 2))


def test_builder_rejects_what_kafka_rejects() -> None:
    with pytest.raises(ValueError, match="transactional batch needs a producer id"):
        RecordBatchBuilder(is_transactional=True)
    with pytest.raises(ValueError, match="producer epoch and a base sequence"):
        RecordBatchBuilder(producer_id=1, producer_epoch=0)
    with pytest.raises(ValueError, match="needs log_append_time"):
        RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(ValueError, match="unknown compression codec id 6"):
        RecordBatchBuilder(compression=6)
    with pytest.raises(ValueError, match="at least one record"):
        RecordBatchBuilder().build()


def test_compressed_batch_stays_compressed_even_when_larger() -> None:
    builder = RecordBatchBuilder(compression=Compression.ZSTD)
    builder.append(b"a", timestamp=0)
    buf = builder.build()
    header = RecordBatchHeader(buf)
    assert header.compression == Compression.ZSTD
    assert len(buf) > HEADER_SIZE + 10  # bigger than the 10 bytes of the raw record
    assert decode_records(header) == [Record(0, 0, None, b"a")]


def test_empty_batch_left_by_compaction_decodes_to_no_records() -> None:
    builder = RecordBatchBuilder(base_offset=5)
    builder.append(b"gone", timestamp=1)
    buf = builder.build()
    # Keep only the header, with count 0, as the cleaner leaves a batch to retain producer state.
    buf = bytearray(buf[:HEADER_SIZE])
    struct.pack_into(">i", buf, 8, HEADER_SIZE - 12)
    struct.pack_into(">i", buf, 57, 0)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    assert decode_records(RecordBatchHeader(buf)) == []
