"""rlmm.serde: Kafka's RemoteLogMetadataSerde byte for byte.

The byte vectors below are written out field by field from Kafka's message schemas
(storage/src/main/resources/message/*.json) and AbstractApiMessageSerde's framing, not
produced by the code under test.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlmm.serde import (
    MetadataSerdeError,
    RemoteLogSegmentMetadataSnapshot,
    decode,
    deserialize,
    serialize,
)
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

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
topics = st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode("utf-8")) <= 0x7FFF)
custom_metadata = st.none() | st.binary(max_size=64)

topic_id_partitions = st.builds(
    TopicIdPartition, topic_id=uuids, topic=topics, partition=st.integers(0, 2**31 - 1)
)
segment_ids = st.builds(RemoteLogSegmentId, topic_id_partition=topic_id_partitions, id=uuids)


@st.composite
def leader_epochs(draw: st.DrawFn, start: int) -> dict[int, int]:
    """An ascending epoch -> start offset map beginning at ``start``."""
    epochs = sorted(draw(st.sets(st.integers(0, 2**31 - 1), min_size=1, max_size=6)))
    offsets = sorted(draw(st.lists(st.integers(start, start + 2**40), min_size=len(epochs) - 1,
                                   max_size=len(epochs) - 1)))  # fmt: skip
    return dict(zip(epochs, [start, *offsets], strict=True))


@st.composite
def segment_metadata(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, 2**62))
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=draw(segment_ids),
        start_offset=start,
        end_offset=draw(st.integers(start, 2**63 - 1)),
        max_timestamp_ms=draw(INT64),
        broker_id=draw(INT32),
        event_timestamp_ms=draw(INT64),
        segment_size_in_bytes=draw(st.integers(0, 2**31 - 1)),
        segment_leader_epochs=draw(leader_epochs(start)),
        custom_metadata=draw(custom_metadata),
        state=draw(st.sampled_from(RemoteLogSegmentState)),
        txn_index_empty=draw(st.booleans()),
    )


segment_updates = st.builds(
    RemoteLogSegmentMetadataUpdate,
    remote_log_segment_id=segment_ids,
    event_timestamp_ms=INT64,
    custom_metadata=custom_metadata,
    state=st.sampled_from(
        [s for s in RemoteLogSegmentState if s != RemoteLogSegmentState.COPY_SEGMENT_STARTED]
    ),
    broker_id=INT32,
)

partition_deletes = st.builds(
    RemotePartitionDeleteMetadata,
    topic_id_partition=topic_id_partitions,
    state=st.sampled_from(RemotePartitionDeleteState),
    event_timestamp_ms=INT64,
    broker_id=INT32,
)

events = segment_metadata() | segment_updates | partition_deletes


# -- fixed values for the byte vectors ------------------------------------------------------

TOPIC_ID = uuid.UUID("00000000-0000-0001-0000-000000000002")
SEGMENT_UUID = uuid.UUID("0a0b0c0d-0e0f-1011-1213-141516171819")
TP = TopicIdPartition(TOPIC_ID, "foo", 3)
SEGMENT_ID = RemoteLogSegmentId(TP, SEGMENT_UUID)

TOPIC_ID_PARTITION_BYTES = (
    b"\x04foo"  # Name: compact string, unsigned varint length + 1 = 4, then UTF-8
    + bytes.fromhex("0000000000000001 0000000000000002")  # Id: uuid, msb then lsb
    + bytes.fromhex("00000003")  # Partition: int32
    + b"\x00"  # TopicIdPartitionEntry's tagged fields: none
)
SEGMENT_ID_BYTES = (
    TOPIC_ID_PARTITION_BYTES
    + bytes.fromhex("0a0b0c0d0e0f1011 1213141516171819")  # Id: uuid of the segment
    + b"\x00"  # RemoteLogSegmentIdEntry's tagged fields: none
)


def test_segment_metadata_bytes_match_kafka() -> None:
    md = RemoteLogSegmentMetadata(
        remote_log_segment_id=SEGMENT_ID,
        start_offset=0,
        end_offset=99,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=1,
        event_timestamp_ms=123,
        segment_size_in_bytes=1024,
        segment_leader_epochs={0: 0, 2: 50},
        custom_metadata=b"\xab\xcd",
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        txn_index_empty=True,
    )
    expected = (
        b"\x01"  # frame version 1 (unsigned varint)
        + b"\x00"  # api key 0: RemoteLogSegmentMetadataRecord
        + b"\x00"  # record version 0
        + SEGMENT_ID_BYTES
        + bytes.fromhex("0000000000000000")  # StartOffset int64
        + bytes.fromhex("0000000000000063")  # EndOffset int64 = 99
        + bytes.fromhex("00000001")  # BrokerId int32
        + (1_700_000_000_000).to_bytes(8, "big")  # MaxTimestampMs int64
        + bytes.fromhex("000000000000007b")  # EventTimestampMs int64 = 123
        + b"\x03"  # SegmentLeaderEpochs: compact array, 2 entries + 1
        + bytes.fromhex("00000000 0000000000000000 00")  # epoch 0 at 0, no tags
        + bytes.fromhex("00000002 0000000000000032 00")  # epoch 2 at 50, no tags
        + bytes.fromhex("00000400")  # SegmentSizeInBytes int32 = 1024
        + b"\x03\xab\xcd"  # CustomMetadata: compact nullable bytes, length 2 + 1
        + b"\x01"  # RemoteLogSegmentState int8: COPY_SEGMENT_FINISHED
        + b"\x01"  # tagged fields: 1
        + b"\x00\x01\x01"  # tag 0 TxnIndexEmpty, size 1, true
    )
    assert serialize(md) == expected
    assert deserialize(expected) == md


def test_txn_index_empty_false_is_not_written() -> None:
    md = RemoteLogSegmentMetadata(SEGMENT_ID, 5, 5, -1, 0, 0, 0, {7: 5})
    data = serialize(md)
    # size 0, null custom metadata, state 0, then an empty tagged-field section
    assert data.endswith(bytes.fromhex("00000000") + b"\x00" + b"\x00" + b"\x00")
    assert deserialize(data) == md


def test_segment_update_bytes_match_kafka() -> None:
    update = RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=SEGMENT_ID,
        event_timestamp_ms=1000,
        custom_metadata=None,
        state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        broker_id=7,
    )
    expected = (
        b"\x01\x01\x00"  # frame version 1, api key 1 (update record), version 0
        + SEGMENT_ID_BYTES
        + bytes.fromhex("00000007")  # BrokerId int32
        + bytes.fromhex("00000000000003e8")  # EventTimestampMs int64 = 1000
        + b"\x00"  # CustomMetadata: null
        + b"\x02"  # RemoteLogSegmentState: DELETE_SEGMENT_STARTED
        + b"\x00"  # tagged fields: none
    )
    assert serialize(update) == expected
    assert deserialize(expected) == update


DELETE = RemotePartitionDeleteMetadata(
    TP, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, 1000, 7
)
DELETE_BYTES = (
    b"\x01\x02\x00"  # frame version 1, api key 2 (partition delete record), version 0
    + TOPIC_ID_PARTITION_BYTES
    + bytes.fromhex("00000007")  # BrokerId int32
    + bytes.fromhex("00000000000003e8")  # EventTimestampMs int64 = 1000
    + b"\x01"  # RemotePartitionDeleteState: DELETE_PARTITION_STARTED
    + b"\x00"  # tagged fields: none
)


def test_partition_delete_bytes_match_kafka() -> None:
    assert serialize(DELETE) == DELETE_BYTES
    assert deserialize(DELETE_BYTES) == DELETE


def test_segment_snapshot_record_bytes_match_kafka() -> None:
    snap = RemoteLogSegmentMetadataSnapshot(
        SEGMENT_UUID, 10, 20, 30, 4, 50, 60, {1: 10}, None,
        RemoteLogSegmentState.COPY_SEGMENT_STARTED, False,
    )  # fmt: skip
    expected = (
        b"\x01\x03\x00"  # frame version 1, api key 3 (segment snapshot record), version 0
        + bytes.fromhex("0a0b0c0d0e0f1011 1213141516171819")  # SegmentId uuid
        + (10).to_bytes(8, "big")  # StartOffset
        + (20).to_bytes(8, "big")  # EndOffset
        + (4).to_bytes(4, "big")  # BrokerId
        + (30).to_bytes(8, "big")  # MaxTimestampMs
        + (50).to_bytes(8, "big")  # EventTimestampMs
        + b"\x02" + bytes.fromhex("00000001 000000000000000a 00")  # one epoch: 1 at 10
        + (60).to_bytes(4, "big")  # SegmentSizeInBytes
        + b"\x00"  # CustomMetadata: null
        + b"\x00"  # state COPY_SEGMENT_STARTED
        + b"\x00"  # no tags (TxnIndexEmpty false)
    )  # fmt: skip
    assert serialize(snap) == expected
    assert deserialize(expected) == snap


# -- round trips ----------------------------------------------------------------------------


@given(events)
def test_every_event_round_trips(event: object) -> None:
    data = serialize(event)  # type: ignore[arg-type]
    assert deserialize(data) == event
    record = decode(data)
    assert (record.version, data[0]) == (0, 1)


@given(segment_metadata())
def test_snapshot_records_round_trip(md: RemoteLogSegmentMetadata) -> None:
    snap = RemoteLogSegmentMetadataSnapshot.from_metadata(md)
    assert deserialize(serialize(snap)) == snap
    assert snap.to_metadata(md.topic_id_partition) == md


def test_leader_epochs_are_read_in_epoch_order_like_kafkas_navigable_map() -> None:
    md = RemoteLogSegmentMetadata(SEGMENT_ID, 0, 99, 0, 1, 0, 1, {0: 0, 2: 50})
    data = bytearray(serialize(md))
    # frame, key, version; segment id; offsets, broker, timestamps; the array's length
    first = 3 + len(SEGMENT_ID_BYTES) + 8 + 8 + 4 + 8 + 8 + 1
    entry0, entry2 = data[first : first + 13], data[first + 13 : first + 26]
    data[first : first + 26] = entry2 + entry0  # epoch 2 written before epoch 0
    assert list(deserialize(bytes(data)).segment_leader_epochs.items()) == [(0, 0), (2, 50)]  # type: ignore[union-attr]


# -- tolerance: unknown tagged fields and version 1 -----------------------------------------


def test_unknown_tagged_fields_are_skipped() -> None:
    unknown = b"\x01" + b"\x05\x03\xaa\xbb\xcc"  # one field: tag 5, size 3, three bytes
    top_level = DELETE_BYTES[:-1] + unknown
    assert deserialize(top_level) == DELETE
    nested = DELETE_BYTES.replace(b"\x00\x00\x00\x03\x00", b"\x00\x00\x00\x03" + unknown, 1)
    assert nested != DELETE_BYTES
    assert deserialize(nested) == DELETE


def test_version_1_records_with_broker_leader_epoch_are_read() -> None:
    # Kafka's newest schemas (version 1) add tag 0 BrokerLeaderEpoch and tag 1 EndOffset.
    v1 = b"\x01\x02\x01" + DELETE_BYTES[3:-1] + b"\x02" + b"\x00\x04\x00\x00\x00\x05"
    v1 += b"\x01\x08" + (500).to_bytes(8, "big")
    record = decode(v1)
    assert (record.api_key, record.version, record.event) == (2, 1, DELETE)


# -- errors ---------------------------------------------------------------------------------


def test_every_truncation_raises_the_typed_error() -> None:
    md = RemoteLogSegmentMetadata(
        SEGMENT_ID, 0, 99, 0, 1, 0, 1, {0: 0}, b"xyz", txn_index_empty=True
    )
    data = serialize(md)
    for n in range(len(data)):
        with pytest.raises(MetadataSerdeError):
            deserialize(data[:n])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00" + DELETE_BYTES[1:], "frame version 0"),
        (b"\x02" + DELETE_BYTES[1:], "frame version 2"),
        (b"\x01\x09" + DELETE_BYTES[2:], "api key 9"),
        (b"\x01\x02\x02" + DELETE_BYTES[3:], "version 2"),
        (DELETE_BYTES + b"\x00", "garbage"),
        (DELETE_BYTES[:-2] + b"\x07\x00", "state id 7"),
        (b"\x01\x02\x00\x00" + DELETE_BYTES[7:], "null"),  # topic name serialized as null
    ],
)
def test_bad_records_raise_a_clear_typed_error(data: bytes, message: str) -> None:
    with pytest.raises(MetadataSerdeError, match=message) as info:
        deserialize(data)
    assert isinstance(info.value, RemoteStorageError)


def test_values_outside_kafkas_types_are_refused_on_write() -> None:
    md = RemoteLogSegmentMetadata(SEGMENT_ID, 0, 1, 0, 1, 0, 2**31, {0: 0})
    with pytest.raises(MetadataSerdeError, match="segment size"):
        serialize(md)


@given(st.binary(max_size=80))
def test_random_bytes_never_raise_anything_but_the_typed_error(data: bytes) -> None:
    with contextlib.suppress(MetadataSerdeError):
        deserialize(b"\x01" + data)
