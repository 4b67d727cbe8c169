"""ACLs in ZooKeeper (ZkAclAuthorizer) against a real ZooKeeper: Kafka's znode layout and
JSON, change notifications reaching another broker's authorizer, conditional writes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from core.server.authorizer import (
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from core.server.zk_authorizer import ZkAclAuthorizer
from core.server.zookeeper.acl_data import AclResource, decode_change
from core.server.zookeeper.kafka_zk import KafkaZkClient

T = TypeVar("T")
WAIT_S = 20.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 90.0))


def acl(
    name: str = "orders",
    op: Operation = Operation.READ,
    principal: str = "User:alice",
    pattern: PatternType = PatternType.LITERAL,
    permission: Permission = Permission.ALLOW,
    rtype: ResourceType = ResourceType.TOPIC,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def everything(rtype: ResourceType = ResourceType.ANY) -> AclFilter:
    return AclFilter(rtype, None, PatternType.ANY, None, None, Operation.ANY, Permission.ANY)


async def wait_for(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.02)
    assert predicate(), what


async def two_brokers(
    connect: str,
) -> tuple[KafkaZkClient, KafkaZkClient, ZkAclAuthorizer, ZkAclAuthorizer]:
    zk1 = await KafkaZkClient.connect(connect, session_timeout_ms=20_000)
    zk2 = await KafkaZkClient.connect(connect, session_timeout_ms=20_000)
    a1 = ZkAclAuthorizer(zk1.zookeeper)
    a2 = ZkAclAuthorizer(zk2.zookeeper)
    await a1.start()
    await a2.start()
    return zk1, zk2, a1, a2


async def close(*clients: KafkaZkClient) -> None:
    for client in clients:
        await client.close()


def test_acls_are_stored_in_kafkas_layout_and_json(zk_chroot):
    async def scenario() -> None:
        zk1, zk2, a1, _ = await two_brokers(zk_chroot)
        try:
            await a1.create_acls(
                [
                    acl("orders", Operation.READ),
                    acl("orders", Operation.CLUSTER_ACTION, permission=Permission.DENY),
                    acl("logs-", Operation.WRITE, pattern=PatternType.PREFIXED),
                ]
            )
            zk = zk1.zookeeper
            literal = json.loads((await zk.get("/kafka-acl/Topic/orders")).data)
            assert literal["version"] == 1
            assert sorted(literal["acls"], key=lambda r: r["operation"]) == [
                {"principal": "User:alice", "permissionType": "Deny",
                 "operation": "ClusterAction", "host": "*"},
                {"principal": "User:alice", "permissionType": "Allow",
                 "operation": "Read", "host": "*"},
            ]  # fmt: skip
            prefixed = json.loads((await zk.get("/kafka-acl-extended/prefixed/Topic/logs-")).data)
            assert prefixed["acls"] == [
                {"principal": "User:alice", "permissionType": "Allow",
                 "operation": "Write", "host": "*"}
            ]  # fmt: skip
            literal_changes = await zk.get_children("/kafka-acl-changes")
            assert literal_changes and all(n.startswith("acl_changes_") for n in literal_changes)
            note = (await zk.get(f"/kafka-acl-changes/{literal_changes[0]}")).data
            assert note == b"TOPIC:orders"
            [extended] = await zk.get_children("/kafka-acl-extended-changes")
            event = json.loads((await zk.get(f"/kafka-acl-extended-changes/{extended}")).data)
            assert event == {"version": 1, "resourceType": "TOPIC", "name": "logs-",
                             "patternType": "PREFIXED"}  # fmt: skip
        finally:
            await close(zk1, zk2)

    run(scenario())


def test_a_grant_and_a_revoke_on_one_broker_reach_the_other(zk_chroot):
    async def scenario() -> None:
        zk1, zk2, a1, a2 = await two_brokers(zk_chroot)
        try:
            decide = lambda a, name: a.authorize(  # noqa: E731
                "User:alice", "10.0.0.1", Operation.WRITE, ResourceType.TOPIC, name
            )
            assert not decide(a2, "logs-app")
            await a1.create_acls([acl("logs-", Operation.WRITE, pattern=PatternType.PREFIXED)])
            assert decide(a1, "logs-app")  # the writer's own copy at once
            await wait_for(lambda: decide(a2, "logs-app"), "the grant reached broker 2")
            removed = await a2.delete_acls([everything(ResourceType.TOPIC)])
            assert removed == [[acl("logs-", Operation.WRITE, pattern=PatternType.PREFIXED)]]
            await wait_for(lambda: not decide(a1, "logs-app"), "the revoke reached broker 1")
            # No ACL left: the resource's znode is gone, as in Kafka.
            assert await zk1.zookeeper.exists("/kafka-acl-extended/prefixed/Topic/logs-") is None
        finally:
            await close(zk1, zk2)

    run(scenario())


def test_a_starting_broker_loads_every_acl(zk_chroot):
    async def scenario() -> None:
        zk1, zk2, a1, _ = await two_brokers(zk_chroot)
        try:
            await a1.create_acls(
                [acl("g1", Operation.READ, rtype=ResourceType.GROUP),
                 acl("kafka-cluster", Operation.ALTER, rtype=ResourceType.CLUSTER),
                 acl("t", Operation.ALL, principal="User:*")]
            )  # fmt: skip
            zk3 = await KafkaZkClient.connect(zk_chroot, session_timeout_ms=20_000)
            try:
                a3 = ZkAclAuthorizer(zk3.zookeeper)
                await a3.start()
                assert sorted(a3.describe(everything()), key=str) == sorted(
                    a1.describe(everything()), key=str
                )
                assert len(a3.describe(everything())) == 3
            finally:
                await close(zk3)
        finally:
            await close(zk1, zk2)

    run(scenario())


def test_concurrent_grants_on_two_brokers_keep_both(zk_chroot):
    """Conditional writes: two brokers adding ACLs to one resource at once lose none."""

    async def scenario() -> None:
        zk1, zk2, a1, a2 = await two_brokers(zk_chroot)
        try:
            users = [f"User:u{i}" for i in range(8)]
            await asyncio.gather(
                *(
                    (a1 if i % 2 else a2).create_acls([acl("shared", principal=user)])
                    for i, user in enumerate(users)
                )
            )
            stored = json.loads((await zk1.zookeeper.get("/kafka-acl/Topic/shared")).data)
            assert sorted(r["principal"] for r in stored["acls"]) == users
            await wait_for(lambda: len(a1.describe(everything())) == 8, "broker 1 has all")
            await wait_for(lambda: len(a2.describe(everything())) == 8, "broker 2 has all")
        finally:
            await close(zk1, zk2)

    run(scenario())


def test_a_name_that_cannot_be_a_znode_is_refused(zk_chroot):
    async def scenario() -> None:
        zk1 = await KafkaZkClient.connect(zk_chroot, session_timeout_ms=20_000)
        try:
            authorizer = ZkAclAuthorizer(zk1.zookeeper)
            await authorizer.start()
            with pytest.raises(InvalidAclError):
                authorizer.check_storable(acl("a/b", rtype=ResourceType.GROUP))
        finally:
            await close(zk1)

    run(scenario())


def test_kafkas_notification_formats_are_read_in_any_case():
    assert decode_change(PatternType.LITERAL, b"Topic:a:b") == AclResource(
        ResourceType.TOPIC, "a:b", PatternType.LITERAL
    )
    assert decode_change(
        PatternType.PREFIXED,
        b'{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"tx","patternType":"PREFIXED"}',
    ) == AclResource(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.PREFIXED)
