"""Failover under load: a three-broker cluster (RF=3, min.insync.replicas=2) while an
idempotent acks=all producer sends without pause and partition leaders, the controller
among them, are SIGKILLed and restarted one after the other.

Asserted: the producer never sees an error (it retries through each election), every
acknowledged record is read back exactly once at its offset, offsets stay contiguous, and
after each restart every ISR is back to three. ``make test`` runs 2 kills (a leader, then
the controller); ``make soak`` 20. The same with kafka-python and aiokafka producers and
consumers: one kill each in ``make test``, 6 in ``make soak``.
"""

from __future__ import annotations

import pytest

from tests.support.cluster_client_matrix import CLIENTS, ClientBackgroundProducer, consume_all_with
from tests.support.cluster_clients import (
    BackgroundProducer,
    assert_read_exactly_once,
    consume_all,
    create_topic,
    wait_replicas_identical,
)

from .soak import SOAK

KILLS = 20 if SOAK else 2
OTHER_CLIENT_KILLS = 6 if SOAK else 1
PARTITIONS = 3
TOPIC = "failover"


def test_leaders_and_the_controller_crash_repeatedly_under_load(cluster_factory) -> None:
    cluster = cluster_factory()
    create_topic(cluster, TOPIC, PARTITIONS, configs={"min.insync.replicas": "2"})
    producer = BackgroundProducer(cluster, TOPIC).start()
    try:
        producer.wait_acked(200)
        for kill in range(KILLS):
            # Every other kill takes the controller, the others a partition's leader.
            if kill % 2:
                victim = cluster.wait_controller()
            else:
                victim = cluster.leader(TOPIC, kill // 2 % PARTITIONS)
            cluster.kill(victim)
            others = [b for b in cluster.brokers if b != victim]
            for p in range(PARTITIONS):
                cluster.wait_leader(TOPIC, p, among=others)
            acked = len(producer.acked)
            producer.wait_acked(acked + 200)  # the new leaders take writes
            cluster.restart(victim)
            for p in range(PARTITIONS):
                cluster.wait_isr(TOPIC, p, 3)
    finally:
        producer.stop()
    assert not producer.errors, f"the producer saw errors: {producer.errors[:5]}"
    assert_read_exactly_once(producer.acked, consume_all(cluster, TOPIC, PARTITIONS))
    wait_replicas_identical(cluster, TOPIC, PARTITIONS, sorted(cluster.brokers))


@pytest.mark.parametrize("client", CLIENTS)
def test_other_clients_survive_a_leader_and_controller_crash(cluster_factory, client) -> None:
    """The same with kafka-python's and aiokafka's producers and consumers: ``make test``
    kills the controller (also a partition's leader: each broker leads one) once;
    ``make soak`` kills leaders and the controller in turn, 6 times."""
    cluster = cluster_factory()
    create_topic(cluster, TOPIC, PARTITIONS, configs={"min.insync.replicas": "2"})
    producer = ClientBackgroundProducer(client, cluster, TOPIC).start()
    try:
        producer.wait_acked(200)
        for kill in range(OTHER_CLIENT_KILLS):
            victim = cluster.wait_controller() if kill % 2 == 0 else cluster.leader(TOPIC, 0)
            cluster.kill(victim)
            others = [b for b in cluster.brokers if b != victim]
            for p in range(PARTITIONS):
                cluster.wait_leader(TOPIC, p, among=others)
            producer.wait_acked(len(producer.acked) + 200)  # the new leaders take writes
            cluster.restart(victim)
            for p in range(PARTITIONS):
                cluster.wait_isr(TOPIC, p, 3)
        producer.wait_acked(len(producer.acked) + 100)  # and the restarted broker's
    finally:
        producer.stop()
    assert not producer.errors, f"the producer saw errors: {producer.errors[:5]}"
    got = consume_all_with(client, cluster, TOPIC, PARTITIONS)
    assert_read_exactly_once(producer.acked, got)
    wait_replicas_identical(cluster, TOPIC, PARTITIONS, sorted(cluster.brokers))
