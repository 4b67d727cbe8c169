"""Replication between real brokers in one process (tests/core/server/replica_cluster.py).

The test is the controller: it tells the brokers who leads and who follows, as a
controller's LeaderAndIsr would, and the brokers replicate over real connections.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from core.server.api_keys import ApiKey
from tests.core.server.replica_cluster import Cluster
from tests.support.waiting import until

TP = ("orders", 0)
TOPIC_ID = uuid.uuid4()
NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


def run(
    tmp_path: Path,
    size: int,
    scenario: Callable[[Cluster], Coroutine[Any, Any, None]],
    settings: dict[str, str] | None = None,
    **start: Any,
) -> None:
    async def main() -> None:
        cluster = Cluster(tmp_path, size, {"replica.fetch.wait.max.ms": "100", **(settings or {})})
        try:
            await cluster.start(**start)
            await scenario(cluster)
        finally:
            await cluster.close()

    asyncio.run(asyncio.wait_for(main(), 120))


def values(n: int, tag: str = "v") -> list[bytes]:
    return [f"{tag}-{i:04d}".encode() * 8 for i in range(n)]


async def elect_all(cluster: Cluster, leader: int, epoch: int, isr: list[int]) -> None:
    answers = await cluster.elect(
        TP[0], TOPIC_ID, 1, leader=leader, isr=isr, leader_epoch=epoch, replicas=[1, 2, 3]
    )
    assert all(code == NONE for answer in answers.values() for code in answer.values()), answers


def test_followers_copy_the_leaders_log_byte_for_byte_and_the_high_watermark_follows_them(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        await elect_all(cluster, leader=1, epoch=1, isr=[1, 2, 3])
        for i in range(20):
            answer, _ = await cluster.produce(1, TP, values(5, f"b{i}"), acks=1 if i % 2 else -1)
            assert answer.error_code == NONE
        await cluster.caught_up(TP, 1, [2, 3])
        leader_bytes = cluster.nodes[1].log_bytes(TP)
        assert leader_bytes and cluster.nodes[2].log_bytes(TP) == leader_bytes
        assert cluster.nodes[3].log_bytes(TP) == leader_bytes
        entries = cluster.nodes[1].partition(TP).log.leader_epoch_cache.entries()
        for follower in (2, 3):
            assert cluster.nodes[follower].partition(TP).log.leader_epoch_cache.entries() == entries

        # The high watermark waits for the slowest ISR member: broker 3 stops fetching.
        await cluster.stop_replica(3, [TP])
        end = cluster.nodes[1].partition(TP).log.log_end_offset
        answer, _ = await cluster.produce(1, TP, values(3, "late"), acks=1)
        assert answer.error_code == NONE
        leader = cluster.nodes[1].partition(TP)
        await until(
            lambda: cluster.nodes[2].partition(TP).log.log_end_offset == leader.log.log_end_offset
        )
        assert leader.log.high_watermark == end < leader.log.log_end_offset
        # Broker 3 follows again: the high watermark reaches the log end.
        await elect_all(cluster, leader=1, epoch=1, isr=[1, 2, 3])
        await cluster.caught_up(TP, 1, [2, 3])
        assert cluster.nodes[3].log_bytes(TP) == cluster.nodes[1].log_bytes(TP)

    run(tmp_path, 3, scenario)


def test_acks_all_waits_for_every_isr_member_and_min_insync_replicas_refuses(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        await elect_all(cluster, leader=1, epoch=1, isr=[1, 2, 3])
        answer, _ = await cluster.produce(1, TP, values(2, "first"))
        assert answer.error_code == NONE
        await cluster.caught_up(TP, 1, [2, 3])

        # Broker 3 stops fetching but stays in the ISR (the lag time is long): an acks=all
        # produce is not answered while broker 3 lacks its records, even once broker 2
        # has them; it is once broker 3 fetches them.
        await cluster.stop_replica(3, [TP])
        pending = asyncio.ensure_future(cluster.produce(1, TP, values(2, "second")))
        leader = cluster.nodes[1].partition(TP)
        await until(lambda: leader.log.log_end_offset > 2, what="the append")
        await until(
            lambda: cluster.nodes[2].partition(TP).log.log_end_offset == leader.log.log_end_offset,
            what="broker 2 fetching",
        )
        assert not pending.done()
        await elect_all(cluster, leader=1, epoch=1, isr=[1, 2, 3])
        answer, _ = await pending
        assert answer.error_code == NONE
        assert cluster.nodes[3].partition(TP).log.log_end_offset == leader.log.log_end_offset

        # min.insync.replicas=2 (the brokers' default here) and an ISR of one: acks=all is
        # refused before anything is appended; acks=1 is not.
        await cluster.stop_replica(2, [TP])
        await cluster.stop_replica(3, [TP])
        await cluster.elect(
            TP[0], TOPIC_ID, 1, leader=1, isr=[1], leader_epoch=2, replicas=[1, 2, 3], to=[1]
        )
        end = leader.log.log_end_offset
        answer, _ = await cluster.produce(1, TP, values(1, "refused"))
        assert answer.error_code == NOT_ENOUGH_REPLICAS
        assert leader.log.log_end_offset == end
        answer, _ = await cluster.produce(1, TP, values(1, "one"), acks=1)
        assert answer.error_code == NONE and leader.log.log_end_offset == end + 1

    run(tmp_path, 3, scenario, {"min.insync.replicas": "2"})


def test_an_isr_falling_below_min_insync_replicas_fails_the_waiting_produce_after_append(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        await elect_all(cluster, leader=1, epoch=1, isr=[1, 2, 3])
        await cluster.stop_replica(3, [TP])
        # Appended with an ISR of 3 = min.insync.replicas; broker 3 then leaves the ISR
        # (replica.lag.time.max.ms), the high watermark passes the records, and the produce
        # is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND: they are on two replicas only.
        answer, _ = await cluster.produce(1, TP, values(2))
        assert answer.error_code == NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert cluster.writer.isrs(TP) == [(1, 2)]
        assert cluster.nodes[2].partition(TP).log.log_end_offset == 2

    run(
        tmp_path,
        3,
        scenario,
        {"min.insync.replicas": "3", "replica.lag.time.max.ms": "1000"},
    )


def test_a_stopped_follower_leaves_the_isr_and_rejoins_once_caught_up(tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        await elect_all(cluster, leader=1, epoch=1, isr=[1, 2, 3])
        for i in range(5):
            await cluster.produce(1, TP, values(3, f"a{i}"))
        await cluster.caught_up(TP, 1, [2, 3])
        leader = cluster.nodes[1].partition(TP)

        await cluster.nodes[3].stop()  # broker 3 dies
        for i in range(5):
            answer, _ = await cluster.produce(1, TP, values(3, f"b{i}"), acks=1)
            assert answer.error_code == NONE
        await until(lambda: leader.isr == (1, 2), what="the ISR shrinking")
        assert cluster.writer.isrs(TP) == [(1, 2)]
        await until(lambda: leader.log.high_watermark == leader.log.log_end_offset)

        # A replacement broker 3 (an empty disk, a new port) follows, catches up, rejoins.
        cluster.nodes[3].directory = cluster.directory / "broker-3-replacement"
        await cluster.nodes[3].start()
        cluster.publish()
        await elect_all(cluster, leader=1, epoch=1, isr=[1, 2])
        await until(lambda: leader.isr == (1, 2, 3), what="the ISR expanding")
        assert cluster.writer.isrs(TP) == [(1, 2), (1, 2, 3)]
        await cluster.caught_up(TP, 1, [2, 3])
        assert cluster.nodes[3].log_bytes(TP) == cluster.nodes[1].log_bytes(TP)

    run(tmp_path, 3, scenario, {"replica.lag.time.max.ms": "1000"})


@pytest.mark.parametrize(
    "max_fetch_version", [11, 16], ids=["offsets-for-leader-epoch", "fetch-v12-diverging-epoch"]
)
def test_a_deposed_leader_truncates_its_uncommitted_tail_and_copies_the_new_leader(
    tmp_path: Path, max_fetch_version: int
) -> None:
    async def scenario(cluster: Cluster) -> None:
        await elect_all(cluster, leader=1, epoch=1, isr=[1, 2, 3])
        for i in range(5):
            await cluster.produce(1, TP, values(2, f"a{i}"))
        await cluster.caught_up(TP, 1, [2, 3])
        committed = cluster.nodes[1].partition(TP).log.log_end_offset

        # Broker 1 appends records nobody else gets (its followers stopped), then loses
        # the leadership to broker 2, which appends in epoch 2.
        await cluster.stop_replica(2, [TP])
        await cluster.stop_replica(3, [TP])
        for i in range(3):
            answer, _ = await cluster.produce(1, TP, values(2, f"lost{i}"), acks=1)
            assert answer.error_code == NONE
        assert cluster.nodes[1].partition(TP).log.log_end_offset == committed + 6
        await cluster.elect(
            TP[0], TOPIC_ID, 1, leader=2, isr=[2, 3], leader_epoch=2, replicas=[1, 2, 3], to=[2, 3]
        )
        for i in range(2):
            answer, _ = await cluster.produce(2, TP, values(3, f"new{i}"), acks=1)
            assert answer.error_code == NONE

        # Broker 1 follows broker 2: its tail goes, its log becomes broker 2's.
        await cluster.elect(
            TP[0], TOPIC_ID, 1, leader=2, isr=[2, 3], leader_epoch=2, replicas=[1, 2, 3], to=[1]
        )
        await cluster.caught_up(TP, 2, [1, 3])
        new_leader = cluster.nodes[2].partition(TP).log
        deposed = cluster.nodes[1].partition(TP).log
        assert cluster.nodes[1].log_bytes(TP) == cluster.nodes[2].log_bytes(TP)
        assert deposed.leader_epoch_cache.entries() == new_leader.leader_epoch_cache.entries()
        assert [e.epoch for e in deposed.leader_epoch_cache.entries()] == [1, 2]
        asked = cluster.nodes[2].requests.get(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0)
        if max_fetch_version < 12:
            assert asked >= 1  # truncated after an OffsetsForLeaderEpoch answer
        else:
            assert asked == 0  # truncated on the Fetch's diverging epoch

        # Broker 1 no longer leads: a producer is sent to broker 2 (KIP-951 hints).
        answer, response = await cluster.produce(1, TP, values(1, "x"), version=11)
        assert answer.error_code == NOT_LEADER_OR_FOLLOWER
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (2, 2)
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [
            (2, cluster.nodes[2].endpoint.port)
        ]
        data, response = await cluster.fetch(1, TP, 0)
        assert data.error_code == NOT_LEADER_OR_FOLLOWER
        assert data.current_leader.leader_id == 2
        assert [e.node_id for e in response.node_endpoints] == [2]

    run(tmp_path, 3, scenario, max_fetch_version=max_fetch_version)
