"""DescribeLogDirs, DescribeProducers and DescribeCluster against a real log manager and
replica manager: the answers a client reads."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from core.server.authorizer import AclAuthorizer, AclBinding, Operation, PatternType, Permission
from core.server.authorizer import ResourceType as AclResource
from core.server.handler_support import UNKNOWN_AUTHORIZED_OPERATIONS

from .fake_broker import FakeBroker, call, schema


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path / "logs", {"broker.rack": "r1"}, endpoint=("broker.example", 9094))
    yield b
    b.close()


def allow(broker: FakeBroker, resource: AclResource, name: str, *operations: Operation) -> None:
    if broker.authorizer is None:
        broker.authorizer = AclAuthorizer(broker.directory, frozenset())
    broker.authorizer.create(
        [
            AclBinding(
                resource, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op, Permission.ALLOW
            )
            for op in operations
        ]
    )


# -- DescribeLogDirs ----------------------------------------------------------------------------
def describe_log_dirs(broker: FakeBroker, version: int, topics: dict[str, list[int]] | None):
    s = schema(ApiKey.DESCRIBE_LOG_DIRS, version)
    wanted = (
        None
        if topics is None
        else tuple(
            s.DescribableLogDirTopic(topic=t, partitions=tuple(p)) for t, p in topics.items()
        )
    )
    return call(broker, ApiKey.DESCRIBE_LOG_DIRS, version, s.DescribeLogDirsRequest(topics=wanted))


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_log_dirs_lists_partitions_and_sizes(broker: FakeBroker, version: int) -> None:
    broker.make_topic("sized", 2)
    broker.append("sized", 1, 5)
    size = broker.replica_manager.partition("sized", 1).log.size
    assert size > 0
    response = describe_log_dirs(broker, version, None)
    assert getattr(response, "error_code", ErrorCode.none) == ErrorCode.none  # from v3
    (result,) = response.results
    assert result.error_code == ErrorCode.none
    assert result.log_dir == os.path.abspath(broker.directory)
    partitions = {
        (t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
        for t in result.topics
        for p in t.partitions
    }
    assert partitions[("sized", 1)] == (size, 0, False)
    assert partitions[("sized", 0)] == (0, 0, False)
    assert ("__consumer_offsets", 0) in partitions  # every partition when topics is null
    if version >= 4:
        assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes


def test_describe_log_dirs_only_the_partitions_asked_for(broker: FakeBroker) -> None:
    broker.make_topic("some", 3)
    response = describe_log_dirs(broker, 4, {"some": [0, 2, 7], "missing": [0]})
    (result,) = response.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
        ("some", [0, 2])
    ]
    (empty,) = describe_log_dirs(broker, 4, {}).results
    assert empty.topics == ()


def test_describe_log_dirs_needs_describe_on_the_cluster(broker: FakeBroker) -> None:
    broker.make_topic("hidden", 1)
    broker.authorizer = AclAuthorizer(broker.directory, frozenset())
    response = describe_log_dirs(broker, 4, None)
    assert (response.error_code, response.results) == (ErrorCode.cluster_authorization_failed, ())


# -- DescribeProducers --------------------------------------------------------------------------
def describe_producers(broker: FakeBroker, topics: dict[str, list[int]]):
    s = schema(ApiKey.DESCRIBE_PRODUCERS, 0)
    request = s.DescribeProducersRequest(
        topics=tuple(s.TopicRequest(name=t, partition_indexes=tuple(p)) for t, p in topics.items())
    )
    response = call(broker, ApiKey.DESCRIBE_PRODUCERS, 0, request)
    return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


def append_idempotent(
    broker: FakeBroker, topic: str, producer_id: int, epoch: int, sequence: int, count: int
) -> None:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )
    for i in range(count):
        builder.append(b"v%d" % i, timestamp=1_700_000_000_000 + sequence + i)
    partition = broker.replica_manager.partition(topic, 0)
    broker.replica_manager.append(partition, builder.build())


def test_describe_producers_reports_each_producers_state(broker: FakeBroker) -> None:
    broker.make_topic("idem", 2)
    append_idempotent(broker, "idem", 7, 2, 0, 3)
    append_idempotent(broker, "idem", 7, 2, 3, 2)
    append_idempotent(broker, "idem", 9, 0, 0, 1)
    answers = describe_producers(broker, {"idem": [0, 1, 5], "nope": [0], "bad/name": [0]})
    first = answers[("idem", 0)]
    assert first.error_code == ErrorCode.none
    states = [
        (
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            p.last_timestamp,
            p.coordinator_epoch,
            p.current_txn_start_offset,
        )
        for p in first.active_producers
    ]
    assert states == [
        (7, 2, 4, 1_700_000_000_000 + 4, -1, -1),
        (9, 0, 0, 1_700_000_000_000, -1, -1),
    ]
    assert (answers[("idem", 1)].error_code, answers[("idem", 1)].active_producers) == (
        ErrorCode.none,
        (),
    )
    assert answers[("idem", 5)].error_code == ErrorCode.unknown_topic_or_partition
    assert answers[("nope", 0)].error_code == ErrorCode.unknown_topic_or_partition
    assert answers[("bad/name", 0)].error_code == ErrorCode.invalid_topic_exception


def test_describe_producers_needs_read_on_the_topic(broker: FakeBroker) -> None:
    broker.make_topic("readable", 1)
    broker.make_topic("secret", 1)
    allow(broker, AclResource.TOPIC, "readable", Operation.READ)
    answers = describe_producers(broker, {"readable": [0], "secret": [0]})
    assert answers[("readable", 0)].error_code == ErrorCode.none
    assert answers[("secret", 0)].error_code == ErrorCode.topic_authorization_failed


def test_a_partition_not_open_yet_is_not_led_here(broker: FakeBroker) -> None:
    info = broker.topics.create("opening", 2, {})
    # Partition 1 is registered but its log is not open yet.
    broker.replica_manager.open_topic(dataclasses.replace(info, partitions=1))
    answers = describe_producers(broker, {"opening": [0, 1]})
    assert answers[("opening", 0)].error_code == ErrorCode.none
    assert answers[("opening", 1)].error_code == ErrorCode.not_leader_or_follower


# -- DescribeCluster ----------------------------------------------------------------------------
def describe_cluster(broker: FakeBroker, version: int, **fields):
    s = schema(ApiKey.DESCRIBE_CLUSTER, version)
    defaults = {"include_cluster_authorized_operations": False}
    if version >= 2:
        defaults["include_fenced_brokers"] = False
    request = s.DescribeClusterRequest(**{**defaults, **fields})
    return call(broker, ApiKey.DESCRIBE_CLUSTER, version, request)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_names_this_broker_and_the_cluster(broker: FakeBroker, version) -> None:
    response = describe_cluster(broker, version)
    assert response.error_code == ErrorCode.none
    assert (response.cluster_id, response.controller_id) == (broker.cluster_id, 1)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [
        (1, "broker.example", 9094, "r1")
    ]
    assert response.cluster_authorized_operations == UNKNOWN_AUTHORIZED_OPERATIONS


def test_describe_cluster_authorized_operations(broker: FakeBroker) -> None:
    everything = describe_cluster(broker, 1, include_cluster_authorized_operations=True)
    ops = (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
    assert everything.cluster_authorized_operations == ops
    broker.authorizer = AclAuthorizer(broker.directory, frozenset())
    nothing = describe_cluster(broker, 1, include_cluster_authorized_operations=True)
    assert nothing.cluster_authorized_operations == 0
    allow(broker, AclResource.CLUSTER, "kafka-cluster", Operation.DESCRIBE, Operation.ALTER)
    some = describe_cluster(broker, 1, include_cluster_authorized_operations=True)
    assert some.cluster_authorized_operations == (1 << 7) | (1 << 8)


def test_describe_cluster_serves_the_broker_endpoint_type_only(broker: FakeBroker) -> None:
    controllers = describe_cluster(broker, 1, endpoint_type=2)
    assert controllers.error_code == ErrorCode.mismatched_endpoint_type
    unknown = describe_cluster(broker, 2, endpoint_type=7)
    assert unknown.error_code == ErrorCode.unsupported_endpoint_type


def test_metadata_reports_authorized_operations_when_asked(broker: FakeBroker) -> None:
    """Metadata v8-v10 carry them too: librdkafka's describe_cluster and describe_topics
    read them there."""
    broker.make_topic("ops", 1)
    s = schema(ApiKey.METADATA, 10)

    def metadata(asked: bool):
        request = s.MetadataRequest(
            topics=(s.MetadataRequestTopic(name="ops", topic_id=None),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=asked,
            include_topic_authorized_operations=asked,
        )
        response = call(broker, ApiKey.METADATA, 10, request)
        (topic,) = response.topics
        return response.cluster_authorized_operations, topic.topic_authorized_operations

    assert metadata(False) == (UNKNOWN_AUTHORIZED_OPERATIONS,) * 2
    topic_ops = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    cluster_ops = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    assert metadata(True) == (cluster_ops, topic_ops)
    allow(broker, AclResource.TOPIC, "ops", Operation.READ)
    # READ implies DESCRIBE; nothing on the cluster.
    assert metadata(True) == (0, (1 << 3) | (1 << 8))
