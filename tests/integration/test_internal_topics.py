"""Only brokers and super.users write __consumer_offsets, __transaction_state and
__remote_log_metadata, with or without an authorizer; the broker's own metadata manager and
group coordinator keep working; a forged DELETE_SEGMENT_STARTED deletes nothing.

Every broker here tiers a topic to the local-directory RSM, has a PLAINTEXT listener (an
anonymous client) and a SASL_PLAINTEXT one where ``admin`` is a super user and ``alice``
is not (tests/support/super_user.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from core.kafka_uuid import uuid_to_base64
from core.records.builder import RecordBatchBuilder
from rlmm.partitioner import metadata_partition
from rlmm.serde import serialize
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.internal_writes import (
    INTERNAL,
    TIERED,
    admin_errors,
    create_tiered_topic,
    delete_records_raw,
    manifests,
    produce_raw,
)
from tests.support.kafka_clients import Rec, consume_confluent, produce_confluent
from tests.support.super_user import client_config, sasl_bootstrap, settings
from tests.support.waiting import wait_until
from tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

METADATA_PARTITIONS = 3
NODE = 1
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def broker_settings(tmp: Path, **extra: str) -> dict[str, str]:
    return settings(
        **{
            "remote.log.storage.system.enable": "true",
            "rsm.config.storage.root": str(tmp / "bucket"),
            "rlmm.config.remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
            "remote.log.manager.task.interval.ms": "100",
            "log.retention.check.interval.ms": "200",
            "offsets.topic.num.partitions": "3",
            **extra,
        }
    )


def fill(bootstrap: str, start: int, count: int) -> list[Rec]:
    """Produce ``count`` records in batches of 5 (about 1.2 KB: several per 4 KiB segment)."""
    records = [Rec(b"k%d" % i, (b"%06d" % i) * 40) for i in range(start, start + count)]
    small_batches = {"batch.num.messages": 5}
    offsets = produce_confluent(bootstrap, TIERED, records, small_batches)
    assert offsets == list(range(start, start + count))
    return records


def produce_error(bootstrap: str, topic: str, partition: int, **config: str) -> int | None:
    """A confluent-kafka producer's delivery error code for one record (None: delivered)."""
    from confluent_kafka import Producer

    outcome: list[int | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, **config})
    producer.produce(
        topic,
        value=b"forged",
        partition=partition,
        on_delivery=lambda err, msg: outcome.append(None if err is None else err.code()),
    )
    producer.flush(20)
    assert len(outcome) == 1
    return outcome[0]


def commit_and_read_back(bootstrap: str, group: str, offset: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(TIERED, 0, offset)], asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(TIERED, 0)], timeout=20)
        return committed.offset
    finally:
        consumer.close()


@pytest.fixture(params=["no-authorizer", "authorizer"])
def tiered_broker(request, tmp_path: Path) -> Iterator[tuple[BrokerProcess, Path]]:
    extra = AUTHORIZER if request.param == "authorizer" else {}
    broker = start_broker(tmp_path / "b", broker_settings(tmp_path, **extra))
    try:
        yield broker, tmp_path
    finally:
        code = broker.stop()
        assert code == 0, broker.log_tail()


def test_clients_may_read_but_not_write_the_internal_topics(tiered_broker) -> None:
    from confluent_kafka import KafkaError

    broker, tmp = tiered_broker
    create_tiered_topic(broker.bootstrap)
    fill(broker.bootstrap, 0, 200)
    wait_until(lambda: len(manifests(tmp)) >= 3, 60, what="segments tiered by the broker's RLMM")
    assert commit_and_read_back(broker.bootstrap, "g1", 150) == 150

    alice = client_config("alice")
    for bootstrap, config in ((broker.bootstrap, {}), (sasl_bootstrap(broker), alice)):
        for topic in ("__consumer_offsets", "__remote_log_metadata"):
            error = produce_error(bootstrap, topic, 0, **config)
            assert error == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, error)
    for topic in INTERNAL:
        assert produce_raw(broker.bootstrap, topic) == ErrorCode.topic_authorization_failed
        assert delete_records_raw(broker.bootstrap, topic) == ErrorCode.policy_violation
    for config in ({}, alice):
        bootstrap = sasl_bootstrap(broker) if config else broker.bootstrap
        assert admin_errors(bootstrap, **config) == {
            "alter": KafkaError.POLICY_VIOLATION,
            "create": KafkaError.POLICY_VIOLATION,
            "delete": KafkaError.TOPIC_EXCEPTION,  # INVALID_TOPIC_EXCEPTION
        }

    # Reading stays open: the broker's metadata events are there for tools.
    mp = metadata_partition(manifests(tmp)[0].topic_id_partition, METADATA_PARTITIONS)
    events = consume_confluent(broker.bootstrap, "__remote_log_metadata", partition=mp)
    assert len(events) >= 2 * 3  # COPY_SEGMENT_STARTED and FINISHED of each copy

    # A super user may write and trim __remote_log_metadata (a partition holding none of the
    # tiered topic's events), and may not delete it either.
    other = next(p for p in range(METADATA_PARTITIONS) if p != mp)
    admin = client_config("admin")
    assert produce_error(sasl_bootstrap(broker), "__remote_log_metadata", other, **admin) is None
    assert admin_errors(sasl_bootstrap(broker), **admin) == {
        "alter": 0,
        # The broker created __transaction_state at start-up (its transaction coordinator's).
        "create": KafkaError.TOPIC_ALREADY_EXISTS,
        "delete": KafkaError.TOPIC_EXCEPTION,
    }

    # Meanwhile, and after all that, tiering and groups go on.
    copied = len(manifests(tmp))
    records = fill(broker.bootstrap, 200, 200)
    wait_until(lambda: len(manifests(tmp)) > copied + 2, 60, what="more segments tiered")
    assert commit_and_read_back(broker.bootstrap, "g1", 390) == 390
    got = consume_confluent(broker.bootstrap, TIERED)
    assert [g.value for g in got[200:]] == [r.value for r in records]


def forged_deletion(md: RemoteLogSegmentMetadata) -> bytes:
    """DELETE_SEGMENT_STARTED in the broker's own name, as a forger would write it."""
    return serialize(
        RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, 1, None, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, NODE
        )
    )


def test_a_forged_deletion_does_not_delete_the_remote_segment(tmp_path: Path) -> None:
    """Written by a super user while the broker runs, the event is refused by the metadata
    manager; written into the log while the broker is down (replayed at start-up, where it
    cannot be told from the broker's own), the remote log manager does not act on it."""
    from confluent_kafka import Producer

    broker = start_broker(tmp_path / "b", broker_settings(tmp_path))
    try:
        create_tiered_topic(broker.bootstrap)
        records = fill(broker.bootstrap, 0, 200)
        wait_until(lambda: len(manifests(tmp_path)) >= 3, 60, what="segments tiered")
        victim, second = manifests(tmp_path)[:2]
        mp = metadata_partition(victim.topic_id_partition, METADATA_PARTITIONS)

        producer = Producer({"bootstrap.servers": sasl_bootstrap(broker), **client_config()})
        producer.produce("__remote_log_metadata", value=forged_deletion(victim), partition=mp)
        assert producer.flush(20) == 0
        del producer  # librdkafka would keep reconnecting to the stopped broker
        refused = re.compile(
            rf"refused RemoteLogSegmentMetadataUpdate at __remote_log_metadata-{mp} offset \d+ "
            rf"\(segment {re.escape(uuid_to_base64(victim.segment_id))}"
        )
        wait_until(lambda: refused.search(broker.log_file.read_text()), 30, what="the refusal")
        assert victim.segment_id in {m.segment_id for m in manifests(tmp_path)}
        got = consume_confluent(broker.bootstrap, TIERED)
        assert [g.value for g in got] == [r.value for r in records]
        assert broker.stop() == 0
    finally:
        broker.kill()

    # Down: append the same forgery for the second segment to the metadata partition's log.
    from core.log.config import LogConfig
    from core.log.partition_log import PartitionLog

    data = Path(broker.settings["log.dirs"])
    plog = PartitionLog(data / f"__remote_log_metadata-{mp}", "__remote_log_metadata", mp,
                        LogConfig())  # fmt: skip
    builder = RecordBatchBuilder()
    builder.append(forged_deletion(second), key=None)
    plog.append_as_leader(builder.build(), plog.leader_epoch_cache.latest_epoch or 0)
    plog.flush()
    plog.close()

    again = start_broker(tmp_path / "b", broker.settings)
    try:
        kept = re.compile(rf"remote_delete_refused .*{second.segment_id}")
        wait_until(lambda: kept.search(again.log_file.read_text()), 30, what="the kept segment")
        assert second.segment_id in {m.segment_id for m in manifests(tmp_path)}
        assert (
            len(list((tmp_path / "bucket").rglob(f"*{uuid_to_base64(second.segment_id)}.log"))) == 1
        )
        assert again.stop() == 0
    finally:
        again.kill()
