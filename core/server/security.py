"""What each listener requires of a connection: TLS (an ``ssl.SSLContext``) and SASL
(the accounts per mechanism), built from the broker config when the listeners start.

Kafka's keys, with Kafka's per-listener prefix winning over the plain key::

    listener.name.<listener>.ssl.keystore.location      > ssl.keystore.location
    listener.name.<listener>.<mechanism>.sasl.jaas.config > sasl.jaas.config

(``<listener>`` and ``<mechanism>`` lower-case, as in Kafka). Key stores are PEM only: a
file holding the private key and the certificate chain (``ssl.keystore.location``), or both
inline (``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``). Every failure is an
``InvalidConfigError`` naming the key, raised before any listener accepts a connection.

A connection's principal is Kafka's: ``User:<name>`` after SASL, ``User:<subject DN>`` for a
TLS client certificate (RFC 2253 order, most specific first, as Java's X500Principal prints
it), ``User:ANONYMOUS`` otherwise.

A broker connects to other brokers on ``inter.broker.listener.name`` with that listener's own
settings, as Kafka does (``inter_broker_client_settings``): TLS trusting its truststore (the
system CAs when none is set), presenting its keystore for mutual TLS, checking the peer's
host name when ``ssl.endpoint.identification.algorithm=https``; SASL with
``sasl.mechanism.inter.broker.protocol`` and the ``username`` / ``password`` options of that
mechanism's JAAS entry.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InvalidConfigError
from core.server.config import BROKER_CONFIG, LISTENER_PREFIX, BrokerConfig, Listener
from core.server.sasl import (
    SUPPORTED_MECHANISMS,
    JaasConfigError,
    SaslCredentials,
    ScramCredentialSource,
    parse_jaas,
    users_from_jaas,
)
from core.server.sasl_client import SaslClientCredentials

ANONYMOUS = "User:ANONYMOUS"
_LISTENER_KEYS = tuple(
    k.name
    for k in BROKER_CONFIG
    if k.name.startswith(("ssl.", "sasl.")) and k.name != "sasl.jaas.config"
)
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What one listener requires: TLS when ``ssl_context`` is set, SASL when ``sasl`` is."""

    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None
    # sasl.server.max.receive.size: the largest frame read before authentication completes.
    sasl_max_receive_size: int = 524288

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return self.sasl.mechanisms if self.sasl is not None else ()


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How this broker connects to the inter-broker listener of other brokers: TLS when
    ``ssl_context`` is set, SASL when ``sasl`` is."""

    listener: str
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslClientCredentials | None = None


def inter_broker_client_settings(config: BrokerConfig) -> ClientSecurity:
    """The client side of ``inter.broker.listener.name`` (reads the PEM files).

    Raises:
        InvalidConfigError: a missing, unreadable or invalid setting, naming the key.
    """
    check_listener_overrides(config)
    name = config.inter_broker_listener_name
    listener = next(x for x in config.advertised_listeners if x.name == name)
    protocol = listener.security_protocol
    lookup = _Lookup(config, listener)
    context = _client_ssl_context(lookup) if protocol in ("SSL", "SASL_SSL") else None
    sasl = _sasl_client(lookup) if protocol in ("SASL_PLAINTEXT", "SASL_SSL") else None
    return ClientSecurity(name, protocol, context, sasl)


def check_listener_overrides(config: BrokerConfig) -> None:
    """Every ``listener.name.*`` key names a listener and a key that may be overridden.

    Raises:
        InvalidConfigError: naming the key.
    """
    names = {lst.name.lower() for lst in config.listeners}
    for key in config.originals:
        if not key.startswith(LISTENER_PREFIX):
            continue
        listener, _, rest = key[len(LISTENER_PREFIX) :].partition(".")
        if listener not in names:
            raise InvalidConfigError(
                f"Unknown configuration {key}: {listener.upper()} is not in listeners"
            )
        mechanism, _, tail = rest.partition(".")
        if rest in _LISTENER_KEYS:
            BROKER_CONFIG.parse({rest: config.originals[key]})  # type and value checks
        elif tail == "sasl.jaas.config" and mechanism.upper() in SUPPORTED_MECHANISMS:
            pass
        else:
            raise InvalidConfigError(
                f"Unknown configuration {key}: not an ssl.* / sasl.* key that a listener "
                "may override, nor <mechanism>.sasl.jaas.config with a mechanism of "
                f"{', '.join(SUPPORTED_MECHANISMS)}"
            )


def listener_security(config: BrokerConfig, listener: Listener) -> ListenerSecurity:
    """Build what ``listener`` requires from the config (reads the PEM files).

    Raises:
        InvalidConfigError: a missing, unreadable or invalid setting, naming the key.
    """
    check_listener_overrides(config)
    protocol = listener.security_protocol
    lookup = _Lookup(config, listener)
    context = _ssl_context(lookup) if protocol in ("SSL", "SASL_SSL") else None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ListenerSecurity(protocol, context)
    return ListenerSecurity(
        protocol,
        context,
        _sasl(lookup),
        lookup.get("sasl.server.max.receive.size"),
    )


def principal_of_certificate(peercert: Mapping[str, Any] | None) -> str | None:
    """``User:CN=...,OU=...`` for a verified client certificate, None without one."""
    if not peercert or "subject" not in peercert:
        return None
    parts = []
    for rdn in reversed(peercert["subject"]):
        parts.append("+".join(f"{_DN_NAMES.get(k, k)}={_escape_dn(v)}" for k, v in rdn))
    return "User:" + ",".join(parts)


_DN_NAMES = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape_dn(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    return out


class _Lookup:
    """Values with the listener's prefix first (Kafka's listener-prefixed configs)."""

    def __init__(self, config: BrokerConfig, listener: Listener) -> None:
        self.config = config
        self.prefix = f"{LISTENER_PREFIX}{listener.name.lower()}."
        self.listener = listener

    def key(self, name: str) -> str:
        """The key actually set for ``name`` (to name it in errors)."""
        prefixed = self.prefix + name
        return prefixed if prefixed in self.config.originals else name

    def get(self, name: str) -> Any:
        prefixed = self.prefix + name
        if prefixed in self.config.originals:
            return BROKER_CONFIG.parse({name: self.config.originals[prefixed]})[name]
        return self.config.get(name)

    def secret(self, name: str) -> str | None:
        value = self.get(name)
        return None if value is None else str(value)


def _ssl_context(lookup: _Lookup) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions_and_ciphers(context, lookup)
    _load_keystore(context, lookup)
    client_auth = lookup.get("ssl.client.auth")
    context.verify_mode = {
        "required": ssl.CERT_REQUIRED,
        "requested": ssl.CERT_OPTIONAL,
        "none": ssl.CERT_NONE,
    }[client_auth]
    if client_auth != "none":
        _load_truststore(context, lookup)
    return context


def _client_ssl_context(lookup: _Lookup) -> ssl.SSLContext:
    """Kafka's client-mode SslFactory for the inter-broker listener."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions_and_ciphers(context, lookup)
    algorithm = lookup.get("ssl.endpoint.identification.algorithm") or ""
    if algorithm.lower() not in ("https", ""):
        raise _bad(
            lookup,
            "ssl.endpoint.identification.algorithm",
            algorithm,
            "tierlog's inter-broker client knows https (check the peer's host name) or an "
            "empty value (do not)",
        )
    context.check_hostname = algorithm.lower() == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    if lookup.get("ssl.truststore.location") or lookup.get("ssl.truststore.certificates"):
        _load_truststore(context, lookup)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)  # Java's default truststore
    # The keystore goes to every peer that asks for a certificate (ssl.client.auth).
    if lookup.get("ssl.keystore.location") or lookup.get("ssl.keystore.key"):
        _load_keystore(context, lookup)
    elif lookup.get("ssl.client.auth") == "required":
        raise InvalidConfigError(
            f"Missing required configuration {lookup.key('ssl.keystore.location')}: the "
            f"inter-broker listener {lookup.listener.name} requires client certificates "
            "(ssl.client.auth=required)"
        )
    return context


def _set_versions_and_ciphers(context: ssl.SSLContext, lookup: _Lookup) -> None:
    versions = [_TLS_VERSIONS[v] for v in lookup.get("ssl.enabled.protocols")]
    if not versions:
        raise InvalidConfigError(
            f"Invalid value [] for configuration {lookup.key('ssl.enabled.protocols')}: "
            "at least one TLS version is needed"
        )
    context.minimum_version, context.maximum_version = min(versions), max(versions)
    ciphers = lookup.get("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(":".join(ciphers))
        except ssl.SSLError as e:
            raise _bad(lookup, "ssl.cipher.suites", ",".join(ciphers), str(e)) from e


def _sasl_client(lookup: _Lookup) -> SaslClientCredentials:
    """``sasl.mechanism.inter.broker.protocol`` and the username/password of its JAAS entry."""
    key = "sasl.mechanism.inter.broker.protocol"
    mechanism = str(lookup.config.get(key)).upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise InvalidConfigError(
            f"Invalid value {mechanism} for configuration {key}: the inter-broker listener "
            f"{lookup.listener.name} is {lookup.listener.security_protocol}; tierlog speaks "
            f"{', '.join(SUPPORTED_MECHANISMS)}"
        )
    enabled = [m.upper() for m in lookup.get("sasl.enabled.mechanisms")]
    if mechanism not in enabled:
        # Kafka's rule: brokers must accept the mechanism they use with each other.
        raise InvalidConfigError(
            f"Invalid value {mechanism} for configuration {key}: it must be in "
            f"{lookup.key('sasl.enabled.mechanisms')} ({','.join(enabled)}) of the "
            f"inter-broker listener {lookup.listener.name}"
        )
    name = f"{lookup.prefix}{mechanism.lower()}.sasl.jaas.config"
    text = lookup.config.originals.get(name)
    if text is None:
        name = "sasl.jaas.config"
        text = lookup.config.get(name)
    if text is None:
        raise InvalidConfigError(
            f"Missing required configuration {lookup.prefix}{mechanism.lower()}"
            f".sasl.jaas.config: the {mechanism} login of the inter-broker listener "
            f"{lookup.listener.name} (or sasl.jaas.config)"
        )
    try:
        users_from_jaas(text, mechanism)  # the login module check
        _, options = parse_jaas(text)
    except JaasConfigError as e:
        raise InvalidConfigError(f"Invalid value [hidden] for configuration {name}: {e}") from e
    username, password = options.get("username"), options.get("password")
    if not username or not password:
        raise InvalidConfigError(
            f"Invalid value [hidden] for configuration {name}: inter-broker SASL/{mechanism} "
            'needs the options username="..." password="..." (this broker\'s own login)'
        )
    return SaslClientCredentials(mechanism, username, password)


def _load_keystore(context: ssl.SSLContext, lookup: _Lookup) -> None:
    password = lookup.secret("ssl.key.password")
    location = lookup.get("ssl.keystore.location")
    chain = lookup.secret("ssl.keystore.certificate.chain")
    key = lookup.secret("ssl.keystore.key")
    if location is not None:
        name = lookup.key("ssl.keystore.location")
        try:
            context.load_cert_chain(location, password=password)
        except FileNotFoundError as e:
            raise _bad(lookup, "ssl.keystore.location", location, "no such file") from e
        except (ssl.SSLError, OSError) as e:
            raise InvalidConfigError(
                f"Invalid value {location} for configuration {name}: not a PEM file with a "
                f"private key and its certificate chain, or a wrong ssl.key.password ({e})"
            ) from e
        return
    if chain is None or key is None:
        raise InvalidConfigError(
            f"Missing required configuration {lookup.key('ssl.keystore.location')} for "
            f"{lookup.listener.security_protocol} listener {lookup.listener.name}: set it, "
            "or ssl.keystore.certificate.chain and ssl.keystore.key"
        )
    # ssl loads key material from files only: a private temporary file, removed at once.
    with tempfile.TemporaryDirectory(prefix="tierlog-pem-") as tmp:
        path = Path(tmp) / "keystore.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        try:
            context.load_cert_chain(path, password=password)
        except (ssl.SSLError, OSError) as e:
            raise InvalidConfigError(
                f"Invalid value [hidden] for configuration {lookup.key('ssl.keystore.key')}: "
                f"the key and ssl.keystore.certificate.chain do not load as PEM ({e})"
            ) from e


def _load_truststore(context: ssl.SSLContext, lookup: _Lookup) -> None:
    location = lookup.get("ssl.truststore.location")
    inline = lookup.secret("ssl.truststore.certificates")
    try:
        if location is not None:
            context.load_verify_locations(cafile=location)
        elif inline is not None:
            context.load_verify_locations(cadata=inline)
        else:
            raise InvalidConfigError(
                f"Missing required configuration {lookup.key('ssl.truststore.location')}: "
                f"ssl.client.auth={lookup.get('ssl.client.auth')} on listener "
                f"{lookup.listener.name} needs the CAs to trust (or "
                "ssl.truststore.certificates)"
            )
    except FileNotFoundError as e:
        raise _bad(lookup, "ssl.truststore.location", location, "no such file") from e
    except (ssl.SSLError, OSError) as e:
        name = "ssl.truststore.location" if location else "ssl.truststore.certificates"
        raise _bad(lookup, name, location or "[hidden]", f"not PEM certificates ({e})") from e


def _sasl(lookup: _Lookup) -> SaslCredentials:
    enabled = [m.upper() for m in lookup.get("sasl.enabled.mechanisms")]
    key = lookup.key("sasl.enabled.mechanisms")
    unsupported = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
    if unsupported or not enabled:
        raise InvalidConfigError(
            f"Invalid value {','.join(enabled)} for configuration {key}: listener "
            f"{lookup.listener.name} is {lookup.listener.security_protocol}; tierlog serves "
            f"{', '.join(SUPPORTED_MECHANISMS)} (not {', '.join(unsupported) or 'nothing'})"
        )
    jaas: dict[str, str] = {}
    for mechanism in enabled:
        name = f"{lookup.prefix}{mechanism.lower()}.sasl.jaas.config"
        value = lookup.config.originals.get(name)
        if value is None:
            name = "sasl.jaas.config"
            value = lookup.config.get(name)
        if value is None:
            raise InvalidConfigError(
                f"Missing required configuration {lookup.prefix}{mechanism.lower()}"
                f".sasl.jaas.config: the {mechanism} accounts of listener "
                f"{lookup.listener.name} (or sasl.jaas.config)"
            )
        try:
            users_from_jaas(value, mechanism)
        except JaasConfigError as e:
            raise InvalidConfigError(f"Invalid value [hidden] for configuration {name}: {e}") from e
        jaas[mechanism] = value
    return SaslCredentials.from_jaas(jaas)


def with_runtime_scram(
    security: ListenerSecurity, source: ScramCredentialSource
) -> ListenerSecurity:
    """The listener's security with the SCRAM credentials managed at run time
    (AlterUserScramCredentials) among its SCRAM accounts; a listener without SASL as it is."""
    if security.sasl is None:
        return security
    return dataclasses.replace(
        security, sasl=dataclasses.replace(security.sasl, runtime_scram=source)
    )


def _bad(lookup: _Lookup, name: str, value: object, reason: str) -> InvalidConfigError:
    return InvalidConfigError(
        f"Invalid value {value} for configuration {lookup.key(name)}: {reason}"
    )
