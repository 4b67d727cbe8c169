"""Remote read-back from S3 (issue 19): a consumer through the broker vs raw boto3 GETs.

A broker tiers one partition to moto's S3 server (``moto_server`` in its own process, so
it shares no GIL with the broker or this process) with small local retention; then, in
the same run, alternating which side goes first in each round:

* tierlog: a confluent-kafka consumer reads the topic from offset 0 through the broker
  (the remote tier for everything below the local log start);
* boto3: one client reads the same ``.log`` objects with sequential ranged GETs of
  ``--range-kb`` (default 1040 KiB: librdkafka's ``max.partition.fetch.bytes`` of 1 MiB
  plus the slack the reader adds for the index entry before the first batch), nothing
  decoded.

Throughput of each side is the remote ``.log`` bytes over its time (the broker's side
also reads the local tail, one or two segments, which only counts against it). Target:
tierlog >= 0.8x boto3.

    PYTHONPATH=. python -m bench.remote_read_s3 [--mb 64] [--rounds 3] [--segment-kb 4096]
                                                [--range-kb 1040] [--dir bench-data] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._common import DEFAULT_DIR, MiB, describe_machine
from bench.tiering import Broker, _consume_all, _create, _fill, _launcher

TARGET = 0.8


def _settings(endpoint: Any, bucket: str) -> dict[str, str]:
    rsm = endpoint.rsm_configs(bucket)
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "rsm_plugins.s3.S3RemoteStorageManager",
        **{f"rsm.config.{k}": v for k, v in rsm.items() if v != ""},
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "300",
    }


def _log_objects(client: Any, bucket: str) -> list[tuple[str, int]]:
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".log"):
                out.append((obj["Key"], obj["Size"]))
    return sorted(out)


def _read_ranges(client: Any, bucket: str, objects: list[tuple[str, int]], chunk: int) -> int:
    """Sequential ranged GETs of every object; returns the bytes read."""
    total = 0
    for key, size in objects:
        at = 0
        while at < size:
            end = min(at + chunk, size)
            body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={at}-{end - 1}")["Body"]
            total += len(body.read())
            at = end
    return total


def _main_thread_cpu(broker: Broker) -> float:
    """CPU seconds of the broker's main thread (its event loop) so far."""
    pid = broker.proc.pid
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


def bench(base: Path, total_mb: int, rounds: int, segment_kb: int, range_kb: int) -> dict[str, Any]:
    launcher = _launcher()
    endpoint = launcher.start_s3_endpoint("moto-process")
    work = base / "remote-read-s3"
    shutil.rmtree(work, ignore_errors=True)
    broker = None
    try:
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        endpoint.create_bucket(bucket)
        broker = Broker(work / "b", _settings(endpoint, bucket))
        segment = str(segment_kb * 1024)
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
        count = _fill(broker.bootstrap, "remote", total_mb)
        local_dir = Path(broker.settings["log.dirs"]) / "remote-0"
        deadline = time.monotonic() + 300
        while len(list(local_dir.glob("*.log"))) > 3:  # copied and deleted locally
            if time.monotonic() > deadline:
                raise RuntimeError("tiering did not catch up")
            time.sleep(0.5)
        client = endpoint.client()
        objects = _log_objects(client, bucket)
        remote_bytes = sum(size for _, size in objects)
        times: dict[str, list[float]] = {"tierlog": [], "boto3": []}
        # CPU seconds of each side's reader: the broker process for tierlog (its boto3
        # GETs and the Kafka answers), this process for boto3 (the GETs alone).
        cpu: dict[str, list[float]] = {"tierlog": [], "boto3": []}
        cpu_of = {"tierlog": broker.cpu_seconds, "boto3": time.process_time}
        # The broker's event loop (its main thread) alone: the Kafka side of the answers.
        loop_cpu: list[float] = []

        def tierlog() -> None:
            _consume_all(broker.bootstrap, "remote", count)

        def raw() -> None:
            got = _read_ranges(client, bucket, objects, range_kb * 1024)
            assert got == remote_bytes, (got, remote_bytes)

        for r in range(rounds):
            order = [("tierlog", tierlog), ("boto3", raw)]
            for name, fn in order if r % 2 == 0 else reversed(order):
                cpu0, loop0 = cpu_of[name](), _main_thread_cpu(broker)
                began = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - began)
                cpu[name].append(cpu_of[name]() - cpu0)
                if name == "tierlog":
                    loop_cpu.append(_main_thread_cpu(broker) - loop0)
        client.close()
        mbps = {k: remote_bytes / MiB / statistics.median(v) for k, v in times.items()}
        return {
            **mbps,
            "ratio": mbps["tierlog"] / mbps["boto3"],
            "remote MiB": remote_bytes / MiB,
            "objects": len(objects),
            "rounds": {k: [round(remote_bytes / MiB / t, 1) for t in v] for k, v in times.items()},
            "cpu s/GiB": {
                k: round(statistics.median(v) * 1024 * MiB / remote_bytes, 2)
                for k, v in cpu.items()
            },
            "event loop s/GiB": round(statistics.median(loop_cpu) * 1024 * MiB / remote_bytes, 2),
        }
    finally:
        if broker is not None:
            broker.stop()
        endpoint.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64, help="MiB produced (1 KiB records)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--segment-kb", type=int, default=4096)
    parser.add_argument("--range-kb", type=int, default=1040)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--quick", action="store_true", help="16 MiB, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.mb, args.rounds = 16, 2
    print(describe_machine(args.dir))
    r = bench(args.dir, args.mb, args.rounds, args.segment_kb, args.range_kb)
    verdict = "PASS" if r["ratio"] >= TARGET else "MISS"
    print(
        f"remote read-back from S3 (moto), {r['remote MiB']:.0f} MiB in {r['objects']} "
        f"segments: tierlog consumer {r['tierlog']:.1f} MB/s, boto3 ranged GETs of "
        f"{args.range_kb} KiB {r['boto3']:.1f} MB/s, ratio {r['ratio']:.2f} "
        f"(target >= {TARGET}: {verdict}); rounds {r['rounds']}; reader CPU s/GiB "
        f"{r['cpu s/GiB']} (the broker's event loop {r['event loop s/GiB']})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
