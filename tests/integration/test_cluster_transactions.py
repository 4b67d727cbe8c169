"""Transactions in a three-broker cluster (ZooKeeper mode), with confluent-kafka.

A transaction spans partitions led by different brokers: the coordinator (the leader of
the transactional id's ``__transaction_state`` partition) sends WriteTxnMarkers to the
other leaders. When the coordinator's broker is SIGKILLed inside a transaction, the new
leader of that partition loads the replicated state and completes the transaction (the
producer commits against it) or aborts it at its timeout (the producer is gone), and
read_committed consumers move on either way.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from core.server.coordinator_records import partition_for
from tests.support.cluster import DEADLINE_S, Cluster
from tests.support.cluster_clients import create_topic

BROKERS = [1, 2, 3]
TXN_PARTITIONS = 4
SETTINGS = {
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    # Timed-out transactions are looked for every second (Kafka: every 10 s).
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
TOPIC = "orders"
PARTITIONS = 3


def txn_producer(cluster: Cluster, txn_id: str, timeout_ms: int = 60_000) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": timeout_ms,
            # librdkafka wants it no longer than the transaction's timeout.
            "message.timeout.ms": min(int(DEADLINE_S * 1000), timeout_ms),
        }
    )
    producer.init_transactions(DEADLINE_S)
    return producer


def read_all(cluster: Cluster, isolation: str, expected: int) -> dict[int, list[bytes]]:
    """Values per partition of ``TOPIC`` from the start, once ``expected`` are read and
    every partition reached its end (read_committed: its last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                at_end.add(msg.partition())
                read = sum(len(v) for v in values.values())
                if len(at_end) == PARTITIONS and read >= expected:
                    break
                continue
            at_end.discard(msg.partition())
            values[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    read = sum(len(v) for v in values.values())
    assert len(at_end) == PARTITIONS and read >= expected, (
        f"read {read} of {expected} records, partitions at their end: {sorted(at_end)}"
    )
    return values


def produce_to_every_partition(producer: Producer, prefix: str) -> None:
    for p in range(PARTITIONS):
        producer.produce(TOPIC, b"%s-%d" % (prefix.encode(), p), partition=p)


def expected(*prefixes: str) -> dict[int, list[bytes]]:
    return {p: [b"%s-%d" % (x.encode(), p) for x in prefixes] for p in range(PARTITIONS)}


def coordinator_of(cluster: Cluster, txn_id: str) -> tuple[int, int]:
    """(partition of ``__transaction_state``, its leader) once it has a full ISR."""
    index = partition_for(txn_id, TXN_PARTITIONS)
    cluster.wait_isr("__transaction_state", index, 3)
    return index, cluster.leader("__transaction_state", index)


def test_commit_and_abort_across_brokers(cluster_factory) -> None:
    cluster = cluster_factory(settings=SETTINGS)
    create_topic(cluster, TOPIC, PARTITIONS)
    leaders = {cluster.leader(TOPIC, p) for p in range(PARTITIONS)}
    assert len(leaders) > 1, f"every partition of {TOPIC} is led by broker {leaders}"
    txn_id = "tx-cluster"
    producer = txn_producer(cluster, txn_id)
    _, coordinator = coordinator_of(cluster, txn_id)
    # At least one partition is led by a broker that is not the coordinator: its markers
    # travel as WriteTxnMarkers.
    assert leaders - {coordinator}

    producer.begin_transaction()
    produce_to_every_partition(producer, "c1")
    producer.commit_transaction(DEADLINE_S)
    producer.begin_transaction()
    produce_to_every_partition(producer, "a")
    producer.flush(DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    produce_to_every_partition(producer, "c2")
    producer.commit_transaction(DEADLINE_S)

    assert read_all(cluster, "read_committed", 2 * PARTITIONS) == expected("c1", "c2")
    assert read_all(cluster, "read_uncommitted", 3 * PARTITIONS) == expected("c1", "a", "c2")


def test_commit_after_the_coordinators_broker_is_killed(cluster_factory) -> None:
    cluster = cluster_factory(settings=SETTINGS)
    create_topic(cluster, TOPIC, PARTITIONS)
    txn_id = "tx-survivor"
    producer = txn_producer(cluster, txn_id)
    index, coordinator = coordinator_of(cluster, txn_id)

    producer.begin_transaction()
    produce_to_every_partition(producer, "before")
    producer.flush(DEADLINE_S)  # AddPartitionsToTxn written, records acked by the ISRs
    cluster.kill(coordinator)
    survivors = [b for b in BROKERS if b != coordinator]
    cluster.wait_leader("__transaction_state", index, among=survivors)

    # The producer finds the new coordinator, which loaded the Ongoing transaction with
    # its partitions from the replicated log, and commits it.
    producer.commit_transaction(DEADLINE_S)
    assert read_all(cluster, "read_committed", PARTITIONS) == expected("before")


def test_an_abandoned_transaction_is_aborted_by_the_new_coordinator(cluster_factory) -> None:
    cluster = cluster_factory(settings=SETTINGS)
    create_topic(cluster, TOPIC, PARTITIONS)
    txn_id = "tx-abandoned"
    producer = txn_producer(cluster, txn_id, timeout_ms=5000)
    index, coordinator = coordinator_of(cluster, txn_id)

    producer.begin_transaction()
    produce_to_every_partition(producer, "committed")
    producer.commit_transaction(DEADLINE_S)
    producer.begin_transaction()
    produce_to_every_partition(producer, "open")
    producer.flush(DEADLINE_S)
    cluster.kill(coordinator)
    survivors = [b for b in BROKERS if b != coordinator]
    cluster.wait_leader("__transaction_state", index, among=survivors)

    # Nobody ends the transaction: its open records pin every partition's last stable
    # offset until the new coordinator aborts it at transaction.timeout.ms.
    after = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    produce_to_every_partition(after, "later")
    assert after.flush(DEADLINE_S) == 0
    got = read_all(cluster, "read_committed", 2 * PARTITIONS)
    assert got == expected("committed", "later")
    del producer  # never ended: the point of the test
