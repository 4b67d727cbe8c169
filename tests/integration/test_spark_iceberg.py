"""The Iceberg export of an archive a real broker tiered to S3 (moto over HTTP), twice, as
the topic grows: pyiceberg reads each table (one in a local warehouse, one in a warehouse on
S3) equal to what a consumer reads from offset 0, field by field, each offset once, in two
snapshots.

The data set has keys and null keys, values and null values, headers (with null values),
and batches of every codec (one confluent-kafka producer per codec and round).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.kafka_clients import Rec, consume_confluent, produce_confluent
from tests.support.s3_harness import (
    Bucket,
    local_log_start,
    local_segment_bases,
    metadata_segments,
    tiering_settings,
)
from tests.support.waiting import wait_until

TOPIC = "iceberg-archive"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 200
TABLE = "kafka.archive"


def records(round_: int, codec_index: int) -> list[Rec]:
    out = []
    for i in range(PER_CODEC):
        n = (round_ * len(CODECS) + codec_index) * PER_CODEC + i
        key = None if n % 5 == 0 else b"key-%d" % n
        # Incompressible values: every codec's segments fill, roll and get tiered.
        value = None if n % 11 == 0 else random.Random(n).randbytes(160)
        headers = (("h", b"v%d" % n), ("empty", None)) if n % 3 == 0 else ()
        out.append(Rec(key, value, headers))
    return out


@pytest.fixture(scope="module")
def spark() -> Any:
    from spark_jobs.export import spark_session

    session = spark_session("local[2]", "tierlog-spark-iceberg")
    yield session
    session.stop()


def produce_and_tier(broker: BrokerProcess, round_: int) -> None:
    for i, codec in enumerate(CODECS):
        produce_confluent(
            broker.bootstrap,
            TOPIC,
            records(round_, i),
            {"compression.type": codec, "batch.size": 8192},
        )

    # Every rolled segment copied: the archive does not change under the export.
    def settled() -> bool:
        finished = metadata_segments(broker.bootstrap, TOPIC, "COPY_SEGMENT_FINISHED")
        last = max((seg["end_offset"] for seg in finished), default=-1)
        bases = local_segment_bases(broker, TOPIC)
        return len(bases) <= 2 and last + 1 == bases[-1]

    wait_until(settled, 120, 0.5, what=f"round {round_}: every rolled segment copied")


def table_rows(catalog: Any) -> list[tuple]:
    table = catalog.load_table(tuple(TABLE.split("."))).scan().to_arrow().sort_by("offset")
    return [
        (
            r["offset"],
            r["key"],
            r["value"],
            tuple((h["key"], h["value"]) for h in r["headers"]),
            int(r["timestamp"].timestamp() * 1000),
            r["topic"],
            r["partition"],
            r["timestampType"],
        )
        for r in table.to_pylist()
    ]


def test_two_exports_to_iceberg_equal_what_a_consumer_reads(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess], spark: Any
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyiceberg.catalog import load_catalog

    from spark_jobs.iceberg_export import run_iceberg_export
    from spark_jobs.iceberg_table import IcebergTarget

    broker = start_broker(
        tmp_path / "b", tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    )
    brokers.append(broker)
    config = {
        "remote.storage.enable": "true",
        "segment.bytes": str(64 * 1024),
        "local.retention.bytes": str(64 * 1024),
    }
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(30)
    rsm = {f"rsm.config.{k}": v for k, v in s3_endpoint.rsm_configs(bucket.name).items() if v}
    options = {
        "remote.log.storage.manager.class.name": "rsm_plugins.s3.S3RemoteStorageManager",
        **rsm,
        "topic": TOPIC,
    }
    s3_catalog = f"sqlite:///{tmp_path}/s3-warehouse-catalog.db"
    targets = {
        "local": IcebergTarget(str(tmp_path / "warehouse"), TABLE),
        "s3": IcebergTarget(f"s3://{bucket.name}/warehouse", TABLE, s3_catalog),
    }
    exported: dict[str, list[int]] = {name: [] for name in targets}
    for round_ in (0, 1):
        produce_and_tier(broker, round_)
        for name, target in targets.items():
            summary = run_iceberg_export(spark, options, target)
            assert summary.snapshot_id is not None, name
            exported[name].append(summary.rows)

    # Read back with catalogs opened here, not by tierlog.
    catalogs = {
        "local": load_catalog(
            "tierlog",
            type="sql",
            uri=f"sqlite:///{tmp_path}/warehouse/tierlog-catalog.db",
            warehouse=f"file://{tmp_path}/warehouse",
        ),
        # pyiceberg's own S3 FileIO, configured here, not by tierlog.
        "s3": load_catalog(
            "tierlog",
            type="sql",
            uri=s3_catalog,
            warehouse=f"s3://{bucket.name}/warehouse",
            **{
                "s3.endpoint": s3_endpoint.url,
                "s3.region": s3_endpoint.region,
                "s3.access-key-id": s3_endpoint.access_key,
                "s3.secret-access-key": s3_endpoint.secret_key,
            },
        ),
    }

    consumed = {
        g.offset: (g.offset, g.key, g.value, tuple(g.headers), g.timestamp, TOPIC, 0, 0)
        for g in consume_confluent(broker.bootstrap, TOPIC)
    }
    assert len(consumed) == 2 * len(CODECS) * PER_CODEC
    local_start = local_log_start(broker, TOPIC)
    for name, catalog in catalogs.items():
        rows = table_rows(catalog)
        offsets = [r[0] for r in rows]
        # The tiered prefix of the log, each offset once, identical to the consumer's.
        assert offsets == list(range(len(offsets))), name
        assert len(offsets) >= local_start > 0, name
        assert rows == [consumed[o] for o in offsets], name
        assert sum(exported[name]) == len(rows) and exported[name][1] > 0, name
        table = catalog.load_table(tuple(TABLE.split(".")))
        assert len(table.snapshots()) == 2, name
        state = table.current_snapshot().summary.additional_properties["tierlog.exported-ranges"]
        assert state == f'{{"{TOPIC}":{{"0":[[0,{len(offsets) - 1}]]}}}}', name
    # The S3 table's files are in the bucket.
    assert bucket.client.list_objects_v2(Bucket=bucket.name, Prefix="warehouse/")["KeyCount"] > 0
