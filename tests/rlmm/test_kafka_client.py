"""rlmm.kafka_client: KafkaMetadataTopicClient against a real tierlog broker process."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmm.kafka_client import KafkaMetadataTopicClient
from rlmm.manager import BOOTSTRAP_KEY, NUM_PARTITIONS_KEY, TopicBasedRemoteLogMetadataManager
from rlmm.topic_client import METADATA_TOPIC, MetadataTopicError
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.super_user import client_config, sasl_bootstrap, settings
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

from .rlmm_contract import MakeRlmm, RemoteLogMetadataManagerContract

PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Only brokers and super users may write __remote_log_metadata: the clients that write
    # it authenticate as the super user.
    b = start_broker(tmp_path_factory.mktemp("kafka-client") / "broker", settings())
    yield b
    if b.proc.poll() is None:
        code = b.stop()
        assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[KafkaMetadataTopicClient]:
    c = KafkaMetadataTopicClient(sasl_bootstrap(broker), timeout_s=15, **client_config())
    c.ensure_topic(PARTITIONS)
    yield c
    c.close()


def test_ensure_topic_creates_the_topic_with_kafkas_settings(
    broker: BrokerProcess, client: KafkaMetadataTopicClient
) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    assert client.partition_count() == PARTITIONS
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, METADATA_TOPIC)
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    assert configs["retention.ms"].value == "-1"
    assert configs["cleanup.policy"].value == "delete"


def test_ensure_topic_is_idempotent_and_rejects_another_partition_count(
    broker: BrokerProcess, client: KafkaMetadataTopicClient
) -> None:
    # An anonymous client may check the topic: reading it stays open.
    other = KafkaMetadataTopicClient(broker.bootstrap, timeout_s=15)
    try:
        other.ensure_topic(PARTITIONS)  # exists with the same count: nothing to do
        with pytest.raises(MetadataTopicError, match=f"has {PARTITIONS} partitions but 7"):
            other.ensure_topic(7)
    finally:
        other.close()
    assert client.partition_count() == PARTITIONS


def test_append_returns_offsets_and_read_returns_the_records(
    client: KafkaMetadataTopicClient,
) -> None:
    partition = 1
    base = client.end_offset(partition)
    offsets = [client.append(partition, f"value-{i}".encode()) for i in range(5)]
    assert offsets == list(range(base, base + 5))
    assert client.end_offset(partition) == base + 5

    records = client.read(partition, base, 100)
    assert [(r.partition, r.offset, r.value) for r in records] == [
        (partition, base + i, f"value-{i}".encode()) for i in range(5)
    ]
    # From the middle, and bounded by max_records.
    assert [r.offset for r in client.read(partition, base + 2, 2)] == [base + 2, base + 3]
    # At the end: nothing, at once.
    started = time.monotonic()
    assert client.read(partition, base + 5, 10) == []
    assert time.monotonic() - started < 5
    assert client.read(partition, base, 0) == []


def test_concurrent_appends_get_distinct_offsets(client: KafkaMetadataTopicClient) -> None:
    partition = 2
    base = client.end_offset(partition)
    results: list[int] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        for i in range(10):
            offset = client.append(partition, f"w{n}-{i}".encode())
            with lock:
                results.append(offset)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == list(range(base, base + 40))
    values = {r.value for r in client.read(partition, base, 1000)}
    assert values == {f"w{n}-{i}".encode() for n in range(4) for i in range(10)}


@pytest.mark.parametrize("user", [None, "alice"])
def test_an_ordinary_client_may_read_but_not_append(
    broker: BrokerProcess, client: KafkaMetadataTopicClient, user: str | None
) -> None:
    """Anonymous or authenticated, a principal outside super.users is refused."""
    if user is None:
        other = KafkaMetadataTopicClient(broker.bootstrap, timeout_s=5)
    else:
        other = KafkaMetadataTopicClient(sasl_bootstrap(broker), timeout_s=5, **client_config(user))
    try:
        base = client.end_offset(0)
        offset = client.append(0, b"by the super user")
        assert [r.value for r in other.read(0, offset, 10)] == [b"by the super user"]
        with pytest.raises(MetadataTopicError, match="TOPIC_AUTHORIZATION_FAILED"):
            other.append(0, b"forged")
        assert client.end_offset(0) == base + 1
    finally:
        other.close()


def test_unreachable_broker_fails_with_metadata_topic_error() -> None:
    c = KafkaMetadataTopicClient("127.0.0.1:1", timeout_s=1.5)
    try:
        with pytest.raises(MetadataTopicError):
            c.partition_count()
    finally:
        c.close()


def test_closed_client_refuses_calls(broker: BrokerProcess) -> None:
    c = KafkaMetadataTopicClient(broker.bootstrap, timeout_s=5)
    c.close()
    c.close()  # idempotent
    with pytest.raises(MetadataTopicError, match="closed"):
        c.append(0, b"x")


def test_the_manager_connects_with_bootstrap_servers(broker: BrokerProcess, tmp_path: Path) -> None:
    """TopicBasedRemoteLogMetadataManager without an attached client: configure() builds a
    KafkaMetadataTopicClient; a second manager reads the events back from the broker."""
    tp = TopicIdPartition(uuid.uuid4(), "orders", 0)
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, uuid.uuid4()), 0, 99, 1_700_000_000_000, 1, 1_700_000_000_100,
        4096, {0: 0},
    )  # fmt: skip
    # The Kafka client's settings travel under remote.log.metadata.common.client.
    configs = {
        BOOTSTRAP_KEY: sasl_bootstrap(broker),
        NUM_PARTITIONS_KEY: str(PARTITIONS),
        **{f"remote.log.metadata.common.client.{k}": v for k, v in client_config().items()},
    }
    writer = TopicBasedRemoteLogMetadataManager()
    writer.configure(configs)
    try:
        writer.on_partition_leadership_changes({tp}, set())
        writer.add_remote_log_segment_metadata(md).result(30)
        update = RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, 1_700_000_000_200, None,
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1,
        )  # fmt: skip
        writer.update_remote_log_segment_metadata(update).result(30)
    finally:
        writer.close()

    reader = TopicBasedRemoteLogMetadataManager()
    reader.configure(configs)
    try:
        reader.on_partition_leadership_changes(set(), {tp})
        assert reader.wait_ready(tp, 30)
        found = reader.remote_log_segment_metadata(tp, 0, 50)
        assert found is not None
        assert found.segment_id == md.segment_id
        assert found.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    finally:
        reader.close()


class TestTopicBasedOverKafka(RemoteLogMetadataManagerContract):
    """The RLMM contract over a real broker's ``__remote_log_metadata``, through a Kafka
    client (what ``configure`` builds without an attached client)."""

    @pytest.fixture
    def make_rlmm(self, broker: BrokerProcess, client: KafkaMetadataTopicClient) -> MakeRlmm:
        def make() -> TopicBasedRemoteLogMetadataManager:
            m = TopicBasedRemoteLogMetadataManager()
            # A super user: only brokers and super users may write the internal topic.
            m.configure(
                {
                    BOOTSTRAP_KEY: sasl_bootstrap(broker),
                    NUM_PARTITIONS_KEY: str(PARTITIONS),
                    **{
                        f"remote.log.metadata.common.client.{k}": v
                        for k, v in client_config().items()
                    },
                }
            )
            return m

        return make
