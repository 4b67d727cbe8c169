"""Transactions with real clients against a real broker process.

confluent-kafka (librdkafka) transactional producers commit and abort; read_committed
consumers see only committed records, in order, and read_uncommitted ones see all;
consume-transform-produce commits its input offsets with the output; a second producer
with the same transactional id fences the first; a broker SIGKILLed inside a transaction
recovers and read_committed consumers are not stuck. The same basic flow with kafka-python
and aiokafka. A hand-made transactional batch from an unknown producer is refused and does
not pin the last stable offset (KIP-890 verification; the defect of issue 17).
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import kafka
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i64

from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from core.server.node_client import BrokerEndpoint, ClientSettings, NodeClient
from core.server.security import ClientSecurity
from core.server.transaction_verification import verify_remotely
from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_wire import call, list_offset_answer


def schema_module(api_key: ApiKey, version: int) -> Any:
    return sys.modules[load_request_schema(api_key, version).__module__]


DEADLINE_S = 60


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = start_broker(
        tmp_path,
        {
            "transaction.state.log.num.partitions": "4",
            "offsets.topic.num.partitions": "4",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            "transaction.max.timeout.ms": "60000",
        },
    )
    yield b
    b.stop()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def txn_producer(bootstrap: str, txn_id: str, timeout_ms: int = 10_000) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": timeout_ms,
        }
    )
    producer.init_transactions(30)
    return producer


def consume_all(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    """Values of ``topic`` (partition 0) from the start, until ``expected`` are read and
    the consumer reached the end (read_committed: the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    at_end = False
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                at_end = len(values) >= expected
                if at_end:
                    break
                continue
            values.append(msg.value())
    finally:
        consumer.close()
    assert at_end, f"read {len(values)} of {expected} records before the deadline"
    return values


def test_commit_and_abort_read_committed(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "t")
    producer = txn_producer(broker.bootstrap, "tx-1")
    producer.begin_transaction()
    for i in range(5):
        producer.produce("t", b"c1-%d" % i, partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("t", b"a-%d" % i, partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("t", b"c2-0", partition=0)
    producer.commit_transaction(30)

    committed = [b"c1-0", b"c1-1", b"c1-2", b"c1-3", b"c1-4", b"c2-0"]
    assert consume_all(broker.bootstrap, "t", "read_committed", 6) == committed
    everything = consume_all(broker.bootstrap, "t", "read_uncommitted", 9)
    assert everything == [*committed[:5], b"a-0", b"a-1", b"a-2", b"c2-0"]


def test_second_producer_fences_the_first(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "f")
    first = txn_producer(broker.bootstrap, "tx-f")
    first.begin_transaction()
    first.produce("f", b"zombie", partition=0)
    first.flush(30)
    second = txn_producer(broker.bootstrap, "tx-f")  # aborts the first's transaction
    second.begin_transaction()
    second.produce("f", b"live", partition=0)
    second.commit_transaction(30)
    with pytest.raises(KafkaException):
        first.commit_transaction(30)
    assert consume_all(broker.bootstrap, "f", "read_committed", 1) == [b"live"]


def test_consume_transform_produce(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "in")
    create_topic(broker.bootstrap, "out")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        plain.produce("in", b"%d" % i, partition=0)
    plain.flush(30)
    group = "ctp"
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["in"])
    producer = txn_producer(broker.bootstrap, "tx-ctp")
    seen: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        seen.append(msg.value())
        producer.begin_transaction()
        producer.produce("out", msg.value() * 2, partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition("in", 0, msg.offset() + 1)], consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
    consumer.close()
    assert len(seen) == 10
    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    [committed] = checker.committed([TopicPartition("in", 0)], 30)
    checker.close()
    assert committed.offset == 10
    expected = [b"%d%d" % (i, i) for i in range(10)]
    assert consume_all(broker.bootstrap, "out", "read_committed", 10) == expected


def test_aborted_offsets_are_not_committed(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "in2")
    group = "ctp-abort"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    producer = txn_producer(broker.bootstrap, "tx-ctp-abort")
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition("in2", 0, 5)], consumer.consumer_group_metadata(), 30
    )
    producer.abort_transaction(30)
    [committed] = consumer.committed([TopicPartition("in2", 0)], 30)
    assert committed.offset < 0  # nothing committed
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition("in2", 0, 7)], consumer.consumer_group_metadata(), 30
    )
    producer.commit_transaction(30)
    [committed] = consumer.committed([TopicPartition("in2", 0)], 30)
    consumer.close()
    assert committed.offset == 7


def test_sigkill_inside_a_transaction(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "k")
    producer = txn_producer(broker.bootstrap, "tx-k", timeout_ms=3000)
    producer.begin_transaction()
    producer.produce("k", b"committed", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("k", b"open", partition=0)
    producer.flush(30)
    broker.kill()
    restarted = restart(broker)
    try:
        # The producer is gone for good; the coordinator aborts at the timeout.
        after = Producer({"bootstrap.servers": restarted.bootstrap})
        after.produce("k", b"later", partition=0)
        after.flush(30)
        values = consume_all(restarted.bootstrap, "k", "read_committed", 2)
        assert values == [b"committed", b"later"]
    finally:
        restarted.stop()


# -- the defect: a hand-made transactional batch ---------------------------------------------
def raw_produce(bootstrap: str, topic: str, records: bytes, txn_id: str | None) -> Any:
    s = schema_module(ApiKey.PRODUCE, 9)
    request = s.ProduceRequest(
        transactional_id=txn_id,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            s.TopicProduceData(
                name=topic,
                partition_data=(s.PartitionProduceData(index=i32(0), records=records),),
            ),
        ),
    )
    response = call(bootstrap, ApiKey.PRODUCE, 9, request)
    return response.responses[0].partition_responses[0]


def txn_batch(producer_id: int, epoch: int) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=0, is_transactional=True
    )
    builder.append(b"hang", timestamp=int(time.time() * 1000))
    return bytes(builder.build())


def last_stable_offset(bootstrap: str, topic: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of partition 0 from a READ_COMMITTED fetch."""
    s = schema_module(ApiKey.FETCH, 11)
    request = s.FetchRequest(
        replica_id=i32(-1),
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=i32(0),
        max_bytes=i32(1 << 20),
        isolation_level=i8(1),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            s.FetchTopic(
                topic=topic,
                partitions=(
                    s.FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    response = call(bootstrap, ApiKey.FETCH, 11, request)
    data = response.responses[0].partitions[0]
    return data.high_watermark, data.last_stable_offset


def test_unknown_transactional_batch_is_refused(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "h")
    create_topic(broker.bootstrap, "h-other")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("h", b"before", partition=0)
    plain.flush(30)
    # A producer id nobody registered, with and without a transactional id.
    answer = raw_produce(broker.bootstrap, "h", txn_batch(987654, 0), "nobody")
    assert answer.error_code == ErrorCode.invalid_producer_id_mapping
    answer = raw_produce(broker.bootstrap, "h", txn_batch(987654, 0), None)
    assert answer.error_code == ErrorCode.transactional_id_authorization_failed
    # A registered producer whose transaction does not hold the partition.
    producer = txn_producer(broker.bootstrap, "tx-h")
    producer.begin_transaction()
    producer.produce("h-other", b"in the transaction", partition=0)
    producer.flush(30)
    pid, epoch = describe_producer(broker.bootstrap, "tx-h")
    answer = raw_produce(broker.bootstrap, "h", txn_batch(pid, epoch), "tx-h")
    assert answer.error_code == ErrorCode.invalid_txn_state
    plain.produce("h", b"after", partition=0)
    plain.flush(30)
    high_watermark, lso = last_stable_offset(broker.bootstrap, "h")
    assert (high_watermark, lso) == (2, 2)
    assert consume_all(broker.bootstrap, "h", "read_committed", 2) == [b"before", b"after"]


def describe_producer(bootstrap: str, txn_id: str) -> tuple[int, int]:
    s = schema_module(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    response = call(
        bootstrap,
        ApiKey.DESCRIBE_TRANSACTIONS,
        0,
        s.DescribeTransactionsRequest(transactional_ids=(txn_id,)),
    )
    state = response.transaction_states[0]
    assert state.error_code == ErrorCode.none
    return state.producer_id, state.producer_epoch


# -- kafka-python and aiokafka ----------------------------------------------------------------
def test_kafka_python_transactions(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "kp")
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id="tx-kp", enable_idempotence=True
    )
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("kp", b"kp-commit", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("kp", b"kp-abort", partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    assert consume_all(broker.bootstrap, "kp", "read_committed", 1) == [b"kp-commit"]


def test_aiokafka_transactions(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "ak")

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, transactional_id="tx-ak"
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("ak", b"ak-commit", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait("ak", b"ak-abort", partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    assert consume_all(broker.bootstrap, "ak", "read_committed", 1) == [b"ak-commit"]


# -- KIP-890 over the protocol (a leader asking a coordinator on another broker) -------------
def test_verification_over_add_partitions_to_txn_v4(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "v4")
    create_topic(broker.bootstrap, "v4-other")
    producer = txn_producer(broker.bootstrap, "tx-v4")
    producer.begin_transaction()
    producer.produce("v4", b"x", partition=0)
    producer.flush(30)
    pid, epoch = describe_producer(broker.bootstrap, "tx-v4")
    host, port = broker.bootstrap.rsplit(":", 1)
    node = BrokerEndpoint(1, host, int(port))

    async def ask() -> tuple[dict[Any, int], ...]:
        client = NodeClient(ClientSettings(local_id=2, security=ClientSecurity("PLAINTEXT")))
        try:
            parts = [("v4", 0), ("v4-other", 0)]
            return (
                await verify_remotely(client, node, "tx-v4", pid, epoch, parts),
                await verify_remotely(client, node, "tx-v4", pid, epoch - 1, parts[:1]),
                await verify_remotely(client, node, "unknown-id", pid, epoch, parts[:1]),
            )
        finally:
            await client.close()

    ok, fenced, unknown = asyncio.run(ask())
    assert ok == {("v4", 0): 0, ("v4-other", 0): ErrorCode.invalid_txn_state}
    assert fenced == {("v4", 0): ErrorCode.invalid_producer_epoch}
    assert unknown == {("v4", 0): ErrorCode.invalid_producer_id_mapping}
    producer.abort_transaction(30)


def test_timestamp_lookups_find_nothing_past_the_last_stable_offset(broker: BrokerProcess) -> None:
    """ListOffsets by timestamp (and MAX_TIMESTAMP) for a record a read_committed consumer
    may not read yet answers offset -1 and timestamp -1, as Kafka does; READ_UNCOMMITTED
    finds it below the high watermark. (Markers carry the coordinator's clock, so the
    records are stamped an hour either side of now.)"""
    hour = 3_600_000
    before, after = int(time.time() * 1000) - hour, int(time.time() * 1000) + hour
    create_topic(broker.bootstrap, "ts")
    producer = txn_producer(broker.bootstrap, "tx-ts")
    producer.begin_transaction()
    producer.produce("ts", b"committed", partition=0, timestamp=before)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce("ts", b"open", partition=0, timestamp=after)
    producer.flush(30)
    committed, uncommitted = 1, 0
    # Offset 1 is the first transaction's commit marker.
    assert list_offset_answer(broker.bootstrap, "ts", 0, after, uncommitted)[:2] == (after, 2)
    assert list_offset_answer(broker.bootstrap, "ts", 0, after, committed)[:2] == (-1, -1)
    assert list_offset_answer(broker.bootstrap, "ts", 0, -3, committed)[:2] == (-1, -1)
    assert list_offset_answer(broker.bootstrap, "ts", 0, before, committed)[:2] == (before, 0)
    # LATEST is the bound itself: the last stable offset, the open transaction's first.
    assert list_offset_answer(broker.bootstrap, "ts", 0, -1, committed)[:2] == (-1, 2)
    producer.abort_transaction(30)
