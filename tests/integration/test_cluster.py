"""A three-broker tierlog cluster on a real ZooKeeper, driven by real clients.

Each test starts its own cluster (``cluster_factory``: its own ZooKeeper chroot, brokers
1-3 as ``tierlog broker start`` processes) and crashes brokers with SIGKILL. What the
tests wait for is what ZooKeeper records (controller, leaders, ISRs); what they assert is
what a client sees: acknowledged records read back exactly once, produce errors, committed
offsets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaProducer
from kafka.errors import NotEnoughReplicasError

from core.server.coordinator_records import partition_for
from tests.support.cluster import DEADLINE_S
from tests.support.cluster_clients import (
    BackgroundProducer,
    assert_read_exactly_once,
    consume_all,
    create_topic,
    produce,
    wait_replicas_identical,
)

BROKERS = [1, 2, 3]


def tierlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierlog", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S * 2,
    )


def poll_offsets(consumer: Consumer, count: int) -> list[int]:
    """The offsets of the first ``count`` records the consumer reads (within the deadline)."""
    offsets: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(offsets) < count:
        assert time.monotonic() < deadline, f"read {len(offsets)} of {count} records"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            offsets.append(message.offset())
    return offsets


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def test_a_replicated_topic_survives_the_crash_of_a_leader(cluster_factory) -> None:
    cluster = cluster_factory()
    create_topic(cluster, "orders", 3, configs={"min.insync.replicas": "2"})
    acked = produce(cluster, "orders", values("first", 300))
    assert {p for p, _, _ in acked} == {0, 1, 2}
    # Every replica holds the same bytes as its leader.
    wait_replicas_identical(cluster, "orders", 3, BROKERS)

    leader = cluster.leader("orders", 0)
    isr_before = cluster.isr("orders", 0)
    cluster.kill(leader)
    survivors = [b for b in isr_before if b != leader]
    new_leader = cluster.wait_leader("orders", 0, among=survivors)
    assert new_leader != leader
    acked += produce(cluster, "orders", values("second", 300))
    assert_read_exactly_once(acked, consume_all(cluster, "orders", 3))

    # Back, it truncates to its new leaders' logs and rejoins every ISR.
    cluster.restart(leader)
    for p in range(3):
        cluster.wait_isr("orders", p, 3)
    wait_replicas_identical(cluster, "orders", 3, BROKERS)
    assert_read_exactly_once(acked, consume_all(cluster, "orders", 3))

    # Leadership goes back to the first replica when asked (kafka-leader-election.sh's way).
    preferred = cluster.replicas("orders", 0)[0]
    result = tierlog(
        "cluster", "elect-leaders", "--preferred", "--partition", "orders:0",
        "--bootstrap-server", cluster.bootstrap,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert cluster.wait_leader("orders", 0, among=[preferred]) == preferred


def test_min_insync_replicas_refuses_acks_all_and_acks_1_still_works(cluster_factory) -> None:
    cluster = cluster_factory()
    create_topic(cluster, "strict", 1, configs={"min.insync.replicas": "2"})
    leader = cluster.leader("strict", 0)
    for follower in (b for b in BROKERS if b != leader):
        cluster.kill(follower)
    cluster.wait(lambda: cluster.isr("strict", 0) == [leader], "an ISR of the leader alone")
    bootstrap = cluster.brokers[leader].bootstrap

    # kafka-python with no retries: the broker's answer is the error the client raises.
    strict = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(NotEnoughReplicasError):
            strict.send("strict", b"refused").get(timeout=DEADLINE_S)
    finally:
        strict.close()
    relaxed = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    try:
        kept = relaxed.send("strict", b"kept").get(timeout=DEADLINE_S)
    finally:
        relaxed.close()

    # The refused record was never appended: the acks=1 record is the first.
    assert kept.offset == 0
    for follower in (b for b in BROKERS if b != leader):
        cluster.restart(follower)
    cluster.wait_isr("strict", 0, 3)
    # With the ISR back, acks=all is acknowledged again.
    produce(cluster, "strict", [b"after"])
    assert [v for _, _, v in sorted(consume_all(cluster, "strict", 1))] == [b"kept", b"after"]


def test_the_cluster_keeps_working_when_its_controller_crashes(cluster_factory) -> None:
    cluster = cluster_factory()
    create_topic(cluster, "before", 3)
    acked = produce(cluster, "before", values("before", 100))
    controller = cluster.controller()
    assert controller is not None
    cluster.kill(controller)
    others = [b for b in BROKERS if b != controller]
    assert cluster.wait_controller(among=others) != controller
    # Its leaderships moved, and the new controller serves topic creation.
    for p in range(3):
        cluster.wait_leader("before", p, among=others)
    create_topic(cluster, "after", 2, replication=2)
    acked += produce(cluster, "before", values("more", 100))
    assert_read_exactly_once(acked, consume_all(cluster, "before", 3))
    assert_read_exactly_once(
        produce(cluster, "after", values("after", 50)), consume_all(cluster, "after", 2)
    )
    # CreatePartitions: the new controller places and elects the new partitions too.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_partitions([NewPartitions("after", 3)]).values():
        future.result(DEADLINE_S)
    cluster.wait_isr("after", 2, 2)
    assert set(cluster.replicas("after", 2)) <= set(others)
    metadata = admin.list_topics(timeout=DEADLINE_S)
    assert metadata.controller_id in others
    assert sorted(metadata.brokers) == others
    # tierlog cluster describe shows the same, and the partitions missing a replica.
    result = tierlog("cluster", "describe", "--json", "--bootstrap-server", cluster.bootstrap)
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    assert described["controller"] in others
    assert [b["id"] for b in described["brokers"]] == others
    before = [p for p in described["partitions"] if p["topic"] == "before"]
    assert len(before) == 3 and all(p["under_replicated"] for p in before)
    assert described["offline"] == 0


def test_sigterm_moves_leadership_away_before_the_broker_stops(cluster_factory) -> None:
    cluster = cluster_factory()
    create_topic(cluster, "steady", 3, configs={"min.insync.replicas": "2"})
    leaders = {cluster.leader("steady", p) for p in range(3)}
    stopping = next(b for b in BROKERS if b in leaders and b != cluster.controller())
    background = BackgroundProducer(cluster, "steady").start()
    try:
        background.wait_acked(200)
        assert cluster.stop(stopping) == 0
        # By the time it exited, the controller had moved every leadership off it and
        # taken it out of the ISRs.
        for p in range(3):
            assert cluster.leader("steady", p) != stopping
            assert stopping not in cluster.isr("steady", p)
        done = len(background.acked)
        background.wait_acked(done + 200)
    finally:
        background.stop()
    assert not background.errors, f"the producer saw errors: {background.errors[:5]}"
    log = cluster.brokers[stopping].log_file.read_text()
    assert f"controlled shutdown of broker {stopping} succeeded" in log
    assert_read_exactly_once(background.acked, consume_all(cluster, "steady", 3))


def test_a_consumer_group_survives_the_crash_of_its_coordinator(cluster_factory) -> None:
    cluster = cluster_factory()
    create_topic(cluster, "events", 1)
    produce(cluster, "events", values("event", 200))
    group = "survivors"
    settings = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
    }
    first = Consumer(settings)
    first.subscribe(["events"])
    read = poll_offsets(first, 120)
    assert read[:120] == list(range(120))
    first.commit(offsets=[TopicPartition("events", 0, 100)], asynchronous=False)
    first.close()

    # __consumer_offsets has three replicas; kill the leader of the group's partition.
    offsets_partition = partition_for(group, int(cluster.settings["offsets.topic.num.partitions"]))
    cluster.wait_isr("__consumer_offsets", offsets_partition, 3)
    coordinator = cluster.leader("__consumer_offsets", offsets_partition)
    cluster.kill(coordinator)
    survivors = [b for b in BROKERS if b != coordinator]
    cluster.wait_leader("__consumer_offsets", offsets_partition, among=survivors)

    second = Consumer({**settings, "bootstrap.servers": cluster.bootstrap})
    second.subscribe(["events"])
    try:
        resumed = poll_offsets(second, 100)
        # The committed offset was kept: reading resumes at 100, not at 0 or 120.
        assert resumed[:100] == list(range(100, 200))
    finally:
        second.close()


def test_an_unclean_election_truncates_the_old_leaders_diverged_tail(cluster_factory) -> None:
    cluster = cluster_factory()
    create_topic(
        cluster,
        "unclean",
        1,
        configs={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
    )
    common = produce(cluster, "unclean", values("common", 50))
    wait_replicas_identical(cluster, "unclean", 1, BROKERS)
    old_leader = cluster.leader("unclean", 0)
    first, second = (b for b in BROKERS if b != old_leader)
    cluster.kill(first)
    cluster.kill(second)
    cluster.wait(lambda: cluster.isr("unclean", 0) == [old_leader], "an ISR of the leader alone")
    # Acknowledged by the leader alone (acks=1): lost by the unclean election below.
    produce(cluster, "unclean", values("doomed", 20), acks=1, **{"enable.idempotence": False})
    cluster.kill(old_leader)

    # Only an out-of-sync replica comes back: the topic allows it to lead.
    cluster.restart(first)
    cluster.wait_leader("unclean", 0, among=[first])
    after = produce(cluster, "unclean", values("after", 30))
    cluster.restart(old_leader)
    cluster.wait(lambda: old_leader in cluster.isr("unclean", 0), "the old leader back in the ISR")
    wait_replicas_identical(cluster, "unclean", 1, [first, old_leader])
    got = consume_all(cluster, "unclean", 1)
    assert [v for _, _, v in sorted(got)] == [v for _, _, v in common + after]
    # The old leader counted what it lost.
    log = cluster.brokers[old_leader].log_file.read_text()
    assert "unclean-0: truncating to 50, removing 20 offsets (50-69)" in log


def test_the_rlmm_client_reads_offsets_from_the_new_leader_after_a_crash(cluster_factory) -> None:
    """The remote tier's metadata client asked a partition's leader for its offsets; that
    leader is SIGKILLed and the controller elects another. A read that fails against the
    dead leader must make the client learn the new leader, so that the read after it (the
    remote tier retries a failed leadership change) succeeds, rather than every read going
    to the dead broker until librdkafka's periodic metadata refresh (5 minutes)."""
    from rlmm.kafka_client import KafkaMetadataTopicClient
    from rlmm.topic_client import MetadataTopicError

    cluster = cluster_factory()
    create_topic(cluster, "metadata-like", 1)
    produce(cluster, "metadata-like", values("m", 10))
    client = KafkaMetadataTopicClient(cluster.bootstrap, timeout_s=5)
    try:
        assert client.high_watermark("metadata-like", 0) == 10
        leader = cluster.leader("metadata-like", 0)
        cluster.kill(leader)
        cluster.wait_leader("metadata-like", 0, among=[b for b in BROKERS if b != leader])
        try:
            first = client.high_watermark("metadata-like", 0)
        except MetadataTopicError:
            first = None  # asked the dead leader
        assert first in (None, 10)
        assert client.high_watermark("metadata-like", 0) == 10
    finally:
        client.close()


def test_a_topic_deleted_while_a_replica_was_down_can_be_created_again(cluster_factory) -> None:
    """Kafka's deletion waits for a replica whose broker is down and finishes when it comes
    back. That broker must then forget the topic too: a new topic of the same name (a new
    topic id, other configs) is served by all three brokers with its own configs and none
    of the old records."""
    cluster = cluster_factory()
    create_topic(cluster, "recycled", 3, configs={"max.message.bytes": "2000"})
    produce(cluster, "recycled", values("old", 100))
    assert cluster.stop(3) == 0

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.delete_topics(["recycled"], operation_timeout=DEADLINE_S).values():
        future.result(DEADLINE_S)
    zk = cluster.zk
    # Broker 3's replicas are ineligible: the deletion waits for it.
    assert zk.exists("/admin/delete_topics/recycled") is not None
    cluster.restart(3)
    cluster.wait(lambda: zk.exists("/brokers/topics/recycled") is None, "deletion finished")
    cluster.wait(lambda: zk.exists("/admin/delete_topics/recycled") is None, "marker gone")

    # Three partitions: each broker leads one (preferred leaders), broker 3 included.
    create_topic(cluster, "recycled", 3)
    assert {cluster.leader("recycled", p) for p in range(3)} == set(BROKERS)
    big = [f"new-{i}-".encode() + b"x" * 10_000 for i in range(60)]  # over the old limit
    acked = produce(cluster, "recycled", big)
    assert {p for p, _, _ in acked} == {0, 1, 2}
    wait_replicas_identical(cluster, "recycled", 3, BROKERS)
    assert_read_exactly_once(acked, consume_all(cluster, "recycled", 3))
