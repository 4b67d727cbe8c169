"""CreatePartitions against a real topic registry, log manager and replica manager: what a
client reads back, and what the broker then serves and keeps across a restart."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.authorizer import AclAuthorizer, AclBinding, Operation, PatternType, Permission
from core.server.authorizer import ResourceType as AclResource

from .fake_broker import FakeBroker, call, schema

TIMEOUT = datetime.timedelta(seconds=30)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path, {"max.partitions.per.request": "50"})
    yield b
    b.close()


def create_partitions(
    broker: FakeBroker,
    *topics: tuple[str, int] | tuple[str, int, list[list[int]] | None],
    version: int = 3,
    validate_only: bool = False,
    timeout: datetime.timedelta = TIMEOUT,
) -> dict[str, tuple[ErrorCode, str | None]]:
    s = schema(ApiKey.CREATE_PARTITIONS, version)
    wanted = []
    for entry in topics:
        name, count = entry[0], entry[1]
        assignments = entry[2] if len(entry) > 2 else None  # type: ignore[misc]
        wanted.append(
            s.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else tuple(s.CreatePartitionsAssignment(broker_ids=tuple(a)) for a in assignments),
            )
        )
    request = s.CreatePartitionsRequest(
        topics=tuple(wanted), timeout=timeout, validate_only=validate_only
    )
    response = call(broker, ApiKey.CREATE_PARTITIONS, version, request)
    return {r.name: (r.error_code, r.error_message) for r in response.results}


def codes(answers: dict[str, tuple[ErrorCode, Any]]) -> dict[str, ErrorCode]:
    return {name: error for name, (error, _) in answers.items()}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_new_partitions_are_registered_opened_and_writable(broker: FakeBroker, version) -> None:
    broker.make_topic("grow", 2)
    broker.append("grow", 0, 3)
    assert codes(create_partitions(broker, ("grow", 5), version=version)) == {
        "grow": ErrorCode.none
    }
    assert broker.topics.get("grow").partitions == 5
    for index in range(5):
        assert broker.replica_manager.partition("grow", index) is not None
    broker.append("grow", 4, 2)
    assert broker.replica_manager.partition("grow", 4).log.log_end_offset == 2
    # The old partitions keep their records.
    assert broker.replica_manager.partition("grow", 0).log.log_end_offset == 3


def test_the_new_count_survives_a_restart(broker: FakeBroker) -> None:
    broker.make_topic("kept", 1)
    assert codes(create_partitions(broker, ("kept", 3))) == {"kept": ErrorCode.none}
    restarted = broker.restart()
    try:
        assert restarted.topics.get("kept").partitions == 3
        restarted.replica_manager.open_topic(restarted.topics.get("kept"))
        assert restarted.replica_manager.partition("kept", 2) is not None
    finally:
        restarted.close()


def test_a_count_that_is_not_larger_is_invalid_partitions(broker: FakeBroker) -> None:
    broker.make_topic("three", 3)
    answers = create_partitions(broker, ("three", 3))
    assert answers["three"] == (ErrorCode.invalid_partitions, "Topic already has 3 partitions.")
    error, message = create_partitions(broker, ("three", 2))["three"]
    assert error == ErrorCode.invalid_partitions and "higher than the requested 2" in message
    assert broker.topics.get("three").partitions == 3


def test_unknown_and_duplicated_topics(broker: FakeBroker) -> None:
    broker.make_topic("twice", 1)
    answers = codes(create_partitions(broker, ("missing", 4), ("twice", 2), ("twice", 3)))
    assert answers == {
        "missing": ErrorCode.unknown_topic_or_partition,
        "twice": ErrorCode.invalid_request,
    }
    assert broker.topics.get("twice").partitions == 1


def test_validate_only_checks_and_changes_nothing(broker: FakeBroker) -> None:
    broker.make_topic("check", 1)
    assert codes(create_partitions(broker, ("check", 4), validate_only=True)) == {
        "check": ErrorCode.none
    }
    assert codes(create_partitions(broker, ("check", 1), validate_only=True)) == {
        "check": ErrorCode.invalid_partitions
    }
    assert broker.topics.get("check").partitions == 1
    assert broker.replica_manager.partition("check", 1) is None


def test_explicit_assignments_name_this_broker_once_per_new_partition(broker: FakeBroker) -> None:
    for name in ("ok", "other-broker", "too-few", "twice", "empty"):
        broker.make_topic(name, 1)
    answers = create_partitions(
        broker,
        ("ok", 3, [[1], [1]]),
        ("other-broker", 2, [[2]]),
        ("too-few", 3, [[1]]),
        ("twice", 2, [[1, 1]]),
        ("empty", 2, [[]]),
    )
    assert codes(answers) == {
        "ok": ErrorCode.none,
        "other-broker": ErrorCode.invalid_replica_assignment,
        "too-few": ErrorCode.invalid_replica_assignment,
        "twice": ErrorCode.invalid_replica_assignment,
        "empty": ErrorCode.invalid_replica_assignment,
    }
    assert "Unknown broker(s) in replica assignment: 2." in answers["other-broker"][1]
    assert "by 2 but 1 assignments provided" in answers["too-few"][1]
    assert broker.topics.get("ok").partitions == 3
    assert broker.topics.get("other-broker").partitions == 1


def test_internal_topics_keep_their_partition_count(broker: FakeBroker) -> None:
    before = broker.topics.get("__consumer_offsets").partitions
    error, message = create_partitions(broker, ("__consumer_offsets", before + 1))[
        "__consumer_offsets"
    ]
    assert error == ErrorCode.policy_violation
    assert "offsets.topic.num.partitions" in message
    assert broker.topics.get("__consumer_offsets").partitions == before


def test_more_partitions_than_the_request_cap_are_refused_whole(broker: FakeBroker) -> None:
    broker.make_topic("a", 1)
    broker.make_topic("b", 1)
    # 30 + 30 new partitions: over max.partitions.per.request=50 together.
    answers = create_partitions(broker, ("a", 31), ("b", 31))
    assert codes(answers) == {"a": ErrorCode.policy_violation, "b": ErrorCode.policy_violation}
    assert "max.partitions.per.request=50" in answers["a"][1]
    assert (broker.topics.get("a").partitions, broker.topics.get("b").partitions) == (1, 1)
    assert codes(create_partitions(broker, ("a", 31))) == {"a": ErrorCode.none}


def test_a_zero_timeout_answers_timed_out_and_still_adds(broker: FakeBroker) -> None:
    broker.make_topic("now", 1)
    answers = create_partitions(broker, ("now", 2), timeout=datetime.timedelta(0))
    assert codes(answers) == {"now": ErrorCode.request_timed_out}
    assert broker.topics.get("now").partitions == 2


def test_alter_on_the_topic_is_required(broker: FakeBroker) -> None:
    broker.make_topic("mine", 1)
    broker.make_topic("theirs", 1)
    authorizer = AclAuthorizer(broker.directory, frozenset())
    authorizer.create(
        [
            AclBinding(
                AclResource.TOPIC,
                "mine",
                PatternType.LITERAL,
                "User:ANONYMOUS",
                "*",
                Operation.ALTER,
                Permission.ALLOW,
            )
        ]
    )
    broker.authorizer = authorizer
    answers = codes(create_partitions(broker, ("mine", 2), ("theirs", 2), ("nowhere", 2)))
    assert answers == {
        "mine": ErrorCode.none,
        "theirs": ErrorCode.topic_authorization_failed,
        # Unknown topics are not revealed to whoever may not alter them.
        "nowhere": ErrorCode.topic_authorization_failed,
    }
    assert broker.topics.get("theirs").partitions == 1
