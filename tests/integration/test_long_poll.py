"""Long-poll fetches: woken by the append that satisfies them, and cheap while they wait.

A consumer with a 5 s fetch wait (``fetch.wait.max.ms`` / ``fetch_max_wait_ms``) parks its
fetch at the log end. Two properties of the broker's fetch purgatory follow:

- latency: a record produced while the fetch is parked reaches the consumer long before the
  5 s wait expires. A broker that ignored appends and answered at the wait's expiry would
  take ~5 s; the bound, 500 ms for the whole produce -> deliver path, is two orders of
  magnitude above what a 2-core machine measures (a few ms) so that it never flakes, and still
  an order of magnitude below the failure it catches. The measured p50 is printed.
- idle cost: while nothing is produced, a consumer holding a parked fetch costs the broker
  almost no CPU. A broker that answered empty fetches at once (or polled in a loop) would
  spin a core: ~5 s of CPU over the 5 s window. The bound, 0.5 s of user+system CPU, leaves
  room for the broker's own timers (checkpoints, the timing wheel, metadata refreshes) and a
  slow machine, and is ten times below a busy loop.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from broker_process import BrokerProcess, wait_until
from kafka_clients import unique_group

TOPIC = "long-poll"
FETCH_WAIT_MS = 5000
LATENCY_BOUND_S = 0.5
SAMPLES = 20
# Between two records the consumer's next fetch is parked at the log end: that is the
# scenario being measured, not a synchronisation (each sample waits for its delivery).
GAP_S = 0.1
IDLE_WINDOW_S = 5.0
IDLE_CPU_BOUND_S = 0.5


class Tail:
    """A consumer thread reading partition 0 from offset 0, noting when each key arrives."""

    def __init__(self, poll: Callable[[], list[bytes]], close: Callable[[], None]) -> None:
        self._poll = poll
        self._close = close
        self.arrived: dict[bytes, float] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for key in self._poll():
                    self.arrived[key] = time.monotonic()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)
        finally:
            self._close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def tail_kafka_python(bootstrap: str) -> Tail:
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=FETCH_WAIT_MS,
        request_timeout_ms=FETCH_WAIT_MS + 30_000,
    )
    consumer.assign([tp])
    consumer.seek(tp, 0)

    def poll() -> list[bytes]:
        return [m.key for msgs in consumer.poll(timeout_ms=200).values() for m in msgs]

    return Tail(poll, consumer.close)


def tail_confluent(bootstrap: str) -> Tail:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_group(),  # required by the client; nothing is committed
            "enable.auto.commit": False,
            "fetch.wait.max.ms": FETCH_WAIT_MS,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])

    def poll() -> list[bytes]:
        msg = consumer.poll(0.2)
        if msg is None:
            return []
        if msg.error():
            raise RuntimeError(str(msg.error()))
        return [msg.key()]

    return Tail(poll, consumer.close)


TAILS = {"kafka-python": tail_kafka_python, "confluent": tail_confluent}


def producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})


def send(p: Any, key: bytes) -> None:
    p.produce(TOPIC, key=key, value=b"x" * 100, partition=0)
    assert p.flush(30) == 0, "not acknowledged"


def warm_up(broker: BrokerProcess, client: str) -> tuple[Any, Tail]:
    """Create the topic, start the consumer and see one record through."""
    p = producer(broker.bootstrap)
    send(p, b"warm-up")
    tail = TAILS[client](broker.bootstrap)
    wait_until(lambda: b"warm-up" in tail.arrived or tail.errors, 30, what="warm-up record")
    assert not tail.errors, tail.errors
    return p, tail


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may contain spaces: split after its closing paren.
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("client", list(TAILS))
def test_parked_fetch_is_woken_by_append(broker: BrokerProcess, client: str):
    p, tail = warm_up(broker, client)
    latencies = []
    try:
        for i in range(SAMPLES):
            time.sleep(GAP_S)
            key = f"sample-{i}".encode()
            sent = time.monotonic()
            send(p, key)
            wait_until(
                lambda k=key: k in tail.arrived or tail.errors,
                FETCH_WAIT_MS / 1000 * 3,
                interval=0.005,
                what=f"{key!r} delivered",
            )
            assert not tail.errors, tail.errors
            latencies.append(tail.arrived[key] - sent)
    finally:
        tail.stop()
    p50 = statistics.median(latencies)
    print(
        f"\n{client}: produce->deliver p50 {p50 * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms over {SAMPLES} records"
    )
    assert max(latencies) < LATENCY_BOUND_S, [round(x * 1000) for x in latencies]


@pytest.mark.parametrize("client", list(TAILS))
def test_idle_long_poll_costs_little_cpu(broker: BrokerProcess, client: str):
    _, tail = warm_up(broker, client)
    try:
        before = cpu_seconds(broker.pid)
        time.sleep(IDLE_WINDOW_S)  # the measurement window itself
        used = cpu_seconds(broker.pid) - before
        assert not tail.errors, tail.errors
    finally:
        tail.stop()
    print(f"\n{client}: broker CPU {used:.3f} s over {IDLE_WINDOW_S} s idle")
    assert used < IDLE_CPU_BOUND_S, f"broker used {used:.2f} s CPU while idle"
    assert broker.proc.poll() is None, broker.log_tail()
