"""A throttled reassignment in a three-broker cluster, as kafka-reassign-partitions.sh
--throttle runs one: the topic's leader/follower.replication.throttled.replicas name the
existing and the added replicas (IncrementalAlterConfigs), the brokers' static
leader.replication.throttled.rate bounds the leader; the replica being added stays out of
the ISR while the leader answers its fetches empty (the leader's throttle counter on
/metrics), and the reassignment completes once the throttle is removed."""

from __future__ import annotations

import re
import urllib.request

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import DEADLINE_S, Cluster
from tests.support.cluster_clients import produce, wait_replicas_identical
from tests.support.s3_harness import broker_log_lines

TOPIC = "throttled"
THROTTLED = "kafka_server_leaderreplication_throttled_partitions_total"
BYTE_RATE = "kafka_server_leaderreplication_byte_rate"


def metrics_url(broker: BrokerProcess) -> str:
    (line,) = broker_log_lines(broker, "Prometheus metrics on")
    found = re.search(r"(http://\S+/metrics)", line)
    assert found is not None, line
    return found.group(1)


def scrape(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the metrics of {url}")


def set_throttled_replicas(cluster: Cluster, leader: str | None, follower: str | None) -> None:
    """Set (a value) or delete (None) the topic's throttled-replica lists."""

    def entry(name: str, value: str | None) -> ConfigEntry:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        return ConfigEntry(name, value, incremental_operation=op)

    resource = ConfigResource(
        ResourceType.TOPIC,
        TOPIC,
        incremental_configs=[
            entry("leader.replication.throttled.replicas", leader),
            entry("follower.replication.throttled.replicas", follower),
        ],
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assert admin.incremental_alter_configs([resource])[resource].result(DEADLINE_S) is None


def test_a_throttled_reassignment_holds_the_new_replica_back_until_the_throttle_is_removed(
    cluster_factory,
) -> None:
    cluster = cluster_factory(
        3,
        {
            "leader.replication.throttled.rate": "10000",
            "replication.quota.window.num": "2",
            # 10 kB per follower fetch: about 100 fetches for the data below.
            "replica.fetch.max.bytes": "10000",
            "metrics.prometheus.port": "0",
        },
    )
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        new = NewTopic(TOPIC, num_partitions=-1, replication_factor=-1,
                       replica_assignments={0: [1, 2]})  # fmt: skip
        admin.create_topics([new], timeout_ms=int(DEADLINE_S * 1000))
        cluster.wait_topic(TOPIC, 1, 2)
        assert cluster.leader(TOPIC, 0) == 1
        # About 1 MB in 5 kB batches, replicated to broker 2 (in the ISR: never throttled).
        produce(cluster, TOPIC, (b"%06d" % i + b"x" * 5000 for i in range(200)), **{
            "linger.ms": 0, "batch.size": 6000})  # fmt: skip
        wait_replicas_identical(cluster, TOPIC, 1, [1, 2])

        # What kafka-reassign-partitions.sh --throttle sets: the existing replicas throttled
        # as leaders, the added one as a follower.
        set_throttled_replicas(cluster, "0:1,0:2", "0:3")
        leader_metrics = metrics_url(cluster.brokers[1])

        def leader_applied_the_throttle() -> bool:
            # The change reaches broker 1 through /config/changes: once it has, the bytes it
            # sends broker 2 for the partition are counted (in-sync, so not held back).
            produce(cluster, TOPIC, [b"probe"])
            return scrape(leader_metrics, BYTE_RATE) > 0

        cluster.wait(leader_applied_the_throttle, "broker 1 applying the throttled replicas")
        before = scrape(leader_metrics, THROTTLED)
        outcome = admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): [1, 2, 3]})
        assert outcome == {TopicPartition(TOPIC, 0): None}, outcome

        cluster.wait(
            lambda: scrape(leader_metrics, THROTTLED) >= before + 5,
            "the leader answering broker 3's fetches without records",
        )
        # Held back: broker 3 is not in the ISR and the reassignment is still in progress.
        assert 3 not in cluster.isr(TOPIC, 0)
        assert TopicPartition(TOPIC, 0) in admin.list_partition_reassignments()

        # The throttle removed (as --verify does once done; here to let it finish).
        set_throttled_replicas(cluster, None, None)
        cluster.wait(lambda: cluster.replicas(TOPIC, 0) == [1, 2, 3], "replicas [1, 2, 3]")
        cluster.wait(lambda: sorted(cluster.isr(TOPIC, 0)) == [1, 2, 3], "the full ISR")
        cluster.wait(lambda: admin.list_partition_reassignments() == {}, "no reassignment")
        wait_replicas_identical(cluster, TOPIC, 1, [1, 2, 3])
    finally:
        admin.close()
