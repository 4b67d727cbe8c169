"""Reading a connection's request frames into preallocated buffers (``BufferedProtocol``).

asyncio's stream reader receives every chunk as a new ``bytes`` (a ``recv`` of up to 256 KiB),
appends it to its buffer and slices each frame out of that buffer again: three user-space
copies of every request byte, and a new allocation per ``recv``. Here the transport receives
straight into buffers this protocol hands it (``get_buffer`` / ``buffer_updated``, so
``recv_into``):

- between frames, into a fixed read-ahead buffer of ``read_ahead`` bytes per connection,
  where the 4-byte size prefix and small frames arrive;
- once a frame's body is wanted, into a ``bytearray`` of exactly the frame's size, allocated
  when it is asked for: the part of the body already read ahead (at most ``read_ahead``
  bytes) is copied over once, the rest is received into it directly, with no copy at all.

The body is a ``bytearray``, so a produce request's records can be used in place (a
``memoryview`` into it is patched and written to the log) and live exactly as long as the
frame's memory-pool reservation.

Reading is paused while the read-ahead buffer is full and no body is being read, so a
connection holds at most ``read_ahead`` bytes beyond the frame it is serving (the kernel's
socket buffer holds the rest, and TCP pushes back on the client). Writes are flow-controlled
as asyncio's ``StreamWriter.drain`` does: ``drain`` waits while the transport's write buffer is
over its high-water mark.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# Free space below which the unread bytes are moved to the front of the read-ahead buffer.
_COMPACT_BELOW = 4096


class WriteStalledError(Exception):
    """The peer read nothing of an answer for the connection's idle time (Kafka closes a
    connection without activity for ``connections.max.idle.ms``, a stalled send included)."""


class FrameProtocol(asyncio.BufferedProtocol):
    """One connection's receive buffers, its write flow control and its end.

    Args:
        read_ahead: size of the read-ahead buffer.
        on_connected: called with this protocol once the transport is connected (after the
            TLS handshake on a TLS listener).
    """

    def __init__(self, read_ahead: int, on_connected: Callable[[FrameProtocol], None]) -> None:
        self._ahead = bytearray(read_ahead)
        self._ahead_view = memoryview(self._ahead)
        self._start = 0  # first unread byte of the read-ahead buffer
        self._end = 0  # end of the bytes received into it
        self._body: memoryview | None = None  # a frame body being received into directly
        self._filled = 0  # bytes of ``_body`` received
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._lost = False
        self._lost_exc: BaseException | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._on_connected = on_connected
        self._on_gone: Callable[[], None] | None = None
        self._gone = False
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio's callbacks -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._on_connected(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._filled :]
        if len(self._ahead) - self._end < _COMPACT_BELOW and self._start > 0:
            self._compact()
        return self._ahead_view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._filled += nbytes
            if self._filled == len(self._body):
                # Complete: what arrives next goes to the read-ahead buffer, also before
                # the reader has run (a TLS transport may ask for a buffer again at once,
                # and takes an empty one for the end of the stream).
                self._body = None
                self._wake()
            return
        self._end += nbytes
        self._wake()
        if self._end == len(self._ahead):
            if self._start > 0:
                self._compact()
            else:
                self._pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        self._peer_gone()
        # Keep the socket open for writing: frames that arrived before the end of the stream
        # are still answered (not possible over TLS, where asyncio closes it anyway).
        return self.transport is not None and self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._lost_exc = exc
        self._wake()
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))
        if not self.closed.done():
            self.closed.set_result(None)
        self._peer_gone()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- for the connection ----------------------------------------------------------------
    def watch(self, on_gone: Callable[[], None]) -> None:
        """Call ``on_gone`` once the peer has gone: end of stream or connection lost (at once
        if it already has). A connection does not read while it serves a request, so it
        would not notice by itself."""
        self._on_gone = on_gone
        if self._gone:
            on_gone()

    def buffered(self) -> int:
        """Bytes received into the read-ahead buffer and not read yet."""
        return self._end - self._start

    def frame_buffered(self) -> bool:
        """Whether a whole frame (size prefix and body) is already in the read-ahead
        buffer, so that reading it will not wait for the peer."""
        unread = self._end - self._start
        if unread < 4:
            return False
        size = int.from_bytes(self._ahead_view[self._start : self._start + 4], "big", signed=True)
        return 0 <= size <= unread - 4

    async def read_exactly(self, n: int) -> bytes:
        """The next ``n`` bytes (``n`` at most the read-ahead size).

        Raises:
            asyncio.IncompleteReadError: the stream ended first.
            ConnectionResetError: the connection was lost first.
        """
        while self._end - self._start < n:
            await self._wait_for_data(self._end - self._start, n)
        data = bytes(self._ahead_view[self._start : self._start + n])
        self._consumed(n)
        return data

    async def read_body(self, size: int) -> bytearray:
        """The next ``size`` bytes, in a new ``bytearray`` of that size.

        Raises:
            asyncio.IncompleteReadError: the stream ended first.
            ConnectionResetError: the connection was lost first.
        """
        body = bytearray(size)
        have = min(size, self._end - self._start)
        if have:
            body[:have] = self._ahead_view[self._start : self._start + have]
            self._consumed(have)
        if have == size:
            return body
        self._body, self._filled = memoryview(body), have
        self._resume_reading()
        try:
            while self._filled < size:
                await self._wait_for_data(self._filled, size)
        finally:
            self._body = None
        return body

    async def drain(self, stall_timeout_s: float | None = None) -> None:
        """Wait while the transport's write buffer is over its high-water mark.

        Args:
            stall_timeout_s: how long the buffer may go without shrinking (the peer reads
                nothing) before ``WriteStalledError``; None: no limit.

        Raises:
            ConnectionResetError: the connection is lost.
            WriteStalledError: no progress for ``stall_timeout_s``.
        """
        if self._lost:
            raise ConnectionResetError("connection lost")
        if not self._writing_paused:
            return
        waiter = self._drain_waiter
        if waiter is None or waiter.done():
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiter = waiter
        assert self.transport is not None
        while True:
            pending = self.transport.get_write_buffer_size()
            done, _ = await asyncio.wait({waiter}, timeout=stall_timeout_s)
            if done:
                waiter.result()  # raises ConnectionResetError if the connection was lost
                return
            if self.transport.get_write_buffer_size() >= pending:
                raise WriteStalledError(
                    f"{pending} bytes of an answer not read for {stall_timeout_s:g} s"
                )

    # -- internals -----------------------------------------------------------------------
    async def _wait_for_data(self, have: int, want: int) -> None:
        if self._lost:
            raise ConnectionResetError("connection lost") from self._lost_exc
        if self._eof:
            partial = (
                bytes(self._ahead_view[self._start : self._end]) if self._body is None else b""
            )
            raise asyncio.IncompleteReadError(partial, want)
        self._resume_reading()
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _consumed(self, n: int) -> None:
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0
        self._resume_reading()

    def _compact(self) -> None:
        unread = self._end - self._start
        # Through a copy: a slice assignment from a view of the same buffer may overlap.
        self._ahead[:unread] = bytes(self._ahead_view[self._start : self._end])
        self._start, self._end = 0, unread

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self._lost:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if not self._reading_paused or self._lost or self.transport is None:
            return
        if self._body is None and self._end == len(self._ahead) and self._start == 0:
            return  # still full
        self._reading_paused = False
        self.transport.resume_reading()

    def _peer_gone(self) -> None:
        if self._gone:
            return
        self._gone = True
        if self._on_gone is not None:
            self._on_gone()
