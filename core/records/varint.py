"""Variable-length integers as Kafka writes them (Kafka's ``ByteUtils``).

Unsigned varints are LEB128: seven bits a byte, least significant group first, the high bit
set on every byte but the last. Signed varints (record fields, lengths) first map the value
through zigzag, ``(n << 1) ^ (n >> 63)``, so that small negative numbers such as the -1 of a
null key stay one byte long.

A varint holds an int32 and takes at most 5 bytes; a varlong holds an int64 and takes at
most 10. Like Kafka, a decoder rejects a longer encoding, and keeps only the low 32 (64) bits
of a 5-byte (10-byte) one, as Java's integer arithmetic does.

Decoders take ``(buf, pos)`` and return ``(value, next_pos)``; they are on the hot path of
record decoding, so the one-byte case, by far the most common, returns before any loop.
"""

from __future__ import annotations

from core.errors import CorruptRecordError

BytesLike = bytes | bytearray | memoryview

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1


# -- encoding ------------------------------------------------------------------------------
def _check_range(value: int, low: int, high: int, what: str) -> None:
    if not low <= value <= high:
        raise ValueError(f"{what} {value} is out of range [{low}, {high}]")


def encode_unsigned_varint(value: int) -> bytes:
    """LEB128 of a non-negative int32-range value (Kafka's writeUnsignedVarint).

    Raises:
        ValueError: ``value`` is negative or does not fit 32 bits.
    """
    _check_range(value, 0, _MASK32, "unsigned varint")
    return _leb128(value)


def _leb128(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag varint of an int32 (Kafka's writeVarint).

    Raises:
        ValueError: ``value`` does not fit an int32.
    """
    _check_range(value, INT32_MIN, INT32_MAX, "varint")
    return _leb128(((value << 1) ^ (value >> 31)) & _MASK32)


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong of an int64 (Kafka's writeVarlong).

    Raises:
        ValueError: ``value`` does not fit an int64.
    """
    _check_range(value, INT64_MIN, INT64_MAX, "varlong")
    return _leb128(((value << 1) ^ (value >> 63)) & _MASK64)


def size_of_unsigned_varint(value: int) -> int:
    """Bytes taken by ``encode_unsigned_varint(value)``."""
    return max(1, (value.bit_length() + 6) // 7)


def size_of_varint(value: int) -> int:
    """Bytes taken by ``encode_varint(value)``."""
    return size_of_unsigned_varint(((value << 1) ^ (value >> 31)) & _MASK32)


def size_of_varlong(value: int) -> int:
    """Bytes taken by ``encode_varlong(value)``."""
    return size_of_unsigned_varint(((value << 1) ^ (value >> 63)) & _MASK64)


# -- decoding ------------------------------------------------------------------------------
def _read_leb128(buf: BytesLike, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    """The raw (not zigzag-decoded) value of a multi-byte LEB128 starting at ``pos``."""
    end = len(buf)
    result = 0
    shift = 0
    i = pos
    while True:
        if i >= end:
            raise CorruptRecordError(
                f"{what} at byte {pos} runs past the end of the data ({end - pos} bytes left)"
            )
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if i - pos >= max_bytes:
            raise CorruptRecordError(
                f"{what} at byte {pos} is longer than {max_bytes} bytes (malformed)"
            )


def decode_unsigned_varint(buf: BytesLike, pos: int) -> tuple[int, int]:
    """Read an unsigned varint at ``pos``; returns ``(value, next_pos)``.

    Raises:
        CorruptRecordError: the varint runs past the buffer or is longer than 5 bytes;
            the message names ``pos``.
    """
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    raw, nxt = _read_leb128(buf, pos, MAX_VARINT_BYTES, "unsigned varint")
    return raw & _MASK32, nxt


def decode_varint(buf: BytesLike, pos: int) -> tuple[int, int]:
    """Read a zigzag varint (int32) at ``pos``; returns ``(value, next_pos)``.

    Raises:
        CorruptRecordError: the varint runs past the buffer or is longer than 5 bytes;
            the message names ``pos``.
    """
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        if pos + 1 < len(buf) and buf[pos + 1] < 0x80:  # two bytes: values up to +-8191
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            return (raw >> 1) ^ -(raw & 1), pos + 2
    raw, nxt = _read_leb128(buf, pos, MAX_VARINT_BYTES, "varint")
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1), nxt


def decode_varlong(buf: BytesLike, pos: int) -> tuple[int, int]:
    """Read a zigzag varlong (int64) at ``pos``; returns ``(value, next_pos)``.

    Raises:
        CorruptRecordError: the varlong runs past the buffer or is longer than 10 bytes;
            the message names ``pos``.
    """
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        if pos + 1 < len(buf) and buf[pos + 1] < 0x80:  # two bytes: values up to +-8191
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            return (raw >> 1) ^ -(raw & 1), pos + 2
    raw, nxt = _read_leb128(buf, pos, MAX_VARLONG_BYTES, "varlong")
    raw &= _MASK64
    return (raw >> 1) ^ -(raw & 1), nxt
