"""ACLs in a three-broker cluster (Kafka's ZooKeeper mode): granted or revoked through one
broker with a real AdminClient, enforced by every broker, brokers replicating to each other
as the ``super.users`` principal they authenticate as on the inter-broker listener.

Every broker leads one partition of the topic, so a produce to each partition is a
decision of each broker. ACL changes reach the other brokers through ZooKeeper's change
notifications, a moment after the AdminClient's answer (as in Kafka): the tests wait, with a
deadline, for the decision to be the expected one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.support.cluster import DEADLINE_S, Cluster
from tests.support.waiting import wait_until

USERS = {"broker": "broker-pw", "admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="broker" password="{USERS["broker"]}" '
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
        + ";"
    ),
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # Kafka's rule: the brokers' own principal must be allowed CLUSTER_ACTION.
    "super.users": "User:broker;User:admin",
}
TOPIC = "orders"


def sasl(user: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def admin(cluster: Cluster, broker_id: int, user: str = "admin") -> AdminClient:
    """An AdminClient bootstrapped on one broker only."""
    return AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap, **sasl(user)})


def produce_each_partition(cluster: Cluster, user: str, partitions: int) -> dict[int, int]:
    """One record to each partition as ``user``: partition -> Kafka error code (0: acked)."""
    outcome: dict[int, int] = {}

    def report(error: KafkaError | None, message: Any) -> None:
        outcome[message.partition()] = error.code() if error is not None else 0

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "message.timeout.ms": 10_000,
            "acks": "all",
            **sasl(user),
        }
    )
    for p in range(partitions):
        producer.produce(TOPIC, value=f"{user}-{p}".encode(), partition=p, on_delivery=report)
    producer.flush(DEADLINE_S)
    return outcome


def wait_outcome(
    cluster: Cluster, user: str, partitions: int, expect: Callable[[dict[int, int]], bool]
) -> dict[int, int]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        outcome = produce_each_partition(cluster, user, partitions)
        if expect(outcome):
            return outcome
        assert time.monotonic() < deadline, f"{user}'s produce outcomes: {outcome}"
        time.sleep(0.2)


def binding(
    rtype: ResourceType, name: str, op: str, pattern=ResourcePatternType.LITERAL
) -> AclBinding:  # type: ignore[no-untyped-def]
    return AclBinding(rtype, name, pattern, "User:alice", "*", AclOperation[op],
                      AclPermissionType.ALLOW)  # fmt: skip


def test_acls_granted_on_one_broker_are_enforced_by_all(cluster_factory) -> None:
    cluster = cluster_factory(3, SETTINGS)
    partitions = 3
    on_1 = admin(cluster, 1)
    on_1.create_topics([NewTopic(TOPIC, partitions, 3)])[TOPIC].result(DEADLINE_S)
    # Replication between brokers runs as User:broker (a super user): full ISRs.
    cluster.wait_topic(TOPIC, partitions, 3)
    assert {cluster.leader(TOPIC, p) for p in range(partitions)} == {1, 2, 3}

    # No ACL yet: every broker refuses alice.
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_each_partition(cluster, "alice", partitions) == dict.fromkeys(
        range(partitions), denied
    )

    # Granted through broker 1 only: the topic (literal) and a group prefix (prefixed).
    grants = [
        binding(ResourceType.TOPIC, TOPIC, "WRITE"),
        binding(ResourceType.TOPIC, TOPIC, "READ"),
        binding(ResourceType.GROUP, "alice-", "READ", ResourcePatternType.PREFIXED),
    ]
    for future in on_1.create_acls(grants, request_timeout=DEADLINE_S).values():
        future.result()
    zk = cluster.zk
    assert zk.exists("/kafka-acl/Topic/orders") is not None
    assert zk.exists("/kafka-acl-extended/prefixed/Group/alice-") is not None
    wait_outcome(cluster, "alice", partitions, lambda o: set(o.values()) == {0})
    # bob has no ACL: still refused everywhere.
    assert set(produce_each_partition(cluster, "bob", partitions).values()) == {denied}

    # alice's group (the prefixed ACL) consumes every partition, from every leader.
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "alice-readers",
         "auto.offset.reset": "earliest", **sasl("alice")}
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        seen: set[int] = set()
        deadline = time.monotonic() + DEADLINE_S
        while seen != set(range(partitions)):
            assert time.monotonic() < deadline, f"alice read partitions {seen}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen.add(message.partition())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    # Every broker lists the same ACLs.
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    for broker_id in (1, 2, 3):
        client = admin(cluster, broker_id)
        wait_until(
            lambda c=client: len(c.describe_acls(everything).result(DEADLINE_S)) == len(grants),
            DEADLINE_S,
            0.2,
            f"broker {broker_id}'s ACLs",
        )

    # Revoked through broker 3: every broker refuses alice again.
    write_filter = AclBindingFilter(
        ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice", None,
        AclOperation.WRITE, AclPermissionType.ANY,
    )  # fmt: skip
    on_3 = admin(cluster, 3)  # kept alive until the future completes
    [deleted] = on_3.delete_acls([write_filter]).values()
    assert len(deleted.result()) == 1
    wait_outcome(cluster, "alice", partitions, lambda o: set(o.values()) == {denied})
    # The READ grant stayed in ZooKeeper.
    assert zk.exists("/kafka-acl/Topic/orders") is not None

    # A restarted broker loads the ACLs from ZooKeeper: alice still refused WRITE there.
    cluster.kill(2)
    # Its ZooKeeper session must end first (Kafka refuses a broker id still registered).
    cluster.wait(lambda: 2 not in cluster.registered(), "broker 2's registration gone")
    cluster.restart(2)
    cluster.wait_registered([1, 2, 3])
    cluster.wait_topic(TOPIC, partitions, 3)
    assert set(produce_each_partition(cluster, "alice", partitions).values()) == {denied}
