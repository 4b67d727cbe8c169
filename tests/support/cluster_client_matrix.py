"""The cluster tests' producers and readers for kafka-python and aiokafka, in the shapes of
``tests.support.cluster_clients`` (which drives confluent-kafka): a background idempotent
acks=all producer recording what was acknowledged and every error it reported, and a reader
of whole partitions up to their high watermarks."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.cluster import DEADLINE_S, Cluster
from tests.support.cluster_clients import Record

CLIENTS = ("kafka-python", "aiokafka")
# A client gives up on a record after this long (delivery.timeout.ms / request retries):
# longer than any election the tests cause, so that an error means a lost write.
DELIVERY_TIMEOUT_MS = int(DEADLINE_S * 1000)
IN_FLIGHT = 50  # records awaiting acknowledgement at a time (aiokafka)


@dataclass
class ClientBackgroundProducer:
    """An idempotent acks=all producer of ``client`` sending keyed records from a thread
    until ``stop``: ``acked`` (partition, offset, value) and ``errors`` as reported."""

    client: str
    cluster: Cluster
    topic: str
    acked: list[Record] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ClientBackgroundProducer:
        run = self._run_kafka_python if self.client == "kafka-python" else self._run_aiokafka
        self._thread = threading.Thread(target=self._guarded, args=(run,), daemon=True)
        self._thread.start()
        return self

    def _guarded(self, run: Any) -> None:
        try:
            run()
        except Exception as e:  # noqa: BLE001 - reported to the test, which asserts none
            self.errors.append(f"producer thread failed: {e!r}")

    def _run_kafka_python(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.cluster.bootstrap.split(","),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            request_timeout_ms=10_000,
            retry_backoff_ms=50,
        )
        sent = 0
        try:
            while not self._stop.is_set():
                value = f"kp-{sent}".encode()
                future = producer.send(self.topic, key=value, value=value)
                future.add_callback(
                    lambda md, v=value: self.acked.append((md.partition, md.offset, v))
                )
                future.add_errback(lambda e, v=value: self.errors.append(f"{v!r}: {e!r}"))
                sent += 1
                time.sleep(0.002)
            producer.flush(DEADLINE_S)
        finally:
            producer.close(DEADLINE_S)

    def _run_aiokafka(self) -> None:
        asyncio.run(self._aiokafka())

    async def _aiokafka(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=self.cluster.bootstrap.split(","),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=DELIVERY_TIMEOUT_MS,
            retry_backoff_ms=50,
        )
        await producer.start()
        pending: set[asyncio.Future[Any]] = set()

        def report(done: asyncio.Future[Any], value: bytes) -> None:
            pending.discard(done)
            if done.cancelled():
                self.errors.append(f"{value!r}: cancelled")
            elif done.exception() is not None:
                self.errors.append(f"{value!r}: {done.exception()!r}")
            else:
                md = done.result()
                self.acked.append((md.partition, md.offset, value))

        sent = 0
        try:
            while not self._stop.is_set():
                while len(pending) >= IN_FLIGHT:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                value = f"ak-{sent}".encode()
                future = await producer.send(self.topic, key=value, value=value)
                pending.add(future)
                future.add_done_callback(lambda f, v=value: report(f, v))
                sent += 1
                await asyncio.sleep(0.002)
            if pending:
                await asyncio.wait(pending, timeout=DEADLINE_S)
        finally:
            await producer.stop()

    def wait_acked(self, count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while len(self.acked) < count:
            assert not self.errors, f"the producer saw errors: {self.errors[:5]}"
            assert time.monotonic() < deadline, f"only {len(self.acked)} records acknowledged"
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(DEADLINE_S + 10)
        assert not self._thread.is_alive(), "the producer did not finish"


def consume_all_with(client: str, cluster: Cluster, topic: str, partitions: int) -> list[Record]:
    """Every record of the topic's partitions up to their high watermarks, read by
    ``client`` (assigned partitions, from offset 0)."""
    if client == "kafka-python":
        return _consume_kafka_python(cluster, topic, partitions)
    return asyncio.run(_consume_aiokafka(cluster, topic, partitions))


def _consume_kafka_python(cluster: Cluster, topic: str, partitions: int) -> list[Record]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap.split(","),
        enable_auto_commit=False,
        group_id=None,
    )
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: end for tp, end in consumer.end_offsets(tps).items()}
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[Record] = []
        deadline = time.monotonic() + DEADLINE_S
        while any(consumer.position(tp) < ends[tp.partition] for tp in tps):
            assert time.monotonic() < deadline, f"read {len(got)} records; ends {ends}"
            for tp, messages in consumer.poll(timeout_ms=500).items():
                got += [(tp.partition, m.offset, m.value) for m in messages]
        return got
    finally:
        consumer.close()


async def _consume_aiokafka(cluster: Cluster, topic: str, partitions: int) -> list[Record]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.bootstrap.split(","),
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    try:
        tps = [ATopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list[Record] = []
        deadline = time.monotonic() + DEADLINE_S
        while [tp for tp in tps if await consumer.position(tp) < ends[tp.partition]]:
            assert time.monotonic() < deadline, f"read {len(got)} records; ends {ends}"
            batches = await consumer.getmany(timeout_ms=500)
            for tp, messages in batches.items():
                got += [(tp.partition, m.offset, m.value) for m in messages]
        return got
    finally:
        await consumer.stop()
