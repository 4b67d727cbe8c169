"""A response whose record bytes stay in the segment files until they are sent.

A Fetch answer is mostly record bytes that are already in a segment file. Kafka writes them
from the file to the socket (``FileRecords.writeTo``, a ``sendfile``) and encodes only what is
around them. So does tierlog: the Fetch handler puts the log's ``FileSlice`` itself in the
response's records field; ``SplicingBuffer`` takes kio's writes of the response, and when
kio writes a slice (after its length, which ``len`` of the slice gives) it ends the current
chunk of encoded bytes there and keeps the slice as a part of its own. The response is sent
part by part: a slice of COALESCE_PART_BYTES or more with ``loop.sendfile`` (``os.sendfile``
on a plain TCP socket: no copy in user space, no ``pread``); a smaller slice is read
(``pread``) and written in one ``write`` with the encoded chunks and small slices around it,
as ``loop.sendfile``'s fixed cost on the event loop is far more than the copy of a few KiB
(most fetches of a consumer keeping up carry a few hundred bytes per partition).

TLS encrypts in user space, so there is no ``sendfile`` on a TLS connection: the slice is
read (``pread``) and written, one copy, as before.

Records a remote read put in memory (``bytes`` of IN_MEMORY_PART_BYTES or more) are kept as
parts of their own too, not copied into the encoded chunks (those under
COALESCE_PART_BYTES are then joined with their neighbours in one ``write`` like a small
slice), and written in pieces of MEMORY_WRITE_CHUNK_BYTES, each once the one before has
left asyncio's write buffer: a piece the socket does not take at once is copied into that
buffer, and the buffer is shifted after every ``send`` from it, so a 1 MiB answer written
whole cost more there (copies and shifts of up to 1 MiB per ``send``) than encoding the
rest of the response.

Before the first byte of the response is written, each small slice is read (through the
segment's descriptor, under the lock its ``close`` takes: never a closed descriptor or its
number reused by another file), up to READ_AHEAD_BYTES per response, and each other slice
gets a duplicate of the segment's descriptor to be sent or read from; so a segment deleted
by retention while the response goes out still sends its bytes (as Kafka's channel of a
deleted file does). If the file has fewer bytes than the frame announced (a follower
truncated its log meanwhile, or the segment was closed in the moment between the handler's
answer and the send), the frame cannot be completed: the connection is closed, as Kafka
closes it on a ``FileRecords`` truncated during a write, and the client fetches again.
"""

from __future__ import annotations

import asyncio
import io
import os
from dataclasses import dataclass
from typing import Protocol

from core.errors import CoreError
from core.log.file_records import FileSlice
from core.server.frame_protocol import WriteStalledError


class TruncatedRecordsError(CoreError):
    """A slice of a segment could not be sent whole; the connection is closed."""


@dataclass(frozen=True, slots=True)
class ResponseFrame:
    """A response frame in parts: encoded bytes (the size prefix first) and file slices."""

    parts: tuple[bytes | FileSlice, ...]

    @property
    def size(self) -> int:
        """The frame's bytes, size prefix included."""
        return sum(len(p) for p in self.parts)

    def to_bytes(self) -> bytes:
        """The whole frame in memory (slices read with ``pread``)."""
        return b"".join(p.read_bytes() if isinstance(p, FileSlice) else p for p in self.parts)


# ``bytes`` written to a SplicingBuffer from this size on are kept as parts of their own.
IN_MEMORY_PART_BYTES = 64 * 1024
# An in-memory part goes to the transport in writes of at most this many bytes.
MEMORY_WRITE_CHUNK_BYTES = 256 * 1024


class SplicingBuffer:
    """A write-only buffer for kio's writers that keeps ``FileSlice`` values, and ``bytes``
    of IN_MEMORY_PART_BYTES or more (records read from the remote tier), as parts of their
    own instead of copying their bytes in. Only ``bytes`` are kept: they cannot change
    before the frame is sent."""

    def __init__(self) -> None:
        self._parts: list[bytes | FileSlice] = []
        self._out = io.BytesIO()
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview | FileSlice) -> int:
        n = len(data)
        self.size += n
        if isinstance(data, FileSlice) or (type(data) is bytes and n >= IN_MEMORY_PART_BYTES):
            if self._out.tell():
                self._parts.append(self._out.getvalue())
                self._out = io.BytesIO()
            self._parts.append(data)
            return n
        return self._out.write(data)

    def parts(self) -> list[bytes | FileSlice]:
        """What was written, in order; the encoded chunks as ``bytes``."""
        if self._out.tell():
            self._parts.append(self._out.getvalue())
            self._out = io.BytesIO()
        return self._parts


class _Drainable(Protocol):
    """What ``send_response`` needs of the connection's protocol."""

    async def drain(self, stall_timeout_s: float | None = None) -> None: ...


# A slice goes out in sendfile calls of at most this many bytes, each of which must finish
# within the connection's stall timeout: a peer that reads nothing is found out, one that
# reads slowly (at least this much per connections.max.idle.ms) is served.
SENDFILE_CHUNK_BYTES = 1 << 20

# Parts smaller than this are written together: a slice is read (``pread``) and joined with
# the encoded chunks around it into one ``write``. ``loop.sendfile`` costs the event loop
# about 50 us per call (a flush waiter, pausing and resuming reading: two ``epoll_ctl``,
# futures, the duplicate descriptor and its close), and the encoded bytes around each slice
# took a ``send`` each; the copy costs about 0.25 us per KiB. Measured with
# ``python -m bench.fetch_send`` (docs/BENCHMARKS.md, issue 19 session 7): an answer of one
# 300-byte slice took 53-64 us with sendfile, 5 us copied; at 128 KiB 75 us against 31 us;
# the two met between 256 and 512 KiB on loopback. A real network takes sendfile's pages
# without the copy into the socket that loopback still makes, and a socket that is not
# drained at once makes asyncio copy the rest of a write into its buffer: the threshold
# stays well below that break-even, and large slices (consumers catching up, followers)
# keep zero copy.
COALESCE_PART_BYTES = 128 * 1024
# Small slices are read before the first byte of the answer is written, up to this many
# bytes in all (the answer's other slices are sent from a duplicate descriptor, those under
# COALESCE_PART_BYTES read from it when their turn comes): what one answer holds in memory
# at once stays bounded however many partitions it has.
READ_AHEAD_BYTES = 1 << 20


async def send_response(
    transport: asyncio.Transport,
    protocol: _Drainable,
    frame: ResponseFrame,
    *,
    sendfile: bool,
    stall_timeout_s: float | None = None,
) -> None:
    """Write ``frame`` to ``transport`` in order; returns once the last part is on its way.

    Before the first byte is written, every slice's bytes are read (the small ones, up to
    READ_AHEAD_BYTES in all) or its file is opened (a duplicate descriptor), so a segment
    deleted while an earlier part is still going out to a slow client is sent all the same.
    Consecutive parts under COALESCE_PART_BYTES go in one ``write`` (written once they
    reach MEMORY_WRITE_CHUNK_BYTES); a small Fetch answer is one ``write``.

    Args:
        sendfile: slices of COALESCE_PART_BYTES or more go with ``loop.sendfile`` (plain
            TCP); False: read and written (TLS).
        stall_timeout_s: how long the peer may read nothing before ``WriteStalledError``
            (None: no limit).

    Raises:
        TruncatedRecordsError: a slice could not be sent whole.
        ConnectionResetError: the connection closed meanwhile.
    """
    loop = asyncio.get_running_loop()
    sources, files = _sources(frame.parts)
    try:
        batch: list[bytes] = []
        batched = 0
        for item in sources:
            source = item
            if isinstance(item, _OpenSlice) and item.part.size < COALESCE_PART_BYTES:
                source = _read_slice(item.part, item.file)  # beyond the read-ahead
            if isinstance(source, bytes) and len(source) < COALESCE_PART_BYTES:
                batch.append(source)
                batched += len(source)
                if batched >= MEMORY_WRITE_CHUNK_BYTES:
                    await _write_batch(transport, protocol, batch, stall_timeout_s)
                    batched = 0
                continue
            if batch:
                await _write_batch(transport, protocol, batch, stall_timeout_s)
                batched = 0
            if isinstance(source, bytes):
                await _write_in_pieces(transport, protocol, source, stall_timeout_s)
            elif sendfile:
                await _send_slice(loop, transport, source.part, source.file, stall_timeout_s)
            else:
                transport.write(_read_slice(source.part, source.file))
                await protocol.drain(stall_timeout_s)
        if batch:
            await _write_batch(transport, protocol, batch, stall_timeout_s)
    finally:
        for file in files:
            file.close()


@dataclass(frozen=True, slots=True)
class _OpenSlice:
    """A slice to send from ``file``, a duplicate of its segment's descriptor."""

    part: FileSlice
    file: io.FileIO


def _sources(
    parts: tuple[bytes | FileSlice, ...],
) -> tuple[list[bytes | _OpenSlice], list[io.FileIO]]:
    """Each part as the bytes to write (an encoded chunk, a small slice read now) or a
    slice with its file open; and the files opened, for the caller to close."""
    budget = READ_AHEAD_BYTES
    sources: list[bytes | _OpenSlice] = []
    files: list[io.FileIO] = []
    try:
        for part in parts:
            if not isinstance(part, FileSlice):
                sources.append(part)
            elif part.size < COALESCE_PART_BYTES and part.size <= budget:
                sources.append(_read_now(part))
                budget -= part.size
            else:
                file = _open(part)
                files.append(file)
                sources.append(_OpenSlice(part, file))
    except BaseException:
        for file in files:
            file.close()
        raise
    return sources, files


async def _write_batch(
    transport: asyncio.Transport,
    protocol: _Drainable,
    batch: list[bytes],
    stall_timeout_s: float | None,
) -> None:
    """Write the parts of ``batch`` in one ``write`` and empty it."""
    transport.write(batch[0] if len(batch) == 1 else b"".join(batch))
    batch.clear()
    await protocol.drain(stall_timeout_s)


async def _write_in_pieces(
    transport: asyncio.Transport,
    protocol: _Drainable,
    data: bytes,
    stall_timeout_s: float | None,
) -> None:
    view = memoryview(data)
    for at in range(0, len(view), MEMORY_WRITE_CHUNK_BYTES):
        if transport.is_closing():
            raise ConnectionResetError("connection closed")
        transport.write(view[at : at + MEMORY_WRITE_CHUNK_BYTES])
        await protocol.drain(stall_timeout_s)


def _open(part: FileSlice) -> io.FileIO:
    try:
        fd = part.records.duplicate_fd()
    except CoreError as e:
        raise TruncatedRecordsError(f"records of a fetch response cannot be sent: {e}") from e
    return io.FileIO(fd, "rb", closefd=True)


def _read_now(part: FileSlice) -> bytes:
    """A small slice's bytes, read through the segment's own descriptor (``read`` holds the
    lock its ``close`` takes)."""
    try:
        data = part.records.read(part.position, part.size)
    except CoreError as e:
        raise TruncatedRecordsError(f"records of a fetch response cannot be read: {e}") from e
    if len(data) != part.size:
        raise _truncated(part, len(data))
    return data


def _truncated(part: FileSlice, found: int) -> TruncatedRecordsError:
    return TruncatedRecordsError(
        f"{part.records.path} has {found} of the {part.size} bytes at position "
        f"{part.position} that the fetch response announced (truncated meanwhile)"
    )


def _read_slice(part: FileSlice, file: io.FileIO) -> bytes:
    try:
        data = os.pread(file.fileno(), part.size, part.position)
    except OSError as e:
        raise TruncatedRecordsError(f"records of a fetch response cannot be read: {e}") from e
    if len(data) != part.size:
        raise _truncated(part, len(data))
    return data


async def _send_slice(
    loop: asyncio.AbstractEventLoop,
    transport: asyncio.Transport,
    part: FileSlice,
    file: io.FileIO,
    stall_timeout_s: float | None,
) -> None:
    sent = 0
    while sent < part.size:
        if transport.is_closing():
            raise ConnectionResetError("connection closed")
        count = min(SENDFILE_CHUNK_BYTES, part.size - sent)
        try:
            async with asyncio.timeout(stall_timeout_s):
                done = await loop.sendfile(
                    transport, file, part.position + sent, count, fallback=False
                )
        except asyncio.SendfileNotAvailableError:
            # A transport without a native sendfile: read and write.
            transport.write(_read_slice(part, file))
            return
        except RuntimeError as e:  # asyncio: the transport is closing
            raise ConnectionResetError(str(e)) from e
        except TimeoutError:
            raise WriteStalledError(
                f"{count} bytes of an answer not read for {stall_timeout_s:g} s"
            ) from None
        sent += done
        if done != count:
            break
    if sent != part.size:
        raise TruncatedRecordsError(
            f"{part.records.path} had {sent} of the {part.size} bytes at position "
            f"{part.position} that the fetch response announced (truncated meanwhile)"
        )
