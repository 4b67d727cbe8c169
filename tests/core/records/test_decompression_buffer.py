"""Decompressing batch after batch into one reused buffer (``DecompressionBuffer``, what the
archive reader uses): the same bytes as ``decompress`` whatever the order of codecs, sizes
and failures, the same limit on the output, and gzip read as Java's GZIPInputStream reads it.
"""

from __future__ import annotations

import gzip
import random
import tracemalloc

import cramjam
import pytest

from core.errors import CorruptRecordError
from core.records import codec
from core.records.batch import Compression
from core.records.codec import GZIP_INFLATERS, DecompressionBuffer, compress, decompress

# Every test runs with each gzip inflater (tests/core/records/conftest.py).
pytestmark = pytest.mark.usefixtures("gzip_inflater")

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
MiB = 1 << 20
# Growing, shrinking and growing again: the buffer is reused, then replaced by a larger one.
SIZES = [300_000, 10, 3 * MiB, 0, 70_000, MiB, 5]


def payload(size: int) -> bytes:
    """``size`` bytes, half random, half repeated: compressible, but not to nothing (the same
    bytes for the same size)."""
    half = size // 2
    return random.Random(size).randbytes(half) + (b"abcdefgh" * (size // 16 + 1))[: size - half]


def test_isal_inflates_gzip_when_installed_and_zlib_remains() -> None:
    # isal is a base dependency (pyproject.toml): installed, it comes first.
    assert list(GZIP_INFLATERS) == ["isal", "zlib"]


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name)
def test_a_reused_buffer_gives_what_decompress_gives(compression: Compression) -> None:
    scratch = DecompressionBuffer()
    for size in SIZES:
        data = payload(size)
        packed = compress(compression, data)
        assert bytes(scratch.decompress(compression, packed)) == data
        assert decompress(compression, packed) == data


def test_codecs_can_alternate_on_one_buffer() -> None:
    scratch = DecompressionBuffer()
    raw_snappy = bytes(cramjam.snappy.compress_raw(payload(50_000)))  # as librdkafka writes
    for size in SIZES:
        for compression in CODECS:
            data = payload(size)
            assert bytes(scratch.decompress(compression, compress(compression, data))) == data
        assert bytes(scratch.decompress(Compression.SNAPPY, raw_snappy)) == payload(50_000)


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name)
def test_an_earlier_result_held_while_the_buffer_grows_stays_intact(compression) -> None:
    # The buffer is replaced, not resized, when it grows: a view still held by a caller
    # keeps the old bytes (a resize would raise BufferError or change them under it).
    scratch = DecompressionBuffer()
    small, large = payload(1000), payload(2 * MiB)
    held = scratch.decompress(compression, compress(compression, small))
    assert bytes(scratch.decompress(compression, compress(compression, large))) == large
    assert bytes(held) == small


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name)
def test_a_corrupt_batch_between_good_ones_spoils_nothing(compression: Compression) -> None:
    scratch = DecompressionBuffer()
    good = payload(200_000)
    packed = compress(compression, good)
    assert bytes(scratch.decompress(compression, packed)) == good
    with pytest.raises(CorruptRecordError, match=compression.name.lower()):
        scratch.decompress(compression, packed[: len(packed) // 2])
    assert bytes(scratch.decompress(compression, packed)) == good


@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c.name)
def test_a_bomb_is_refused_by_a_reused_buffer_without_allocating_its_size(compression) -> None:
    bomb = compress(compression, bytes(64 * MiB))  # a few KiB or less on disk
    scratch = DecompressionBuffer()
    assert bytes(scratch.decompress(compression, compress(compression, b"x" * 1000))) == (
        b"x" * 1000
    )
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match=f"{MiB} bytes, the limit for one batch"):
            scratch.decompress(compression, bomb, max_size=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB, peak  # the limit and change, not the 64 MiB the batch claims
    # The limit in force by default is the module's.
    assert bytes(scratch.decompress(compression, compress(compression, bytes(MiB)))) == bytes(MiB)


def test_gzip_reads_concatenated_members_as_one_stream() -> None:
    first, second = payload(100_000), payload(3000)
    joined = gzip.compress(first) + compress(Compression.GZIP, second)
    assert decompress(Compression.GZIP, joined) == first + second


def test_gzip_ignores_bytes_after_a_member_that_do_not_start_another() -> None:
    # Java's GZIPInputStream, which Kafka's clients read gzip batches with, ignores them.
    data = payload(10_000)
    assert decompress(Compression.GZIP, gzip.compress(data) + b"trailing garbage") == data


def test_gzip_a_second_member_cut_short_is_corrupt() -> None:
    data = payload(10_000)
    second = gzip.compress(data)
    with pytest.raises(CorruptRecordError, match=r"gzip .*truncated: the member at byte \d+"):
        decompress(Compression.GZIP, gzip.compress(data) + second[: len(second) // 2])


def test_gzip_members_count_together_against_the_limit() -> None:
    member = gzip.compress(bytes(600_000))
    assert decompress(Compression.GZIP, member, max_size=MiB) == bytes(600_000)
    with pytest.raises(CorruptRecordError, match=f"more than {MiB} bytes"):
        decompress(Compression.GZIP, member + member, max_size=MiB)


def test_gzip_without_isal_inflates_with_zlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "gzip_inflater", GZIP_INFLATERS["zlib"])
    data = payload(50_000)
    assert decompress(Compression.GZIP, compress(Compression.GZIP, data)) == data
