"""One connection's SASL authentication exchange on a SASL listener.

A connection on a SASL listener starts unauthenticated. Until the exchange completes it may
send ApiVersions, one SaslHandshake (choosing a mechanism) and then SaslAuthenticate
requests carrying the mechanism's messages; any other request closes the connection, as
Kafka's SaslServerAuthenticator does. A refused mechanism or failed authentication is
answered (UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED with Kafka's message) and
then the connection is closed.

The socket server (``core.server.network``) drives a ``SaslSession`` per connection; the
mechanisms themselves are ``core.server.sasl``. Once the exchange is over, and on listeners
without SASL, the two APIs go to their request handlers (``core.server.sasl_apis``).
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.kio_build import make
from core.server.protocol import ProtocolCodec, RequestContext
from core.server.sasl import SaslAuthenticationError, SaslCredentials, SaslServer

log = logging.getLogger(__name__)


class _Stage(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"


class SaslSession:
    """One connection's authentication on a SASL listener."""

    def __init__(self, credentials: SaslCredentials, codec: ProtocolCodec, address: str) -> None:
        self.credentials = credentials
        self.codec = codec
        self.address = address
        self._stage = _Stage.HANDSHAKE
        self._server: SaslServer | None = None
        self._mechanism = ""
        self.principal: str | None = None
        # SaslHandshake v0: the exchange continues with bare tokens instead of
        # SaslAuthenticate requests.
        self.raw_tokens = False

    @property
    def complete(self) -> bool:
        return self._stage is _Stage.COMPLETE

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be served before authentication ends."""
        return api_key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)

    def answer(self, context: RequestContext, request: Any) -> tuple[Any, bool]:
        """The response to a SaslHandshake or SaslAuthenticate request, and whether the
        connection must close once it is sent."""
        response_type = self.codec.response_type(context.api_key, context.api_version)
        if context.api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(response_type, request)
        return self._authenticate(response_type, request)

    def _handshake(self, response_type: type, request: Any) -> tuple[Any, bool]:
        enabled = self.credentials.mechanisms
        if self._stage is not _Stage.HANDSHAKE:
            return make(
                response_type, error_code=ErrorCode.illegal_sasl_state, mechanisms=enabled
            ), True
        mechanism = request.mechanism
        if mechanism not in enabled:
            log.info(
                "connection %s asked for SASL mechanism %s; enabled: %s",
                self.address,
                mechanism,
                ", ".join(enabled),
            )
            return make(
                response_type, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled
            ), True
        self._server = self.credentials.server(mechanism)
        self._mechanism = mechanism
        self._stage = _Stage.AUTHENTICATE
        self.raw_tokens = response_type.__version__ == 0
        return make(response_type, error_code=ErrorCode.none, mechanisms=enabled), False

    def _authenticate(self, response_type: type, request: Any) -> tuple[Any, bool]:
        if self._stage is not _Stage.AUTHENTICATE or self._server is None:
            return make(
                response_type,
                error_code=ErrorCode.illegal_sasl_state,
                error_message="SaslAuthenticate before a SaslHandshake",
                auth_bytes=b"",
            ), True
        try:
            out = self._server.evaluate(bytes(request.auth_bytes))
        except SaslAuthenticationError as e:
            # Logged without the client's messages: they may carry a password.
            log.info("SASL/%s authentication of %s failed: %s", self._mechanism, self.address, e)
            return make(
                response_type,
                error_code=ErrorCode.sasl_authentication_failed,
                error_message=str(e),
                auth_bytes=b"",
            ), True
        self._complete_if_done()
        return make(
            response_type, error_code=ErrorCode.none, error_message=None, auth_bytes=out
        ), False

    def raw_token(self, token: bytes) -> bytes | None:
        """One bare SASL message after a v0 handshake: the answer, or None when the
        exchange failed (the connection closes)."""
        assert self._server is not None
        try:
            out = self._server.evaluate(token)
        except SaslAuthenticationError as e:
            log.info("SASL/%s authentication of %s failed: %s", self._mechanism, self.address, e)
            return None
        self._complete_if_done()
        return out

    def _complete_if_done(self) -> None:
        assert self._server is not None
        if self._server.complete:
            self._stage = _Stage.COMPLETE
            self.raw_tokens = False
            self.principal = f"User:{self._server.user}"
            log.info(
                "%s authenticated as %s (SASL/%s)", self.address, self.principal, self._mechanism
            )
