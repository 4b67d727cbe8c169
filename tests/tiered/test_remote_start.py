"""A replica whose local log is empty starts a tiered partition after its remote tier.

Brokers in one process with the test as controller (``tests/tiered/tiered_cluster.py``), as
in the KIP-405 scenarios: every replica loses its disk (as in a cluster restored from the
bucket by ``tierlog restore``), the remote segments and their metadata remain, and the next
leader epoch is elected. Kafka itself has no such step (a leader with an empty log starts at
offset 0); tierlog's replicas must not append over the remote offsets.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.waiting import until
from tests.tiered.test_cluster_scenarios import (
    FAST_ISR,
    NONE,
    TP,
    Scenario,
    expected,
    run,
    topic_config,
)
from tests.tiered.tiered_cluster import values

NOT_LEADER_OR_FOLLOWER = 6


async def produce_when_served(s: Scenario, leader: int, tag: int) -> int:
    """Produce one message once the leader serves the partition; returns its offset."""
    answers: list[int] = []

    async def served() -> bool:
        answer, _ = await s.cluster.produce(leader, TP, values([tag]), acks=1)
        code = int(answer.error_code)
        # Until its log starts after the remote tier, the leader refuses as Kafka's brokers
        # refuse a partition they do not serve.
        assert code in (NONE, NOT_LEADER_OR_FOLLOWER), code
        if code == NONE:
            answers.append(int(answer.base_offset))
        return code == NONE

    await until(
        served, timeout=30, interval=0.05, what=f"broker {leader} accepting produce to {TP}"
    )
    return answers[0]


async def lose_every_disk(s: Scenario) -> None:
    for node in s.cluster.nodes.values():
        await node.stop()
        shutil.rmtree(node.directory)
    for node in s.cluster.nodes.values():
        await node.start()


def test_replicas_that_lost_their_disks_start_after_the_remote_tier_and_append_after_it(
    tmp_path: Path,
) -> None:
    async def scenario(s: Scenario) -> None:
        a, b = 1, 2
        # LE-0 from 0, LE-1 from 3; seg-0-2 and seg-3-5 are copied, 6-7 only local.
        await s.elect(a, 0, [a, b])
        await s.produce(a, [0, 1, 2])
        await s.elect(a, 1, [a, b])
        await s.produce(a, [3, 4, 5, 6, 7])
        await s.remote_ranges(a, [(0, 2), (3, 5)])
        await s.cluster.caught_up(TP, a, [b])

        await lose_every_disk(s)
        await s.elect(a, 2, [a, b])
        # Offsets 6-7 were only on the lost disks: the log goes on after the remote 5.
        assert await produce_when_served(s, a, 8) == 6
        leader = s.cluster.node(a).plog(TP)
        assert (leader.log_start_offset, leader.local_log_start_offset) == (0, 6)
        assert s.cluster.node(a).epochs(TP) == [(0, 0), (1, 3), (2, 6)]
        # The follower, empty too, took Kafka's path: OFFSET_MOVED_TO_TIERED_STORAGE at 0, its
        # state built below the leader's local log start, then offset 6 fetched.
        await s.cluster.caught_up(TP, a, [b])
        history = expected([(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 1), (8, 2)])
        assert await s.read(a) == history
        follower = s.cluster.node(b).plog(TP)
        assert follower.local_log_start_offset == 6
        assert s.cluster.node(b).epochs(TP) == [(0, 0), (1, 3), (2, 6)]
        await s.elect(b, 3, [a, b])
        assert await produce_when_served(s, b, 9) == 7
        await s.cluster.caught_up(TP, b, [a])
        assert await s.read(b) == [*history, (7, 3, values([9])[0])]

    run(tmp_path, 2, topic_config(), scenario, FAST_ISR)


def test_an_empty_tiered_partition_with_nothing_remote_starts_at_offset_0(
    tmp_path: Path,
) -> None:
    async def scenario(s: Scenario) -> None:
        a, b = 1, 2
        # Leadership moved before anything was produced: epoch 2, empty logs, no segment.
        await s.elect(a, 0, [a, b])
        await s.elect(b, 1, [a, b])
        await s.elect(a, 2, [a, b])
        assert await produce_when_served(s, a, 0) == 0
        await s.cluster.caught_up(TP, a, [b])
        assert await s.read(a) == expected([(0, 2)])

    run(tmp_path, 2, topic_config(), scenario, FAST_ISR)
