"""The Iceberg export (issue 20) vs the Parquet export of the same archive, same run.

Both exports read the same archive with the same Spark session (local[2]) and write zstd
Parquet; the Iceberg export also writes Iceberg field ids and column metrics, splits files
per day, and commits one snapshot through pyiceberg's SQL catalog (SQLite). Each round
exports the whole archive to a fresh output with each job, alternating which goes first;
the median rows/s of the rounds is reported, and the ratio Iceberg / Parquet against the
target (>= 0.8x).

Records: bench.spark_export's archive (1 KiB-ish values of mixed compressibility in
16-record batches, uncompressed and zstd).

    python -m bench.iceberg_export [--quick] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

from bench._common import DEFAULT_DIR, describe_machine
from bench.spark_export import write_archive
from core.records.batch import Compression

TARGET = 0.8


def bench(work: Path, root: str, rounds: int) -> dict[str, float]:
    from spark_jobs.export import run_export, spark_session
    from spark_jobs.iceberg_export import run_iceberg_export
    from spark_jobs.iceberg_table import IcebergTarget

    options = {"topic": "bench", "rsm.config.storage.root": root}
    quiet = {"progress": lambda _: None}
    spark = spark_session("local[2]", "tierlog-bench-iceberg")
    rates: dict[str, list[float]] = {"parquet": [], "iceberg": []}
    rows = 0
    try:
        # One export of each first, not timed: Spark's JVM and Python workers warm up.
        run_export(spark, options, str(work / "warm-parquet"), **quiet)
        run_iceberg_export(spark, options, IcebergTarget(str(work / "warm-ice"), "b.t"), **quiet)
        for r in range(rounds):

            def parquet(r: int = r) -> tuple[int, float]:
                s = run_export(spark, options, str(work / f"parquet-{r}"), **quiet)
                return s.rows, s.seconds

            def iceberg(r: int = r) -> tuple[int, float]:
                target = IcebergTarget(str(work / f"iceberg-{r}"), "bench.t")
                s = run_iceberg_export(spark, options, target, **quiet)
                return s.rows, s.seconds

            order = [("parquet", parquet), ("iceberg", iceberg)]
            for name, job in order if r % 2 == 0 else reversed(order):
                rows, seconds = job()
                rates[name].append(rows / seconds)
    finally:
        spark.stop()
    rate = {k: statistics.median(v) for k, v in rates.items()}
    return {**rate, "rows": rows, "ratio": rate["iceberg"] / rate["parquet"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(describe_machine(args.dir))
    total_mb, rounds = (16, 3) if args.quick else (64, 5)
    for codec in (Compression.NONE, Compression.ZSTD):
        work = args.dir / f"iceberg-export-{codec.name.lower()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            config, _ = write_archive(work, total_mb, codec)
            b = bench(work, config.rsm_config["storage.root"], rounds)
            verdict = "PASS" if b["ratio"] >= TARGET else "MISS"
            print(
                f"export {codec.name}, {b['rows']:.0f} rows, {total_mb} MiB of segments "
                f"(local[2], median of {rounds}): Iceberg {b['iceberg']:.0f} rows/s, Parquet "
                f"{b['parquet']:.0f} rows/s, ratio {b['ratio']:.2f}x (target >= {TARGET}x: "
                f"{verdict})",
                flush=True,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
