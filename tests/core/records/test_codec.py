"""Codecs: round trips, the framings Kafka's clients write, and corrupt input."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import lz4.frame
import pytest
import zstandard

from core.errors import CorruptRecordError, UnsupportedCompressionTypeError
from core.records.batch import Compression
from core.records.codec import (
    LZ4_FRAME_HEADER,
    XERIAL_HEADER,
    compress,
    decompress,
)

# Every test runs with each gzip inflater (tests/core/records/conftest.py).
pytestmark = pytest.mark.usefixtures("gzip_inflater")

PAYLOADS = {
    "empty": b"",
    "one byte": b"x",
    "text": b"the quick brown fox " * 50,
    "random 200k": os.urandom(200_000),  # several lz4/snappy blocks, incompressible
    "repetitive 300k": b"abcdefgh" * 40_000,
}


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("payload", list(PAYLOADS.values()), ids=list(PAYLOADS))
def test_round_trip(codec: Compression, payload: bytes) -> None:
    assert decompress(codec, compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_compression_shrinks_repetitive_data(codec: Compression) -> None:
    data = PAYLOADS["repetitive 300k"]
    assert len(compress(codec, data)) < len(data) // 10


def test_snappy_written_as_xerial_stream_with_32k_blocks() -> None:
    data = os.urandom(70_000)
    out = compress(Compression.SNAPPY, data)
    assert out.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    pos, blocks = len(XERIAL_HEADER), []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert [len(b) for b in blocks] == [32768, 32768, 70_000 - 65536]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_block_as_librdkafka_writes() -> None:
    data = b"librdkafka " * 100
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_lz4_frame_header_is_kafkas() -> None:
    # The lz4 reference library writes the same descriptor for independent blocks without
    # checksums or content size; its last byte is the xxHash32-derived header checksum.
    reference = lz4.frame.compress(
        b"x", block_linked=False, content_checksum=False, store_size=False
    )
    assert reference[:7] == LZ4_FRAME_HEADER
    out = compress(Compression.LZ4, b"y" * 100)
    assert out[:7] == LZ4_FRAME_HEADER
    assert out.endswith(b"\x00\x00\x00\x00")  # end mark, no content checksum
    assert lz4.frame.decompress(out) == b"y" * 100


def test_lz4_incompressible_block_stored_raw_with_high_bit() -> None:
    data = os.urandom(1000)
    out = compress(Compression.LZ4, data)
    (size,) = struct.unpack_from("<I", out, 7)
    assert size == 1000 | 0x80000000
    assert out[11:1011] == data


def test_lz4_reads_frames_from_other_writers() -> None:
    data = b"linked blocks and checksums " * 5000
    framed = lz4.frame.compress(data, block_linked=True, content_checksum=True)
    assert decompress(Compression.LZ4, framed) == data


def test_gzip_and_zstd_read_streams_from_other_writers() -> None:
    data = b"stream " * 10_000
    assert decompress(Compression.GZIP, gzip.compress(data)) == data
    streamer = zstandard.ZstdCompressor().compressobj()  # no content size, like zstd-jni
    assert decompress(Compression.ZSTD, streamer.compress(data) + streamer.flush()) == data


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec_id(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError, match=f"codec id {codec}"):
        compress(codec, b"data")
    with pytest.raises(UnsupportedCompressionTypeError, match=f"codec id {codec}"):
        decompress(codec, b"data")


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_data_raises_corrupt_record_error(codec: Compression, damage: str) -> None:
    good = compress(codec, b"some records " * 1000)
    data = {
        "garbage": b"\x82SNAPPY?" + os.urandom(64) if codec == Compression.SNAPPY else b"junk" * 9,
        "truncated": good[: len(good) // 2],
        "empty": b"",
    }[damage]
    # Messages name the codec, and the size or the byte position of the fault.
    with pytest.raises(CorruptRecordError, match=f"^{codec.name.lower()} .*(bytes|byte \\d+)"):
        decompress(codec, data)


def test_xerial_block_length_past_end_names_position() -> None:
    data = XERIAL_HEADER + struct.pack(">i", 1000) + b"abc"
    with pytest.raises(CorruptRecordError, match="block at byte 16: length 1000"):
        decompress(Compression.SNAPPY, data)
    with pytest.raises(CorruptRecordError, match="header is truncated"):
        decompress(Compression.SNAPPY, XERIAL_HEADER[:12])


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD])
def test_explicit_levels_are_used(codec: Compression) -> None:
    data = b"some fairly repetitive text, some fairly repetitive text " * 2000
    fast, best = compress(codec, data, level=1), compress(codec, data, level=9)
    assert decompress(codec, fast) == decompress(codec, best) == data
    assert fast != best  # the level reached the compressor
    if codec == Compression.GZIP:
        assert len(compress(codec, data, level=0)) > len(data)  # level 0 stores, not default
