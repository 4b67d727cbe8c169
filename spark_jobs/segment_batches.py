"""Cutting a segment stream into whole record batches, with buffers reused between reads.

The archive reader reads remote segments through a plugin's stream. The bytes go into one
buffer with ``readinto`` (no copy per read) about ``READ_CHUNK_BYTES`` at a time, and the
batches are cut from it in memory. The buffer, and the one compressed batches are
decompressed into, are kept in a small pool between reads of segment ranges: a fresh 4 MiB
buffer costs its zeroing and page faults every time, a few percent of decoding a
20 MB segment.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from core.records.batch import HEADER_SIZE, LOG_OVERHEAD, RecordBatchHeader
from core.records.codec import DecompressionBuffer

# Segment bytes are read about this much at a time (or a whole batch, if larger) and cut
# into batches in memory: one read call per batch would cost more than decoding small
# batches, and reads much larger than this leave the bytes out of the CPU's caches by the
# time the batches are checked and decoded.
READ_CHUNK_BYTES = 1024 * 1024
# The buffer the reads go to: batches are read into its free end, and the bytes of a batch
# cut by a read move to its front only when the end is reached (once per this much read,
# not once per read).
READ_BUFFER_BYTES = 4 * READ_CHUNK_BYTES
# Buffers kept between reads: enough for the readers of one process (a Spark Python worker
# reads one range at a time), bounded so that idle memory stays small.
_POOL_SIZE = 2
# A decompression buffer grown past this (by an unusually large batch) is not kept.
_KEEP_DECOMPRESSION_BYTES = 16 * 1024 * 1024


@dataclass
class ReadBuffers:
    """The buffers one reader uses from batch to batch: ``read`` for the segment's bytes,
    ``decompression`` for a compressed batch's records. One reader at a time."""

    read: bytearray
    decompression: DecompressionBuffer


_pool: list[ReadBuffers] = []
_pool_lock = threading.Lock()


@contextmanager
def read_buffers() -> Iterator[ReadBuffers]:
    """Buffers for one reader, from the pool or new, given back to the pool afterwards."""
    with _pool_lock:
        buffers = _pool.pop() if _pool else None
    if buffers is None:
        buffers = ReadBuffers(bytearray(READ_BUFFER_BYTES), DecompressionBuffer())
    elif len(buffers.read) != READ_BUFFER_BYTES:
        buffers.read = bytearray(READ_BUFFER_BYTES)  # grown for a large batch: not kept
    try:
        yield buffers
    finally:
        if buffers.decompression.capacity > _KEEP_DECOMPRESSION_BYTES:
            buffers.decompression = DecompressionBuffer()
        with _pool_lock:
            if len(_pool) < _POOL_SIZE:
                _pool.append(buffers)


def batches(
    stream: io.RawIOBase | io.BufferedIOBase, buffers: ReadBuffers
) -> Iterator[RecordBatchHeader]:
    """Whole batches from a stream positioned at a batch start; stops at a torn tail.

    The headers view ``buffers.read`` (replaced by a larger buffer for a batch larger than
    it): a header, and any view of its bytes, is valid only until the next one is taken.
    """
    buffer = buffers.read
    view = memoryview(buffer)
    readinto = _readinto(stream)
    start = end = 0  # buffer[start:end]: read, not yet yielded
    eof = False
    try:
        while True:
            left = end - start
            size = LOG_OVERHEAD  # the bytes needed to know the next batch's size
            if left >= LOG_OVERHEAD:
                size = int.from_bytes(view[start + 8 : start + 12], "big", signed=True)
                size += LOG_OVERHEAD
                if size < HEADER_SIZE:
                    return
                if size <= left:
                    yield RecordBatchHeader(buffer, start)
                    start += size
                    continue
            if eof:
                return  # a torn tail: the rest does not make a whole batch
            if start + size > len(buffer):
                # The batch does not fit the buffer's end: move its start to the front (into
                # a larger buffer if it is larger than the whole buffer).
                if size > len(buffer):
                    view.release()
                    grown = bytearray(size)
                    grown[:left] = buffer[start:end]
                    buffer = buffers.read = grown
                    view = memoryview(buffer)
                else:
                    view[:left] = view[start:end]
                start, end = 0, left
            want = max(READ_CHUNK_BYTES, size - left)
            n = readinto(view[end : min(len(buffer), end + want)])
            eof = not n
            end += n
    finally:
        view.release()


def _readinto(stream: io.RawIOBase | io.BufferedIOBase) -> Callable[[memoryview], int]:
    """The stream's ``readinto`` (no copy), or one made of ``read`` for a plugin's stream
    that has none."""
    method = getattr(stream, "readinto", None)
    if method is not None:
        return lambda view: method(view) or 0

    def copy(view: memoryview) -> int:
        data = stream.read(len(view))
        view[: len(data)] = data
        return len(data)

    return copy
