"""The Parquet export job: a tiered topic's archive as hive-partitioned, zstd Parquet.

Layout under the output (a local path or an fsspec URL such as ``s3://bucket/prefix``)::

    topic=<t>/partition=<p>/date=<YYYY-MM-DD>/<segment id>-<first offset>.parquet
    _tierlog_export.json        the segment ranges already exported (the job's memory)
    _staging/<run id>/...       files of a run in progress (names starting with "_" are
                                ignored by Spark, pyarrow and Hive readers)

One Spark task per canonical segment range (``spark_jobs.datasource`` plans them); each task
reads its range through the RSM plugin and writes its files to the run's staging folder.
The driver then moves every staged file to its final name and only then records the ranges
in ``_tierlog_export.json``. Final names are a function of the segment range, so a run killed
anywhere leaves no partial file visible, and a re-run rewrites the same names: it never
duplicates. A re-run skips the ranges already recorded (incremental).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.extras import requires_extra
from spark_jobs.archive import read_range
from spark_jobs.datasource import SegmentSplit, TierlogReader

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


def split_key(split: SegmentSplit) -> str:
    return f"{split.topic}/{split.partition}/{split.range.segment.segment_id}/{split.range.start}"


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
) -> list[dict]:
    """Executor side: read one range, write one Parquet file per date into staging."""
    fs, root = fsspec.core.url_to_fs(output, **fs_options)
    rsm = split.config.open()
    try:
        batches = list(
            read_range(
                rsm,
                split.range,
                split.topic,
                split.partition,
                split.aborted,
                since_ms=split.since_ms,
                until_ms=split.until_ms,
            )
        )
    finally:
        rsm.close()
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    dates = pc.strftime(table["timestamp"], format="%Y-%m-%d")
    out = []
    for date in sorted(set(dates.to_pylist())):
        part = table.filter(pc.equal(dates, date))
        name = f"{split.range.segment.segment_id}-{split.range.start}.parquet"
        rel = f"topic={split.topic}/partition={split.partition}/date={date}/{name}"
        staged = f"{root}/{STAGING}/{run}/{rel}"
        fs.makedirs(staged.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(staged, "wb") as f:
            pq.write_table(part.drop_columns(["topic", "partition"]), f, compression="zstd")
        out.append({"rel": rel, "rows": part.num_rows, "bytes": fs.size(staged)})
    return out


def run_export(
    spark: Any,
    options: Mapping[str, str],
    output: str,
    *,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> ExportSummary:
    """Export what ``options`` (those of ``format("tierlog")``) select to ``output``."""
    began = time.monotonic()
    fs_options = storage_options(options)
    fs, root = fsspec.core.url_to_fs(output, **fs_options)
    fs.makedirs(root, exist_ok=True)
    if fs.exists(f"{root}/{STAGING}"):
        fs.rm(f"{root}/{STAGING}", recursive=True)  # a crashed run's leftovers
    state_path = f"{root}/{STATE_FILE}"
    done: set[str] = set()
    if fs.exists(state_path):
        with fs.open(state_path, "rb") as f:
            done = set(json.load(f)["exported"])
    splits = [s for s in TierlogReader(options).partitions() if isinstance(s, SegmentSplit)]
    todo = [s for s in splits if split_key(s) not in done]
    progress(f"{len(splits)} segment ranges selected, {len(todo)} to export")
    run = uuid.uuid4().hex[:12]
    results: list[tuple[SegmentSplit, list[dict]]] = []
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
            progress(f"  {min(at + step, len(todo))}/{len(todo)} segment ranges written")
    # Commit: staged files to their final names, then the state. Final names are fixed per
    # range, so redoing this after a crash rewrites the same files.
    rows = size = 0
    for _, files in results:
        for entry in files:
            final = f"{root}/{entry['rel']}"
            fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
            fs.mv(f"{root}/{STAGING}/{run}/{entry['rel']}", final)
            rows += entry["rows"]
            size += entry["bytes"]
    done.update(split_key(s) for s, _ in results)
    tmp = f"{state_path}.tmp"
    with fs.open(tmp, "w") as f:
        json.dump({"exported": sorted(done), "updated": datetime.now(UTC).isoformat()}, f)
    fs.mv(tmp, state_path)
    if fs.exists(f"{root}/{STAGING}"):
        fs.rm(f"{root}/{STAGING}", recursive=True)
    return ExportSummary(
        len(results), rows, size, time.monotonic() - began, len(splits) - len(todo)
    )


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
