"""Partition: a leader's high watermark, ISR changes and acks=all rules, over a real log."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.records.builder import RecordBatchBuilder
from core.server.cluster_types import LeaderAndIsr, PartitionState, TopicPartition
from core.server.isr_writer import IsrWriteError
from core.server.partition import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    Partition,
    ReplicaState,
    UnknownLeaderEpochError,
)

LAG_MS = 10_000
NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


@dataclass
class ScriptedWriter:
    """An IsrWriter answering as told: accept, refuse (None) or fail."""

    answer: str = "accept"
    submitted: list[LeaderAndIsr] = field(default_factory=list)

    async def submit(
        self, tp: TopicPartition, proposed: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        self.submitted.append(proposed)
        if self.answer == "refuse":
            return None
        if self.answer == "fail":
            raise IsrWriteError("ZooKeeper is unreachable")
        return replace(proposed, partition_epoch=proposed.partition_epoch + 1)


class Host:
    """The ReplicaHost of a partition under test: broker 1, a clock moved by hand."""

    broker_id = 1
    replica_lag_time_max_ms = LAG_MS

    def __init__(self) -> None:
        self.now = 1_000_000
        self.isr_writer = ScriptedWriter()
        self.advanced: list[int] = []

    def clock_ms(self) -> int:
        return self.now

    def on_high_watermark_advanced(self, partition: Partition) -> None:
        self.advanced.append(partition.log.high_watermark)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


async def settle() -> None:
    """Let the ISR write tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


def batch(n: int = 1) -> bytearray:
    builder = RecordBatchBuilder()
    for i in range(n):
        builder.append(b"value-%d" % i, key=b"k")
    return builder.build()


def state(
    leader: int = 1,
    epoch: int = 1,
    isr: tuple[int, ...] = (1, 2, 3),
    replicas: tuple[int, ...] = (1, 2, 3),
    partition_epoch: int = 0,
) -> PartitionState:
    return PartitionState(
        topic="t",
        topic_id=uuid.UUID(int=7),
        partition=0,
        controller_epoch=5,
        leader_and_isr=LeaderAndIsr(leader, epoch, isr, partition_epoch),
        replicas=replicas,
    )


@pytest.fixture
def host() -> Host:
    return Host()


@pytest.fixture
def make(tmp_path: Path, host: Host) -> Callable[..., Partition]:
    def build(min_isr: int = 1) -> Partition:
        log = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(min_insync_replicas=min_isr))
        return Partition("t", uuid.UUID(int=7), 0, log, host)

    return build


def fetch(partition: Partition, host: Host, replica: int, offset: int) -> None:
    """A follower's fetch at ``offset``, read now."""
    assert partition.update_follower_fetch_state(
        replica, offset, 0, host.now, partition.log.log_end_offset
    )


# -- the high watermark ---------------------------------------------------------------------------
def test_a_leader_alone_in_the_isr_moves_the_high_watermark_with_each_append(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(isr=(1,), replicas=(1,)))
        p.append_as_leader(batch(3))
        assert p.high_watermark == p.log.log_end_offset == 3
        assert host.advanced == [3]

    run(test)


def test_the_high_watermark_is_the_slowest_isr_member_and_never_goes_back(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state())
        for _ in range(10):
            p.append_as_leader(batch())
        assert p.high_watermark == 0  # the followers' positions are unknown
        fetch(p, host, 2, 6)
        assert p.high_watermark == 0
        fetch(p, host, 3, 4)
        assert p.high_watermark == 4
        fetch(p, host, 3, 10)
        assert p.high_watermark == 6
        fetch(p, host, 2, 10)
        assert p.high_watermark == 10
        # A follower that restarted behind (its fetch offset went down) does not move the
        # high watermark back.
        fetch(p, host, 2, 3)
        assert p.high_watermark == 10
        assert host.advanced == [4, 6, 10]

    run(test)


def test_a_non_isr_replica_caught_up_within_the_lag_time_also_holds_the_high_watermark(
    make, host
) -> None:
    async def test() -> None:
        # Kafka 3.x: a replica about to join the ISR is not left behind.
        p = make()
        p.make_leader(state(isr=(1, 2), replicas=(1, 2, 3)))
        host.isr_writer.answer = "refuse"
        for _ in range(4):
            p.append_as_leader(batch())
        fetch(p, host, 3, 4)  # caught up now (offset = the leader's log end)
        await settle()  # its proposal to join the ISR was refused
        assert p.isr == (1, 2) and p.pending_isr is None
        p.append_as_leader(batch())
        fetch(p, host, 2, 5)
        assert p.high_watermark == 4
        host.now += LAG_MS + 1  # no longer caught up within the lag time
        assert p.maybe_increment_high_watermark()
        assert p.high_watermark == 5

    run(test)


# -- acks=all and min.insync.replicas ------------------------------------------------------------
def test_acks_all_is_refused_before_the_append_below_min_insync_replicas(make, host) -> None:
    async def test() -> None:
        p = make(min_isr=2)
        p.make_leader(state(isr=(1,)))
        with pytest.raises(NotEnoughReplicasError, match=r"min\.isr requirement of 2"):
            p.append_as_leader(batch(), required_acks=-1)
        assert p.log.log_end_offset == 0
        p.append_as_leader(batch(), required_acks=1)
        p.append_as_leader(batch(), required_acks=0)
        assert p.log.log_end_offset == 2

    run(test)


def test_acks_all_completion_rules(make, host) -> None:
    async def test() -> None:
        p = make(min_isr=2)
        p.make_leader(state(isr=(1, 2)))
        info = p.append_as_leader(batch(2), required_acks=-1)
        required = info.last_offset + 1
        assert p.check_enough_replicas_reached(required) == (False, NONE)
        fetch(p, host, 2, required)
        assert p.check_enough_replicas_reached(required) == (True, NONE)

        # The ISR shrank below min.insync.replicas before the high watermark got there.
        info = p.append_as_leader(batch(), required_acks=-1)
        host.now += LAG_MS + 1
        p.maybe_shrink_isr()
        await settle()
        assert p.isr == (1,)
        assert p.check_enough_replicas_reached(info.last_offset + 1) == (
            True,
            NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        )

        # Leadership moved.
        p.make_follower(state(leader=2, epoch=2))
        assert p.check_enough_replicas_reached(0) == (True, NOT_LEADER_OR_FOLLOWER)
        with pytest.raises(NotLeaderError):
            p.append_as_leader(batch())

    run(test)


# -- the ISR -------------------------------------------------------------------------------------
def test_a_follower_joins_the_isr_at_the_high_watermark_and_the_epoch_start(
    make, host, tmp_path
) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(isr=(1,), replicas=(1, 2)))
        for _ in range(6):
            p.append_as_leader(batch())
        p.make_leader(state(epoch=2, isr=(1,), replicas=(1, 2)))  # the epoch starts at 6
        assert p.leader_epoch_start_offset == 6
        fetch(p, host, 2, 5)
        assert p.pending_isr is None and host.isr_writer.submitted == []
        fetch(p, host, 2, 6)
        assert p.pending_isr is not None and p.maximal_isr == (1, 2)
        await settle()
        assert host.isr_writer.submitted == [LeaderAndIsr(1, 2, (1, 2), 0)]
        assert p.isr == (1, 2) and p.partition_epoch == 1 and p.pending_isr is None

    run(test)


def test_while_a_follower_is_being_added_the_high_watermark_waits_for_it(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(isr=(1,), replicas=(1, 2)))
        p.append_as_leader(batch())
        assert p.high_watermark == 1
        fetch(p, host, 2, 1)  # joins: the proposal is in flight
        p.append_as_leader(batch())
        assert p.high_watermark == 1  # the maximal ISR includes broker 2
        await settle()
        fetch(p, host, 2, 2)
        assert p.high_watermark == 2

    run(test)


def test_a_follower_not_caught_up_for_the_lag_time_leaves_the_isr(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(isr=(1, 2, 3)))
        p.append_as_leader(batch())
        fetch(p, host, 2, 1)
        fetch(p, host, 3, 1)
        # No appends: followers at the log end stay in sync however long it is quiet.
        host.now += 3 * LAG_MS
        p.maybe_shrink_isr()
        assert p.pending_isr is None and host.isr_writer.submitted == []
        # Both keep fetching at the log end; then broker 3 stops; broker 2 keeps up.
        fetch(p, host, 2, 1)
        fetch(p, host, 3, 1)
        p.append_as_leader(batch())
        host.now += LAG_MS // 2
        fetch(p, host, 2, 2)
        p.maybe_shrink_isr()
        assert p.pending_isr is None and host.isr_writer.submitted == []
        host.now += LAG_MS // 2 + 1
        fetch(p, host, 2, 2)
        assert p.high_watermark == 1  # broker 3 holds it back
        p.maybe_shrink_isr()
        await settle()
        assert host.isr_writer.submitted[-1].isr == (1, 2)
        assert p.isr == (1, 2)
        assert p.high_watermark == 2  # without broker 3 it moves

    run(test)


def test_kafkas_caught_up_rule_counts_a_fetch_of_the_previous_log_end() -> None:
    replica = ReplicaState(2)
    replica.update_fetch_state(10, 0, fetch_time_ms=1000, leader_log_end_offset=10)
    assert replica.last_caught_up_time_ms == 1000
    # Behind the leader's log end now, but at its log end of the previous fetch: caught up
    # as of that previous fetch.
    replica.update_fetch_state(10, 0, fetch_time_ms=2000, leader_log_end_offset=15)
    assert replica.last_caught_up_time_ms == 1000
    replica.update_fetch_state(15, 0, fetch_time_ms=3000, leader_log_end_offset=20)
    assert replica.last_caught_up_time_ms == 2000
    replica.update_fetch_state(16, 0, fetch_time_ms=4000, leader_log_end_offset=20)
    assert replica.last_caught_up_time_ms == 2000
    assert not replica.is_caught_up(20, now_ms=2000 + LAG_MS + 1, max_lag_ms=LAG_MS)
    assert replica.is_caught_up(16, now_ms=10**9, max_lag_ms=LAG_MS)


def test_a_refused_isr_change_waits_for_the_controller(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(isr=(1,), replicas=(1, 2)))
        host.isr_writer.answer = "refuse"
        fetch(p, host, 2, 0)
        await settle()
        assert p.isr == (1,) and p.pending_isr is None
        fetch(p, host, 2, 0)
        await settle()
        assert len(host.isr_writer.submitted) == 1  # not proposed again
        # The controller's LeaderAndIsr (a newer partition epoch) lets it propose again.
        host.isr_writer.answer = "accept"
        p.make_leader(state(isr=(1,), replicas=(1, 2), partition_epoch=3))
        fetch(p, host, 2, 0)
        await settle()
        assert p.isr == (1, 2) and p.partition_epoch == 4

    run(test)


def test_a_failed_isr_write_keeps_the_committed_isr_and_is_proposed_again(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(isr=(1,), replicas=(1, 2)))
        host.isr_writer.answer = "fail"
        fetch(p, host, 2, 0)
        await settle()
        assert p.isr == (1,) and p.pending_isr is None
        host.isr_writer.answer = "accept"
        fetch(p, host, 2, 0)
        await settle()
        assert p.isr == (1, 2)
        assert len(host.isr_writer.submitted) == 2

    run(test)


def test_a_leader_and_isr_arriving_while_a_change_is_in_flight_wins(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(isr=(1,), replicas=(1, 2)))
        fetch(p, host, 2, 0)
        assert p.pending_isr is not None
        p.make_leader(state(epoch=2, isr=(1,), replicas=(1, 2), partition_epoch=5))
        await settle()
        assert p.isr == (1,) and p.partition_epoch == 5

    run(test)


# -- roles and epochs ------------------------------------------------------------------------
def test_a_new_leader_records_its_epoch_start_before_any_append(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(epoch=3, isr=(1,)))
        p.append_as_leader(batch(4))
        p.make_follower(state(leader=2, epoch=4))
        assert p.make_leader(state(epoch=5, isr=(1,))) is True
        p.assign_epoch_start_offset()
        assert p.log.end_offset_for_epoch(5) == (5, 4)
        assert p.log.end_offset_for_epoch(3) == (3, 4)
        # The same epoch again is not a new one.
        assert p.make_leader(state(epoch=5, isr=(1,), partition_epoch=1)) is False

    run(test)


def test_request_leader_epochs_are_checked(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(epoch=4, isr=(1,)))
        p.check_leader_epoch(-1)
        p.check_leader_epoch(4)
        with pytest.raises(FencedLeaderEpochError):
            p.check_leader_epoch(3)
        with pytest.raises(UnknownLeaderEpochError):
            p.check_leader_epoch(5)

    run(test)


def test_make_follower_says_when_the_fetcher_must_start_again(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(epoch=1, isr=(1,)))
        assert p.make_follower(state(leader=2, epoch=2)) is True  # was leader
        assert p.make_follower(state(leader=2, epoch=2, partition_epoch=1)) is False
        assert p.make_follower(state(leader=3, epoch=3)) is True
        assert not p.is_leader and p.remote_replicas == {}

    run(test)


def test_a_follower_takes_the_leaders_high_watermark_up_to_its_own_log_end(make, host) -> None:
    async def test() -> None:
        p = make()
        p.make_leader(state(isr=(1,)))
        p.append_as_leader(batch(5))
        p.make_follower(state(leader=2, epoch=2))
        p.update_follower_high_watermark(9)
        assert p.high_watermark == 5
        p.update_follower_high_watermark(3)
        assert p.high_watermark == 3

    run(test)
