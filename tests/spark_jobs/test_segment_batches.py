"""Cutting segment streams into batches (spark_jobs.segment_batches): whole batches only,
whatever the read and buffer sizes, and buffers shared by no two readers at once."""

from __future__ import annotations

import io

import pytest

from core.records.batch import Compression
from core.records.builder import RecordBatchBuilder
from core.records.codec import compress
from spark_jobs import segment_batches
from spark_jobs.segment_batches import batches, read_buffers

T0 = 1_700_000_000_000


def batch_bytes(n: int, value_size: int) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(b"v" * value_size, key=b"k%d" % i, timestamp=T0)
    return bytes(builder.build())


WHOLE = [batch_bytes(1, 10), batch_bytes(5, 300), batch_bytes(2, 40)]


@pytest.mark.parametrize(("chunk", "buffer"), [(5, 64), (50, 200), (1 << 20, 8 << 20)])
def test_batches_stop_at_a_torn_tail(monkeypatch, chunk, buffer) -> None:
    monkeypatch.setattr(segment_batches, "READ_CHUNK_BYTES", chunk)
    monkeypatch.setattr(segment_batches, "READ_BUFFER_BYTES", buffer)
    data = b"".join(WHOLE)
    for tail in (b"", b"\x00" * 5, WHOLE[1][:20], WHOLE[1][:-1]):
        with read_buffers() as buffers:
            got = [bytes(h.raw()) for h in batches(io.BytesIO(data + tail), buffers)]
        assert got == WHOLE


def test_two_readers_at_once_never_share_a_buffer(monkeypatch) -> None:
    # Two ranges read in turn, batch by batch (as zip() of two readers would): each sees
    # its own bytes.
    monkeypatch.setattr(segment_batches, "READ_BUFFER_BYTES", 1024)
    one, two = WHOLE * 20, list(reversed(WHOLE)) * 20
    with read_buffers() as first, read_buffers() as second:
        assert first.read is not second.read
        readers = zip(
            batches(io.BytesIO(b"".join(one)), first),
            batches(io.BytesIO(b"".join(two)), second),
            strict=True,
        )
        for (a, b), want_a, want_b in zip(readers, one, two, strict=True):
            assert (bytes(a.raw()), bytes(b.raw())) == (want_a, want_b)


def test_buffers_grown_for_a_large_batch_are_not_kept_grown(monkeypatch) -> None:
    monkeypatch.setattr(segment_batches, "READ_BUFFER_BYTES", 256)
    monkeypatch.setattr(segment_batches, "_KEEP_DECOMPRESSION_BYTES", 1 << 20)
    large = batch_bytes(4, 500)
    with read_buffers() as buffers:
        assert [bytes(h.raw()) for h in batches(io.BytesIO(large), buffers)] == [large]
        assert len(buffers.read) >= len(large) > 256
        packed = compress(Compression.ZSTD, bytes(2 << 20))
        assert bytes(buffers.decompression.decompress(Compression.ZSTD, packed)) == bytes(2 << 20)
    with read_buffers() as again:
        assert len(again.read) == 256
        assert again.decompression.capacity <= 1 << 20
