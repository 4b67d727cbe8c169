"""Spark over the archive (issue 6): decoding archived segments into Arrow, and the export.

1. decode: rows/s on one core turning the same segment bytes into records, tierlog's path
   (``spark_jobs.archive.read_range``: the RSM's segment stream -> batches, CRC checked ->
   records -> an Arrow RecordBatch in the Spark Kafka schema) vs kafka-python's record
   decoder (``MemoryRecords`` over the segment bytes already in memory, every record's
   offset, timestamp, key, value and headers as Python objects). Target >= 5x.
2. export: ``tierlog export`` of the same archive end to end (Spark local[2]): rows/s, and
   the size of the Parquet output over the size of the segments, for every archive.
3. the stretch target: tierlog's decode (1.) over reading the same rows back from that
   Parquet output with pyarrow (``pyarrow.parquet.read_table``, one thread, every column),
   rows/s per core. Target >= 1x.

Records: ~770 B values, half random hex text, with a key and one header. Two archives:

- client batches: produced by confluent-kafka (librdkafka's batching, linger.ms=5) to a
  tierlog broker, once per codec (none, gzip, snappy, lz4, zstd);
- builder batches: 16-record batches from core's RecordBatchBuilder appended by
  PartitionLog, uncompressed and zstd: decode and export.

Segments are copied to the local-directory RSM as the broker's tiering does. The decoder in
use (compiled or pure Python, ``TIERLOG_PURE_PYTHON=1``) and the gzip inflater are printed
first. For compressed batches the decode also times decompression alone (the same library
over the same batches): its rate over kafka-python's is the highest ratio any decoder using
that library could reach, printed as the floor.

    python -m bench.spark_export [--quick] [--codecs none,lz4] [--no-export] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

from bench._common import DEFAULT_DIR, MiB, describe_machine
from core.log.config import LogConfig
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.partition_log import PartitionLog
from core.records import codec as codecs
from core.records import native
from core.records.batch import Compression, iter_batches
from core.records.builder import RecordBatchBuilder
from core.records.codec import DecompressionBuffer
from rsm_plugins.local import LocalDirRemoteStorageManager
from spark_jobs.archive import ArchiveConfig, plan_partition, read_range
from tiered.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TARGET_RATIO = 5.0
STRETCH_PARQUET_RATIO = 1.0
CLIENT_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC = "bench"


def record_values(rng: random.Random, n: int) -> tuple[bytes, bytes]:
    """Record ``n``'s key and value: half random hex text, half repeated."""
    return b"key-%d" % (n % 1000), rng.randbytes(256).hex().encode() + b"x" * 512


def fill_with_builder(log: PartitionLog, total_mb: int, codec: Compression) -> None:
    rng = random.Random(6)
    written = 0
    n = 0
    while written < total_mb * MiB:
        builder = RecordBatchBuilder(compression=codec)
        for _ in range(16):
            key, value = record_values(rng, n)
            builder.append(
                value, key=key, headers=[("source", b"bench")], timestamp=1_700_000_000_000 + n
            )
            n += 1
        batch = builder.build()
        log.append_as_leader(batch, 0)
        written += len(batch)


def produce_with_confluent(work: Path, total_mb: int, codec: str) -> Path:
    """A tierlog broker's partition directory holding ``total_mb`` of records produced by
    confluent-kafka with ``codec``; the broker is stopped (SIGTERM) before this returns."""
    from confluent_kafka import Producer

    from bench.broker_throughput import ServerProcess

    data_dir = work / "broker"
    server = ServerProcess("tierlog", data_dir, [f"log.segment.bytes={32 * MiB}"])
    try:
        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "compression.type": codec,
                "linger.ms": 5,
                "acks": 1,
            }
        )
        rng = random.Random(6)
        produced = n = 0
        while produced < total_mb * MiB:
            key, value = record_values(rng, n)
            while True:
                try:
                    producer.produce(TOPIC, value, key, 0, headers=[("source", b"bench")])
                    break
                except BufferError:
                    producer.poll(0.01)
            produced += len(key) + len(value)
            n += 1
        if producer.flush(120):
            raise RuntimeError("confluent-kafka did not deliver every record within 120 s")
        del producer  # closes its connections before the broker stops
    finally:
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=120)
    return data_dir / f"{TOPIC}-0"


def archive_log(work: Path, log: PartitionLog) -> tuple[ArchiveConfig, list]:
    """Roll ``log`` and copy every segment but the new active one to a local-directory RSM."""
    log.roll()
    log.flush()
    tp = TopicIdPartition(uuid.UUID(int=6), TOPIC, 0)
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


def write_archive(work: Path, total_mb: int, codec: Compression) -> tuple[ArchiveConfig, list]:
    """Builder batches (see the module docstring), archived."""
    log = PartitionLog(work / "log" / f"{TOPIC}-0", TOPIC, 0, LogConfig(segment_bytes=32 * MiB))
    fill_with_builder(log, total_mb, codec)
    return archive_log(work, log)


def write_client_archive(work: Path, total_mb: int, codec: str) -> tuple[ArchiveConfig, list]:
    """confluent-kafka batches (see the module docstring), archived."""
    directory = produce_with_confluent(work, total_mb, codec)
    log = PartitionLog(directory, TOPIC, 0, LogConfig(segment_bytes=32 * MiB))
    return archive_log(work, log)


def bench_decode(config: ArchiveConfig, segments: list, rounds: int) -> dict[str, float]:
    """Rows/s per core of tierlog's reader and kafka-python's decoder; for compressed batches
    also of decompression alone (every batch's records into a reused buffer, with the library
    tierlog's reader uses, bytes already in memory): no decoder using that library can beat
    it, so ``floor`` (its rate over kafka-python's) is the highest ratio reachable."""
    from kafka.record import MemoryRecords

    rsm = config.open()
    plan = plan_partition(rsm, TOPIC, 0, segments)
    blobs = []
    for md in segments:
        with rsm.fetch_log_segment(md, 0) as f:
            blobs.append(f.read())
    compressed = [
        (header.compression, bytes(header.records_view))
        for blob in blobs
        for header in iter_batches(blob, validate=False)
        if header.compression != Compression.NONE
    ]

    def tierlog() -> int:
        rows = 0
        for r in plan.ranges:
            for batch in read_range(rsm, r, TOPIC, 0, {}):
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

    def decompression() -> None:
        scratch = DecompressionBuffer()
        for codec_id, data in compressed:
            scratch.decompress(codec_id, data)

    order = [("tierlog", tierlog), ("kafka-python", kafka_python)]
    if compressed:
        order.append(("decompression", decompression))
    times: dict[str, list[float]] = {name: [] for name, _ in order}
    rows = tierlog()  # warm-up (and the row count)
    for r in range(rounds):
        for name, fn in order if r % 2 == 0 else reversed(order):
            began = time.process_time()  # one thread each: CPU seconds = seconds per core
            fn()
            times[name].append(time.process_time() - began)
    rsm.close()
    rate = {k: rows / statistics.median(v) for k, v in times.items()}
    out = {**rate, "rows": rows, "ratio": rate["tierlog"] / rate["kafka-python"]}
    if compressed:
        out["floor"] = rate["decompression"] / rate["kafka-python"]
    return out


def bench_export(
    work: Path, config: ArchiveConfig, segments: list, rounds: int
) -> dict[str, float]:
    from spark_jobs.export import run_export, spark_session

    spark = spark_session("local[2]", "tierlog-bench-export")
    try:
        out = work / "export"
        options = {"topic": TOPIC, "rsm.config.storage.root": config.rsm_config["storage.root"]}
        summary = run_export(spark, options, str(out), progress=lambda _: None)
    finally:
        spark.stop()
    segment_bytes = sum(md.segment_size_in_bytes for md in segments)
    return {
        "rows/s": summary.rows / summary.seconds,
        "rows": summary.rows,
        "parquet/segments": summary.bytes / segment_bytes,
        "seconds": summary.seconds,
        "parquet rows/s": parquet_read_rate(out, summary.rows, rounds),
    }


def parquet_read_rate(out: Path, rows: int, rounds: int) -> float:
    """Rows/s per core of pyarrow reading the export's Parquet files back into one Arrow
    table, every column, on one thread (the median of ``rounds``)."""
    import pyarrow.parquet as pq

    files = sorted(str(p) for p in out.rglob("*.parquet"))
    times = []
    for _ in range(rounds):
        began = time.process_time()
        read = sum(pq.read_table(f, use_threads=False).num_rows for f in files)
        times.append(time.process_time() - began)
    if read != rows:
        raise RuntimeError(f"the Parquet output has {read} rows, the export wrote {rows}")
    return rows / statistics.median(times)


def verdict(ratio: float) -> str:
    return f"(target >= {TARGET_RATIO:.0f}x: {'PASS' if ratio >= TARGET_RATIO else 'MISS'})"


def print_decode(label: str, d: dict[str, float]) -> None:
    floor = ""
    if "floor" in d:
        floor = (
            f"; decompression alone {d['decompression']:.0f} rows/s/core = "
            f"{d['floor']:.1f}x kafka-python (the highest ratio reachable with "
            f"{gzip_library() if 'gzip' in label else 'cramjam'})"
        )
    print(
        f"decode {label}, {d['rows']} rows: tierlog {d['tierlog']:.0f} rows/s/core, "
        f"kafka-python {d['kafka-python']:.0f} rows/s/core, ratio {d['ratio']:.1f}x "
        f"{verdict(d['ratio'])}{floor}",
        flush=True,
    )


def print_export(
    label: str,
    d: dict[str, float],
    work: Path,
    config: ArchiveConfig,
    segments: list,
    rounds: int,
) -> None:
    """The export of an archive whose decode gave ``d``, and the stretch target."""
    e = bench_export(work, config, segments, rounds)
    print(
        f"export {label}: {e['rows']} rows in {e['seconds']:.1f}s = "
        f"{e['rows/s']:.0f} rows/s end to end (local[2]); Parquet/segment size "
        f"{e['parquet/segments']:.2f}",
        flush=True,
    )
    stretch = d["tierlog"] / e["parquet rows/s"]
    print(
        f"stretch {label}: tierlog decode {d['tierlog']:.0f} rows/s/core, pyarrow reading "
        f"the exported Parquet back {e['parquet rows/s']:.0f} rows/s/core, ratio "
        f"{stretch:.2f}x (stretch target >= {STRETCH_PARQUET_RATIO:.0f}x: "
        f"{'PASS' if stretch >= STRETCH_PARQUET_RATIO else 'MISS'})",
        flush=True,
    )


def gzip_library() -> str:
    """The module that inflates gzip batches (``core.records.codec.gzip_inflater``)."""
    return codecs.gzip_inflater.__name__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument(
        "--codecs",
        default=",".join(CLIENT_CODECS),
        help="codecs of the confluent-kafka archives (comma-separated; empty: none)",
    )
    parser.add_argument("--no-export", action="store_true", help="skip the Spark exports")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(describe_machine(args.dir))
    print(f"record decoder: {native.implementation()}; gzip inflate: {gzip_library()}", flush=True)
    total_mb, rounds = (16, 3) if args.quick else (64, 5)
    for codec_name in filter(None, args.codecs.split(",")):
        work = args.dir / f"spark-export-client-{codec_name}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            config, segments = write_client_archive(work, total_mb, codec_name)
            d = bench_decode(config, segments, rounds)
            print_decode(f"confluent-kafka {codec_name}", d)
            if not args.no_export:
                print_export(f"confluent-kafka {codec_name}", d, work, config, segments, rounds)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for codec in (Compression.NONE, Compression.ZSTD):
        work = args.dir / f"spark-export-{codec.name.lower()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            config, segments = write_archive(work, total_mb, codec)
            d = bench_decode(config, segments, rounds)
            print_decode(f"builder {codec.name.lower()}", d)
            if not args.no_export:
                print_export(f"builder {codec.name.lower()}", d, work, config, segments, rounds)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
