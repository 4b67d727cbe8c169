"""OffsetDelete: a group's committed offsets dropped with tombstones in __consumer_offsets,
refused for topics live members subscribe to, as Kafka's group coordinator does."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.authorizer import AclAuthorizer, AclBinding, Operation, PatternType, Permission
from core.server.authorizer import ResourceType as AclResource
from core.server.consumer_protocol import SubscriptionFormatError, subscription_topics
from core.server.group_coordinator import Group, GroupState, Member

from .fake_broker import FakeBroker, call, schema
from .test_group_apis import commit, fetch, group_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = group_broker(tmp_path)  # topic t with two partitions
    b.make_topic("u", 1)
    yield b
    b.close()


def subscription(*topics: str, version: int = 1) -> bytes:
    """A ConsumerProtocolSubscription as Java clients send it (v1: no user data, no owned
    partitions)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">ii", -1, 0)


def live_group(broker: FakeBroker, group_id: str, protocol_type: str, *topics: str) -> None:
    """A stable group with one member subscribed to ``topics``."""
    member = Member(
        "m-1",
        None,
        "client",
        "/127.0.0.1",
        10_000,
        30_000,
        protocol_type,
        [("range", subscription(*topics))],
        is_new=False,
    )
    broker.group_coordinator.groups[group_id] = Group(
        group_id,
        state=GroupState.STABLE,
        generation=1,
        protocol_type=protocol_type,
        protocol_name="range",
        leader_id="m-1",
        members={"m-1": member},
    )


def offset_delete(broker: FakeBroker, group: str, partitions: dict[str, list[int]]):
    s = schema(ApiKey.OFFSET_DELETE, 0)
    request = s.OffsetDeleteRequest(
        group_id=group,
        topics=tuple(
            s.OffsetDeleteRequestTopic(
                name=t,
                partitions=tuple(s.OffsetDeleteRequestPartition(partition_index=i) for i in p),
            )
            for t, p in partitions.items()
        ),
    )
    response = call(broker, ApiKey.OFFSET_DELETE, 0, request)
    errors = {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }
    return response.error_code, errors


def test_subscription_topics_of_every_version() -> None:
    assert subscription_topics(subscription("a", "bb", version=0)) == ["a", "bb"]
    assert subscription_topics(subscription("t", version=3)) == ["t"]
    for bad in (b"", b"\x00\x01\x00\x00\x00\x05\x00\x01a", b"\xff\xff\x00\x00\x00\x00"):
        with pytest.raises(SubscriptionFormatError):
            subscription_topics(bad)


def test_an_empty_group_loses_the_offsets_asked_for(broker: FakeBroker) -> None:
    commit(broker, 9, {("t", 0): (5, -1, ""), ("t", 1): (6, -1, ""), ("u", 0): (7, -1, "")})
    error, errors = offset_delete(broker, "g", {"t": [0], "u": [0, 3], "nope": [0]})
    assert error == ErrorCode.none
    assert errors == {
        ("t", 0): ErrorCode.none,
        ("u", 0): ErrorCode.none,
        ("u", 3): ErrorCode.unknown_topic_or_partition,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert fetch(broker, 9, None) == {("t", 1): (6, -1, "")}
    # Tombstones in __consumer_offsets: a restart does not bring them back.
    restarted = broker.restart()
    try:
        assert fetch(restarted, 9, None) == {("t", 1): (6, -1, "")}
    finally:
        restarted.close()


def test_an_unknown_group_is_group_id_not_found(broker: FakeBroker) -> None:
    assert offset_delete(broker, "never", {"t": [0]}) == (ErrorCode.group_id_not_found, {})


def test_a_live_consumer_group_keeps_its_subscribed_topics(broker: FakeBroker) -> None:
    commit(broker, 9, {("t", 0): (5, -1, ""), ("u", 0): (7, -1, "")})
    live_group(broker, "g", "consumer", "t")
    error, errors = offset_delete(broker, "g", {"t": [0], "u": [0]})
    assert error == ErrorCode.none
    assert errors == {("t", 0): ErrorCode.group_subscribed_to_topic, ("u", 0): ErrorCode.none}
    assert fetch(broker, 9, None) == {("t", 0): (5, -1, "")}


def test_a_live_group_of_another_protocol_is_non_empty(broker: FakeBroker) -> None:
    commit(broker, 9, {("u", 0): (7, -1, "")}, group="c")
    live_group(broker, "c", "connect", "t")
    assert offset_delete(broker, "c", {"u": [0]}) == (ErrorCode.non_empty_group, {})
    assert fetch(broker, 9, None, group="c") == {("u", 0): (7, -1, "")}


def test_delete_on_the_group_and_read_on_the_topic_are_required(broker: FakeBroker) -> None:
    commit(broker, 9, {("t", 0): (5, -1, ""), ("u", 0): (7, -1, "")})
    broker.authorizer = AclAuthorizer(broker.directory, frozenset())
    assert offset_delete(broker, "g", {"t": [0]}) == (ErrorCode.group_authorization_failed, {})

    def allow(resource: AclResource, name: str, operation: Operation) -> AclBinding:
        return AclBinding(
            resource, name, PatternType.LITERAL, "User:ANONYMOUS", "*", operation, Permission.ALLOW
        )

    broker.authorizer.create(
        [
            allow(AclResource.GROUP, "g", Operation.DELETE),
            allow(AclResource.TOPIC, "u", Operation.READ),
        ]
    )
    error, errors = offset_delete(broker, "g", {"t": [0], "u": [0]})
    assert (error, errors) == (
        ErrorCode.none,
        {("t", 0): ErrorCode.topic_authorization_failed, ("u", 0): ErrorCode.none},
    )
    broker.authorizer = None
    assert fetch(broker, 9, None) == {("t", 0): (5, -1, "")}
