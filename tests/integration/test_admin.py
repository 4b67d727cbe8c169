"""Admin and offset APIs through real clients: confluent-kafka's AdminClient and consumers.

CreateTopics, DeleteTopics, DescribeConfigs, IncrementalAlterConfigs, ListOffsets,
DeleteRecords, FindCoordinator, OffsetCommit and OffsetFetch, each checked for what a user
sees (metadata, configs, watermarks, committed offsets) and, where the state is durable,
again after a restart on the same data directory.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_clients import Rec, consume_confluent, produce_confluent, unique_group

TIMEOUT_S = 30.0
BASE_TS = 1_700_000_000_000


# -- helpers ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("admin") / "broker")
    yield b
    _ADMINS.pop(b.bootstrap, None)
    if b.proc.poll() is None:
        code = b.stop()
        assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"


@pytest.fixture
def restartable(broker_factory) -> Iterator[list[BrokerProcess]]:
    """``brokers[-1]`` is the live broker; brokers restarted by a test are killed at the end."""
    brokers = [broker_factory()]
    yield brokers
    _ADMINS.pop(brokers[0].bootstrap, None)
    for b in brokers[1:]:
        b.kill()


def clean_restart(brokers: list[BrokerProcess]) -> BrokerProcess:
    old = brokers[-1]
    # A fresh AdminClient for the new process: librdkafka's, reused across the restart,
    # fails delete_records with _NOENT "No leaders found" until its metadata is refreshed.
    _ADMINS.pop(old.bootstrap, None)
    code = old.stop()
    assert code == 0, f"broker exited with {code}:\n{old.log_tail()}"
    brokers.append(restart(old))
    return brokers[-1]


_ADMINS: dict[str, AdminClient] = {}


def admin(b: BrokerProcess) -> AdminClient:
    """One client per address, kept alive: a client destroyed before its futures resolve
    fails them with _DESTROY. It reconnects by itself to a broker restarted on that port."""
    if b.bootstrap not in _ADMINS:
        _ADMINS[b.bootstrap] = AdminClient({"bootstrap.servers": b.bootstrap})
    return _ADMINS[b.bootstrap]


def result(future: Future) -> Any:
    return future.result(timeout=TIMEOUT_S)


def error_code(future: Future) -> int:
    """The KafkaError code a future failed with."""
    with pytest.raises(KafkaException) as info:
        future.result(timeout=TIMEOUT_S)
    return info.value.args[0].code()


def create(b: BrokerProcess, name: str, partitions: int = 1, **config: str) -> None:
    result(admin(b).create_topics([NewTopic(name, partitions, 1, config=config)])[name])


def topic_names(b: BrokerProcess) -> set[str]:
    """Every topic, from ``kcat -L -J`` (Metadata v4; see test_admin_client_lists_all_topics
    for AdminClient.list_topics())."""
    done = subprocess.run(
        ["kcat", "-L", "-J", "-b", b.bootstrap], capture_output=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return {t["topic"] for t in json.loads(done.stdout)["topics"]}


def topic_config(b: BrokerProcess, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return result(admin(b).describe_configs([resource])[resource])


def produce_n(b: BrokerProcess, topic: str, n: int) -> None:
    records = [Rec(f"k{i}".encode(), f"v{i}".encode(), (), BASE_TS + i * 1000) for i in range(n)]
    assert produce_confluent(b.bootstrap, topic, records) == list(range(n))


def watermarks(b: BrokerProcess, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_group()})
    try:
        return consumer.get_watermark_offsets(
            TopicPartition(topic, 0), timeout=TIMEOUT_S, cached=False
        )
    finally:
        consumer.close()


# -- CreateTopics -------------------------------------------------------------------------------
def test_create_topic_with_partitions_and_configs(shared_broker: BrokerProcess):
    configs = {"segment.bytes": "1048576", "retention.ms": "3600000"}
    create(shared_broker, "adm-create", 3, **configs)
    md = admin(shared_broker).list_topics("adm-create", timeout=TIMEOUT_S).topics["adm-create"]
    assert md.error is None
    assert sorted(md.partitions) == [0, 1, 2]
    assert all(p.leader == 1 and p.replicas == [1] for p in md.partitions.values())
    described = topic_config(shared_broker, "adm-create")
    assert described["segment.bytes"].value == "1048576"
    assert described["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["retention.ms"].value == "3600000"
    assert described["cleanup.policy"].value == "delete"
    assert described["cleanup.policy"].is_default
    # Every partition takes writes.
    for p in range(3):
        records = [Rec(b"k", f"p{p}".encode())]
        produce_confluent(shared_broker.bootstrap, "adm-create", records)


def test_admin_client_lists_all_topics(shared_broker: BrokerProcess):
    """AdminClient.list_topics() with no topic: librdkafka 2.16 sends Metadata v12 with 3
    bytes after the body (Apache Kafka ignores bytes after the last field)."""
    create(shared_broker, "adm-listed")
    listed = admin(shared_broker).list_topics(timeout=TIMEOUT_S)
    assert "adm-listed" in listed.topics
    assert [b.id for b in listed.brokers.values()] == [1]


def test_create_topic_validate_only_creates_nothing(shared_broker: BrokerProcess):
    futures = admin(shared_broker).create_topics(
        [NewTopic("adm-validate-only", 2, 1)], validate_only=True
    )
    assert result(futures["adm-validate-only"]) is None
    assert "adm-validate-only" not in topic_names(shared_broker)
    # validate_only still validates.
    futures = admin(shared_broker).create_topics(
        [NewTopic("adm-validate-bad", 1, 1, config={"segment.bytes": "not-a-number"})],
        validate_only=True,
    )
    assert error_code(futures["adm-validate-bad"]) == KafkaError.INVALID_CONFIG


def test_create_topic_errors(shared_broker: BrokerProcess):
    create(shared_broker, "adm-exists")
    a = admin(shared_broker)
    cases = {
        "adm-exists": (NewTopic("adm-exists", 1, 1), KafkaError.TOPIC_ALREADY_EXISTS),
        "adm-bad-config": (
            NewTopic("adm-bad-config", 1, 1, config={"segment.bytes": "abc"}),
            KafkaError.INVALID_CONFIG,
        ),
        "adm-unknown-config": (
            NewTopic("adm-unknown-config", 1, 1, config={"no.such.config": "1"}),
            KafkaError.INVALID_CONFIG,
        ),
        "adm-rf3": (NewTopic("adm-rf3", 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
        "adm-p0": (NewTopic("adm-p0", 0, 1), KafkaError.INVALID_PARTITIONS),
    }
    futures = a.create_topics([topic for topic, _ in cases.values()])
    for name, (_, want) in cases.items():
        assert error_code(futures[name]) == want, name
    assert not {"adm-bad-config", "adm-unknown-config", "adm-rf3", "adm-p0"} & topic_names(
        shared_broker
    )


@pytest.mark.parametrize(
    "name",
    ["bad/name", "bad name", "bad:name", "ünïcode", "x" * 250, ".", ".."],
    ids=["slash", "space", "colon", "non-ascii", "250-chars", "dot", "dotdot"],
)
def test_create_topic_name_validation(shared_broker: BrokerProcess, name: str):
    futures = admin(shared_broker).create_topics([NewTopic(name, 1, 1)])
    assert error_code(futures[name]) == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION
    assert name not in topic_names(shared_broker)


def test_longest_legal_topic_name(shared_broker: BrokerProcess):
    name = "y" * 249
    create(shared_broker, name)
    assert name in topic_names(shared_broker)


# -- DeleteTopics -------------------------------------------------------------------------------
def test_delete_topic(restartable: list[BrokerProcess]):
    b = restartable[-1]
    create(b, "adm-doomed")
    produce_n(b, "adm-doomed", 5)
    result(admin(b).delete_topics(["adm-doomed"], operation_timeout=TIMEOUT_S)["adm-doomed"])
    assert "adm-doomed" not in topic_names(b)
    missing = admin(b).delete_topics(["adm-never-was"], operation_timeout=TIMEOUT_S)
    assert error_code(missing["adm-never-was"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # Deleted for good: not back after a restart, and a new topic of that name starts empty.
    b = clean_restart(restartable)
    assert "adm-doomed" not in topic_names(b)
    create(b, "adm-doomed")
    assert watermarks(b, "adm-doomed") == (0, 0)
    produce_n(b, "adm-doomed", 2)
    assert [g.value for g in consume_confluent(b.bootstrap, "adm-doomed")] == [b"v0", b"v1"]


# -- DescribeConfigs / IncrementalAlterConfigs -------------------------------------------------
def test_alter_topic_configs_persist_across_restart(restartable: list[BrokerProcess]):
    b = restartable[-1]
    create(b, "adm-configs", **{"segment.bytes": "1048576"})
    resource = ConfigResource(
        ResourceType.TOPIC,
        "adm-configs",
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    assert result(admin(b).incremental_alter_configs([resource])[resource]) is None
    want = {"retention.ms": "7200000"}

    for live in (b, clean_restart(restartable)):
        configs = topic_config(live, "adm-configs")
        assert configs["retention.ms"].value == want["retention.ms"]
        assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert not configs["retention.ms"].is_default
        # The deleted override falls back to the broker default (log.segment.bytes).
        assert configs["segment.bytes"].value == "1073741824"
        assert configs["segment.bytes"].is_default


def test_alter_configs_rejects_bad_values(shared_broker: BrokerProcess):
    create(shared_broker, "adm-bad-alter")
    a = admin(shared_broker)
    for entry in (
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.SET),
    ):
        resource = ConfigResource(ResourceType.TOPIC, "adm-bad-alter", incremental_configs=[entry])
        assert error_code(a.incremental_alter_configs([resource])[resource]) == (
            KafkaError.INVALID_CONFIG
        ), entry.name
    left = topic_config(shared_broker, "adm-bad-alter")["retention.ms"]
    assert left.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value, "a refused change stuck"
    unknown = ConfigResource(ResourceType.TOPIC, "adm-no-such-topic")
    assert error_code(a.describe_configs([unknown])[unknown]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_broker_configs(shared_broker: BrokerProcess):
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = result(admin(shared_broker).describe_configs([resource])[resource])
    assert configs["node.id"].value == "1"
    assert configs["log.segment.bytes"].value == "1073741824"
    assert "log.dirs" in configs


# -- ListOffsets --------------------------------------------------------------------------------
def test_list_offsets(shared_broker: BrokerProcess):
    produce_n(shared_broker, "adm-list-offsets", 10)  # timestamps BASE_TS + i s
    tp = TopicPartition("adm-list-offsets", 0)
    assert watermarks(shared_broker, "adm-list-offsets") == (0, 10)

    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": unique_group()})
    try:

        def offset_for(ts: int) -> int:
            (found,) = consumer.offsets_for_times(
                [TopicPartition(tp.topic, 0, ts)], timeout=TIMEOUT_S
            )
            assert found.error is None, found.error
            return found.offset

        assert offset_for(BASE_TS - 1) == 0
        assert offset_for(BASE_TS) == 0
        assert offset_for(BASE_TS + 3500) == 4  # first record at or after the timestamp
        assert offset_for(BASE_TS + 9000) == 9
        assert offset_for(BASE_TS + 10_000) == -1  # none: the end (OFFSET_END)
    finally:
        consumer.close()

    specs = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), 10),
        "max-timestamp": (OffsetSpec.max_timestamp(), 9),
        "for-timestamp": (OffsetSpec.for_timestamp(BASE_TS + 2000), 2),
    }
    a = admin(shared_broker)
    for what, (spec, want) in specs.items():
        info = result(a.list_offsets({tp: spec})[tp])
        assert info.offset == want, what
    info = result(a.list_offsets({tp: OffsetSpec.max_timestamp()})[tp])
    assert info.timestamp == BASE_TS + 9000


# -- DeleteRecords ------------------------------------------------------------------------------
def test_delete_records_moves_log_start(restartable: list[BrokerProcess]):
    b = restartable[-1]
    produce_n(b, "adm-delete-records", 10)
    tp = TopicPartition("adm-delete-records", 0, 4)
    deleted = result(admin(b).delete_records([tp])[tp])
    assert deleted.low_watermark == 4
    assert watermarks(b, "adm-delete-records") == (4, 10)
    got = consume_confluent(b.bootstrap, "adm-delete-records", config={})
    assert [g.offset for g in got] == [4, 5, 6, 7, 8, 9]

    beyond = TopicPartition("adm-delete-records", 0, 11)
    assert error_code(admin(b).delete_records([beyond])[beyond]) == (KafkaError.OFFSET_OUT_OF_RANGE)

    b = clean_restart(restartable)
    assert watermarks(b, "adm-delete-records") == (4, 10)
    # Offset -1 means "up to the high watermark": everything.
    everything = TopicPartition("adm-delete-records", 0, -1)
    assert result(admin(b).delete_records([everything])[everything]).low_watermark == 10
    assert watermarks(b, "adm-delete-records") == (10, 10)


# -- OffsetCommit / OffsetFetch -----------------------------------------------------------------
def group_consumer(b: BrokerProcess, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def committed_with_kafka_python(b: BrokerProcess, group: str, topic: str) -> tuple[int, str]:
    """(offset, metadata) of partition 0 as OffsetFetch returns them.

    The metadata is read with kafka-python, which decodes the length-prefixed string as sent.
    confluent-kafka 2.16 handles offset metadata as C strings: its commit() sends the
    terminating NUL along ("checkpoint-a\\0" on the wire), and its committed() reads past
    the end of metadata that has none (seen: 'from-kafka-pythonnt.byte!' for a value
    committed by kafka-python; librdkafka issue #4649 is the same family).
    """
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    tp = KTopicPartition(topic, 0)
    kc = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        found = kc._coordinator.fetch_committed_offsets([tp], timeout_ms=TIMEOUT_S * 1000)
    finally:
        kc.close()
    return found[tp].offset, found[tp].metadata


def test_committed_offsets_survive_restart(restartable: list[BrokerProcess]):
    b = restartable[-1]
    produce_n(b, "adm-commits", 10)
    group = unique_group()
    consumer = group_consumer(b, group)
    try:
        consumer.assign([TopicPartition("adm-commits", 0, OFFSET_BEGINNING)])
        read = []
        while len(read) < 7:
            msg = consumer.poll(TIMEOUT_S)
            assert msg is not None and not msg.error(), msg and msg.error()
            read.append(msg.offset())
        committed = consumer.commit(
            offsets=[TopicPartition("adm-commits", 0, 7, metadata="checkpoint-a")],
            asynchronous=False,
        )
        assert all(tp.error is None for tp in committed), committed
        (fetched,) = consumer.committed([TopicPartition("adm-commits", 0)], timeout=TIMEOUT_S)
        assert fetched.offset == 7
    finally:
        consumer.close()

    for live in (b, clean_restart(restartable)):
        # A new member of the group resumes from the committed offset.
        consumer = group_consumer(live, group)
        try:
            (fetched,) = consumer.committed([TopicPartition("adm-commits", 0)], timeout=TIMEOUT_S)
            assert fetched.offset == 7
            offset, metadata = committed_with_kafka_python(live, group, "adm-commits")
            # confluent-kafka 2.16 commits the str's terminating NUL too: b"checkpoint-a\0".
            assert (offset, metadata.rstrip("\x00")) == (7, "checkpoint-a")
            consumer.assign([TopicPartition("adm-commits", 0, OFFSET_STORED)])
            msg = consumer.poll(TIMEOUT_S)
            assert msg is not None and not msg.error(), msg and msg.error()
            assert (msg.offset(), msg.value()) == (7, b"v7")
        finally:
            consumer.close()


def test_offsets_of_unknown_group_and_other_clients(shared_broker: BrokerProcess):
    produce_n(shared_broker, "adm-commits-x", 3)
    consumer = group_consumer(shared_broker, unique_group())
    try:
        (fetched,) = consumer.committed([TopicPartition("adm-commits-x", 0)], timeout=TIMEOUT_S)
        assert fetched.offset < 0, "no offset committed yet (OFFSET_INVALID)"
    finally:
        consumer.close()

    # kafka-python commits, confluent-kafka reads it back (OffsetCommit/OffsetFetch at other
    # versions).
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    group = unique_group()
    ktp = KTopicPartition("adm-commits-x", 0)
    kc = KafkaConsumer(
        bootstrap_servers=shared_broker.bootstrap, group_id=group, enable_auto_commit=False
    )
    try:
        kc.assign([ktp])
        kc.commit({ktp: OffsetAndMetadata(2, "from-kafka-python", -1)})
        assert kc.committed(ktp) == 2
    finally:
        kc.close()
    assert committed_with_kafka_python(shared_broker, group, "adm-commits-x") == (
        2,
        "from-kafka-python",
    )
    consumer = group_consumer(shared_broker, group)
    try:
        (fetched,) = consumer.committed([TopicPartition("adm-commits-x", 0)], timeout=TIMEOUT_S)
        assert fetched.offset == 2
    finally:
        consumer.close()
