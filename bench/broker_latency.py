"""Produce latency: acks=1 at a fixed rate, tierlog vs. the null broker.

For each server (child process, fresh topic, one partition), confluent-kafka produces 1 KiB
values at a fixed ``--mb-s`` (default 10 MiB/s) for ``--seconds`` (default 10), paced in
1 ms steps, with acks=1 and ``linger.ms`` (default 0: a message goes out as soon as the
connection is free, so the figure is the broker's round trip plus queueing, not the
producer's linger). Each message's latency is librdkafka's own ``Message.latency()``: the
time from ``produce()`` to its delivery report, independent of when this process polls.
The first second is a warm-up and is not counted. Reported: p50, p99, p99.9 and max.

    python -m bench.broker_latency [--mb-s 10] [--seconds 10] [--size 1024] [--linger-ms 0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Message, Producer

from bench._common import DEFAULT_DIR, MiB, describe_machine, scratch_dir
from bench.broker_throughput import SERVERS, ServerProcess, running

WARMUP_S = 1.0


@dataclass(frozen=True, slots=True)
class Latency:
    server: str
    messages: int
    achieved_mb_s: float
    broker_cpu_pct: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(
    server: ServerProcess, size: int, mb_s: float, seconds: float, linger_ms: int
) -> Latency:
    """Produce at ``mb_s`` for ``WARMUP_S + seconds``; latencies of the measured part.

    Raises:
        RuntimeError: a delivery failed or the producer could not keep the rate.
    """
    latencies: list[float] = []
    failures: list[str] = []
    counting = False

    def on_delivery(err: object, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))
        elif counting:
            latency = msg.latency()
            if latency is not None:
                latencies.append(latency)

    producer = Producer(
        {
            "bootstrap.servers": server.bootstrap,
            "acks": 1,
            "linger.ms": linger_ms,
            "compression.type": "none",
            "enable.idempotence": False,
            "on_delivery": on_delivery,
        }
    )
    topic = f"latency-{size}"
    producer.list_topics(topic, timeout=30)
    pool = [os.urandom(size) for _ in range(64)]
    rate = mb_s * MiB / size  # messages per second
    sent = measured = 0
    start = time.perf_counter()
    measure_from = start + WARMUP_S
    end = measure_from + seconds
    cpu0 = None
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if not counting and now >= measure_from:
            producer.poll(0)  # deliver warm-up reports before counting starts
            counting, measured, cpu0 = True, sent, server.cpu_seconds()
        due = int((now - start) * rate)
        while sent < due:
            producer.produce(topic, pool[sent & 63], partition=0)
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    left = producer.flush(30)
    cpu1 = server.cpu_seconds()
    elapsed = time.perf_counter() - measure_from
    if left or failures:
        raise RuntimeError(f"latency: {left} unflushed, {len(failures)} failed: {failures[:3]}")
    counted = sent - measured
    if not latencies or len(latencies) != counted:
        raise RuntimeError(f"latency: {len(latencies)} reports for {counted} messages")
    assert cpu0 is not None
    ordered = sorted(latencies)
    ms = 1000.0
    return Latency(
        server=server.kind,
        messages=counted,
        achieved_mb_s=counted * size / MiB / seconds,
        broker_cpu_pct=100 * (cpu1[0] - cpu0[0]) / elapsed,
        p50_ms=statistics.median(ordered) * ms,
        p99_ms=_percentile(ordered, 0.99) * ms,
        p999_ms=_percentile(ordered, 0.999) * ms,
        max_ms=ordered[-1] * ms,
    )


def run(
    base: Path,
    mb_s: float = 10.0,
    seconds: float = 10.0,
    size: int = 1024,
    linger_ms: int = 0,
    servers: tuple[str, ...] = SERVERS,
) -> list[Latency]:
    base = scratch_dir(base, "broker-latency", int(mb_s * MiB * (seconds + WARMUP_S)))
    out = []
    try:
        for kind in servers:
            with running(kind, base) as server:
                out.append(measure(server, size, mb_s, seconds, linger_ms))
                print(f"  {kind:8} p50 {out[-1].p50_ms:.2f} ms p99 {out[-1].p99_ms:.2f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out


def print_table(results: list[Latency], size: int, mb_s: float, linger_ms: int) -> None:
    print()
    print(
        f"acks=1, {size} B values at {mb_s:g} MB/s, linger.ms={linger_ms}; "
        "latency = produce() to delivery report"
    )
    print()
    print(
        "| server | messages | MB/s | broker CPU % | p50 ms | p99 ms | p99.9 ms | max ms "
        "| p50 / null | p99 / null |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    null = next((r for r in results if r.server == "null"), None)
    for r in results:
        rel50 = f"{r.p50_ms / null.p50_ms:.2f}" if null and r is not null else "-"
        rel99 = f"{r.p99_ms / null.p99_ms:.2f}" if null and r is not null else "-"
        print(
            f"| {r.server} | {r.messages:,} | {r.achieved_mb_s:.1f} | {r.broker_cpu_pct:.0f} "
            f"| {r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.p999_ms:.2f} | {r.max_ms:.2f} "
            f"| {rel50} | {rel99} |"
        )
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb-s", type=float, default=10.0, help="produce rate, MiB/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes")
    parser.add_argument("--linger-ms", type=int, default=0)
    parser.add_argument("--servers", default=",".join(SERVERS), help="null, tierlog or both")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="scratch directory")
    args = parser.parse_args(argv)
    servers = tuple(s.strip() for s in args.servers.split(","))
    print(describe_machine(args.dir), flush=True)
    results = run(args.dir, args.mb_s, args.seconds, args.size, args.linger_ms, servers)
    print_table(results, args.size, args.mb_s, args.linger_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
