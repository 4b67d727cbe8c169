"""DescribeConfigs as Kafka answers it (entries, order, sources, synonyms) and AlterConfigs,
the non-incremental alteration, against real storage; requests are framed and answered as a
client sees them (``fake_broker.call``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.authorizer import AclAuthorizer
from core.server.handlers import ADVERTISED_VERSIONS
from tests.support.kafka_topic_configs import KAFKA_4_TOPIC_CONFIGS

from .fake_broker import FakeBroker, call, schema

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path)
    yield b
    b.close()


def describe(broker: FakeBroker, *resources: tuple[int, str, Any], version: int = 4) -> Any:
    s = schema(ApiKey.DESCRIBE_CONFIGS, version)
    request = s.DescribeConfigsRequest(
        resources=tuple(
            s.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k)
            for t, n, k in resources
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    return call(broker, ApiKey.DESCRIBE_CONFIGS, version, request).results


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


# -- DescribeConfigs --------------------------------------------------------------------------
def test_a_topic_lists_kafka_4s_keys_in_kafkas_order(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    for keys in (None, ()):  # Kafka: a null or an empty key list asks for every key
        (result,) = describe(broker, (TOPIC, "t", keys))
        assert [c.name for c in result.configs] == KAFKA_4_TOPIC_CONFIGS


def test_named_keys_come_in_the_order_of_a_map_of_those_keys(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    (result,) = describe(broker, (TOPIC, "t", ("retention.ms", "segment.bytes", "cleanup.policy")))
    assert [c.name for c in result.configs] == ["cleanup.policy", "segment.bytes", "retention.ms"]


def test_topic_synonyms_as_kafka_gives_them(broker: FakeBroker) -> None:
    broker.make_topic("t", 1, {"retention.ms": "1000", "preallocate": "true"})
    (result,) = describe(broker, (TOPIC, "t", None))
    by_name = {c.name: c for c in result.configs}
    # No DEFAULT_CONFIG synonym where the broker key has no default (log.retention.ms,
    # log.roll.ms, log.flush.interval.ms): their aliases are cut, as Kafka does.
    assert synonyms(by_name["retention.ms"]) == [("retention.ms", "1000", DYNAMIC_TOPIC)]
    assert by_name["retention.ms"].config_source == DYNAMIC_TOPIC
    for name in ("segment.ms", "segment.jitter.ms", "flush.ms"):
        assert (synonyms(by_name[name]), by_name[name].config_source) == ([], DEFAULT), name
    assert synonyms(by_name["segment.bytes"]) == [("log.segment.bytes", "1073741824", DEFAULT)]
    assert synonyms(by_name["preallocate"]) == [
        ("preallocate", "true", DYNAMIC_TOPIC),
        ("log.preallocate", "false", DEFAULT),
    ]
    # Topic-only keys have no broker synonym at all.
    for name in ("remote.storage.enable", "leader.replication.throttled.replicas"):
        assert (synonyms(by_name[name]), by_name[name].config_source) == ([], DEFAULT), name
    throttled = by_name["follower.replication.throttled.replicas"]
    assert (throttled.value, throttled.config_type) == ("", 7)  # an empty LIST
    assert by_name["message.timestamp.after.max.ms"].value == "3600000"  # Kafka 4's default
    assert all(not c.read_only and not c.is_sensitive for c in result.configs)


@pytest.mark.parametrize(
    ("settings", "value", "source", "expected"),
    [
        ({"log.retention.hours": "24"}, "86400000", DEFAULT, []),
        (
            {"log.retention.ms": "5000"},
            "5000",
            STATIC_BROKER,
            [("log.retention.ms", "5000", STATIC_BROKER), ("log.retention.hours", "168", DEFAULT)],
        ),
        (
            {"log.retention.ms": "5000", "log.retention.minutes": "3"},
            "5000",
            STATIC_BROKER,
            [
                ("log.retention.ms", "5000", STATIC_BROKER),
                ("log.retention.minutes", "3", STATIC_BROKER),
                ("log.retention.hours", "168", DEFAULT),
            ],
        ),
    ],
)
def test_retention_ms_synonyms_follow_the_broker_file(
    tmp_path: Path, settings: dict[str, str], value: str, source: int, expected: list
) -> None:
    b = FakeBroker(tmp_path, settings)
    try:
        b.make_topic("t", 1)
        (result,) = describe(b, (TOPIC, "t", ("retention.ms",)))
        (entry,) = result.configs
        assert (entry.value, entry.config_source, synonyms(entry)) == (value, source, expected)
    finally:
        b.close()


def test_documentation_marks_inert_keys(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    (result,) = describe(broker, (TOPIC, "t", ("preallocate", "segment.bytes")))
    docs = {c.name: c.documentation for c in result.configs}
    assert docs["preallocate"].startswith("Accepted, no effect in tierlog.")
    assert docs["segment.bytes"] and "no effect" not in docs["segment.bytes"]


def test_the_broker_resource(tmp_path: Path) -> None:
    b = FakeBroker(tmp_path, {"num.partitions": "3", "rsm.config.secret.token": "s3cr3t"})
    try:
        (node, bad, other) = describe(
            b, (BROKER, "1", None), (BROKER, "x", None), (BROKER, "2", None)
        )
        by_name = {c.name: c for c in node.configs}
        partitions = by_name["num.partitions"]
        assert (partitions.value, partitions.config_source, partitions.read_only) == ("3", 4, True)
        assert synonyms(partitions) == [
            ("num.partitions", "3", STATIC_BROKER),
            ("num.partitions", "1", DEFAULT),
        ]
        # A key given in the file that the broker's ConfigDef does not declare: shown, hidden.
        plugin = by_name["rsm.config.secret.token"]
        assert (plugin.value, plugin.is_sensitive, plugin.config_type) == (None, True, 0)
        assert synonyms(plugin) == [("rsm.config.secret.token", None, STATIC_BROKER)]
        # log.retention.ms has no default: unset, it has no synonym and no value.
        retention = by_name["log.retention.ms"]
        assert (retention.value, retention.config_source, synonyms(retention)) == (None, 5, [])
        assert bad.error_code == ErrorCode.invalid_request
        assert bad.error_message == "Broker id must be an integer, but it is: x"
        assert other.error_code == ErrorCode.invalid_request
    finally:
        b.close()


def test_refusals_carry_kafkas_messages(broker: FakeBroker, tmp_path: Path) -> None:
    broker.make_topic("t", 1)
    broker.authorizer = AclAuthorizer(tmp_path)  # User:ANONYMOUS may do nothing
    results = describe(broker, (TOPIC, "t", None), (TOPIC, "missing", None), (BROKER, "1", None))
    assert [(r.resource_name, r.error_code, r.error_message) for r in results] == [
        ("t", ErrorCode.topic_authorization_failed, "Topic authorization failed."),
        ("missing", ErrorCode.topic_authorization_failed, "Topic authorization failed."),
        ("1", ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    ]


def test_authorized_resources_are_answered_before_refused_ones(
    broker: FakeBroker, tmp_path: Path
) -> None:
    from core.server.authorizer import (
        AclBinding,
        Operation,
        PatternType,
        Permission,
        ResourceType,
    )

    broker.make_topic("open", 1)
    broker.make_topic("closed", 1)
    broker.authorizer = AclAuthorizer(tmp_path)
    broker.authorizer.create(
        [
            AclBinding(
                ResourceType.TOPIC,
                "open",
                PatternType.LITERAL,
                "User:ANONYMOUS",
                "*",
                Operation.DESCRIBE_CONFIGS,
                Permission.ALLOW,
            )
        ]
    )
    results = describe(broker, (TOPIC, "closed", None), (TOPIC, "open", ("segment.bytes",)))
    assert [(r.resource_name, r.error_code) for r in results] == [
        ("open", ErrorCode.none),
        ("closed", ErrorCode.topic_authorization_failed),
    ]


# -- AlterConfigs -----------------------------------------------------------------------------
def alter(broker: FakeBroker, version: int, *resources: Any, validate_only: bool = False) -> Any:
    s = schema(ApiKey.ALTER_CONFIGS, version)
    request = s.AlterConfigsRequest(
        resources=tuple(
            s.AlterConfigsResource(
                resource_type=t,
                resource_name=n,
                configs=tuple(s.AlterableConfig(name=k, value=v) for k, v in configs),
            )
            for t, n, configs in resources
        ),
        validate_only=validate_only,
    )
    return call(broker, ApiKey.ALTER_CONFIGS, version, request).responses


def test_alter_configs_is_advertised_at_kafkas_versions() -> None:
    assert ADVERTISED_VERSIONS[ApiKey.ALTER_CONFIGS] == (0, 2)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_replaces_the_whole_set_of_overrides(
    broker: FakeBroker, version: int
) -> None:
    broker.make_topic("t", 1, {"retention.ms": "5000", "segment.bytes": "4096"})
    (r,) = alter(
        broker, version, (TOPIC, "t", [("cleanup.policy", "compact"), ("segment.ms", "1")])
    )
    assert (r.error_code, r.error_message, r.resource_name) == (ErrorCode.none, None, "t")
    # retention.ms and segment.bytes, not listed, are back to their defaults.
    assert broker.topics.get("t").configs == {"cleanup.policy": "compact", "segment.ms": "1"}
    log_config = broker.replica_manager.partition("t", 0).log.config
    assert (log_config.compact, log_config.segment_bytes) == (True, 1024 * 1024 * 1024)
    (r,) = alter(broker, version, (TOPIC, "t", []))
    assert r.error_code == ErrorCode.none
    assert broker.topics.get("t").configs == {}


def test_alter_configs_validate_only_changes_nothing(broker: FakeBroker) -> None:
    broker.make_topic("t", 1, {"retention.ms": "5000"})
    (r,) = alter(broker, 2, (TOPIC, "t", [("segment.bytes", "4096")]), validate_only=True)
    assert r.error_code == ErrorCode.none
    (r,) = alter(broker, 2, (TOPIC, "t", [("segment.bytes", "-1")]), validate_only=True)
    assert r.error_code == ErrorCode.invalid_config and "segment.bytes" in r.error_message
    assert broker.topics.get("t").configs == {"retention.ms": "5000"}


def test_alter_configs_errors_per_resource(broker: FakeBroker) -> None:
    broker.make_topic("t", 1, {"retention.ms": "5000"})
    broker.make_topic("u", 1)
    results = alter(
        broker,
        1,
        (TOPIC, "t", [("segment.bytes", "-5")]),
        (TOPIC, "missing", [("segment.bytes", "4096")]),
        (TOPIC, "u", [("no.such.key", "1")]),
        (BROKER, "1", [("log.retention.ms", "1")]),
        (BROKER, "1", []),
        (8, "x", []),
    )
    assert [(r.resource_type, r.resource_name, r.error_code) for r in results] == [
        (TOPIC, "t", ErrorCode.invalid_config),
        (TOPIC, "missing", ErrorCode.unknown_topic_or_partition),
        (TOPIC, "u", ErrorCode.invalid_config),
        (BROKER, "1", ErrorCode.invalid_request),  # duplicate resource
        (BROKER, "1", ErrorCode.invalid_request),
        (8, "x", ErrorCode.invalid_request),
    ]
    assert "segment.bytes" in results[0].error_message
    assert results[1].error_message == "The topic 'missing' does not exist."
    assert results[2].error_message == "Unknown topic config name: no.such.key"
    (broker_key,) = alter(broker, 1, (BROKER, "1", [("log.retention.ms", "1")]))
    assert broker_key.error_code == ErrorCode.invalid_request
    assert "Cannot update these configs dynamically: log.retention.ms" in broker_key.error_message
    (nothing,) = alter(broker, 1, (BROKER, "", []))
    assert nothing.error_code == ErrorCode.none  # no dynamic broker config to remove
    (null,) = alter(broker, 1, (TOPIC, "t", [("segment.bytes", None)]))
    assert (null.error_code, null.error_message) == (
        ErrorCode.invalid_request,
        "Null value not supported for : segment.bytes",
    )
    (dup,) = alter(broker, 1, (TOPIC, "t", [("segment.bytes", "4096"), ("segment.bytes", "8192")]))
    assert dup.error_code == ErrorCode.invalid_request
    assert broker.topics.get("t").configs == {"retention.ms": "5000"}
    assert broker.topics.get("u").configs == {}


def test_alter_configs_needs_alter_configs_rights(broker: FakeBroker, tmp_path: Path) -> None:
    broker.make_topic("t", 1)
    broker.authorizer = AclAuthorizer(tmp_path)
    topic, node = alter(broker, 2, (TOPIC, "t", [("segment.bytes", "4096")]), (BROKER, "1", []))
    assert (topic.error_code, node.error_code) == (
        ErrorCode.topic_authorization_failed,
        ErrorCode.cluster_authorization_failed,
    )
    assert broker.topics.get("t").configs == {}


def test_only_brokers_alter_the_internal_topics_configs(broker: FakeBroker) -> None:
    from core.server.internal_topics import BrokerTrust

    name = "__remote_log_metadata"
    broker.make_topic(name, 1, {"retention.ms": "-1"})
    for validate_only in (False, True):
        (r,) = alter(broker, 2, (TOPIC, name, [("retention.ms", "1")]), validate_only=validate_only)
        assert r.error_code == ErrorCode.policy_violation and "super.users" in r.error_message
    (r,) = alter(broker, 2, (TOPIC, "__consumer_offsets", []))
    assert r.error_code == ErrorCode.policy_violation
    assert broker.topics.get(name).configs == {"retention.ms": "-1"}
    broker.broker_trust = BrokerTrust(frozenset({"User:ANONYMOUS"}))  # as a super user
    (r,) = alter(broker, 2, (TOPIC, name, [("retention.ms", "-1"), ("segment.bytes", "4096")]))
    assert r.error_code == ErrorCode.none
    assert broker.topics.get(name).configs == {"retention.ms": "-1", "segment.bytes": "4096"}
