"""Tiered storage on a three-broker cluster (real brokers, ZooKeeper, real clients).

A follower that was down while its leader tiered and deleted the history locally comes
back: it rejoins the ISR with a local log starting after that history (KIP-405's
follower protocol), becomes the leader when the old one dies, serves the whole history
from offset 0 to a real consumer, and copies on, so that the remote lineage
``tierlog metadata list --json`` shows stays gapless, with segments copied by both brokers.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import DEADLINE_S, Cluster
from tests.support.cluster_clients import consume_all, produce
from tests.support.s3_harness import metadata_segments

TOPIC = "tiered"
FINISHED = "COPY_SEGMENT_FINISHED"
# A batch is never split across segments: small batches make many 4 KiB segments.
SMALL_BATCHES = {"batch.size": 1024, "linger.ms": 0}


def tiered_settings(bucket: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.root": str(bucket),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
    }


def create_tiered_topic(
    cluster: Cluster, name: str, partitions: int, replicas: int, extra: dict[str, str] | None = None
) -> None:
    """A tiered topic of 4 KiB segments, one kept locally, created with the AdminClient and
    waited for."""
    configs = {
        "remote.storage.enable": "true",
        "segment.bytes": "4096",
        "local.retention.bytes": "4096",
        "retention.ms": "-1",
        **(extra or {}),
    }
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(name, partitions, replicas, config=configs)
    for future in admin.create_topics([new], operation_timeout=DEADLINE_S).values():
        future.result(DEADLINE_S)
    cluster.wait_topic(name, partitions, replicas)


def local_bases(cluster: Cluster, broker: int) -> list[int]:
    """The base offsets of the partition's local segments on ``broker``'s disk."""
    directory = cluster.base_dir / f"broker-{broker}" / "data" / f"{TOPIC}-0"
    return sorted(int(f.stem) for f in directory.glob("*.log"))


def read_all(cluster: Cluster) -> list[bytes]:
    """Every value from offset 0, with a real consumer, once the clients see a leader (the
    controller's UpdateMetadata follows what ZooKeeper shows)."""

    def attempt() -> list[bytes] | None:
        try:
            return [value for _, _, value in consume_all(cluster, TOPIC, 1)]
        except KafkaException:
            return None

    return cluster.wait(attempt, "a consumer reading the partition from offset 0", 60)


def finished(cluster: Cluster) -> list[tuple[int, int, int]]:
    """(start, end, copied by) of the COPY_SEGMENT_FINISHED remote segments."""
    segments = metadata_segments(cluster.bootstrap, TOPIC, FINISHED)
    return sorted((s["start_offset"], s["end_offset"], s["broker_id"]) for s in segments)


def test_a_follower_back_after_the_leader_tiered_rejoins_from_the_remote_tier_and_leads(
    cluster_factory, tmp_path: Path
) -> None:
    cluster = cluster_factory(3, tiered_settings(tmp_path / "bucket"))
    # The brokers' remote tiers create __remote_log_metadata (replication factor 3) in the
    # background once three brokers are registered. A broker killed before that leaves
    # two, and the creation is refused from then on (as Kafka refuses it): wait for it.
    # A first attempt made before a controller is known waits out librdkafka's request
    # timeout (30 s) before the next one, hence two deadlines.
    cluster.wait_topic("__remote_log_metadata", 3, 3, timeout=2 * DEADLINE_S)
    create_tiered_topic(cluster, TOPIC, 1, 2, {"min.insync.replicas": "1"})
    a = cluster.leader(TOPIC, 0)
    (b,) = set(cluster.replicas(TOPIC, 0)) - {a}

    # The follower b is down while the leader a takes 300 records, tiers them and deletes
    # them locally.
    cluster.kill(b)
    cluster.wait(lambda: cluster.isr(TOPIC, 0) == [a], "the leader alone in the ISR", 60)
    values = [f"record-{i:05d}-".encode() * 8 for i in range(300)]
    acked = produce(cluster, TOPIC, values, **SMALL_BATCHES)
    assert len(acked) == 300
    cluster.wait(lambda: local_bases(cluster, a)[0] > 0, "the leader's local log start > 0", 120)
    cluster.wait(lambda: len(finished(cluster)) >= 5, "segments tiered by the leader", 120)

    # b comes back: it rejoins the ISR without fetching the tiered history.
    cluster.restart(b)
    cluster.wait(
        lambda: cluster.isr(TOPIC, 0) == sorted([a, b]), "the follower back in the ISR", 120
    )
    assert local_bases(cluster, b)[0] > 0

    # a dies; b leads, serves everything from offset 0 and tiers on.
    cluster.kill(a)
    cluster.wait(lambda: cluster.leader(TOPIC, 0) == b, "the former follower leading", 60)
    assert read_all(cluster) == values
    more = [f"later-{i:05d}-".encode() * 8 for i in range(100)]
    assert len(produce(cluster, TOPIC, more, **SMALL_BATCHES)) == 100
    cluster.wait(
        lambda: any(by == b for _, _, by in finished(cluster)),
        "segments tiered by the new leader",
        120,
    )
    lineage = finished(cluster)
    assert lineage[0][0] == 0
    for (_, end, _), (start, _, _) in itertools.pairwise(lineage):
        assert start == end + 1, lineage
    assert {by for _, _, by in lineage} == {a, b}
    assert read_all(cluster) == values + more


def test_the_remote_tier_reaches_its_metadata_over_a_sasl_inter_broker_listener(
    cluster_factory, tmp_path: Path
) -> None:
    """Brokers talk on a dedicated SASL listener, clients on a PLAINTEXT one. The remote
    tier's metadata client connects to the inter-broker listener with its security protocol
    (as Kafka's RLMM takes ``bootstrap.servers`` and ``security.protocol`` from
    ``remote.log.metadata.manager.listener.name``'s endpoint) and the credentials given
    under ``rlmm.config.remote.log.metadata.common.client.``: the metadata topic is created
    and segments are tiered."""
    password = "broker-secret"
    prefix = "rlmm.config.remote.log.metadata.common.client."
    settings = {
        **tiered_settings(tmp_path / "bucket"),
        "listeners": "PLAINTEXT://127.0.0.1:0,BROKER://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,BROKER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "remote.log.metadata.manager.listener.name": "BROKER",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.broker.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="broker" password="{password}" user_broker="{password}";'
        ),
        f"{prefix}sasl.mechanism": "PLAIN",
        f"{prefix}sasl.username": "broker",
        f"{prefix}sasl.password": password,
    }
    cluster = cluster_factory(3, settings)
    cluster.wait_topic("__remote_log_metadata", 3, 3, timeout=2 * DEADLINE_S)
    create_tiered_topic(cluster, TOPIC, 1, 3)
    values = [f"record-{i:05d}-".encode() * 8 for i in range(100)]
    assert len(produce(cluster, TOPIC, values, **SMALL_BATCHES)) == 100
    cluster.wait(lambda: len(finished(cluster)) >= 2, "segments tiered", 120)
    assert read_all(cluster) == values
    # A topic created while the remote tiers run gets its topic manifest (what `tierlog
    # restore` recreates it from) at once, not only at a broker's next start.
    create_tiered_topic(cluster, "tiered-later", 2, 3)
    cluster.wait(
        lambda: list((tmp_path / "bucket").glob("tiered-later-*/topic-manifest.json")),
        "the manifest of a topic created while the cluster runs",
        DEADLINE_S,
    )
