"""Spark over the archive (issue 6): decoding archived segments into Arrow, and the export.

1. decode: rows/s on one core turning the same segment bytes into records, tierlog's path
   (``spark_jobs.archive.read_range``: batches -> columns -> an Arrow RecordBatch in the
   Spark Kafka schema) vs kafka-python's record decoder (``MemoryRecords``, every record's
   offset, timestamp, key, value and headers as Python objects). Target >= 5x.
2. export: ``tierlog export`` of the same archive end to end (Spark local[2]): rows/s, and
   the size of the Parquet output over the size of the segments.

Records: 1 KiB-ish values of mixed compressibility in 16-record batches, uncompressed and
zstd, written by core's PartitionLog and copied by the local-directory RSM.

    python -m bench.spark_export [--quick] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

from bench._common import DEFAULT_DIR, MiB, describe_machine
from core.log.config import LogConfig
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.partition_log import PartitionLog
from core.records.batch import Compression
from core.records.builder import RecordBatchBuilder
from rsm_plugins.local import LocalDirRemoteStorageManager
from spark_jobs.archive import ArchiveConfig, plan_partition, read_range
from tiered.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)


def write_archive(work: Path, total_mb: int, codec: Compression) -> tuple[ArchiveConfig, list]:
    log = PartitionLog(work / "log" / "t-0", "t", 0, LogConfig(segment_bytes=32 * MiB))
    rng = random.Random(6)
    written = 0
    n = 0
    while written < total_mb * MiB:
        builder = RecordBatchBuilder(compression=codec)
        for _ in range(16):
            half = rng.randbytes(256).hex().encode()  # half random text, half repeated
            builder.append(
                half + b"x" * 512,
                key=b"key-%d" % (n % 1000),
                headers=[("source", b"bench")],
                timestamp=1_700_000_000_000 + n,
            )
            n += 1
        batch = builder.build()
        log.append_as_leader(batch, 0)
        written += len(batch)
    log.roll()
    log.flush()
    tp = TopicIdPartition(uuid.UUID(int=6), "bench", 0)
    rsm = LocalDirRemoteStorageManager()
    rsm.configure({"storage.root": str(work / "bucket")})
    segments = log.segments()
    out = []
    for i, seg in enumerate(segments[:-1]):
        nxt = segments[i + 1].base_offset
        snap = work / f"{nxt}.snapshot"
        snap.write_bytes(b"")
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(tp, uuid.uuid4()),
            start_offset=seg.base_offset,
            end_offset=nxt - 1,
            max_timestamp_ms=seg.largest_timestamp,
            broker_id=1,
            event_timestamp_ms=1,
            segment_size_in_bytes=seg.size,
            segment_leader_epochs={0: seg.base_offset},
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        )
        rsm.copy_log_segment_data(
            md,
            LogSegmentData(
                seg.log.path,
                seg.offset_index.path,
                seg.time_index.path,
                None,
                snap,
                LeaderEpochCheckpointFile.encode(
                    log.leader_epoch_cache.epoch_entries_in_range(-1, nxt)
                ),
            ),
        )
        out.append(md)
    rsm.close()
    log.close()
    return ArchiveConfig(rsm_config={"storage.root": str(work / "bucket")}), out


def bench_decode(config: ArchiveConfig, segments: list, rounds: int) -> dict[str, float]:
    from kafka.record import MemoryRecords

    rsm = config.open()
    plan = plan_partition(rsm, "bench", 0, segments)
    blobs = []
    for md in segments:
        with rsm.fetch_log_segment(md, 0) as f:
            blobs.append(f.read())

    def tierlog() -> int:
        rows = 0
        for r in plan.ranges:
            for batch in read_range(rsm, r, "bench", 0, {}):
                rows += batch.num_rows
        return rows

    def kafka_python() -> int:
        rows = 0
        for blob in blobs:
            records = MemoryRecords(blob)
            while (batch := records.next_batch()) is not None:
                for rec in batch:
                    _ = (rec.offset, rec.timestamp, rec.key, rec.value, rec.headers)
                    rows += 1
        return rows

    times: dict[str, list[float]] = {"tierlog": [], "kafka-python": []}
    rows = 0
    for r in range(rounds):
        order = [("tierlog", tierlog), ("kafka-python", kafka_python)]
        for name, fn in order if r % 2 == 0 else reversed(order):
            began = time.process_time()  # one thread each: CPU seconds = seconds per core
            rows = fn()
            times[name].append(time.process_time() - began)
    rsm.close()
    rate = {k: rows / statistics.median(v) for k, v in times.items()}
    return {**rate, "rows": rows, "ratio": rate["tierlog"] / rate["kafka-python"]}


def bench_export(work: Path, config: ArchiveConfig, segments: list) -> dict[str, float]:
    from spark_jobs.export import run_export, spark_session

    spark = spark_session("local[2]", "tierlog-bench-export")
    try:
        out = work / "export"
        options = {"topic": "bench", "rsm.config.storage.root": config.rsm_config["storage.root"]}
        summary = run_export(spark, options, str(out), progress=lambda _: None)
    finally:
        spark.stop()
    segment_bytes = sum(md.segment_size_in_bytes for md in segments)
    return {
        "rows/s": summary.rows / summary.seconds,
        "rows": summary.rows,
        "parquet/segments": summary.bytes / segment_bytes,
        "seconds": summary.seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(describe_machine(args.dir))
    total_mb, rounds = (16, 3) if args.quick else (64, 5)
    for codec in (Compression.NONE, Compression.ZSTD):
        work = args.dir / f"spark-export-{codec.name.lower()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            config, segments = write_archive(work, total_mb, codec)
            d = bench_decode(config, segments, rounds)
            print(
                f"decode {codec.name}, {d['rows']} rows: tierlog {d['tierlog']:.0f} rows/s/core, "
                f"kafka-python {d['kafka-python']:.0f} rows/s/core, ratio {d['ratio']:.1f}x "
                f"(target >= 5x)",
                flush=True,
            )
            e = bench_export(work, config, segments)
            print(
                f"export {codec.name}: {e['rows']} rows in {e['seconds']:.1f}s = "
                f"{e['rows/s']:.0f} rows/s end to end (local[2]); Parquet/segment size "
                f"{e['parquet/segments']:.2f}",
                flush=True,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
