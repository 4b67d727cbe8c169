"""A response whose record bytes stay in the segment files until they are sent.

A Fetch answer is mostly record bytes that are already in a segment file. Kafka writes them
from the file to the socket (``FileRecords.writeTo``, a ``sendfile``) and encodes only what is
around them. So does tierlog: the Fetch handler puts the log's ``FileSlice`` itself in the
response's records field; ``SplicingBuffer`` takes kio's writes of the response, and when
kio writes a slice (after its length, which ``len`` of the slice gives) it ends the current
chunk of encoded bytes there and keeps the slice as a part of its own. The response is sent
part by part: the encoded chunks with the transport's ``write``, each slice with
``loop.sendfile`` (``os.sendfile`` on a plain TCP socket: no copy in user space, no ``pread``).

TLS encrypts in user space, so there is no ``sendfile`` on a TLS connection: the slice is
read (``pread``) and written, one copy, as before.

Records a remote read put in memory (``bytes`` of IN_MEMORY_PART_BYTES or more) are kept as
parts of their own too, not copied into the encoded chunks, and written in pieces of
MEMORY_WRITE_CHUNK_BYTES, each once the one before has left asyncio's write buffer: a
piece the socket does not take at once is copied into that buffer, and the buffer is
shifted after every ``send`` from it, so a 1 MiB answer written whole cost more there
(copies and shifts of up to 1 MiB per ``send``) than encoding the rest of the response.

A slice is sent from a duplicate of the segment's descriptor taken just before the response
is written, so a segment deleted by retention while the response goes out still sends its
bytes (as Kafka's channel of a deleted file does). If the file has fewer bytes than the
frame announced (a follower truncated its log meanwhile, or the segment was closed in the
moment between the handler's answer and the send),
the frame cannot be completed: the connection is closed, as Kafka closes it on a
``FileRecords`` truncated during a write, and the client fetches again.
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
# the encoded chunks around it into one ``write``. ``loop.sendfile`` has a fixed cost of about
# 50 us of the event loop's CPU (a flush waiter, pausing and resuming reading: two
# ``epoll_ctl``, futures, the duplicate descriptor and its close) and the encoded bytes around
# a slice each take a ``send`` of their own; copying costs about 0.25 us per KiB. Measured
# (``python -m bench.fetch_send``), an answer of one 300-byte slice took 50-60 us with
# sendfile and 4-5 us copied; the copy stayed cheaper up to slices of a few hundred KiB on
# loopback. Past that, and on a real network where sendfile saves the copy into the socket
# too, a large slice keeps ``sendfile``: zero copy for the big fetches of consumers catching
# up and of followers. 128 KiB is below the break-even, so every slice copied is cheaper so.
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
    Consecutive parts under COALESCE_PART_BYTES go in one ``write`` (of at most
    MEMORY_WRITE_CHUNK_BYTES); a small Fetch answer is one ``write``.

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
    """A small slice's bytes, read through the segment's own descriptor under its lock."""
    try:
        data = part.records.read_while_open(part.position, part.size)
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
