"""Long-poll fetches: parked at the log end, woken by the append that satisfies them.

A fetch at the log end with ``min_bytes`` 1 waits up to its ``max_wait`` (Kafka's
DelayedFetch); an append to its partition completes it at once. Nothing here measures time:

- on the wire: a Fetch at the log end with a 10-minute wait on one connection, and a
  Produce on another connection sent once the fetch is on the wire. Its answer must hold
  the record produced after it: a broker that answered at once would answer empty, and one
  that ignored appends would answer after 10 minutes (the test gives up after one). Nothing
  on the wire says when the fetch has parked (its connection answers nothing before it),
  but the broker has read it long before the second connection's Produce arrives; were
  it the other way round, the fetch would find the record at once and the test would pass
  without having tested the wake-up;
- on the wire, one connection: a Fetch parked as above, with a Metadata and a ListOffsets
  request pipelined behind it. Kafka handles one request of a connection at a time, so the
  two wait for the fetch: released by a Produce on another connection, the fetch is answered
  first, and the ListOffsets, processed after it, sees the record the fetch returned;
- with real clients (kafka-python, confluent-kafka) whose fetch wait is 2 minutes: every
  record produced while their fetch is parked is delivered within 30 s, which a broker that
  answered only at the wait's expiry could not do (the next fetch is sent as soon as the
  previous record arrives, so each one is parked about as long as the 0.1 s gap).

How fast the wake-up is and what a parked fetch costs the broker while idle are measured by
``bench/long_poll.py`` (figures in docs/BENCHMARKS.md).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i64

from core.records.batch import iter_batches
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records
from core.server.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess
from tests.support.kafka_clients import unique_group
from tests.support.kafka_wire import Connection, call, list_offsets_request, metadata_request
from tests.support.waiting import wait_until

TOPIC = "long-poll"
PARKED = datetime.timedelta(minutes=10)  # a fetch's wait: only an append answers it in time
LATEST = -1
CLIENT_FETCH_WAIT_MS = 120_000
DELIVERY_DEADLINE_S = 30.0  # a quarter of the clients' fetch wait
SAMPLES = 5
# Between two records the consumer's next fetch is parked at the log end: that is the
# situation under test, not a synchronisation (each record is awaited by its delivery).
GAP_S = 0.1


# -- on the wire --------------------------------------------------------------------------------
def fetch_request(offset: int, max_wait: datetime.timedelta) -> FetchRequest:
    partition = FetchPartition(
        partition=i32(0),
        current_leader_epoch=i32(-1),
        fetch_offset=i64(offset),
        last_fetched_epoch=i32(-1),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(1 << 20),
    )
    return FetchRequest(
        cluster_id=None,
        replica_id=BrokerId(-1),
        max_wait=max_wait,
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(FetchTopic(topic=TopicName(TOPIC), partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def produce_request(value: bytes) -> ProduceRequest:
    builder = RecordBatchBuilder()
    builder.append(value, key=b"k", timestamp=int(time.time() * 1000))
    data = PartitionProduceData(index=i32(0), records=Records(bytes(builder.build())))
    return ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(TopicProduceData(name=TopicName(TOPIC), partition_data=(data,)),),
    )


def values(records: bytes | None) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a fetch response's records."""
    return [
        (r.offset, r.value)
        for header in iter_batches(records or b"")
        for r in decode_records(header)
    ]


def create_topic(broker: BrokerProcess) -> int:
    """Creates the topic with one record in it; returns the log end offset."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    first = call(broker.bootstrap, ApiKey.PRODUCE, 9, produce_request(b"first"))
    assert first.responses[0].partition_responses[0].error_code.value == 0
    return 1


def produce_elsewhere(broker: BrokerProcess, value: bytes, offset: int) -> None:
    """Produce ``value`` on a connection of its own; it must land at ``offset``."""
    produced = call(broker.bootstrap, ApiKey.PRODUCE, 9, produce_request(value))
    answer = produced.responses[0].partition_responses[0]
    assert (answer.error_code.value, answer.base_offset) == (0, offset)


def test_a_parked_fetch_is_answered_by_an_append_on_another_connection(
    broker: BrokerProcess,
) -> None:
    end = create_topic(broker)  # the fetch below parks there
    with Connection(broker.bootstrap, timeout_s=60) as waiting:
        fetching = waiting.send(ApiKey.FETCH, 12, fetch_request(end, PARKED))
        produce_elsewhere(broker, b"second", end)
        fetched = waiting.receive(ApiKey.FETCH, 12, fetching)
    part = fetched.responses[0].partitions[0]
    assert part.error_code.value == 0
    assert values(part.records) == [(end, b"second")]
    assert part.high_watermark == end + 1


def test_requests_behind_a_parked_fetch_wait_for_it(broker: BrokerProcess) -> None:
    end = create_topic(broker)
    requests = [
        (ApiKey.FETCH, 12, fetch_request(end, PARKED)),
        (ApiKey.METADATA, 12, metadata_request([TOPIC], auto_create=False)),
        (ApiKey.LIST_OFFSETS, 11, list_offsets_request(TOPIC, 0, LATEST)),
    ]
    with Connection(broker.bootstrap, timeout_s=60) as waiting:
        sent = waiting.send_all(requests)
        produce_elsewhere(broker, b"second", end)
        # ``receive`` checks each answer's correlation id: they come in request order.
        fetched, described, listed = (
            waiting.receive(key, version, correlation_id)
            for (key, version, _), correlation_id in zip(requests, sent, strict=True)
        )
    assert values(fetched.responses[0].partitions[0].records) == [(end, b"second")]
    assert described.topics[0].error_code.value == 0
    # Processed after the fetch, so after the append that released it.
    answer = listed.topics[0].partitions[0]
    assert (answer.error_code.value, answer.offset) == (0, end + 1)


# -- with real clients ------------------------------------------------------------------------
class Tail:
    """A consumer thread reading partition 0 from offset 0, noting which keys arrived."""

    def __init__(self, poll: Callable[[], list[bytes]], close: Callable[[], None]) -> None:
        self._poll = poll
        self._close = close
        self.arrived: set[bytes] = set()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.arrived.update(self._poll())
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
        fetch_max_wait_ms=CLIENT_FETCH_WAIT_MS,
        request_timeout_ms=CLIENT_FETCH_WAIT_MS + 30_000,
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
            "fetch.wait.max.ms": CLIENT_FETCH_WAIT_MS,
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


def send(producer: Any, key: bytes) -> None:
    producer.produce(TOPIC, key=key, value=b"x" * 100, partition=0)
    assert producer.flush(30) == 0, "not acknowledged"


def delivered(tail: Tail, key: bytes) -> None:
    wait_until(
        lambda: key in tail.arrived or tail.errors,
        DELIVERY_DEADLINE_S,
        interval=0.005,
        what=f"{key!r} delivered while the consumer's fetch was parked",
    )
    assert not tail.errors, tail.errors


@pytest.mark.parametrize("client", list(TAILS))
def test_parked_client_fetches_are_woken_by_appends(broker: BrokerProcess, client: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": 1})
    send(producer, b"warm-up")  # creates the topic
    tail = TAILS[client](broker.bootstrap)
    try:
        delivered(tail, b"warm-up")
        for i in range(SAMPLES):
            time.sleep(GAP_S)
            key = f"sample-{i}".encode()
            send(producer, key)
            delivered(tail, key)
    finally:
        tail.stop()
    assert broker.proc.poll() is None, broker.log_tail()
