"""Writes to the internal topics that only brokers and super users may make: raw requests
(for exact error codes, and for __transaction_state, which clients cannot look up) and what
an operator's AdminClient would try; the tiered topic these tests watch, and the segments a
bucket holds."""

from __future__ import annotations

import datetime
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from rsm_plugins.layout import SegmentManifest
from tests.support.kafka_wire import call
from tiered.api import RemoteLogSegmentMetadata

INTERNAL = ("__consumer_offsets", "__transaction_state", "__remote_log_metadata")
TIMEOUT = datetime.timedelta(seconds=10)
TIERED = "tiered"


def create_tiered_topic(bootstrap: str, **config: str) -> None:
    """One partition, 4 KiB segments, 4 KiB of local retention: nearly all of it is remote."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic_config = {
        "segment.bytes": "4096",
        "local.retention.bytes": "4096",
        "remote.storage.enable": "true",
        "retention.ms": "-1",
        **config,
    }
    for future in admin.create_topics([NewTopic(TIERED, 1, 1, config=topic_config)]).values():
        future.result(30)


def manifests(tmp: Path) -> list[RemoteLogSegmentMetadata]:
    """The segments whose copy completed, from the manifests under ``tmp/bucket``."""
    out = []
    for path in sorted((tmp / "bucket").rglob("*.manifest.json")):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # deleted meanwhile (the RSM writes manifests atomically)
        out.append(SegmentManifest.from_json(data, str(path)).metadata)
    return sorted(out, key=lambda m: m.start_offset)


def produce_raw(
    bootstrap: str, topic: str, partition: int = 0, value: bytes = b"forged"
) -> ErrorCode:
    """One Produce v9 of one record: the partition's error code."""
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    builder = RecordBatchBuilder()
    builder.append(value, key=b"k")
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=TIMEOUT,
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(index=i32(partition), records=bytes(builder.build())),
                ),
            ),
        ),
    )
    (topic_response,) = call(bootstrap, ApiKey.PRODUCE, 9, request).responses
    return topic_response.partition_responses[0].error_code


def delete_records_raw(bootstrap: str, topic: str, partition: int = 0) -> ErrorCode:
    """DeleteRecords v2 up to the high watermark (-1): the partition's error code."""
    from kio.schema.delete_records.v2.request import (
        DeleteRecordsPartition,
        DeleteRecordsRequest,
        DeleteRecordsTopic,
    )

    request = DeleteRecordsRequest(
        topics=(
            DeleteRecordsTopic(
                name=topic,
                partitions=(
                    DeleteRecordsPartition(partition_index=i32(partition), offset=i64(-1)),
                ),
            ),
        ),
        timeout=TIMEOUT,
    )
    (topic_response,) = call(bootstrap, ApiKey.DELETE_RECORDS, 2, request).topics
    return topic_response.partitions[0].error_code


def admin_errors(bootstrap: str, **config: str) -> dict[str, int]:
    """What AdminClient answers for the protected changes an operator tool might try."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, **config})

    def code(future) -> int:
        try:
            future.result(20)
        except KafkaException as e:
            return e.args[0].code()
        return 0

    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "__remote_log_metadata",
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    return {
        "alter": code(admin.incremental_alter_configs([resource])[resource]),
        "create": code(
            admin.create_topics([NewTopic("__transaction_state", 1, 1)])["__transaction_state"]
        ),
        "delete": code(admin.delete_topics(["__remote_log_metadata"])["__remote_log_metadata"]),
    }
