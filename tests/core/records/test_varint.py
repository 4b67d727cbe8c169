"""Zigzag varints: Kafka's encodings of edge values, and bounds errors naming the byte."""

from __future__ import annotations

import pytest

from core.errors import CorruptRecordError
from core.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
)

# (value, encoding) pairs worked out from the zigzag + LEB128 definition.
VARINT_CASES = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-64, b"\x7f"),
    (63, b"\x7e"),
    (64, b"\x80\x01"),
    (-65, b"\x81\x01"),
    (8191, b"\xfe\x7f"),
    (8192, b"\x80\x80\x01"),
    (INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
    (INT32_MIN, b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize(("value", "encoded"), VARINT_CASES)
def test_varint_edge_values(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert size_of_varint(value) == len(encoded)
    assert decode_varint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize(
    "value", [0, -1, 1, 63, -64, 64, 8191, -8192, 2**31, -(2**31) - 1, INT64_MAX, INT64_MIN]
)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert size_of_varlong(value) == len(encoded)
    assert decode_varlong(encoded, 0) == (value, len(encoded))


def test_varlong_extremes_take_ten_bytes() -> None:
    assert encode_varlong(INT64_MIN) == b"\xff" * 9 + b"\x01"
    assert encode_varlong(INT64_MAX) == b"\xfe" + b"\xff" * 8 + b"\x01"


@pytest.mark.parametrize(
    ("value", "size"), [(0, 1), (127, 1), (128, 2), (16383, 2), (2**32 - 1, 5)]
)
def test_unsigned_varint(value: int, size: int) -> None:
    encoded = encode_unsigned_varint(value)
    assert len(encoded) == size == size_of_unsigned_varint(value)
    assert decode_unsigned_varint(encoded, 0) == (value, size)


def test_encoders_reject_out_of_range_values() -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_varint(INT32_MAX + 1)
    with pytest.raises(ValueError, match="out of range"):
        encode_varlong(INT64_MIN - 1)
    with pytest.raises(ValueError, match="out of range"):
        encode_unsigned_varint(-1)


@pytest.mark.parametrize("decode", [decode_varint, decode_varlong, decode_unsigned_varint])
def test_truncated_varint_names_position(decode: object) -> None:
    data = b"\x00\x00\x00\x80\x80"  # a varint starting at byte 3 whose last byte is missing
    with pytest.raises(CorruptRecordError, match="at byte 3 runs past the end"):
        decode(data, 3)  # type: ignore[operator]
    with pytest.raises(CorruptRecordError, match="at byte 5 runs past the end"):
        decode(data, 5)  # type: ignore[operator]


def test_too_long_varint_is_rejected() -> None:
    with pytest.raises(CorruptRecordError, match="varint at byte 1 is longer than 5 bytes"):
        decode_varint(b"\x00" + b"\xff" * 5 + b"\x01", 1)
    with pytest.raises(CorruptRecordError, match="varlong at byte 0 is longer than 10 bytes"):
        decode_varlong(b"\xff" * 10 + b"\x01", 0)


def test_five_byte_varint_keeps_low_32_bits_like_java() -> None:
    # 0x7f in the 5th byte sets bits above 32; Java's int arithmetic drops them.
    assert decode_varint(b"\xfe\xff\xff\xff\x7f", 0) == (INT32_MAX, 5)


def test_decoders_accept_memoryview_and_bytearray() -> None:
    data = encode_varint(-300) + encode_varlong(10**12)
    for buf in (bytearray(data), memoryview(data)):
        value, pos = decode_varint(buf, 0)
        assert value == -300
        assert decode_varlong(buf, pos) == (10**12, len(data))
