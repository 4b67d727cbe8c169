"""Partition reassignment in a three-broker cluster with a real admin client (kafka-python's
AlterPartitionReassignments / ListPartitionReassignments, sent to the controller) while an
idempotent acks=all producer writes: the replicas move, leadership leaves a removed broker,
the removed replica's log is deleted, and every acknowledged record is read back once."""

from __future__ import annotations

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.support.cluster import DEADLINE_S, Cluster
from tests.support.cluster_clients import (
    BackgroundProducer,
    assert_read_exactly_once,
    consume_all,
)

TOPIC = "moving"


def reassign(admin: KafkaAdminClient, replicas: list[int]) -> None:
    outcome = admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): replicas})
    assert outcome == {TopicPartition(TOPIC, 0): None}, outcome


def wait_reassigned(cluster: Cluster, admin: KafkaAdminClient, replicas: list[int]) -> None:
    cluster.wait(lambda: cluster.replicas(TOPIC, 0) == replicas, f"replicas {replicas}")
    cluster.wait(lambda: sorted(cluster.isr(TOPIC, 0)) == sorted(replicas), "the ISR")
    cluster.wait(lambda: admin.list_partition_reassignments() == {}, "no reassignment listed")
    assert cluster.leader(TOPIC, 0) in replicas


def test_replicas_move_between_brokers_under_load_without_loss(cluster_factory) -> None:
    cluster = cluster_factory(3)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    new = NewTopic(TOPIC, num_partitions=-1, replication_factor=-1,
                   replica_assignments={0: [1, 2]})  # fmt: skip
    admin.create_topics([new], timeout_ms=int(DEADLINE_S * 1000))
    cluster.wait_topic(TOPIC, 1, 2)
    assert cluster.leader(TOPIC, 0) == 1
    producer = BackgroundProducer(cluster, TOPIC).start()
    try:
        producer.wait_acked(200)
        # Broker 1 (the leader) is replaced by broker 3.
        reassign(admin, [3, 2])
        wait_reassigned(cluster, admin, [3, 2])
        assert cluster.leader(TOPIC, 0) in (2, 3)
        old_dir = cluster.brokers[1].log_dir / "data" / f"{TOPIC}-0"
        cluster.wait(lambda: not old_dir.exists(), "broker 1's replica deleted")
        acked = len(producer.acked)
        producer.wait_acked(acked + 200)
        # A replica added back: three replicas.
        reassign(admin, [3, 2, 1])
        wait_reassigned(cluster, admin, [3, 2, 1])
        producer.wait_acked(len(producer.acked) + 200)
    finally:
        producer.stop()
        admin.close()
    assert not producer.errors, producer.errors[:5]
    assert_read_exactly_once(producer.acked, consume_all(cluster, TOPIC, 1))
    # Cancelling when nothing is in progress: Kafka's NO_REASSIGNMENT_IN_PROGRESS.
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        outcome = admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): None})
        assert outcome[TopicPartition(TOPIC, 0)].errno == 85
    finally:
        admin.close()
