"""Crash suite for compaction: SIGKILL a broker while its cleaner rewrites a busy compacted
topic (and __consumer_offsets takes commits); after each restart the latest acknowledged
value of every key is still there, offsets stay unique and ordered, the segment files pass
dump-log's verification, and no .cleaned/.swap file is left behind.

The cleaner runs every 50 ms over 16 KiB segments, so kills land before, during and after
swaps. ``make test`` kills 4 times; ``make soak`` (TIERLOG_SOAK=1) 25 times.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.waiting import wait_until

from .soak import SOAK

KILLS = 25 if SOAK else 4
KEYS = 64
RATE = 3000  # records/s offered
TOPIC = "compacted-crash"


@dataclass
class KeyedLoad:
    """Writes ``seq`` values to ``KEYS`` keys round-robin; remembers the highest acknowledged
    sequence number of every key."""

    bootstrap: str
    acked: dict[bytes, int] = field(default_factory=dict)
    acks: int = 0
    fatal: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return self.acks

    def run(self) -> None:
        from confluent_kafka import Producer

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal.append(str(err))

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "enable.idempotence": False,
                "message.timeout.ms": 20_000,
                "error_cb": on_error,
            }
        )

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                return
            seq = int(msg.value())
            with self.lock:
                self.acks += 1
                if seq > self.acked.get(msg.key(), -1):
                    self.acked[msg.key()] = seq

        seq = 0
        while not self.stop.is_set() and not self.fatal:
            key = b"key-%03d" % (seq % KEYS)
            try:
                producer.produce(TOPIC, key=key, value=b"%d" % seq, on_delivery=report)
                seq += 1
            except BufferError:
                producer.poll(0.05)
            # Paced to about RATE records/s: the point is kills during cleanings, not volume
            # (an unpaced producer fills thousands of tiny segments faster than one cleans).
            producer.poll(0 if seq % 50 else 50 / RATE)
        producer.flush(60)


def read_back(bootstrap: str) -> list[tuple[int, bytes, int]]:
    from tests.support.kafka_clients import consume_confluent

    return [
        (g.offset, g.key, int(g.value))
        for g in consume_confluent(bootstrap, TOPIC, timeout_s=120, retry_retriable=True)
    ]


def commit_offsets(bootstrap: str, value: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-committer"})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, value)], asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-committer"})
    try:
        (tp,) = consumer.committed([TopicPartition(TOPIC, 0)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def test_sigkill_while_the_cleaner_compacts_loses_no_latest_value(tmp_path: Path, brokers) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    rng = random.Random(534)
    broker: BrokerProcess = start_broker(
        tmp_path / "b",
        {"log.cleaner.backoff.ms": "50", "offsets.topic.num.partitions": "4"},
    )
    brokers.append(broker)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "16384",
        "min.cleanable.dirty.ratio": "0.01",
    }
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)])[TOPIC].result(30)
    load = KeyedLoad(broker.bootstrap)
    writer = threading.Thread(target=load.run, daemon=True)
    writer.start()
    commits = 0
    try:
        for kill in range(KILLS):
            mark = load.count()
            more = rng.randint(500, 3000)
            wait_until(
                lambda m=mark, n=more: load.count() >= m + n,
                timeout=120,
                what="acks under load",
            )
            commits = kill + 1
            commit_offsets(broker.bootstrap, commits)
            broker.kill()
            broker = restart(broker)
            brokers.append(broker)
        mark = load.count()
        wait_until(lambda: load.count() > mark + 200, timeout=120, what="acks at the end")
    finally:
        load.stop.set()
        writer.join(90)
    assert not load.fatal, load.fatal

    rows = read_back(broker.bootstrap)
    offsets = [offset for offset, _, _ in rows]
    assert offsets == sorted(set(offsets)), "offsets reordered or duplicated"
    latest: dict[bytes, int] = {}
    for _, key, seq in rows:
        latest[key] = seq
    with load.lock:
        acked = dict(load.acked)
    behind = {k: (latest.get(k), seq) for k, seq in acked.items() if latest.get(k, -1) < seq}
    assert not behind, f"keys whose latest acknowledged value is gone: {list(behind.items())[:5]}"
    assert len(rows) < load.count(), "nothing was compacted"
    assert committed(broker.bootstrap) == commits  # __consumer_offsets survived every kill

    assert broker.stop() == 0
    data = Path(broker.settings["log.dirs"])
    leftovers = [p.name for p in data.rglob("*") if p.suffix in (".cleaned", ".swap")]
    assert not leftovers, leftovers
    logs = sorted(str(p) for p in data.glob("*/*.log"))
    done = subprocess.run(
        [sys.executable, "-m", "tierlog", "dump-log", "--deep-iteration", *logs],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(
        f"\n{KILLS} SIGKILLs during compaction; {load.count()} acks over {KEYS} keys, "
        f"{len(rows)} records left after compaction, every latest value intact"
    )
