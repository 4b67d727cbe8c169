"""Admin handlers against a real topic registry, log manager and replica manager.

Each request is framed and decoded by the protocol codec as a client's would be, handled,
then the response is encoded and decoded again: the assertions see what a client sees.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from core.server.api_keys import ApiKey
from core.server.group_offsets import CommittedOffset, GroupOffsetStore

from .fake_broker import FakeBroker, call, schema

TIMEOUT = datetime.timedelta(seconds=30)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path, {"log.segment.bytes": "1048576"})
    yield b
    b.close()


# -- DeleteTopics -----------------------------------------------------------------------------
def delete_by_name(broker: FakeBroker, version: int, *names: str) -> Any:
    s = schema(ApiKey.DELETE_TOPICS, version)
    if version >= 6:
        topics = tuple(s.DeleteTopicState(name=n, topic_id=None) for n in names)
        request = s.DeleteTopicsRequest(topics=topics, timeout=TIMEOUT)
    else:
        request = s.DeleteTopicsRequest(topic_names=names, timeout=TIMEOUT)
    return call(broker, ApiKey.DELETE_TOPICS, version, request)


@pytest.mark.parametrize("version", [1, 3, 5, 6])
def test_delete_topics_by_name(broker: FakeBroker, version: int) -> None:
    broker.make_topic("doomed", 2)
    broker.append("doomed", 0, 3)
    response = delete_by_name(broker, version, "doomed", "missing")
    codes = {r.name: r.error_code for r in response.responses}
    assert codes == {"doomed": ErrorCode.none, "missing": ErrorCode.unknown_topic_or_partition}
    assert broker.topics.get("doomed") is None
    assert broker.replica_manager.partition("doomed", 0) is None


def test_delete_topics_by_id_at_v6(broker: FakeBroker) -> None:
    info = broker.make_topic("by-id", 1)
    s = schema(ApiKey.DELETE_TOPICS, 6)
    unknown = uuid.uuid4()
    request = s.DeleteTopicsRequest(
        topics=(
            s.DeleteTopicState(name=None, topic_id=info.topic_id),
            s.DeleteTopicState(name=None, topic_id=unknown),
            s.DeleteTopicState(name="by-id", topic_id=unknown),
        ),
        timeout=TIMEOUT,
    )
    ok, missing, both = call(broker, ApiKey.DELETE_TOPICS, 6, request).responses
    assert (ok.name, ok.topic_id, ok.error_code) == ("by-id", info.topic_id, ErrorCode.none)
    assert (missing.name, missing.error_code) == (None, ErrorCode.unknown_topic_id)
    assert both.error_code == ErrorCode.invalid_request
    assert broker.topics.get("by-id") is None


def test_delete_topics_refuses_internal_and_duplicates(broker: FakeBroker) -> None:
    broker.make_topic("twice", 1)  # __consumer_offsets exists, as on every broker
    response = delete_by_name(broker, 6, "__consumer_offsets", "twice", "twice")
    codes = [r.error_code for r in response.responses]
    assert codes == [ErrorCode.invalid_topic_exception] + [ErrorCode.invalid_request] * 2
    assert broker.topics.get("__consumer_offsets") is not None
    assert broker.topics.get("twice") is not None


@pytest.mark.parametrize(
    ("version", "code"), [(1, ErrorCode.invalid_request), (6, ErrorCode.topic_deletion_disabled)]
)
def test_delete_topics_disabled(tmp_path: Path, version: int, code: ErrorCode) -> None:
    b = FakeBroker(tmp_path, {"delete.topic.enable": "false"})
    try:
        b.make_topic("kept", 1)
        (result,) = delete_by_name(b, version, "kept").responses
        assert result.error_code == code
        assert b.topics.get("kept") is not None
    finally:
        b.close()


def test_delete_topics_drops_committed_offsets(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    broker.make_topic("other", 1)
    broker.group_offsets.commit(
        "g", {("t", 0): CommittedOffset(5), ("other", 0): CommittedOffset(7)}
    )
    delete_by_name(broker, 6, "t")
    assert broker.group_offsets.group_offsets("g") == {("other", 0): CommittedOffset(7)}
    assert GroupOffsetStore(broker.storage.journal).fetch("g", "t", 0) is None  # replayed: gone


# -- DescribeConfigs --------------------------------------------------------------------------
def describe(broker: FakeBroker, version: int, *resources: tuple[int, str, Any], **flags) -> Any:
    s = schema(ApiKey.DESCRIBE_CONFIGS, version)
    request = s.DescribeConfigsRequest(
        resources=tuple(
            s.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k)
            for t, n, k in resources
        ),
        **flags,
    )
    return call(broker, ApiKey.DESCRIBE_CONFIGS, version, request)


def test_describe_topic_configs_v1_sources(broker: FakeBroker) -> None:
    broker.make_topic("t", 1, {"retention.ms": "1000"})
    (result,) = describe(broker, 1, (2, "t", None)).results
    assert result.error_code == ErrorCode.none
    by_name = {c.name: c for c in result.configs}
    assert set(by_name) >= {"retention.ms", "segment.bytes", "cleanup.policy"}
    assert (by_name["retention.ms"].value, by_name["retention.ms"].config_source) == ("1000", 1)
    assert (by_name["segment.bytes"].value, by_name["segment.bytes"].config_source) == (
        "1048576",
        4,
    )
    assert (by_name["cleanup.policy"].value, by_name["cleanup.policy"].config_source) == (
        "delete",
        5,
    )
    assert all(not c.read_only and not c.is_sensitive and c.synonyms == () for c in result.configs)


def test_describe_topic_configs_v4_synonyms_types_docs(broker: FakeBroker) -> None:
    broker.make_topic("t", 1, {"segment.bytes": "2048"})
    (result,) = describe(
        broker,
        4,
        (2, "t", ("segment.bytes", "cleanup.policy", "remote.storage.enable", "no.such.key")),
        include_synonyms=True,
        include_documentation=True,
    ).results
    by_name = {c.name: c for c in result.configs}
    assert set(by_name) == {"segment.bytes", "cleanup.policy", "remote.storage.enable"}
    seg = by_name["segment.bytes"]
    assert [(s.name, s.value, s.source) for s in seg.synonyms] == [
        ("segment.bytes", "2048", 1),
        ("log.segment.bytes", "1048576", 4),
        ("log.segment.bytes", "1073741824", 5),
    ]
    assert (seg.config_type, by_name["cleanup.policy"].config_type) == (3, 7)
    assert by_name["remote.storage.enable"].config_type == 1
    assert seg.documentation


def test_describe_configs_errors(broker: FakeBroker) -> None:
    results = describe(broker, 4, (2, "missing", None), (4, "7", None), (99, "x", None)).results
    assert [r.error_code for r in results] == [
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]
    assert all(r.error_message for r in results)


def test_describe_broker_configs(broker: FakeBroker) -> None:
    node, default = describe(broker, 4, (4, "1", None), (4, "", None)).results
    by_name = {c.name: c for c in node.configs}
    assert by_name["node.id"].value == "1"
    assert by_name["node.id"].read_only and by_name["node.id"].config_source == 4
    assert by_name["ssl.key.password"].value is None and by_name["ssl.key.password"].is_sensitive
    assert default.error_code == ErrorCode.none and default.configs == ()


# -- IncrementalAlterConfigs ------------------------------------------------------------------
def alter(broker: FakeBroker, version: int, *resources: Any, validate_only: bool = False) -> Any:
    s = schema(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    request = s.IncrementalAlterConfigsRequest(
        resources=tuple(
            s.AlterConfigsResource(
                resource_type=t,
                resource_name=n,
                configs=tuple(
                    s.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops
                ),
            )
            for t, n, ops in resources
        ),
        validate_only=validate_only,
    )
    return call(broker, ApiKey.INCREMENTAL_ALTER_CONFIGS, version, request).responses


@pytest.mark.parametrize("version", [0, 1])
def test_alter_set_delete_append_subtract(broker: FakeBroker, version: int) -> None:
    broker.make_topic("t", 1, {"retention.ms": "5000"})
    (r,) = alter(
        broker,
        version,
        (
            2,
            "t",
            [
                ("segment.bytes", 0, "4096"),
                ("retention.ms", 1, None),
                ("cleanup.policy", 2, "compact"),
            ],
        ),
    )
    assert r.error_code == ErrorCode.none
    assert broker.topics.get("t").configs == {
        "segment.bytes": "4096",
        "cleanup.policy": "delete,compact",
    }
    assert broker.replica_manager.partition("t", 0).log.config.segment_bytes == 4096  # live
    (r,) = alter(broker, version, (2, "t", [("cleanup.policy", 3, "delete")]))
    assert r.error_code == ErrorCode.none
    assert broker.topics.get("t").configs["cleanup.policy"] == "compact"


def test_alter_validate_only_changes_nothing(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    (r,) = alter(broker, 1, (2, "t", [("segment.bytes", 0, "4096")]), validate_only=True)
    assert r.error_code == ErrorCode.none
    assert broker.topics.get("t").configs == {}


def test_alter_errors(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    results = alter(
        broker,
        1,
        (2, "t", [("segment.bytes", 0, "-5")]),
        (2, "missing", [("segment.bytes", 0, "4096")]),
        (4, "1", [("log.retention.ms", 0, "1")]),
        (8, "x", []),
    )
    codes = [r.error_code for r in results]
    assert codes == [
        ErrorCode.invalid_config,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]
    assert "segment.bytes" in results[0].error_message
    assert "log.retention.ms" in results[2].error_message
    (append_int,) = alter(broker, 1, (2, "t", [("segment.bytes", 2, "1")]))
    assert append_int.error_code == ErrorCode.invalid_config
    (unknown,) = alter(broker, 1, (2, "t", [("no.such.key", 0, "1")]))
    assert unknown.error_code == ErrorCode.invalid_config and "no.such.key" in unknown.error_message
    (dup,) = alter(broker, 1, (2, "t", [("segment.bytes", 0, "1"), ("segment.bytes", 1, None)]))
    assert dup.error_code == ErrorCode.invalid_request
    assert broker.topics.get("t").configs == {}


# -- DeleteRecords ----------------------------------------------------------------------------
def delete_records(broker: FakeBroker, version: int, name: str, *offsets: tuple[int, int]) -> Any:
    s = schema(ApiKey.DELETE_RECORDS, version)
    request = s.DeleteRecordsRequest(
        topics=(
            s.DeleteRecordsTopic(
                name=name,
                partitions=tuple(
                    s.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets
                ),
            ),
        ),
        timeout=TIMEOUT,
    )
    (topic,) = call(broker, ApiKey.DELETE_RECORDS, version, request).topics
    return [(p.partition_index, p.error_code, p.low_watermark) for p in topic.partitions]


@pytest.mark.parametrize("version", [0, 2])
def test_delete_records(broker: FakeBroker, version: int) -> None:
    broker.make_topic("t", 3)
    broker.append("t", 0, 10)
    broker.append("t", 1, 4)
    assert delete_records(broker, version, "t", (0, 6), (1, -1), (2, 1), (3, 0)) == [
        (0, ErrorCode.none, 6),
        (1, ErrorCode.none, 4),
        (2, ErrorCode.offset_out_of_range, -1),
        (3, ErrorCode.unknown_topic_or_partition, -1),
    ]
    assert broker.replica_manager.partition("t", 0).log.log_start_offset == 6
    # Never backwards: a lower offset leaves the low watermark where it is.
    assert delete_records(broker, version, "t", (0, 2)) == [(0, ErrorCode.none, 6)]


def test_delete_records_of_a_compacted_topic_is_a_policy_violation(broker: FakeBroker) -> None:
    broker.make_topic("c", 1, {"cleanup.policy": "compact"})
    assert delete_records(broker, 2, "c", (0, 0)) == [(0, ErrorCode.policy_violation, -1)]


# -- the internal topics ----------------------------------------------------------------------
def test_only_brokers_trim_or_reconfigure_the_internal_topics(broker: FakeBroker) -> None:
    """A client, whatever the ACLs, may not delete records of or alter the configs of
    __remote_log_metadata (or the other two); a super user may; nobody deletes them."""
    from core.server.internal_topics import BrokerTrust

    name = "__remote_log_metadata"
    broker.make_topic(name, 2, {"retention.ms": "-1"})
    broker.append(name, 0, 5)
    assert delete_records(broker, 2, name, (0, 3)) == [(0, ErrorCode.policy_violation, -1)]
    for validate_only in (False, True):
        (r,) = alter(broker, 1, (2, name, [("retention.ms", 0, "1")]), validate_only=validate_only)
        assert r.error_code == ErrorCode.policy_violation and "super.users" in r.error_message
    (r,) = alter(broker, 1, (2, "__consumer_offsets", [("cleanup.policy", 0, "delete")]))
    assert r.error_code == ErrorCode.policy_violation
    (r,) = delete_by_name(broker, 6, name).responses
    assert r.error_code == ErrorCode.invalid_topic_exception
    assert broker.topics.get(name).configs == {"retention.ms": "-1"}
    assert broker.replica_manager.partition(name, 0).log.log_start_offset == 0

    broker.broker_trust = BrokerTrust(frozenset({"User:ANONYMOUS"}))  # as a super user
    assert delete_records(broker, 2, name, (0, 3)) == [(0, ErrorCode.none, 3)]
    (r,) = alter(broker, 1, (2, name, [("segment.bytes", 0, "4096")]))
    assert r.error_code == ErrorCode.none
    (r,) = delete_by_name(broker, 6, name).responses
    assert r.error_code == ErrorCode.invalid_topic_exception


# -- OffsetForLeaderEpoch ---------------------------------------------------------------------
def epochs(broker: FakeBroker, version: int, *parts: tuple[int, int, int]) -> list[tuple]:
    s = schema(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    request = s.OffsetForLeaderEpochRequest(
        topics=(
            s.OffsetForLeaderTopic(
                topic="t",
                partitions=tuple(
                    s.OffsetForLeaderPartition(partition=p, current_leader_epoch=c, leader_epoch=e)
                    for p, c, e in parts
                ),
            ),
        ),
    )
    (topic,) = call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, version, request).topics
    return [(r.partition, r.error_code, r.leader_epoch, r.end_offset) for r in topic.partitions]


@pytest.mark.parametrize("version", [2, 4])
def test_offset_for_leader_epoch(broker: FakeBroker, version: int) -> None:
    broker.make_topic("t", 1)
    partition = broker.replica_manager.partition("t", 0)
    broker.append("t", 0, 5)  # epoch 0: offsets 0-4
    partition.leader_epoch = 3
    broker.append("t", 0, 2)  # epoch 3: offsets 5-6
    assert epochs(broker, version, (0, 3, 0), (0, -1, 1), (0, 3, 3), (0, -1, 9)) == [
        (0, ErrorCode.none, 0, 5),
        (0, ErrorCode.none, 0, 5),
        (0, ErrorCode.none, 3, 7),
        (0, ErrorCode.none, -1, -1),
    ]
    assert epochs(broker, version, (0, 2, 0), (0, 4, 0), (1, -1, 0)) == [
        (0, ErrorCode.fenced_leader_epoch, -1, -1),
        (0, ErrorCode.unknown_leader_epoch, -1, -1),
        (1, ErrorCode.unknown_topic_or_partition, -1, -1),
    ]


def test_describe_sources_follow_the_broker_config_originals(tmp_path: Path) -> None:
    b = FakeBroker(tmp_path, {"log.retention.hours": "24"})
    try:
        b.make_topic("t", 1)
        (topic, node) = describe(
            b,
            4,
            (2, "t", ("retention.ms", "segment.bytes")),
            (4, "1", None),
            include_synonyms=True,
        ).results
        by_name = {c.name: c for c in topic.configs}
        retention = by_name["retention.ms"]
        # Kafka's rule: the synonyms of log.retention.ms start at log.retention.ms itself, so
        # log.retention.hours does not show; the value is the one it gives, the source the
        # default (Kafka's ConfigHelper.configSynonyms, dropWhile).
        assert (retention.value, retention.config_source) == ("86400000", 5)
        assert retention.synonyms == ()
        assert by_name["segment.bytes"].config_source == 5
        sources = {c.name: c.config_source for c in node.configs}
        assert sources["log.retention.hours"] == 4 and sources["log.segment.bytes"] == 5
    finally:
        b.close()


# -- ACLs -------------------------------------------------------------------------------------
def describe_all_acls(broker: Any) -> Any:
    s = schema(ApiKey.DESCRIBE_ACLS, 3)
    request = s.DescribeAclsRequest(
        resource_type_filter=i8(1),
        resource_name_filter=None,
        pattern_type_filter=i8(1),
        principal_filter=None,
        host_filter=None,
        operation=i8(1),
        permission_type=i8(1),
    )
    return call(broker, ApiKey.DESCRIBE_ACLS, 3, request)


def test_acl_apis_answer_security_disabled_or_cluster_authorization_failed(
    broker: FakeBroker, tmp_path: Path
) -> None:
    from core.server.authorizer import AclAuthorizer

    broker.authorizer = None
    assert describe_all_acls(broker).error_code == ErrorCode.security_disabled
    broker.authorizer = AclAuthorizer(tmp_path)  # User:ANONYMOUS has no cluster ACL
    assert describe_all_acls(broker).error_code == ErrorCode.cluster_authorization_failed
    broker.authorizer = AclAuthorizer(tmp_path, ["User:ANONYMOUS"])
    response = describe_all_acls(broker)
    assert response.error_code == ErrorCode.none and response.resources == ()


def test_topic_handlers_refuse_what_acls_do_not_allow(broker: FakeBroker, tmp_path: Path) -> None:
    from core.server.authorizer import AclAuthorizer

    broker.make_topic("secret", 1)
    broker.authorizer = AclAuthorizer(tmp_path)
    (result,) = delete_by_name(broker, 6, "secret").responses
    assert result.error_code == ErrorCode.topic_authorization_failed
    assert broker.topics.get("secret") is not None


# -- ElectLeaders -----------------------------------------------------------------------------
def test_elect_leaders_with_an_unknown_election_type_is_a_bad_request(broker: FakeBroker) -> None:
    s = schema(ApiKey.ELECT_LEADERS, 2)
    request = s.ElectLeadersRequest(
        election_type=i8(-88),
        topic_partitions=(s.TopicPartitions(topic="t", partitions=(0,)),),
        timeout=TIMEOUT,
    )
    response = call(broker, ApiKey.ELECT_LEADERS, 2, request)
    assert response.error_code == ErrorCode.invalid_request
    [result] = response.replica_election_results
    [partition] = result.partition_result
    assert (result.topic, partition.partition_id) == ("t", 0)
    assert partition.error_code == ErrorCode.invalid_request
    assert "unknown election type -88" in partition.error_message
