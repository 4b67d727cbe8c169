"""Tiered-storage benchmarks (issue 5), each a ratio against a baseline in the same run.

1. copy: ``S3RemoteStorageManager.copy_log_segment_data`` of real segments (log and
   indexes) vs boto3's ``upload_file`` of the same files, both to moto's S3 server on
   127.0.0.1. Target >= 0.9.
2. consume: a confluent-kafka consumer reading a topic from offset 0 through the remote tier
   (local-directory RSM), cold (empty remote index cache) and warm, vs the same data read
   from a topic kept on local disk, same broker process. Targets >= 0.5 cold, >= 0.8 warm.
3. produce-latency: acks=1 produce p99 at a steady rate with tiering running (small
   segments, so copies happen during the run) vs tiering off, two broker processes on the
   same data sizes. Target <= 1.2x.

    python -m bench.tiering [--quick] [--only copy|consume|produce-latency] [--dir bench-data]
                            [--part-mb N]

moto serves ranged GETs at a cost growing with the object size (see docs/BENCHMARKS.md), so
the consumer benchmark uses the local-directory RSM; the copy benchmark uses moto, as S3's
client side (multipart, threads, checksums) is what it measures.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from bench._common import DEFAULT_DIR, MiB, build_pool, describe_machine
from core.log.config import LogConfig
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.partition_log import PartitionLog
from tiered.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

REPO = Path(__file__).resolve().parents[1]


def _launcher() -> ModuleType:
    path = REPO / "localstack" / "launcher.py"
    spec = importlib.util.spec_from_file_location("tierlog_bench_launcher", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# -- 1. copy ----------------------------------------------------------------------------------
def _segments(directory: Path, total_mb: int, segment_mb: int) -> list[tuple[Any, LogSegmentData]]:
    """Rolled segments written by core's PartitionLog, with the data the RLM would copy."""
    log = PartitionLog(directory / "t-0", "t", 0, LogConfig(segment_bytes=segment_mb * MiB))
    pool = build_pool(64)
    written = 0
    i = 0
    while written < total_mb * MiB:
        batch = bytearray(pool[i % len(pool)])
        log.append_as_leader(batch, 0)
        written += len(batch)
        i += 1
    log.roll()
    log.flush()
    cache = log.leader_epoch_cache
    out = []
    segments = log.segments()
    for n, seg in enumerate(segments[:-1]):
        next_base = segments[n + 1].base_offset
        snapshot = directory / f"{next_base:020d}.snapshot"
        snapshot.write_bytes(b"\0" * 64)  # stands for the producer snapshot (no producers)
        data = LogSegmentData(
            log_segment=seg.log.path,
            offset_index=seg.offset_index.path,
            time_index=seg.time_index.path,
            transaction_index=None,
            producer_snapshot_index=snapshot,
            leader_epoch_index=LeaderEpochCheckpointFile.encode(
                cache.epoch_entries_in_range(-1, next_base)
            ),
        )
        out.append((seg, data))
    log.close()
    return out


def _files(data: LogSegmentData) -> list[Path]:
    return [data.log_segment, data.offset_index, data.time_index, data.producer_snapshot_index]


def bench_copy(
    base: Path, total_mb: int, rounds: int, part_mb: int | None = None
) -> dict[str, float]:
    from boto3.s3.transfer import TransferConfig

    from rsm_plugins.s3 import S3RemoteStorageManager

    launcher = _launcher()
    endpoint = launcher.start_s3_endpoint("moto")
    work = base / "tiering-copy"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        endpoint.create_bucket(bucket)
        segments = _segments(work, total_mb, 16)
        payload = sum(f.stat().st_size for _, d in segments for f in _files(d))
        rsm = S3RemoteStorageManager()
        configs = endpoint.rsm_configs(bucket)
        if part_mb is not None:  # segments are 16 MiB: smaller parts make multipart uploads
            configs["storage.s3.multipart.upload.part.size"] = str(part_mb * MiB)
        rsm.configure(configs)
        client = endpoint.client()
        # boto3's defaults: 8 MiB multipart threshold and parts, 10 threads.
        transfer = TransferConfig()
        tp = TopicIdPartition(uuid.uuid4(), "bench", 0)

        def tierlog() -> None:
            for seg, data in segments:
                md = RemoteLogSegmentMetadata(
                    remote_log_segment_id=RemoteLogSegmentId(tp, uuid.uuid4()),
                    start_offset=seg.base_offset,
                    end_offset=seg.base_offset + 1,
                    max_timestamp_ms=1,
                    broker_id=1,
                    event_timestamp_ms=1,
                    segment_size_in_bytes=seg.size,
                    segment_leader_epochs={0: seg.base_offset},
                )
                rsm.copy_log_segment_data(md, data)

        def baseline() -> None:
            run = uuid.uuid4().hex[:6]
            for _, data in segments:
                for f in _files(data):
                    client.upload_file(str(f), bucket, f"plain/{run}/{f.name}", Config=transfer)

        times: dict[str, list[float]] = {"tierlog": [], "boto3": []}
        for r in range(rounds):
            order = [("tierlog", tierlog), ("boto3", baseline)]
            for name, fn in order if r % 2 == 0 else reversed(order):
                began = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - began)
        rsm.close()
        client.close()
        mbps = {k: payload / MiB / statistics.median(v) for k, v in times.items()}
        return {**mbps, "ratio": mbps["tierlog"] / mbps["boto3"], "MiB": payload / MiB}
    finally:
        endpoint.stop()
        shutil.rmtree(work, ignore_errors=True)


# -- broker processes -------------------------------------------------------------------------
class Broker:
    def __init__(self, directory: Path, settings: dict[str, str]) -> None:
        args = [sys.executable, "-m", "tierlog", "broker", "start", "--log-level", "WARNING"]
        merged = {
            "log.dirs": str(directory / "data"),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            **settings,
        }
        for k, v in merged.items():
            args += ["--set", f"{k}={v}"]
        directory.mkdir(parents=True, exist_ok=True)
        self.log = open(directory / "broker.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"broker did not start: {(directory / 'broker.log').read_text()}")
        self.bootstrap = line.strip().rsplit("://", 1)[1]
        self.directory = directory
        self.settings = merged

    def cpu_seconds(self) -> float:
        """CPU seconds of the broker so far, every thread (the threads' nanosecond run
        times of /proc/PID/task/*/schedstat; a consume phase is too short for clock ticks)."""
        total_ns = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that just exited
                total_ns += int((task / "schedstat").read_text().split()[0])
        return total_ns / 1e9

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        self.log.close()


def _create(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)


def _fill(bootstrap: str, topic: str, total_mb: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144})
    value = b"x" * 1000
    count = total_mb * MiB // len(value)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % i, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return count


def _consume_all(bootstrap: str, topic: str, count: int) -> float:
    """Seconds to read ``count`` records from offset 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    began = time.perf_counter()
    seen = 0
    deadline = began + 600
    while seen < count:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"read {seen} of {count} records of {topic}")
        # Ask for no more than what is left: consume() waits out its whole timeout for
        # a count it cannot fill, which added up to a second to every measurement.
        for msg in consumer.consume(min(10000, count - seen), 1.0):
            if not msg.error():
                seen += 1
    elapsed = time.perf_counter() - began
    consumer.close()
    return elapsed


def _tiering(tmp: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.root": str(tmp / "bucket"),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "300",
    }


# -- 2. consume -------------------------------------------------------------------------------
def bench_consume(base: Path, total_mb: int, rounds: int) -> dict[str, Any]:
    work = base / "tiering-consume"
    shutil.rmtree(work, ignore_errors=True)
    broker = Broker(work / "b", _tiering(work))
    try:
        segment = str(4 * MiB)
        _create(
            broker.bootstrap,
            "remote",
            {
                "remote.storage.enable": "true",
                "segment.bytes": segment,
                "local.retention.bytes": segment,
                "retention.ms": "-1",
            },
        )
        _create(broker.bootstrap, "local", {"segment.bytes": segment, "retention.ms": "-1"})
        count = _fill(broker.bootstrap, "remote", total_mb)
        _fill(broker.bootstrap, "local", total_mb)
        local_dir = Path(broker.settings["log.dirs"]) / "remote-0"
        deadline = time.monotonic() + 300
        while len(list(local_dir.glob("*.log"))) > 3:  # copied and deleted locally
            if time.monotonic() > deadline:
                raise RuntimeError("tiering did not catch up")
            time.sleep(0.5)
        cache = Path(broker.settings["log.dirs"]) / "remote-log-index-cache"
        times: dict[str, list[float]] = {"local": [], "cold": [], "warm": []}
        cpu: dict[str, list[float]] = {"local": [], "cold": [], "warm": []}

        def timed_consume(side: str, topic: str) -> None:
            cpu0 = broker.cpu_seconds()
            times[side].append(_consume_all(broker.bootstrap, topic, count))
            cpu[side].append(broker.cpu_seconds() - cpu0)

        for r in range(rounds):
            if r % 2 == 0:  # alternate which side goes first: local before or after remote
                timed_consume("local", "local")
            # Cold: a restart with the remote index cache emptied.
            broker.stop()
            shutil.rmtree(cache, ignore_errors=True)
            broker = Broker(work / "b", _tiering(work))
            timed_consume("cold", "remote")
            timed_consume("warm", "remote")
            if r % 2 == 1:
                timed_consume("local", "local")
        mbps = {k: total_mb / statistics.median(v) for k, v in times.items()}
        # Broker CPU seconds per GiB read: steadier than MB/s on a loaded machine.
        cpu_gb = {k: statistics.median(v) * 1024 / total_mb for k, v in cpu.items()}
        return {
            **{f"{k} MB/s": v for k, v in mbps.items()},
            "cold/local": mbps["cold"] / mbps["local"],
            "warm/local": mbps["warm"] / mbps["local"],
            **{f"{k} cpu s/GiB": v for k, v in cpu_gb.items()},
            "rounds": {k: [round(total_mb / t, 1) for t in v] for k, v in times.items()},
        }
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


# -- 3. produce latency -----------------------------------------------------------------------
def _latencies(bootstrap: str, topic: str, seconds: float, rate: int) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    value = b"y" * 1000
    out: list[float] = []
    began = time.perf_counter()
    sent = 0
    while time.perf_counter() - began < seconds:
        t0 = time.perf_counter()
        producer.produce(
            topic,
            value=value,
            partition=0,
            on_delivery=lambda err, msg, t0=t0: out.append((time.perf_counter() - t0) * 1000),
        )
        producer.poll(0)
        sent += 1
        ahead = began + sent / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(60)
    return out


def bench_produce_latency(base: Path, seconds: float, rounds: int) -> dict[str, float]:
    rate = 2000  # 2 MB/s of 1 KiB records: steady, far below saturation
    p99: dict[str, list[float]] = {"on": [], "off": []}
    p50: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(rounds):
        for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
            work = base / f"tiering-latency-{mode}"
            shutil.rmtree(work, ignore_errors=True)
            settings = _tiering(work) if mode == "on" else {}
            broker = Broker(work / "b", settings)
            try:
                config = {"segment.bytes": str(1 * MiB), "retention.ms": "-1"}
                if mode == "on":
                    config |= {
                        "remote.storage.enable": "true",
                        "local.retention.bytes": str(1 * MiB),
                    }
                _create(broker.bootstrap, "lat", config)
                lat = sorted(_latencies(broker.bootstrap, "lat", seconds, rate))
                p99[mode].append(lat[int(len(lat) * 0.99)])
                p50[mode].append(statistics.median(lat))
            finally:
                broker.stop()
                shutil.rmtree(work, ignore_errors=True)
    on, off = statistics.median(p99["on"]), statistics.median(p99["off"])
    return {
        "p99 on ms": on,
        "p99 off ms": off,
        "p50 on ms": statistics.median(p50["on"]),
        "p50 off ms": statistics.median(p50["off"]),
        "ratio": on / off,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["copy", "consume", "produce-latency"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument(
        "--part-mb",
        type=int,
        help="copy: the S3 plugin's multipart part size (default 25: segments go in one PUT)",
    )
    args = parser.parse_args(argv)
    print(describe_machine(args.dir))
    copy_mb, consume_mb, seconds, rounds = (64, 32, 5.0, 2) if args.quick else (256, 128, 15.0, 3)
    if args.only in (None, "copy"):
        r = bench_copy(args.dir, copy_mb, rounds, args.part_mb)
        parts = "" if args.part_mb is None else f" in {args.part_mb} MiB parts"
        print(
            f"copy to S3 (moto), {r['MiB']:.0f} MiB of segments+indexes{parts}: tierlog "
            f"{r['tierlog']:.1f} MB/s, boto3 upload_file {r['boto3']:.1f} MB/s, ratio "
            f"{r['ratio']:.2f} (target >= 0.9)",
            flush=True,
        )
    if args.only in (None, "consume"):
        r = bench_consume(args.dir, consume_mb, rounds)
        print(
            f"consume {consume_mb} MiB from offset 0: local {r['local MB/s']:.1f} MB/s, remote "
            f"cold {r['cold MB/s']:.1f} ({r['cold/local']:.2f}, target >= 0.5), warm "
            f"{r['warm MB/s']:.1f} ({r['warm/local']:.2f}, target >= 0.8: "
            f"{'PASS' if r['warm/local'] >= 0.8 else 'MISS'}); broker CPU s/GiB local "
            f"{r['local cpu s/GiB']:.2f}, cold {r['cold cpu s/GiB']:.2f}, warm "
            f"{r['warm cpu s/GiB']:.2f}; rounds MB/s {r['rounds']}",
            flush=True,
        )
    if args.only in (None, "produce-latency"):
        r = bench_produce_latency(args.dir, seconds, rounds)
        print(
            f"produce acks=1 at 2 MB/s for {seconds:.0f}s: p99 {r['p99 on ms']:.2f} ms with "
            f"tiering, {r['p99 off ms']:.2f} ms without, ratio {r['ratio']:.2f} (target <= 1.2);"
            f" p50 {r['p50 on ms']:.2f} / {r['p50 off ms']:.2f} ms",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
