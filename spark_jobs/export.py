"""The Parquet export job: a tiered topic's archive as hive-partitioned, zstd Parquet.

Layout under the output (a local path or an fsspec URL such as ``s3://bucket/prefix``)::

    topic=<t>/partition=<p>/date=<YYYY-MM-DD>/<segment id>-<first offset>.parquet
    _tierlog_export.json        the offsets of each segment already exported (the job's
                                memory, ``spark_jobs.export_state``)
    _staging/<run id>/...       files of a run in progress (names starting with "_" are
                                ignored by Spark, pyarrow and Hive readers)

The driver plans the canonical segment ranges (``spark_jobs.datasource``) and keeps, of each,
the offsets not recorded yet. One Spark task per remaining range reads it through the RSM
plugin, keeps the records inside the time bounds, writes one file per date to the run's
staging folder and returns the offsets it dealt with (``spark_jobs.export_ranges``): all of
the range but the records outside the bounds, which a later run exports. The driver then
moves every staged file to its final name and only then records the offsets.

A final name is the segment and the first offset the run dealt with in the range, so it
depends only on that range: two parts of a segment exported by two runs (the records after
an ``--until`` bound, exported the next day) never share a name, as no two runs deal with
the same offset. A run killed anywhere leaves no partial file visible, and a re-run with the
same options deals with the same offsets and rewrites the same names: it never duplicates.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.extras import requires_extra
from spark_jobs.archive import SCHEMA as ARROW_SCHEMA
from spark_jobs.archive import read_range
from spark_jobs.datasource import SegmentSplit, TierlogReader
from spark_jobs.export_ranges import pending_splits, time_window
from spark_jobs.export_state import ExportState
from spark_jobs.offset_ranges import OffsetRanges

with requires_extra("spark", "the Spark jobs (spark_jobs)"):
    import fsspec
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

STATE_FILE = "_tierlog_export.json"
STAGING = "_staging"


@dataclass(frozen=True)
class ExportSummary:
    segments: int
    rows: int
    bytes: int
    seconds: float
    skipped: int

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        return (
            f"exported {self.segments} segment ranges ({self.skipped} already exported): "
            f"{self.rows} rows, {self.bytes} bytes of Parquet in {self.seconds:.1f}s "
            f"({rate:.0f} rows/s)"
        )


def storage_options(options: Mapping[str, str]) -> dict[str, Any]:
    """fsspec/s3fs options for an ``s3://`` output, from the RSM's S3 settings."""
    out: dict[str, Any] = {}
    endpoint = options.get("rsm.config.storage.s3.endpoint.url")
    if endpoint:
        out["client_kwargs"] = {"endpoint_url": endpoint}
    region = options.get("rsm.config.storage.s3.region")
    if region:
        out.setdefault("client_kwargs", {})["region_name"] = region
    key = options.get("rsm.config.storage.aws.access.key.id")
    secret = options.get("rsm.config.storage.aws.secret.access.key")
    if key and secret:
        out["key"], out["secret"] = key, secret
    return out


def _write_split(
    split: SegmentSplit, output: str, run: str, fs_options: dict[str, Any]
) -> tuple[OffsetRanges, list[dict]]:
    """Executor side: read one range, write its records inside the time bounds as one
    Parquet file per date into staging; returns the offsets dealt with and the files."""
    r = split.range
    rsm = split.config.open()
    try:
        batches = list(read_range(rsm, r, split.topic, split.partition, split.aborted))
    finally:
        rsm.close()
    table, covered = time_window(
        pa.Table.from_batches(batches, schema=ARROW_SCHEMA),
        r.start,
        r.end,
        split.since_ms,
        split.until_ms,
    )
    if table.num_rows == 0:
        return covered, []
    fs, root = fsspec.core.url_to_fs(output, **fs_options)
    # Named by the first offset dealt with, not the range's start: after a run with
    # startingTimestamp, the next run's range starts where the first one's did.
    name = f"{r.segment.segment_id}-{covered.ranges[0][0]}.parquet"
    dates = pc.strftime(table["timestamp"], format="%Y-%m-%d")
    out = []
    for date in sorted(set(dates.to_pylist())):
        part = table.filter(pc.equal(dates, date))
        rel = f"topic={split.topic}/partition={split.partition}/date={date}/{name}"
        staged = f"{root}/{STAGING}/{run}/{rel}"
        fs.makedirs(staged.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(staged, "wb") as f:
            pq.write_table(part.drop_columns(["topic", "partition"]), f, compression="zstd")
        out.append({"rel": rel, "rows": part.num_rows, "bytes": fs.size(staged)})
    return covered, out


def _segment_id(split: SegmentSplit) -> str:
    return str(split.range.segment.segment_id)


def run_export(
    spark: Any,
    options: Mapping[str, str],
    output: str,
    *,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> ExportSummary:
    """Export what ``options`` (those of ``format("tierlog")``) select to ``output``.

    Raises:
        ValueError: the state file cannot be read (nothing is written), or an option is
            wrong (``TierlogOptionError``).
    """
    began = time.monotonic()
    fs_options = storage_options(options)
    fs, root = fsspec.core.url_to_fs(output, **fs_options)
    fs.makedirs(root, exist_ok=True)
    state_path = f"{root}/{STATE_FILE}"
    state = ExportState()
    if fs.exists(state_path):
        with fs.open(state_path, "rb") as f:
            state = ExportState.from_json(f.read(), state_path)
    if fs.exists(f"{root}/{STAGING}"):
        fs.rm(f"{root}/{STAGING}", recursive=True)  # a crashed run's leftovers
    splits = [s for s in TierlogReader(options).partitions() if isinstance(s, SegmentSplit)]
    state = state.migrated(s.range.segment for s in splits)
    todo = pending_splits(splits, lambda s: state.done(_segment_id(s)))
    skipped = sum(
        1 for s in splits if not state.done(_segment_id(s)).missing_from(s.range.start, s.range.end)
    )
    progress(f"{len(splits)} segment ranges selected, {len(todo)} ranges to export")
    run = uuid.uuid4().hex[:12]
    results: list[tuple[SegmentSplit, tuple[OffsetRanges, list[dict]]]] = []
    if todo:
        sc = spark.sparkContext
        step = max(sc.defaultParallelism * 2, 1)
        for at in range(0, len(todo), step):
            chunk = todo[at : at + step]
            written = (
                sc.parallelize(chunk, len(chunk))
                .map(lambda s: (s, _write_split(s, output, run, fs_options)))
                .collect()
            )
            results.extend(written)
            progress(f"  {min(at + step, len(todo))}/{len(todo)} ranges written")
    # Commit: staged files to their final names, then the state. Final names are fixed per
    # range dealt with, so redoing this after a crash rewrites the same files.
    rows = size = exported = 0
    for _, (covered, files) in results:
        for entry in files:
            final = f"{root}/{entry['rel']}"
            fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            fs.mv(f"{root}/{STAGING}/{run}/{entry['rel']}", final)
            rows += entry["rows"]
            size += entry["bytes"]
        exported += bool(covered)
    state = state.adding(
        (split.topic, split.partition, _segment_id(split), covered)
        for split, (covered, _) in results
    )
    tmp = f"{state_path}.tmp"
    with fs.open(tmp, "w") as f:
        f.write(state.to_json())
    fs.mv(tmp, state_path)
    if fs.exists(f"{root}/{STAGING}"):
        fs.rm(f"{root}/{STAGING}", recursive=True)
    return ExportSummary(exported, rows, size, time.monotonic() - began, skipped)


def spark_session(master: str, app: str = "tierlog-export") -> Any:
    """A Spark session whose Python workers run this interpreter (pyarrow, tierlog)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import register

    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    register(spark)
    return spark


def main(argv: list[str] | None = None) -> int:
    """``spark-submit spark_jobs/export.py OUTPUT key=value ...`` (format("tierlog") options)."""
    args = sys.argv[1:] if argv is None else argv
    output, pairs = args[0], dict(a.split("=", 1) for a in args[1:])
    spark = spark_session(pairs.pop("master", "local[*]"))
    try:
        print(run_export(spark, pairs, output).line())
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
