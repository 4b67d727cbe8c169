"""BrokerConnection: one Kafka protocol connection from this broker to another broker.

Requests are kio message classes (``core.server.interbroker_schema`` for the controller's
APIs). Each is framed as Kafka's clients frame it: a 4-byte size, the request header (v2
for flexible versions, v1 otherwise) with a fresh correlation id and the client id, the
body. Several requests may be in flight; the peer answers in order, and every response is
matched to the oldest request waiting (its correlation id must agree). A response is received
into a buffer of its own (core.server.frame_protocol, as the broker's own connections)
behind a size bounded by ``max_response_bytes``, walked by
``frame_guard`` (a size the frame cannot hold would make kio's native reader abort the
process) and decoded with kio: response header v1 for flexible versions, v0 otherwise and
always for ApiVersions.

Opening a connection, as Kafka's NetworkClient and SaslClientAuthenticator do:

1. TCP, and TLS when the security settings carry an ``ssl.SSLContext``;
2. ApiVersions v3 (on UNSUPPORTED_VERSION, which a broker answers in the v0 layout, again at
   the highest version the peer lists, else v0), giving the peer's version ranges;
3. with SASL, SaslHandshake v1 and SaslAuthenticate until the mechanism completes.

Callers name an api key and the versions they can build; ``call`` picks the highest both
sides speak. A request that gets no answer within its timeout (Kafka's
``request.timeout.ms``; a fetcher passes ``replica.socket.timeout.ms``) closes the
connection, as Kafka's NetworkClient does: later answers could no longer be matched. Closing
fails every request still waiting with ConnectionClosedError, chained to what closed it.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import importlib.metadata
import io
import logging
import ssl
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from core.errors import CoreError
from core.server.api_keys import ApiKey
from core.server.errors import InvalidRequestError
from core.server.frame_guard import check_frame
from core.server.frame_protocol import FrameProtocol
from core.server.kio_build import make
from core.server.protocol import load_request_schema, load_response_schema
from core.server.sasl import SaslAuthenticationError
from core.server.security import ClientSecurity

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
INT32_MAX = 2**31 - 1
DEFAULT_MAX_RESPONSE_BYTES = 104_857_600  # as socket.request.max.bytes
# Read ahead per connection; a larger response is received straight into its own buffer.
READ_AHEAD_BYTES = 64 * 1024
API_VERSIONS_VERSION = 3
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSIONS = (0, 2)
CLIENT_SOFTWARE_NAME = "tierlog"


# -- errors ---------------------------------------------------------------------------------
class BrokerClientError(CoreError):
    """Base of the errors of tierlog's broker-to-broker client."""


class ConnectFailedError(BrokerClientError):
    """No connection could be made (refused, unreachable, timed out): NETWORK_EXCEPTION."""

    error_code = 13
    retriable = True


class ConnectionClosedError(BrokerClientError):
    """The connection closed before the answer came: NETWORK_EXCEPTION.

    ``__cause__`` is what closed it: the peer, a timeout of another request, a malformed
    response, or nothing when this side closed it.
    """

    error_code = 13
    retriable = True


class RequestTimeoutError(BrokerClientError):
    """No answer within the request's timeout (REQUEST_TIMED_OUT); the connection closes."""

    error_code = 7
    retriable = True


class AuthenticationFailedError(BrokerClientError):
    """The TLS handshake or the SASL exchange failed (SASL_AUTHENTICATION_FAILED)."""

    error_code = 58


class NoCommonVersionError(BrokerClientError):
    """The peer speaks none of the versions the caller can build (UNSUPPORTED_VERSION)."""

    error_code = 35


class ProtocolViolationError(BrokerClientError):
    """The peer sent something that is not a valid answer; the connection closes."""


# -- framing --------------------------------------------------------------------------------
@functools.cache
def _request_writers(request_type: type) -> tuple[Any, Any]:
    return entity_writer(request_type.__header_schema__), entity_writer(request_type)


@functools.cache
def _response_type(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@functools.cache
def _response_readers(response_type: type) -> tuple[Any, Any]:
    return entity_reader(response_type.__header_schema__), entity_reader(response_type)


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The request's frame, size prefix included."""
    request_type = type(request)
    header_type = request_type.__header_schema__
    write_header, write_body = _request_writers(request_type)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    write_header(
        out,
        header_type(
            request_api_key=i16(request_type.__api_key__),
            request_api_version=i16(request_type.__version__),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    write_body(out, request)
    size = out.tell() - 4
    out.seek(0)
    out.write(_SIZE.pack(size))
    return out.getvalue()


def decode_response(response_type: type, frame: bytes | memoryview) -> Any:
    """The body of a response frame (without its size prefix) of ``response_type``.

    Raises:
        ProtocolViolationError: the frame does not hold a response of that type.
    """
    header_type = response_type.__header_schema__
    read_header, read_body = _response_readers(response_type)
    try:
        check_frame(response_type, header_type, frame)
    except InvalidRequestError as e:
        raise ProtocolViolationError(f"malformed {response_type.__name__}: {e}") from e
    try:
        _, used = read_header(frame, 0)
        body, _ = read_body(frame, used)
    except Exception as e:  # kio raises assorted errors for malformed input
        raise ProtocolViolationError(f"malformed {response_type.__name__}: {e}") from e
    return body


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"


# -- the connection -------------------------------------------------------------------------
@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    response_type: type
    future: asyncio.Future[Any]
    timer: asyncio.TimerHandle | None = None


class BrokerConnection:
    """One open connection to another broker. Make it with ``await BrokerConnection.open``."""

    def __init__(
        self,
        protocol: FrameProtocol,
        *,
        address: str,
        client_id: str,
        request_timeout_ms: int,
        max_response_bytes: int,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_response_bytes = max_response_bytes
        self._protocol = protocol
        assert protocol.transport is not None
        self._transport = protocol.transport
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._next_correlation_id = 0
        self._api_versions: dict[int, tuple[int, int]] = {}
        self._closed = False
        self.close_cause: BaseException | None = None
        self.closed_at: float | None = None  # the event loop's clock
        self._read_task = asyncio.create_task(self._read_loop(), name=f"read {address}")

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str,
        security: ClientSecurity | None = None,
        connect_timeout_ms: int = 10_000,
        request_timeout_ms: int = 30_000,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> BrokerConnection:
        """Connect, learn the peer's api versions and authenticate.

        Raises:
            ConnectFailedError: no TCP connection within ``connect_timeout_ms``.
            AuthenticationFailedError: the TLS handshake or SASL failed.
            RequestTimeoutError, ConnectionClosedError, ProtocolViolationError: the
                ApiVersions or SASL exchange did not complete.
        """
        address = f"{host}:{port}"
        context = security.ssl_context if security is not None else None
        try:
            async with asyncio.timeout(connect_timeout_ms / 1000):
                _, protocol = await asyncio.get_running_loop().create_connection(
                    lambda: FrameProtocol(READ_AHEAD_BYTES, lambda _: None),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
        except ssl.SSLError as e:
            raise AuthenticationFailedError(f"TLS handshake with {address} failed: {e}") from e
        except TimeoutError as e:
            raise ConnectFailedError(
                f"no connection to {address} within {connect_timeout_ms} ms"
            ) from e
        except OSError as e:
            raise ConnectFailedError(f"cannot connect to {address}: {e}") from e
        connection = cls(
            protocol,
            address=address,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            max_response_bytes=max_response_bytes,
        )
        try:
            await connection._learn_api_versions()
            if security is not None and security.sasl is not None:
                await connection._authenticate(security)
        except BaseException:
            await connection.close()
            raise
        return connection

    async def _learn_api_versions(self) -> None:
        version = API_VERSIONS_VERSION
        for _ in range(2):
            response = await self.send(self._api_versions_request(version), check_version=False)
            if response.error_code == ErrorCode.none:
                self._api_versions = {
                    int(k.api_key): (int(k.min_version), int(k.max_version))
                    for k in response.api_keys
                }
                return
            if response.error_code != ErrorCode.unsupported_version or version == 0:
                break
            # Kafka's rule: retry at the highest version the peer lists, else v0.
            listed = {int(k.api_key): int(k.max_version) for k in response.api_keys}
            version = min(listed.get(ApiKey.API_VERSIONS, 0), version - 1)
        raise ProtocolViolationError(
            f"ApiVersions v{version} to {self.address} failed: {response.error_code.name}"
        )

    def _api_versions_request(self, version: int) -> Any:
        return make(
            load_request_schema(ApiKey.API_VERSIONS, version),
            client_software_name=CLIENT_SOFTWARE_NAME,
            client_software_version=_software_version(),
        )

    async def _authenticate(self, security: ClientSecurity) -> None:
        credentials = security.sasl
        assert credentials is not None
        mechanism = credentials.mechanism
        handshake = await self.call(
            ApiKey.SASL_HANDSHAKE,
            lambda v: make(load_request_schema(ApiKey.SASL_HANDSHAKE, v), mechanism=mechanism),
            versions=(SASL_HANDSHAKE_VERSION, SASL_HANDSHAKE_VERSION),
        )
        if handshake.error_code != ErrorCode.none:
            raise self._auth_failed(
                f"SASL handshake with {self.address} failed ({handshake.error_code.name}): "
                f"it enables {', '.join(handshake.mechanisms) or 'no mechanism'}, this "
                f"broker uses {mechanism}"
            )
        client = credentials.client()
        token: bytes | None = client.initial()
        version = self.version(ApiKey.SASL_AUTHENTICATE, *SASL_AUTHENTICATE_VERSIONS)
        request_type = load_request_schema(ApiKey.SASL_AUTHENTICATE, version)
        while token is not None:
            response = await self.send(make(request_type, auth_bytes=token))
            if response.error_code != ErrorCode.none:
                raise self._auth_failed(
                    f"SASL/{mechanism} authentication to {self.address} as "
                    f"{credentials.username} failed: {response.error_message}"
                )
            try:
                # SCRAM's key derivation is thousands of hash rounds: off the event loop.
                token = await asyncio.to_thread(client.evaluate, bytes(response.auth_bytes))
            except SaslAuthenticationError as e:
                raise self._auth_failed(
                    f"SASL/{mechanism} authentication to {self.address}: {e}"
                ) from e
        log.debug(
            "authenticated to %s as %s (SASL/%s)", self.address, credentials.username, mechanism
        )

    def _auth_failed(self, message: str) -> AuthenticationFailedError:
        error = AuthenticationFailedError(message)
        self._shutdown(error)
        return error

    # -- versions ---------------------------------------------------------------------------
    @property
    def api_versions(self) -> Mapping[int, tuple[int, int]]:
        """The peer's version range per api key, from its ApiVersions answer."""
        return self._api_versions

    def version(self, api_key: int, low: int, high: int) -> int:
        """The highest version in ``low..high`` that the peer speaks too.

        Raises:
            NoCommonVersionError: none.
        """
        peer = self._api_versions.get(api_key)
        if peer is None:
            raise NoCommonVersionError(
                f"the broker at {self.address} does not serve {api_name(api_key)}"
            )
        best = min(high, peer[1])
        if best < max(low, peer[0]):
            raise NoCommonVersionError(
                f"{api_name(api_key)}: this broker can send v{low}-v{high}, the broker at "
                f"{self.address} serves v{peer[0]}-v{peer[1]}"
            )
        return best

    # -- requests ---------------------------------------------------------------------------
    async def call(
        self,
        api_key: int,
        build: Callable[[int], Any],
        *,
        versions: tuple[int, int],
        timeout_ms: int | None = None,
    ) -> Any:
        """Send ``build(version)`` at the highest version in ``versions`` the peer speaks.

        Raises:
            NoCommonVersionError, RequestTimeoutError, ConnectionClosedError,
            ProtocolViolationError.
        """
        version = self.version(api_key, *versions)
        request = build(version)
        if (type(request).__api_key__, type(request).__version__) != (api_key, version):
            raise TypeError(
                f"build({version}) made {type(request).__name__} v{type(request).__version__}"
                f", not {api_name(api_key)} v{version}"
            )
        return await self.send(request, timeout_ms=timeout_ms)

    async def send(
        self, request: Any, *, timeout_ms: int | None = None, check_version: bool = True
    ) -> Any:
        """Send one request (a kio request object) and wait for its response body.

        Produce with acks=0 gets no answer from a broker: None is returned once it is sent.

        Raises:
            NoCommonVersionError: the peer does not speak the request's version.
            RequestTimeoutError: no answer within ``timeout_ms`` (default: the connection's
                ``request_timeout_ms``); the connection is closed.
            ConnectionClosedError: the connection closed first (``__cause__`` says why).
            ProtocolViolationError: the answer is not a valid response.
        """
        request_type = type(request)
        api_key, version = int(request_type.__api_key__), int(request_type.__version__)
        if self._closed:
            raise self._closed_error(f"{api_name(api_key)} not sent")
        if check_version:
            self.version(api_key, version, version)
        correlation_id = self._next_correlation_id
        self._next_correlation_id = 0 if correlation_id == INT32_MAX else correlation_id + 1
        frame = encode_request(request, correlation_id, self.client_id)
        expects_response = not (api_key == ApiKey.PRODUCE and request.acks == 0)
        loop = asyncio.get_running_loop()
        in_flight = _InFlight(
            correlation_id, _response_type(api_key, version), loop.create_future()
        )
        if expects_response:
            timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
            in_flight.timer = loop.call_later(
                timeout / 1000, self._expire, in_flight, api_key, timeout
            )
            self._in_flight.append(in_flight)
        self._transport.write(frame)
        try:
            await self._protocol.drain()
        except (ConnectionError, OSError) as e:
            self._shutdown(e)
            if not expects_response:
                raise self._closed_error(f"{api_name(api_key)} not sent") from None
        if not expects_response:
            return None
        return await in_flight.future

    def _expire(self, in_flight: _InFlight, api_key: int, timeout_ms: int) -> None:
        if in_flight.future.done():
            return
        error = RequestTimeoutError(
            f"{api_name(api_key)} request to {self.address} got no response within "
            f"{timeout_ms} ms; closing the connection"
        )
        in_flight.future.set_exception(error)
        self._shutdown(error)

    async def _read_loop(self) -> None:
        try:
            while True:
                head = await self._protocol.read_exactly(4)
                size = _SIZE.unpack(head)[0]
                if size < 4 or size > self.max_response_bytes:
                    raise ProtocolViolationError(
                        f"response of {size} bytes from {self.address} is outside "
                        f"4..{self.max_response_bytes}"
                    )
                self._complete(await self._protocol.read_body(size))
        except asyncio.CancelledError:
            raise
        except asyncio.IncompleteReadError:
            self._shutdown(ConnectionResetError(f"{self.address} closed the connection"))
        except (ConnectionError, OSError, ProtocolViolationError) as e:
            self._shutdown(e)
        except Exception as e:  # a bug here must not leave requests waiting for their timeout
            log.exception("reading from %s failed", self.address)
            self._shutdown(e)

    def _complete(self, frame: bytearray) -> None:
        correlation_id = _SIZE.unpack_from(frame, 0)[0]
        if not self._in_flight:
            raise ProtocolViolationError(
                f"{self.address} answered correlation id {correlation_id} with no request in flight"
            )
        in_flight = self._in_flight[0]
        if correlation_id != in_flight.correlation_id:
            raise ProtocolViolationError(
                f"{self.address} answered correlation id {correlation_id}; expected "
                f"{in_flight.correlation_id}"
            )
        self._in_flight.popleft()
        if in_flight.timer is not None:
            in_flight.timer.cancel()
        if in_flight.future.done():  # the caller stopped waiting (cancelled)
            return
        response_type = in_flight.response_type
        # A broker answers an ApiVersions version it does not serve in the v0 layout.
        if (
            response_type.__api_key__ == ApiKey.API_VERSIONS
            and len(frame) >= 6
            and _ERROR_CODE.unpack_from(frame, 4)[0] == ErrorCode.unsupported_version.value
        ):
            response_type = _response_type(ApiKey.API_VERSIONS, 0)
        try:
            # kio reads from read-only buffers: a view, not a copy, of the frame.
            readable = memoryview(frame).toreadonly()
            in_flight.future.set_result(decode_response(response_type, readable))
        except ProtocolViolationError as e:
            in_flight.future.set_exception(e)
            raise

    # -- closing ----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._in_flight)

    def _closed_error(self, what: str) -> ConnectionClosedError:
        reason = f": {self.close_cause}" if self.close_cause is not None else " by this broker"
        error = ConnectionClosedError(f"connection to {self.address} closed{reason}; {what}")
        error.__cause__ = self.close_cause
        return error

    def _shutdown(self, cause: BaseException | None) -> None:
        """Close at once and fail every request in flight, chained to ``cause``."""
        if self._closed:
            return
        self._closed = True
        self.close_cause = cause
        self.closed_at = asyncio.get_running_loop().time()
        if cause is not None:
            log.info("connection %s to %s closed: %s", self.client_id, self.address, cause)
        self._transport.abort()
        if asyncio.current_task() is not self._read_task:
            self._read_task.cancel()
        in_flight, self._in_flight = self._in_flight, collections.deque()
        for entry in in_flight:
            if entry.timer is not None:
                entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(self._closed_error("no response"))

    async def close(self) -> None:
        """Close the connection; requests in flight fail with ConnectionClosedError."""
        self._shutdown(None)
        await asyncio.gather(self._read_task, return_exceptions=True)

    async def __aenter__(self) -> BrokerConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._in_flight)} in flight"
        return f"BrokerConnection({self.client_id} -> {self.address}, {state})"


@functools.cache
def _software_version() -> str:
    try:
        return importlib.metadata.version("tierlog")
    except importlib.metadata.PackageNotFoundError:
        return "0"
