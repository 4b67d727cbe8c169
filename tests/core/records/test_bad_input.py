"""Bad input raises the typed error, and the message says where the fault is."""

from __future__ import annotations

import struct

import pytest

from core.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
    UnsupportedVersionError,
)
from core.records.batch import (
    ATTRIBUTES_POS,
    HEADER_SIZE,
    LENGTH_POS,
    MAGIC_POS,
    RECORDS_COUNT_POS,
    Compression,
    RecordBatchHeader,
    compute_crc,
    iter_batches,
)
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_columns, decode_records

# Every test runs with each record decoder (tests/core/records/conftest.py).
pytestmark = pytest.mark.usefixtures("decoder")

R = HEADER_SIZE  # where the records section of a batch at byte 0 starts


def one_record_batch(codec: Compression = Compression.NONE) -> bytearray:
    builder = RecordBatchBuilder(compression=codec)
    builder.append(b"v", key=b"k", timestamp=1)
    return builder.build()


def reseal(buf: bytearray, position: int = 0) -> bytearray:
    """Fix up batchLength and the CRC after an edit, so that only the edit is wrong."""
    size = len(buf) - position
    struct.pack_into(">i", buf, position + LENGTH_POS, size - 12)
    struct.pack_into(">I", buf, position + 17, compute_crc(buf, position, size))
    return buf


def test_truncated_header() -> None:
    buf = one_record_batch()[:40]
    with pytest.raises(CorruptRecordError, match="header at byte 0 is truncated: 40 bytes left"):
        list(iter_batches(buf))


def test_batch_cut_short_inside_its_records() -> None:
    buf = one_record_batch()[:-3]
    with pytest.raises(CorruptRecordError, match="batch at byte 0: length 58 runs past the end"):
        decode_records(RecordBatchHeader(buf))


def test_second_batch_truncated_names_its_position() -> None:
    first = one_record_batch()
    buf = first + one_record_batch()[:-1]
    with pytest.raises(CorruptRecordError, match=f"batch at byte {len(first)}: length"):
        list(iter_batches(buf))


def test_wrong_crc() -> None:
    buf = one_record_batch()
    buf[-2] ^= 0x01  # flip a bit of the value
    with pytest.raises(CorruptRecordError, match=r"batch at byte 0: CRC mismatch, stored 0x"):
        decode_records(RecordBatchHeader(buf))
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        decode_columns(RecordBatchHeader(buf))


def test_wrong_magic() -> None:
    buf = one_record_batch()
    buf[MAGIC_POS] = 1
    with pytest.raises(UnsupportedVersionError, match="batch at byte 0: magic 1 is not supported"):
        decode_records(RecordBatchHeader(buf))


@pytest.mark.parametrize(
    ("length", "message"),
    [
        (-5, "length -5 is below the minimum 49"),
        (0, "length 0 is below the minimum 49"),
        (2**31 - 1, "length 2147483647 runs past the end of the data"),
    ],
)
def test_absurd_batch_length(length: int, message: str) -> None:
    buf = one_record_batch()
    struct.pack_into(">i", buf, LENGTH_POS, length)
    with pytest.raises(CorruptRecordError, match=f"batch at byte 0: {message}"):
        list(iter_batches(buf))


def test_batch_larger_than_allowed() -> None:
    with pytest.raises(CorruptRecordError, match="size 70 exceeds the largest allowed 64"):
        list(iter_batches(one_record_batch(), max_size=64))


def test_record_length_runs_past_the_batch() -> None:
    buf = one_record_batch()
    buf[R] = 0x7E  # record length 63, but 8 bytes follow
    reseal(buf)
    with pytest.raises(
        CorruptRecordError,
        match=rf"batch at byte 0 \(records from byte {R}\): record 0 at byte 0: "
        "length 63 does not fit the 8 bytes left",
    ):
        decode_records(RecordBatchHeader(buf))


def test_record_length_shorter_than_its_fields() -> None:
    buf = one_record_batch() + b"\x00"
    buf[R] = 0x12  # length 9: one byte more than the fields take
    reseal(buf)
    with pytest.raises(CorruptRecordError, match="fields end at byte 9, but the record length"):
        decode_records(RecordBatchHeader(buf))


def test_negative_record_length() -> None:
    buf = one_record_batch()
    buf[R] = 0x01  # -1
    reseal(buf)
    with pytest.raises(CorruptRecordError, match="record 0 at byte 0: length -1 does not fit"):
        decode_records(RecordBatchHeader(buf))


def test_key_longer_than_its_record() -> None:
    buf = one_record_batch()
    buf[R + 4] = 0x0A  # key length 5 in a record of 8 bytes
    reseal(buf)
    with pytest.raises(
        CorruptRecordError, match="key of 5 bytes at byte 5 runs past the record end"
    ):
        decode_records(RecordBatchHeader(buf))


def test_negative_header_count() -> None:
    buf = one_record_batch()
    buf[-1] = 0x03  # header count -2
    reseal(buf)
    with pytest.raises(InvalidRecordError, match="record 0 at byte 0: negative header count -2"):
        decode_records(RecordBatchHeader(buf))


@pytest.mark.parametrize(
    ("codec", "where"),
    [
        (Compression.NONE, r"\(records from byte 61\)"),
        (Compression.GZIP, r"\(56 bytes of decompressed gzip records\)"),
    ],
)
def test_count_larger_than_the_records(codec: Compression, where: str) -> None:
    builder = RecordBatchBuilder(compression=codec)
    for _ in range(2):
        builder.append(b"v" * 20, key=b"k", timestamp=1)
    buf = builder.build()
    struct.pack_into(">i", buf, RECORDS_COUNT_POS, 3)
    reseal(buf)
    with pytest.raises(
        CorruptRecordError,
        match=rf"batch at byte 0 {where}: record 2 at byte 56 runs past the end of the 56 bytes "
        r"of records \(the header declares 3 records\)",
    ):
        decode_records(RecordBatchHeader(buf))


def test_count_smaller_than_the_records() -> None:
    buf = one_record_batch() + one_record_batch()[R:]  # two records, count 1
    reseal(buf)
    with pytest.raises(CorruptRecordError, match="9 bytes remain at byte 9 after the 1 records"):
        decode_records(RecordBatchHeader(buf))


@pytest.mark.parametrize("count", [-1, 2**31 - 1])
def test_impossible_record_count(count: int) -> None:
    buf = one_record_batch()
    struct.pack_into(">i", buf, RECORDS_COUNT_POS, count)
    reseal(buf)
    with pytest.raises(CorruptRecordError, match=f"record count {count} is impossible for 9 bytes"):
        decode_records(RecordBatchHeader(buf))


def test_corrupt_compressed_payload_with_a_valid_crc() -> None:
    first = one_record_batch()
    buf = first + one_record_batch(Compression.LZ4)
    # The first block's size (after the 7-byte frame header) now claims more than there is.
    struct.pack_into("<I", buf, len(first) + R + 7, 0x7FFF)
    reseal(buf, len(first))
    headers = list(iter_batches(buf))
    assert decode_records(headers[0])  # the good batch before it still decodes
    with pytest.raises(CorruptRecordError, match=f"batch at byte {len(first)}: lz4 data"):
        decode_records(headers[1])


def test_undefined_codec_id() -> None:
    buf = one_record_batch()
    struct.pack_into(">h", buf, ATTRIBUTES_POS, 6)
    reseal(buf)
    with pytest.raises(UnsupportedCompressionTypeError, match="codec id 6"):
        decode_records(RecordBatchHeader(buf))


def test_failed_decode_leaves_columns_unchanged() -> None:
    cols = decode_columns(RecordBatchHeader(one_record_batch()))
    bad = one_record_batch()
    bad[R] = 0x7E
    reseal(bad)
    with pytest.raises(CorruptRecordError):
        decode_columns(RecordBatchHeader(bad), cols)
    assert len(cols) == 1
    assert len(cols.values) == len(cols.leader_epochs) == 1
