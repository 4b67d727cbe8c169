"""The socket server serves a connection as Kafka does: one request at a time.

A scripted handler (ApiVersions v0 requests, told apart by correlation id) lets each test
decide when a request finishes, so what the server does meanwhile can be checked without
timing: the next pipelined frame is not read or handed to a handler, the idle timer does not
run, and a client that goes away cancels the request in progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.network import ListenerSpec, SocketServer
from core.server.protocol import ProtocolCodec, RequestContext

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)
SIZE = struct.Struct(">i")
DEADLINE_S = 10.0
ANSWER = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=())


def frame(correlation_id: int) -> bytes:
    header_cls = ApiVersionsRequest.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(
        out,
        header_cls(
            request_api_key=i16(ApiKey.API_VERSIONS),
            request_api_version=i16(0),
            correlation_id=i32(correlation_id),
            client_id="test",
        ),
    )
    entity_writer(ApiVersionsRequest)(out, ApiVersionsRequest())
    body = out.getvalue()
    return SIZE.pack(len(body)) + body


FRAME_BYTES = len(frame(1)) - 4  # what one frame reserves in the memory pool


async def answered(reader: asyncio.StreamReader) -> int:
    """The correlation id of the next answer."""
    async with asyncio.timeout(DEADLINE_S):
        (size,) = SIZE.unpack(await reader.readexactly(4))
        body = await reader.readexactly(size)
    return int.from_bytes(body[:4], "big", signed=True)


async def until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(DEADLINE_S):
        while not condition():
            await asyncio.sleep(0.005)
    assert condition(), what


class Script:
    """The handler: records which requests started and were cancelled; a request whose
    correlation id is in ``gates`` waits for its gate, others answer at once."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.cancelled: list[int] = []
        self.gates: dict[int, asyncio.Future[Any]] = {}
        self.on_start: Callable[[int], Awaitable[Any]] | None = None

    def gate(self, correlation_id: int) -> asyncio.Future[Any]:
        self.gates[correlation_id] = asyncio.get_running_loop().create_future()
        return self.gates[correlation_id]

    async def __call__(self, context: RequestContext, request: Any) -> Any:
        cid = context.correlation_id
        self.started.append(cid)
        try:
            if cid in self.gates:
                return await self.gates[cid]
            if self.on_start is not None:
                return await self.on_start(cid)
            return ANSWER
        except asyncio.CancelledError:
            self.cancelled.append(cid)
            raise


@asynccontextmanager
async def serving(script: Script, **options: Any) -> AsyncIterator[tuple[SocketServer, int]]:
    server = SocketServer(CODEC, script, lambda ctx: ANSWER, **options)
    (bound,) = await server.start([ListenerSpec("PLAINTEXT", "127.0.0.1", 0)])
    try:
        yield server, bound.port
    finally:
        await server.stop()


async def round_trip(port: int, correlation_id: int) -> None:
    """One request on a connection of its own, answered: the server's loop has run
    meanwhile, as often as it takes to serve another connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frame(correlation_id))
    assert await answered(reader) == correlation_id
    writer.close()


def test_pipelined_requests_are_handled_one_at_a_time_in_order() -> None:
    async def scenario() -> None:
        script = Script()
        first, second = script.gate(1), script.gate(2)
        async with serving(script, queued_max_request_bytes=1 << 20) as (server, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(1) + frame(2) + frame(3))
            await until(lambda: script.started == [1], "the first request started")
            await round_trip(port, 100)
            # The others wait in the socket: not handed to a handler, no memory reserved.
            assert script.started == [1, 100]
            assert server.memory_pool.reserved == FRAME_BYTES
            first.set_result(ANSWER)
            assert await answered(reader) == 1
            await until(lambda: script.started[-1] == 2, "the second request started")
            await round_trip(port, 101)
            assert script.started == [1, 100, 2, 101]
            second.set_result(ANSWER)
            assert [await answered(reader), await answered(reader)] == [2, 3]
            assert script.started == [1, 100, 2, 101, 3]
            assert server.memory_pool.reserved == 0
            writer.close()

    asyncio.run(scenario())


def test_answers_to_pipelined_requests_arrive_complete_and_in_order() -> None:
    """Answers to frames that arrived together are written together; none is lost or
    reordered, and the connection serves on afterwards."""

    async def scenario() -> None:
        script = Script()
        async with serving(script) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"".join(frame(cid) for cid in range(1, 201)))
            assert [await answered(reader) for _ in range(200)] == list(range(1, 201))
            writer.write(frame(201))
            assert await answered(reader) == 201
            writer.close()

    asyncio.run(scenario())


def test_an_answer_is_not_held_back_by_a_waiting_request_behind_it() -> None:
    """The answer to a request goes out while the next pipelined request waits (a long
    poll, an acks=all produce waiting for followers), not when that one ends."""

    async def scenario() -> None:
        script = Script()
        parked = script.gate(2)
        async with serving(script) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(1) + frame(2))
            assert await answered(reader) == 1
            assert script.started == [1, 2] and not parked.done()
            parked.set_result(ANSWER)
            assert await answered(reader) == 2
            writer.close()

    asyncio.run(scenario())


def test_answers_are_written_before_the_connection_closes_after_end_of_stream() -> None:
    async def scenario() -> None:
        script = Script()
        async with serving(script) as (server, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(1) + frame(2) + frame(3))
            writer.write_eof()
            assert [await answered(reader) for _ in range(3)] == [1, 2, 3]
            await until(lambda: server.connection_count == 0, "the connection closed")
            writer.close()

    asyncio.run(scenario())


def test_a_request_without_an_answer_lets_the_next_one_through() -> None:
    async def scenario() -> None:
        script = Script()
        script.gate(1).set_result(None)  # like a produce with acks=0
        async with serving(script) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(1) + frame(2))
            assert await answered(reader) == 2
            assert script.started == [1, 2]
            writer.close()

    asyncio.run(scenario())


def test_a_client_that_goes_away_cancels_the_request_in_progress() -> None:
    async def scenario() -> None:
        script = Script()
        script.gate(1)  # parked until cancelled, like a long-poll fetch
        async with serving(script) as (server, port):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(1))
            await until(lambda: script.started == [1], "the request started")
            writer.close()
            await until(lambda: script.cancelled == [1], "the request was cancelled")
            await until(lambda: server.connection_count == 0, "the connection closed")
            await round_trip(port, 100)  # the server serves on

    asyncio.run(scenario())


def test_frames_sent_before_the_client_went_away_are_started() -> None:
    """What a handler does before its first await (a produce's appends) is done for every
    frame that arrived in full, even when the client closed right after sending it."""

    async def scenario() -> None:
        script = Script()
        for cid in (1, 2, 3):
            script.gate(cid)  # each parks after starting
        async with serving(script) as (server, port):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(1) + frame(2) + frame(3))
            writer.close()
            await until(lambda: script.cancelled == [1, 2, 3], "every request cut short")
            assert script.started == [1, 2, 3]
            await until(lambda: server.connection_count == 0, "the connection closed")

    asyncio.run(scenario())


def test_the_idle_timer_does_not_run_while_a_request_is_in_progress() -> None:
    async def scenario() -> None:
        script = Script()

        async def outlast_the_idle_timeout(cid: int) -> Any:
            await asyncio.sleep(0.6)  # the request is slow, longer than the idle limit
            return ANSWER

        script.on_start = outlast_the_idle_timeout
        async with serving(script, idle_timeout_s=0.2) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(1))
            assert await answered(reader) == 1
            # Idle now: the timer closes the connection.
            async with asyncio.timeout(DEADLINE_S):
                assert await reader.read() == b""
            writer.close()

    asyncio.run(scenario())


def test_a_handler_failure_closes_only_its_connection() -> None:
    async def scenario() -> None:
        script = Script()
        script.gate(1).set_exception(RuntimeError("a bug"))
        async with serving(script) as (server, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(1) + frame(2))
            # Closed, with a reset or not.
            async with asyncio.timeout(DEADLINE_S):
                with contextlib.suppress(ConnectionResetError):
                    assert await reader.read() == b""
            assert script.started == [1]
            await round_trip(port, 100)
            assert server.memory_pool.reserved == 0
            writer.close()

    asyncio.run(scenario())


# About 1.2 MB encoded: far more than the small socket buffers of the two tests below hold.
BIG_ANSWER = ApiVersionsResponse(
    error_code=ErrorCode.none,
    api_keys=tuple(
        ApiVersion(api_key=i16(i % 100), min_version=i16(0), max_version=i16(1))
        for i in range(200_000)
    ),
)


async def small_buffered_connection(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


def test_a_client_that_reads_nothing_of_its_answer_is_closed_after_the_idle_time() -> None:
    """Kafka's connections.max.idle.ms covers a send without progress: a client that never
    reads cannot keep its answer's buffers (and its connection) forever."""

    async def scenario() -> None:
        script = Script()
        script.on_start = lambda cid: asyncio.sleep(0, BIG_ANSWER)
        async with serving(script, idle_timeout_s=0.3, send_buffer_bytes=4096) as (server, port):
            _, writer = await small_buffered_connection(port)
            writer.write(frame(1))
            await until(lambda: script.started == [1], "the request started")
            await until(lambda: server.connection_count == 0, "the stalled connection closed")
            await round_trip(port, 100)  # the server serves on
            writer.close()

    asyncio.run(scenario())


def test_a_client_reading_a_large_answer_gets_all_of_it() -> None:
    async def scenario() -> None:
        script = Script()
        script.on_start = lambda cid: asyncio.sleep(0, BIG_ANSWER)
        async with serving(script, idle_timeout_s=2.0, send_buffer_bytes=4096) as (_, port):
            reader, writer = await small_buffered_connection(port)
            writer.write(frame(7))
            async with asyncio.timeout(DEADLINE_S * 3):
                (size,) = SIZE.unpack(await reader.readexactly(4))
                body = await reader.readexactly(size)
            assert int.from_bytes(body[:4], "big") == 7
            assert size > 1_000_000
            writer.close()

    asyncio.run(scenario())
