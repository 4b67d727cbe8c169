"""``make demo``: what tierlog can do today, end to end on the local disk.

1. A writer process appends record batches to a partition log (small segments, so it rolls).
2. The demo SIGKILLs the writer in the middle of its appends.
3. The log is reopened: recovery validates every unflushed batch and drops a torn tail.
4. Every flushed record is read back, and ``tierlog dump-log`` shows the files.

Run with ``python -m tierlog.demo [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.log.config import LogConfig
from core.log.log_manager import LogManager, LogManagerConfig
from core.records.batch import Compression, iter_batches
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records
from tierlog import cli

TOPIC = "demo-events"
CONFIG = LogConfig(segment_bytes=256 * 1024, index_interval_bytes=4096, retention_ms=-1)
RECORDS_PER_BATCH = 50
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


PRODUCER_ID = 4242


def _batch(index: int) -> bytearray:
    """Batch ``index`` of an idempotent producer: its content depends on the index only."""
    builder = RecordBatchBuilder(
        compression=CODECS[index % len(CODECS)],
        producer_id=PRODUCER_ID,
        producer_epoch=0,
        base_sequence=index * RECORDS_PER_BATCH,
    )
    for r in range(RECORDS_PER_BATCH):
        n = index * RECORDS_PER_BATCH + r
        builder.append(
            f'{{"event": {n}, "kind": "click", "page": "/p/{n % 97}"}}'.encode(),
            key=f"user-{n % 13}".encode(),
            headers=[("source", b"demo")],
            timestamp=1_700_000_000_000 + n,
        )
    return builder.build()


def _manager(log_dir: Path) -> LogManager:
    return LogManager(
        LogManagerConfig(
            log_dirs=(log_dir,), default_log_config=CONFIG, flush_offset_checkpoint_interval_ms=100
        )
    )


def writer(log_dir: Path) -> None:
    """The child: append forever, flushing every 20 batches and saying so."""
    manager = _manager(log_dir)
    manager.startup()
    plog = manager.get_or_create_log(TOPIC, 0)
    index = plog.log_end_offset // RECORDS_PER_BATCH
    while True:
        plog.append_as_leader(_batch(index), leader_epoch=0)
        index += 1
        if index % 20 == 0:
            plog.flush()
            print(f"flushed {plog.log_end_offset}", flush=True)


def _say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("demo-data"))
    parser.add_argument("--writer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    log_dir = args.dir / "logs"
    if args.writer:
        writer(log_dir)
        return 0

    shutil.rmtree(args.dir, ignore_errors=True)
    _say(
        f"1. a writer process appends batches to {TOPIC}-0 in {log_dir} "
        f"(segment.bytes={CONFIG.segment_bytes}, codecs rotating none/gzip/snappy/lz4/zstd)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tierlog.demo", "--dir", str(args.dir), "--writer"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    flushed = 0
    for line in proc.stdout:
        flushed = int(line.split()[1])
        if flushed >= 30_000:
            break
    time.sleep(0.05)  # let it get into the middle of further, unflushed appends
    _say(f"2. SIGKILL the writer (it had flushed {flushed} records and kept appending)")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for line in proc.stdout:
        flushed = int(line.split()[1])

    _say("3. reopen the log: no clean-shutdown marker, so unflushed segments are recovered")
    started = time.monotonic()
    manager = _manager(log_dir)
    plog = manager.get_log(TOPIC, 0)
    assert plog is not None
    took = time.monotonic() - started
    segments = plog.segments()
    print(
        f"recovered in {took * 1000:.0f} ms: {len(segments)} segments, "
        f"log end offset {plog.log_end_offset} (>= {flushed} flushed), "
        f"{plog.size / 1e6:.1f} MB"
    )

    _say("4. read every record back through the log's read path")
    offset, count = 0, 0
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20)
        for header in iter_batches(info.records.read_bytes()):
            for record in decode_records(header):
                assert record.offset == count, (record.offset, count)
                count += 1
            offset = header.next_offset
    print(f"read {count} records, offsets 0..{count - 1}, none missing")

    last = plog.log_end_offset // RECORDS_PER_BATCH - 1
    _say(
        f"5. the producer retries batch {last} (sequence {last * RECORDS_PER_BATCH}): "
        "producer state was recovered too, so it is deduplicated"
    )
    retry = plog.append_as_leader(_batch(last), leader_epoch=0)
    print(
        f"duplicate={retry.duplicate}, answered with its original offsets "
        f"{retry.first_offset}..{retry.last_offset}; log end offset still "
        f"{plog.log_end_offset}"
    )
    first = segments[0]
    manager.shutdown()

    _say(f"6. tierlog dump-log {first.log.path.name} (the first batches)")
    log_path = plog.dir / first.log.path.name
    code = cli.main(["dump-log", "--max-bytes", "12000", str(log_path)])
    _say(
        "7. tierlog dump-log of the offset index, the leader-epoch checkpoint and the "
        "producer snapshot written at shutdown"
    )
    snapshots = sorted(plog.dir.glob("*.snapshot"))
    code |= cli.main(
        [
            "dump-log",
            str(log_path.with_suffix(".index")),
            str(plog.dir / "leader-epoch-checkpoint"),
            str(snapshots[-1]),
        ]
    )
    code |= broker_demo(args.dir / "broker")
    print(f"\nThe logs stay in {args.dir} for you to inspect with `tierlog dump-log`.")
    return code


def broker_demo(data_dir: Path) -> int:
    """Part two: a broker process, real Kafka clients, a clean stop."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    _say("8. start a broker: tierlog broker start (a Kafka-protocol server on the same log)")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tierlog",
            "broker",
            "start",
            "--log-level",
            "WARNING",
            "--set",
            f"log.dirs={data_dir}",
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    print(line)
    if "listening on" not in line:
        proc.kill()
        return 1
    bootstrap = line.rsplit("//", 1)[1]
    try:
        _say("9. create topic 'clicks' (3 partitions) with confluent-kafka's AdminClient")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for topic, future in admin.create_topics(
            [NewTopic("clicks", 3, 1, config={"segment.bytes": "1048576"})]
        ).items():
            future.result(30)
            print(f"created {topic}")
        _say("10. produce 30,000 records with confluent-kafka (idempotent, zstd)")
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "compression.type": "zstd",
                "linger.ms": 10,
            }
        )
        for n in range(30_000):
            producer.produce(
                "clicks", key=f"user-{n % 13}".encode(), value=f'{{"click": {n}}}'.encode()
            )
            if n % 5000 == 0:
                producer.poll(0)
        left = producer.flush(30)
        print(f"acknowledged: {30_000 - left} records")
        _say("11. consume partition 0 from the beginning with kcat (a librdkafka tool)")
        result = subprocess.run(
            [
                "kcat",
                "-b",
                bootstrap,
                "-C",
                "-t",
                "clicks",
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
                "-q",
                "-f",
                "%p %o %k %s\n",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        lines = result.stdout.splitlines()
        print("\n".join([*lines[:3], "...", *lines[-2:]]))
        print(f"kcat read {len(lines)} records from partition 0")
        # Close the clients before the broker goes, so they do not log its departure.
        del producer, admin
        gc.collect()
    finally:
        _say("12. stop the broker with SIGTERM: flush, snapshot, clean-shutdown marker")
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(60)
        print(f"broker exited with status {status}")
    return 0 if status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
