"""Load: many partitions, concurrent producers and consumers (some reading the remote tier)
on one broker over loopback; no errors, nothing acknowledged lost, figures reported.

``make soak``: 100 partitions, 20 producers and 20 consumers for 10 minutes (the issue's
figures, in docs/RELIABILITY.md). ``make test``: 20 partitions, 4 and 4, 20 seconds. Half
of the consumers start at offset 0 (so they read what has already moved to the remote
tier), half at the end (tailing). A sampler records the broker's RSS every second.
Throughput, produce latency percentiles (librdkafka's, from ``produce()`` to the
acknowledgement), the broker's CPU, what the producers sent (requests, records a request)
and the RSS range are printed; only correctness is asserted (acknowledged records read
back, no error a client cannot retry, the broker alive).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.waiting import wait_until

from .soak import SOAK

PARTITIONS, PRODUCERS, CONSUMERS, SECONDS = (100, 20, 20, 600) if SOAK else (20, 4, 4, 20)
# A shortened soak for profiling: TIERLOG_SOAK=1 TIERLOG_LOAD_SECONDS=180.
SECONDS = int(os.environ.get("TIERLOG_LOAD_SECONDS", SECONDS))
# Records/s offered by all producers together. TIERLOG_LOAD_RATE=0 leaves the producers
# unthrottled, to measure what the broker acknowledges at most (its capacity here).
RATE = int(os.environ.get("TIERLOG_LOAD_RATE", "10000"))
# Produce requests a producer may have in flight on its connection: librdkafka's default
# (1,000,000) unless TIERLOG_LOAD_MAX_IN_FLIGHT says otherwise (5 is the Java producer's
# default), to see how the request mix changes when the broker falls behind.
MAX_IN_FLIGHT = os.environ.get("TIERLOG_LOAD_MAX_IN_FLIGHT")
TOPIC = "load"
VALUE = b"v" * 200


def settings(tmp: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.root": str(tmp / "bucket"),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(user, system) CPU seconds of a process (all its threads) or of one of its threads."""
    stat = Path(f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat").read_text()
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def run_queue_seconds(pid: int) -> float:
    """Seconds a thread has spent runnable but waiting for a CPU (its schedstat): how much
    the other processes on the machine held the broker's event loop back."""
    path = Path(f"/proc/{pid}/task/{pid}/schedstat")
    return int(path.read_text().split()[1]) / 1e9 if path.exists() else 0.0


class Producers:
    """PRODUCERS threads sending keyed records round-robin over the partitions."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: dict[tuple[int, int], bytes] = {}
        # (when acknowledged, produce latency in ms) of every acknowledged record
        self.latencies_ms: list[tuple[float, float]] = []
        self.errors: list[str] = []
        # From librdkafka's statistics: producer -> (Produce requests, records) sent so far,
        # and (batches, mean records per batch) of every 5 s window of every producer.
        self.sent: dict[int, tuple[int, int]] = {}
        self.batches: list[tuple[int, float]] = []

    def run(self, n: int) -> None:
        from confluent_kafka import Producer

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            # librdkafka's own counters (requests sent, records per batch), read at the end:
            # what the broker was sent, the request mix its per-request costs multiply.
            "statistics.interval.ms": 5000,
            "stats_cb": lambda stats, n=n: self._statistics(n, stats),
        }
        if MAX_IN_FLIGHT:
            config["max.in.flight.requests.per.connection"] = int(MAX_IN_FLIGHT)
        if RATE <= 0:
            # Unthrottled, batches grow: keep them below segment.bytes (the soak's batches
            # are of a few records and never near it).
            config["batch.size"] = 128 * 1024
        producer = Producer(config)
        lock, acked, latencies, errors = self.lock, self.acked, self.latencies_ms, self.errors

        def report(err: Any, msg: Any) -> None:
            # The latency a user of the client sees: from produce() to the acknowledgement,
            # the client's queue included, as librdkafka timed it (msg.latency()). Timing
            # it here instead would add how long this thread took to call poll() again.
            with lock:
                if err is not None:
                    errors.append(str(err))
                else:
                    acked[(msg.partition(), msg.offset())] = msg.key()
                    latency = msg.latency()
                    if latency is not None:
                        latencies.append((time.monotonic(), latency * 1000))

        sent = 0
        per_producer = RATE / PRODUCERS
        began = time.monotonic()
        while not self.stop.is_set():
            try:
                producer.produce(
                    TOPIC,
                    key=b"p%02d-%09d" % (n, sent),
                    value=VALUE,
                    partition=sent % PARTITIONS,
                    on_delivery=report,
                )
                sent += 1
            except BufferError:
                producer.poll(0.05)
            if RATE > 0 and sent % 50 == 0:
                # A steady offered load (RATE records/s over all producers), not a
                # saturating one; while ahead of it, wait in poll(), which runs the
                # delivery reports as they arrive (and returns after serving some).
                due = began + sent / per_producer
                producer.poll(0)
                while (ahead := due - time.monotonic()) > 0:
                    producer.poll(ahead)
            elif RATE <= 0:
                producer.poll(0)
        if producer.flush(60):
            with self.lock:
                self.errors.append("records still queued at the end")

    def _statistics(self, n: int, raw: str) -> None:
        """A producer's statistics (every 5 s): its Produce requests and records sent so
        far, and the mean records per batch over the last window."""
        stats = json.loads(raw)
        requests = sum(b.get("req", {}).get("Produce", 0) for b in stats["brokers"].values())
        topic = stats.get("topics", {}).get(TOPIC)
        if topic is None:
            return
        records = sum(p["txmsgs"] for p in topic["partitions"].values())
        with self.lock:
            self.sent[n] = (requests, records)
            self.batches.append((topic["batchcnt"]["cnt"], topic["batchcnt"]["avg"]))

    def request_mix(self) -> str:
        """What the producers sent, from librdkafka's statistics: the request mix that the
        broker's per-request and per-batch costs multiply."""
        requests = sum(r for r, _ in self.sent.values())
        records = sum(m for _, m in self.sent.values())
        batches = sum(cnt for cnt, _ in self.batches)
        if not requests or not batches:
            return "no producer statistics"
        per_batch = sum(cnt * avg for cnt, avg in self.batches) / batches
        return (
            f"{requests} produce requests, {records / requests:.1f} records a request,"
            f" {per_batch:.1f} records a batch"
        )


class Consumers:
    """CONSUMERS threads, each assigned a share of the partitions."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.read = 0
        self.retried = 0
        self.errors: list[str] = []

    def run(self, n: int) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

        start = OFFSET_BEGINNING if n % 2 == 0 else OFFSET_END
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"load-{n}",
                "enable.auto.commit": False,
            }
        )
        mine = [
            TopicPartition(TOPIC, p, start) for p in range(n % CONSUMERS, PARTITIONS, CONSUMERS)
        ]
        consumer.assign(mine)
        try:
            while not self.stop.is_set():
                read = 0
                for msg in consumer.consume(500, 0.2):
                    if msg.error():
                        with self.lock:
                            if msg.error().code() == -191:  # _PARTITION_EOF
                                pass
                            elif msg.error().retriable():
                                self.retried += 1  # e.g. a remote read past its wait
                            else:
                                self.errors.append(str(msg.error()))
                        continue
                    read += 1
                with self.lock:
                    self.read += read  # counted once a batch, not a lock per record
        finally:
            consumer.close()


def verify(bootstrap: str, acked: dict[tuple[int, int], bytes]) -> int:
    """Read every partition from offset 0 (through the remote tier) and compare keys."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False}
    )
    ends: dict[int, int] = defaultdict(int)
    for p, o in acked:
        ends[p] = max(ends[p], o + 1)
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in ends])
    got: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + 600
    remaining = set(ends)
    while remaining and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error():
                assert msg.error().code() == -191 or msg.error().retriable(), msg.error()
                continue
            got[(msg.partition(), msg.offset())] = msg.key()
            if msg.offset() + 1 >= ends[msg.partition()]:
                remaining.discard(msg.partition())
    consumer.close()
    lost = [tp for tp, key in acked.items() if got.get(tp) != key]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
    return len(got)


def p99_over_time(producers: Producers, began: float, elapsed: float) -> str:
    """The produce p99 of each tenth of the load period: whether a backlog built up and
    stayed, or was drained."""
    windows: list[list[float]] = [[] for _ in range(10)]
    for at, ms in producers.latencies_ms:
        windows[min(9, max(0, int((at - began) / elapsed * 10)))].append(ms)
    return ", ".join(
        f"{i * elapsed / 10:.0f}: {sorted(w)[int(len(w) * 0.99)]:.0f}"
        for i, w in enumerate(windows)
        if w
    )


def test_many_partitions_producers_and_consumers(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = start_broker(tmp_path / "b", settings(tmp_path))
    brokers.append(broker)
    config = {
        "remote.storage.enable": "true",
        "segment.bytes": str(256 * 1024),
        "local.retention.bytes": str(256 * 1024),
    }
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=config)])[TOPIC].result(60)

    producers, consumers = Producers(broker.bootstrap), Consumers(broker.bootstrap)
    rss: list[float] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(1.0):
            rss.append(rss_mb(broker.pid))

    threads = [threading.Thread(target=producers.run, args=(i,)) for i in range(PRODUCERS)]
    threads += [threading.Thread(target=consumers.run, args=(i,)) for i in range(CONSUMERS)]
    sampler = threading.Thread(target=sample)
    began = time.monotonic()
    # The broker's CPU over the load period: all its threads, and its event loop's thread
    # (the main one) alone, which serves every request.
    cpu_before, loop_before = cpu_seconds(broker.pid), cpu_seconds(broker.pid, broker.pid)
    waited_before, clients_before = run_queue_seconds(broker.pid), os.times()
    load_before = os.getloadavg()[0]
    for t in [*threads, sampler]:
        t.start()
    try:
        deadline = began + SECONDS
        wait_until(
            lambda: time.monotonic() >= deadline or broker.proc.poll() is not None,
            SECONDS + 30,
            1.0,
            what="the load period",
        )
    finally:
        producers.stop.set()
        consumers.stop.set()
        for t in threads:
            t.join(120)
        sampling.set()
        sampler.join(10)
    elapsed = time.monotonic() - began
    assert broker.proc.poll() is None, broker.log_tail()
    cpu_after, loop_after = cpu_seconds(broker.pid), cpu_seconds(broker.pid, broker.pid)
    waited, clients_after = run_queue_seconds(broker.pid) - waited_before, os.times()
    load_after = os.getloadavg()[0]
    assert not producers.errors, producers.errors[:5]
    assert not consumers.errors, consumers.errors[:5]
    verified = verify(broker.bootstrap, producers.acked)
    lat = sorted(ms for _, ms in producers.latencies_ms)
    count = len(producers.acked)
    print(
        f"\n{PARTITIONS} partitions, {PRODUCERS} producers, {CONSUMERS} consumers, {elapsed:.0f}s:"
        f" {count / elapsed:.0f} records/s acknowledged ({count * len(VALUE) / elapsed / 1e6:.1f}"
        f" MB/s of values), consumers read {consumers.read}; produce latency p50 "
        f"{statistics.median(lat):.1f} ms, p99 {lat[int(len(lat) * 0.99)]:.1f} ms; broker RSS "
        f"{min(rss):.0f}-{max(rss):.0f} MB; {verified} records verified from offset 0; "
        f"{consumers.retried} retriable consumer errors"
    )
    cpu = sum(cpu_after) - sum(cpu_before)
    clients = sum(clients_after[:2]) - sum(clients_before[:2])
    loop_user, loop_sys = (a - b for a, b in zip(loop_after, loop_before, strict=True))
    print(
        f"broker CPU over the load period: {cpu:.0f} s ({cpu / elapsed:.0%} of a core,"
        f" {cpu / max(count, 1) * 1e6:.0f} us per acknowledged record); its event loop's"
        f" thread {loop_user + loop_sys:.0f} s ({(loop_user + loop_sys) / elapsed:.0%} of a"
        f" core: user {loop_user:.0f} s, system {loop_sys:.0f} s), runnable but waiting for"
        f" a CPU {waited:.0f} s ({waited / elapsed:.0%}); the clients' process"
        f" {clients:.0f} s; offered {RATE or 'unthrottled'} records/s"
        f" (max.in.flight {MAX_IN_FLIGHT or 'default'}); load average"
        f" {load_before:.1f} -> {load_after:.1f}"
    )
    print(f"producers sent {producers.request_mix()}")
    print("produce p99 by when acknowledged (s: ms): " + p99_over_time(producers, began, elapsed))
    if SECONDS >= 600 and len(rss) >= 300:  # the target's window: the last five minutes
        last = rss[-300:]
        print(
            f"broker RSS over the last 5 minutes: {min(last):.0f}-{max(last):.0f} MB"
            f" (+{(max(last) / min(last) - 1):.0%})"
        )
    step = max(1, len(rss) // 10)  # the RSS samples are one a second: print ten of them
    print(
        "broker RSS over time (s: MB): "
        + ", ".join(f"{i}: {rss[i]:.0f}" for i in range(0, len(rss), step))
    )
