"""Declaring config keys once: name, type, default, validator and doc (Kafka's ConfigDef).

Values arrive as strings from Java-properties files, the command line and the protocol, or
as Python values from code. ``ConfigDef.parse`` converts and validates them and raises
``InvalidConfigError`` naming the key, in Kafka's wording:
``Invalid value X for configuration KEY: reason``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidConfigError

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


class ConfigType(enum.Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"
    PASSWORD = "password"  # never printed; shown as [hidden]


Validator = Callable[[str, Any], None]


def at_least(minimum: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Value must be at least {minimum}"
            )

    return check


def between(minimum: int | float, maximum: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if not minimum <= value <= maximum:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: "
                f"Value must be between {minimum} and {maximum}"
            )

    return check


def one_of(*choices: str, case_sensitive: bool = True) -> Validator:
    def check(name: str, value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        allowed = choices if case_sensitive else [c.lower() for c in choices]
        for v in values:
            if (v if case_sensitive else v.lower()) not in allowed:
                raise InvalidConfigError(
                    f"Invalid value {v} for configuration {name}: "
                    f"String must be one of: {', '.join(choices)}"
                )

    return check


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    # The broker-wide key whose value is this topic key's default, as Kafka's
    # ServerTopicConfigSynonyms (segment.bytes <- log.segment.bytes).
    server_default_property: str | None = None
    # Accepted (and validated) so that Kafka's config files work, but nothing in tierlog
    # acts on the value. The doc then says what Kafka uses the key for and why tierlog
    # does not; docs/CONFIGURATION.md marks it "accepted, no effect" and `broker start`
    # names such keys when a config sets them.
    inert: bool = False


def _convert(key: ConfigKey, raw: Any) -> Any:
    name, kind = key.name, key.type
    try:
        if kind in (ConfigType.INT, ConfigType.LONG):
            if isinstance(raw, bool):
                raise ValueError("a boolean is not a number")
            value = int(raw.strip()) if isinstance(raw, str) else int(raw)
            limit = INT32_MAX if kind is ConfigType.INT else INT64_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError(f"out of range for a {kind.value}")
            return value
        if kind is ConfigType.DOUBLE:
            return float(raw)
        if kind is ConfigType.BOOLEAN:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError("expected true or false")
            return text == "true"
        if kind is ConfigType.LIST:
            if isinstance(raw, str):
                return [p.strip() for p in raw.split(",") if p.strip()]
            return [str(p) for p in raw]
        return str(raw).strip() if isinstance(raw, str) else str(raw)
    except (TypeError, ValueError) as e:
        raise InvalidConfigError(
            f"Invalid value {raw!r} for configuration {name}: expected a {kind.value} ({e})"
        ) from e


class ConfigDef:
    """An ordered set of ``ConfigKey`` with parsing and validation."""

    def __init__(self, keys: Iterable[ConfigKey] = ()) -> None:
        self._keys: dict[str, ConfigKey] = {}
        for key in keys:
            self.define(key)

    def define(self, key: ConfigKey) -> ConfigDef:
        if key.name in self._keys:
            raise ValueError(f"config key {key.name} defined twice")
        self._keys[key.name] = key
        return self

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def __iter__(self) -> Iterator[ConfigKey]:
        return iter(self._keys.values())

    def keys(self) -> list[ConfigKey]:
        return list(self._keys.values())

    def parse_value(self, name: str, raw: Any) -> Any:
        """Convert and validate one value.

        Raises:
            InvalidConfigError: an unknown key or an invalid value; the message names the key.
        """
        key = self._keys.get(name)
        if key is None:
            raise InvalidConfigError(f"Unknown configuration {name}")
        value = _convert(key, raw)
        if key.validator is not None:
            key.validator(name, value)
        return value

    def parse(
        self,
        props: Mapping[str, Any],
        *,
        defaults: Mapping[str, Any] | None = None,
        ignore_unknown: bool = False,
    ) -> dict[str, Any]:
        """Values for every key: from ``props``, else ``defaults``, else the key's default.

        Raises:
            InvalidConfigError: an unknown key (unless ``ignore_unknown``) or an invalid value.
        """
        for name in props:
            if name not in self._keys and not ignore_unknown:
                raise InvalidConfigError(f"Unknown configuration {name}")
        out: dict[str, Any] = {}
        for name, key in self._keys.items():
            if name in props:
                out[name] = self.parse_value(name, props[name])
            elif defaults is not None and name in defaults:
                out[name] = self.parse_value(name, defaults[name])
            else:
                out[name] = key.default
        return out


def format_value(key: ConfigKey, value: Any) -> str:
    """A value as Kafka prints it in DescribeConfigs and properties files."""
    if key.type is ConfigType.PASSWORD:
        return "[hidden]"
    if key.type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if key.type is ConfigType.LIST:
        return ",".join(value)
    return str(value)
