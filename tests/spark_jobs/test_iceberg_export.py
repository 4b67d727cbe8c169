"""The Iceberg export, read back with pyiceberg (an implementation tierlog did not write):
incremental runs, exactly once (re-runs, time bounds, a SIGKILLed run, a concurrent run),
the table's shape, schema evolution, and refusals that name what is wrong."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import ValidationException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import BinaryType, LongType, NestedField, StringType

from spark_jobs.datasource import SegmentSplit, TierlogReader
from spark_jobs.export import spark_session
from spark_jobs.export_ranges import pending_splits
from spark_jobs.iceberg_export import (
    commit_written,
    run_iceberg_export,
    stage_append,
    write_split,
)
from spark_jobs.iceberg_table import (
    SCHEMA,
    STATE_KEY,
    IcebergExportError,
    IcebergSchemaError,
    IcebergTarget,
    catalog_properties,
    exported_ranges,
)

from .archive_data import T0, TXN_PID, write_archive

HOUR = 3_600_000
TABLE = "kafka.orders"
IDENT = ("kafka", "orders")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]", "tierlog-iceberg-tests")
    yield session
    session.stop()


def options(archive: Any, **extra: str) -> dict[str, str]:
    return {
        "topic": "orders",
        **{f"rsm.config.{k}": v for k, v in archive.config.rsm_config.items()},
        **extra,
    }


def catalog_of(warehouse: Path) -> Catalog:
    return load_catalog(
        "tierlog",
        type="sql",
        uri=f"sqlite:///{warehouse}/tierlog-catalog.db",
        warehouse=f"file://{warehouse}",
    )


def scanned(catalog: Catalog) -> list[tuple]:
    """Every row of the table as pyiceberg reads it, in offset order."""
    table = catalog.load_table(IDENT).scan().to_arrow().sort_by("offset")
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
            r["leaderEpoch"],
            r["producerId"],
        )
        for r in table.to_pylist()
    ]


def expected(archive: Any, *, until: int | None = None) -> list[tuple]:
    """What a READ_COMMITTED consumer reads, as rows of the table (archive_data's batches:
    three records each, epoch 2 from batch 20 on, batches 10, 11 and 30 transactional)."""
    return [
        (o, k, v, h, ts, "orders", 0, 0, 2 if o // 3 >= 20 else 0, TXN_PID if o // 3 == 30 else -1)
        for o, k, v, h, ts in archive.expected
        if o not in archive.aborted_offsets and (until is None or ts < until)
    ]


def test_incremental_exports_write_each_offset_once(spark, tmp_path):
    archive = write_archive(tmp_path / "a", ts_step_ms=HOUR)
    warehouse = tmp_path / "wh"
    target = IcebergTarget(str(warehouse), TABLE)
    until = T0 + 50 * HOUR + 1  # inside a segment: its later records wait for the next run
    first = run_iceberg_export(spark, options(archive, endingTimestamp=str(until)), target)
    catalog = catalog_of(warehouse)
    assert ("kafka",) in catalog.list_namespaces()  # created
    assert scanned(catalog) == expected(archive, until=until)
    assert first.rows == len(expected(archive, until=until)) and first.snapshot_id is not None

    second = run_iceberg_export(spark, options(archive), target)
    rows = scanned(catalog)
    assert rows == expected(archive)  # field by field, each offset once, in offset order
    assert first.rows + second.rows == len(rows)
    table = catalog.load_table(IDENT)
    assert [s.snapshot_id for s in table.snapshots()] == [first.snapshot_id, second.snapshot_id]
    # Every offset of the log is dealt with, the aborted ones (never exported) included.
    assert exported_ranges(table).to_json() == '{"orders":{"0":[[0,119]]}}'
    assert table.properties[STATE_KEY] == exported_ranges(table).to_json()
    summary = table.current_snapshot().summary.additional_properties
    assert summary[STATE_KEY] == '{"orders":{"0":[[0,119]]}}'

    third = run_iceberg_export(spark, options(archive), target)
    assert third.snapshot_id is None and third.rows == 0
    assert len(catalog.load_table(IDENT).snapshots()) == 2


def test_the_table_has_fixed_ids_partitions_by_day_and_declares_its_sort_order(spark, tmp_path):
    # The fixed ids are those a fresh table gets: Spark or pyiceberg creating the table from
    # the same columns assign the same.
    assert assign_fresh_schema_ids(SCHEMA) == SCHEMA
    archive = write_archive(tmp_path / "a", ts_step_ms=HOUR)
    warehouse = tmp_path / "wh"
    run_iceberg_export(spark, options(archive), IcebergTarget(str(warehouse), TABLE))
    table = catalog_of(warehouse).load_table(IDENT)
    assert table.schema() == SCHEMA
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("partition", "identity"),
        ("timestamp_day", "day"),
    ]
    assert [table.schema().find_column_name(f.source_id) for f in table.sort_order().fields] == [
        "partition",
        "offset",
    ]
    # One file per (partition, day); pruning on a day reads that day's files only.
    files = list(table.scan().plan_files())
    days = {(T0 + n * HOUR) // 86_400_000 for n in range(120)}
    assert {f.file.partition[1] for f in files} == days
    one_day = min(days)
    pruned = table.scan(
        row_filter=f"timestamp >= '{_iso(one_day)}' and timestamp < '{_iso(one_day + 1)}'"
    )
    assert {f.file.partition[1] for f in pruned.plan_files()} == {one_day}


def _iso(day: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(day * 86_400, UTC).isoformat()


def test_a_killed_export_commits_nothing_and_a_rerun_completes_it(spark, tmp_path):
    archive = write_archive(tmp_path / "a", ts_step_ms=HOUR)
    warehouse = tmp_path / "wh"
    target = IcebergTarget(str(warehouse), TABLE)
    first = run_iceberg_export(spark, options(archive, endingTimestamp=str(T0 + 10 * HOUR)), target)
    catalog = catalog_of(warehouse)
    table = catalog.load_table(IDENT)
    data = Path(table.location().removeprefix("file://")) / "data"
    committed = {f.file.file_path.removeprefix("file://") for f in table.scan().plan_files()}
    config = tmp_path / "server.properties"
    config.write_text(f"rsm.config.storage.root={archive.config.rsm_config['storage.root']}\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tierlog",
            "export",
            "--config",
            str(config),
            "--topic",
            "orders",
            "--format",
            "iceberg",
            "--output",
            str(warehouse),
            "--table",
            TABLE,
            "--master",
            "local[1]",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )

    def new_files() -> set[str]:
        return {str(p) for p in data.rglob("*.parquet")} - committed

    deadline = time.monotonic() + 120
    while not new_files():
        assert proc.poll() is None, "the export ended before writing a data file"
        assert time.monotonic() < deadline, "the export never wrote a data file"
        time.sleep(0.02)  # polling for the moment to kill
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    # Files were written, none committed: readers see the previous snapshot, unchanged.
    table = catalog.load_table(IDENT)
    assert table.current_snapshot().snapshot_id == first.snapshot_id
    assert scanned(catalog) == expected(archive, until=T0 + 10 * HOUR)

    run_iceberg_export(spark, options(archive), target)
    assert scanned(catalog) == expected(archive)
    assert len(catalog.load_table(IDENT).snapshots()) == 2


def test_a_concurrent_export_is_never_duplicated(spark, tmp_path):
    archive = write_archive(tmp_path / "a", ts_step_ms=HOUR)
    warehouse = tmp_path / "wh"
    target = IcebergTarget(str(warehouse), TABLE)
    run_iceberg_export(spark, options(archive, endingTimestamp=str(T0 + 10 * HOUR)), target)
    catalog = catalog_of(warehouse)

    # Export A reads the table's state and writes the rest of the log ...
    stale = catalog.load_table(IDENT)
    done = exported_ranges(stale)
    splits = [s for s in TierlogReader(options(archive)).partitions()]
    assert all(isinstance(s, SegmentSplit) for s in splits)
    written = [
        write_split(s, stale.metadata.model_dump_json(), dict(stale.io.properties))
        for s in pending_splits(splits, lambda s: done.of(s.topic, s.partition))
    ]
    # ... while export B commits part of it first.
    middle = T0 + 70 * HOUR
    run_iceberg_export(spark, options(archive, endingTimestamp=str(middle)), target)
    assert scanned(catalog) == expected(archive, until=middle)

    # pyiceberg would rebase A's append onto B's snapshot; the export refuses instead.
    with pytest.raises(ValidationException):
        stage_append(stale, written, done).commit_transaction()
    # The driver's commit re-reads the state: A's files of offsets B committed are dropped
    # (deleted), the others committed.
    result = commit_written(catalog, IDENT, written)
    assert result.dropped and result.committed and result.snapshot_id is not None
    for w in result.dropped:
        assert all(not Path(f.file_path.removeprefix("file://")).exists() for f in w.files)
    rows = scanned(catalog)
    assert len({r[0] for r in rows}) == len(rows)  # no offset twice
    # What A dropped and B did not export, a later run exports.
    run_iceberg_export(spark, options(archive), target)
    assert scanned(catalog) == expected(archive)


def test_the_state_outlives_the_expiry_of_the_export_snapshots(spark, tmp_path):
    archive = write_archive(tmp_path / "a", ts_step_ms=HOUR)
    warehouse = tmp_path / "wh"
    target = IcebergTarget(str(warehouse), TABLE)
    run_iceberg_export(spark, options(archive, endingTimestamp=str(T0 + 60 * HOUR)), target)
    run_iceberg_export(spark, options(archive), target)
    catalog = catalog_of(warehouse)
    table = catalog.load_table(IDENT)
    exports = [s.snapshot_id for s in table.snapshots()]
    # Another writer's snapshot (no tierlog summary) on top, then the exports' expire.
    table.append(table.schema().as_arrow().empty_table())
    table.maintenance.expire_snapshots().by_ids(exports).commit()
    table = catalog.load_table(IDENT)
    assert len(table.snapshots()) == 1
    assert STATE_KEY not in table.current_snapshot().summary.additional_properties

    again = run_iceberg_export(spark, options(archive), target)
    assert again.rows == 0 and again.snapshot_id is None
    assert scanned(catalog) == expected(archive)


def kafka_source_table(catalog: Catalog, columns: int) -> None:
    """A table someone made with the first ``columns`` columns of the export's schema."""
    catalog.create_namespace_if_not_exists("kafka")
    schema = Schema(*SCHEMA.fields[:columns])
    catalog.create_table(
        IDENT,
        schema=schema,
        partition_spec=PartitionSpec(
            PartitionField(4, 1000, IdentityTransform(), "partition"),
            PartitionField(6, 1001, DayTransform(), "timestamp_day"),
        ),
    )


def test_a_table_with_fewer_columns_gains_ours(spark, tmp_path):
    archive = write_archive(tmp_path / "a", ts_step_ms=HOUR)
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    catalog = catalog_of(warehouse)
    kafka_source_table(catalog, 8)  # Spark's Kafka source columns only
    before = {f.name: f.field_id for f in catalog.load_table(IDENT).schema().fields}
    run_iceberg_export(spark, options(archive), IcebergTarget(str(warehouse), TABLE))
    schema = catalog.load_table(IDENT).schema()
    assert [f.name for f in schema.fields] == [f.name for f in SCHEMA.fields]
    assert {n: i for n, i in ((f.name, f.field_id) for f in schema.fields) if n in before} == (
        before
    )
    assert scanned(catalog) == expected(archive)


@pytest.mark.parametrize(
    ("field", "column", "why"),
    [
        (NestedField(5, "offset", StringType(), required=True), "offset", "is string"),
        (NestedField(20, "owner", LongType(), required=True), "owner", "does not write"),
        (NestedField(1, "key", BinaryType(), required=True), "key", "writes nulls"),
    ],
)
def test_a_table_that_does_not_fit_is_refused_naming_it(spark, tmp_path, field, column, why):
    archive = write_archive(tmp_path / "a")
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    catalog = catalog_of(warehouse)
    catalog.create_namespace("kafka")
    fields = [f for f in SCHEMA.fields if f.name != field.name] + [field]
    catalog.create_table(IDENT, schema=Schema(*fields))
    with pytest.raises(IcebergSchemaError, match=rf"column '{column}' .*{why}"):
        run_iceberg_export(spark, options(archive), IcebergTarget(str(warehouse), TABLE))
    assert catalog.load_table(IDENT).current_snapshot() is None


def test_a_catalog_that_cannot_be_used_is_named(spark, tmp_path):
    archive = write_archive(tmp_path / "a")
    missing = f"sqlite:///{tmp_path}/no/such/dir/catalog.db"
    with pytest.raises(IcebergExportError, match=f"catalog {missing}"):
        run_iceberg_export(
            spark, options(archive), IcebergTarget(str(tmp_path / "wh"), TABLE, missing)
        )
    unreachable = "http://127.0.0.1:1/catalog"  # a REST catalog nobody serves
    with pytest.raises(IcebergExportError, match=f"catalog {unreachable}"):
        run_iceberg_export(
            spark, options(archive), IcebergTarget(str(tmp_path / "wh"), TABLE, unreachable)
        )
    with pytest.raises(IcebergExportError, match="--catalog-uri"):
        run_iceberg_export(spark, options(archive), IcebergTarget("s3://lake/wh", TABLE))
    with pytest.raises(IcebergExportError, match=r"NAMESPACE\.TABLE"):
        run_iceberg_export(spark, options(archive), IcebergTarget(str(tmp_path / "wh"), "orders"))


def test_catalog_properties_carry_the_rsm_s3_settings_to_an_s3_warehouse():
    rsm = {
        "rsm.config.storage.s3.endpoint.url": "http://127.0.0.1:4566",
        "rsm.config.storage.s3.region": "eu-west-1",
        "rsm.config.storage.aws.access.key.id": "AK",
        "rsm.config.storage.aws.secret.access.key": "SK",
    }
    s3 = IcebergTarget("s3://lake/wh", TABLE, "sqlite:////var/cat.db", {"s3.region": "us-east-2"})
    assert catalog_properties(s3, rsm) == {
        "type": "sql",
        "uri": "sqlite:////var/cat.db",
        "warehouse": "s3://lake/wh",
        "s3.endpoint": "http://127.0.0.1:4566",
        "s3.region": "us-east-2",  # --catalog-property wins
        "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK",
    }
    # A REST catalog's warehouse is passed as given: it may be a name, not a path.
    rest = IcebergTarget("analytics", TABLE, "https://polaris.example/api/catalog")
    assert catalog_properties(rest, rsm) == {
        "type": "rest",
        "uri": "https://polaris.example/api/catalog",
        "warehouse": "analytics",
    }
