"""Replication throttles: the decisions (core/server/replication_quota.py) and their effect
on real brokers replicating in one process (tests/core/server/replica_cluster.py)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from core.errors import InvalidConfigError
from core.log.config import LogConfig
from core.server.partition import Partition
from core.server.replication_quota import (
    UNLIMITED,
    ReplicationQuota,
    is_throttled,
    throttled_partitions,
)
from tests.core.server.replica_cluster import Cluster
from tests.support.waiting import until

TP = ("moving", 0)
TOPIC_ID = uuid.uuid4()
NONE = 0


# -- the decisions --------------------------------------------------------------------------
def test_a_throttled_replica_list_keeps_the_entries_naming_this_broker() -> None:
    assert throttled_partitions(["0:1", "1:2", "2:1"], 1) == frozenset({0, 2})
    assert throttled_partitions(["0:1", "1:2"], 3) == frozenset()
    assert throttled_partitions([], 1) == frozenset()
    assert throttled_partitions(["*"], 7) is None  # every partition
    assert is_throttled(["*"], 5, 7)
    assert is_throttled([" 3:2 "], 3, 2)
    assert not is_throttled(["3:2"], 3, 1)
    assert not is_throttled(["3:2"], 2, 2)


def test_the_topic_keys_are_validated_as_kafka_validates_them() -> None:
    config = LogConfig.from_props(
        {
            "leader.replication.throttled.replicas": "0:1,1:2",
            "follower.replication.throttled.replicas": "*",
        }
    )
    assert config.leader_replication_throttled_replicas == ("0:1", "1:2")
    assert config.follower_replication_throttled_replicas == ("*",)
    key = re.escape("leader.replication.throttled.replicas")
    for bad in ("0-1", "*,0:1", "a:1"):
        with pytest.raises(InvalidConfigError, match=key):
            LogConfig.from_props({"leader.replication.throttled.replicas": bad})


def test_only_out_of_sync_throttled_replicas_over_the_rate_are_throttled() -> None:
    quota = ReplicationQuota(rate=1000, samples=11, window_ms=1000)
    now = 1_000_000
    assert not quota.should_throttle(True, False, now)  # nothing recorded yet
    quota.record(50_000, now)  # 50 kB over a 10 s span: 5000 B/s
    assert quota.is_quota_exceeded(now + 1)
    assert quota.should_throttle(True, False, now + 1)
    assert not quota.should_throttle(True, True, now + 1)  # an ISR member
    assert not quota.should_throttle(False, False, now + 1)  # not a throttled replica
    assert quota.throttled_fetches == 1
    # Once the samples expire, the rate is back under the bound.
    assert not quota.should_throttle(True, False, now + 12_000)


def test_the_default_rate_throttles_nothing() -> None:
    quota = ReplicationQuota(rate=UNLIMITED, samples=11, window_ms=1000)
    quota.record(10**12, 0)
    assert not quota.enabled and not quota.should_throttle(True, False, 1)


# -- on real brokers ------------------------------------------------------------------------
def run(
    tmp_path: Path,
    settings: dict[str, str],
    scenario: Callable[[Cluster], Coroutine[Any, Any, None]],
) -> None:
    async def main() -> None:
        cluster = Cluster(
            tmp_path,
            3,
            {
                "replica.fetch.wait.max.ms": "50",
                "replica.fetch.backoff.ms": "50",
                # Small fetches: a follower gains at most one batch per fetch the throttle
                # lets through.
                "replica.fetch.max.bytes": "2000",
                # The rate over 1 s: one batch a follower gets exceeds it.
                "replication.quota.window.num": "2",
                **settings,
            },
        )
        try:
            await cluster.start()
            await scenario(cluster)
        finally:
            await cluster.close()

    asyncio.run(asyncio.wait_for(main(), 120))


def partition(cluster: Cluster, node: int) -> Partition:
    found = cluster.nodes[node].partition(TP)
    assert found is not None
    return found


def set_config(cluster: Cluster, node: int, **changes: tuple[str, ...]) -> None:
    log = partition(cluster, node).log
    config: LogConfig = log.config
    log.update_config(replace(config, **changes))


async def produce_batches(cluster: Cluster, count: int, tag: str) -> None:
    for i in range(count):
        answer, _ = await cluster.produce(1, TP, [f"{tag}-{i}".encode() * 100] * 10, acks=1)
        assert answer.error_code == NONE


async def before_reassignment(cluster: Cluster, tag: str) -> None:
    """Brokers 1 and 2 replicate 40 batches (about 160 kB) before broker 3 is added."""
    await cluster.elect(TP[0], TOPIC_ID, 1, leader=1, isr=[1, 2], leader_epoch=1, replicas=[1, 2])
    await produce_batches(cluster, 40, tag)
    await cluster.caught_up(TP, 1, [2])


async def add_broker_3(cluster: Cluster) -> None:
    """A reassignment adding broker 3: the controller's LeaderAndIsr with the new replica
    set, broker 3 out of the ISR."""
    await cluster.elect(
        TP[0], TOPIC_ID, 1, leader=1, isr=[1, 2], leader_epoch=2, replicas=[1, 2, 3]
    )


def test_the_leader_sends_no_records_to_an_out_of_sync_throttled_follower_over_its_rate(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        await before_reassignment(cluster, "a")
        set_config(cluster, 1, leader_replication_throttled_replicas=("*",))
        await add_broker_3(cluster)
        await produce_batches(cluster, 5, "b")
        leader = partition(cluster, 1)
        quota = cluster.nodes[1].broker.replica_manager.leader_quota  # type: ignore[union-attr]
        await until(lambda: quota.throttled_fetches >= 5)
        # Broker 2, in the ISR, is not throttled: it has everything.
        await until(lambda: partition(cluster, 2).log.log_end_offset == leader.log.log_end_offset)
        # Broker 3 got answers without records while the quota was exceeded.
        assert partition(cluster, 3).log.log_end_offset < leader.log.log_end_offset
        assert 3 not in leader.isr
        # The throttle removed, broker 3 catches up and joins the ISR.
        set_config(cluster, 1, leader_replication_throttled_replicas=())
        await cluster.caught_up(TP, 1, [2, 3])
        await until(lambda: 3 in leader.isr)
        assert cluster.nodes[3].log_bytes(TP) == cluster.nodes[1].log_bytes(TP)

    run(tmp_path, {"leader.replication.throttled.rate": "1000"}, scenario)


def test_a_follower_over_its_rate_stops_fetching_its_throttled_partition(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        await before_reassignment(cluster, "a")
        await add_broker_3(cluster)
        # Only broker 3's replica is follower-throttled; all brokers have the rate. (Set as
        # the topic config change reaches each broker, just after broker 3 started fetching:
        # it gets at most one more fetch's worth before.)
        for node in (2, 3):
            set_config(cluster, node, follower_replication_throttled_replicas=("0:3",))
        await produce_batches(cluster, 5, "b")
        leader = partition(cluster, 1)
        quota3 = cluster.nodes[3].broker.replica_manager.follower_quota  # type: ignore[union-attr]
        quota2 = cluster.nodes[2].broker.replica_manager.follower_quota  # type: ignore[union-attr]
        await until(lambda: quota3.throttled_fetches >= 5)
        await until(lambda: partition(cluster, 2).log.log_end_offset == leader.log.log_end_offset)
        assert partition(cluster, 3).log.log_end_offset < leader.log.log_end_offset
        assert quota2.throttled_fetches == 0  # 0:3 names broker 3 only
        set_config(cluster, 3, follower_replication_throttled_replicas=())
        await cluster.caught_up(TP, 1, [2, 3])
        assert cluster.nodes[3].log_bytes(TP) == cluster.nodes[1].log_bytes(TP)

    run(tmp_path, {"follower.replication.throttled.rate": "1000"}, scenario)
