"""Tiered storage end to end with a real broker: copy, local retention, remote reads.

The remote tier here is the local-directory RSM (the embedded default); the S3 runs are in
the RSM plugin suites and the benchmarks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_wire import list_offset_answer
from tests.support.waiting import wait_until

MAX_TIMESTAMP = -3  # ListOffsets: the record with the largest timestamp (KIP-734)
LATEST = -1

N = 20_000
TOPIC = "tiered"


def settings(tmp: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.root": str(tmp / "bucket"),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "300",
        "remote.partition.remover.task.interval.ms": "300",
    }


def value(i: int) -> bytes:
    return (b"%08d" % i) * 30


def create_and_fill(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = {
        "segment.bytes": "200000",
        "local.retention.bytes": "200000",
        "remote.storage.enable": "true",
        "retention.ms": "-1",
    }
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)]).values():
        future.result(30)
    # Batches must fit in a segment (the broker refuses a produce larger than segment.bytes
    # with RECORD_BATCH_TOO_LARGE, as Kafka does); librdkafka's default batch.size is 1 MB.
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 5,
            "enable.idempotence": True,
            "batch.size": 100_000,
        }
    )
    failures: list[str] = []
    for i in range(N):
        producer.produce(
            TOPIC,
            key=str(i).encode(),
            value=value(i),
            on_delivery=lambda err, _m: err is not None and failures.append(str(err)),
        )
        if i % 2000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []


def local_start(broker: BrokerProcess, topic: str = TOPIC) -> int:
    d = Path(broker.settings["log.dirs"]) / f"{topic}-0"
    logs = sorted(p.name for p in d.glob("*.log"))
    return int(logs[0].split(".")[0]) if logs else 0


def remote_objects(tmp: Path) -> list[str]:
    return [f for _, _, files in os.walk(tmp / "bucket") for f in files]


def consume_all(bootstrap: str) -> list[tuple[int, bytes, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiering-test",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < N:
            assert time.monotonic() < deadline, f"read {len(got)} of {N} records"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert not msg.error(), msg.error()
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def assert_identical(got: list[tuple[int, bytes, bytes]]) -> None:
    assert len(got) == N
    for i, (offset, key, val) in enumerate(got):
        assert (offset, key, val) == (i, str(i).encode(), value(i)), f"record {i}"


def test_old_segments_move_to_the_remote_tier_and_read_back_identical(tmp_path):
    broker = start_broker(tmp_path / "b", settings(tmp_path))
    try:
        create_and_fill(broker)
        # Local retention frees the disk once segments are copied.
        wait_until(lambda: local_start(broker) > N // 2, 60, what="local segments deleted")
        assert any(name.endswith(".manifest.json") for name in remote_objects(tmp_path))
        assert_identical(consume_all(broker.bootstrap))
        # kcat (librdkafka 2.0) reads the same history from offset 0.
        out = subprocess.run(
            [
                "kcat",
                "-b",
                broker.bootstrap,
                "-C",
                "-t",
                TOPIC,
                "-o",
                "beginning",
                "-e",
                "-q",
                "-f",
                "%o %k\\n",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.split("\n")
        lines = [line for line in out if line]
        assert len(lines) == N
        assert lines[0] == "0 0" and lines[-1] == f"{N - 1} {N - 1}"
    finally:
        broker.kill()


def test_remote_history_survives_a_restart_and_metadata_is_listed(tmp_path):
    broker = start_broker(tmp_path / "b", settings(tmp_path))
    try:
        create_and_fill(broker)
        wait_until(lambda: local_start(broker) > N // 2, 60, what="local segments deleted")
        assert broker.stop() == 0
        broker = restart(broker)
        assert_identical(consume_all(broker.bootstrap))
        listing = subprocess.run(
            [
                sys.executable,
                "-m",
                "tierlog",
                "metadata",
                "list",
                "--bootstrap-server",
                broker.bootstrap,
                "--topic",
                TOPIC,
                "--state",
                "COPY_SEGMENT_FINISHED",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        segments = json.loads(listing.stdout)["segments"]
        assert segments, "copied segments are listed"
        assert segments[0]["start_offset"] == 0
    finally:
        broker.kill()


def test_deleting_a_tiered_topic_empties_the_bucket(tmp_path):
    broker = start_broker(tmp_path / "b", settings(tmp_path))
    try:
        create_and_fill(broker)
        wait_until(lambda: len(remote_objects(tmp_path)) > 10, 60, what="segments copied")
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.delete_topics([TOPIC]).values():
            future.result(30)
        wait_until(lambda: remote_objects(tmp_path) == [], 60, what="remote data deleted")
    finally:
        broker.kill()


def test_max_timestamp_record_only_in_the_remote_tier(tmp_path):
    # ListOffsets -3 answers the first record carrying the largest timestamp (Kafka since
    # KAFKA-16310: the record's offset, not its batch's last) over both tiers: here that
    # record's segment has gone remote and its local copy is deleted.
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = "tiered-max-ts"
    base = int(time.time() * 1000) - 3_600_000
    broker = start_broker(tmp_path / "b", settings(tmp_path))
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        config = {
            "segment.bytes": "16384",
            "local.retention.bytes": "16384",
            "remote.storage.enable": "true",
            "retention.ms": "-1",
        }
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs=config)])
        admin.close()
        # A long linger puts the first three records in one batch.
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=2000)
        first = [
            producer.send(topic, b"x" * 100, partition=0, timestamp_ms=base + ts)
            for ts in (100, 400, 200)
        ]
        producer.flush(30)
        assert [f.get(30).offset for f in first] == [0, 1, 2]
        for _ in range(600):  # later records, all older than the max
            producer.send(topic, b"y" * 300, partition=0, timestamp_ms=base)
        producer.flush(30)
        producer.close(10)
        wait_until(lambda: local_start(broker, topic) > 2, 60, what="first segment only remote")

        ts, offset, epoch = list_offset_answer(broker.bootstrap, topic, 0, MAX_TIMESTAMP)
        assert (ts, offset) == (base + 400, 1)
        assert epoch == list_offset_answer(broker.bootstrap, topic, 0, LATEST)[2]

        # After a restart (a new leader epoch) the record's batch keeps its own epoch.
        assert broker.stop() == 0
        broker = restart(broker)
        assert list_offset_answer(broker.bootstrap, topic, 0, LATEST)[2] > epoch
        assert list_offset_answer(broker.bootstrap, topic, 0, MAX_TIMESTAMP) == (
            base + 400,
            1,
            epoch,
        )
    finally:
        broker.kill()
