"""The broker-to-broker client against scripted peers: plain asyncio servers that answer
(or do not answer) as each test needs, framed with tierlog's own codec.

Real brokers (ApiVersions, Metadata, CreateTopics, Produce, Fetch, SASL, TLS) are in
tests/integration/test_broker_client.py.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.broker_connection import (
    BrokerConnection,
    ConnectFailedError,
    ConnectionClosedError,
    NoCommonVersionError,
    ProtocolViolationError,
    RequestTimeoutError,
)
from core.server.errors import UnsupportedVersionRequestError
from core.server.kio_build import make, nested
from core.server.node_client import (
    BrokerEndpoint,
    ClientSettings,
    NodeClient,
    reconnect_backoff_ms,
)
from core.server.protocol import ProtocolCodec, RequestContext, load_request_schema
from core.server.security import ClientSecurity
from tests.support.waiting import until

SIZE = struct.Struct(">i")
PEER_VERSIONS = {ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (12, 12)}
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


# -- a scripted peer --------------------------------------------------------------------------
class Peer:
    """A plain asyncio server that runs ``script`` on each connection, framed by
    ``ProtocolCodec`` over ``versions``."""

    def __init__(self, script: Script, versions: dict[ApiKey, tuple[int, int]] = PEER_VERSIONS):
        self.script = script
        self.codec = ProtocolCodec(versions, {})
        self.versions = versions
        self.seen: list[RequestContext] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, port: int = 0) -> Peer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self.script(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def read(self, reader: asyncio.StreamReader) -> tuple[RequestContext, Any]:
        (size,) = SIZE.unpack(await reader.readexactly(4))
        frame = await reader.readexactly(size)
        try:
            context, request = self.codec.decode_request(frame, "TEST", "client")
        except UnsupportedVersionRequestError as e:
            context = RequestContext(e.api_key, e.api_version, e.correlation_id, None, "T", "c")
            request = None
        self.seen.append(context)
        return context, request

    def answer(self, writer: asyncio.StreamWriter, context: RequestContext, body: Any) -> None:
        writer.write(self.codec.encode_response(context, body))

    def api_versions(self, version: int, error: ErrorCode = ErrorCode.none) -> Any:
        response_type = self.codec.response_type(ApiKey.API_VERSIONS, version)
        entry = nested(response_type, "ApiVersion")
        return make(
            response_type,
            error_code=error,
            api_keys=tuple(
                make(entry, api_key=int(k), min_version=lo, max_version=hi)
                for k, (lo, hi) in self.versions.items()
            ),
            throttle_time=datetime.timedelta(0),
        )

    async def handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer ApiVersions as tierlog's network layer does (v0 layout when unsupported)."""
        while True:
            context, request = await self.read(reader)
            assert context.api_key == ApiKey.API_VERSIONS
            if request is not None:
                self.answer(writer, context, self.api_versions(context.api_version))
                return
            v0 = RequestContext(ApiKey.API_VERSIONS, 0, context.correlation_id, None, "T", "c")
            self.answer(writer, v0, self.api_versions(0, ErrorCode.unsupported_version))

    def metadata_answer(self, request: Any) -> Any:
        response_type = self.codec.response_type(ApiKey.METADATA, 12)
        topic = nested(response_type, "MetadataResponseTopic")
        return make(
            response_type,
            throttle_time=datetime.timedelta(0),
            brokers=(),
            topics=tuple(
                make(
                    topic,
                    error_code=ErrorCode.unknown_topic_or_partition,
                    name=t.name,
                    topic_id=None,
                    partitions=(),
                )
                for t in request.topics
            ),
        )


def metadata(*names: str) -> Callable[[int], Any]:
    def build(version: int) -> Any:
        cls = load_request_schema(ApiKey.METADATA, version)
        topic = nested(cls, "MetadataRequestTopic")
        return make(
            cls,
            topics=tuple(make(topic, topic_id=None, name=n) for n in names),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )

    return build


async def silent(reader: asyncio.StreamReader) -> None:
    """Read requests and never answer them, until the client goes away."""
    while await reader.read(65536):
        pass


async def open_to(peer: Peer, **kwargs: Any) -> BrokerConnection:
    return await BrokerConnection.open("127.0.0.1", peer.port, client_id="broker-1-test", **kwargs)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


# -- BrokerConnection -------------------------------------------------------------------------
def test_requests_are_pipelined_and_each_answer_reaches_its_request():
    names = [f"topic-{i}" for i in range(5)]

    async def script(reader, writer):
        await peer.handshake(reader, writer)
        # Read all five before answering any: a client that waited for each answer before
        # sending the next request would stall here until its timeout.
        pending = [await peer.read(reader) for _ in names]
        for context, request in pending:
            peer.answer(writer, context, peer.metadata_answer(request))
        await silent(reader)

    peer = Peer(script)

    async def main():
        await peer.start()
        async with await open_to(peer, request_timeout_ms=10_000) as connection:
            answers = await asyncio.gather(
                *(connection.call(ApiKey.METADATA, metadata(n), versions=(0, 12)) for n in names)
            )
        await peer.stop()
        return answers

    answers = run(main())
    assert [a.topics[0].name for a in answers] == names
    metadata_seen = [c for c in peer.seen if c.api_key == ApiKey.METADATA]
    assert [c.api_version for c in metadata_seen] == [12] * 5  # the highest both speak
    assert len({c.correlation_id for c in peer.seen}) == len(peer.seen)
    assert {c.client_id for c in peer.seen} == {"broker-1-test"}


def test_no_answer_in_time_raises_request_timeout_and_closes_the_connection():
    async def script(reader, writer):
        await peer.handshake(reader, writer)
        await silent(reader)

    peer = Peer(script)

    async def main():
        await peer.start()
        connection = await open_to(peer)
        slow = asyncio.ensure_future(
            connection.call(ApiKey.METADATA, metadata("a"), versions=(12, 12), timeout_ms=30_000)
        )
        await until(lambda: connection.in_flight == 1)
        with pytest.raises(RequestTimeoutError, match=r"METADATA request to .* within 100 ms"):
            await connection.call(ApiKey.METADATA, metadata("b"), versions=(12, 12), timeout_ms=100)
        # The one sent before it can no longer be matched to an answer: it fails too.
        with pytest.raises(ConnectionClosedError) as caught:
            await slow
        assert isinstance(caught.value.__cause__, RequestTimeoutError)
        assert connection.closed
        with pytest.raises(ConnectionClosedError):
            await connection.call(ApiKey.METADATA, metadata("c"), versions=(12, 12))
        await peer.stop()

    run(main())


def test_open_against_a_peer_that_never_answers_times_out():
    async def script(reader, writer):
        await silent(reader)

    peer = Peer(script)

    async def main():
        await peer.start()
        with pytest.raises(RequestTimeoutError, match="API_VERSIONS"):
            await open_to(peer, request_timeout_ms=200)
        await peer.stop()

    run(main())


def test_close_fails_every_request_in_flight():
    async def script(reader, writer):
        await peer.handshake(reader, writer)
        await silent(reader)

    peer = Peer(script)

    async def main():
        await peer.start()
        connection = await open_to(peer)
        calls = [
            asyncio.ensure_future(connection.call(ApiKey.METADATA, metadata(n), versions=(12, 12)))
            for n in "abc"
        ]
        await until(lambda: connection.in_flight == 3)
        await connection.close()
        results = await asyncio.gather(*calls, return_exceptions=True)
        await peer.stop()
        return results

    results = run(main())
    assert all(isinstance(r, ConnectionClosedError) for r in results), results
    assert all("closed by this broker" in str(r) and r.__cause__ is None for r in results)


def test_the_peer_closing_fails_requests_with_the_cause_chained():
    async def script(reader, writer):
        await peer.handshake(reader, writer)
        await peer.read(reader)
        writer.transport.abort()

    peer = Peer(script)

    async def main():
        await peer.start()
        connection = await open_to(peer)
        with pytest.raises(ConnectionClosedError) as caught:
            await connection.call(ApiKey.METADATA, metadata("a"), versions=(12, 12))
        await peer.stop()
        return caught.value

    error = run(main())
    assert isinstance(error.__cause__, ConnectionError)
    assert "closed the connection" in str(error)


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        # a correlation id that is not the oldest request's
        (lambda cid: SIZE.pack(5) + SIZE.pack(cid + 1) + b"\0", "expected"),
        # a size past max_response_bytes
        (lambda cid: SIZE.pack(64 * 1024), "outside 4..1024"),
        # a Metadata answer whose brokers array claims 2**31 - 2 entries
        (
            lambda cid: (
                SIZE.pack(14) + SIZE.pack(cid) + b"\0" + b"\0\0\0\0" + b"\xff\xff\xff\xff\x07"
            ),
            "malformed MetadataResponse",
        ),
    ],
    ids=["wrong-correlation-id", "oversized", "huge-array-count"],
)
def test_an_invalid_answer_fails_the_request_and_closes(answer, match):
    async def script(reader, writer):
        await peer.handshake(reader, writer)
        context, _ = await peer.read(reader)
        writer.write(answer(context.correlation_id))
        await silent(reader)

    peer = Peer(script)

    async def main():
        await peer.start()
        connection = await open_to(peer, max_response_bytes=1024)
        with pytest.raises((ProtocolViolationError, ConnectionClosedError)) as caught:
            await connection.call(ApiKey.METADATA, metadata("a"), versions=(12, 12))
        assert connection.closed
        await peer.stop()
        return caught.value

    error = run(main())
    violation = error if isinstance(error, ProtocolViolationError) else error.__cause__
    assert isinstance(violation, ProtocolViolationError)
    assert match in str(violation)


@pytest.mark.parametrize(
    ("peer_api_versions", "tried"),
    [((0, 2), [3, 2]), ((0, 3), [3])],
    ids=["falls-back-to-the-peers-highest", "v3"],
)
def test_api_versions_falls_back_as_kafka_clients_do(peer_api_versions, tried):
    versions = {ApiKey.API_VERSIONS: peer_api_versions, ApiKey.METADATA: (12, 12)}

    async def script(reader, writer):
        await peer.handshake(reader, writer)
        await silent(reader)

    peer = Peer(script, versions)

    async def main():
        await peer.start()
        async with await open_to(peer) as connection:
            learned = dict(connection.api_versions)
        await peer.stop()
        return learned

    assert run(main()) == {int(k): v for k, v in versions.items()}
    assert [c.api_version for c in peer.seen] == tried


def test_no_common_version_is_refused_before_sending():
    async def script(reader, writer):
        await peer.handshake(reader, writer)
        await silent(reader)

    peer = Peer(script)

    async def main():
        await peer.start()
        async with await open_to(peer) as connection:
            with pytest.raises(NoCommonVersionError, match=r"v0-v11, .* serves v12-v12"):
                await connection.call(ApiKey.METADATA, metadata("a"), versions=(0, 11))
            with pytest.raises(NoCommonVersionError, match="does not serve PRODUCE"):
                await connection.call(ApiKey.PRODUCE, metadata("a"), versions=(3, 11))
            assert connection.in_flight == 0 and not connection.closed
        await peer.stop()

    run(main())


def test_a_refused_connection_raises_connect_failed():
    async def main():
        peer = await Peer(silent_script).start()
        port = peer.port
        await peer.stop()
        with pytest.raises(ConnectFailedError, match=f"127.0.0.1:{port}"):
            await BrokerConnection.open("127.0.0.1", port, client_id="broker-1-test")

    run(main())


async def silent_script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await silent(reader)


# -- NodeClient -------------------------------------------------------------------------------
def test_reconnect_backoff_is_kafkas_exponential_backoff():
    rng = random.Random(7)
    waits = [reconnect_backoff_ms(n, 50, 1000, rng) for n in range(8)]
    for n, wait in enumerate(waits):
        term = min(50 * 2**n, 1000)
        assert term * 0.8 <= wait <= min(term * 1.2, 1000), (n, wait)
    assert waits[-1] <= 1000
    assert reconnect_backoff_ms(3, 1000, 1000, rng) == 1000  # max <= initial: always max


def settings(**over: Any) -> ClientSettings:
    return ClientSettings(local_id=1, security=ClientSecurity("PLAINTEXT"), **over)


def test_node_client_backs_off_between_failed_connects_and_resets_once_connected(
    monkeypatch: pytest.MonkeyPatch,
):
    attempts: list[float] = []
    original = BrokerConnection.open

    async def recording_open(*args: Any, **kwargs: Any) -> BrokerConnection:
        attempts.append(asyncio.get_running_loop().time())
        return await original(*args, **kwargs)

    monkeypatch.setattr(BrokerConnection, "open", recording_open)

    async def script(reader, writer):
        await peer.handshake(reader, writer)
        await silent(reader)

    peer = Peer(script)

    async def main():
        await peer.start()
        port = peer.port
        await peer.stop()
        node = BrokerEndpoint(2, "127.0.0.1", port)
        client = NodeClient(settings(), rng=random.Random(1))
        remaining = []
        for _ in range(3):
            with pytest.raises(ConnectFailedError):
                await client.connection(node, "controller")
            remaining.append(client.backoff_remaining_ms(2, "controller"))
        await peer.start(port)  # the broker is back
        connection = await client.connection(node, "controller")
        assert not connection.closed
        assert client.backoff_remaining_ms(2, "controller") == 0  # reset by the success
        await client.close()
        await peer.stop()
        return remaining

    remaining = run(main())
    # The same random sequence as the client's: about 50, 100, 200 ms (+-20%).
    rng = random.Random(1)
    expected = [reconnect_backoff_ms(n, 50, 1000, rng) for n in range(3)]
    assert expected == sorted(expected) and expected[2] > 150
    assert all(0 < r <= e for r, e in zip(remaining, expected, strict=True)), remaining
    # Each attempt came no earlier than the backoff after the failure before it.
    assert len(attempts) == 4
    for n in range(1, 4):
        assert attempts[n] - attempts[n - 1] >= expected[n - 1] / 1000 - 0.001


def test_node_client_keeps_one_connection_per_broker_and_purpose():
    async def script(reader, writer):
        await peer.handshake(reader, writer)
        while True:
            context, request = await peer.read(reader)
            peer.answer(writer, context, peer.metadata_answer(request))

    peer = Peer(script)

    async def main():
        await peer.start()
        client = NodeClient(settings())
        node = BrokerEndpoint(2, "127.0.0.1", peer.port)
        controller = await client.connection(node, "controller")
        assert await client.connection(node, "controller") is controller
        fetcher = await client.connection(node, "fetcher-0")
        assert fetcher is not controller
        answer = await client.send(
            node, "fetcher-0", ApiKey.METADATA, metadata("x"), versions=(0, 12)
        )
        assert answer.topics[0].name == "x"
        await client.disconnect(2, "fetcher-0")  # no backoff after a deliberate close
        assert fetcher.closed and client.backoff_remaining_ms(2, "fetcher-0") == 0
        fetcher = await client.connection(node, "fetcher-0")
        assert not fetcher.closed
        # The broker moved: the old connection is closed, a new one opened.
        moved = await client.connection(BrokerEndpoint(2, "localhost", peer.port), "controller")
        assert moved is not controller and controller.closed
        await client.close()
        assert moved.closed and fetcher.closed
        with pytest.raises(ConnectionClosedError, match="closed"):
            await client.connection(node, "controller")
        await peer.stop()

    run(main())
    api_versions = [c for c in peer.seen if c.api_key == ApiKey.API_VERSIONS]
    assert [c.client_id for c in api_versions] == [
        "broker-1-controller",
        "broker-1-fetcher-0",
        "broker-1-fetcher-0",
        "broker-1-controller",
    ]
