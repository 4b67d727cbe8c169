"""Kafka's znode JSON: compact, UTF-8, and read with the type checks Kafka's reader makes."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from core.server.zookeeper.errors import ZkDataError


def dumps(value: Any) -> bytes:
    """Compact JSON as Jackson writes it: no spaces, non-ASCII characters as UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def loads_object(data: bytes | None, what: str) -> dict[str, Any]:
    """Parse a znode's data as a JSON object.

    Raises:
        ZkDataError: no data, not JSON, or not an object; the message names ``what``.
    """
    if not data:
        raise ZkDataError(f"{what}: the znode has no data")
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ZkDataError(f"{what}: not JSON: {data[:200]!r}") from e
    if not isinstance(value, dict):
        raise ZkDataError(f"{what}: not a JSON object: {data[:200]!r}")
    return value


def field(obj: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    """``obj[key]`` if it is a ``kind``; JSON true/false do not count as numbers."""
    value = obj.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ZkDataError(f"{what}: {key!r} is missing or not a {kind.__name__}: {value!r}")
    return value


def int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ZkDataError(f"{what}: expected a list of integers, found {value!r}")
    return tuple(value)


def decimal(value: Any, what: str) -> int:
    """A number Kafka writes as a JSON string of digits (timestamps, producer ids)."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ZkDataError(f"{what}: expected a decimal number, found {value!r}")
