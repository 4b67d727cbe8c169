"""The S3 endpoint misbehaves: a fault-injecting HTTP proxy of our own sits between the broker
and S3 (moto) and answers a share of the requests with 500 InternalError, 503 SlowDown,
connection resets, 2 s stalls or bodies cut in half.

- Tiering retries with backoff and completes; nothing acknowledged is lost.
- Reads from the remote tier go through the same faults: a read that fails answers its
  partition KAFKA_STORAGE_ERROR, one that misses remote.fetch.max.wait.ms answers it empty
  (as Kafka does); the consumer fetches again and gets every record identical in the end.
- A batch corrupted in the bucket is never served: the broker refuses it (its CRC32C) and
  the consumer never gets different bytes.
- Produce latency with faults vs without, in the same run, is printed for
  docs/RELIABILITY.md (no timing is asserted).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.s3_harness import (
    Bucket,
    Chaos,
    FaultProxy,
    broker_log_lines,
    local_segment_bases,
    tiering_settings,
)
from tests.support.waiting import wait_until

from .soak import SOAK

TOPIC = "faulty-s3"
RECORDS = 30_000 if SOAK else 8_000
FAULTS = Chaos(error500=0.05, slowdown=0.05, reset=0.04, stall=0.03, truncate=0.03)


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {
        "remote.storage.enable": "true",
        "segment.bytes": str(64 * 1024),
        "local.retention.bytes": str(128 * 1024),
    }
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)]).values():
        future.result(30)


def value(i: int) -> bytes:
    return (b"%08d|" % i) * 25


def produce_timed(bootstrap: str, start: int, count: int) -> list[float]:
    """acks=1, one record at a time at a steady pace; latencies in ms."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "batch.size": 16384}
    )
    latencies: list[float] = []
    errors: list[Any] = []
    for i in range(start, start + count):
        sent = time.perf_counter()

        def report(err: Any, msg: Any, t0: float = sent) -> None:
            if err is not None:
                errors.append(err)
            latencies.append((time.perf_counter() - t0) * 1000)

        producer.produce(TOPIC, value=value(i), partition=0, on_delivery=report)
        producer.poll(0)
        if i % 50 == 0:
            producer.flush(30)  # a steady pace, not one burst
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return latencies


def consume_tolerant(bootstrap: str, start: int, end: int, timeout_s: float) -> tuple[dict, int]:
    """Records from ``start`` to ``end``, retrying through per-partition errors; returns
    (offset -> value, errors seen)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tolerant",
            "enable.auto.commit": False,
        }
    )
    got: dict[int, bytes] = {}
    errors = 0
    try:
        consumer.assign([TopicPartition(TOPIC, 0, start)])
        deadline = time.monotonic() + timeout_s
        while len(got) < end - start and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    errors += 1
                continue
            got[msg.offset()] = msg.value()
    finally:
        consumer.close()
    return got, errors


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def test_s3_faults_slow_tiering_and_reads_but_lose_nothing(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess]
) -> None:
    proxy = FaultProxy(s3_endpoint.url)
    try:
        settings = tiering_settings(proxy.url, s3_endpoint, bucket.name)
        settings["rsm.config.storage.s3.api.call.attempt.timeout"] = "1500"
        broker = start_broker(tmp_path / "b", settings)
        brokers.append(broker)
        create_topic(broker.bootstrap)

        clean = produce_timed(broker.bootstrap, 0, RECORDS // 2)
        proxy.chaos(FAULTS)
        faulty = produce_timed(broker.bootstrap, RECORDS // 2, RECORDS - RECORDS // 2)
        wait_until(
            lambda: (
                len(local_segment_bases(broker, TOPIC)) <= 3
                and bucket.log_bytes(TOPIC) > 0.8 * RECORDS * len(value(0))
            ),
            180,
            0.5,
            what="tiering through the faults",
        )
        got, read_errors = consume_tolerant(broker.bootstrap, 0, RECORDS, 240)
        assert got == {i: value(i) for i in range(RECORDS)}
        injected = dict(FAULTS.injected)
        assert sum(injected.values()) > 0

        # A flipped byte inside a batch of a remote segment: errors, never other bytes.
        proxy.chaos(None)
        victim = sorted(
            (o for o in bucket.objects(TOPIC) if o.key.endswith(".log")), key=lambda o: o.key
        )[1]
        body = bytearray(
            bucket.client.get_object(Bucket=bucket.name, Key=victim.key)["Body"].read()
        )
        body[100] ^= 0xFF
        bucket.client.put_object(Bucket=bucket.name, Key=victim.key, Body=bytes(body))
        first = int(victim.key.rsplit("/", 1)[-1].split("-")[0])
        seen, _ = consume_tolerant(broker.bootstrap, first, first + 1, 10)
        assert first not in seen
        assert all(v == value(o) for o, v in seen.items())
        # librdkafka retries KAFKA_STORAGE_ERROR quietly; the broker says why it refused.
        assert broker_log_lines(broker, "fails its CRC32C check")
        print(
            f"\n{RECORDS} records; faults injected {injected}; consumer errors retried "
            f"{read_errors}; produce p99 {p99(clean):.1f} ms clean, {p99(faulty):.1f} ms "
            f"with faults ({p99(faulty) / p99(clean):.2f}x); p50 {statistics.median(clean):.1f}"
            f" / {statistics.median(faulty):.1f} ms"
        )
    finally:
        proxy.close()
