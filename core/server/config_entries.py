"""What DescribeConfigs shows of a topic or of the broker, as Kafka's ConfigHelper builds it.

**Entries.** A topic shows every topic key (``core.log.config.TOPIC_CONFIG``, Kafka 4's 33
keys), each with its effective value. The broker shows every broker key and every key its
config file gave (plugin settings, listener overrides), unknown keys as sensitive (value
null), as Kafka does with keys its ConfigDef does not know.

**Order.** Kafka lists the entries in the iteration order of the Scala ``mutable.HashMap``
its ConfigHelper gathers them in (Kafka 3.x and 4.0; ``kafka-configs.sh`` sorts them for
display, clients do not): by bucket of the spread Java ``String.hashCode`` in a table sized
for the entries, then by hash. ``kafka_order`` reproduces it; a request naming keys gets
them in the order of a map holding only those keys, which is what Kafka's filter builds.

**Source and synonyms** (Kafka's ``configSynonyms``). A topic key's synonyms are its
override (DYNAMIC_TOPIC_CONFIG), then its broker key and that key's aliases
(``log.retention.ms``, ``.minutes``, ``.hours``) where the broker's file sets them
(STATIC_BROKER_CONFIG), then where they have a default (DEFAULT_CONFIG); the list is cut
before the first entry that is not the broker key itself. So ``retention.ms`` has no
DEFAULT_CONFIG synonym (``log.retention.ms`` has no default, ``log.retention.hours`` is
cut), and ``segment.bytes`` has ``log.segment.bytes=1073741824`` as one. An entry's source
is its first synonym's, DEFAULT_CONFIG when there is none. tierlog has no dynamic broker
configs: no DYNAMIC_BROKER_CONFIG or DYNAMIC_DEFAULT_BROKER_CONFIG synonym exists, and
every broker entry is read-only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.config import ConfigKey, ConfigType, format_value
from core.log.config import TOPIC_CONFIG
from core.server.config import BROKER_CONFIG, BrokerConfig
from core.server.topics import TopicInfo


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


# Kafka's DescribeConfigsResponse.ConfigType ids (SHORT 4 and CLASS 8 have no keys here).
CONFIG_TYPE_IDS: dict[ConfigType, int] = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
    ConfigType.PASSWORD: 9,
}
UNKNOWN_CONFIG_TYPE = 0
INERT_NOTE = "Accepted, no effect in tierlog."


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs entry, every field a version may carry."""

    name: str
    value: str | None
    source: ConfigSource
    synonyms: tuple[Synonym, ...]
    read_only: bool
    sensitive: bool
    config_type: int
    documentation: str | None


# -- order ------------------------------------------------------------------------------------
def kafka_order(names: Iterable[str]) -> list[str]:
    """``names`` in the iteration order of a Scala 2.13 ``mutable.HashMap`` holding them.

    Such a map puts a key in bucket ``spread(hash) & (capacity - 1)`` and keeps each bucket
    sorted by spread hash (a signed int); it starts at 16 buckets and doubles before the
    insertion that would reach three quarters of its capacity.
    """
    distinct = list(dict.fromkeys(names))
    mask = _capacity(len(distinct)) - 1
    return sorted(distinct, key=lambda name: (_spread(name) & mask, _spread(name)))


def _capacity(size: int) -> int:
    capacity = 16
    while size >= int(capacity * 0.75):
        capacity *= 2
    return capacity


def _spread(name: str) -> int:
    """Java's ``String.hashCode`` with HashMap's ``h ^ (h >>> 16)``, as a signed int."""
    h = 0
    units = name.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


# -- synonyms ---------------------------------------------------------------------------------
# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the unit aliases of a broker key.
_ALIAS_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
_LISTENER_OVERRIDE = re.compile(r"listener\.name\.[^.]*\.(.*)")


def broker_synonym_names(name: str) -> list[str]:
    """The broker keys that can give ``name`` its value, most specific first."""
    for group in _ALIAS_GROUPS:
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":
        return [name, "log.flush.scheduler.interval.ms"]
    match = _LISTENER_OVERRIDE.fullmatch(name)
    if match is not None:
        return [name, match.group(1)]
    return [name]


def _static_defaults() -> dict[str, str]:
    """Every broker key with a default, as a string (Kafka's staticDefaultConfigs)."""
    return {k.name: format_value(k, k.default) for k in BROKER_CONFIG if k.default is not None}


_STATIC_DEFAULTS = _static_defaults()


def config_synonyms(name: str, config: BrokerConfig, sensitive: bool) -> list[Synonym]:
    """The broker's synonyms of broker key ``name``: set in its file, then defaults; cut
    before the first that is not ``name`` (Kafka drops a base key's aliases this way)."""
    names = broker_synonym_names(name)
    given = config.originals
    found = [
        Synonym(n, None if sensitive else str(given[n]), ConfigSource.STATIC_BROKER_CONFIG)
        for n in names
        if n in given
    ]
    found += [
        Synonym(n, None if sensitive else _STATIC_DEFAULTS[n], ConfigSource.DEFAULT_CONFIG)
        for n in names
        if n in _STATIC_DEFAULTS
    ]
    for i, synonym in enumerate(found):
        if synonym.name == name:
            return found[i:]
    return []


def documentation(key: ConfigKey | None) -> str | None:
    if key is None:
        return None
    return f"{INERT_NOTE} {key.doc}" if key.inert else key.doc


def _entry(
    name: str,
    key: ConfigKey | None,
    value: str | None,
    synonyms: list[Synonym],
    *,
    read_only: bool,
    sensitive: bool,
) -> ConfigEntry:
    return ConfigEntry(
        name=name,
        value=None if sensitive else value,
        source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
        synonyms=tuple(synonyms),
        read_only=read_only,
        sensitive=sensitive,
        config_type=UNKNOWN_CONFIG_TYPE if key is None else CONFIG_TYPE_IDS[key.type],
        documentation=documentation(key),
    )


def _selected(names: Iterable[str], wanted: Iterable[str] | None) -> list[str]:
    """Kafka's filter: a null or empty key list means every entry."""
    chosen = set(wanted or ())
    return kafka_order(n for n in names if not chosen or n in chosen)


# -- topics -----------------------------------------------------------------------------------
def topic_entries(
    config: BrokerConfig,
    info: TopicInfo,
    effective: Mapping[str, str],
    wanted: Iterable[str] | None,
) -> list[ConfigEntry]:
    """The entries of topic ``info`` whose effective values (every key, as strings) are
    ``effective``; only the keys ``wanted`` when given."""
    out = []
    for name in _selected((k.name for k in TOPIC_CONFIG), wanted):
        key = TOPIC_CONFIG[name]
        value = effective[name]
        synonyms: list[Synonym] = []
        if name in info.configs:
            synonyms.append(Synonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if key.server_default_property is not None:
            synonyms += config_synonyms(key.server_default_property, config, sensitive=False)
        out.append(_entry(name, key, value, synonyms, read_only=False, sensitive=False))
    return out


# -- the broker -------------------------------------------------------------------------------
def broker_key(name: str) -> ConfigKey | None:
    """The declared key of ``name``, or of the key a listener override overrides."""
    for candidate in broker_synonym_names(name):
        if candidate in BROKER_CONFIG:
            return BROKER_CONFIG[candidate]
    return None


def is_sensitive(name: str, key: ConfigKey | None) -> bool:
    """Kafka hides passwords and keys its ConfigDef does not know; tierlog also hides the
    keys Kafka types as passwords that it declares as strings (``sasl.jaas.config``)."""
    if key is None or key.type is ConfigType.PASSWORD:
        return True
    return "password" in name or "jaas.config" in name


def broker_entries(config: BrokerConfig, wanted: Iterable[str] | None) -> list[ConfigEntry]:
    """The broker's entries: every declared key and every key its file gave, read-only."""
    values = config.to_props()
    names = list(config.originals) + list(values)
    out = []
    for name in _selected(names, wanted):
        key = broker_key(name)
        sensitive = is_sensitive(name, key)
        value = values.get(name) if name in values else str(config.originals[name])
        synonyms = config_synonyms(name, config, sensitive)
        out.append(_entry(name, key, value, synonyms, read_only=True, sensitive=sensitive))
    return out


__all__ = [
    "CONFIG_TYPE_IDS",
    "INERT_NOTE",
    "ConfigEntry",
    "ConfigSource",
    "Synonym",
    "broker_entries",
    "kafka_order",
    "topic_entries",
]
