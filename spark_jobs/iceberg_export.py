"""The Iceberg export job: a tiered topic's canonical log appended to an Iceberg table,
each offset exactly once, one snapshot per run.

1. The driver opens the catalog, creates the table (and its namespace) or checks and
   evolves it (``spark_jobs.iceberg_table``), and reads the offsets already exported from
   the table itself (the export state of the current snapshot's lineage).
2. It plans the canonical segment ranges (``spark_jobs.datasource``) and keeps, of each,
   the offsets not yet exported.
3. One Spark task per range reads it through the RSM plugin and writes its rows with
   pyiceberg's own Parquet writer (``write_file``: Iceberg field ids in the files, column
   metrics, one file per day) straight into the table's data folder, and returns the
   ``DataFile`` entries and the offsets it dealt with.
4. The driver commits every file in one fast-append snapshot whose summary records the
   offsets, cumulative, under ``tierlog.exported-ranges``. The catalog's atomic swap of the
   metadata pointer is the only moment the table changes: a run killed before it leaves the
   table at its previous snapshot (the files it wrote are orphans no reader sees).

Concurrent runs: the commit asserts that the table's main branch is still at the snapshot
the state was read from. pyiceberg would, on a conflict, rebase an append onto the new head
and commit it again; for this export that would duplicate offsets a concurrent export just
committed, so the snapshot producer refuses any rebase (``_ExportAppend``). The driver then
re-reads the state: files holding offsets that appeared meanwhile are deleted (those offsets
are in the table once already), the others are committed again on the new head; after
``COMMIT_ATTEMPTS`` failed attempts the run fails and commits nothing.

Time bounds (``startingTimestamp`` / ``endingTimestamp``) do not mark records outside them as
exported: a later run with other bounds (or none) exports them.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.archive import SCHEMA as ARROW_SCHEMA
from spark_jobs.archive import read_range
from spark_jobs.datasource import SegmentSplit, TierlogReader
from spark_jobs.export_ranges import pending_splits, time_window
from spark_jobs.iceberg_table import (
    ADDED_KEY,
    STATE_KEY,
    IcebergExportError,
    IcebergTarget,
    exported_ranges,
    load_or_create_table,
    open_catalog,
)
from spark_jobs.offset_ranges import ExportedRanges, OffsetRanges

# isort: split
# After spark_jobs.iceberg_table, which turns a missing pyiceberg into the install hint.
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import pyarrow_to_schema, write_file
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.table import Table, Transaction, WriteTask
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles

COMMIT_ATTEMPTS = 5


@dataclass(frozen=True)
class WrittenSplit:
    """What one task did: the offsets of its range it dealt with (exported, or left out for
    good: control records, aborted transactions) and the data files holding its rows."""

    topic: str
    partition: int
    covered: OffsetRanges
    files: tuple[DataFile, ...]
    rows: int

    def ranges(self) -> ExportedRanges:
        return ExportedRanges({(self.topic, self.partition): self.covered})


@dataclass(frozen=True)
class IcebergExportSummary:
    table: str
    ranges: int
    rows: int
    files: int
    bytes: int
    seconds: float
    snapshot_id: int | None
    already_exported: int
    lost_to_concurrent: int

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        snapshot = (
            f"snapshot {self.snapshot_id}" if self.snapshot_id is not None else "no new snapshot"
        )
        extra = (
            f"; {self.lost_to_concurrent} ranges left to a concurrent export"
            if self.lost_to_concurrent
            else ""
        )
        return (
            f"exported {self.ranges} offset ranges to {self.table} ({snapshot}; "
            f"{self.already_exported} offsets already there{extra}): {self.rows} rows, "
            f"{self.files} files, {self.bytes} bytes of Parquet in {self.seconds:.1f}s "
            f"({rate:.0f} rows/s)"
        )


# -- executors --------------------------------------------------------------------------------
def _partition_key(metadata: Any, partition: int, day: int) -> PartitionKey:
    """The table's partition tuple for (``partition``, ``day``) in its default spec (checked
    to be identity(partition), day(timestamp) in some order)."""
    schema = metadata.schema()
    spec = metadata.spec()
    values = []
    for f in spec.fields:
        column = schema.find_column_name(f.source_id)
        values.append(PartitionFieldValue(f, partition if column == "partition" else day))
    return PartitionKey(field_values=values, partition_spec=spec, schema=schema)


def write_split(
    split: SegmentSplit, metadata_json: str, io_properties: Mapping[str, str]
) -> WrittenSplit:
    """Executor side: read one range, write its rows as Iceberg data files (one per day)."""
    metadata = TableMetadataUtil.parse_raw(metadata_json)
    r = split.range
    rsm = split.config.open()
    try:
        batches = list(read_range(rsm, r, split.topic, split.partition, split.aborted))
    finally:
        rsm.close()
    rows, covered = time_window(
        pa.Table.from_batches(batches, schema=ARROW_SCHEMA),
        r.start,
        r.end,
        split.since_ms,
        split.until_ms,
    )
    if rows.num_rows == 0:
        return WrittenSplit(split.topic, split.partition, covered, (), 0)
    days = pc.cast(pc.cast(rows["timestamp"], pa.date32()), pa.int32())
    distinct = sorted(pc.unique(days).to_pylist())
    parts = (
        [(distinct[0], rows)]
        if len(distinct) == 1
        else [(day, rows.filter(pc.equal(days, day))) for day in distinct]
    )
    task_schema = pyarrow_to_schema(
        ARROW_SCHEMA,
        name_mapping=metadata.schema().name_mapping,
        format_version=metadata.format_version,
    )
    write_uuid = uuid.uuid4()
    tasks = [
        WriteTask(
            write_uuid=write_uuid,
            task_id=n,
            schema=task_schema,
            record_batches=part.to_batches(),
            partition_key=_partition_key(metadata, split.partition, day),
        )
        for n, (day, part) in enumerate(parts)
    ]
    io = load_file_io(dict(io_properties), metadata.location)
    files = tuple(write_file(io, metadata, iter(tasks)))
    return WrittenSplit(split.topic, split.partition, covered, files, rows.num_rows)


# -- the commit -------------------------------------------------------------------------------
class _ExportAppend(_FastAppendFiles):
    """A fast append that is never rebased: if the branch moved since the state was read,
    the commit fails (``ValidationException``) and the driver decides again.

    pyiceberg 0.12 has no public switch for this: its retry loop calls
    ``_validate_concurrency`` on every producer before re-committing on the new head
    (a no-op for appends). tests/spark_jobs/test_iceberg_export.py
    (``test_a_concurrent_export_is_never_duplicated``) fails if that stops being so.
    """

    def _validate_concurrency(self) -> None:
        window = self._commit_window
        if window is not None and not window.is_empty():
            raise ValidationException(
                "the table changed since its export state was read; not rebasing the export"
            )


@dataclass(frozen=True)
class CommitResult:
    snapshot_id: int | None
    committed: tuple[WrittenSplit, ...]
    dropped: tuple[WrittenSplit, ...]


def stage_append(
    table: Table, written: Sequence[WrittenSplit], done: ExportedRanges
) -> Transaction:
    added = ExportedRanges.empty()
    for w in written:
        added = added.union(w.ranges())
    state = done.union(added).to_json()
    tx = table.transaction()
    tx.set_properties({STATE_KEY: state})
    append = _ExportAppend(
        operation=Operation.APPEND,
        transaction=tx,
        io=table.io,
        snapshot_properties={STATE_KEY: state, ADDED_KEY: added.to_json()},
    )
    with append:
        for w in written:
            for f in w.files:
                append.append_data_file(f)
    return tx


def commit_written(
    catalog: Catalog,
    identifier: tuple[str, ...],
    written: Sequence[WrittenSplit],
    *,
    progress: Callable[[str], None] = lambda line: None,
) -> CommitResult:
    """Commit ``written`` in one snapshot, exactly once (see the module docstring).

    Raises:
        IcebergExportError: the table kept changing for ``COMMIT_ATTEMPTS`` attempts.
    """
    pending = [w for w in written if w.covered]
    dropped: list[WrittenSplit] = []
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        table = catalog.load_table(identifier)
        done = exported_ranges(table)
        clash = [w for w in pending if done.of(w.topic, w.partition).overlaps(w.covered)]
        if clash:
            for w in clash:
                for f in w.files:
                    table.io.delete(f.file_path)  # never committed: nobody refers to it
            dropped.extend(clash)
            gone = {id(w) for w in clash}
            pending = [w for w in pending if id(w) not in gone]
            progress(f"  {len(clash)} ranges were committed meanwhile by another export")
        if not pending:
            return CommitResult(None, (), tuple(dropped))
        try:
            committed = stage_append(table, pending, done).commit_transaction()
        except (CommitFailedException, ValidationException) as e:
            progress(f"  commit attempt {attempt} failed, the table moved: {e}")
            continue
        snapshot = committed.current_snapshot()
        snapshot_id = snapshot.snapshot_id if snapshot else None
        return CommitResult(snapshot_id, tuple(pending), tuple(dropped))
    raise IcebergExportError(
        f"table {'.'.join(identifier)}: not committed after {COMMIT_ATTEMPTS} attempts, "
        "the table kept changing (concurrent writers); nothing of this run is in it"
    )


# -- the job ----------------------------------------------------------------------------------
def run_iceberg_export(
    spark: Any,
    options: Mapping[str, str],
    target: IcebergTarget,
    *,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> IcebergExportSummary:
    """Export what ``options`` (those of ``format("tierlog")``) select to ``target``."""
    began = time.monotonic()
    catalog = open_catalog(target, options)
    table = load_or_create_table(catalog, target)
    done = exported_ranges(table)
    splits = [s for s in TierlogReader(options).partitions() if isinstance(s, SegmentSplit)]
    todo = pending_splits(splits, lambda s: done.of(s.topic, s.partition))
    selected = sum(s.range.end - s.range.start + 1 for s in splits)
    remaining = sum(s.range.end - s.range.start + 1 for s in todo)
    progress(
        f"{len(splits)} segment ranges selected, {len(todo)} ranges to export "
        f"({selected - remaining} offsets already in {target.table})"
    )
    metadata_json = table.metadata.model_dump_json()
    io_properties = dict(table.io.properties)
    written: list[WrittenSplit] = []
    if todo:
        sc = spark.sparkContext
        step = max(sc.defaultParallelism * 2, 1)
        for at in range(0, len(todo), step):
            chunk = todo[at : at + step]
            written.extend(
                sc.parallelize(chunk, len(chunk))
                .map(lambda s: write_split(s, metadata_json, io_properties))
                .collect()
            )
            progress(f"  {min(at + step, len(todo))}/{len(todo)} ranges written")
    result = commit_written(catalog, target.identifier(), written, progress=progress)
    files = [f for w in result.committed for f in w.files]
    return IcebergExportSummary(
        table=target.table,
        ranges=len(result.committed),
        rows=sum(w.rows for w in result.committed),
        files=len(files),
        bytes=sum(f.file_size_in_bytes for f in files),
        seconds=time.monotonic() - began,
        snapshot_id=result.snapshot_id,
        already_exported=selected - remaining,
        lost_to_concurrent=len(result.dropped),
    )


def main(argv: list[str] | None = None) -> int:
    """``spark-submit spark_jobs/iceberg_export.py WAREHOUSE NAMESPACE.TABLE key=value ...``:
    ``format("tierlog")`` options, plus ``catalog.uri=...`` and ``catalog.<property>=...``."""
    from spark_jobs.export import spark_session

    args = sys.argv[1:] if argv is None else argv
    warehouse, table, pairs = args[0], args[1], dict(a.split("=", 1) for a in args[2:])
    catalog = {k[len("catalog.") :]: pairs.pop(k) for k in list(pairs) if k.startswith("catalog.")}
    target = IcebergTarget(warehouse, table, catalog.pop("uri", None), catalog)
    spark = spark_session(pairs.pop("master", "local[*]"), "tierlog-iceberg-export")
    try:
        print(run_iceberg_export(spark, pairs, target).line())
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
