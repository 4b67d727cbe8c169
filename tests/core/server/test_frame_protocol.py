"""The connection's receive buffers: frames come out whole and in order however the bytes
arrive, the read-ahead is bounded, and a transport asking for a buffer again at once gets
one (asyncio's TLS transport reads the end of the stream into an empty one)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.server.frame_protocol import FrameProtocol

SIZE = struct.Struct(">i")
READ_AHEAD = 1024


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def feed(protocol: FrameProtocol, data: bytes) -> None:
    """What a transport does with received bytes: into the protocol's buffers."""
    view = memoryview(data)
    while view:
        buf = protocol.get_buffer(-1)
        assert len(buf) > 0, "an empty buffer: a TLS transport would take it for the end"
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        protocol.buffer_updated(n)
        view = view[n:]


async def read_frames(protocol: FrameProtocol, count: int) -> list[bytes]:
    frames = []
    for _ in range(count):
        (size,) = SIZE.unpack(await protocol.read_exactly(4))
        frames.append(bytes(await protocol.read_body(size)))
    return frames


def connected() -> tuple[FrameProtocol, FakeTransport]:
    protocol = FrameProtocol(READ_AHEAD, lambda p: None)
    transport = FakeTransport()
    protocol.connection_made(transport)
    return protocol, transport


@settings(max_examples=100, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=3000), min_size=1, max_size=6),
    cuts=st.lists(st.integers(1, 4000), max_size=20),
)
def test_frames_come_out_whole_and_in_order_however_they_arrive(bodies, cuts):
    stream = b"".join(SIZE.pack(len(b)) + b for b in bodies)

    async def scenario() -> list[bytes]:
        protocol, transport = connected()
        reader = asyncio.ensure_future(read_frames(protocol, len(bodies)))
        position = 0
        for cut in [*cuts, len(stream)]:
            chunk = stream[position : position + cut]
            position += len(chunk)
            # The transport only delivers while reading; the reader frees room meanwhile.
            while chunk:
                if not transport.reading:
                    await asyncio.sleep(0)
                    assert transport.reading or not reader.done()
                    continue
                room = len(protocol.get_buffer(-1))
                feed(protocol, chunk[:room])
                chunk = chunk[room:]
                await asyncio.sleep(0)
        async with asyncio.timeout(5):
            return await reader

    assert asyncio.run(scenario()) == bodies


def test_a_complete_body_is_not_offered_again_as_an_empty_buffer():
    async def scenario() -> None:
        protocol, _ = connected()
        body = b"x" * (3 * READ_AHEAD)
        feed(protocol, SIZE.pack(len(body)))
        (size,) = SIZE.unpack(await protocol.read_exactly(4))
        reader = asyncio.ensure_future(protocol.read_body(size))
        await asyncio.sleep(0)  # waiting, its body buffer handed out
        # The body and the next frame's head delivered before the reader runs again, as a
        # TLS transport does when it decrypts both at once.
        feed(protocol, body + SIZE.pack(2) + b"ok")
        assert bytes(await reader) == body
        (size,) = SIZE.unpack(await protocol.read_exactly(4))
        assert bytes(await protocol.read_body(size)) == b"ok"

    asyncio.run(scenario())


def test_read_ahead_is_bounded_and_reading_resumes_when_consumed():
    async def scenario() -> None:
        protocol, transport = connected()
        feed(protocol, b"\0" * READ_AHEAD)
        assert not transport.reading  # full: the kernel's buffer holds the rest
        await protocol.read_exactly(4)
        assert transport.reading

    asyncio.run(scenario())


def test_frames_before_the_end_of_the_stream_are_read_then_it_ends():
    async def scenario() -> None:
        protocol, _ = connected()
        feed(protocol, SIZE.pack(3) + b"abc" + SIZE.pack(10) + b"cut")
        protocol.eof_received()
        (size,) = SIZE.unpack(await protocol.read_exactly(4))
        assert bytes(await protocol.read_body(size)) == b"abc"
        (size,) = SIZE.unpack(await protocol.read_exactly(4))
        with pytest.raises(asyncio.IncompleteReadError):
            await protocol.read_body(size)

    asyncio.run(scenario())


def test_a_lost_connection_fails_the_read_in_progress():
    async def scenario() -> None:
        protocol, _ = connected()
        reader = asyncio.ensure_future(protocol.read_exactly(4))
        await asyncio.sleep(0)
        protocol.connection_lost(ConnectionResetError("reset"))
        with pytest.raises(ConnectionResetError):
            await reader

    asyncio.run(scenario())
