"""SASL on the broker side: the PLAIN and SCRAM-SHA-256/512 mechanisms, and the credentials
they check, read from Kafka's JAAS configuration strings.

Kafka configures a SASL listener with ``listener.name.<listener>.<mechanism>.sasl.jaas.config``
(or ``sasl.jaas.config``), for PLAIN::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";

The ``user_<name>="<password>"`` options are the accounts PLAIN accepts. For SCRAM Kafka keeps
salted credentials in its metadata, managed at run time with AlterUserScramCredentials
(``kafka-configs --alter --add-config 'SCRAM-SHA-256=[...]'``); tierlog does too
(``core.server.scram_credentials``: a ``ScramCredentialSource`` every SCRAM listener reads at
each exchange, so a change applies to the next authentication). For compatibility it also
reads ``user_<name>`` options from the SCRAM module's JAAS string, salting each password once
at start-up (4096 iterations, Kafka's minimum and default). Precedence: a run-time credential
of a user and mechanism wins over a JAAS account of the same name; deleting it brings the
JAAS account back. A SCRAM JAAS entry may thus list no account at all. Passwords are never
logged and never leave this module.

SCRAM follows RFC 5802 / RFC 7677 as Kafka's ScramSaslServer does: no channel binding
(``n,,`` only), an optional authorization id that must equal the user, the ``tokenauth``
extension refused (no delegation tokens). One difference: Kafka refuses an unknown user at
the client-first message and a wrong password at the client-final one, which tells a client
which user names exist. tierlog answers an unknown user with a challenge of the same shape
as a real one (the iteration count of real accounts and a 32-byte salt derived from the
name under a secret drawn at start-up, so it is stable per name and cannot be computed by
clients) and refuses it at the client-final message with the same answer as a wrong
password: Kafka's message for a failed SCRAM exchange, which names nothing but the
mechanism. Which of the two it was is logged by the broker at DEBUG (``core.server.sasl``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from core.errors import CoreError

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
SCRAM_ITERATIONS = 4096
_SCRAM_HASH = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
_LOGIN_MODULES = {
    PLAIN: "org.apache.kafka.common.security.plain.PlainLoginModule",
    SCRAM_SHA_256: "org.apache.kafka.common.security.scram.ScramLoginModule",
    SCRAM_SHA_512: "org.apache.kafka.common.security.scram.ScramLoginModule",
}
AUTH_FAILED = "Authentication failed: Invalid username or password"  # Kafka's, for PLAIN
SCRAM_SALT_BYTES = 32


def scram_auth_failed(mechanism: str) -> str:
    """What Kafka answers a failed SCRAM exchange (SaslServerAuthenticator: the mechanism's
    own message is withheld, "since it may contain sensitive data like the existence of
    the user")."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class SaslAuthenticationError(CoreError):
    """SASL_AUTHENTICATION_FAILED: the client's credentials or messages were refused.

    The message is sent to the client, so it never holds a password.
    """

    error_code = 58


class JaasConfigError(ValueError):
    """A JAAS configuration string that cannot be parsed (the message names no secret)."""


# -- JAAS -----------------------------------------------------------------------------------
_JAAS = re.compile(
    r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
    r"(?P<options>(?:\s+[\w.]+\s*=\s*(?:\"(?:[^\"\\]|\\.)*\"|[^\s;\"]+))*)\s*;\s*",
    re.DOTALL,
)
_OPTION = re.compile(r"([\w.]+)\s*=\s*(?:\"((?:[^\"\\]|\\.)*)\"|([^\s;\"]+))")


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """One login module entry: ``<class> <flag> key="value" ...;``.

    Returns:
        The login module class and its options (quotes removed, ``\\"`` unescaped).

    Raises:
        JaasConfigError: not one well-formed entry.
    """
    match = _JAAS.fullmatch(text)
    if match is None:
        raise JaasConfigError(
            "expected one entry '<LoginModule class> required key=\"value\" ...;'"
        )
    options = {}
    for key, quoted, bare in _OPTION.findall(match["options"]):
        options[key] = re.sub(r"\\(.)", r"\1", quoted) if bare == "" else bare
    return match["module"], options


def users_from_jaas(text: str, mechanism: str) -> dict[str, str]:
    """The ``user_<name>="<password>"`` accounts of a JAAS string for ``mechanism``.

    Raises:
        JaasConfigError: not parseable, the wrong login module, or PLAIN without any account
            (SCRAM accounts may all come from AlterUserScramCredentials).
    """
    module, options = parse_jaas(text)
    expected = _LOGIN_MODULES[mechanism]
    if module != expected:
        raise JaasConfigError(f"login module {module} does not serve {mechanism} (use {expected})")
    users = {k.removeprefix("user_"): v for k, v in options.items() if k.startswith("user_")}
    if not users and mechanism == PLAIN:
        raise JaasConfigError('no account: add user_<name>="<password>" options')
    return users


# -- credentials ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, repr=False)
class ScramCredential:
    """What a SCRAM server keeps of a password (RFC 5802 section 3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(
        cls,
        mechanism: str,
        password: str,
        *,
        iterations: int = SCRAM_ITERATIONS,
        salt: bytes | None = None,
    ) -> ScramCredential:
        """Salt and hash ``password`` (a random 32-byte salt unless one is given)."""
        salt = secrets.token_bytes(SCRAM_SALT_BYTES) if salt is None else salt
        _, stored_key, server_key = scram_keys(mechanism, password, salt, iterations)
        return cls(salt, iterations, stored_key, server_key)

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of a password a client salted itself (AlterUserScramCredentials
        sends SaltedPassword = Hi(password, salt, iterations), never the password)."""
        _, stored_key, server_key = _keys_of_salted(mechanism, salted_password)
        return cls(salt, iterations, stored_key, server_key)


def scram_keys(
    mechanism: str, password: str, salt: bytes, iterations: int
) -> tuple[bytes, bytes, bytes]:
    """RFC 5802 section 3: (ClientKey, StoredKey, ServerKey) of a password.

    Used by both sides: the server keeps StoredKey and ServerKey, the client
    (core.server.sasl_client) proves ClientKey and checks the server's signature.
    """
    hash_name = _SCRAM_HASH[mechanism]
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    return _keys_of_salted(mechanism, salted)


def _keys_of_salted(mechanism: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    hash_name = _SCRAM_HASH[mechanism]
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    return (
        client_key,
        hashlib.new(hash_name, client_key).digest(),
        hmac.digest(salted, b"Server Key", hash_name),
    )


def scram_hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    """HMAC(key, message) with the mechanism's hash (RFC 5802's signatures)."""
    return hmac.digest(key, message, _SCRAM_HASH[mechanism])


class ScramCredentialSource(Protocol):
    """SCRAM credentials managed at run time (``core.server.scram_credentials``)."""

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        """The user's current credential for ``mechanism``, or None. Thread-safe."""
        ...

    def scram_users(self, mechanism: str) -> frozenset[str]:
        """The users with a credential for ``mechanism``."""
        ...


class ScramAccounts(Mapping[str, ScramCredential]):
    """The SCRAM accounts of one listener and mechanism: run-time credentials first, then
    the JAAS accounts. Each lookup reads the source afresh."""

    def __init__(
        self,
        mechanism: str,
        jaas: Mapping[str, ScramCredential],
        runtime: ScramCredentialSource | None,
    ) -> None:
        self._mechanism = mechanism
        self._jaas = jaas
        self._runtime = runtime

    def __getitem__(self, user: str) -> ScramCredential:
        if self._runtime is not None:
            credential = self._runtime.scram_credential(self._mechanism, user)
            if credential is not None:
                return credential
        return self._jaas[user]

    def __iter__(self) -> Iterator[str]:
        runtime = self._runtime.scram_users(self._mechanism) if self._runtime else frozenset()
        return iter(sorted(runtime | set(self._jaas)))

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass(frozen=True, slots=True, repr=False)
class SaslCredentials:
    """The accounts of one listener, per enabled mechanism."""

    plain: Mapping[str, str]
    scram: Mapping[str, Mapping[str, ScramCredential]]  # the JAAS accounts
    # Keys the fake SCRAM credentials of unknown users; drawn once per SaslCredentials
    # (each listener's, at start-up), never stored or sent.
    unknown_user_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    # Run-time SCRAM credentials (AlterUserScramCredentials), shared by every listener.
    runtime_scram: ScramCredentialSource | None = None

    @property
    def mechanisms(self) -> tuple[str, ...]:
        found = ([PLAIN] if self.plain else []) + list(self.scram)
        return tuple(m for m in SUPPORTED_MECHANISMS if m in found)

    @classmethod
    def from_jaas(
        cls,
        jaas_by_mechanism: Mapping[str, str],
        runtime_scram: ScramCredentialSource | None = None,
    ) -> SaslCredentials:
        """Accounts from a JAAS string per mechanism, and the run-time SCRAM credentials.

        Raises:
            JaasConfigError: see ``users_from_jaas``.
        """
        plain: dict[str, str] = {}
        scram: dict[str, dict[str, ScramCredential]] = {}
        for mechanism, text in jaas_by_mechanism.items():
            users = users_from_jaas(text, mechanism)
            if mechanism == PLAIN:
                plain = users
            else:
                scram[mechanism] = {
                    user: ScramCredential.from_password(mechanism, password)
                    for user, password in users.items()
                }
        return cls(
            MappingProxyType(plain),
            MappingProxyType({m: MappingProxyType(u) for m, u in scram.items()}),
            runtime_scram=runtime_scram,
        )

    def server(self, mechanism: str) -> SaslServer:
        """A fresh server-side exchange for one connection.

        Raises:
            ValueError: ``mechanism`` is not enabled here.
        """
        if mechanism == PLAIN and self.plain:
            return PlainSaslServer(self.plain)
        if mechanism in self.scram:
            accounts = ScramAccounts(mechanism, self.scram[mechanism], self.runtime_scram)
            return ScramSaslServer(
                mechanism, accounts, unknown_user_secret=self.unknown_user_secret
            )
        raise ValueError(f"mechanism {mechanism} is not enabled")


# -- mechanisms -----------------------------------------------------------------------------
class SaslServer(ABC):
    """One connection's side of a SASL exchange."""

    def __init__(self) -> None:
        self.complete = False
        self.user: str | None = None

    @abstractmethod
    def evaluate(self, token: bytes) -> bytes:
        """Take the client's next message; return the server's answer (maybe empty).

        Raises:
            SaslAuthenticationError: the exchange failed; the connection must be closed.
        """


class PlainSaslServer(SaslServer):
    """RFC 4616: one message ``[authzid] NUL authcid NUL passwd``."""

    def __init__(self, users: Mapping[str, str]) -> None:
        super().__init__()
        self._users = users

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("PLAIN authentication is already complete")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN message: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user or not password:
            raise SaslAuthenticationError("Invalid SASL/PLAIN message: empty user or password")
        expected = self._users.get(user)
        # Compare even for an unknown user, so that timing does not tell users apart.
        ok = hmac.compare_digest(password.encode(), (expected or "\0" + password).encode())
        if expected is None or not ok:
            # The client is told only "failed" (it must not learn which names exist); the
            # operator may want the reason, at DEBUG.
            log.debug("PLAIN: %s", "unknown user" if expected is None else "wrong password")
            raise SaslAuthenticationError(AUTH_FAILED)
        if authzid and authzid != user:
            raise SaslAuthenticationError("Authentication failed: authorization id is not the user")
        self.user, self.complete = user, True
        return b""


class ScramSaslServer(SaslServer):
    """RFC 5802 server: client-first -> server-first -> client-final -> server-final."""

    def __init__(
        self,
        mechanism: str,
        credentials: Mapping[str, ScramCredential],
        *,
        unknown_user_secret: bytes | None = None,
    ) -> None:
        super().__init__()
        self._mechanism = mechanism
        self._hash = _SCRAM_HASH[mechanism]
        self._credentials = credentials
        self._unknown_user_secret = unknown_user_secret or secrets.token_bytes(32)
        self._state = "first"
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2_header = ""
        self._credential: ScramCredential | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8") from e
        if self._state == "first":
            return self._first(message).encode()
        if self._state == "final":
            return self._final(message).encode()
        raise SaslAuthenticationError("SCRAM authentication is already complete")

    def _first(self, message: str) -> str:
        # gs2-header: "n," (no channel binding) then [a=authzid] ","
        flag, sep, rest = message.partition(",")
        if flag != "n" or not sep:
            raise SaslAuthenticationError(
                "Invalid SCRAM client-first message: channel binding is not supported"
            )
        authzid, sep, bare = rest.partition(",")
        if not sep or (authzid and not authzid.startswith("a=")):
            raise SaslAuthenticationError("Invalid SCRAM client-first message")
        attributes = _attributes(bare)
        user = _sasl_name(attributes.get("n", ""))
        client_nonce = attributes.get("r", "")
        if not user or not client_nonce:
            raise SaslAuthenticationError("Invalid SCRAM client-first message")
        if attributes.get("tokenauth", "false").lower() == "true":
            raise SaslAuthenticationError(
                "Authentication failed: delegation tokens are not supported"
            )
        if authzid and _sasl_name(authzid[2:]) != user:
            raise SaslAuthenticationError("Authentication failed: authorization id is not the user")
        credential = self._credentials.get(user)
        if credential is None:
            # Answered like a real user and refused at the client-final message, with the
            # same answer as a wrong password: nothing tells a client the user is unknown.
            credential = self._unknown_user_credential(user)
        self.user, self._credential = user, credential
        self._gs2_header = f"n,{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + secrets.token_urlsafe(24)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first

    def _final(self, message: str) -> str:
        without_proof, sep, proof_attr = message.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError("Invalid SCRAM client-final message: no proof")
        attributes = _attributes(without_proof)
        binding = base64.b64encode(self._gs2_header.encode()).decode()
        # Kafka's check is endsWith, not equality: librdkafka before 2.x echoes the client
        # nonce in front of the combined one, and Kafka brokers accept it.
        if attributes.get("c") != binding or not attributes.get("r", "").endswith(self._nonce):
            raise SaslAuthenticationError("Invalid SCRAM client-final message")
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError as e:
            raise SaslAuthenticationError("Invalid SCRAM client-final message: proof") from e
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise SaslAuthenticationError(scram_auth_failed(self._mechanism))
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        valid = hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        )
        # An unknown user's stored key is a secret HMAC output: no proof can match it short
        # of a hash preimage, but the exchange is refused without relying on that.
        if not valid or self.user not in self._credentials:
            # Same answer for both causes; the reason only in the broker's log, at DEBUG.
            known = self.user in self._credentials
            log.debug("%s: %s", self._mechanism, "wrong password" if known else "unknown user")
            raise SaslAuthenticationError(scram_auth_failed(self._mechanism))
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        self._state = "done"
        self.complete = True
        return "v=" + base64.b64encode(server_signature).decode()

    def _unknown_user_credential(self, user: str) -> ScramCredential:
        """A credential for a user that does not exist, shaped like a real one (salt size,
        iterations, key sizes) and derived from the name under the secret: two attempts
        for one name see the same salt, as they would for a real user, and no client can
        compute it."""

        def derive(label: str, size: int) -> bytes:
            message = f"{self._mechanism}\0{label}\0{user}".encode()
            return hmac.digest(self._unknown_user_secret, message, self._hash)[:size]

        key_size = hashlib.new(self._hash).digest_size
        return ScramCredential(
            salt=derive("salt", SCRAM_SALT_BYTES),
            iterations=SCRAM_ITERATIONS,
            stored_key=derive("stored key", key_size),
            server_key=derive("server key", key_size),
        )


def _attributes(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def _sasl_name(text: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='."""
    return text.replace("=2C", ",").replace("=3D", "=")
