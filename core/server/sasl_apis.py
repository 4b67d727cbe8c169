"""SaslHandshake and SaslAuthenticate outside an authentication exchange.

The exchange of a SASL listener is a connection concern, driven by the socket server through
``core.server.sasl_session.SaslSession``. The handlers here answer the two APIs where no
exchange is going on (a non-SASL listener, or a connection already authenticated: tierlog
does not re-authenticate, ``connections.max.reauth.ms`` being 0 as Kafka's default) with
ILLEGAL_SASL_STATE, as Kafka's request handlers do.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.handler_support import BrokerServices, Handler
from core.server.kio_build import make
from core.server.protocol import RequestContext


async def handle_sasl_handshake(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    return make(response_type, error_code=ErrorCode.illegal_sasl_state, mechanisms=())


async def handle_sasl_authenticate(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    return make(
        response_type,
        error_code=ErrorCode.illegal_sasl_state,
        error_message="no SASL exchange on this connection",
        auth_bytes=b"",
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
}
