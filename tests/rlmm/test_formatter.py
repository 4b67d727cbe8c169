"""rlmm.formatter: the lines Kafka's RemoteLogMetadataFormatter prints, and our options."""

from __future__ import annotations

import uuid

import pytest

from rlmm.formatter import FormatterConfig, RemoteLogMetadataFormatter
from rlmm.serde import MetadataSerdeError, RemoteLogSegmentMetadataSnapshot, serialize
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

TOPIC_ID = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")
SEG = uuid.UUID("00000000-0000-0000-0000-000000000001")
TID = "Ej5FZ-ibEtOkVkJmFBdAAA"  # Kafka's Uuid.toString() of TOPIC_ID (computed with the JDK)
SID = "AAAAAAAAAAAAAAAAAAAAAQ"
TP0 = TopicIdPartition(TOPIC_ID, "foo", 0)
SEGMENT = RemoteLogSegmentMetadata(
    RemoteLogSegmentId(TP0, SEG), 0, 100, -1, 1, 123, 1024, {0: 0, 1: 20, 2: 80},
    custom_metadata=bytes(10), txn_index_empty=True,
)  # fmt: skip


def test_segment_line_is_kafkas_by_default() -> None:
    # The same event as Kafka's RemoteLogMetadataFormatterTest, and its expected line.
    line = RemoteLogMetadataFormatter().format(0, 0, serialize(SEGMENT))
    assert line == (
        "partition: 0, offset: 0, value: "
        "RemoteLogSegmentMetadata{remoteLogSegmentId="
        f"RemoteLogSegmentId{{topicIdPartition={TID}:foo-0, id={SID}}}, "
        "startOffset=0, endOffset=100, brokerId=1, maxTimestampMs=-1, "
        "eventTimestampMs=123, segmentLeaderEpochs={0=0, 1=20, 2=80}, segmentSizeInBytes=1024, "
        "customMetadata=Optional[CustomMetadata{10 bytes}], "
        "state=COPY_SEGMENT_STARTED, txnIdxEmpty=true}"
    )


def test_update_and_delete_lines_are_kafkas_by_default() -> None:
    update = RemoteLogSegmentMetadataUpdate(
        RemoteLogSegmentId(TP0, SEG), 456, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2
    )
    delete = RemotePartitionDeleteMetadata(
        TP0, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 789, 3
    )
    fmt = RemoteLogMetadataFormatter()
    assert fmt.format(4, 17, serialize(update)) == (
        "partition: 4, offset: 17, value: RemoteLogSegmentMetadataUpdate{remoteLogSegmentId="
        f"RemoteLogSegmentId{{topicIdPartition={TID}:foo-0, id={SID}}}, "
        "customMetadata=Optional.empty, state=COPY_SEGMENT_FINISHED, eventTimestampMs=456, "
        "brokerId=2}"
    )
    assert fmt.format(4, 18, serialize(delete)) == (
        "partition: 4, offset: 18, value: "
        f"RemotePartitionDeleteMetadata{{topicPartition={TID}:foo-0"
        ", state=DELETE_PARTITION_MARKED, eventTimestampMs=789, brokerId=3}"
    )


def test_snapshot_record_line() -> None:
    snap = RemoteLogSegmentMetadataSnapshot.from_metadata(SEGMENT)
    assert RemoteLogMetadataFormatter().format(1, 2, serialize(snap)) == (
        f"partition: 1, offset: 2, value: RemoteLogSegmentMetadataSnapshot{{segmentId={SID}, "
        "startOffset=0, endOffset=100, maxTimestampMs=-1, segmentLeaderEpochs={0=0, 1=20, 2=80}, "
        "segmentSizeInBytes=1024, customMetadata=Optional[CustomMetadata{10 bytes}], "
        "state=COPY_SEGMENT_STARTED, txnIdxEmpty=true}"
    )


def test_all_fields_version_and_separator() -> None:
    fmt = RemoteLogMetadataFormatter.from_properties(
        {
            "print.partition": "false",
            "print.message.offset": "true",
            "print.version": "true",
            "print.all.event.value.fields": "true",
            "separator": " | ",
        }
    )
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP0, SEG), 5, 9, 10, 1, 11, 12, {3: 5}, b"\x01\xff",
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    )  # fmt: skip
    assert fmt.format(0, 42, serialize(md)) == (
        "offset: 42 | apiKey: 0 | version: 0 | value: RemoteLogSegmentMetadataRecord("
        "remoteLogSegmentId=RemoteLogSegmentIdEntry(topicIdPartition=TopicIdPartitionEntry("
        f"name='foo', id={TID}, partition=0), id={SID}), startOffset=5, endOffset=9, brokerId=1, "
        "maxTimestampMs=10, eventTimestampMs=11, "
        "segmentLeaderEpochs=[SegmentLeaderEpochEntry(leaderEpoch=3, offset=5)], "
        "segmentSizeInBytes=12, customMetadata=[1, -1], remoteLogSegmentState=2, "
        "txnIndexEmpty=false)"
    )
    delete = RemotePartitionDeleteMetadata(
        TP0, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, 7, 8
    )
    assert fmt.format(0, 43, serialize(delete)) == (
        "offset: 43 | apiKey: 2 | version: 0 | value: RemotePartitionDeleteMetadataRecord("
        f"topicIdPartition=TopicIdPartitionEntry(name='foo', id={TID}, partition=0), "
        "brokerId=8, eventTimestampMs=7, remotePartitionDeleteState=2)"
    )


@pytest.mark.parametrize(
    ("props", "message"),
    [({"print.partition": "yes"}, "print.partition"), ({"print.key": "true"}, "print.key")],
)
def test_bad_properties_are_refused_naming_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FormatterConfig.from_properties(props)


def test_a_value_that_is_not_metadata_raises_the_typed_error() -> None:
    with pytest.raises(MetadataSerdeError):
        RemoteLogMetadataFormatter().format(0, 0, b"hello")
