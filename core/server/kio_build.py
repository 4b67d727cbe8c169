"""Building kio messages across versions.

kio generates one set of classes per (api, version), each with only that version's fields.
Handlers describe a response once with every field they know; ``make`` keeps the fields the
target class has, and ``nested`` finds a nested class of the same version by name.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type, **values: Any) -> Any:
    """An instance of ``cls`` from the values it has fields for; the others are dropped."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)


@functools.cache
def nested(top: type, name: str) -> type:
    """The class ``name`` from the module that defines ``top`` (same api and version)."""
    return getattr(sys.modules[top.__module__], name)


@functools.cache
def nested_optional(top: type, name: str) -> type | None:
    """``nested``, or None when this version has no such class."""
    return getattr(sys.modules[top.__module__], name, None)
