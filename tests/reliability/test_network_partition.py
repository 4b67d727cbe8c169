"""A network partition: one broker, the controller and a partition's leader, is cut off from
ZooKeeper and the other brokers (it runs in a network namespace of its own, joined by a veth
pair; the cut blackholes the way back inside that namespace), while an idempotent acks=all
producer keeps writing through the other brokers.

Asserted, as in Kafka's ZooKeeper mode: the others elect a new controller and new leaders
once the cut broker's session expires; the cut broker never acknowledges an acks=all write
while cut (a client inside its namespace tries); after the cut heals it learns that its
session expired, stops leading, registers again, truncates what it appended alone and
rejoins every ISR; nothing acknowledged is lost, every record is read back once at its
offset, and the three replicas end byte-identical.

Needs root and iproute2 (``ip netns``); without them the test is skipped naming which.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import CLUSTER_SETTINGS, DEADLINE_S, Cluster
from tests.support.cluster_clients import (
    BackgroundProducer,
    assert_read_exactly_once,
    consume_all,
    wait_replicas_identical,
)
from tests.support.netns import NetNamespace, NetnsUnavailableError, create_netns
from tests.support.zookeeper_server import start_zookeeper

TOPIC = "partitioned"
PARTITIONS = 3
CUT = 3  # the broker in its own namespace

# Run inside the cut broker's namespace: acks=all writes straight to it, counting the ones
# it acknowledges before message.timeout.ms.
LONE_PRODUCER = """
import sys
from confluent_kafka import Producer
acked = []
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "message.timeout.ms": 6000,
              "enable.idempotence": False, "retries": 0})
for i in range(5):
    p.produce(sys.argv[2], b"lone-%d" % i, partition=0,
              on_delivery=lambda e, m: e is None and acked.append(m.offset()))
p.flush(30)
print(len(acked))
"""


@pytest.fixture
def netns() -> Iterator[NetNamespace]:
    try:
        ns = create_netns("np")
    except NetnsUnavailableError as e:
        pytest.skip(f"network namespaces unavailable: {e}")
    try:
        yield ns
    finally:
        ns.delete()


def create_topic_led_by(cluster: Cluster, leaders: list[int]) -> None:
    """Partition p led by leaders[p] first, RF=3, min.insync.replicas=2."""
    brokers = sorted(cluster.brokers)
    assignment = [[lead, *(b for b in brokers if b != lead)] for lead in leaders]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(
        TOPIC, len(assignment), replica_assignment=assignment, config={"min.insync.replicas": "2"}
    )
    for future in admin.create_topics([new], operation_timeout=DEADLINE_S).values():
        future.result(DEADLINE_S)
    cluster.wait_topic(TOPIC, PARTITIONS, 3)


def test_a_leader_cut_off_from_zookeeper_steps_down_and_loses_nothing_acknowledged(
    tmp_path: Path, netns: NetNamespace
) -> None:
    zookeeper = start_zookeeper(tmp_path / "zookeeper", address=netns.outer)
    cluster = Cluster(tmp_path / "cluster", f"{zookeeper.connect_string}/np", CLUSTER_SETTINGS)
    try:
        # The cut broker starts first: it becomes the controller.
        cluster.start_broker(
            CUT, {"listeners": f"PLAINTEXT://{netns.inner}:0"}, command_prefix=netns.prefix
        )
        assert cluster.wait_controller() == CUT
        for broker in (1, 2):
            cluster.start_broker(broker, {"listeners": f"PLAINTEXT://{netns.outer}:0"})
        cluster.wait_registered([1, 2, CUT])
        create_topic_led_by(cluster, [CUT, 1, 2])
        producer = BackgroundProducer(cluster, TOPIC).start()
        try:
            producer.wait_acked(200)
            netns.cut()
            # The others: a new controller and new leaders once the session expired.
            cluster.wait_controller(among=[1, 2])
            for p in range(PARTITIONS):
                cluster.wait_leader(TOPIC, p, among=[1, 2])
            producer.wait_acked(len(producer.acked) + 200)
            # The cut broker acknowledges nothing: its followers are gone and it cannot
            # record a smaller ISR in ZooKeeper.
            lone = subprocess.run(
                [
                    *netns.prefix,
                    sys.executable,
                    "-c",
                    LONE_PRODUCER,
                    cluster.brokers[CUT].bootstrap,
                    TOPIC,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert lone.returncode == 0, lone.stderr
            assert lone.stdout.strip() == "0", f"the cut broker acknowledged: {lone.stdout}"
            netns.heal()
            # It learns its session expired, steps down, registers again and catches up.
            cluster.wait(
                lambda: "lost its ZooKeeper session" in cluster.brokers[CUT].log_file.read_text(),
                "the cut broker noticing its session expired",
            )
            cluster.wait_registered([1, 2, CUT])
            for p in range(PARTITIONS):
                cluster.wait_isr(TOPIC, p, 3)
            producer.wait_acked(len(producer.acked) + 200)
        finally:
            producer.stop()
        assert not producer.errors, f"the producer saw errors: {producer.errors[:5]}"
        got = consume_all(cluster, TOPIC, PARTITIONS)
        assert_read_exactly_once(producer.acked, got)
        assert not [v for _, _, v in got if v.startswith(b"lone-")], "an unacknowledged write"
        wait_replicas_identical(cluster, TOPIC, PARTITIONS, [1, 2, CUT])
    finally:
        if netns.is_cut:
            netns.heal()
        cluster.close()
        zookeeper.kill()
