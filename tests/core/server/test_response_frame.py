"""Fetch responses whose records stay in the segment file: the same bytes as a copied
response, sent with sendfile, and a connection closed when the file came up short."""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from core.log.file_records import FileRecords, FileSlice
from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.kio_build import make, nested
from core.server.network import ListenerSpec, SocketServer
from core.server.protocol import ProtocolCodec, RequestContext, load_request_schema
from core.server.response_frame import (
    COALESCE_PART_BYTES,
    IN_MEMORY_PART_BYTES,
    MEMORY_WRITE_CHUNK_BYTES,
    READ_AHEAD_BYTES,
    SENDFILE_CHUNK_BYTES,
    ResponseFrame,
)
from tests.core.server.test_protocol import frame as request_frame

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)
LOW, HIGH = SUPPORTED_VERSIONS[ApiKey.FETCH]
SIZE = struct.Struct(">i")
DEADLINE_S = 10.0


def fetch_response(version: int, records: list[bytes | FileSlice]) -> Any:
    """A Fetch response of one topic with a partition per entry of ``records``."""
    response_type = CODEC.response_type(ApiKey.FETCH, version)
    partitions = tuple(
        make(
            nested(response_type, "PartitionData"),
            partition_index=i,
            error_code=ErrorCode.none,
            high_watermark=1000 + i,
            last_stable_offset=1000 + i,
            log_start_offset=0,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=r,
        )
        for i, r in enumerate(records)
    )
    topic = make(
        nested(response_type, "FetchableTopicResponse"),
        topic="topic",
        topic_id=uuid.UUID(int=7),
        partitions=partitions,
    )
    return make(
        response_type,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(topic,),
        node_endpoints=(),
    )


def context(version: int) -> RequestContext:
    return RequestContext(ApiKey.FETCH, version, 42, "c", "PLAINTEXT", "x")


@pytest.fixture
def segment(tmp_path: Path) -> FileRecords:
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append(os.urandom(300_000))
    yield records
    records.close()


@pytest.mark.parametrize("version", range(LOW, HIGH + 1))
def test_a_spliced_fetch_response_is_the_copied_one(segment: FileRecords, version: int) -> None:
    first, second = FileSlice(segment, 100, 5000), FileSlice(segment, 200_000, 90_000)
    spliced = CODEC.encode_response_frame(
        context(version), fetch_response(version, [first, b"", second, b"inline"])
    )
    copied = CODEC.encode_response(
        context(version),
        fetch_response(version, [first.read_bytes(), b"", second.read_bytes(), b"inline"]),
    )
    assert isinstance(spliced, ResponseFrame)
    # The slices are parts of their own, not copied into the encoded bytes.
    assert [p for p in spliced.parts if isinstance(p, FileSlice)] == [first, second]
    assert spliced.size == len(copied)
    assert spliced.to_bytes() == copied


def fetch_request_frame(version: int = 12, correlation_id: int = 9) -> bytes:
    cls = load_request_schema(ApiKey.FETCH, version)
    request = make(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )
    body = request_frame(ApiKey.FETCH, version, request, correlation_id, "test")
    return SIZE.pack(len(body)) + body


async def exchange(handler: Any, request: bytes) -> tuple[bytes, bool]:
    """Serve one Fetch with ``handler``; the bytes the client got and whether the server
    closed the connection after them."""
    server = SocketServer(CODEC, handler, lambda ctx: None)
    (bound,) = await server.start([ListenerSpec("PLAINTEXT", "127.0.0.1", 0)])
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", bound.port)
        writer.write(request)
        async with asyncio.timeout(DEADLINE_S):
            received = await reader.read(-1)  # until the server closes or we time out
        writer.close()
        return received, True
    except TimeoutError:
        return b"", False
    finally:
        await server.stop()


async def fetch_once(handler: Any) -> bytes:
    """One Fetch sent to a socket server answering with ``handler``: the whole answer
    frame as the client received it (size prefix included)."""
    server = SocketServer(CODEC, handler, lambda ctx: None)
    (bound,) = await server.start([ListenerSpec("PLAINTEXT", "127.0.0.1", 0)])
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", bound.port)
        writer.write(fetch_request_frame())
        async with asyncio.timeout(DEADLINE_S):
            (size,) = SIZE.unpack(await reader.readexactly(4))
            body = await reader.readexactly(size)
        writer.close()
        return SIZE.pack(size) + body
    finally:
        await server.stop()


def test_fetch_records_are_sent_from_the_file_with_sendfile(segment: FileRecords) -> None:
    piece = FileSlice(segment, 1000, 250_000)
    calls: list[tuple[int, int]] = []

    async def handler(ctx: RequestContext, request: Any) -> Any:
        return fetch_response(ctx.api_version, [piece])

    received = asyncio.run(fetch_once_spying_sendfile(handler, calls))
    expected = CODEC.encode_response(context(12), fetch_response(12, [piece.read_bytes()]))
    expected = expected[:4] + SIZE.pack(9) + expected[8:]  # the request's correlation id
    assert received == expected
    assert calls == [(1000, 250_000)]


def test_records_read_from_the_remote_tier_are_sent_whole_and_in_order_without_a_copy(
    segment: FileRecords,
) -> None:
    """Remote records (``bytes`` in memory) are parts of their own, written in pieces:
    the client gets exactly the copied response, with a file slice and small inline records
    around them in order."""
    remote = os.urandom(3 * MEMORY_WRITE_CHUNK_BYTES + 12_345)
    small = os.urandom(IN_MEMORY_PART_BYTES - 1)
    piece = FileSlice(segment, 7, 20_000)
    partitions: list[bytes | FileSlice] = [small, remote, piece, b"inline"]

    frame = CODEC.encode_response_frame(context(12), fetch_response(12, partitions))
    assert isinstance(frame, ResponseFrame)
    assert any(p is remote for p in frame.parts), "the remote records were copied"
    assert not any(p is small for p in frame.parts)

    async def scenario() -> bytes:
        async def handler(ctx: RequestContext, request: Any) -> Any:
            return fetch_response(ctx.api_version, partitions)

        return await fetch_once(handler)

    received = asyncio.run(scenario())
    copied = fetch_response(12, [small, remote, piece.read_bytes(), b"inline"])
    expected = CODEC.encode_response(context(12), copied)
    assert received == expected[:4] + SIZE.pack(9) + expected[8:]


def test_a_slice_truncated_before_it_is_sent_closes_the_connection(
    segment: FileRecords,
) -> None:
    piece = FileSlice(segment, 0, 300_000)

    async def scenario() -> bytes:
        async def handler(ctx: RequestContext, request: Any) -> Any:
            response = fetch_response(ctx.api_version, [piece])
            segment.truncate_to(100_000)  # a follower truncating its log meanwhile
            return response

        received, closed = await exchange(handler, fetch_request_frame())
        assert closed, "the server kept the connection of a frame it cannot complete"
        return received

    received = asyncio.run(scenario())
    # Whatever went out is less than the frame announced: the client sees a cut frame and
    # reconnects, never a frame with other bytes in place of the records.
    (size,) = SIZE.unpack(received[:4])
    assert len(received) - 4 < size


def test_a_segment_deleted_while_the_response_goes_out_is_still_sent(
    segment: FileRecords, tmp_path: Path
) -> None:
    later = FileRecords(tmp_path / "00000000000000001000.log")
    later.append(os.urandom(50_000))
    first, second = FileSlice(segment, 0, 200_000), FileSlice(later, 10, 40_000)
    copied = fetch_response(12, [first.read_bytes(), second.read_bytes()])
    expected = CODEC.encode_response(context(12), copied)

    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        native = loop.sendfile

        async def deleting(
            transport: Any, file: Any, offset: int = 0, count: Any = None, **kw: Any
        ):
            # Retention deletes the second segment while the first slice is on its way.
            later.delete_if_exists()
            return await native(transport, file, offset, count, **kw)

        loop.sendfile = deleting  # type: ignore[method-assign]

        async def handler(ctx: RequestContext, request: Any) -> Any:
            return fetch_response(ctx.api_version, [first, second])

        return (await fetch_once(handler))[4:]

    body = asyncio.run(scenario())
    assert not (tmp_path / "00000000000000001000.log").exists()
    assert body == SIZE.pack(9) + expected[8:]  # the request's correlation id


def test_a_client_that_reads_none_of_the_records_is_closed_after_the_idle_time(
    tmp_path: Path,
) -> None:
    """sendfile waits for a socket the peer never drains: bounded by connections.max.idle.ms
    (per sendfile call of at most SENDFILE_CHUNK_BYTES), as Kafka's idle expiry."""
    big = FileRecords(tmp_path / "00000000000000000000.log")
    big.append(os.urandom(3 * SENDFILE_CHUNK_BYTES))
    piece = FileSlice(big, 0, 3 * SENDFILE_CHUNK_BYTES)

    asyncio.run(served_to_a_reader_that_reads_nothing([piece]))


@pytest.fixture
def big_segment(tmp_path: Path) -> FileRecords:
    records = FileRecords(tmp_path / "00000000000000002000.log")
    records.append(os.urandom(2 << 20))
    yield records
    records.close()


async def fetch_once_spying_sendfile(
    handler: Any, calls: list[tuple[int, int]], during: Any = None
) -> bytes:
    """``fetch_once`` with ``loop.sendfile`` noting each call's offset and count (and
    calling ``during`` before the first one goes on)."""
    loop = asyncio.get_running_loop()
    native = loop.sendfile

    async def spy(
        transport: Any, file: Any, offset: int = 0, count: int | None = None, **kw: Any
    ) -> int:
        calls.append((offset, count or 0))
        if during is not None and len(calls) == 1:
            during()
        return await native(transport, file, offset, count, **kw)

    loop.sendfile = spy  # type: ignore[method-assign]
    return await fetch_once(handler)


def expected_frame(records: list[bytes | FileSlice]) -> bytes:
    """The copied answer to ``fetch_request_frame()`` with these partitions' records."""
    copied = [r.read_bytes() if isinstance(r, FileSlice) else r for r in records]
    expected = CODEC.encode_response(context(12), fetch_response(12, copied))
    return expected[:4] + SIZE.pack(9) + expected[8:]  # the request's correlation id


def test_small_slices_are_copied_and_large_ones_sent_from_the_file_all_in_order(
    segment: FileRecords, big_segment: FileRecords
) -> None:
    """An answer mixing small slices (read and written with the encoded bytes around
    them), large ones (sendfile), records in memory (one under IN_MEMORY_PART_BYTES, one of
    a part of its own, one written in pieces) and inline ones reaches the client exactly as
    the copied answer would."""
    partitions: list[bytes | FileSlice] = [
        FileSlice(big_segment, 10, 300),
        b"inline",
        FileSlice(segment, 5, 20_000),
        FileSlice(big_segment, 1000, COALESCE_PART_BYTES),
        os.urandom(IN_MEMORY_PART_BYTES + 7),
        FileSlice(big_segment, 500_000, COALESCE_PART_BYTES - 1),
        FileSlice(segment, 250_000, 1),
        os.urandom(3 * MEMORY_WRITE_CHUNK_BYTES + 5),
        FileSlice(big_segment, 1_200_000, 700_000),
        FileSlice(big_segment, (2 << 20) - 900, 900),
    ]
    calls: list[tuple[int, int]] = []

    async def handler(ctx: RequestContext, request: Any) -> Any:
        return fetch_response(ctx.api_version, partitions)

    received = asyncio.run(fetch_once_spying_sendfile(handler, calls))
    assert received == expected_frame(partitions)
    assert calls == [(1000, COALESCE_PART_BYTES), (1_200_000, 700_000)]


def test_small_slices_beyond_the_read_ahead_are_read_from_their_own_descriptor(
    big_segment: FileRecords,
) -> None:
    """More small slices than READ_AHEAD_BYTES: those past it are read when their turn
    comes, from a duplicate descriptor; the client gets the same bytes, none by sendfile."""
    size = COALESCE_PART_BYTES - 1000
    count = READ_AHEAD_BYTES // size + 3
    partitions: list[bytes | FileSlice] = [
        FileSlice(big_segment, i * (size + 17), size) for i in range(count)
    ]
    assert (count - 1) * (size + 17) + size <= big_segment.size
    calls: list[tuple[int, int]] = []

    async def handler(ctx: RequestContext, request: Any) -> Any:
        return fetch_response(ctx.api_version, partitions)

    received = asyncio.run(fetch_once_spying_sendfile(handler, calls))
    assert received == expected_frame(partitions)
    assert calls == []


def assert_cut(received: bytes) -> None:
    """What went out is less than a whole frame: the client sees a cut frame and
    reconnects, never a frame with other bytes in place of the records."""
    if len(received) >= 4:
        (size,) = SIZE.unpack(received[:4])
        assert len(received) - 4 < size


def test_a_small_slice_truncated_before_it_is_sent_closes_the_connection(
    segment: FileRecords,
) -> None:
    piece = FileSlice(segment, 250_000, 2_000)

    async def scenario() -> bytes:
        async def handler(ctx: RequestContext, request: Any) -> Any:
            response = fetch_response(ctx.api_version, [piece])
            segment.truncate_to(251_000)  # a follower truncating its log meanwhile
            return response

        received, closed = await exchange(handler, fetch_request_frame())
        assert closed, "the server kept the connection of a frame it cannot complete"
        return received

    assert_cut(asyncio.run(scenario()))


def test_a_small_slice_of_a_segment_closed_before_the_send_never_reads_another_file(
    segment: FileRecords, tmp_path: Path
) -> None:
    """Retention closes and deletes the segment between the handler's answer and the send,
    and a new file takes its descriptor number: the connection is closed, and the new
    file's bytes are not sent in place of the records."""
    piece = FileSlice(segment, 100, 3_000)
    reused: list[FileRecords] = []

    async def scenario() -> bytes:
        async def handler(ctx: RequestContext, request: Any) -> Any:
            response = fetch_response(ctx.api_version, [piece])
            fd = segment.fileno
            segment.delete_if_exists()
            other = FileRecords(tmp_path / "00000000000000009000.log")
            other.append(b"X" * 10_000)
            reused.append(other)
            assert other.fileno == fd, "the test needs the descriptor number reused"
            return response

        received, closed = await exchange(handler, fetch_request_frame())
        assert closed, "the server kept the connection of a frame it cannot complete"
        return received

    received = asyncio.run(scenario())
    for other in reused:
        other.close()
    assert b"XXXXXXXX" not in received
    assert_cut(received)


def test_a_small_slice_of_a_segment_deleted_while_an_earlier_part_goes_out_is_sent(
    segment: FileRecords, big_segment: FileRecords
) -> None:
    first = FileSlice(big_segment, 0, 1 << 20)  # sendfile
    second = FileSlice(segment, 10, 4_000)  # read before the first byte is written
    expected = expected_frame([first, second])
    calls: list[tuple[int, int]] = []

    async def handler(ctx: RequestContext, request: Any) -> Any:
        return fetch_response(ctx.api_version, [first, second])

    received = asyncio.run(
        fetch_once_spying_sendfile(handler, calls, during=segment.delete_if_exists)
    )
    assert not segment.path.exists()
    assert calls == [(0, 1 << 20)]
    assert received == expected


def test_a_client_that_reads_none_of_many_small_slices_is_closed_after_the_idle_time(
    tmp_path: Path,
) -> None:
    """Small slices are copied and written in batches; a peer that reads none of them is
    found out by the same stall timeout (connections.max.idle.ms) as with sendfile."""
    size = COALESCE_PART_BYTES - 1
    count = 4 * READ_AHEAD_BYTES // size
    big = FileRecords(tmp_path / "00000000000000000000.log")
    big.append(os.urandom(count * size))
    partitions = [FileSlice(big, i * size, size) for i in range(count)]

    try:
        asyncio.run(served_to_a_reader_that_reads_nothing(partitions))
    finally:
        big.close()


async def served_to_a_reader_that_reads_nothing(parts: list[Any]) -> None:
    """Answer a Fetch with ``parts`` to a client with a small receive buffer that reads
    nothing; returns once the server has closed the connection (its stall timeout is 0.3 s),
    or fails after DEADLINE_S."""
    served = asyncio.get_running_loop().create_future()

    async def handler(ctx: RequestContext, request: Any) -> Any:
        served.set_result(None)
        return fetch_response(ctx.api_version, parts)

    server = SocketServer(
        CODEC, handler, lambda ctx: None, idle_timeout_s=0.3, send_buffer_bytes=4096
    )
    (bound,) = await server.start([ListenerSpec("PLAINTEXT", "127.0.0.1", 0)])
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", bound.port))
        _, writer = await asyncio.open_connection(sock=sock)
        writer.write(fetch_request_frame())
        async with asyncio.timeout(DEADLINE_S):
            await served
            while server.connection_count > 0:  # until the stalled send is given up
                await asyncio.sleep(0.01)
        writer.close()
    finally:
        await server.stop()
