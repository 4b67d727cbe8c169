"""Kernel socket buffer sizes from ``socket.send.buffer.bytes`` / ``socket.receive.buffer.bytes``.

As Kafka's SocketServer does: the receive buffer is set on the listening socket, so every
connection accepted from it inherits the size from the start (TCP window scaling is agreed
in the handshake, before the broker sees the connection); the send buffer is set on each
accepted connection. ``-1`` (Kafka's ``USE_DEFAULT_BUFFER_SIZE``) leaves the OS default, and
with it the kernel's autotuning. Linux reports back twice the size set (it counts its own
bookkeeping); the value set is what Kafka sets.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

USE_OS_DEFAULT = -1


def set_receive_buffer(listening: Iterable[Any], size: int) -> None:
    """``SO_RCVBUF`` of each listening socket (``asyncio.Server.sockets``)."""
    if size == USE_OS_DEFAULT:
        return
    for sock in listening:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def set_send_buffer(writer: asyncio.BaseTransport | asyncio.StreamWriter, size: int) -> None:
    """``SO_SNDBUF`` of an accepted connection."""
    if size == USE_OS_DEFAULT:
        return
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    except OSError as e:
        # The peer may already be gone; the connection's first read will find out.
        log.debug("cannot set SO_SNDBUF=%d on a new connection: %s", size, e)
