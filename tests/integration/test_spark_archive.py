"""Spark over an archive a real broker tiered to S3 (moto over HTTP): the DataSource and the
Parquet export return exactly the records a consumer reads from offset 0, field by field.

The data set has keys and null keys, values and null values, headers (with null values),
and batches of every codec (one confluent-kafka producer per codec). A second test has a
transactional producer commit and abort transactions across segment rolls: the archive's
READ_COMMITTED view (aborted records and markers left out, with the remote transaction
indexes) is what a read_committed consumer reads.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
import s3fs

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

TOPIC = "spark-archive"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 400


def records(codec_index: int) -> list[Rec]:
    out = []
    for i in range(PER_CODEC):
        n = codec_index * PER_CODEC + i
        key = None if n % 5 == 0 else b"key-%d" % n
        # Incompressible values: every codec's segments fill, roll and get tiered.
        value = None if n % 11 == 0 else random.Random(n).randbytes(160)
        headers = (("h", b"v%d" % n), ("empty", None)) if n % 3 == 0 else ()
        out.append(Rec(key, value, headers))
    return out


@pytest.fixture(scope="module")
def spark() -> Any:
    from spark_jobs.export import spark_session

    session = spark_session("local[2]", "tierlog-spark-archive")
    yield session
    session.stop()


def row_of(offset: int, key: Any, value: Any, headers: Any, ts_ms: int) -> tuple:
    return (offset, key, value, tuple(headers), ts_ms)


def test_datasource_and_export_return_what_a_consumer_reads(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess], spark: Any
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

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
    for i, codec in enumerate(CODECS):
        produce_confluent(
            broker.bootstrap, TOPIC, records(i), {"compression.type": codec, "batch.size": 8192}
        )
    wait_until(
        lambda: local_log_start(broker, TOPIC) > 0 and len(local_segment_bases(broker, TOPIC)) <= 2,
        120,
        0.5,
        what="tiering caught up and local retention applied",
    )

    # Every rolled segment copied: the archive does not change under the reads below.
    def settled() -> bool:
        finished = metadata_segments(broker.bootstrap, TOPIC, "COPY_SEGMENT_FINISHED")
        last = max((seg["end_offset"] for seg in finished), default=-1)
        return last + 1 == local_segment_bases(broker, TOPIC)[-1]

    wait_until(settled, 120, 0.5, what="every rolled segment copied")
    consumed = {
        g.offset: row_of(g.offset, g.key, g.value, g.headers, g.timestamp)
        for g in consume_confluent(broker.bootstrap, TOPIC)
    }
    assert len(consumed) == len(CODECS) * PER_CODEC

    local_start = local_log_start(broker, TOPIC)
    rsm = {f"rsm.config.{k}": v for k, v in s3_endpoint.rsm_configs(bucket.name).items() if v}
    options = {
        "remote.log.storage.manager.class.name": "rsm_plugins.s3.S3RemoteStorageManager",
        **rsm,
        "topic": TOPIC,
    }
    reader = spark.read.format("tierlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    rows = [
        row_of(
            r.offset,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers],
            int(r.timestamp.timestamp() * 1000),
        )
        for r in reader.load().orderBy("offset").collect()
    ]
    offsets = [r[0] for r in rows]
    # The archive holds the tiered prefix of the log, each offset once, identical.
    assert offsets == list(range(len(offsets)))
    assert local_start > 0 and len(offsets) >= local_start  # all below local disk at least
    assert rows == [consumed[o] for o in offsets]

    # The same archive with the segment metadata from __remote_log_metadata, read over
    # Kafka and offline from the broker's log dir, instead of the bucket's manifests.
    for source in (
        {"bootstrap.servers": broker.bootstrap},
        {"log.dirs": broker.settings["log.dirs"]},
    ):
        other = spark.read.format("tierlog")
        for k, v in {**options, **source}.items():
            other = other.option(k, v)
        assert [r.offset for r in other.load().orderBy("offset").select("offset").collect()] == (
            offsets
        ), source

    # The export, written to the same S3 endpoint through s3fs and read back with pyarrow.
    from spark_jobs.export import run_export

    output = f"s3://{bucket.name}/export"
    summary = run_export(spark, options, output)
    assert summary.rows == len(rows)
    fs = s3fs.S3FileSystem(
        key=s3_endpoint.access_key,
        secret=s3_endpoint.secret_key,
        client_kwargs={"endpoint_url": s3_endpoint.url, "region_name": s3_endpoint.region},
    )
    table = ds.dataset(
        f"{bucket.name}/export",
        filesystem=fs,
        format="parquet",
        partitioning="hive",
        exclude_invalid_files=True,
    ).to_table()
    exported = sorted(
        row_of(
            r["offset"],
            r["key"],
            r["value"],
            [(h["key"], h["value"]) for h in r["headers"]],
            int(r["timestamp"].timestamp() * 1000),
        )
        for r in table.to_pylist()
    )
    assert exported == rows


def test_the_archive_drops_what_a_real_transactional_producer_aborted(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess], spark: Any
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "spark-txn"
    broker = start_broker(
        tmp_path / "b", tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    )
    brokers.append(broker)
    config = {
        "remote.storage.enable": "true",
        "segment.bytes": str(16 * 1024),
        "local.retention.bytes": str(16 * 1024),
    }
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-txn", "linger.ms": 5}
    )
    producer.init_transactions(30)
    for t in range(12):
        producer.begin_transaction()
        for i in range(40):
            producer.produce(topic, random.Random(t * 100 + i).randbytes(160), partition=0)
        if t % 3 == 1:
            producer.flush(30)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    # Plain records after the last marker: its segment rolls and gets tiered too.
    produce_confluent(broker.bootstrap, topic, [Rec(None, b"tail-%d" % i, ()) for i in range(200)])

    def settled() -> bool:
        finished = metadata_segments(broker.bootstrap, topic, "COPY_SEGMENT_FINISHED")
        last = max((seg["end_offset"] for seg in finished), default=-1)
        return (
            last + 1 == local_segment_bases(broker, topic)[-1]
            and local_log_start(broker, topic) > 0
        )

    wait_until(settled, 120, 0.5, what="every rolled segment copied and local retention applied")
    committed = {
        g.offset: g.value
        for g in consume_confluent(
            broker.bootstrap, topic, config={"isolation.level": "read_committed"}
        )
    }
    # librdkafka's default isolation level is read_committed.
    everything = consume_confluent(
        broker.bootstrap, topic, config={"isolation.level": "read_uncommitted"}
    )
    assert len(committed) == 8 * 40 + 200 and len(everything) == 12 * 40 + 200

    rsm = {f"rsm.config.{k}": v for k, v in s3_endpoint.rsm_configs(bucket.name).items() if v}
    reader = spark.read.format("tierlog")
    for k, v in {
        "remote.log.storage.manager.class.name": "rsm_plugins.s3.S3RemoteStorageManager",
        **rsm,
        "topic": topic,
    }.items():
        reader = reader.option(k, v)
    rows = [(r.offset, bytes(r.value)) for r in reader.load().orderBy("offset").collect()]
    assert rows, "nothing archived"
    archived_up_to = max(offset for offset, _ in rows)
    expected = sorted((o, v) for o, v in committed.items() if o <= archived_up_to)
    assert rows == expected
    # Aborted records were archived (their offsets lie below the archive's end) and left out.
    aborted = {g.offset for g in everything} - set(committed)
    assert any(o <= archived_up_to for o in aborted)
