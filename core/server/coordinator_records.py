"""The records of ``__consumer_offsets``, byte-compatible with Kafka's group coordinator.

Every record's key starts with an int16 version that names its type; the value starts with
its own int16 version. The schemas are Kafka's (``OffsetCommitKey``/``OffsetCommitValue``,
``GroupMetadataKey``/``GroupMetadataValue`` in Kafka's group-coordinator message
definitions); strings are int16-length UTF-8, bytes int32-length, arrays int32-counted up
to the first flexible version (4), which uses compact lengths and tagged fields.

==========================  ===========  ==================================================
record                      key version  value versions read (written)
==========================  ===========  ==================================================
OffsetCommit                0, 1         0-4 (3: offset, leader epoch, metadata, timestamp)
GroupMetadata               2            0-4 (3: with group instance ids)
==========================  ===========  ==================================================

A null value is a tombstone: the offset or group was deleted; compaction drops it later.
Key versions above 2 (Kafka 3.x's consumer-group protocol records) are reported as
:class:`UnknownRecord` so that a reader can skip them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
FLEXIBLE_VERSION = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class CoordinatorRecordError(ValueError):
    """A key or value of ``__consumer_offsets`` that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One committed position (Kafka's OffsetAndMetadata).

    Args:
        offset: the next offset the group will consume.
        leader_epoch: the leader epoch of the record before ``offset``; -1 when unknown.
        metadata: the client's string ("" when the client sent null).
        commit_timestamp_ms: when the broker accepted the commit.
    """

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = 0

    def __post_init__(self) -> None:
        if self.leader_epoch < -1:
            raise ValueError(f"leader_epoch must be >= -1, got {self.leader_epoch}")

    def to_json(self) -> dict[str, object]:
        return {
            "offset": self.offset,
            "leader_epoch": self.leader_epoch,
            "metadata": self.metadata,
            "commit_timestamp": self.commit_timestamp_ms,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> CommittedOffset:
        return cls(
            offset=_as_int(doc["offset"]),
            leader_epoch=_as_int(doc.get("leader_epoch", -1)),
            metadata=str(doc.get("metadata", "")),
            commit_timestamp_ms=_as_int(doc.get("commit_timestamp", 0)),
        )


def _as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownRecord:
    """A record type this broker does not use (for example KIP-848's)."""

    version: int


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...] = ()


# -- writing ---------------------------------------------------------------------------------
def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise CoordinatorRecordError(f"string of {len(data)} bytes is too long for int16")
    return _I16.pack(len(data)) + data


def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _I16.pack(OFFSET_COMMIT_KEY_VERSION)
        + _string(group)
        + _string(topic)
        + _I32.pack(partition)
    )


def group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def offset_commit_value(committed: CommittedOffset) -> bytes:
    return (
        _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _I64.pack(committed.offset)
        + _I32.pack(committed.leader_epoch)
        + _string(committed.metadata)
        + _I64.pack(committed.commit_timestamp_ms)
    )


def group_metadata_value(value: GroupMetadataValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    out += _string(value.protocol_type)
    out += _I32.pack(value.generation)
    out += _string(value.protocol)
    out += _string(value.leader)
    out += _I64.pack(value.current_state_timestamp_ms)
    out += _I32.pack(len(value.members))
    for m in value.members:
        out += _string(m.member_id)
        out += _string(m.group_instance_id)
        out += _string(m.client_id)
        out += _string(m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms)
        out += _bytes(m.subscription)
        out += _bytes(m.assignment)
    return bytes(out)


# -- reading ---------------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CoordinatorRecordError(f"record ends at {len(self.data)}, needs {self.pos + n}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CoordinatorRecordError("unsigned varint too long")

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1  # compact: length + 1, 0 for null
        return self.i32() if wide else self.i16()

    def nullable_string(self) -> str | None:
        n = self._length(wide=False)
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CoordinatorRecordError(f"string is not UTF-8: {e}") from e

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise CoordinatorRecordError("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        n = self._length(wide=True)
        return b"" if n < 0 else self._take(n)

    def array_length(self) -> int:
        n = self._length(wide=True)
        return max(n, 0)

    def skip_tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownRecord:
    """The key's type and fields.

    Raises:
        CoordinatorRecordError: truncated or malformed.
    """
    r = _Reader(key)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.i32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(r.string())
    return UnknownRecord(version)


def _value_reader(value: bytes, name: str) -> tuple[_Reader, int]:
    """A reader positioned after the value's version, flexible from version 4 on."""
    r = _Reader(value)
    version = r.i16()
    if not 0 <= version <= FLEXIBLE_VERSION:
        raise CoordinatorRecordError(f"unknown {name} version {version}")
    r.flexible = version >= FLEXIBLE_VERSION
    return r, version


def decode_offset_commit_value(value: bytes) -> CommittedOffset:
    """An OffsetCommitValue of any version (v1's expire timestamp is read and ignored).

    Raises:
        CoordinatorRecordError: truncated, malformed or of an unknown version.
    """
    r, version = _value_reader(value, "OffsetCommitValue")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    timestamp = r.i64()
    if version == 1:
        r.i64()  # expireTimestamp: Kafka ignores it since KIP-211
    r.skip_tags()
    return CommittedOffset(offset, max(leader_epoch, -1), metadata, timestamp)


def decode_group_metadata_value(value: bytes) -> GroupMetadataValue:
    """A GroupMetadataValue of any version.

    Raises:
        CoordinatorRecordError: truncated, malformed or of an unknown version.
    """
    r, version = _value_reader(value, "GroupMetadataValue")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tags()
        members.append(
            MemberMetadata(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance if version >= 1 else session,
                session,
                subscription,
                assignment,
            )
        )
    r.skip_tags()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, timestamp, tuple(members)
    )


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 arithmetic)."""
    h = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's coordinator partition of a group: ``Utils.abs(group.hashCode) % partitions``
    (``Utils.abs`` maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
