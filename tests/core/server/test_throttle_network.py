"""KIP-219 in the socket server: a throttled answer mutes its connection.

The broker's own clock decides: the next request of a muted connection is not handed to
its handler before the throttle time of the last throttled answer has passed (a bound the
code guarantees, not a measurement of speed). Other connections are not muted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.handlers import api_versions_response
from core.server.network import ListenerSpec, SocketServer
from core.server.protocol import ProtocolCodec, RequestContext
from core.server.throttle import ThrottledResponse
from tests.support.kafka_wire import Connection

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)
THROTTLE_MS = 300
# asyncio may fire a timer up to its clock resolution early.
SLACK_S = 0.002
REQUEST = ApiVersionsRequest(client_software_name="t", client_software_version="1")


class Recorder:
    """A handler that notes when each request starts and throttles the first ones it is
    told to."""

    def __init__(self, throttled: int, delay_response: bool = False) -> None:
        self.throttled = throttled
        self.delay_response = delay_response
        self.started: list[float] = []
        self.answered: list[float] = []

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        self.started.append(loop.time())
        response = api_versions_response(CODEC.response_type(ctx.api_key, ctx.api_version))
        self.answered.append(loop.time())
        if len(self.started) <= self.throttled:
            return ThrottledResponse(response, THROTTLE_MS, self.delay_response)
        return response


async def exchange(port: int, requests: int, received: list[float] | None = None) -> None:
    """``requests`` requests one after the other on one connection, from a thread."""
    loop = asyncio.get_running_loop()

    def client() -> None:
        with Connection(f"127.0.0.1:{port}") as connection:
            for _ in range(requests):
                connection.request(ApiKey.API_VERSIONS, 3, REQUEST)
                if received is not None:
                    received.append(loop.time())

    await asyncio.to_thread(client)


async def serving(handler: Recorder) -> tuple[SocketServer, int]:
    server = SocketServer(CODEC, handler, lambda ctx: None)
    (bound,) = await server.start([ListenerSpec("PLAINTEXT", "127.0.0.1", 0)])
    return server, bound.port


def test_the_next_request_waits_for_the_throttle_time() -> None:
    async def scenario() -> None:
        handler = Recorder(throttled=1)
        server, port = await serving(handler)
        try:
            await exchange(port, 2)
        finally:
            await server.stop()
        assert handler.started[1] >= handler.answered[0] + THROTTLE_MS / 1000 - SLACK_S

    asyncio.run(scenario())


def test_a_pre_kip_219_answer_is_itself_held_for_the_throttle_time() -> None:
    async def scenario() -> None:
        handler = Recorder(throttled=1, delay_response=True)
        server, port = await serving(handler)
        received: list[float] = []
        try:
            await exchange(port, 1, received)
        finally:
            await server.stop()
        assert received[0] >= handler.answered[0] + THROTTLE_MS / 1000 - SLACK_S

    asyncio.run(scenario())


def test_other_connections_are_not_muted() -> None:
    async def scenario() -> None:
        handler = Recorder(throttled=1)
        server, port = await serving(handler)
        try:
            await exchange(port, 1)  # this connection is now muted for 300 ms
            await exchange(port, 3)  # a new one is served at once, throttled by nothing
        finally:
            await server.stop()
        assert len(handler.started) == 4

    asyncio.run(scenario())


def test_closing_a_muted_connection_does_not_wait_for_the_throttle() -> None:
    async def scenario() -> None:
        handler = Recorder(throttled=1)
        server, port = await serving(handler)

        async def long_throttle(ctx: RequestContext, request: Any) -> Any:
            answer = await handler(ctx, request)
            # An hour, and the answer held that long (a pre-KIP-219 client).
            return ThrottledResponse(answer.response, 3_600_000, delay_response=True)

        server.handler = long_throttle

        def client() -> None:
            with Connection(f"127.0.0.1:{port}") as connection:
                connection.send(ApiKey.API_VERSIONS, 3, REQUEST)

        try:
            await asyncio.to_thread(client)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while server.connection_count and loop.time() < deadline:
                await asyncio.sleep(0.01)
            assert server.connection_count == 0, "the muted connection did not close"
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_a_request_pipelined_behind_a_throttled_answer_waits_for_the_throttle() -> None:
    """Both reasons to mute hold together: the throttled answer goes out at once (KIP-219),
    the request pipelined behind it stays unread while the throttle lasts (an hour here),
    other connections are served meanwhile, and a muted client that leaves is let go."""

    async def scenario() -> None:
        started: list[str] = []

        async def handler(ctx: RequestContext, request: Any) -> Any:
            started.append(ctx.client_id or "")
            response = api_versions_response(CODEC.response_type(ctx.api_key, ctx.api_version))
            if ctx.client_id == "throttled":
                return ThrottledResponse(response, 3_600_000)
            return response

        server = SocketServer(CODEC, handler, lambda ctx: None)
        (bound,) = await server.start([ListenerSpec("PLAINTEXT", "127.0.0.1", 0)])
        bootstrap = f"127.0.0.1:{bound.port}"
        seen_while_muted: list[str] = []

        def client() -> None:
            with Connection(bootstrap, client_id="throttled") as muted:
                first, _ = muted.send_all([(ApiKey.API_VERSIONS, 3, REQUEST)] * 2)
                muted.receive(ApiKey.API_VERSIONS, 3, first)  # not held for the throttle
                with Connection(bootstrap, client_id="other") as other:
                    other.request(ApiKey.API_VERSIONS, 3, REQUEST)
                seen_while_muted.extend(started)

        try:
            await asyncio.to_thread(client)
            assert seen_while_muted == ["throttled", "other"]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while server.connection_count and loop.time() < deadline:
                await asyncio.sleep(0.01)
            assert server.connection_count == 0, "the muted connection did not close"
        finally:
            await server.stop()

    asyncio.run(scenario())
