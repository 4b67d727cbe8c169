"""Decompression is bounded: a batch whose records would expand past the limit is refused
with a clear error before the output is allocated (a decompression bomb in a segment must
not take down a tool, a Spark task or the broker)."""

from __future__ import annotations

import pytest

from core.errors import CorruptRecordError
from core.records import codec
from core.records.batch import Compression, RecordBatchHeader
from core.records.builder import RecordBatchBuilder
from core.records.codec import compress, decompress
from core.records.record import decode_records

# Every test runs with each record decoder (tests/core/records/conftest.py).
pytestmark = pytest.mark.usefixtures("decoder", "gzip_inflater")

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
MiB = 1 << 20


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name)
def test_output_above_the_limit_is_refused_naming_it(compression: Compression) -> None:
    bomb = compress(compression, bytes(8 * MiB))  # a few KiB that expand to 8 MiB
    with pytest.raises(CorruptRecordError, match=f"{MiB} |{MiB} bytes"):
        decompress(compression, bomb, max_size=MiB)
    # Exactly at the limit is fine, and so is everything below it.
    assert decompress(compression, compress(compression, bytes(MiB)), max_size=MiB) == bytes(MiB)


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name)
def test_highly_compressible_batches_below_the_limit_still_decode(compression) -> None:
    data = b"a" * (3 * MiB)  # far above the first buffer guess (8x the input)
    assert decompress(compression, compress(compression, data)) == data


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name)
def test_a_bomb_batch_is_refused_by_record_decoding(monkeypatch, compression) -> None:
    builder = RecordBatchBuilder(compression=compression)
    for i in range(4):
        builder.append(bytes(MiB), key=b"k%d" % i, timestamp=1_700_000_000_000)
    header = RecordBatchHeader(builder.build())
    assert len(header.records_view) < MiB  # small on disk
    monkeypatch.setattr(codec, "MAX_DECOMPRESSED_BYTES", 2 * MiB)
    with pytest.raises(CorruptRecordError, match="limit for one batch's records"):
        decode_records(header)
    monkeypatch.setattr(codec, "MAX_DECOMPRESSED_BYTES", 8 * MiB)
    assert [r.value for r in decode_records(header)] == [bytes(MiB)] * 4


def test_a_zstd_frame_stating_a_size_above_the_limit_is_refused_unread() -> None:
    # A frame header with an 8-byte content size of 2^40: refused from the header alone (the
    # data after it is not even valid zstd).
    frame = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + (1 << 40).to_bytes(8, "little") + b"junk"
    with pytest.raises(CorruptRecordError, match=r"states 1099511627776 decompressed bytes"):
        decompress(Compression.ZSTD, frame)


@pytest.mark.parametrize("compression", [Compression.GZIP, Compression.ZSTD], ids=str)
def test_a_stated_size_smaller_than_the_data_costs_a_retry_not_a_wrong_result(
    compression: Compression,
) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    stated = codec._stated_size(compression, compress(compression, data))
    assert stated == len(data)  # the exact first buffer
    # gzip's ISIZE is only the last member's: two members state the second one's size.
    if compression == Compression.GZIP:
        two = compress(compression, data) + compress(compression, data[:10])
        assert decompress(compression, two) == data + data[:10]
