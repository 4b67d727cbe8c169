"""Compacted topics on a real broker: the cleaner keeps the latest record per key, keeps a
tombstone for delete.retention.ms after the cleaning that first kept it and drops it after,
refuses keyless records, and compaction cannot be combined with tiering."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess, restart
from tests.support.waiting import wait_until

TOPIC = "compacted"
KEYS = 20
ROUNDS = 40
READ_TIMEOUT_S = 60.0
# Longer than any test run: a tombstone the cleaner keeps is still there for every read of
# the test, however slow the machine (KIP-534: its delete horizon is the cleaning's time plus
# delete.retention.ms, stamped in its batch).
DELETE_RETENTION_KEPT_MS = 24 * 3600 * 1000


def admin(broker: BrokerProcess) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(broker: BrokerProcess, name: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(broker)  # kept alive until the answer: a collected client cancels it
    client.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)


def read_all(
    broker: BrokerProcess, topic: str = TOPIC
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of the whole partition, from the log start to its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:  # up to the end: the partition-EOF event, not a quiet second
            assert time.monotonic() < deadline, f"{topic}: read {len(out)} records, no end"
            for m in consumer.consume(1000, 1.0):
                if m.error() is None:
                    out.append((m.offset(), m.key(), m.value()))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                else:
                    raise AssertionError(f"{topic}: {m.error()}")
    finally:
        consumer.close()


def produce(
    broker: BrokerProcess, records: list[tuple[bytes, bytes | None]], topic: str = TOPIC
) -> None:
    from confluent_kafka import Producer

    # batch.size below the 4 KiB segments of the compaction test: a larger produce is
    # refused with RECORD_BATCH_TOO_LARGE, as in Kafka.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.size": 2048})
    failures: list[str] = []
    for key, value in records:
        producer.produce(
            topic,
            key=key,
            value=value,
            on_delivery=lambda err, _m: err is not None and failures.append(str(err)),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []


def latest(rows: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for _, key, value in rows:
        assert key is not None
        out[key] = value
    return out


def test_the_cleaner_keeps_the_latest_value_per_key_and_then_drops_tombstones(
    broker_factory,
) -> None:
    """Two topics written alike: on one a tombstone outlives the test (delete.retention.ms a
    day), so every read after the cleaning sees it; on the other (delete.retention.ms 0) a
    later cleaning drops it. Neither outcome depends on how fast the reads are."""
    broker: BrokerProcess = broker_factory({"log.cleaner.backoff.ms": "100"})
    kept, dropped = TOPIC, f"{TOPIC}-short"
    for topic, delete_retention_ms in ((kept, DELETE_RETENTION_KEPT_MS), (dropped, 0)):
        create(
            broker,
            topic,
            {
                "cleanup.policy": "compact",
                "segment.bytes": "4096",
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": str(delete_retention_ms),
            },
        )
    written = [(b"k%02d" % k, b"v%d-%d" % (k, r)) for r in range(ROUNDS) for k in range(KEYS)]
    for topic in (kept, dropped):
        produce(broker, written, topic)
        produce(broker, [(b"k05", None)], topic)  # delete k05
        # Later writes of other keys roll the tombstone's segment out of the active one.
        produce(broker, [(b"filler", b"x" * 200) for _ in range(40)], topic)
    expected = latest(
        [(0, k, v) for k, v in written] + [(0, b"k05", None), (0, b"filler", b"x" * 200)]
    )

    def compacted() -> bool:
        rows = read_all(broker, kept)
        return len(rows) < len(written) / 4 and latest(rows) == expected

    wait_until(compacted, 60, 0.5, what="the cleaner compacting the topic")
    rows = read_all(broker, kept)
    offsets = [o for o, _, _ in rows]
    assert offsets == sorted(set(offsets))  # offsets kept, never reused
    assert (b"k05", None) in [(k, v) for _, k, v in rows]  # the delete is still visible

    # Past its delete horizon (the cleaning that kept it, plus 0 ms), a later cleaning drops
    # the tombstone: no record of k05 remains, and every other key keeps its latest value.
    del expected[b"k05"]
    wait_until(
        lambda: latest(read_all(broker, dropped)) == expected,
        60,
        0.5,
        what="the tombstone dropped after delete.retention.ms",
    )
    assert (b"k05", None) in [(k, v) for _, k, v in read_all(broker, kept)]  # still there

    # The cleaned logs survive a SIGKILL and restart.
    before = {topic: latest(read_all(broker, topic)) for topic in (kept, dropped)}
    broker.kill()
    broker = restart(broker)
    assert {topic: latest(read_all(broker, topic)) for topic in (kept, dropped)} == before
    broker.kill()


def test_a_compacted_topic_refuses_records_without_a_key(broker_factory) -> None:
    from confluent_kafka import KafkaError, Producer

    broker: BrokerProcess = broker_factory()
    create(broker, TOPIC, {"cleanup.policy": "compact"})
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(TOPIC, value=b"no key", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD
    produce(broker, [(b"k", b"with key")])
    assert [(k, v) for _, k, v in read_all(broker)] == [(b"k", b"with key")]
    broker.kill()


BATCH = [(b"a", b"v0"), (None, b"v1"), (b"c", b"v2"), (None, b"v3"), (b"e", b"v4")]
KEYLESS = [1, 3]  # the indexes of the records without a key in BATCH
WHY = f"Compacted topic cannot accept message without key in topic partition {TOPIC}-0."


def test_librdkafka_learns_which_records_of_its_batch_were_refused(broker_factory) -> None:
    """Produce v8+ names the keyless records (KIP-467). librdkafka (confluent-kafka 2.16)
    fails those with INVALID_RECORD and the rest of their batch with the local
    _INVALID_DIFFERENT_RECORD, retrying none; the application resends the others."""
    from confluent_kafka import KafkaError, Producer

    broker: BrokerProcess = broker_factory()
    create(broker, TOPIC, {"cleanup.policy": "compact"})
    reports: dict[int, Any] = {}
    # One batch: every record is queued long before the linger ends.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    for i, (key, value) in enumerate(BATCH):
        producer.produce(
            TOPIC,
            key=key,
            value=value,
            partition=0,
            on_delivery=lambda e, _m, i=i: reports.update({i: e}),
        )
    assert producer.flush(30) == 0
    codes = {i: (e.code(), e.retriable()) for i, e in reports.items()}
    assert codes == {
        i: (
            KafkaError.INVALID_RECORD if i in KEYLESS else KafkaError._INVALID_DIFFERENT_RECORD,
            False,
        )
        for i in range(len(BATCH))
    }
    assert read_all(broker) == []  # nothing of the batch was appended
    produce(broker, [r for i, r in enumerate(BATCH) if i not in KEYLESS])
    assert read_all(broker) == [(0, b"a", b"v0"), (1, b"c", b"v2"), (2, b"e", b"v4")]
    broker.kill()


def test_kafka_python_learns_which_records_of_its_batch_were_refused(broker_factory) -> None:
    """kafka-python fails the keyless records with the broker's per-record message and the
    others of their batch with a generic error, as Kafka's Java producer does."""
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError, KafkaError

    broker: BrokerProcess = broker_factory()
    create(broker, TOPIC, {"cleanup.policy": "compact"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=1000)
    futures = [producer.send(TOPIC, key=k, value=v, partition=0) for k, v in BATCH]
    producer.flush(30)
    producer.close(10)
    failures = {i: f.exception for i, f in enumerate(futures)}
    for i, error in failures.items():
        if i in KEYLESS:
            assert isinstance(error, InvalidRecordError) and WHY in str(error), (i, error)
        else:
            assert type(error) is KafkaError, (i, error)
            assert "part of a batch which had one more more invalid records" in str(error)
    assert read_all(broker) == []
    broker.kill()


@pytest.mark.parametrize(
    "configs",
    [
        {"cleanup.policy": "compact", "remote.storage.enable": "true"},
        {"cleanup.policy": "compact,delete", "remote.storage.enable": "true"},
    ],
)
def test_compaction_and_tiering_cannot_be_combined(broker_factory, configs) -> None:
    from confluent_kafka import KafkaException

    broker: BrokerProcess = broker_factory()
    with pytest.raises(KafkaException) as e:
        create(broker, "tiered-compacted", configs)
    assert "cleanup.policy" in str(e.value) and "remote" in str(e.value)
    broker.kill()
