"""Client quota entities and keys, as Kafka names them (KIP-13, KIP-55, KIP-124, KIP-546).

An entity is Kafka's ClientQuotaEntity: a map from entity type (``user``, ``client-id``,
``ip``) to a name, where None names the default of that type (``<default>`` in ZooKeeper
paths and in ``kafka-configs.sh --entity-default``). The combinations Kafka accepts are
``user``, ``client-id``, ``user`` + ``client-id`` and ``ip`` alone.

Each entity has the configuration ZooKeeper-mode Kafka keeps at ``/config/<path>``:

| entity | path |
| --- | --- |
| user ``alice`` | ``users/alice`` |
| default user | ``users/<default>`` |
| client ``c1`` of user ``alice`` | ``users/alice/clients/c1`` |
| client ``c1`` | ``clients/c1`` |
| ip ``10.0.0.1`` | ``ips/10.0.0.1`` |

user and client-id names are sanitized (URL-encoded, Kafka's Sanitizer) in paths; ip
addresses are not.

The keys (Kafka's QuotaConfigs), with the types Kafka checks values against:

| key | entities | type |
| --- | --- | --- |
| ``producer_byte_rate`` | user, client-id | long: bytes per second |
| ``consumer_byte_rate`` | user, client-id | long: bytes per second |
| ``request_percentage`` | user, client-id | double: percent of one request thread |
| ``controller_mutation_rate`` | user, client-id | double: partitions per second |
| ``connection_creation_rate`` | ip | int: connections per second |
"""

from __future__ import annotations

import enum
import ipaddress
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.errors import CoreError
from core.server.zookeeper.paths import (
    CONFIG_CLIENTS,
    CONFIG_IPS,
    CONFIG_USERS,
    DEFAULT_ENTITY,
    desanitize_entity_name,
    sanitize_entity_name,
)

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Kafka's epsilon for "is this double an integer" (ClientQuotaControlManager).
_INTEGRAL_EPSILON = 1e-6
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


class InvalidQuotaError(CoreError):
    """INVALID_REQUEST: a quota entity, key or value Kafka would refuse."""

    error_code = 42


class UnsupportedEntityTypeError(CoreError):
    """UNSUPPORTED_VERSION: a DescribeClientQuotas filter on an entity type the broker does
    not know (Kafka answers so, to leave room for new types)."""

    error_code = 35


class ValueType(enum.Enum):
    LONG = "long"
    DOUBLE = "double"
    INT = "int"


@dataclass(frozen=True, slots=True)
class QuotaKey:
    name: str
    type: ValueType
    doc: str
    minimum: float  # values below are refused (exclusive when ``positive``)
    positive: bool = True


_CLIENT_KEYS = (
    QuotaKey(PRODUCER_BYTE_RATE, ValueType.LONG, "Bytes per second a client may produce.", 0),
    QuotaKey(CONSUMER_BYTE_RATE, ValueType.LONG, "Bytes per second a client may fetch.", 0),
    QuotaKey(
        REQUEST_PERCENTAGE,
        ValueType.DOUBLE,
        "Percent of the broker's request handling time a client may use.",
        0,
    ),
    QuotaKey(
        CONTROLLER_MUTATION_RATE,
        ValueType.DOUBLE,
        "Partitions per second a client may create or delete.",
        0,
    ),
)
_IP_KEYS = (
    QuotaKey(
        CONNECTION_CREATION_RATE,
        ValueType.INT,
        "Connections per second an address may open.",
        0,
        positive=False,  # Kafka: at least 0 (0 refuses every connection)
    ),
)
CLIENT_KEYS: Mapping[str, QuotaKey] = {k.name: k for k in _CLIENT_KEYS}
IP_KEYS: Mapping[str, QuotaKey] = {k.name: k for k in _IP_KEYS}
QUOTA_KEYS: Mapping[str, QuotaKey] = {**CLIENT_KEYS, **IP_KEYS}


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """Kafka's ClientQuotaEntity: (type, name) pairs sorted by type; a None name is the
    default of its type."""

    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, **names: str | None) -> QuotaEntity:
        """``QuotaEntity.of(user="alice", client_id=None)``: keyword ``client_id`` is the
        ``client-id`` type."""
        return cls.from_pairs((k.replace("_", "-"), v) for k, v in names.items())

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
        return cls(tuple(sorted(pairs, key=lambda p: p[0])))

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.parts)

    @property
    def types(self) -> frozenset[str]:
        return frozenset(t for t, _ in self.parts)

    def name(self, entity_type: str) -> str | None:
        """The name of ``entity_type`` (None: the default, or the type is absent)."""
        return self.as_dict().get(entity_type)

    def __str__(self) -> str:
        return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in self.parts)


def validate_entity(entity: QuotaEntity, raw_types: list[str]) -> Mapping[str, QuotaKey]:
    """The keys ``entity`` may carry; ``raw_types`` are the request's types in order (to see
    duplicates). Kafka's ClientQuotaControlManager rules.

    Raises:
        InvalidQuotaError: empty, duplicated or unknown types, an empty name, an ip
            combined with another type, or an ip that is not an address.
    """
    if not raw_types:
        raise InvalidQuotaError("Invalid empty client quota entity")
    seen: set[str] = set()
    for entity_type in raw_types:
        if entity_type in seen:
            raise InvalidQuotaError(
                f"Invalid client quota entity, duplicate entity entry {entity_type}"
            )
        seen.add(entity_type)
        if entity_type not in ENTITY_TYPES:
            raise InvalidQuotaError(f"Unhandled client quota entity type: {entity_type}")
    for entity_type, name in entity.parts:
        if name == "":
            raise InvalidQuotaError(f"Empty {entity_type} not supported")
    if IP in seen:
        if len(seen) > 1:
            raise InvalidQuotaError(
                "Invalid client quota entity: ip cannot be combined with user or client-id"
            )
        address = entity.name(IP)
        if address is not None and not _is_ip_address(address):
            # Kafka also accepts a resolvable host name; tierlog takes addresses only (a
            # name would need a DNS lookup, and connection_creation_rate is not enforced).
            raise InvalidQuotaError(f"{address} is not a valid IP address.")
        return IP_KEYS
    return CLIENT_KEYS


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def validate_value(keys: Mapping[str, QuotaKey], name: str, value: float) -> float:
    """``value`` for key ``name`` of an entity whose keys are ``keys``, as stored.

    Raises:
        InvalidQuotaError: an unknown key, a non-integral value for a long or int key, or
            a value out of range (tierlog also refuses a rate of 0 or less, which Kafka
            accepts and then cannot compute a throttle time for: ``(O - 0) / 0``).
    """
    key = keys.get(name)
    if key is None:
        raise InvalidQuotaError(f"Invalid configuration key {name}")
    if not math.isfinite(value):
        raise InvalidQuotaError(f"Configuration {name} must be a finite number")
    if key.type is not ValueType.DOUBLE:
        integral = round(value)
        if abs(integral - value) > _INTEGRAL_EPSILON:
            kind = "Long" if key.type is ValueType.LONG else "Integer"
            raise InvalidQuotaError(f"Configuration {name} must be a {kind} value")
        upper = _INT64_MAX if key.type is ValueType.LONG else _INT32_MAX
        if integral > upper:
            raise InvalidQuotaError(f"Configuration {name} must be at most {upper}")
        value = float(integral)
    if value < key.minimum or (key.positive and value <= key.minimum):
        relation = "greater than" if key.positive else "at least"
        raise InvalidQuotaError(f"Configuration {name} must be {relation} {key.minimum:g}")
    return float(value)


def stored_text(name: str, value: float) -> str:
    """A value as ZooKeeper-mode Kafka writes it in an entity's config: integers for long
    and int keys, a decimal for doubles."""
    key = QUOTA_KEYS.get(name)
    if key is not None and key.type is not ValueType.DOUBLE:
        return str(int(value))
    return repr(float(value))


# -- /config paths ------------------------------------------------------------------------------
def entity_path(entity: QuotaEntity) -> str:
    """The path of ``entity``'s config under ``/config`` (``users/alice/clients/c1``)."""

    def segment(name: str | None, sanitize: bool) -> str:
        if name is None:
            return DEFAULT_ENTITY
        return sanitize_entity_name(name) if sanitize else name

    names = entity.as_dict()
    if IP in names:
        return f"{CONFIG_IPS}/{segment(names[IP], False)}"
    parts = []
    if USER in names:
        parts.append(f"{CONFIG_USERS}/{segment(names[USER], True)}")
    if CLIENT_ID in names:
        parts.append(f"{CONFIG_CLIENTS}/{segment(names[CLIENT_ID], True)}")
    if not parts:
        raise ValueError(f"no path for the entity {entity}")
    return "/".join(parts)


def entity_of_path(path: str) -> QuotaEntity:
    """The entity whose config is at ``/config/<path>``.

    Raises:
        ValueError: not a user, client or ip entity path.
    """

    def name(segment: str, sanitized: bool) -> str | None:
        if segment == DEFAULT_ENTITY:
            return None
        return desanitize_entity_name(segment) if sanitized else segment

    parts = path.split("/")
    if len(parts) == 2 and parts[0] == CONFIG_IPS:
        return QuotaEntity.from_pairs([(IP, name(parts[1], False))])
    if len(parts) == 2 and parts[0] == CONFIG_USERS:
        return QuotaEntity.from_pairs([(USER, name(parts[1], True))])
    if len(parts) == 2 and parts[0] == CONFIG_CLIENTS:
        return QuotaEntity.from_pairs([(CLIENT_ID, name(parts[1], True))])
    if len(parts) == 4 and parts[0] == CONFIG_USERS and parts[2] == CONFIG_CLIENTS:
        return QuotaEntity.from_pairs(
            [(USER, name(parts[1], True)), (CLIENT_ID, name(parts[3], True))]
        )
    raise ValueError(f"not a client quota entity path: {path!r}")
