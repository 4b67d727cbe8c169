"""``make demo``: tierlog end to end on the embedded default.

Part one works on the log itself: a writer process appends record batches to a partition
log (small segments, so it rolls), the demo SIGKILLs it mid-append, reopens the log
(recovery validates every unflushed batch and drops a torn tail), shows that an idempotent
retry is deduplicated, and dumps the files with ``tierlog dump-log``.

Part two is the main job: a broker with tiered storage on and a local directory as the
remote tier; a tiered topic; data produced with confluent-kafka; rolled segments copied to
the remote tier and deleted locally; everything consumed from offset 0 (saying how much
came from the remote tier); ``tierlog metadata list``; a clean stop.

Run with ``python -m tierlog.demo [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import os
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
    """Part two, the main job: a broker with a remote tier, real clients, history from it."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bucket = data_dir / "remote-tier"
    _say(
        "8. start a broker with tiered storage on (the embedded default remote tier: a "
        f"local directory, {bucket})"
    )
    settings = {
        "log.dirs": str(data_dir / "logs"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.root": str(bucket),
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
    }
    args = [sys.executable, "-m", "tierlog", "broker", "start", "--log-level", "WARNING"]
    for key, val in settings.items():
        args += ["--set", f"{key}={val}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    print(line)
    if "listening on" not in line:
        proc.kill()
        return 1
    bootstrap = line.rsplit("//", 1)[1]
    topic, records = "clicks", 60_000
    try:
        _say(f"9. create the tiered topic '{topic}' with confluent-kafka's AdminClient")
        config = {
            "segment.bytes": "1048576",
            "local.retention.bytes": "1048576",
            "remote.storage.enable": "true",
            "retention.ms": "-1",
        }
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
            future.result(30)
        print(f"created {topic}: {config}")
        _say(f"10. produce {records:,} records (~9 MB) with confluent-kafka (idempotent, lz4)")
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "compression.type": "lz4",
                "linger.ms": 10,
            }
        )
        for n in range(records):
            session = os.urandom(48).hex()  # random, so the data does not compress away
            producer.produce(
                topic,
                key=f"user-{n % 13}".encode(),
                value=f'{{"click": {n}, "session": "{session}"}}'.encode(),
            )
            if n % 5000 == 0:
                producer.poll(0)
        print(f"acknowledged: {records - producer.flush(60)} records")
        _say(
            "11. wait for the RemoteLogManager to copy rolled segments and for local "
            "retention to delete them"
        )
        partition_dir = data_dir / "logs" / f"{topic}-0"
        deadline = time.monotonic() + 60
        local_start = 0
        while time.monotonic() < deadline:
            bases = sorted(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log"))
            local_start = bases[0] if bases else 0
            if local_start > records // 2:
                break
            time.sleep(0.5)
        objects = sorted(p for p in bucket.rglob("*") if p.is_file())
        print(
            f"local log now starts at offset {local_start}; the remote tier holds "
            f"{len(objects)} objects ({sum(p.stat().st_size for p in objects) / 1e6:.1f} MB)"
        )
        _say(
            "12. consume from offset 0 with confluent-kafka: old offsets come from the remote "
            "tier, recent ones from the local log"
        )
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "demo",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        got, remote, deadline = 0, 0, time.monotonic() + 120
        while got < records and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            assert msg.offset() == got, (msg.offset(), got)
            got += 1
            remote += msg.offset() < local_start
        consumer.close()
        print(f"read {got:,} records in order, {remote:,} of them from the remote tier")
        _say("13. tierlog metadata list: the remote segments recorded in __remote_log_metadata")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tierlog",
                "metadata",
                "list",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                topic,
                "--count",
                "8",
            ],
            check=False,
            timeout=120,
        )
        # Close the clients before the broker goes, so they do not log its departure.
        del producer, admin, consumer
        gc.collect()
    finally:
        _say("14. stop the broker with SIGTERM: flush, snapshot, clean-shutdown marker")
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(60)
        print(f"broker exited with status {status}")
    return 0 if status == 0 and got == records else 1


if __name__ == "__main__":
    sys.exit(main())
