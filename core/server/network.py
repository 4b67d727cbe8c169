"""The socket server: listeners, connections, framing, ordered responses.

Each connection has a reader loop and a writer task. The reader takes one size-prefixed
frame at a time (``readexactly``), decodes it, and starts its handler at once, so several
requests of one connection may be in progress together (a long-poll fetch does not hold up
a produce behind it). Handlers must do any work whose order matters (appends) before their
first ``await``: asyncio starts tasks in creation order. The writer sends responses strictly
in request order, as Kafka clients require.

A frame that cannot be parsed, an unknown api key, a size out of bounds or a handler crash
closes that one connection; nothing else is affected.

Quotas (KIP-219): a handler's answer may come as a ``ThrottledResponse``; the connection is
then muted, no further request of it served, until its throttle time has passed (and an
answer to a client older than KIP-219 is itself held that long).

Memory: every frame reserves its size in the broker-wide ``RequestMemoryPool``
(``queued.max.request.bytes``) before its body is read, and releases it when its handler has
finished; while the pool is full, large frames wait unread. Before a SASL exchange has
completed, a frame larger than ``sasl.server.max.receive.size`` closes the connection at its
size prefix, as Kafka's SaslServerAuthenticator does. A body must arrive in full within
``connections.max.idle.ms`` of its size prefix, so a client that announces a large frame and
trickles it holds its reservation for that long at most.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core.server.api_keys import ApiKey
from core.server.errors import InvalidRequestError, UnsupportedVersionRequestError
from core.server.memory_pool import RequestMemoryPool, Reservation
from core.server.protocol import ProtocolCodec, RequestContext
from core.server.sasl_session import SaslSession
from core.server.security import ANONYMOUS, ListenerSecurity, principal_of_certificate
from core.server.socket_buffers import set_receive_buffer, set_send_buffer
from core.server.throttle import ThrottledResponse

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")

# At most this many requests of one connection are in progress; reading pauses beyond it,
# which bounds the memory one client can make the broker hold.
MAX_IN_FLIGHT_PER_CONNECTION = 64
# asyncio reads a connection ahead into its buffer up to twice this, then pauses it. Kept
# small: those bytes are not in the memory pool, and every stalled connection holds them.
READ_BUFFER_BYTES = 256 * 1024
# Frames up to this size are admitted by the memory pool even when it is full (see
# core.server.memory_pool): they are no bigger than what the read buffer holds anyway.
SMALL_FRAME_BYTES = READ_BUFFER_BYTES
# Kept from a frame for the debug log of a connection closed on it.
_FRAME_HEAD_LOGGED = 256

Handler = Callable[[RequestContext, Any], Awaitable[Any | None]]
UnsupportedVersionResponder = Callable[[RequestContext], Any]


@dataclass(frozen=True, slots=True)
class BoundListener:
    name: str
    host: str
    port: int  # the real port, also when 0 was configured


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str
    host: str
    port: int
    security: ListenerSecurity | None = None  # None: PLAINTEXT


class AuthenticationEndedError(Exception):
    """A SASL exchange failed; its answer has been queued and the connection closes."""


class BodyTimeoutError(Exception):
    """A request body did not arrive within ``connections.max.idle.ms``."""


class SocketServer:
    """Serves Kafka frames on one or more listeners.

    Args:
        codec: request/response codecs.
        handler: ``await handler(context, request)`` returns the response body, or None to
            send nothing (produce with acks=0).
        unsupported_version: builds the ApiVersions v0 error response sent when a client
            asks ApiVersions at a version the broker does not serve (Kafka's rule).
        max_request_bytes: ``socket.request.max.bytes``.
        max_connections: ``max.connections``.
        idle_timeout_s: ``connections.max.idle.ms`` in seconds; negative: no limit.
        queued_max_request_bytes: ``queued.max.request.bytes``; 0 or less: unbounded.
        send_buffer_bytes: ``socket.send.buffer.bytes`` (-1: the OS default).
        receive_buffer_bytes: ``socket.receive.buffer.bytes`` (-1: the OS default).
        listen_backlog: ``socket.listen.backlog.size``.
        The defaults are Kafka's, the broker config's defaults (but see
        ``queued_max_request_bytes``).
    """

    def __init__(
        self,
        codec: ProtocolCodec,
        handler: Handler,
        unsupported_version: UnsupportedVersionResponder,
        *,
        max_request_bytes: int = 104_857_600,
        max_connections: int = 2**31 - 1,
        idle_timeout_s: float = 600.0,
        queued_max_request_bytes: int = -1,
        send_buffer_bytes: int = 102_400,
        receive_buffer_bytes: int = 102_400,
        listen_backlog: int = 50,
    ) -> None:
        self.codec = codec
        self.handler = handler
        self.unsupported_version = unsupported_version
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        # Negative: connections never expire (Kafka's connections.max.idle.ms=-1).
        self.idle_timeout_s = idle_timeout_s if idle_timeout_s >= 0 else None
        self.memory_pool = RequestMemoryPool(
            queued_max_request_bytes, small_frame=SMALL_FRAME_BYTES
        )
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.listen_backlog = listen_backlog
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[Connection] = set()
        self.bound: list[BoundListener] = []

    async def start(self, listeners: list[ListenerSpec]) -> list[BoundListener]:
        for spec in listeners:
            security = spec.security
            server = await asyncio.start_server(
                lambda r, w, name=spec.name, sec=security: self._accept(r, w, name, sec),
                spec.host,
                spec.port,
                reuse_address=True,
                limit=READ_BUFFER_BYTES,
                ssl=security.ssl_context if security is not None else None,
                backlog=self.listen_backlog,
            )
            # Before the loop runs again, so no connection is accepted without it.
            set_receive_buffer(server.sockets, self.receive_buffer_bytes)
            port = server.sockets[0].getsockname()[1]
            self._servers.append(server)
            self.bound.append(BoundListener(spec.name, spec.host, port))
        return self.bound

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def stop(self) -> None:
        """Stop listening and close every connection; requests in progress are dropped."""
        for server in self._servers:
            server.close()
        # Aborting the transports ends each reader loop with EOF. Cancelling the connection
        # tasks instead would make asyncio's stream machinery log the CancelledError.
        for connection in list(self._connections):
            connection.abort()
        if self._connections:
            await asyncio.wait([c.finished for c in self._connections], timeout=5)
        for server in self._servers:
            await server.wait_closed()

    async def _accept(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: str,
        security: ListenerSecurity | None = None,
    ) -> None:
        if len(self._connections) >= self.max_connections:
            log.warning(
                "refusing a connection on %s: max.connections=%d reached",
                listener,
                self.max_connections,
            )
            writer.close()
            return
        set_send_buffer(writer, self.send_buffer_bytes)
        peer = writer.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        connection = Connection(self, reader, writer, listener, address, security)
        self._connections.add(connection)
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
            connection.finished.set_result(None)


class Connection:
    """One client connection: a reader loop and an ordered writer."""

    def __init__(
        self,
        server: SocketServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: str,
        address: str,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.listener = listener
        self.address = address
        ssl_object = writer.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert() if ssl_object is not None else None
        self.principal = principal_of_certificate(certificate) or ANONYMOUS
        self.sasl: SaslSession | None = None
        # sasl.server.max.receive.size: the largest frame read before authentication.
        self.sasl_max_receive = 0
        if security is not None and security.sasl is not None:
            self.sasl = SaslSession(security.sasl, server.codec, address)
            self.sasl_max_receive = security.sasl_max_receive_size
        # A None context marks raw SASL bytes (SaslHandshake v0), written as they are.
        self._pending: collections.deque[tuple[RequestContext | None, asyncio.Future[Any]]] = (
            collections.deque()
        )
        self._wake_writer = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._closing = False
        self._closed = asyncio.Event()  # set when the connection ends: throttle waits stop
        # KIP-219: no request is served before this loop time (a quota's throttle).
        self._unmute_at = 0.0
        self._last_frame_head: bytes | None = None
        # The wait for room in the memory pool, cancelled when the connection is aborted.
        self._pool_wait: asyncio.Task[Reservation] | None = None
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def abort(self) -> None:
        self._closed.set()
        self.writer.transport.abort()
        if self._pool_wait is not None:
            self._pool_wait.cancel()

    async def run(self) -> None:
        writer_task = asyncio.create_task(self._write_loop())
        try:
            await self._read_loop()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except TimeoutError:
            log.info("closing idle connection %s (connections.max.idle.ms)", self.address)
        except BodyTimeoutError as e:
            log.info("closing connection %s on %s: %s", self.address, self.listener, e)
        except AuthenticationEndedError:
            pass  # logged by the SASL session, answered before closing
        except InvalidRequestError as e:
            log.warning("closing connection %s on %s: %s", self.address, self.listener, e)
            if self._last_frame_head is not None and log.isEnabledFor(logging.DEBUG):
                log.debug("the frame began %s", self._last_frame_head.hex())
        finally:
            self._closing = True
            self._closed.set()
            # Nobody will read the answers: stop the requests still in progress (a parked
            # long-poll fetch would otherwise hold the connection until its max.wait.ms).
            # Appends already made stay; only the waiting ends.
            for _, future in self._pending:
                future.cancel()
            self._wake_writer.set()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await writer_task
            self.writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self.writer.wait_closed()

    async def _read_loop(self) -> None:
        server = self.server
        while True:
            await self._room.wait()
            async with asyncio.timeout(server.idle_timeout_s if not self._pending else None):
                head = await self.reader.readexactly(4)
            size = _SIZE.unpack(head)[0]
            if size < 0 or size > server.max_request_bytes:
                raise InvalidRequestError(
                    f"request size {size} is outside 0..socket.request.max.bytes="
                    f"{server.max_request_bytes}"
                )
            if self.sasl is not None and not self.sasl.complete and size > self.sasl_max_receive:
                # Kafka's SaslServerAuthenticator: refused at the size prefix, nothing read.
                log.info(
                    "closing connection %s on %s: a frame of %d bytes before SASL "
                    "authentication completed (sasl.server.max.receive.size=%d)",
                    self.address,
                    self.listener,
                    size,
                    self.sasl_max_receive,
                )
                return
            await self._throttle_ends()
            await self._serve_frame(size)

    async def _throttle_ends(self) -> None:
        """While the connection is muted for a quota (KIP-219), wait: its next request is
        served only once the throttle time of the last throttled answer has passed."""
        delay = self._unmute_at - asyncio.get_running_loop().time()
        if delay > 0:
            await self._pause(delay)

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the connection ends."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._closed.wait()

    async def _throttled(self, answer: ThrottledResponse) -> Any:
        """Mute the connection for ``answer``'s throttle time, from now; an answer to an
        older client (before KIP-219) itself waits that long. Returns the response."""
        seconds = answer.throttle_ms / 1000
        loop = asyncio.get_running_loop()
        self._unmute_at = max(self._unmute_at, loop.time() + seconds)
        if answer.delay_response:
            await self._pause(seconds)
        return answer.response

    async def _serve_frame(self, size: int) -> None:
        """Reserve memory for a frame, read it and start serving it; the memory is released
        when its handler is done. (A method of its own so that nothing of the frame or its
        answer stays referenced from the read loop while it waits for the next one.)"""
        reservation = await self._reserve(size)
        try:
            handled = await self._read_frame(size, reservation)
        except BaseException:
            reservation.release()
            raise
        if handled is None:
            reservation.release()
        else:
            handled.add_done_callback(reservation.release)

    async def _reserve(self, size: int) -> Reservation:
        """Room for a frame of ``size`` bytes in the broker-wide memory pool; while it
        waits, this connection is not read."""
        pool = self.server.memory_pool
        admitted = pool.try_reserve(size)
        if admitted is not None:
            return admitted
        self._pool_wait = asyncio.ensure_future(pool.reserve(size))
        try:
            return await self._pool_wait
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise ConnectionAbortedError("aborted while waiting for request memory") from None
        finally:
            self._pool_wait = None

    async def _read_frame(self, size: int, reservation: Reservation) -> asyncio.Future[Any] | None:
        """Read one frame's body into ``reservation`` and start serving it: the future of
        its handler while it still needs the frame's memory, None once it is done with it.
        """
        server = self.server
        try:
            async with asyncio.timeout(server.idle_timeout_s):
                frame = await self.reader.readexactly(size)
        except TimeoutError:
            raise BodyTimeoutError(
                f"the body of a {size}-byte request did not arrive within "
                f"connections.max.idle.ms={int((server.idle_timeout_s or 0) * 1000)}"
            ) from None
        reservation.frame = frame
        self._last_frame_head = frame[:_FRAME_HEAD_LOGGED]
        if self.sasl is not None and self.sasl.raw_tokens:
            self._raw_token(frame)
            return None
        try:
            context, request = server.codec.decode_request(
                frame, self.listener, self.address, self.principal
            )
        except UnsupportedVersionRequestError as e:
            if e.api_key != ApiKey.API_VERSIONS:
                raise
            context = RequestContext(
                e.api_key, 0, e.correlation_id, None, self.listener, self.address
            )
            self._enqueue(context, _done(server.unsupported_version(context)))
            return None
        if self.sasl is not None and not self.sasl.complete:
            return self._authenticate(context, request)
        future = asyncio.ensure_future(server.handler(context, request))
        self._enqueue(context, future)
        return future

    def _authenticate(self, context: RequestContext, request: Any) -> asyncio.Future[Any] | None:
        """A request before the SASL exchange has completed (Kafka's
        SaslServerAuthenticator): ApiVersions is served, SaslHandshake and
        SaslAuthenticate drive the exchange, anything else closes the connection.
        Returns the future of a handler still running, as ``_read_frame``.

        Raises:
            InvalidRequestError: a request that is not allowed yet.
            AuthenticationEndedError: the exchange failed (its answer is queued).
        """
        session = self.sasl
        assert session is not None
        if not session.allows(context.api_key):
            raise InvalidRequestError(
                f"unexpected {_api_name(context.api_key)} request before SASL "
                "authentication completed"
            )
        if context.api_key == ApiKey.API_VERSIONS:
            future = asyncio.ensure_future(self.server.handler(context, request))
            self._enqueue(context, future)
            return future
        response, close = session.answer(context, request)
        self._enqueue(context, _done(response))
        if close:
            raise AuthenticationEndedError
        if session.complete and session.principal is not None:
            self.principal = session.principal
        return None

    def _raw_token(self, token: bytes) -> None:
        """SaslHandshake v0: after the handshake, SASL messages travel as bare size-prefixed
        tokens, not Kafka requests; a failure just closes the connection (Kafka's way)."""
        session = self.sasl
        assert session is not None
        answer = session.raw_token(token)
        if answer is None:
            raise AuthenticationEndedError
        self._enqueue(None, _done(answer))
        if session.complete and session.principal is not None:
            self.principal = session.principal

    def _enqueue(self, context: RequestContext | None, future: asyncio.Future[Any]) -> None:
        self._pending.append((context, future))
        if len(self._pending) >= MAX_IN_FLIGHT_PER_CONNECTION:
            self._room.clear()
        self._wake_writer.set()

    async def _write_loop(self) -> None:
        codec = self.server.codec
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake_writer.clear()
                await self._wake_writer.wait()
                continue
            context, future = self._pending[0]
            try:
                response = await future
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "handler of %s v%d from %s failed; closing the connection",
                    _api_name(context.api_key),
                    context.api_version,
                    self.address,
                )
                self.writer.transport.abort()
                return
            self._pending.popleft()
            if len(self._pending) < MAX_IN_FLIGHT_PER_CONNECTION:
                self._room.set()
            if isinstance(response, ThrottledResponse):
                response = await self._throttled(response)
            if response is None:
                continue
            if context is None:
                self.writer.write(_SIZE.pack(len(response)) + response)
                await self.writer.drain()
                continue
            self.writer.write(codec.encode_response(context, response))
            await self.writer.drain()


def _done(value: Any) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
