"""The socket server applies socket.send.buffer.bytes, socket.receive.buffer.bytes and
socket.listen.backlog.size to the kernel's sockets (what ``ss -ltnm`` would show)."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from typing import Any

import pytest

from core.server.api_keys import SUPPORTED_VERSIONS
from core.server.network import ListenerSpec, SocketServer
from core.server.protocol import ProtocolCodec

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)


async def _no_answer(context: Any, request: Any) -> None:
    return None


def _as_reported(option: int, size: int) -> int:
    """What the OS reports for ``option`` after setting ``size`` (Linux doubles it)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, option, size)
        return probe.getsockopt(socket.SOL_SOCKET, option)


def _untouched_accepted_buffers() -> tuple[int, int]:
    """SO_SNDBUF and SO_RCVBUF of a connection accepted with no options set: the defaults."""
    with (
        socket.create_server(("127.0.0.1", 0)) as listening,
        socket.create_connection(listening.getsockname()),
    ):
        accepted, _ = listening.accept()
        with accepted:
            return (
                accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            )


async def _accepted_socket(**options: int) -> tuple[SocketServer, socket.socket, Any]:
    server = SocketServer(CODEC, _no_answer, lambda ctx: None, **options)
    (bound,) = await server.start([ListenerSpec("PLAINTEXT", "127.0.0.1", 0)])
    loop = asyncio.get_running_loop()
    client = socket.socket()
    client.setblocking(False)
    await loop.sock_connect(client, ("127.0.0.1", bound.port))
    deadline = loop.time() + 5
    while server.connection_count == 0:
        assert loop.time() < deadline, "the server did not accept the connection"
        await asyncio.sleep(0.01)
    (connection,) = server._connections
    return server, client, connection.transport.get_extra_info("socket")


def test_accepted_connections_get_the_configured_buffer_sizes():
    async def scenario() -> None:
        server, client, accepted = await _accepted_socket(
            send_buffer_bytes=24576, receive_buffer_bytes=20480
        )
        try:
            send = accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            receive = accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            assert send == _as_reported(socket.SO_SNDBUF, 24576)
            # Set on the listener, inherited by the connection.
            assert receive == _as_reported(socket.SO_RCVBUF, 20480)
        finally:
            client.close()
            await server.stop()

    asyncio.run(scenario())


def test_minus_one_leaves_the_os_defaults():
    async def scenario() -> None:
        server, client, accepted = await _accepted_socket(
            send_buffer_bytes=-1, receive_buffer_bytes=-1
        )
        try:
            send = accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            receive = accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            assert (send, receive) == _untouched_accepted_buffers()
        finally:
            client.close()
            await server.stop()

    asyncio.run(scenario())


@pytest.mark.skipif(sys.platform != "linux", reason="TCP_INFO of a listening socket is Linux's")
def test_the_listen_backlog_is_socket_listen_backlog_size():
    async def scenario() -> None:
        server = SocketServer(CODEC, _no_answer, lambda ctx: None, listen_backlog=7)
        await server.start([ListenerSpec("PLAINTEXT", "127.0.0.1", 0)])
        try:
            (listening,) = server._servers[0].sockets
            info = listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
            # For a listening socket Linux reports the backlog in tcpi_sacked (as ss does).
            tcpi_sacked = struct.unpack_from("8B6I", info)[13]
            assert tcpi_sacked == 7
        finally:
            await server.stop()

    asyncio.run(scenario())
