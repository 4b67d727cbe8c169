"""``tierlog metadata verify`` and ``tierlog restore`` against real brokers on S3 (issue 18).

Real broker processes, S3 over moto's HTTP server (or ``TIERLOG_S3_ENDPOINT``), the tools run
as the ``tierlog`` command in child processes, real clients:

1. a healthy tier verifies with exit 0; a deleted object and a planted orphan are both named
   (exit 1); ``--repair --yes`` removes the orphan and a second verify passes;
2. a broker SIGKILLed and its log dirs deleted, a new broker restored from the bucket: topic
   id, partitions and configs kept; every tiered record read back from offset 0 identical
   with confluent-kafka and kcat; new records appended after; an idempotent producer's
   sequence state carries on; the new broker tiers what follows;
3. a bucket holding a branch an unclean election left: verify notes it, restore takes the
   canonical lineage, and the branch, now an orphan, is repaired away. The branch is written
   directly (two replicas' logs copied in turn through the RSM and RLMM, as
   tests/support/tiered_data.py does), so that its shape is chosen; the version with a real
   unclean election (KIP-405's scenario 5 in a cluster) is
   tests/integration/test_restore_after_unclean_election.py.

The broker's config file is passed to the tools as it is (``--rsm-config`` and ``--config``).
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_clients import Got, consume_confluent, consume_kcat
from tests.support.kafka_wire import call
from tests.support.s3_harness import (
    Bucket,
    local_segment_bases,
    metadata_segments,
    tiering_settings,
)
from tests.support.waiting import wait_until

KIB = 1024
VALUE_BYTES = 1000
PARTITIONS = 3
TOPIC_CONFIGS = {
    "segment.bytes": str(64 * KIB),
    "local.retention.bytes": str(64 * KIB),
    "remote.storage.enable": "true",
    "retention.ms": "-1",
    "max.message.bytes": "200000",
    "message.timestamp.type": "CreateTime",
}
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


# -- data and clients -------------------------------------------------------------------------
def key(p: int, i: int) -> bytes:
    return b"p%d-k%d" % (p, i)


def value(p: int, i: int) -> bytes:
    head = b"%d|%08d|" % (p, i)
    return (head * (VALUE_BYTES // len(head) + 1))[:VALUE_BYTES]


def produce(bootstrap: str, topic: str, partition: int, start: int, count: int) -> list[int]:
    """Records ``start..start+count-1`` of ``partition`` with an idempotent producer; the
    offsets acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.size": 32 * KIB,
        }
    )
    offsets: dict[int, int] = {}
    errors: list[Any] = []

    def report(i: int):
        def done(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets[i] = msg.offset()

        return done

    for i in range(start, start + count):
        while True:
            try:
                producer.produce(
                    topic, key=key(partition, i), value=value(partition, i),
                    partition=partition, on_delivery=report(i),
                )  # fmt: skip
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    return [offsets[i] for i in range(start, start + count)]


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=configs)]).values():
        future.result(30)


def alter_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def describe(bootstrap: str, topic: str) -> tuple[str, int, dict[str, str]]:
    """(topic id, partition count, topic-level config overrides) as a client sees them."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_topics(TopicCollection([topic])).values()
    description = future.result(30)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    (configs,) = admin.describe_configs([resource]).values()
    overrides = {
        name: entry.value
        for name, entry in configs.result(30).items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }
    return str(description.topic_id), len(description.partitions), overrides


def leader_epochs(bootstrap: str, topic: str, partition: int) -> list[int]:
    """The leader epoch of every record of the partition, in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e-{uuid.uuid4().hex}"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[int] = []
        while len(out) < high:
            msg = consumer.poll(30)
            assert msg is not None and not msg.error(), msg and msg.error()
            out.append(msg.leader_epoch())
        return out
    finally:
        consumer.close()


def init_producer_id(bootstrap: str) -> tuple[int, int]:
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.static.primitive import i16, i64

    request = InitProducerIdRequest(
        transactional_id=None,
        transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=i64(-1),
        producer_epoch=i16(-1),
    )
    response = call(bootstrap, ApiKey.INIT_PRODUCER_ID, 4, request)
    assert response.error_code == 0
    return int(response.producer_id), int(response.producer_epoch)


def produce_sequenced(
    bootstrap: str, topic: str, pid: int, epoch: int, sequence: int, values: list[bytes]
) -> tuple[int, int]:
    """One batch of an idempotent producer to partition 0: (error code, base offset)."""
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.static.primitive import i16, i32

    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=sequence)
    for v in values:
        builder.append(v, key=b"idempotent")
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(index=i32(0), records=bytes(builder.build())),
                ),
            ),
        ),
    )
    (topic_response,) = call(bootstrap, ApiKey.PRODUCE, 9, request, timeout_s=30).responses
    answer = topic_response.partition_responses[0]
    return int(answer.error_code), int(answer.base_offset)


# -- the tools ----------------------------------------------------------------------------------
def tierlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierlog", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def verify(bootstrap: str, config: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = tierlog("metadata", "verify", "--bootstrap-server", bootstrap,
                   "--rsm-config", str(config), "--json", *args)  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def write_config(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def quiescent(broker: BrokerProcess, topic: str, partitions: int) -> bool:
    """Every rolled segment of every partition copied; no copy or deletion in progress."""
    segments = metadata_segments(broker.bootstrap, topic)
    if any(s["state"] != "COPY_SEGMENT_FINISHED" for s in segments):
        return False
    for p in range(partitions):
        ends = [s["end_offset"] for s in segments if s["partition"] == p]
        if not ends or max(ends) + 1 != local_segment_bases(broker, topic, p)[-1]:
            return False
    return True


def by_key(findings: list[dict[str, Any]]) -> dict[str, str]:
    return {f["key"]: f["kind"] for f in findings}


# -- 1. verify and repair -----------------------------------------------------------------------
def test_verify_names_a_deleted_object_and_an_orphan_and_repair_removes_the_orphan(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess]
) -> None:
    settings = tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    broker = start_broker(tmp_path / "b", settings)
    brokers.append(broker)
    topic = "audited"
    create_topic(broker.bootstrap, topic, 2, TOPIC_CONFIGS)
    for p in range(2):
        produce(broker.bootstrap, topic, p, 0, 300)
    wait_until(lambda: quiescent(broker, topic, 2), 120, 0.5, what="every rolled segment copied")
    config = write_config(tmp_path / "server.properties", broker.settings)

    code, doc = verify(broker.bootstrap, config)
    assert code == 0, doc["findings"]
    assert [p["partition"] for p in doc["partitions"]] == [0, 1]

    objects = bucket.objects(topic)
    deleted = next(o.key for o in objects if o.key.endswith(".timeindex"))
    saved = bucket.client.get_object(Bucket=bucket.name, Key=deleted)["Body"].read()
    bucket.client.delete_object(Bucket=bucket.name, Key=deleted)
    folder = deleted.rsplit("/", 1)[0]
    orphan = f"{folder}/{99_999_999:020d}-{_kafka_uuid()}.log"
    bucket.client.put_object(Bucket=bucket.name, Key=orphan, Body=b"a copy that never finished")
    # The tier is quiescent: no copy is in progress, so no grace is needed to judge.
    code, doc = verify(broker.bootstrap, config, "--grace-period", "0")
    assert code == 1
    assert by_key(doc["findings"]) == {deleted: "missing_object", orphan: "orphan"}

    bucket.client.put_object(Bucket=bucket.name, Key=deleted, Body=saved)
    code, doc = verify(broker.bootstrap, config, "--grace-period", "0", "--repair", "--yes")
    assert code == 0, doc
    assert doc["repair"]["deleted_objects"] == [orphan]
    assert orphan not in {o.key for o in bucket.objects(topic)}
    code, doc = verify(broker.bootstrap, config, "--grace-period", "0")
    assert code == 0, doc["findings"]
    # The broker still serves what it tiered.
    got = consume_confluent(broker.bootstrap, topic, partition=1)
    assert [(g.key, g.value) for g in got] == [(key(1, i), value(1, i)) for i in range(300)]


def _kafka_uuid() -> str:
    from core.kafka_uuid import uuid_to_base64

    return uuid_to_base64(uuid.uuid4())


# -- 2. restore a broker that lost its disks ----------------------------------------------------
def test_a_broker_that_lost_its_disks_is_restored_from_the_bucket(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess]
) -> None:
    settings = tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    old = start_broker(tmp_path / "old", settings)
    brokers.append(old)
    topic = "restored"
    create_topic(old.bootstrap, topic, PARTITIONS, TOPIC_CONFIGS)
    # A config changed after creation: the broker rewrites the topic manifest.
    alter_config(old.bootstrap, topic, "max.message.bytes", "300000")
    before = describe(old.bootstrap, topic)
    assert before[2]["max.message.bytes"] == "300000"
    produced: dict[int, dict[int, tuple[bytes, bytes]]] = {p: {} for p in range(PARTITIONS)}
    # Three leader epochs (each start of the broker begins one), so that the restored
    # lineage and the new broker's epochs must line up.
    for phase, count in enumerate((150, 150, 100)):
        if phase:
            assert old.stop() == 0
            old = restart(old)
            brokers.append(old)
        for p in range(PARTITIONS):
            offsets = produce(old.bootstrap, topic, p, phase * 1000, count)
            produced[p].update({o: (key(p, phase * 1000 + i), value(p, phase * 1000 + i))
                                for i, o in enumerate(offsets)})  # fmt: skip
    # An idempotent producer's batches on partition 0, followed by enough records that the
    # segment holding them is copied (the producer state ships with each copied segment).
    pid, epoch = init_producer_id(old.bootstrap)
    sent = [[b"idem-%d-%d" % (s, j) for j in range(5)] for s in range(3)]
    idempotent_offsets = []
    for s, values in enumerate(sent):
        code, base = produce_sequenced(old.bootstrap, topic, pid, epoch, 5 * s, values)
        assert code == 0
        idempotent_offsets.append(base)
        for j, v in enumerate(values):
            produced[0][base + j] = (b"idempotent", v)
    offsets = produce(old.bootstrap, topic, 0, 5000, 200)
    produced[0].update({o: (key(0, 5000 + i), value(0, 5000 + i)) for i, o in enumerate(offsets)})
    wait_until(lambda: quiescent(old, topic, PARTITIONS), 180, 0.5, what="tiered")
    old_segments = {s["segment_id"] for s in metadata_segments(old.bootstrap, topic)}
    old.kill()
    shutil.rmtree(old.settings["log.dirs"])

    new_settings = {**settings, "log.dirs": str(tmp_path / "new" / "data")}
    config = write_config(tmp_path / "server.properties", {"node.id": "1", **new_settings})
    done = tierlog("restore", "--config", str(config), "--topic", topic, "--json")
    assert done.returncode == 0, done.stderr
    assert "tierlog: restore:" in done.stderr  # progress lines
    (summary,) = json.loads(done.stdout)["topics"]
    ends = {p["partition"]: p["next_offset"] for p in summary["partition_details"]}
    assert summary["segments"] == len(old_segments)
    assert {p["latest_epoch"] for p in summary["partition_details"]} == {2}
    assert ends[0] > max(idempotent_offsets) + 5, "the idempotent batches were tiered"

    new = start_broker(tmp_path / "new", new_settings)
    brokers.append(new)
    assert describe(new.bootstrap, topic) == before, "topic id, partitions and configs kept"
    for p in range(PARTITIONS):
        got = consume_confluent(new.bootstrap, topic, partition=p)
        want = [(o, *produced[p][o]) for o in range(ends[p])]
        assert [(g.offset, g.key, g.value) for g in got] == want, f"partition {p} differs"
    for p in range(PARTITIONS):
        kcat = consume_kcat(new.bootstrap, topic, partition=p)
        want = [(o, *produced[p][o]) for o in range(ends[p])]
        assert [(g.offset, g.key, g.value) for g in kcat] == want, f"kcat: partition {p} differs"

    # The idempotent producer carries on: its last batch again is a duplicate (answered with
    # its original offset), the next sequence is appended, a gap is refused.
    last = len(sent) - 1
    code, base = produce_sequenced(new.bootstrap, topic, pid, epoch, 5 * last, sent[last])
    assert (code, base) == (0, idempotent_offsets[last])
    code, base = produce_sequenced(new.bootstrap, topic, pid, epoch, 5 * len(sent), [b"next"])
    assert (code, base) == (0, ends[0])
    code, _ = produce_sequenced(new.bootstrap, topic, pid, epoch, 5 * len(sent) + 7, [b"gap"])
    assert code == OUT_OF_ORDER_SEQUENCE_NUMBER
    # New records go after the restored ones, and the new broker tiers them in turn.
    for p in range(PARTITIONS):
        first = produce(new.bootstrap, topic, p, 10_000, 150)[0]
        assert first == ends[p] + (1 if p == 0 else 0)
    wait_until(lambda: quiescent(new, topic, PARTITIONS), 180, 0.5, what="new segments tiered")
    segments = metadata_segments(new.bootstrap, topic)
    assert old_segments <= {s["segment_id"] for s in segments}, "restored segments kept"
    assert len(segments) > len(old_segments), "segments after the restore copied"
    got = consume_confluent(new.bootstrap, topic, partition=1)
    assert [(g.key, g.value) for g in got[: ends[1]]] == [produced[1][o] for o in range(ends[1])]
    # The new broker leads in an epoch after the restored ones, as clients see in records.
    epochs = leader_epochs(new.bootstrap, topic, 1)
    assert epochs == sorted(epochs) and epochs[0] == 0 and epochs[-1] == 3, sorted(set(epochs))
    code, doc = verify(new.bootstrap, config)
    assert code == 0, doc["findings"]
    # Restoring it again is refused, naming it.
    new.stop()
    done = tierlog("restore", "--config", str(config), "--topic", topic)
    assert done.returncode == 1 and f"topic {topic} exists" in done.stderr


# -- 3. a diverged branch -----------------------------------------------------------------------
def test_a_diverged_branch_is_verified_and_restore_takes_the_canonical_lineage(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess]
) -> None:
    from tests.support.tiered_data import TierWriter, write_diverged

    settings = tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    settings["rlmm.config.remote.log.metadata.topic.num.partitions"] = "3"
    lost = tmp_path / "lost" / "data"
    writer = TierWriter(tmp_path, settings, lost)
    try:
        branches = write_diverged(writer)
    finally:
        writer.close()
    topic = branches.tp.topic
    new_settings = {**settings, "log.dirs": str(tmp_path / "new" / "data")}
    config = write_config(tmp_path / "server.properties", {"node.id": "1", **new_settings})

    done = tierlog("metadata", "verify", "--log-dirs", str(lost), "--rsm-config", str(config),
                   "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout
    notes = json.loads(done.stdout)["notes"]
    noted = {n["message"].split()[1] for n in notes if n["kind"] == "off_lineage"}
    assert noted == {_b64(md.segment_id) for md in branches.diverged}

    done = tierlog("restore", "--config", str(config), "--topic", topic, "--json")
    assert done.returncode == 0, done.stderr
    (detail,) = json.loads(done.stdout)["topics"][0]["partition_details"]
    assert detail["left_out"] == len(branches.diverged)
    new = start_broker(tmp_path / "new", new_settings)
    brokers.append(new)
    got: list[Got] = consume_confluent(new.bootstrap, topic)
    assert [(g.offset, g.key, g.value) for g in got] == [
        (o, *branches.canonical[o]) for o in sorted(branches.canonical)
    ]
    # The branch restore left out is now an orphan: named, then repaired away.
    code, doc = verify(new.bootstrap, config, "--grace-period", "0")
    assert code == 1
    diverged = {_b64(md.segment_id) for md in branches.diverged}
    assert {f["kind"] for f in doc["findings"]} == {"orphan"}
    assert all(any(d in f["key"] for d in diverged) for f in doc["findings"])
    code, doc = verify(new.bootstrap, config, "--grace-period", "0", "--repair", "--yes")
    assert code == 0, doc
    code, doc = verify(new.bootstrap, config, "--grace-period", "0")
    assert code == 0, doc["findings"]


def _b64(value: uuid.UUID) -> str:
    from core.kafka_uuid import uuid_to_base64

    return uuid_to_base64(value)


pytestmark = pytest.mark.timeout(600)
