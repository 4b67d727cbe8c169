"""Tiering to the local-directory tier vs a plain file copy, while a partition is produced.

Rolled 1 MiB segments (16 KiB batches, written by core's PartitionLog, with their offset
and time indexes, a producer snapshot and the leader-epoch checkpoint) are copied:

- tierlog: ``LocalDirRemoteStorageManager.copy_log_segments_data`` over the segments in
  the batches the RemoteLogManager's copy task makes (``tiered.rlm_tasks``: up to 8
  segments, 64 MiB): every object written once (CRC32C computed on the way) to a temp
  name, the batch's objects made durable together, renamed, then the batch's manifests
  the same way. Also timed, for comparison, one ``copy_log_segment_data`` per segment
  (each segment synced on its own: the path before the copy task batched);
- baseline: ``shutil.copyfile`` of the six files of each segment (log, offset index, time
  index, snapshot, and the leader-epoch checkpoint and manifest written as files), no
  fsync;
- for reference, not a target: the same copies made durable as tierlog's are before
  COPY_SEGMENT_FINISHED (each file ``fsync``-ed, then the directory once), so that the
  ratio to the baseline can be read as the cost of durability on this disk plus ours.

Both run while another thread appends 16 KiB batches to another partition at ``--produce-mb``
MB/s (20 by default), alternating which side goes first, median of the rounds. Target
(issue 19): tierlog >= 0.7 x the baseline.

With ``--broker`` it measures the broker instead (the second target of issue 19): a tierlog
broker with the local-dir tier and ``log.retention.check.interval.ms=1000``, one partition
(``segment.bytes`` 1 MiB, ``local.retention.bytes`` 16 MiB) produced by confluent-kafka
(acks=all) at ``--produce-mb`` MB/s for ``--seconds`` s; the partition's local ``.log`` bytes
are sampled each second. Target: at most 2 x ``local.retention.bytes`` + 2 segments.
``--trace FILE`` writes a per-second log (``Trace``) and ``--py-spy FILE`` records the
broker with py-spy for the whole run, so that a stall can be matched to what the broker did.

    python -m bench.tiering_local [--mb 128] [--rounds 3] [--produce-mb 20] [--quick]
    python -m bench.tiering_local --broker [--seconds 60] [--produce-mb 20]
                                  [--trace FILE] [--py-spy FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import DEFAULT_DIR, LEADER_EPOCH, MiB, build_pool, describe_machine
from bench.tiering import _segments
from core.fs import fsync_dir
from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from rsm_plugins.local import LocalDirRemoteStorageManager
from tiered.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from tiered.rlm_tasks import copy_batches

TARGET = 0.7


class Producer(threading.Thread):
    """Appends 16 KiB batches to a partition at a fixed rate until stopped."""

    def __init__(self, directory: Path, mb_s: float) -> None:
        super().__init__(daemon=True)
        self.log = PartitionLog(directory, "load", 0, LogConfig(segment_bytes=MiB))
        self.log.inline_flush = False
        self.pool = build_pool(16)
        self.interval = len(self.pool[0]) / (mb_s * MiB) if mb_s > 0 else 0.0
        self.stopped = threading.Event()
        self.bytes = 0

    def run(self) -> None:
        if self.interval == 0:
            return
        next_at = time.monotonic()
        i = 0
        while not self.stopped.is_set():
            batch = bytearray(self.pool[i % len(self.pool)])
            self.log.append_as_leader(batch, LEADER_EPOCH)
            self.bytes += len(batch)
            i += 1
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def stop(self) -> None:
        self.stopped.set()
        self.join()
        self.log.delete()


def run(base: Path, total_mb: int, rounds: int, produce_mb: float) -> dict[str, Any]:
    work = base / "tiering-local"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        segments = _segments(work / "src", total_mb, 1)
        # A fresh plugin for each timed copy, closed after the timing: its spare files
        # (``rsm_plugins.local.SpareFiles``) are made during the copy that uses them, never
        # ahead of it, and its thread stops before the baseline runs.
        open_rsms: list[LocalDirRemoteStorageManager] = []

        def fresh_rsm() -> LocalDirRemoteStorageManager:
            rsm = LocalDirRemoteStorageManager()
            rsm.configure({"storage.root": str(work / "bucket")})
            open_rsms.append(rsm)
            return rsm

        tp = TopicIdPartition(uuid.uuid4(), "bench", 0)
        payload = 0
        for _, data in segments:
            payload += sum(
                p.stat().st_size
                for p in (
                    data.log_segment,
                    data.offset_index,
                    data.time_index,
                    data.producer_snapshot_index,
                )
            )
            payload += len(data.leader_epoch_index)

        def copies() -> list[tuple[RemoteLogSegmentMetadata, LogSegmentData]]:
            return [
                (
                    RemoteLogSegmentMetadata(
                        remote_log_segment_id=RemoteLogSegmentId(tp, uuid.uuid4()),
                        start_offset=seg.base_offset,
                        end_offset=seg.base_offset + 1,
                        max_timestamp_ms=1,
                        broker_id=1,
                        event_timestamp_ms=1,
                        segment_size_in_bytes=seg.size,
                        segment_leader_epochs={0: seg.base_offset},
                    ),
                    data,
                )
                for seg, data in segments
            ]

        def tierlog() -> None:
            # The copy task's batches, by the copy task's own rule.
            rsm = fresh_rsm()
            for batch in copy_batches(copies(), lambda c: c[0].segment_size_in_bytes):
                rsm.copy_log_segments_data(batch)

        def per_segment() -> None:
            rsm = fresh_rsm()
            for md, data in copies():
                rsm.copy_log_segment_data(md, data)

        def plain_copy(durable: bool) -> None:
            # The six files of each segment; with ``durable``, each fsynced afterwards and
            # the directory too, as tierlog's copy is before COPY_SEGMENT_FINISHED.
            out = work / "plain" / uuid.uuid4().hex[:8]
            out.mkdir(parents=True)
            manifest = b"{" + b"x" * 1200 + b"}"  # about a manifest's size
            written: list[str] = []
            for seg, data in segments:
                stem = out / f"{seg.base_offset:020d}"
                for src, suffix in (
                    (data.log_segment, "log"),
                    (data.offset_index, "index"),
                    (data.time_index, "timeindex"),
                    (data.producer_snapshot_index, "snapshot"),
                ):
                    shutil.copyfile(src, f"{stem}.{suffix}")
                    written.append(f"{stem}.{suffix}")
                Path(f"{stem}.leader-epoch-checkpoint").write_bytes(data.leader_epoch_index)
                Path(f"{stem}.manifest.json").write_bytes(manifest)
                written += [f"{stem}.leader-epoch-checkpoint", f"{stem}.manifest.json"]
            if not durable:
                return
            for name in written:
                fd = os.open(name, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fsync_dir(out)

        producer = Producer(work / "load-0", produce_mb)
        producer.start()
        times: dict[str, list[float]] = {
            "tierlog": [],
            "per segment": [],
            "copyfile": [],
            "copyfile+fsync": [],
        }
        cpu: dict[str, list[float]] = {name: [] for name in times}
        began = time.monotonic()
        try:
            for r in range(rounds):
                order = [
                    ("tierlog", tierlog),
                    ("copyfile", lambda: plain_copy(durable=False)),
                    ("per segment", per_segment),
                    ("copyfile+fsync", lambda: plain_copy(durable=True)),
                ]
                for name, fn in order if r % 2 == 0 else reversed(order):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    fn()
                    times[name].append(time.perf_counter() - start)
                    cpu[name].append(time.process_time() - start_cpu)
                    while open_rsms:
                        open_rsms.pop().close()
        finally:
            produced = producer.bytes / MiB / (time.monotonic() - began)
            producer.stop()
            while open_rsms:
                open_rsms.pop().close()
        mbps = {k: payload / MiB / statistics.median(v) for k, v in times.items()}
        return {
            **mbps,
            **{f"{k} cpu ms": 1000 * statistics.median(v) / len(segments) for k, v in cpu.items()},
            "ratio": mbps["tierlog"] / mbps["copyfile"],
            "per-segment ratio": mbps["per segment"] / mbps["copyfile"],
            "durable ratio": mbps["tierlog"] / mbps["copyfile+fsync"],
            "ratios": [b / a for a, b in zip(times["tierlog"], times["copyfile"], strict=True)],
            "MiB": payload / MiB,
            "segments": len(segments),
            "produced MB/s": produced,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


SEGMENT = MiB
LOCAL_RETENTION = 16 * MiB
VALUE_SIZE = 4096


def local_log_bytes(partition_dir: Path) -> int:
    total = 0
    for p in partition_dir.glob("*.log"):
        with contextlib.suppress(FileNotFoundError):  # deleted by retention meanwhile
            total += p.stat().st_size
    return total


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU nanoseconds used so far by each thread of ``pid``, by thread id (Python does not
    name its threads for the OS; py-spy's output maps the ids to names)."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):  # a thread that just exited
            out[task.name] = int((task / "schedstat").read_text().split()[0])
    return out


class Trace:
    """One JSON line per sample: local bytes and segments, remote segments, the load
    average and each broker thread's CPU since the last sample, so that a stall can be
    matched to what the broker was doing (and to py-spy's samples of the same seconds)."""

    def __init__(self, path: Path, pid: int, bucket: Path) -> None:
        self.file = path.open("w")
        self.pid = pid
        self.bucket = bucket
        self.start = time.monotonic()
        self.cpu = thread_cpu_ns(pid)

    def sample(self, partition_dir: Path, local_bytes: int) -> None:
        cpu = thread_cpu_ns(self.pid)
        delta = {k: round((v - self.cpu.get(k, 0)) / 1e6) for k, v in cpu.items()}
        self.cpu = cpu
        line = {
            "t": round(time.monotonic() - self.start, 2),
            "local_mib": round(local_bytes / MiB, 1),
            "local_segments": sum(1 for _ in partition_dir.glob("*.log")),
            "remote_segments": sum(1 for _ in self.bucket.rglob("*.manifest.json")),
            "load": os.getloadavg()[0],
            "cpu_ms": {k: v for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v},
        }
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def run_broker(
    base: Path,
    seconds: float,
    produce_mb: float,
    trace: Path | None = None,
    py_spy: Path | None = None,
) -> dict[str, Any]:
    """Produce at a fixed rate to a tiered partition; sample its local bytes each second.

    ``trace``: write a per-second log there (``Trace``); ``py_spy``: record the broker with
    py-spy (every thread, idle ones too, 100 Hz) for the whole run into that file."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.broker_throughput import running

    work = base / "tiering-broker"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    overrides = [
        "remote.log.storage.system.enable=true",
        f"rsm.config.storage.root={work / 'bucket'}",
        "log.retention.check.interval.ms=1000",
        "remote.log.manager.task.interval.ms=1000",
    ]
    topic = "tiered"
    try:
        with running("tierlog", work, overrides) as server:
            admin = AdminClient({"bootstrap.servers": server.bootstrap})
            config = {
                "segment.bytes": str(SEGMENT),
                "local.retention.bytes": str(LOCAL_RETENTION),
                "remote.storage.enable": "true",
                "retention.ms": "-1",
            }
            for future in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
                future.result(30)
            failures: list[str] = []

            def on_delivery(err: object, _msg: object) -> None:
                if err is not None:
                    failures.append(str(err))

            producer = Producer(
                {
                    "bootstrap.servers": server.bootstrap,
                    "acks": "all",
                    "linger.ms": 5,
                    "delivery.report.only.error": True,
                    "on_delivery": on_delivery,
                }
            )
            value = b"v" * VALUE_SIZE
            per_tick = max(1, round(produce_mb * MiB / VALUE_SIZE / 10))  # 100 ms ticks
            partition_dir = server.data_dir / f"{topic}-0"
            samples: list[int] = []
            tracer = Trace(trace, server.proc.pid, work / "bucket") if trace else None
            spy = None
            if py_spy is not None:
                spy = subprocess.Popen(
                    [
                        str(Path(sys.executable).with_name("py-spy")),
                        "record",
                        "--rate",
                        "100",
                        "--idle",
                        "--threads",
                        "--nonblocking",
                        "--format",
                        "raw",
                        "--pid",
                        str(server.proc.pid),
                        "--output",
                        str(py_spy),
                        "--duration",
                        str(int(seconds) + 1),
                    ],
                    stdout=subprocess.DEVNULL,
                )
            sent = 0
            start = time.monotonic()
            next_sample = start + 1.0
            tick = start
            while time.monotonic() - start < seconds:
                for _ in range(per_tick):
                    while True:
                        try:
                            producer.produce(topic, value, partition=0)
                            break
                        except BufferError:
                            producer.poll(0.01)
                sent += per_tick
                producer.poll(0)
                tick += 0.1
                now = time.monotonic()
                if now >= next_sample:
                    samples.append(local_log_bytes(partition_dir))
                    if tracer is not None:
                        tracer.sample(partition_dir, samples[-1])
                    next_sample += 1.0
                if tick > now:
                    time.sleep(tick - now)
            left = producer.flush(120)
            elapsed = time.monotonic() - start
            if tracer is not None:
                tracer.close()
            if spy is not None:
                spy.wait(60)
            remote = sum(1 for _ in (work / "bucket").rglob("*.log"))
            local = sum(1 for _ in partition_dir.glob("*.log"))
            del producer, admin  # their connections close before the broker stops
            if left or failures:
                raise RuntimeError(f"{left} unflushed, {len(failures)} failed: {failures[:3]}")
            return {
                "series": samples,
                "local segments": local,
                "produced MB/s": sent * VALUE_SIZE / MiB / elapsed,
                "max local MiB": max(samples) / MiB,
                "final local MiB": samples[-1] / MiB,
                "remote segments": remote,
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--produce-mb", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="32 MiB, 2 rounds")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--broker", action="store_true", help="local bytes of a broker")
    parser.add_argument("--seconds", type=float, default=60.0, help="with --broker")
    parser.add_argument("--trace", type=Path, help="with --broker: a per-second JSON log")
    parser.add_argument("--py-spy", type=Path, help="with --broker: py-spy's raw profile")
    args = parser.parse_args(argv)
    if args.broker:
        print(describe_machine(args.dir))
        b = run_broker(args.dir, args.seconds, args.produce_mb, args.trace, args.py_spy)
        bound = (2 * LOCAL_RETENTION + 2 * SEGMENT) / MiB
        verdict = "PASS" if b["max local MiB"] <= bound else "MISS"
        print(
            f"broker, one partition at {b['produced MB/s']:.1f} MB/s for {args.seconds:.0f} s: "
            f"local bytes max {b['max local MiB']:.0f} MiB, at the end "
            f"{b['final local MiB']:.0f} MiB; {b['remote segments']} segments tiered, "
            f"{b['local segments']} local (target <= {bound:.0f} MiB) {verdict}",
            flush=True,
        )
        series = " ".join(f"{v / MiB:.0f}" for v in b["series"])
        print(f"local MiB each second: {series}")
        return 0
    mb, rounds = (32, 2) if args.quick else (args.mb, args.rounds)
    print(describe_machine(args.dir))
    print(summary(run(args.dir, mb, rounds, args.produce_mb)), flush=True)
    return 0


def summary(r: dict[str, Any]) -> str:
    """One line: both sides, the ratio, the target and PASS/MISS."""
    verdict = "PASS" if r["ratio"] >= TARGET else "MISS"
    per_round = ", ".join(f"{x:.2f}" for x in r["ratios"])
    return (
        f"copy {r['segments']:.0f} segments of 1 MiB ({r['MiB']:.0f} MiB with indexes) to the "
        f"local-dir tier while producing {r['produced MB/s']:.1f} MB/s: tierlog (the copy "
        f"task's batches) {r['tierlog']:.1f} MB/s "
        f"({1000 * r['MiB'] / r['tierlog'] / r['segments']:.1f} ms/segment, CPU "
        f"{r['tierlog cpu ms']:.1f} ms), shutil.copyfile {r['copyfile']:.1f} MB/s "
        f"(CPU {r['copyfile cpu ms']:.1f} ms/segment), ratio {r['ratio']:.2f} (rounds: "
        f"{per_round}) (target >= {TARGET}) {verdict}; one copy_log_segment_data per segment "
        f"{r['per segment']:.1f} MB/s, ratio {r['per-segment ratio']:.2f}; for reference "
        f"(no target), copyfile + fsync of every file {r['copyfile+fsync']:.1f} MB/s, "
        f"tierlog / that {r['durable ratio']:.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
