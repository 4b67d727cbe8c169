"""``spark.read.format("tierlog")`` in a real Spark session (local[2]) over an archive."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

import pytest

from .archive_data import T0, write_archive

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Spark's Python workers must run this interpreter (the one with pyarrow and tierlog).
os.environ["PYSPARK_PYTHON"] = sys.executable


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tierlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()


def load(spark, archive, **options):
    reader = spark.read.format("tierlog").option("topic", "orders")
    for k, v in archive.config.rsm_config.items():
        reader = reader.option(f"rsm.config.{k}", v)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_the_dataframe_is_the_read_committed_log(spark, tmp_path):
    archive = write_archive(tmp_path)
    df = load(spark, archive, maxBytesPerPartition="400")
    assert df.rdd.getNumPartitions() > 2  # a partition per segment, big ones split
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
        "leaderEpoch",
        "producerId",
    ]
    got = [
        (
            r.offset,
            r.key,
            r.value,
            tuple((h.key, h.value) for h in r.headers),
            int(r.timestamp.timestamp() * 1000),
        )
        for r in df.orderBy("offset").collect()
    ]
    want = [
        (o, k, v, h, ts) for o, k, v, h, ts in archive.expected if o not in archive.aborted_offsets
    ]
    assert [
        (o, bytes(k) if k is not None else None, bytes(v) if v is not None else None, h, ts)
        for o, k, v, h, ts in got
    ] == want
    assert {r.topic for r in df.select("topic").distinct().collect()} == {"orders"}


def test_offset_and_timestamp_options(spark, tmp_path):
    archive = write_archive(tmp_path)
    offsets = (
        load(
            spark,
            archive,
            startingOffsets=json.dumps({"orders": {"0": 30}}),
            endingOffsets=json.dumps({"orders": {"0": 71}}),
        )
        .select("offset")
        .collect()
    )
    assert sorted(r.offset for r in offsets) == [
        o for o, *_ in archive.expected if 30 <= o <= 70 and o not in archive.aborted_offsets
    ]
    since = T0 + 50_000
    timed = load(spark, archive, startingTimestamp=str(since)).select("timestamp").collect()
    assert timed and all(int(r.timestamp.timestamp() * 1000) >= since for r in timed)


def test_a_bad_option_names_itself(spark, tmp_path):
    archive = write_archive(tmp_path)
    with pytest.raises(Exception, match="startingOffsets"):
        load(spark, archive, startingOffsets="sometime").collect()
