"""The streams the plugins hand out (rsm_plugins.store): ``BoundedReader`` and
``VerifyingReader`` read straight into the caller's buffer when the stream below can, and
give the same bytes and the same verdicts when it has only ``read``."""

from __future__ import annotations

import io

import crc32c
import pytest

from rsm_plugins.store import BoundedReader, VerifyingReader, buffered
from tiered.api import RemoteStorageError

DATA = bytes(range(256)) * 1000


class ReadOnly:
    """A stream with ``read`` and ``close`` only."""

    def __init__(self, data: bytes) -> None:
        self._stream = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._stream.read(n)

    def close(self) -> None:
        self._stream.close()


def sources(data: bytes) -> list:
    return [io.BytesIO(data), io.BufferedReader(io.BytesIO(data)), ReadOnly(data)]


def mismatch(size: int, crc: str) -> RemoteStorageError:
    return RemoteStorageError(f"object mismatch: {size} bytes, crc {crc}")


def read_by_readinto(stream, chunk: int) -> bytes:
    out = bytearray()
    buffer = bytearray(chunk)
    while n := stream.readinto(buffer):
        out += buffer[:n]
    return bytes(out)


@pytest.mark.parametrize("source", range(3), ids=["BytesIO", "BufferedReader", "read only"])
@pytest.mark.parametrize("chunk", [1, 1000, 1 << 20])
def test_a_verified_stream_gives_its_bytes_whatever_the_source(source, chunk) -> None:
    expected = (len(DATA), f"{crc32c.crc32c(DATA):08x}")
    raw = VerifyingReader(sources(DATA)[source], *expected, mismatch)
    assert read_by_readinto(raw, chunk) == DATA
    assert buffered(VerifyingReader(sources(DATA)[source], *expected, mismatch)).read() == DATA


@pytest.mark.parametrize("source", range(3), ids=["BytesIO", "BufferedReader", "read only"])
@pytest.mark.parametrize("damage", ["flipped", "short", "long"])
def test_a_damaged_object_is_never_read_to_its_end(source, damage) -> None:
    expected = (len(DATA), f"{crc32c.crc32c(DATA):08x}")
    data = {
        "flipped": DATA[:500] + bytes([DATA[500] ^ 1]) + DATA[501:],
        "short": DATA[:-1],
        "long": DATA + b"x",
    }[damage]
    raw = VerifyingReader(sources(data)[source], *expected, mismatch)
    with pytest.raises(RemoteStorageError, match="object mismatch"):
        read_by_readinto(raw, 4096)


@pytest.mark.parametrize("source", range(3), ids=["BytesIO", "BufferedReader", "read only"])
def test_a_bounded_stream_stops_at_its_limit(source) -> None:
    raw = BoundedReader(sources(DATA)[source], 1234)
    assert read_by_readinto(raw, 1000) == DATA[:1234]
