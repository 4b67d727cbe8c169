"""Record values of ``__remote_log_metadata``, byte for byte as Kafka's RemoteLogMetadataSerde.

Every value is one ApiMessageAndVersion, framed as Kafka's ``AbstractApiMessageSerde`` frames
metadata records (server-common), then the message body in Kafka's generated-message format::

    frame_version   unsigned varint   always 1 (0 was KRaft's 2.8 preview: rejected)
    api_key         unsigned varint   0 segment, 1 segment update, 2 partition delete,
                                      3 segment snapshot (snapshot files only)
    version         unsigned varint   the record version; we write 0, read 0 and 1
    body            the message at that version; every version is "flexible"
    (nothing)       trailing bytes are an error, as in Kafka

Flexible-version encoding of the fields used here (big-endian throughout):

    int8/int32/int64   1/4/8 bytes, two's complement; bool is one byte, non-zero is true
    uuid               16 bytes: most significant 8, then least significant 8
    string             unsigned varint (length + 1), then UTF-8; 0 would be null (rejected)
    nullable bytes     unsigned varint (length + 1), then the bytes; 0 is null
    array              unsigned varint (count + 1), then the elements; 0 would be null
    struct             its fields, then its own tagged-field section
    tagged fields      unsigned varint count, then per field: unsigned varint tag,
                       unsigned varint size, ``size`` bytes. A field equal to its default
                       is not written. Unknown tags are skipped on read.

The bodies (fields in wire order, nested structs indented)::

    RemoteLogSegmentIdEntry     TopicIdPartitionEntry{Name string, Id uuid, Partition int32},
                                Id uuid
    0 RemoteLogSegmentMetadataRecord
        RemoteLogSegmentId, StartOffset int64, EndOffset int64, BrokerId int32,
        MaxTimestampMs int64, EventTimestampMs int64,
        SegmentLeaderEpochs [LeaderEpoch int32, Offset int64], SegmentSizeInBytes int32,
        CustomMetadata nullable bytes, RemoteLogSegmentState int8,
        tag 0 TxnIndexEmpty bool (default false); v1 adds tag 1 BrokerLeaderEpoch int32
    1 RemoteLogSegmentMetadataUpdateRecord
        RemoteLogSegmentId, BrokerId int32, EventTimestampMs int64,
        CustomMetadata nullable bytes, RemoteLogSegmentState int8;
        v1 adds tag 0 BrokerLeaderEpoch int32, tag 1 EndOffset int64
    2 RemotePartitionDeleteMetadataRecord
        TopicIdPartitionEntry, BrokerId int32, EventTimestampMs int64,
        RemotePartitionDeleteState int8; v1 adds tag 0 BrokerLeaderEpoch, tag 1 EndOffset
    3 RemoteLogSegmentMetadataSnapshotRecord
        SegmentId uuid, StartOffset int64, EndOffset int64, BrokerId int32,
        MaxTimestampMs int64, EventTimestampMs int64, SegmentLeaderEpochs,
        SegmentSizeInBytes int32, CustomMetadata nullable bytes, RemoteLogSegmentState int8,
        tag 0 TxnIndexEmpty bool; v1 adds tag 1 BrokerLeaderEpoch int32

We write version 0, which every Kafka release with tiered storage reads; the v1 tagged fields
(BrokerLeaderEpoch, EndOffset) have no place in tiered.api's types and are skipped on read.
(KIP-405 as first written had no frame version and other field layouts: Kafka's source wins.)
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from core.errors import CorruptRecordError
from core.records.varint import decode_unsigned_varint, encode_unsigned_varint
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteStorageError,
    TopicIdPartition,
)


class MetadataSerdeError(RemoteStorageError):
    """A metadata record that cannot be read or written in Kafka's format.

    Raised for truncated or trailing bytes, an unknown frame version, api key or record
    version, a malformed field, or a value out of the range of its Kafka type.
    """


FRAME_VERSION = 1
SEGMENT_METADATA_API_KEY = 0
SEGMENT_METADATA_UPDATE_API_KEY = 1
PARTITION_DELETE_API_KEY = 2
SEGMENT_METADATA_SNAPSHOT_API_KEY = 3
WRITE_VERSION = 0
SUPPORTED_VERSIONS = range(0, 2)  # 0 and 1, for every api key

MAX_STRING_BYTES = 0x7FFF  # Kafka's generated readers reject longer strings

_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_UUID = struct.Struct(">QQ")

_TAG_TXN_INDEX_EMPTY = 0


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """One segment in a snapshot file (Kafka's RemoteLogSegmentMetadataSnapshot).

    The segment's partition is not stored: the snapshot file belongs to one partition.
    Offsets are inclusive, as in RemoteLogSegmentMetadata.
    """

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: dict[int, int]
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    txn_index_empty: bool

    @classmethod
    def from_metadata(cls, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        return cls(
            md.segment_id,
            md.start_offset,
            md.end_offset,
            md.max_timestamp_ms,
            md.broker_id,
            md.event_timestamp_ms,
            md.segment_size_in_bytes,
            dict(md.segment_leader_epochs),
            md.custom_metadata,
            md.state,
            md.txn_index_empty,
        )

    def to_metadata(self, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentMetadata:
        """The full metadata, given the partition the snapshot file belongs to.

        Raises:
            ValueError: the values do not make valid metadata (see RemoteLogSegmentMetadata).
        """
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(topic_id_partition, self.segment_id),
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=self.broker_id,
            event_timestamp_ms=self.event_timestamp_ms,
            segment_size_in_bytes=self.segment_size_in_bytes,
            segment_leader_epochs=self.segment_leader_epochs,
            custom_metadata=self.custom_metadata,
            state=self.state,
            txn_index_empty=self.txn_index_empty,
        )


RemoteLogMetadata: TypeAlias = (
    RemoteLogSegmentMetadata
    | RemoteLogSegmentMetadataUpdate
    | RemotePartitionDeleteMetadata
    | RemoteLogSegmentMetadataSnapshot
)


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A record value with its frame: the api key and record version it was written with."""

    api_key: int
    version: int
    event: RemoteLogMetadata


# -- writer ---------------------------------------------------------------------------------


class _Writer:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def _pack(self, s: struct.Struct, value: int, what: str) -> None:
        try:
            self.buf += s.pack(value)
        except struct.error as e:
            raise MetadataSerdeError(f"{what}={value} does not fit Kafka's type") from e

    def int8(self, value: int, what: str) -> None:
        self._pack(_I8, value, what)

    def int32(self, value: int, what: str) -> None:
        self._pack(_I32, value, what)

    def int64(self, value: int, what: str) -> None:
        self._pack(_I64, value, what)

    def uvarint(self, value: int) -> None:
        self.buf += encode_unsigned_varint(value)

    def uuid(self, value: uuid.UUID) -> None:
        self.buf += value.bytes  # big-endian: most significant half first

    def string(self, value: str, what: str) -> None:
        data = value.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise MetadataSerdeError(f"{what} is {len(data)} bytes, more than {MAX_STRING_BYTES}")
        self.uvarint(len(data) + 1)
        self.buf += data

    def nullable_bytes(self, value: bytes | None) -> None:
        if value is None:
            self.uvarint(0)
        else:
            self.uvarint(len(value) + 1)
            self.buf += value

    def tagged_fields(self, fields: dict[int, bytes]) -> None:
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(fields[tag]))
            self.buf += fields[tag]

    def no_tagged_fields(self) -> None:
        self.buf.append(0)


def _write_topic_id_partition(w: _Writer, tp: TopicIdPartition) -> None:
    w.string(tp.topic, "topic name")
    w.uuid(tp.topic_id)
    w.int32(tp.partition, "partition")
    w.no_tagged_fields()


def _write_segment_id(w: _Writer, sid: RemoteLogSegmentId) -> None:
    _write_topic_id_partition(w, sid.topic_id_partition)
    w.uuid(sid.id)
    w.no_tagged_fields()


def _write_epochs(w: _Writer, epochs: dict[int, int]) -> None:
    w.uvarint(len(epochs) + 1)
    for epoch, offset in sorted(epochs.items()):  # ascending, as Kafka's NavigableMap
        w.int32(epoch, "leader epoch")
        w.int64(offset, "leader epoch start offset")
        w.no_tagged_fields()


def _txn_tag(txn_index_empty: bool) -> dict[int, bytes]:
    # Written only when it differs from the default (false), as Kafka's generated code does.
    return {_TAG_TXN_INDEX_EMPTY: b"\x01"} if txn_index_empty else {}


def _body_segment(w: _Writer, md: RemoteLogSegmentMetadata) -> None:
    _write_segment_id(w, md.remote_log_segment_id)
    w.int64(md.start_offset, "start offset")
    w.int64(md.end_offset, "end offset")
    w.int32(md.broker_id, "broker id")
    w.int64(md.max_timestamp_ms, "max timestamp")
    w.int64(md.event_timestamp_ms, "event timestamp")
    _write_epochs(w, dict(md.segment_leader_epochs))
    w.int32(md.segment_size_in_bytes, "segment size")
    w.nullable_bytes(md.custom_metadata)
    w.int8(md.state, "state")
    w.tagged_fields(_txn_tag(md.txn_index_empty))


def _body_update(w: _Writer, up: RemoteLogSegmentMetadataUpdate) -> None:
    _write_segment_id(w, up.remote_log_segment_id)
    w.int32(up.broker_id, "broker id")
    w.int64(up.event_timestamp_ms, "event timestamp")
    w.nullable_bytes(up.custom_metadata)
    w.int8(up.state, "state")
    w.no_tagged_fields()


def _body_delete(w: _Writer, dm: RemotePartitionDeleteMetadata) -> None:
    _write_topic_id_partition(w, dm.topic_id_partition)
    w.int32(dm.broker_id, "broker id")
    w.int64(dm.event_timestamp_ms, "event timestamp")
    w.int8(dm.state, "state")
    w.no_tagged_fields()


def _body_snapshot(w: _Writer, sn: RemoteLogSegmentMetadataSnapshot) -> None:
    w.uuid(sn.segment_id)
    w.int64(sn.start_offset, "start offset")
    w.int64(sn.end_offset, "end offset")
    w.int32(sn.broker_id, "broker id")
    w.int64(sn.max_timestamp_ms, "max timestamp")
    w.int64(sn.event_timestamp_ms, "event timestamp")
    _write_epochs(w, sn.segment_leader_epochs)
    w.int32(sn.segment_size_in_bytes, "segment size")
    w.nullable_bytes(sn.custom_metadata)
    w.int8(sn.state, "state")
    w.tagged_fields(_txn_tag(sn.txn_index_empty))


def serialize(event: RemoteLogMetadata) -> bytes:
    """The record value Kafka's RemoteLogMetadataSerde writes for ``event`` (version 0).

    Raises:
        MetadataSerdeError: a value does not fit its Kafka type (e.g. a segment size above
            2**31 - 1, a topic name longer than 32767 UTF-8 bytes).
        TypeError: ``event`` is not one of the four metadata types.
    """
    w = _Writer()
    w.uvarint(FRAME_VERSION)
    if isinstance(event, RemoteLogSegmentMetadata):
        api_key, body = SEGMENT_METADATA_API_KEY, _body_segment
    elif isinstance(event, RemoteLogSegmentMetadataUpdate):
        api_key, body = SEGMENT_METADATA_UPDATE_API_KEY, _body_update
    elif isinstance(event, RemotePartitionDeleteMetadata):
        api_key, body = PARTITION_DELETE_API_KEY, _body_delete
    elif isinstance(event, RemoteLogSegmentMetadataSnapshot):
        api_key, body = SEGMENT_METADATA_SNAPSHOT_API_KEY, _body_snapshot
    else:
        raise TypeError(f"no remote log metadata serde for {type(event).__name__}")
    w.uvarint(api_key)
    w.uvarint(WRITE_VERSION)
    body(w, event)  # type: ignore[operator]
    return bytes(w.buf)


# -- reader ---------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise MetadataSerdeError(
                f"truncated record: {what} needs {n} bytes at byte {self.pos}, "
                f"{len(self.buf) - self.pos} left"
            )
        data = bytes(self.buf[self.pos : end])
        self.pos = end
        return data

    def _unpack(self, s: struct.Struct, what: str) -> int:
        value: int = s.unpack(self.take(s.size, what))[0]
        return value

    def int8(self, what: str) -> int:
        return self._unpack(_I8, what)

    def int32(self, what: str) -> int:
        return self._unpack(_I32, what)

    def int64(self, what: str) -> int:
        return self._unpack(_I64, what)

    def uvarint(self, what: str) -> int:
        try:
            value, self.pos = decode_unsigned_varint(self.buf, self.pos)
        except CorruptRecordError as e:
            raise MetadataSerdeError(f"truncated or malformed {what}: {e}") from e
        return value

    def uuid(self, what: str) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16, what))

    def string(self, what: str) -> str:
        n = self.uvarint(what) - 1
        if n < 0:
            raise MetadataSerdeError(f"non-nullable {what} was serialized as null")
        if n > MAX_STRING_BYTES:
            raise MetadataSerdeError(f"{what} has invalid length {n}")
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError as e:
            raise MetadataSerdeError(f"{what} is not valid UTF-8") from e

    def nullable_bytes(self, what: str) -> bytes | None:
        n = self.uvarint(what) - 1
        return None if n < 0 else self.take(n, what)

    def array_length(self, what: str) -> int:
        n = self.uvarint(what) - 1
        if n < 0:
            raise MetadataSerdeError(f"non-nullable {what} was serialized as null")
        if n > len(self.buf) - self.pos:  # every element takes at least one byte
            raise MetadataSerdeError(f"truncated record: {what} claims {n} elements")
        return n

    def tagged_fields(self, known: dict[int, Callable[[bytes], None]] | None = None) -> None:
        """Read a tagged-field section; hand known tags' bytes to their parser, skip others."""
        for _ in range(self.uvarint("tagged field count")):
            tag = self.uvarint("tag")
            data = self.take(self.uvarint("tagged field size"), f"tagged field {tag}")
            if known and tag in known:
                known[tag](data)


def _read_topic_id_partition(r: _Reader) -> TopicIdPartition:
    name = r.string("topic name")
    topic_id = r.uuid("topic id")
    partition = r.int32("partition")
    r.tagged_fields()
    return TopicIdPartition(topic_id, name, partition)


def _read_segment_id(r: _Reader) -> RemoteLogSegmentId:
    tp = _read_topic_id_partition(r)
    sid = r.uuid("segment id")
    r.tagged_fields()
    return RemoteLogSegmentId(tp, sid)


def _read_epochs(r: _Reader) -> dict[int, int]:
    epochs: dict[int, int] = {}
    for _ in range(r.array_length("segment leader epochs")):
        epoch = r.int32("leader epoch")
        epochs[epoch] = r.int64("leader epoch start offset")  # a repeated epoch: last wins
        r.tagged_fields()
    return dict(sorted(epochs.items()))


def _segment_state(value: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(value)
    except ValueError as e:
        raise MetadataSerdeError(f"unknown remote log segment state id {value}") from e


def _bool_tag(out: dict[str, bool], key: str) -> Callable[[bytes], None]:
    def parse(data: bytes) -> None:
        if len(data) != 1:
            raise MetadataSerdeError(f"tagged field {key} has {len(data)} bytes, expected 1")
        out[key] = data[0] != 0

    return parse


def _read_segment(r: _Reader) -> RemoteLogSegmentMetadata:
    sid = _read_segment_id(r)
    start, end = r.int64("start offset"), r.int64("end offset")
    broker_id = r.int32("broker id")
    max_ts, event_ts = r.int64("max timestamp"), r.int64("event timestamp")
    epochs = _read_epochs(r)
    size = r.int32("segment size")
    custom = r.nullable_bytes("custom metadata")
    state = _segment_state(r.int8("state"))
    tags = {"txn_index_empty": False}
    r.tagged_fields({_TAG_TXN_INDEX_EMPTY: _bool_tag(tags, "txn_index_empty")})
    return RemoteLogSegmentMetadata(
        sid, start, end, max_ts, broker_id, event_ts, size, epochs, custom, state,
        tags["txn_index_empty"],
    )  # fmt: skip


def _read_update(r: _Reader) -> RemoteLogSegmentMetadataUpdate:
    sid = _read_segment_id(r)
    broker_id = r.int32("broker id")
    event_ts = r.int64("event timestamp")
    custom = r.nullable_bytes("custom metadata")
    state = _segment_state(r.int8("state"))
    r.tagged_fields()
    return RemoteLogSegmentMetadataUpdate(sid, event_ts, custom, state, broker_id)


def _read_delete(r: _Reader) -> RemotePartitionDeleteMetadata:
    tp = _read_topic_id_partition(r)
    broker_id = r.int32("broker id")
    event_ts = r.int64("event timestamp")
    raw_state = r.int8("state")
    r.tagged_fields()
    try:
        state = RemotePartitionDeleteState(raw_state)
    except ValueError as e:
        raise MetadataSerdeError(f"unknown remote partition delete state id {raw_state}") from e
    return RemotePartitionDeleteMetadata(tp, state, event_ts, broker_id)


def _read_snapshot(r: _Reader) -> RemoteLogSegmentMetadataSnapshot:
    segment_id = r.uuid("segment id")
    start, end = r.int64("start offset"), r.int64("end offset")
    broker_id = r.int32("broker id")
    max_ts, event_ts = r.int64("max timestamp"), r.int64("event timestamp")
    epochs = _read_epochs(r)
    size = r.int32("segment size")
    custom = r.nullable_bytes("custom metadata")
    state = _segment_state(r.int8("state"))
    tags = {"txn_index_empty": False}
    r.tagged_fields({_TAG_TXN_INDEX_EMPTY: _bool_tag(tags, "txn_index_empty")})
    if not epochs:
        raise MetadataSerdeError("segment leader epochs must not be empty")
    if end < start:
        raise MetadataSerdeError(f"end offset {end} is below start offset {start}")
    return RemoteLogSegmentMetadataSnapshot(
        segment_id, start, end, max_ts, broker_id, event_ts, size, epochs, custom, state,
        tags["txn_index_empty"],
    )  # fmt: skip


_READERS: dict[int, Callable[[_Reader], RemoteLogMetadata]] = {
    SEGMENT_METADATA_API_KEY: _read_segment,
    SEGMENT_METADATA_UPDATE_API_KEY: _read_update,
    PARTITION_DELETE_API_KEY: _read_delete,
    SEGMENT_METADATA_SNAPSHOT_API_KEY: _read_snapshot,
}


def decode(data: bytes | bytearray | memoryview) -> DecodedRecord:
    """Read a record value with its frame (api key and record version).

    Raises:
        MetadataSerdeError: truncated data, trailing bytes, frame version other than 1, an
            unknown api key or version, or field values that make no valid metadata.
    """
    r = _Reader(memoryview(data))
    frame = r.uvarint("frame version")
    if frame != FRAME_VERSION:
        raise MetadataSerdeError(
            f"unknown frame version {frame} (only frame version {FRAME_VERSION} is supported)"
        )
    api_key = r.uvarint("api key")
    version = r.uvarint("record version")
    read = _READERS.get(api_key)
    if read is None:
        raise MetadataSerdeError(f"unknown remote log metadata api key {api_key}")
    if version not in SUPPORTED_VERSIONS:
        raise MetadataSerdeError(
            f"unsupported version {version} of api key {api_key} "
            f"(supported {SUPPORTED_VERSIONS.start}-{SUPPORTED_VERSIONS.stop - 1})"
        )
    try:
        event = read(r)
    except ValueError as e:  # the metadata types check themselves
        raise MetadataSerdeError(f"invalid record with api key {api_key}: {e}") from e
    if r.pos != len(r.buf):
        raise MetadataSerdeError(
            f"found {len(r.buf) - r.pos} byte(s) of garbage after record with api key {api_key}"
        )
    return DecodedRecord(api_key, version, event)


def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """The event in a record value (see ``decode`` for the errors)."""
    return decode(data).event
