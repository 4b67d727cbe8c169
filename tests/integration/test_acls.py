"""ACLs with real clients: an admin grants through AdminClient.create_acls, principals
authenticated with SASL/PLAIN get exactly what was granted, and the ACLs survive a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_clients import Rec, consume_confluent, produce_confluent

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)


def client(user: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(
        tmp_path_factory.mktemp("acls"),
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        },
    )
    yield b
    b.stop()


def admin_client(broker: BrokerProcess, user: str = "admin"):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap, **client(user)})


def grant(
    broker: BrokerProcess, principal: str, topic: str, *operations: str, user: str = "admin"
) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            AclOperation[op],
            AclPermissionType.ALLOW,
        )
        for op in operations
    ]
    admin = admin_client(broker, user)  # kept alive until the futures complete
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()


def grant_group(broker: BrokerProcess, principal: str, prefix: str, operation: str) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    binding = AclBinding(
        ResourceType.GROUP,
        prefix,
        ResourcePatternType.PREFIXED,
        principal,
        "*",
        AclOperation[operation],
        AclPermissionType.ALLOW,
    )
    admin = admin_client(broker)
    for future in admin.create_acls([binding], request_timeout=30).values():
        future.result()


def test_principals_get_exactly_what_was_granted(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import NewTopic

    admin = admin_client(broker)
    admin.create_topics([NewTopic("orders", 1)])["orders"].result(30)
    admin.create_topics([NewTopic("payroll", 1)])["payroll"].result(30)
    grant(broker, "User:alice", "orders", "WRITE", "READ")
    # A consumer with a group.id looks its coordinator up: that needs DESCRIBE on the group.
    grant_group(broker, "User:alice", "it-", "READ")

    sent = [Rec(b"k%d" % i, b"order-%d" % i) for i in range(10)]
    assert produce_confluent(broker.bootstrap, "orders", sent, client("alice")) == list(range(10))
    got = consume_confluent(broker.bootstrap, "orders", 0, client("alice"))
    assert [g.value for g in got] == [r.value for r in sent]

    # alice sees only what she may describe; bob sees nothing at all.
    assert set(admin_client(broker, "alice").list_topics(timeout=30).topics) == {"orders"}
    assert set(admin_client(broker, "bob").list_topics(timeout=30).topics) == set()

    # bob's writes are refused with TOPIC_AUTHORIZATION_FAILED and nothing is appended.
    reports: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000, **client("bob")}
    )
    producer.produce("orders", b"intruder", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(30)
    assert reports and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, reports[0]
    with pytest.raises((KafkaException, AssertionError)):
        consume_confluent(broker.bootstrap, "orders", 0, client("bob"))
    assert len(consume_confluent(broker.bootstrap, "orders", 0, client("admin"))) == 10

    # alice cannot create or delete topics she was not granted.
    alice_admin = admin_client(broker, "alice")
    with pytest.raises(KafkaException) as caught:
        alice_admin.create_topics([NewTopic("alice-own", 1)])["alice-own"].result(30)
    assert caught.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException):
        alice_admin.delete_topics(["payroll"])["payroll"].result(30)
    assert "payroll" in admin.list_topics(timeout=30).topics


def test_groups_need_read_on_the_group(broker: BrokerProcess) -> None:
    from confluent_kafka import Consumer, KafkaError

    grant_group(broker, "User:alice", "alice-", "READ")

    def consume(user: str, group: str) -> tuple[int, list[int]]:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                **client(user),
            }
        )
        consumer.subscribe(["orders"])
        got, errors = 0, []
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline and got < 10 and not errors:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    errors.append(msg.error().code())
                else:
                    got += 1
        finally:
            consumer.close()
        return got, errors

    assert consume("alice", "alice-readers")[0] >= 10
    got, errors = consume("bob", "alice-readers")
    assert got == 0 and KafkaError.GROUP_AUTHORIZATION_FAILED in errors


def test_acl_apis_need_cluster_alter_and_acls_survive_a_restart(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    grant(broker, "User:alice", "audit", "READ")
    alice_admin = admin_client(broker, "alice")
    # Without ALTER/DESCRIBE on the cluster alice can neither grant nor list ACLs.
    with pytest.raises(KafkaException):
        grant(broker, "User:alice", "audit", "WRITE", user="alice")
    try:
        listed = alice_admin.describe_acls(everything, request_timeout=30).result()
    except KafkaException:
        listed = []
    assert listed == []
    broker.stop()
    broker = restart(broker)
    try:
        admin = admin_client(broker)
        found = admin.describe_acls(everything, request_timeout=30).result()
        assert {(b.name, b.principal, b.operation.name) for b in found} >= {
            ("orders", "User:alice", "WRITE"),
            ("audit", "User:alice", "READ"),
        }
        only_audit = AclBindingFilter(
            ResourceType.TOPIC,
            "audit",
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        (deleted,) = admin.delete_acls([only_audit], request_timeout=30).values()
        assert [b.name for b in deleted.result()] == ["audit"]
        left = admin.describe_acls(everything, request_timeout=30).result()
        assert "audit" not in {b.name for b in left}
    finally:
        broker.stop()
