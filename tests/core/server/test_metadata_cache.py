"""MetadataCache: what a broker knows of the cluster, as UpdateMetadata requests tell it."""

from __future__ import annotations

import threading
import uuid

import pytest

from core.server.cluster_types import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    BrokerEndpoint,
    BrokerInfo,
    LeaderAndIsr,
    PartitionState,
)
from core.server.metadata_cache import MetadataCache, StaleControllerEpochError

T_ID, U_ID = uuid.uuid4(), uuid.uuid4()


def broker(broker_id: int) -> BrokerInfo:
    return BrokerInfo(
        broker_id,
        (
            BrokerEndpoint("CLIENT", f"c{broker_id}", 9092, "SASL_SSL"),
            BrokerEndpoint("INTERNAL", f"i{broker_id}", 9093, "PLAINTEXT"),
        ),
        rack=f"r{broker_id}",
    )


def state(topic: str, partition: int, leader: int, *, topic_id=T_ID, epoch=1, offline=()):
    return PartitionState(
        topic, topic_id, partition, 1, LeaderAndIsr(leader, epoch, (1, 2)), (1, 2),
        offline_replicas=offline,
    )  # fmt: skip


def test_an_empty_cache_knows_nothing():
    cache = MetadataCache(1)
    assert cache.controller_id is None and cache.controller_epoch == -1
    assert cache.alive_brokers() == [] and cache.topic_names() == set()
    assert cache.partition(("t", 0)) is None and cache.leader(("t", 0)) is None
    assert cache.partitions_of("t") == []


def test_update_answers_every_query():
    cache = MetadataCache(1)
    removed = cache.update(
        2,
        5,
        [broker(2), broker(1)],
        [state("t", 1, 2), state("t", 0, 1), state("u", 0, NO_LEADER, topic_id=U_ID, offline=(1,))],
    )
    assert removed == set()
    assert cache.controller_id == 2 and cache.controller_epoch == 5
    assert [b.broker_id for b in cache.alive_brokers()] == [1, 2]
    assert cache.broker(2) == broker(2) and cache.broker(3) is None
    assert cache.is_alive(1) and not cache.is_alive(3)
    assert cache.endpoint(1, "INTERNAL") == BrokerEndpoint("INTERNAL", "i1", 9093, "PLAINTEXT")
    assert cache.topic_names() == {"t", "u"} and cache.contains_topic("u")
    assert cache.topic_id("t") == T_ID and cache.topic_name(U_ID) == "u"
    assert [p.partition for p in cache.partitions_of("t")] == [0, 1]
    assert cache.partition(("t", 1)) == state("t", 1, 2)
    assert cache.leader(("t", 1)) == 2
    assert cache.leader(("u", 0)) == NO_LEADER
    assert cache.leader_endpoint(("t", 1), "CLIENT") == BrokerEndpoint(
        "CLIENT", "c2", 9092, "SASL_SSL"
    )
    assert cache.leader_endpoint(("u", 0), "CLIENT") is None  # no leader
    assert cache.leader_endpoint(("t", 1), "OTHER") is None  # no such listener
    assert cache.offline_replicas(("u", 0)) == (1,)


def test_partitions_not_named_stay_and_brokers_are_replaced():
    cache = MetadataCache(1)
    cache.update(1, 1, [broker(1), broker(2)], [state("t", 0, 1), state("t", 1, 2)])
    cache.update(1, 1, [broker(1)], [state("t", 1, 1, epoch=2)])
    assert cache.leader(("t", 0)) == 1
    assert cache.partition(("t", 1)).leader_epoch == 2
    assert [b.broker_id for b in cache.alive_brokers()] == [1]
    # The leader of t-0 is known, but broker 2 is gone: no endpoint for a dead leader.
    cache.update(1, 1, [broker(1)], [state("t", 0, 2)])
    assert cache.leader(("t", 0)) == 2 and cache.leader_endpoint(("t", 0), "CLIENT") is None


def test_leader_during_delete_and_deleted_partitions_remove_them():
    cache = MetadataCache(1)
    cache.update(
        1, 1, [broker(1)], [state("t", 0, 1), state("t", 1, 1), state("u", 0, 1, topic_id=U_ID)]
    )
    removed = cache.update(1, 1, [broker(1)], [state("t", 0, LEADER_DURING_DELETE)])
    assert removed == {("t", 0)}
    assert [p.partition for p in cache.partitions_of("t")] == [1]
    removed = cache.update(1, 1, [broker(1)], [], deleted_partitions=[("t", 1), ("x", 0)])
    assert removed == {("t", 1)}
    # The topic went with its last partition, and its id with it.
    assert cache.topic_names() == {"u"}
    assert cache.topic_id("t") is None and cache.topic_name(T_ID) is None


def test_an_older_controller_epoch_is_refused_and_changes_nothing():
    cache = MetadataCache(1)
    cache.update(2, 5, [broker(1)], [state("t", 0, 1)])
    with pytest.raises(StaleControllerEpochError) as refused:
        cache.update(3, 4, [broker(2)], [state("t", 0, 2)])
    assert refused.value.error_code == 11
    assert cache.controller_id == 2 and cache.leader(("t", 0)) == 1
    # The same epoch (the same controller, later) and newer ones are applied.
    cache.update(2, 5, [broker(1)], [state("t", 0, 2)])
    cache.update(3, 6, [broker(1)], [state("t", 0, 1)])
    assert cache.controller_id == 3 and cache.controller_epoch == 6


def test_a_reader_sees_each_update_entirely_or_not_at_all():
    """Readers on other threads never see a partition with a broker list of another update."""
    cache = MetadataCache(1)
    stop = threading.Event()
    torn: list[tuple[int, int]] = []

    def read() -> None:
        while not stop.is_set():
            snapshot = cache.snapshot()
            brokers = [b.broker_id for b in snapshot.alive_brokers()]
            partition = snapshot.partition(("t", 0))
            if partition is not None and brokers != [partition.leader]:
                torn.append((partition.leader, len(brokers)))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    try:
        for i in range(2000):
            leader = 1 + i % 3
            cache.update(1, 1, [broker(leader)], [state("t", 0, leader)])
    finally:
        stop.set()
        for r in readers:
            r.join()
    assert torn == []
