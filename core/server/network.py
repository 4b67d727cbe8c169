"""The socket server: listeners, connections, framing, one request at a time.

A connection is served as Kafka's socket server serves it: one request at a time, in
arrival order. Its loop reads one size-prefixed frame (into buffers of its own:
core.server.frame_protocol), decodes it, runs its handler to the end, hands the answer over
for writing (a Fetch answer's records from the segment files with ``sendfile``:
core.server.response_frame; small answers queued, see below), and only then reads the next
frame (Kafka mutes a channel once a request has arrived and
unmutes it when the response has been sent, or at once for a produce with acks=0, which has
none). So a client may pipeline requests on one
connection and rely on their order: a read behind a change sees the change, and answers go
out in request order. Concurrency comes from the connections: while one waits (a long-poll
fetch, an fsync, a topic being created), the others are served. Frames a client pipelines
wait in the socket meanwhile (the kernel's buffers and the connection's 64 KiB read-ahead
buffer hold them, and TCP pushes back on the client beyond that).

Answers to pipelined frames are written together: an answer is queued on its connection,
and the queue is written (one ``send``) as soon as the connection has no whole frame left in
its read-ahead buffer, or when a handler waits, or beyond 64 KiB; a Fetch answer sent from
the segment files goes after the queued answers. Order and the one-request-at-a-time rule
are unchanged; what changes is the number of system calls when a producer pipelines many
small requests (a ``send`` on loopback also runs the receiver's side of TCP).

A frame that cannot be parsed, an unknown api key, a size out of bounds or a handler crash
closes that one connection; nothing else is affected.

When the client goes away, the request in progress is cancelled at its next ``await`` (a
parked long-poll fetch would otherwise hold on until its ``max.wait.ms``); what it did before,
such as a produce's appends, stays. Frames that had arrived in full before the end of the
stream are still served, each cancelled at its first ``await`` likewise (unless it would
have to wait for request memory); a connection lost (reset) or closed by the broker ends at
once.

Quotas (KIP-219): a handler's answer may come as a ``ThrottledResponse``. The connection is
then also muted for its throttle time, counted from when the answer was ready: the next
request is read once the answer has been sent and the throttle time has passed, whichever
comes last (Kafka mutes a channel for a request in progress and for a throttle
independently, and reads it again only when neither holds). An answer to a client older
than KIP-219 is itself held for the throttle time, as Kafka holds it.

Memory: every frame reserves its size in the broker-wide ``RequestMemoryPool``
(``queued.max.request.bytes``) before its body is read, and releases it when its handler has
finished; while the pool is full, large frames wait unread. Before a SASL exchange has
completed, a frame larger than ``sasl.server.max.receive.size`` closes the connection at its
size prefix, as Kafka's SaslServerAuthenticator does. A body must arrive in full within
``connections.max.idle.ms`` of its size prefix, so a client that announces a large frame and
trickles it holds its reservation for that long at most. The idle timer runs only while a
connection waits for its next request, never while one is in progress; and an answer the
client reads nothing of for ``connections.max.idle.ms`` closes the connection (Kafka's idle
expiry counts a send without progress too), so a client that never reads cannot hold its
answer's buffers forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core.server.api_keys import ApiKey
from core.server.errors import InvalidRequestError, UnsupportedVersionRequestError
from core.server.frame_protocol import FrameProtocol, WriteStalledError
from core.server.memory_pool import RequestMemoryPool, Reservation
from core.server.protocol import ProtocolCodec, RequestContext
from core.server.response_frame import ResponseFrame, TruncatedRecordsError, send_response
from core.server.sasl_session import SaslSession
from core.server.security import ANONYMOUS, ListenerSecurity, principal_of_certificate
from core.server.socket_buffers import set_receive_buffer, set_send_buffer
from core.server.throttle import ThrottledResponse

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")

# Each connection reads ahead into a buffer of this size (core.server.frame_protocol), then
# pauses. Kept small: those bytes are not in the memory pool, and every connection holds
# them; a larger frame's body is received straight into a buffer of its own.
READ_AHEAD_BYTES = 64 * 1024
# Frames up to this size are admitted by the memory pool even when it is full (see
# core.server.memory_pool): small requests (metadata, fetches, small produce requests) must
# not queue behind the large bodies slow or hostile clients announce.
SMALL_FRAME_BYTES = 256 * 1024
# Answers queued on a connection (``Connection._queue_answer``) are written at once beyond
# this many bytes, so what a connection holds unsent stays small.
COALESCE_BYTES = 64 * 1024
# Kept from a frame for the debug log of a connection closed on it.
_FRAME_HEAD_LOGGED = 256
_HANDLER_FAILED = "handler of %s v%d from %s failed; closing the connection"

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
    """A SASL exchange failed; its answer has been written and the connection closes."""


class BodyTimeoutError(Exception):
    """A request body did not arrive within ``connections.max.idle.ms``."""


class HandlerFailedError(Exception):
    """A handler raised (a bug, logged where it happened); the connection closes."""


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
        self._accepting: set[asyncio.Task[None]] = set()
        self.bound: list[BoundListener] = []

    async def start(self, listeners: list[ListenerSpec]) -> list[BoundListener]:
        loop = asyncio.get_running_loop()
        for spec in listeners:
            security = spec.security

            def factory(
                name: str = spec.name, sec: ListenerSecurity | None = security
            ) -> FrameProtocol:
                return FrameProtocol(
                    READ_AHEAD_BYTES, lambda protocol: self._connected(protocol, name, sec)
                )

            server = await loop.create_server(
                factory,
                spec.host,
                spec.port,
                reuse_address=True,
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
        # Aborting the transports cancels each connection's request in progress and ends its
        # loop.
        for connection in list(self._connections):
            connection.abort()
        if self._connections:
            await asyncio.wait([c.finished for c in self._connections], timeout=5)
        for server in self._servers:
            await server.wait_closed()

    def _connected(
        self, protocol: FrameProtocol, listener: str, security: ListenerSecurity | None
    ) -> None:
        task = asyncio.get_running_loop().create_task(self._accept(protocol, listener, security))
        self._accepting.add(task)
        task.add_done_callback(self._accepting.discard)

    async def _accept(
        self,
        protocol: FrameProtocol,
        listener: str,
        security: ListenerSecurity | None = None,
    ) -> None:
        transport = protocol.transport
        assert transport is not None
        if len(self._connections) >= self.max_connections:
            log.warning(
                "refusing a connection on %s: max.connections=%d reached",
                listener,
                self.max_connections,
            )
            transport.close()
            return
        set_send_buffer(transport, self.send_buffer_bytes)
        peer = transport.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        connection = Connection(self, protocol, listener, address, security)
        self._connections.add(connection)
        protocol.watch(connection.peer_gone)
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
            connection.finished.set_result(None)


class Connection:
    """One client connection, served one request at a time."""

    def __init__(
        self,
        server: SocketServer,
        protocol: FrameProtocol,
        listener: str,
        address: str,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.server = server
        self.protocol = protocol
        assert protocol.transport is not None
        self.transport: asyncio.Transport = protocol.transport
        self.listener = listener
        self.address = address
        ssl_object = self.transport.get_extra_info("ssl_object")
        # TLS encrypts in user space: record bytes cannot go from the file to the socket
        # with sendfile there, they are read and written (see core.server.response_frame).
        self._sendfile = ssl_object is None
        certificate = ssl_object.getpeercert() if ssl_object is not None else None
        self.principal = principal_of_certificate(certificate) or ANONYMOUS
        self.sasl: SaslSession | None = None
        # sasl.server.max.receive.size: the largest frame read before authentication.
        self.sasl_max_receive = 0
        if security is not None and security.sasl is not None:
            self.sasl = SaslSession(security.sasl, server.codec, address)
            self.sasl_max_receive = security.sasl_max_receive_size
        # KIP-219: no request is read before this loop time (a quota's throttle).
        self._unmute_at = 0.0
        # The answer in hand waits out the throttle before it is written (pre-KIP-219).
        self._answer_held = False
        # Set with ``_gone``: ends a throttle wait.
        self._gone_event = asyncio.Event()
        self._last_frame_head: bytes | None = None
        # The wait for room in the memory pool, cancelled when the peer goes.
        self._pool_wait: asyncio.Task[Reservation] | None = None
        # The connection's task, which runs the handlers; set by ``run``.
        self._task: asyncio.Task[Any] | None = None
        self._serving = False  # a handler is in progress
        self._cancel_sent = False  # the handler in progress has been cancelled
        self._gone = False  # the peer has closed its end or the connection is lost
        self._aborted = False  # the broker is closing the connection
        # Answers not written yet (``_queue_answer``), in request order, and their size.
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flush_scheduled = False
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def abort(self) -> None:
        """Close the connection now: the request in progress is cancelled, no other frame
        is served."""
        self._aborted = True
        self.transport.abort()
        self.peer_gone()  # asyncio reports the lost connection later; stop waiting now

    def peer_gone(self) -> None:
        """The peer has gone: nobody will read the answer of the request in progress, so
        stop it (a parked long-poll fetch would otherwise wait out its max.wait.ms)."""
        self._gone = True
        self._gone_event.set()
        self._cancel_handler()
        if self._pool_wait is not None:
            self._pool_wait.cancel()

    def _cancel_handler(self) -> None:
        if self._serving and not self._cancel_sent and self._task is not None:
            self._cancel_sent = True
            self._task.cancel()

    async def run(self) -> None:
        self._task = asyncio.current_task()
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
        except HandlerFailedError:
            self.transport.abort()  # logged where the handler failed
        except WriteStalledError as e:
            # Kafka's idle expiry covers a send that makes no progress; close() would wait
            # for the unread bytes forever.
            log.info("closing connection %s on %s: %s", self.address, self.listener, e)
            self.transport.abort()
        except TruncatedRecordsError as e:
            log.warning("closing connection %s on %s: %s", self.address, self.listener, e)
            self.transport.abort()  # the frame announced more bytes than it carries
        except InvalidRequestError as e:
            log.warning("closing connection %s on %s: %s", self.address, self.listener, e)
            if self._last_frame_head is not None and log.isEnabledFor(logging.DEBUG):
                log.debug("the frame began %s", self._last_frame_head.hex())
        finally:
            # close() sends what is still buffered first (a SASL failure's answer, the
            # answers queued before the client's end of stream).
            self._flush_answers()
            self.transport.close()
            await self.protocol.closed

    async def _read_loop(self) -> None:
        server = self.server
        while not self._aborted:
            # Muted for a quota: nothing is read (nor counted as idle) until it is over.
            if self._unmute_at:
                await self._throttle_ends()
            if self.protocol.frame_buffered():
                # The next frame is here already: no wait, so no idle timer (a timer
                # handle per request costs more than the rest of reading the frame).
                head = await self.protocol.read_exactly(4)
            else:
                # Nothing more to serve without waiting for the client: answer now.
                self._flush_answers()
                # Waiting for a request is the only time a connection is idle.
                async with asyncio.timeout(server.idle_timeout_s):
                    head = await self.protocol.read_exactly(4)
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
            await self._serve_frame(size)

    async def _throttle_ends(self) -> None:
        """While the connection is muted for a quota (KIP-219), wait: it is read again once
        the throttle time of its last throttled answer has passed, or at once if the peer
        goes."""
        delay = self._unmute_at - asyncio.get_running_loop().time()
        if delay > 0 and not self._gone:
            self._flush_answers()  # the answers before the throttle are not held by it
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._gone_event.wait()

    def _throttled(self, answer: ThrottledResponse) -> Any:
        """Mute the connection for ``answer``'s throttle time, from now, and note whether
        the answer itself waits that long (an older client, before KIP-219). Returns the
        response."""
        loop = asyncio.get_running_loop()
        self._unmute_at = max(self._unmute_at, loop.time() + answer.throttle_ms / 1000)
        self._answer_held = answer.delay_response
        return answer.response

    async def _serve_frame(self, size: int) -> None:
        """Reserve memory for a frame, read it, serve it and write its answer; the memory is
        released as soon as the handler is done. (A method of its own so that nothing of the
        frame or its answer stays referenced from the read loop while it waits for the next
        one.)"""
        reservation = await self._reserve(size)
        self._answer_held = False
        try:
            answer = await self._read_and_handle(size, reservation)
        finally:
            reservation.release()
        if self._answer_held:
            # Throttled, for a client before KIP-219: the answer waits out the throttle
            # (with the frame's memory released), unless nobody is left to read it.
            await self._throttle_ends()
            if self._gone:
                return
        if isinstance(answer, ResponseFrame):
            # Like Kafka, the next request waits until this answer is on its way (after
            # the answers before it).
            self._flush_answers()
            await send_response(
                self.transport,
                self.protocol,
                answer,
                sendfile=self._sendfile,
                stall_timeout_s=self.server.idle_timeout_s,
            )
        elif answer is not None:
            self._queue_answer(answer)
            if self._pending_bytes >= COALESCE_BYTES:
                self._flush_answers()
            # Like Kafka, the next request waits until this answer is on its way: drain()
            # holds the loop while asyncio's write buffer is over its high-water mark. A
            # client that reads nothing of it for connections.max.idle.ms is closed.
            await self.protocol.drain(self.server.idle_timeout_s)

    def _queue_answer(self, answer: bytes) -> None:
        """Queue an answer behind the ones not written yet; they are written together once
        the connection has no whole request left to serve (``_read_loop``), or at the end
        of this turn of the event loop if a handler waits first. A producer pipelining
        small requests thus gets one ``send`` for the answers to all the frames that had
        arrived, instead of one per answer (a ``send`` on loopback also runs the peer's
        receive path: it was a quarter of the event loop's time under the load soak)."""
        self._pending.append(answer)
        self._pending_bytes += len(answer)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_answers)

    def _flush_answers(self) -> None:
        """Write the queued answers, in order, in one ``write``."""
        self._flush_scheduled = False
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self._pending_bytes = 0
        if not self.transport.is_closing():
            self.transport.write(data)

    async def _reserve(self, size: int) -> Reservation:
        """Room for a frame of ``size`` bytes in the broker-wide memory pool; while it
        waits, this connection is not read."""
        pool = self.server.memory_pool
        admitted = pool.try_reserve(size)
        if admitted is not None:
            return admitted
        if self._gone:
            raise ConnectionAbortedError("the client went away; its frame is not served")
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

    async def _read_and_handle(
        self, size: int, reservation: Reservation
    ) -> bytes | ResponseFrame | None:
        """Read one frame's body into ``reservation`` and serve it: the encoded answer to
        write, or None when there is none (acks=0 produce, a request cut short because the
        client went away)."""
        server = self.server
        try:
            if self.protocol.buffered() >= size:
                frame = await self.protocol.read_body(size)  # here already: no wait
            else:
                async with asyncio.timeout(server.idle_timeout_s):
                    frame = await self.protocol.read_body(size)
        except TimeoutError:
            raise BodyTimeoutError(
                f"the body of a {size}-byte request did not arrive within "
                f"connections.max.idle.ms={int((server.idle_timeout_s or 0) * 1000)}"
            ) from None
        reservation.frame = frame
        self._last_frame_head = bytes(frame[:_FRAME_HEAD_LOGGED])
        if self.sasl is not None and self.sasl.raw_tokens:
            return self._raw_token(bytes(frame))
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
            return server.codec.encode_response(context, server.unsupported_version(context))
        if self.sasl is not None and not self.sasl.complete:
            return await self._authenticate(context, request)
        return await self._handle(context, request)

    async def _handle(self, context: RequestContext, request: Any) -> bytes | ResponseFrame | None:
        """Run the request's handler to its end (in this connection's task, so that it
        starts at once: what it does before its first ``await`` is done even if the client
        goes away right after sending it) and encode its response."""
        if self._aborted:
            raise ConnectionAbortedError("the connection is being closed")
        task = self._task
        assert task is not None
        self._serving = True
        if self._gone:
            # A frame that arrived before the end of the stream: served up to its first
            # await, then cancelled like the request in progress when the client went.
            asyncio.get_running_loop().call_soon(self._cancel_handler)
        cut_short = False
        try:
            response = await self.server.handler(context, request)
        except asyncio.CancelledError:
            if not self._cancel_sent:
                if task.cancelling():
                    raise  # the connection's task itself is being cancelled
                # A future inside the handler was cancelled under it: a bug like any other.
                log.exception(_HANDLER_FAILED, *_describe(context, self.address))
                raise HandlerFailedError from None
            response = None
        except Exception:
            log.exception(_HANDLER_FAILED, *_describe(context, self.address))
            raise HandlerFailedError from None
        finally:
            self._serving = False
            if self._cancel_sent:
                # Cancelled because the client went away, whether the handler let the
                # cancellation through or not; the task itself carries on.
                self._cancel_sent = False
                cut_short = True
                if task.uncancel():
                    raise asyncio.CancelledError  # the task was also cancelled from outside
        if cut_short:
            return None
        if isinstance(response, ThrottledResponse):
            response = self._throttled(response)
        if response is None:
            return None
        return self.server.codec.encode_response_frame(context, response)

    async def _authenticate(
        self, context: RequestContext, request: Any
    ) -> bytes | ResponseFrame | None:
        """A request before the SASL exchange has completed (Kafka's
        SaslServerAuthenticator): ApiVersions is served, SaslHandshake and
        SaslAuthenticate drive the exchange, anything else closes the connection.
        Returns the answer to write, as ``_read_and_handle``.

        Raises:
            InvalidRequestError: a request that is not allowed yet.
            AuthenticationEndedError: the exchange failed (its answer is written).
        """
        session = self.sasl
        assert session is not None
        if not session.allows(context.api_key):
            raise InvalidRequestError(
                f"unexpected {_api_name(context.api_key)} request before SASL "
                "authentication completed"
            )
        if context.api_key == ApiKey.API_VERSIONS:
            return await self._handle(context, request)
        response, close = session.answer(context, request)
        answer = self.server.codec.encode_response(context, response)
        if close:
            self._queue_answer(answer)
            self._flush_answers()  # sent by the close that follows
            raise AuthenticationEndedError
        if session.complete and session.principal is not None:
            self.principal = session.principal
        return answer

    def _raw_token(self, token: bytes) -> bytes:
        """SaslHandshake v0: after the handshake, SASL messages travel as bare size-prefixed
        tokens, not Kafka requests; a failure just closes the connection (Kafka's way)."""
        session = self.sasl
        assert session is not None
        answer = session.raw_token(token)
        if answer is None:
            raise AuthenticationEndedError
        if session.complete and session.principal is not None:
            self.principal = session.principal
        return _SIZE.pack(len(answer)) + answer


def _describe(context: RequestContext, address: str) -> tuple[str, int, str]:
    return _api_name(context.api_key), context.api_version, address


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)
