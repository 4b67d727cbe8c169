"""The records of __consumer_offsets: Kafka's byte layouts and coordinator partitioning."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.server.coordinator_records import (
    CommittedOffset,
    CoordinatorRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    UnknownRecord,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    group_metadata_key,
    group_metadata_value,
    java_string_hash,
    offset_commit_key,
    offset_commit_value,
    partition_for,
)


@pytest.mark.parametrize(
    ("text", "java_hash"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -(1 << 31)),
        ("é€", 15587),
        ("\U0001f600", 1772899),
    ],
)
def test_java_string_hash(text: str, java_hash: int) -> None:
    assert java_string_hash(text) == java_hash


def test_partition_for_follows_kafkas_rule() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert partition_for("Aa", 7) == partition_for("BB", 7)  # equal Java hashes


def test_offset_commit_key_and_value_layouts() -> None:
    assert offset_commit_key("g", "t", 3) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    assert decode_key(offset_commit_key("g", "t", 3)) == OffsetCommitKey("g", "t", 3)
    value = offset_commit_value(CommittedOffset(42, 7, "meta", 1_700_000_000_000))
    assert value == struct.pack(">hqih4sq", 3, 42, 7, 4, b"meta", 1_700_000_000_000)


def test_older_offset_commit_value_versions_are_read() -> None:
    v0 = struct.pack(">hqh1sq", 0, 9, 1, b"m", 5)
    v1 = struct.pack(">hqh1sqq", 1, 9, 1, b"m", 5, 99)
    for data in (v0, v1):
        assert decode_offset_commit_value(data) == CommittedOffset(9, -1, "m", 5)
    # v4 is flexible: compact string (length + 1) and an empty tagged-field section.
    v4 = struct.pack(">hqiB1sqB", 4, 9, 2, 2, b"m", 5, 0)
    assert decode_offset_commit_value(v4) == CommittedOffset(9, 2, "m", 5)


@given(
    st.text(max_size=20),
    st.integers(0, 2**31 - 1),
    st.one_of(st.none(), st.text(max_size=10)),
    st.lists(
        st.tuples(st.text(max_size=10), st.one_of(st.none(), st.text(max_size=5)), st.binary()),
        max_size=3,
    ),
)
def test_group_metadata_roundtrip(protocol_type, generation, protocol, members) -> None:
    value = GroupMetadataValue(
        protocol_type,
        generation,
        protocol,
        members[0][0] if members else None,
        123,
        tuple(
            MemberMetadata(mid, inst, "client", "/127.0.0.1", 300000, 45000, sub, b"assign")
            for mid, inst, sub in members
        ),
    )
    assert decode_group_metadata_value(group_metadata_value(value)) == value
    assert decode_key(group_metadata_key("grp")) == GroupMetadataKey("grp")


def test_unknown_and_broken_records() -> None:
    assert decode_key(struct.pack(">h", 11) + b"x") == UnknownRecord(11)
    with pytest.raises(CoordinatorRecordError):
        decode_key(b"\x00\x01\x00\x05ab")
    with pytest.raises(CoordinatorRecordError):
        decode_offset_commit_value(struct.pack(">hq", 9, 1))
