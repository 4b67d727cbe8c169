"""Lines for people from raw ``__remote_log_metadata`` records, like Kafka's formatter.

Kafka's ``RemoteLogMetadataSerde.RemoteLogMetadataFormatter`` (used with
``kafka-console-consumer --formatter``) prints, for every record::

    partition: <p>, offset: <o>, value: <the deserialized event's Java toString()>

and takes no properties. With its defaults this formatter prints exactly that line, Java
toString included: topic and segment ids in Kafka's Uuid form (URL-safe base64 of the 16
bytes, no padding), epochs as ``{0=0, 1=20}``, custom metadata as
``Optional[CustomMetadata{10 bytes}]`` or ``Optional.empty``.

Properties (ours; Kafka's formatter has none), all optional:

    print.partition               true   the ``partition: <p>`` part
    print.message.offset          true   the ``offset: <o>`` part
    print.version                 false  an ``apiKey: <k>, version: <v>`` part (the frame)
    print.all.event.value.fields  false  the value as the raw record, every field, in the
                                         form of Kafka's generated messages' toString
                                         (state ids, custom metadata bytes in full)
    separator                     ", "   between the parts (Kafka's line uses ", ")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from core.kafka_uuid import uuid_to_base64
from rlmm.serde import (
    DecodedRecord,
    RemoteLogSegmentMetadataSnapshot,
    decode,
)
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)

_BOOL = {"true": True, "false": False}


@dataclass(frozen=True, slots=True)
class FormatterConfig:
    print_partition: bool = True
    print_message_offset: bool = True
    print_version: bool = False
    print_all_event_value_fields: bool = False
    separator: str = ", "

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> FormatterConfig:
        """Parse the properties above.

        Raises:
            ValueError: an unknown key, or a boolean other than true/false, naming the key.
        """
        keys = {
            "print.partition": "print_partition",
            "print.message.offset": "print_message_offset",
            "print.version": "print_version",
            "print.all.event.value.fields": "print_all_event_value_fields",
        }
        values: dict[str, bool | str] = {}
        for key, raw in props.items():
            if key == "separator":
                values["separator"] = raw
            elif key in keys:
                flag = _BOOL.get(raw.strip().lower())
                if flag is None:
                    raise ValueError(f"{key}={raw!r}: expected true or false")
                values[keys[key]] = flag
            else:
                known = ", ".join([*keys, "separator"])
                raise ValueError(f"unknown formatter property {key!r} (known: {known})")
        return cls(**values)  # type: ignore[arg-type]


# -- Kafka's toString() of the public types --------------------------------------------------


def _tip(tp: TopicIdPartition) -> str:
    return f"{uuid_to_base64(tp.topic_id)}:{tp.topic}-{tp.partition}"


def _segment_id(sid: RemoteLogSegmentId) -> str:
    tip = _tip(sid.topic_id_partition)
    return f"RemoteLogSegmentId{{topicIdPartition={tip}, id={uuid_to_base64(sid.id)}}}"


def _epochs(epochs: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"{e}={o}" for e, o in sorted(epochs.items())) + "}"


def _custom(custom: bytes | None) -> str:
    if custom is None:
        return "Optional.empty"
    return f"Optional[CustomMetadata{{{len(custom)} bytes}}]"


def _java_bool(flag: bool) -> str:
    return "true" if flag else "false"


def kafka_to_string(event: object) -> str:
    """The Java ``toString()`` Kafka's formatter prints for a deserialized event."""
    if isinstance(event, RemoteLogSegmentMetadata):
        return (
            f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_segment_id(event.remote_log_segment_id)}"
            f", startOffset={event.start_offset}, endOffset={event.end_offset}"
            f", brokerId={event.broker_id}, maxTimestampMs={event.max_timestamp_ms}"
            f", eventTimestampMs={event.event_timestamp_ms}"
            f", segmentLeaderEpochs={_epochs(event.segment_leader_epochs)}"
            f", segmentSizeInBytes={event.segment_size_in_bytes}"
            f", customMetadata={_custom(event.custom_metadata)}, state={event.state.name}"
            f", txnIdxEmpty={_java_bool(event.txn_index_empty)}}}"
        )
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return (
            f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={_segment_id(event.remote_log_segment_id)}"
            f", customMetadata={_custom(event.custom_metadata)}, state={event.state.name}"
            f", eventTimestampMs={event.event_timestamp_ms}, brokerId={event.broker_id}}}"
        )
    if isinstance(event, RemotePartitionDeleteMetadata):
        return (
            f"RemotePartitionDeleteMetadata{{topicPartition={_tip(event.topic_id_partition)}"
            f", state={event.state.name}, eventTimestampMs={event.event_timestamp_ms}"
            f", brokerId={event.broker_id}}}"
        )
    if isinstance(event, RemoteLogSegmentMetadataSnapshot):
        return (
            f"RemoteLogSegmentMetadataSnapshot{{segmentId={uuid_to_base64(event.segment_id)}"
            f", startOffset={event.start_offset}, endOffset={event.end_offset}"
            f", maxTimestampMs={event.max_timestamp_ms}"
            f", segmentLeaderEpochs={_epochs(event.segment_leader_epochs)}"
            f", segmentSizeInBytes={event.segment_size_in_bytes}"
            f", customMetadata={_custom(event.custom_metadata)}, state={event.state.name}"
            f", txnIdxEmpty={_java_bool(event.txn_index_empty)}}}"
        )
    raise TypeError(f"not a remote log metadata event: {type(event).__name__}")


# -- every field of the raw record, as Kafka's generated messages print themselves ----------


def _java_bytes(data: bytes | None) -> str:
    # Arrays.toString(byte[]): signed bytes.
    if data is None:
        return "null"
    return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in data) + "]"


def _tip_entry(tp: TopicIdPartition) -> str:
    return (
        f"TopicIdPartitionEntry(name='{tp.topic}', id={uuid_to_base64(tp.topic_id)}"
        f", partition={tp.partition})"
    )


def _segment_id_entry(sid: RemoteLogSegmentId) -> str:
    return (
        f"RemoteLogSegmentIdEntry(topicIdPartition={_tip_entry(sid.topic_id_partition)}"
        f", id={uuid_to_base64(sid.id)})"
    )


def _epoch_entries(epochs: Mapping[int, int]) -> str:
    entries = (
        f"SegmentLeaderEpochEntry(leaderEpoch={e}, offset={o})" for e, o in sorted(epochs.items())
    )
    return "[" + ", ".join(entries) + "]"


def record_to_string(event: object) -> str:
    """Every field of the record an event is written as, in generated-message toString form."""
    if isinstance(event, RemoteLogSegmentMetadata):
        return (
            f"RemoteLogSegmentMetadataRecord(remoteLogSegmentId={_segment_id_entry(event.remote_log_segment_id)}"
            f", startOffset={event.start_offset}, endOffset={event.end_offset}"
            f", brokerId={event.broker_id}, maxTimestampMs={event.max_timestamp_ms}"
            f", eventTimestampMs={event.event_timestamp_ms}"
            f", segmentLeaderEpochs={_epoch_entries(event.segment_leader_epochs)}"
            f", segmentSizeInBytes={event.segment_size_in_bytes}"
            f", customMetadata={_java_bytes(event.custom_metadata)}"
            f", remoteLogSegmentState={int(event.state)}"
            f", txnIndexEmpty={_java_bool(event.txn_index_empty)})"
        )
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return (
            f"RemoteLogSegmentMetadataUpdateRecord(remoteLogSegmentId={_segment_id_entry(event.remote_log_segment_id)}"
            f", brokerId={event.broker_id}, eventTimestampMs={event.event_timestamp_ms}"
            f", customMetadata={_java_bytes(event.custom_metadata)}"
            f", remoteLogSegmentState={int(event.state)})"
        )
    if isinstance(event, RemotePartitionDeleteMetadata):
        return (
            f"RemotePartitionDeleteMetadataRecord(topicIdPartition={_tip_entry(event.topic_id_partition)}"
            f", brokerId={event.broker_id}, eventTimestampMs={event.event_timestamp_ms}"
            f", remotePartitionDeleteState={int(event.state)})"
        )
    if isinstance(event, RemoteLogSegmentMetadataSnapshot):
        return (
            f"RemoteLogSegmentMetadataSnapshotRecord(segmentId={uuid_to_base64(event.segment_id)}"
            f", startOffset={event.start_offset}, endOffset={event.end_offset}"
            f", brokerId={event.broker_id}, maxTimestampMs={event.max_timestamp_ms}"
            f", eventTimestampMs={event.event_timestamp_ms}"
            f", segmentLeaderEpochs={_epoch_entries(event.segment_leader_epochs)}"
            f", segmentSizeInBytes={event.segment_size_in_bytes}"
            f", customMetadata={_java_bytes(event.custom_metadata)}"
            f", remoteLogSegmentState={int(event.state)}"
            f", txnIndexEmpty={_java_bool(event.txn_index_empty)})"
        )
    raise TypeError(f"not a remote log metadata event: {type(event).__name__}")


class RemoteLogMetadataFormatter:
    """Formats ``__remote_log_metadata`` records, one line each (without the newline)."""

    def __init__(self, config: FormatterConfig | None = None) -> None:
        self.config = config or FormatterConfig()

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> RemoteLogMetadataFormatter:
        return cls(FormatterConfig.from_properties(props))

    def format(self, partition: int, offset: int, value: bytes) -> str:
        """The line for one record.

        Raises:
            MetadataSerdeError: ``value`` is not a remote log metadata record.
        """
        return self.format_decoded(partition, offset, decode(value))

    def format_decoded(self, partition: int, offset: int, record: DecodedRecord) -> str:
        cfg = self.config
        parts: list[str] = []
        if cfg.print_partition:
            parts.append(f"partition: {partition}")
        if cfg.print_message_offset:
            parts.append(f"offset: {offset}")
        if cfg.print_version:
            parts.append(f"apiKey: {record.api_key}{cfg.separator}version: {record.version}")
        render = record_to_string if cfg.print_all_event_value_fields else kafka_to_string
        parts.append(f"value: {render(record.event)}")
        return cfg.separator.join(parts)
