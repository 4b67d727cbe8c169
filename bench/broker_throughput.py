"""Broker throughput: confluent-kafka producing and consuming through tierlog and the null broker.

For each message size, each server (``bench.null_broker`` first, then a tierlog broker) runs
as a child process with a fresh topic (auto-created, one partition) and, from this process:

- produce: ``--messages`` values of the size with confluent-kafka (acks=1, ``linger.ms=5``,
  ``batch.size=1000000``, no compression, no idempotence; the same settings on both sides),
  timed from the first ``produce()`` to the end of ``flush()``;
- fetch: one consumer ``assign()``ed at offset 0 reads everything back (``fetch.min.bytes=1``,
  ``fetch.max.bytes`` 50 MiB, ``max.partition.fetch.bytes`` 4 MiB, a 256 MiB client-side
  queue that does not back off; see CONSUMER_CONFIG), timed until the last
  message arrives; the count and the last offset are checked.

The broker's CPU time is the child's, all threads, before and after each phase: the sum of
``/proc/PID/task/*/schedstat`` run times (ns; utime + stime of ``/proc/PID/stat`` without its
10 ms ticks), with stime alone as the system share. MB/s and GB count message values only
(MiB = 2^20, GiB = 2^30 bytes, as in the other benchmarks). The ratio is tierlog's MB/s over
the null broker's, same phase and size. Broker CPU % near 100 means the server's event loop
is the limit; a null broker well below it means the client (Python confluent-kafka, which
shares this 2-core machine) or the machine is the limit and the ratio says little about the
broker. The null broker needs no group coordinator: the consumer's group.id (the client
requires one) is never used, as nothing is committed.

    python -m bench.broker_throughput [--quick] [--messages N] [--sizes 100,1024]
        [--servers null,tierlog] [--rounds 1] [--dir bench-data] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench._common import DEFAULT_DIR, MiB, describe_machine, scratch_dir

GiB = 1024 * MiB
FULL_MESSAGES = 1_000_000
QUICK_MESSAGES = 100_000
SIZES = (100, 1024)
SERVERS = ("null", "tierlog")
START_TIMEOUT_S = 60.0
PHASE_TIMEOUT_S = 600.0

# Targets (the issue): tierlog / null broker ratio, absolute produce rate at 1 KiB, and the
# broker's CPU per GiB moved.
TARGET_RATIO = 0.9
TARGET_PRODUCE_MB_S_1K = 100.0
TARGET_PRODUCE_CPU_S_PER_GB = 2.0
TARGET_FETCH_CPU_S_PER_GB = 1.0

PRODUCER_CONFIG: dict[str, str | int | bool] = {
    "acks": 1,
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}
CONSUMER_CONFIG: dict[str, str | int | bool] = {
    "group.id": "bench",  # required by the client; nothing is committed (assign, no commits)
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 100,
    "fetch.max.bytes": 50 * MiB,
    "max.partition.fetch.bytes": 4 * MiB,
    # librdkafka stops fetching for fetch.queue.backoff.ms (1 s by default) whenever more
    # than queued.min.messages (100,000) wait in its queue, which a 4 MiB fetch of 100 B
    # messages exceeds at once: a stop-and-go that would measure the back-off, not the broker.
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 262_144,
    "fetch.queue.backoff.ms": 1,
}
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


# -- servers -----------------------------------------------------------------------------------
class ServerProcess:
    """A broker (tierlog or the null broker) running as a child process."""

    def __init__(self, kind: str, data_dir: Path, overrides: list[str] | None = None) -> None:
        self.kind = kind
        if kind == "null":
            cmd = [sys.executable, "-m", "bench.null_broker", "--port", "0"]
        elif kind == "tierlog":
            shutil.rmtree(data_dir, ignore_errors=True)
            cmd = [
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
            ]
            for pair in overrides or []:
                cmd += ["--set", pair]
        else:
            raise ValueError(f"unknown server {kind!r}")
        self.data_dir = data_dir
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.bootstrap = self._wait_listening()

    def _wait_listening(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.kind} exited with {self.proc.wait()} before listening")
            if "listening on" in line:
                return line.strip().rsplit("//", 1)[1].split(",")[0]
        raise RuntimeError(f"{self.kind} did not listen within {START_TIMEOUT_S:.0f} s")

    def cpu_seconds(self) -> tuple[float, float]:
        """(total, system) CPU seconds of the child, every thread.

        The total sums the threads' nanosecond run times (/proc/PID/task/*/schedstat): the
        clock-tick counters of /proc/PID/stat (10 ms) are too coarse for a short phase.
        The system part comes from /proc/PID/stat (stime, ticks).
        """
        total_ns = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that just exited
                total_ns += int((task / "schedstat").read_text().split()[0])
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return total_ns / 1e9, int(fields[12]) / _TICKS_PER_S

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.kind == "tierlog":
            shutil.rmtree(self.data_dir, ignore_errors=True)


@contextlib.contextmanager
def running(kind: str, base: Path, overrides: list[str] | None = None) -> Iterator[ServerProcess]:
    server = ServerProcess(kind, base / f"broker-{kind}", overrides)
    try:
        yield server
    finally:
        server.stop()


def client_cpu_seconds() -> float:
    """This process's CPU time: the Python caller and librdkafka's threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- phases ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Phase:
    server: str
    phase: str  # "produce" or "fetch"
    size: int
    messages: int
    seconds: float
    broker_cpu_s: float  # user + system
    broker_sys_s: float  # system alone: the kernel's socket and file work for the broker
    client_cpu_s: float

    @property
    def payload(self) -> int:
        return self.messages * self.size

    @property
    def msgs_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_s(self) -> float:
        return self.payload / MiB / self.seconds

    @property
    def cpu_s_per_gb(self) -> float:
        return self.broker_cpu_s / (self.payload / GiB)

    @property
    def sys_s_per_gb(self) -> float:
        return self.broker_sys_s / (self.payload / GiB)

    @property
    def broker_util(self) -> float:
        return self.broker_cpu_s / self.seconds

    @property
    def client_util(self) -> float:
        return self.client_cpu_s / self.seconds


def value_pool(size: int, count: int = 64) -> list[bytes]:
    """Distinct incompressible values, cycled by the producer."""
    return [os.urandom(size) for _ in range(count)]


def produce(bootstrap: str, topic: str, size: int, messages: int) -> float:
    """Seconds to produce ``messages`` values of ``size`` bytes and flush them.

    Raises:
        RuntimeError: any delivery failed or the flush did not finish.
    """
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:  # called for failures only
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_CONFIG,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
        }
    )
    # Connect and create the topic before timing (Metadata auto-creates it).
    producer.list_topics(topic, timeout=30)
    pool = value_pool(size)
    mask = len(pool) - 1
    send = producer.produce
    poll = producer.poll
    start = time.perf_counter()
    for i in range(messages):
        value = pool[i & mask]
        while True:
            try:
                send(topic, value, partition=0)
                break
            except BufferError:
                poll(0.001)
        if not i & 0xFFFF:
            poll(0)
    left = producer.flush(PHASE_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if left or failures:
        raise RuntimeError(f"produce: {left} unflushed, {len(failures)} failed: {failures[:3]}")
    return elapsed


def consume(bootstrap: str, topic: str, messages: int) -> float:
    """Seconds to read ``messages`` messages from offset 0.

    Raises:
        RuntimeError: an error message, a wrong last offset, or a timeout.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG})
    try:
        read = consumer.consume
        count = 0
        last = None
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = start + PHASE_TIMEOUT_S
        while count < messages:
            batch = read(10_000, 1.0)
            if batch:
                last = batch[-1]
                if last.error() is not None:
                    raise KafkaException(last.error())
                count += len(batch)
            elif time.perf_counter() > deadline:
                raise RuntimeError(f"fetch: {count} of {messages} messages before the timeout")
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    if count != messages or last is None or last.offset() != messages - 1:
        offset = last.offset() if last is not None else None
        raise RuntimeError(f"fetch: read {count} messages, last offset {offset}")
    return elapsed


def measure(server: ServerProcess, topic: str, size: int, messages: int) -> list[Phase]:
    phases = []
    for name in ("produce", "fetch"):
        (cpu0, sys0), client0 = server.cpu_seconds(), client_cpu_seconds()
        if name == "produce":
            seconds = produce(server.bootstrap, topic, size, messages)
        else:
            seconds = consume(server.bootstrap, topic, messages)
        (cpu1, sys1), client1 = server.cpu_seconds(), client_cpu_seconds()
        broker_cpu = cpu1 - cpu0
        phases.append(
            Phase(
                server.kind,
                name,
                size,
                messages,
                seconds,
                broker_cpu,
                sys1 - sys0,
                client1 - client0,
            )
        )
        print(
            f"  {server.kind:8} {name:7} {size:5} B: {phases[-1].mb_s:7,.1f} MB/s, "
            f"broker CPU {broker_cpu:.2f} s",
            flush=True,
        )
    return phases


def run(
    messages: int,
    sizes: tuple[int, ...],
    base: Path,
    servers: tuple[str, ...] = SERVERS,
    overrides: list[str] | None = None,
    rounds: int = 1,
) -> list[Phase]:
    """Both phases for every size, server and round; each round reverses the server order.

    Returns every phase measured; ``medians`` picks the representative ones.
    """
    needed = messages * max(sizes) * 2  # tierlog's log plus the margin scratch_dir asks for
    base = scratch_dir(base, "broker", needed)
    results: list[Phase] = []
    try:
        for r in range(rounds):
            for size in sizes:
                for kind in servers if r % 2 == 0 else tuple(reversed(servers)):
                    with running(kind, base, overrides if kind == "tierlog" else None) as server:
                        results.extend(measure(server, f"bench-{size}", size, messages))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def medians(results: list[Phase]) -> list[Phase]:
    """Per (server, phase, size), the round with the median MB/s (the lower middle one)."""
    groups: dict[tuple[str, str, int], list[Phase]] = {}
    for p in results:
        groups.setdefault((p.server, p.phase, p.size), []).append(p)
    picked = []
    for group in groups.values():
        ordered = sorted(group, key=lambda p: p.mb_s)
        picked.append(ordered[(len(ordered) - 1) // 2])
    return sorted(picked, key=lambda p: (p.size, p.server != "null", p.phase != "produce"))


def page_cache_floor(base: Path, nbytes: int) -> float:
    """CPU seconds per GiB to write ``nbytes`` into a new file (1 MiB writes, no fsync).

    The least any broker pays to put produced bytes in the page cache. On a VM whose host
    backs guest memory lazily (and takes freed pages back), this is far above a bare
    machine's ~0.25 s/GiB, and it is part of every produce figure here.
    """
    base = scratch_dir(base.parent, base.name, nbytes)
    path = base / "page-cache-floor.bin"
    chunk = os.urandom(MiB)
    start = client_cpu_seconds()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for _ in range(max(nbytes // MiB, 1)):
            os.write(fd, chunk)
    finally:
        os.close(fd)
    cpu = client_cpu_seconds() - start
    shutil.rmtree(base)
    return cpu / (max(nbytes // MiB, 1) * MiB / GiB)


# -- the table ---------------------------------------------------------------------------------
def _targets(p: Phase, null: Phase | None) -> list[tuple[str, bool]]:
    """(target text, met) for a tierlog row; none for the baseline."""
    if p.server == "null":
        return []
    checks: list[tuple[str, bool]] = []
    if null is not None:
        checks.append((f"ratio >= {TARGET_RATIO}", p.mb_s / null.mb_s >= TARGET_RATIO))
    if p.phase == "produce":
        if p.size == 1024:
            checks.append(
                (f">= {TARGET_PRODUCE_MB_S_1K:.0f} MB/s", p.mb_s >= TARGET_PRODUCE_MB_S_1K)
            )
        limit = TARGET_PRODUCE_CPU_S_PER_GB
    else:
        limit = TARGET_FETCH_CPU_S_PER_GB
    checks.append((f"<= {limit:.0f} CPU s/GB", p.cpu_s_per_gb <= limit))
    return checks


def print_table(results: list[Phase], floor_s_per_gb: float | None = None) -> None:
    baseline = {(p.phase, p.size): p for p in results if p.server == "null"}
    print()
    print(
        "| server | phase | msg size | msgs/s | MB/s | broker CPU s/GB (sys) | broker CPU % "
        "| client CPU % | ratio vs null | target | result |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for p in results:
        null = baseline.get((p.phase, p.size))
        ratio = f"{p.mb_s / null.mb_s:.2f}" if null is not None and p.server != "null" else "-"
        checks = _targets(p, null)
        target = ", ".join(text for text, _ in checks) or "-"
        missed = [text for text, ok in checks if not ok]
        verdict = "-" if not checks else ("PASS" if not missed else "MISS")
        print(
            f"| {p.server} | {p.phase} | {p.size} B | {p.msgs_s:,.0f} | {p.mb_s:,.1f} "
            f"| {p.cpu_s_per_gb:.2f} ({p.sys_s_per_gb:.2f}) | {100 * p.broker_util:.0f} "
            f"| {100 * p.client_util:.0f} "
            f"| {ratio} | {target} | {verdict} |"
        )
    for (phase, size), null in baseline.items():
        if null.broker_util < 0.85:
            print(
                f"note: null broker {phase} at {size} B used {100 * null.broker_util:.0f} % "
                "of a core: the client, not the server, is the limit there"
            )
    if floor_s_per_gb is not None:
        print(
            f"note: writing new data into the page cache alone costs {floor_s_per_gb:.2f} "
            "CPU s/GB on this machine (1 MiB writes to a new file)"
        )
    sys.stdout.flush()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"{QUICK_MESSAGES:,} messages per size")
    p.add_argument(
        "--messages", type=int, help=f"messages per size and server (default {FULL_MESSAGES:,})"
    )
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="message sizes in bytes")
    p.add_argument("--servers", default=",".join(SERVERS), help="null, tierlog or both")
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="scratch directory")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds, alternating which server goes first; the median round is shown",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a tierlog broker config override (repeatable)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    messages = args.messages or (QUICK_MESSAGES if args.quick else FULL_MESSAGES)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    servers = tuple(s.strip() for s in args.servers.split(","))
    print(describe_machine(args.dir))
    print(f"{messages:,} messages per size and server; sizes {sizes}", flush=True)
    start = time.perf_counter()
    floor = page_cache_floor(args.dir / "broker-floor", messages * max(sizes))
    results = run(messages, sizes, args.dir, servers, args.set, args.rounds)
    print_table(medians(results), floor)
    print(f"elapsed: {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
