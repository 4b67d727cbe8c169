"""What the cluster tests do with real clients (confluent-kafka): create topics, produce
acknowledged records, read partitions back, and compare the replicas' log files."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import DEADLINE_S, Cluster

# (partition, offset, value) of an acknowledged or consumed record.
Record = tuple[int, int, bytes]


def create_topic(
    cluster: Cluster,
    topic: str,
    partitions: int,
    replication: int = 3,
    configs: dict[str, str] | None = None,
) -> None:
    """Create a topic with AdminClient and wait until ZooKeeper shows every partition led
    with a full ISR."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic, partitions, replication, config=configs or {})
    for future in admin.create_topics([new], operation_timeout=DEADLINE_S).values():
        future.result(DEADLINE_S)
    cluster.wait_topic(topic, partitions, replication)


def idempotent_producer(cluster: Cluster, **extra: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": int(DEADLINE_S * 1000),
            **extra,
        }
    )


def produce(cluster: Cluster, topic: str, values: Iterable[bytes], **extra: object) -> list[Record]:
    """Produce ``values`` (keyed by value, so they spread over the partitions) and return
    the acknowledged ones; fails on any delivery error."""
    producer = idempotent_producer(cluster, **extra)
    acked: list[Record] = []
    errors: list[KafkaError] = []

    def report(error: KafkaError | None, message: object) -> None:
        if error is not None:
            errors.append(error)
        else:
            acked.append((message.partition(), message.offset(), message.value()))  # type: ignore[attr-defined]

    for value in values:
        producer.produce(topic, key=value, value=value, on_delivery=report)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0, "records left unacknowledged"
    assert not errors, f"delivery errors: {errors[:5]}"
    return acked


@dataclass
class BackgroundProducer:
    """An idempotent acks=all producer sending in a thread until ``stop``; what it saw."""

    cluster: Cluster
    topic: str
    acked: list[Record] = field(default_factory=list)
    errors: list[KafkaError] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> BackgroundProducer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = idempotent_producer(self.cluster)

        def report(error: KafkaError | None, message: object) -> None:
            if error is not None:
                self.errors.append(error)
            else:
                self.acked.append(
                    (message.partition(), message.offset(), message.value())  # type: ignore[attr-defined]
                )

        sent = 0
        while not self._stop.is_set():
            value = f"bg-{sent}".encode()
            producer.produce(self.topic, key=value, value=value, on_delivery=report)
            sent += 1
            producer.poll(0.002)
        producer.flush(DEADLINE_S)

    def wait_acked(self, count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} records acknowledged"
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(DEADLINE_S + 5)


def consume_all(cluster: Cluster, topic: str, partitions: int) -> list[Record]:
    """Every record of the topic's partitions up to their high watermarks, by assignment."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "cluster-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=DEADLINE_S)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        got: list[Record] = []
        done = {p for p, high in ends.items() if high == 0}
        deadline = time.monotonic() + DEADLINE_S
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"read {len(got)} records; ends {ends}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    if message.offset() >= ends[message.partition()]:
                        done.add(message.partition())
                    continue
                raise AssertionError(f"consumer error: {message.error()}")
            got.append((message.partition(), message.offset(), message.value()))
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
        return got
    finally:
        consumer.close()


def assert_read_exactly_once(acked: list[Record], got: list[Record]) -> None:
    """Every acknowledged record read back once at its acknowledged offset, and each
    partition's offsets contiguous from 0."""
    read = {(p, o): v for p, o, v in got}
    assert len(read) == len(got), "a record was read twice"
    missing = [(p, o, v) for p, o, v in acked if read.get((p, o)) != v]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    values = [v for _, _, v in got]
    assert len(set(values)) == len(values), "a value was written twice"
    for partition in {p for p, _, _ in got}:
        offsets = sorted(o for p, o, _ in got if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition} has gaps"


def replica_log(cluster: Cluster, broker_id: int, topic: str, partition: int) -> bytes:
    """The bytes of a replica's segment files, in offset order (b"" without the replica)."""
    directory = cluster.base_dir / f"broker-{broker_id}" / "data" / f"{topic}-{partition}"
    segments: list[Path] = sorted(directory.glob("*.log")) if directory.is_dir() else []
    return b"".join(s.read_bytes() for s in segments)


def wait_replicas_identical(
    cluster: Cluster, topic: str, partitions: int, brokers: list[int]
) -> None:
    """Every replica of each partition holds the same bytes (the followers caught up)."""
    for p in range(partitions):

        def same(p: int = p) -> bool:
            return len({replica_log(cluster, b, topic, p) for b in brokers}) == 1

        cluster.wait(same, f"identical replicas of {topic}-{p} on brokers {brokers}")
