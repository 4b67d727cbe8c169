"""Replication: the cost of RF=3 acks=all against RF=1 acks=1, and failover times.

One ZooKeeper and three tierlog brokers (child processes on this machine, the test harness's
settings: 4 s ZooKeeper sessions, 3 s replica lag). Two topics of 3 partitions on the same
brokers in the same run: ``rf1`` (one replica) and ``rf3`` (three, min.insync.replicas=2).
A confluent-kafka producer sends ``--messages`` records of 1 KiB to each, acks=1 to rf1 and
acks=all to rf3 (idempotent, linger.ms=5); throughput is records acknowledged per second
and the latency of a record is from ``produce()`` to its delivery report.

Failover: ``--kills`` times, the leader of rf3-0 is SIGKILLed while an idempotent acks=all
producer sends it a record every 5 ms; the time is the longest the producer then goes
without an acknowledgement (from the last one the old leader gave to the first from the
new one). The broker is restarted and the ISR waited for before the next kill. The same
for controlled shutdown (SIGTERM).

Targets (issue 15): throughput ratio rf3/rf1 >= 0.5, p99 ratio <= 3; failover median and max
<= zookeeper.session.timeout.ms + 2 s after SIGKILL, <= 1 s after SIGTERM. The table prints
PASS or MISS; the benchmark never fails. About 3 minutes with the defaults.

    python -m bench.replication [--messages 50000] [--kills 10] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import itertools
import signal
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench._common import DEFAULT_DIR, KiB, describe_machine, scratch_dir
from tests.support.cluster import Cluster, start_cluster
from tests.support.zookeeper_server import start_zookeeper

PAYLOAD = b"r" * KiB
SESSION_MS = 4000  # the harness's zookeeper.session.timeout.ms


@dataclass(frozen=True, slots=True)
class Load:
    name: str
    records_per_s: float
    p50_ms: float
    p99_ms: float


def produce_load(cluster: Cluster, topic: str, acks: str, count: int) -> Load:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 5,
        }
    )
    latencies: list[float] = []

    def report(error, _message, sent: float) -> None:
        if error is None:
            latencies.append(time.perf_counter() - sent)

    start = time.perf_counter()
    for _ in range(count):
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(topic, PAYLOAD, on_delivery=lambda e, m, s=sent: report(e, m, s))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100)
    return Load(f"{topic} acks={acks}", len(latencies) / elapsed, cuts[49] * 1000, cuts[98] * 1000)


def longest_gap(cluster: Cluster, topic: str, stop) -> float:
    """The longest time without an acknowledgement seen by a steady acks=all producer of
    rf3-0 (a record every 5 ms) across ``stop()`` (a SIGKILL or SIGTERM of its leader): from
    the last record acknowledged before the leader went to the first acknowledged by the
    next one."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100,
        }
    )
    acked: list[float] = []
    done = threading.Event()

    def send() -> None:
        while not done.is_set():
            producer.produce(
                topic,
                PAYLOAD,
                partition=0,
                on_delivery=lambda e, m: e or acked.append(time.perf_counter()),
            )
            producer.poll(0.005)
        producer.flush(60)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    deadline = time.perf_counter() + 30
    while len(acked) < 100 and time.perf_counter() < deadline:
        time.sleep(0.01)
    stopped = time.perf_counter()
    stop()
    # Enough acknowledgements after the stop to be sure the new leader took over.
    while time.perf_counter() < deadline + 60:
        if sum(1 for t in acked if t > stopped) >= 200:
            break
        time.sleep(0.01)
    done.set()
    sender.join(90)
    times = sorted(t for t in acked if t > stopped - 1.0)
    return max((b - a for a, b in itertools.pairwise(times)), default=float("inf"))


def failovers(cluster: Cluster, kills: int, graceful: bool) -> list[float]:
    times = []
    for _ in range(kills):
        leader = cluster.wait_leader("rf3", 0)

        def stop(leader: int = leader) -> None:
            process = cluster.brokers[leader]
            if graceful:
                process.proc.send_signal(signal.SIGTERM)
            else:
                process.kill()

        times.append(longest_gap(cluster, "rf3", stop))
        cluster.brokers[leader].proc.wait(60)
        cluster.restart(leader)
        cluster.wait_isr("rf3", 0, 3, timeout=60)
    return times


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def run(base: Path, messages: int, kills: int) -> None:
    from tests.support.cluster_clients import create_topic

    base = scratch_dir(base, "replication", messages * KiB * 8)
    zookeeper = start_zookeeper(base / "zookeeper")
    cluster = start_cluster(base / "cluster", f"{zookeeper.connect_string}/bench")
    try:
        create_topic(cluster, "rf1", 3, replication=1)
        create_topic(cluster, "rf3", 3, configs={"min.insync.replicas": "2"})
        one = produce_load(cluster, "rf1", "1", messages)
        three = produce_load(cluster, "rf3", "all", messages)
        print(f"{'load':<16} {'records/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        for load in (one, three):
            print(
                f"{load.name:<16} {load.records_per_s:>10.0f} {load.p50_ms:>8.1f} "
                f"{load.p99_ms:>8.1f}"
            )
        ratio = three.records_per_s / one.records_per_s
        p99 = three.p99_ms / one.p99_ms
        print(f"throughput rf3/rf1 {ratio:.2f} (target >= 0.5) {verdict(ratio >= 0.5)}")
        print(f"p99 rf3/rf1 {p99:.2f} (target <= 3) {verdict(p99 <= 3)}")
        for graceful, target in ((False, SESSION_MS / 1000 + 2), (True, 1.0)):
            times = failovers(cluster, kills, graceful)
            what = "SIGTERM (controlled)" if graceful else "SIGKILL"
            median, worst = statistics.median(times), max(times)
            print(
                f"failover after {what}: median {median:.2f} s, max {worst:.2f} s over "
                f"{len(times)} (target <= {target:g} s) {verdict(worst <= target)}"
            )
    finally:
        cluster.close()
        zookeeper.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000, help="1 KiB records per topic")
    parser.add_argument("--kills", type=int, default=10, help="leader stops of each kind")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="scratch directory")
    args = parser.parse_args(argv)
    print(describe_machine(args.dir))
    run(args.dir, args.messages, args.kills)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
