"""Replication: the cost of RF=3 acks=all against RF=1 acks=1, and failover times.

One ZooKeeper and three tierlog brokers (child processes on this machine, the test harness's
settings: 4 s ZooKeeper sessions, 3 s replica lag). Two topics of 3 partitions on the same
brokers in the same run: ``rf1`` (one replica) and ``rf3`` (three, min.insync.replicas=2).

Throughput: a confluent-kafka producer sends ``--messages`` records of 1 KiB to each as fast
as it can, acks=1 to rf1 and acks=all to rf3 (idempotent, linger.ms=5); records acknowledged
per second, and the latency of a record from ``produce()`` to its delivery report (under this
unbounded load mostly time queued in the client). ``--rounds`` rounds, alternating which
topic goes first; the medians are reported (the machine may be shared).

Latency at a fixed rate: the same producers send ``--rate`` records/s (paced, below what
either topic sustains) for ``--seconds``; p50/p99 from ``produce()`` to the delivery report,
the cost of the acks=all round trip itself rather than of a queue. Every load starts with a
producer that has its metadata, connections and producer id (a record to each partition,
flushed, not timed).

Each load also reports the CPU time (user + system) the three brokers and the producer's
process spent per record (``/proc/<pid>/stat``, ``getrusage``): on a machine where brokers and
client share the cores, the throughput ratio cannot exceed the inverse ratio of the CPU
spent per record.

Failover: ``--kills`` times, the leader of rf3-0 is SIGKILLed while an idempotent acks=all
producer sends it a record every 5 ms; the time is the longest the producer then goes
without an acknowledgement (from the last one the old leader gave to the first from the
new one). The broker is restarted and the ISR waited for before the next kill. The same
for controlled shutdown (SIGTERM). ``--kills 0`` skips them.

Targets (issue 15): throughput ratio rf3/rf1 >= 0.5, p99 ratio <= 3; failover median and max
<= zookeeper.session.timeout.ms + 2 s after SIGKILL, <= 1 s after SIGTERM. The table prints
PASS or MISS; the benchmark never fails. About 4 minutes with the defaults.

    python -m bench.replication [--messages 50000] [--rounds 3] [--rate 2000] [--seconds 10]
        [--kills 10] [--dir bench-data] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
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
    broker_cpu_us: float = 0.0  # CPU (user + system) of the three brokers per record
    client_cpu_us: float = 0.0  # CPU of this process (the producer) per record


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux ``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def brokers_cpu(cluster: Cluster) -> float:
    return sum(cpu_seconds(p.pid) for p in cluster.brokers.values() if p.proc.poll() is None)


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def produce_load(
    cluster: Cluster, topic: str, acks: str, count: int, rate: float | None = None
) -> Load:
    """``count`` records to ``topic``, as fast as the producer takes them, or paced at
    ``rate`` records/s."""
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

    # Not timed: metadata, connections and (idempotent) the producer id, which would
    # otherwise be most of a paced load's p99.
    for partition in range(3):
        producer.produce(topic, PAYLOAD, partition=partition)
    producer.flush(60)
    broker_cpu, client_cpu = brokers_cpu(cluster), own_cpu()
    start = time.perf_counter()
    for i in range(count):
        if rate is not None:
            due = start + i / rate
            while (wait := due - time.perf_counter()) > 0:
                producer.poll(min(wait, 0.01))
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
    broker_cpu, client_cpu = brokers_cpu(cluster) - broker_cpu, own_cpu() - client_cpu
    cuts = statistics.quantiles(latencies, n=100)
    return Load(
        f"{topic} acks={acks}",
        len(latencies) / elapsed,
        cuts[49] * 1000,
        cuts[98] * 1000,
        broker_cpu / count * 1e6,
        client_cpu / count * 1e6,
    )


def median_load(loads: list[Load]) -> Load:
    return Load(
        loads[0].name,
        statistics.median(x.records_per_s for x in loads),
        statistics.median(x.p50_ms for x in loads),
        statistics.median(x.p99_ms for x in loads),
        statistics.median(x.broker_cpu_us for x in loads),
        statistics.median(x.client_cpu_us for x in loads),
    )


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


def print_loads(title: str, loads: list[Load]) -> None:
    print(title)
    print(
        f"  {'load':<16} {'records/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'broker CPU us/rec':>18} {'client CPU us/rec':>18}"
    )
    for load in loads:
        print(
            f"  {load.name:<16} {load.records_per_s:>10.0f} {load.p50_ms:>8.1f} "
            f"{load.p99_ms:>8.1f} {load.broker_cpu_us:>18.1f} {load.client_cpu_us:>18.1f}"
        )


def run(
    base: Path,
    messages: int,
    rounds: int,
    rate: float,
    seconds: float,
    kills: int,
    settings: dict[str, str],
) -> None:
    from tests.support.cluster_clients import create_topic

    base = scratch_dir(base, "replication", messages * KiB * 8 * rounds)
    zookeeper = start_zookeeper(base / "zookeeper")
    cluster = start_cluster(
        base / "cluster", f"{zookeeper.connect_string}/bench", settings=settings
    )
    try:
        create_topic(cluster, "rf1", 3, replication=1)
        create_topic(cluster, "rf3", 3, configs={"min.insync.replicas": "2"})
        ones: list[Load] = []
        threes: list[Load] = []
        ratios: list[float] = []
        p99s: list[float] = []
        for i in range(rounds):
            order = [("rf1", "1"), ("rf3", "all")]
            if i % 2:
                order.reverse()
            loads = {topic: produce_load(cluster, topic, acks, messages) for topic, acks in order}
            one, three = loads["rf1"], loads["rf3"]
            ones.append(one)
            threes.append(three)
            ratios.append(three.records_per_s / one.records_per_s)
            p99s.append(three.p99_ms / one.p99_ms)
            print_loads(f"round {i + 1} (as fast as possible)", [one, three])
        print_loads(
            f"median of {rounds} rounds (as fast as possible)",
            [median_load(ones), median_load(threes)],
        )
        ratio, p99 = statistics.median(ratios), statistics.median(p99s)
        print(f"throughput rf3/rf1 {ratio:.2f} (target >= 0.5) {verdict(ratio >= 0.5)}")
        print(f"p99 rf3/rf1 at full load {p99:.2f} (target <= 3) {verdict(p99 <= 3)}")
        count = int(rate * seconds)
        paced = [
            produce_load(cluster, "rf1", "1", count, rate),
            produce_load(cluster, "rf3", "all", count, rate),
        ]
        print_loads(f"at {rate:g} records/s for {seconds:g} s", paced)
        p99 = paced[1].p99_ms / paced[0].p99_ms
        print(f"p99 rf3/rf1 at {rate:g} records/s {p99:.2f} (target <= 3) {verdict(p99 <= 3)}")
        for graceful, target in ((False, SESSION_MS / 1000 + 2), (True, 1.0)):
            if kills <= 0:
                break
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
    parser.add_argument("--messages", type=int, default=50_000, help="1 KiB records per load")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds (median)")
    parser.add_argument("--rate", type=float, default=2000, help="records/s of the paced load")
    parser.add_argument("--seconds", type=float, default=10, help="duration of the paced load")
    parser.add_argument("--kills", type=int, default=10, help="leader stops of each kind")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="scratch directory")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting over the harness's (repeatable)",
    )
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    print(describe_machine(args.dir))
    if settings:
        print("broker settings:", ", ".join(f"{k}={v}" for k, v in settings.items()))
    run(args.dir, args.messages, args.rounds, args.rate, args.seconds, args.kills, settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
