"""``tierlog restore`` into a cluster, end to end (issue 18): three real broker processes and
ZooKeeper, S3 over moto's HTTP server (or ``TIERLOG_S3_ENDPOINT``), real clients.

A tiered topic (replication factor 2) is produced by idempotent producers until several
segments are copied to the bucket. Then the whole cluster is lost: every broker SIGKILLed,
every log dir deleted, and the ZooKeeper data with them (the new cluster has a chroot of its
own): what a user who lost the disks of a ZooKeeper-mode cluster has left is the bucket. A
new cluster of three brokers tiering to the same bucket is started, ``tierlog restore
--config FILE --topic T`` (the CLI, in a child process) recreates the topic, and:

- the topic id, partition count and topic configs are the lost cluster's;
- every tiered record reads back from offset 0 identical, with confluent-kafka and kcat;
- the restored producer state is there: DescribeProducers (API 61) lists the old idempotent
  producer with its last sequence, its last batch sent again is answered as a duplicate
  with its original offset, its next sequence is appended right after the remote tier, a
  gap is refused; a new idempotent producer gets a producer id of its own and appends after;
- the new leaders lead in an epoch after the restored lineage's, and tier on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.static.primitive import i32

from core.server.api_keys import ApiKey
from tests.integration.test_remote_tools import (
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    TOPIC_CONFIGS,
    alter_config,
    describe,
    init_producer_id,
    key,
    leader_epochs,
    produce,
    produce_sequenced,
    tierlog,
    value,
    write_config,
)
from tests.support.cluster import DEADLINE_S, Cluster, cluster_factory  # noqa: F401 - fixture
from tests.support.kafka_clients import consume_confluent, consume_kcat
from tests.support.kafka_wire import call
from tests.support.s3_harness import Bucket, local_segment_bases, metadata_segments
from tests.support.s3_harness import tiering_settings as s3_tiering_settings
from tests.support.waiting import wait_until

TOPIC = "orders"
PARTITIONS = 2
REPLICATION = 2
FINISHED = "COPY_SEGMENT_FINISHED"


def tiering_settings(s3_endpoint: Any, bucket: Bucket) -> dict[str, str]:
    return {
        **s3_tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name),
        # Replicas that were down catch up and the ISR follows within seconds.
        "min.insync.replicas": "1",
    }


def wait_metadata_topic(cluster: Cluster) -> None:
    # The remote tiers create __remote_log_metadata once three brokers are registered; a
    # first attempt made before a controller is known waits out librdkafka's request
    # timeout (30 s) before the next one, hence two deadlines.
    cluster.wait_topic("__remote_log_metadata", 3, 3, timeout=2 * DEADLINE_S)


def leader_bootstrap(cluster: Cluster, partition: int) -> str:
    return cluster.brokers[cluster.leader(TOPIC, partition)].bootstrap


def quiescent(cluster: Cluster) -> bool:
    """Every rolled segment of every partition copied by its leader; nothing in progress."""
    segments = metadata_segments(cluster.bootstrap, TOPIC)
    if any(s["state"] != FINISHED for s in segments):
        return False
    for p in range(PARTITIONS):
        ends = [s["end_offset"] for s in segments if s["partition"] == p]
        leader = cluster.brokers[cluster.leader(TOPIC, p)]
        if len(ends) < 3 or max(ends) + 1 != local_segment_bases(leader, TOPIC, p)[-1]:
            return False
    return True


def served(cluster: Cluster) -> bool:
    """Every partition's leader answers ListOffsets: its log has started after the remote
    tier (until then it answers NOT_LEADER_OR_FOLLOWER)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "served"})
    try:
        for p in range(PARTITIONS):
            consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=5)
        return True
    except KafkaException:
        return False
    finally:
        consumer.close()


def producers_of(bootstrap: str, partition: int) -> dict[int, tuple[int, int]]:
    """DescribeProducers (API 61) of a partition: producer id -> (epoch, last sequence)."""
    request = DescribeProducersRequest(
        topics=(TopicRequest(name=TOPIC, partition_indexes=(i32(partition),)),)
    )
    (topic,) = call(bootstrap, ApiKey.DESCRIBE_PRODUCERS, 0, request, timeout_s=30).topics
    (answer,) = topic.partitions
    assert answer.error_code == 0, answer
    return {
        int(p.producer_id): (int(p.producer_epoch), int(p.last_sequence))
        for p in answer.active_producers
    }


def test_a_lost_cluster_is_restored_from_the_bucket_into_a_new_cluster(
    tmp_path: Path,
    s3_endpoint: Any,
    bucket: Bucket,
    cluster_factory,  # noqa: F811
) -> None:
    settings = tiering_settings(s3_endpoint, bucket)
    old = cluster_factory(3, settings)
    wait_metadata_topic(old)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": old.bootstrap})
    new_topic = NewTopic(TOPIC, PARTITIONS, REPLICATION, config=TOPIC_CONFIGS)
    for future in admin.create_topics([new_topic]).values():
        future.result(DEADLINE_S)
    old.wait_topic(TOPIC, PARTITIONS, REPLICATION)
    # A config changed after creation: the topic manifest in the bucket follows it.
    alter_config(old.bootstrap, TOPIC, "max.message.bytes", "300000")
    wait_until(
        lambda: describe(old.bootstrap, TOPIC)[2].get("max.message.bytes") == "300000",
        DEADLINE_S,
        0.5,
        what="the config change seen by clients",
    )
    before = describe(old.bootstrap, TOPIC)

    produced: dict[int, dict[int, tuple[bytes, bytes]]] = {p: {} for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        offsets = produce(leader_bootstrap(old, p), TOPIC, p, 0, 300)
        produced[p].update({o: (key(p, i), value(p, i)) for i, o in enumerate(offsets)})
    # An idempotent producer's batches on partition 0, then enough records that the segment
    # holding them is copied (the producer state ships with each copied segment).
    pid, epoch = init_producer_id(leader_bootstrap(old, 0))
    sent = [[b"idem-%d-%d" % (s, j) for j in range(5)] for s in range(3)]
    idempotent_offsets = []
    for s, values in enumerate(sent):
        code, base = produce_sequenced(leader_bootstrap(old, 0), TOPIC, pid, epoch, 5 * s, values)
        assert code == 0
        idempotent_offsets.append(base)
        for j, v in enumerate(values):
            produced[0][base + j] = (b"idempotent", v)
    offsets = produce(leader_bootstrap(old, 0), TOPIC, 0, 5000, 200)
    produced[0].update({o: (key(0, 5000 + i), value(0, 5000 + i)) for i, o in enumerate(offsets)})
    wait_until(lambda: quiescent(old), 180, 0.5, what="every rolled segment tiered")
    old_segments = {s["segment_id"] for s in metadata_segments(old.bootstrap, TOPIC)}

    # The whole cluster is lost: brokers, their disks, and ZooKeeper's data.
    for broker_id in list(old.brokers):
        old.kill(broker_id)
    shutil.rmtree(old.base_dir)

    new = cluster_factory(3, settings)
    wait_metadata_topic(new)
    config = write_config(tmp_path / "restore.properties", new.brokers[1].settings)
    done = tierlog(
        "restore", "--config", str(config), "--topic", TOPIC, "--json",
        "--replication-factor", str(REPLICATION),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tierlog: restore:" in done.stderr  # progress lines
    (summary,) = json.loads(done.stdout)["topics"]
    assert summary["segments"] == len(old_segments)
    ends = {p["partition"]: p["next_offset"] for p in summary["partition_details"]}
    assert ends[0] > max(idempotent_offsets) + 5, "the idempotent batches were tiered"
    new.wait_topic(TOPIC, PARTITIONS, REPLICATION, timeout=2 * DEADLINE_S)
    wait_until(lambda: served(new), 2 * DEADLINE_S, 0.5, what="the restored partitions served")
    assert describe(new.bootstrap, TOPIC) == before, "topic id, partitions and configs kept"

    # Every tiered record from offset 0, served from the bucket.
    for p in range(PARTITIONS):
        want = [(o, *produced[p][o]) for o in range(ends[p])]
        got = consume_confluent(new.bootstrap, TOPIC, partition=p, retry_retriable=True)
        assert [(g.offset, g.key, g.value) for g in got] == want, f"partition {p} differs"
        kcat = consume_kcat(new.bootstrap, TOPIC, partition=p)
        assert [(g.offset, g.key, g.value) for g in kcat] == want, f"kcat: partition {p} differs"

    # The restored producer state: the old producer and its last sequence are there, its
    # last batch again is a duplicate, its next sequence goes right after the remote tier.
    leader0 = leader_bootstrap(new, 0)
    last = len(sent) - 1
    assert producers_of(leader0, 0).get(pid) == (epoch, 5 * len(sent) - 1)
    code, base = produce_sequenced(leader0, TOPIC, pid, epoch, 5 * last, sent[last])
    assert (code, base) == (0, idempotent_offsets[last])
    code, base = produce_sequenced(leader0, TOPIC, pid, epoch, 5 * len(sent), [b"next"])
    assert (code, base) == (0, ends[0])
    code, _ = produce_sequenced(leader0, TOPIC, pid, epoch, 5 * len(sent) + 7, [b"gap"])
    assert code == OUT_OF_ORDER_SEQUENCE_NUMBER

    # New idempotent producers get producer ids of their own (the restored ones are
    # reserved in the new ZooKeeper: one handed out again would meet the restored sequences
    # and be refused) and append after the restored records.
    for p in range(PARTITIONS):
        restored = set(producers_of(leader_bootstrap(new, p), p))
        offsets = produce(leader_bootstrap(new, p), TOPIC, p, 10_000, 150)
        assert offsets[0] == ends[p] + (1 if p == 0 else 0)
        produced[p].update({o: (key(p, 10_000 + i), value(p, 10_000 + i))
                            for i, o in enumerate(offsets)})  # fmt: skip
        assert set(producers_of(leader_bootstrap(new, p), p)) > restored
    wait_until(lambda: quiescent(new), 180, 0.5, what="segments after the restore tiered")
    segments = {s["segment_id"] for s in metadata_segments(new.bootstrap, TOPIC)}
    assert old_segments < segments, "restored segments kept, new ones copied"
    # The new leaders lead in the epoch after the restored lineage's (0): records say so.
    epochs = leader_epochs(new.bootstrap, TOPIC, 1)
    assert set(epochs[: ends[1]]) == {0} and set(epochs[ends[1] :]) == {1}, sorted(set(epochs))
    got = consume_confluent(new.bootstrap, TOPIC, partition=1)
    assert [(g.offset, g.key, g.value) for g in got] == [
        (o, *produced[1][o]) for o in sorted(produced[1])
    ]
