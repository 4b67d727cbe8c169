"""A structural pre-check of request frames before kio parses them.

kio's native reader (0.6.5) sizes an array's storage from the count the frame declares,
before reading a single element: a frame claiming billions of elements makes it allocate
tens of GB and the process aborts (a Rust allocation failure, not a Python exception). One
malformed frame must close one connection, not kill the broker, so every frame is walked
here first, following the same schema, checking that every length and count fits in the
bytes that remain. Nothing is materialised; the walk costs a few microseconds per field.

Responses that this broker reads from other brokers (core.server.broker_connection) are
walked the same way: header then body, any kio-style entity class.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from core.server.errors import InvalidRequestError

_FIXED_SIZES = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A walker takes (buffer, position, end) and returns the position after the entity.
Walker = Callable[[bytes | memoryview, int, int], int]


def _fail(what: str, pos: int) -> InvalidRequestError:
    return InvalidRequestError(f"malformed frame: {what} at byte {pos}")


def _uvarint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise _fail("truncated varint", pos)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise _fail("varint longer than 5 bytes", pos)


def _length(
    buf: bytes | memoryview, pos: int, end: int, flexible: bool, wide: bool
) -> tuple[int, int]:
    """A length or count: compact (uvarint - 1) when flexible, else int16/int32; -1 = null."""
    if flexible:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    size = 4 if wide else 2
    if pos + size > end:
        raise _fail("truncated length", pos)
    reader = _I32 if wide else _I16
    return reader.unpack_from(buf, pos)[0], pos + size


def _primitive(kafka_type: str, flexible: bool, nullable: bool = True) -> Walker:
    fixed = _FIXED_SIZES.get(kafka_type)
    if fixed is not None:

        def walk_fixed(buf: bytes | memoryview, pos: int, end: int) -> int:
            pos += fixed
            if pos > end:
                raise _fail(f"truncated {kafka_type}", pos - fixed)
            return pos

        return walk_fixed
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"unknown kafka type {kafka_type}")
    wide = kafka_type != "string"

    def walk_sized(buf: bytes | memoryview, pos: int, end: int) -> int:
        start = pos
        n, pos = _length(buf, pos, end, flexible, wide)
        if n < -1 or (n == -1 and not nullable):
            # Kafka's generated readers refuse a null in a non-nullable field too.
            raise _fail(f"{kafka_type} length {n} in a non-nullable field", start)
        if n > 0:
            pos += n
            if pos > end:
                raise _fail(f"{kafka_type} of {n} bytes runs past the frame", start)
        return pos

    return walk_sized


def _array(element: Walker, flexible: bool, nullable: bool) -> Walker:
    def walk_array(buf: bytes | memoryview, pos: int, end: int) -> int:
        start = pos
        count, pos = _length(buf, pos, end, flexible, wide=True)
        if count < -1 or (count == -1 and not nullable):
            raise _fail(f"array count {count} in a non-nullable field", start)
        # Every element takes at least one byte: this bound is what kio does not check.
        if count > end - pos:
            raise _fail(f"array of {count} elements in {end - pos} bytes", start)
        for _ in range(max(count, 0)):
            pos = element(buf, pos, end)
        return pos

    return walk_array


@functools.cache
def entity_walker(entity: type, *, is_header: bool = False) -> Walker:
    """The walker of one kio entity class (cached per class)."""
    flexible: bool = entity.__flexible__
    steps: list[Walker] = []
    tagged: dict[int, Walker] = {}
    for field in dataclasses.fields(entity):
        kind = classify_field(field)
        nullable = is_optional(field)
        if isinstance(kind, (EntityField, EntityTupleField)):
            inner = entity_walker(kind.type_)
            is_array = isinstance(kind, EntityTupleField)
            walker = _array(inner, flexible, nullable) if is_array else inner
        else:
            # The request header's client id is a plain int16 string even in header v2.
            field_flexible = flexible and not (is_header and field.name == "client_id")
            if isinstance(kind, PrimitiveTupleField):
                element = _primitive(field.metadata["kafka_type"], field_flexible)
                walker = _array(element, flexible, nullable)
            else:
                walker = _primitive(field.metadata["kafka_type"], field_flexible, nullable)
        tag = get_field_tag(field)
        if tag is None:
            steps.append(walker)
        else:
            tagged[int(tag)] = walker

    def walk_entity(buf: bytes | memoryview, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buf, pos, end)
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            if count > end - pos:
                raise _fail(f"{count} tagged fields in {end - pos} bytes", pos)
            for _ in range(count):
                tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                if pos + size > end:
                    raise _fail(f"tagged field {tag} of {size} bytes runs past the frame", pos)
                known = tagged.get(tag)
                if known is not None and known(buf, pos, pos + size) != pos + size:
                    raise _fail(f"tagged field {tag} does not fill its {size} bytes", pos)
                pos += size
        return pos

    return walk_entity


def check_header(header_type: type, frame: bytes | memoryview) -> int:
    """Walk the request header alone (for a body whose decoder checks its own bounds:
    core.server.produce_request); returns the position after it."""
    return entity_walker(header_type, is_header=True)(frame, 0, len(frame))


def check_frame(request_type: type, header_type: type, frame: bytes | memoryview) -> int:
    """Walk header and body; raise InvalidRequestError if they do not fit in the frame.

    Returns:
        The number of bytes after the body. Kafka ignores such bytes, and librdkafka sends
        some (three after a Metadata v12 body), so the caller tolerates them too.
    """
    end = len(frame)
    pos = entity_walker(header_type, is_header=True)(frame, 0, end)
    pos = entity_walker(request_type)(frame, pos, end)
    return end - pos
