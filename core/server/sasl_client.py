"""SASL on the client side, for a broker's connections to other brokers: PLAIN and
SCRAM-SHA-256/512.

The client mechanisms mirror core.server.sasl's servers and share its key derivation
(``scram_keys``), so the SCRAM arithmetic exists once. SCRAM follows RFC 5802 as Kafka's
ScramSaslClient does: no channel binding (gs2 header ``n,,``), no authorization id, the
server's nonce must extend the client's, at least 4096 iterations, and the server's final
signature is verified before the exchange counts as complete.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from core.server.sasl import (
    PLAIN,
    SCRAM_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslAuthenticationError,
    scram_hmac,
    scram_keys,
)

CLIENT_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
_GS2_HEADER = "n,,"


@dataclass(frozen=True, slots=True)
class SaslClientCredentials:
    """Who this broker is to its peers: a mechanism, a user and a password (never shown)."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def client(self) -> SaslClient:
        """A fresh client-side exchange for one connection."""
        if self.mechanism == PLAIN:
            return PlainSaslClient(self.username, self.password)
        if self.mechanism in (SCRAM_SHA_256, SCRAM_SHA_512):
            return ScramSaslClient(self.mechanism, self.username, self.password)
        raise ValueError(f"SASL mechanism {self.mechanism} has no client in tierlog")


class SaslClient(ABC):
    """One connection's client side of a SASL exchange.

    ``initial()`` is the first message; each server answer goes to ``evaluate``, which
    returns the next message, or None once ``complete`` is true.
    """

    def __init__(self) -> None:
        self.complete = False

    @abstractmethod
    def initial(self) -> bytes: ...

    @abstractmethod
    def evaluate(self, challenge: bytes) -> bytes | None:
        """The next client message for the server's ``challenge``.

        Raises:
            SaslAuthenticationError: the server's message is malformed or does not prove
                that it knows the password.
        """


class PlainSaslClient(SaslClient):
    """RFC 4616: one message ``NUL user NUL password``; the server answers nothing."""

    def __init__(self, username: str, password: str) -> None:
        super().__init__()
        self._message = b"\0" + username.encode() + b"\0" + password.encode()

    def initial(self) -> bytes:
        return self._message

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self.complete:
            raise SaslAuthenticationError("PLAIN authentication is already complete")
        self.complete = True
        return None


class ScramSaslClient(SaslClient):
    """RFC 5802 client: client-first -> server-first -> client-final -> server-final."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str = "") -> None:
        super().__init__()
        self._mechanism = mechanism
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_sasl_name(username)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def initial(self) -> bytes:
        return (_GS2_HEADER + self._client_first_bare).encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        try:
            message = challenge.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SaslAuthenticationError("Invalid SCRAM server message: not UTF-8") from e
        if self.complete:
            raise SaslAuthenticationError("SCRAM authentication is already complete")
        if self._server_signature is None:
            return self._client_final(message).encode()
        self._check_server_final(message)
        return None

    def _client_final(self, server_first: str) -> str:
        attributes = _attributes(server_first)
        nonce = attributes.get("r", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationError("Invalid SCRAM server-first message: nonce")
        try:
            salt = base64.b64decode(attributes.get("s", ""), validate=True)
            iterations = int(attributes.get("i", ""))
        except ValueError as e:
            raise SaslAuthenticationError("Invalid SCRAM server-first message") from e
        if iterations < SCRAM_ITERATIONS:
            raise SaslAuthenticationError(
                f"SCRAM server asked for {iterations} iterations; the minimum is {SCRAM_ITERATIONS}"
            )
        without_proof = f"c={base64.b64encode(_GS2_HEADER.encode()).decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        client_key, stored_key, server_key = scram_keys(
            self._mechanism, self._password, salt, iterations
        )
        signature = scram_hmac(self._mechanism, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = scram_hmac(self._mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}"

    def _check_server_final(self, server_final: str) -> None:
        attributes = _attributes(server_final)
        if "e" in attributes:
            raise SaslAuthenticationError(f"SCRAM server refused: {attributes['e']}")
        try:
            signature = base64.b64decode(attributes.get("v", ""), validate=True)
        except ValueError as e:
            raise SaslAuthenticationError("Invalid SCRAM server-final message") from e
        assert self._server_signature is not None
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslAuthenticationError(
                "SCRAM server signature does not match: the server does not know the password"
            )
        self.complete = True


def _attributes(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def _sasl_name(name: str) -> str:
    """RFC 5802 saslname: ',' is written '=2C' and '=' is written '=3D'."""
    return name.replace("=", "=3D").replace(",", "=2C")
