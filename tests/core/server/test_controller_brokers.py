"""ZkController against a real ZooKeeper with fake brokers: brokers failing and coming back,
ISR change notifications, preferred and unclean elections, controlled shutdown."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.server.api_keys import ApiKey
from core.server.controller.elections import ElectionType
from core.server.controller.errors import (
    BrokerNotAvailableError,
    NotControllerError,
    StaleBrokerEpochError,
)

from .fake_brokers import Cluster, eventually, run


async def expand_isr(cluster: Cluster, tp, isr) -> None:
    """What a leader does when a follower caught up: write the ISR on the state's version,
    same leader epoch, and notify the controller."""
    state = await cluster.state(tp)
    await cluster.admin.update_partition_states({tp: replace(state, isr=isr)},
                                                controller_epoch_zk_version=-1)  # fmt: skip
    await cluster.admin.create_isr_change_notification([tp])


def test_broker_failure_moves_leaders_shrinks_isrs_and_keeps_the_last_isr_member(
    zk_chroot, tmp_path
):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2, b3 = await cluster.start_brokers(1, 2, 3)
            await cluster.create_topic("t", {0: (1, 2, 3)})
            await cluster.create_topic("u", {0: (2, 1)})
            controller = await cluster.start_controller(9)
            await eventually(lambda: b3.cache.partition(("u", 0)) is not None, "the metadata")
            await b1.kill()
            # The leader moves to the next ISR member, with a new leader epoch.
            t0 = await cluster.wait_state(("t", 0), lambda s: s.leader == 2, "t-0 led by 2")
            assert (t0.leader_epoch, t0.isr) == (1, (2, 3))
            # The dead follower leaves the ISR, and that bumps the leader epoch too.
            u0 = await cluster.wait_state(("u", 0), lambda s: s.isr == (2,), "1 out of u-0's ISR")
            assert (u0.leader, u0.leader_epoch) == (2, 1)
            # The live replicas hear of it; every broker's metadata follows.
            await eventually(lambda: b3.latest_state(("t", 0)).leader == 2, "LeaderAndIsr to 3")
            assert b3.latest_state(("t", 0)).leader_epoch == 1
            await eventually(lambda: b2.latest_state(("u", 0)).isr == (2,), "LeaderAndIsr to 2")
            await eventually(lambda: not b3.cache.is_alive(1), "broker 1 gone from metadata")
            assert b3.cache.leader(("t", 0)) == 2
            assert b3.cache.offline_replicas(("t", 0)) == (1,)
            # Broker 2 fails too: t-0 goes to 3; u-0 has no live ISR member left. Its last
            # ISR member stays in the ISR, and the partition has no leader.
            await b2.kill()
            t0 = await cluster.wait_state(("t", 0), lambda s: s.leader == 3, "t-0 led by 3")
            assert (t0.leader_epoch, t0.isr) == (2, (3,))
            u0 = await cluster.wait_state(("u", 0), lambda s: s.leader == -1, "u-0 leaderless")
            assert (u0.isr, u0.leader_epoch) == ((2,), 2)
            await eventually(lambda: b3.cache.leader(("u", 0)) == -1, "u-0 leaderless in metadata")
            # Broker 1 comes back: it is not in u-0's ISR, so (clean elections only) u-0 stays
            # leaderless; broker 1 is told its partitions.
            await cluster.restart(1)
            await eventually(lambda: b1.cache.is_alive(1), "broker 1 back in metadata")
            await eventually(lambda: b1.latest_state(("u", 0)) is not None, "u-0 to broker 1")
            assert (await cluster.state(("u", 0))).leader == -1
            # The topic allows unclean elections now: the first live replica leads, alone.
            await cluster.admin.set_topic_config("u", {"unclean.leader.election.enable": "true"})
            u0 = await cluster.wait_state(("u", 0), lambda s: s.leader == 1, "unclean u-0 leader")
            assert (u0.isr, u0.leader_epoch, int(u0.leader_recovery_state)) == ((1,), 3, 1)
            await eventually(lambda: b1.latest_state(("u", 0)).leader == 1, "u-0 to broker 1")
            assert controller.is_active

    run(scenario())


def test_a_returning_broker_follows_then_leads_again_by_preferred_election(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2 = await cluster.start_brokers(1, 2)
            await cluster.create_topic("t", {0: (1, 2)})
            controller = await cluster.start_controller(9)
            await cluster.wait_state(("t", 0), lambda s: s.leader == 1, "t-0 led by 1")
            await b1.kill()
            await cluster.wait_state(("t", 0), lambda s: s.leader == 2, "t-0 led by 2")
            old_epoch = b1.epoch
            await cluster.restart(1)
            assert b1.epoch > old_epoch
            # Back as a follower of 2, told with its new broker epoch.
            await eventually(
                lambda: (
                    b1.latest_state(("t", 0)) is not None and b1.latest_state(("t", 0)).leader == 2
                ),
                "LeaderAndIsr to the returning broker",
            )
            last = b1.requests(ApiKey.LEADER_AND_ISR)[-1]
            assert last.broker_epoch == b1.epoch
            # Not in the ISR yet: the preferred replica cannot lead.
            results = await controller.elect_leaders(ElectionType.PREFERRED, {("t", 0)})
            assert results[("t", 0)][0] == 80  # PREFERRED_LEADER_NOT_AVAILABLE
            # The leader takes it back into the ISR and says so: every broker learns it.
            await expand_isr(cluster, ("t", 0), (2, 1))
            await eventually(lambda: b1.cache.partition(("t", 0)).isr == (2, 1), "ISR change")
            await eventually(lambda: b2.cache.partition(("t", 0)).isr == (2, 1), "ISR change")
            await eventually(lambda: _no_notifications(cluster), "notifications deleted")
            results = await controller.elect_leaders(ElectionType.PREFERRED, {("t", 0)})
            assert results == {("t", 0): (0, None)}
            state = await cluster.state(("t", 0))
            assert (state.leader, state.leader_epoch, state.isr) == (1, 2, (2, 1))
            await eventually(lambda: b2.latest_state(("t", 0)).leader == 1, "2 follows 1")
            # Asked again: nothing to do.
            results = await controller.elect_leaders(ElectionType.PREFERRED, {("t", 0)})
            assert results == {("t", 0): (84, None)}  # ELECTION_NOT_NEEDED

    run(scenario())


async def _no_notifications(cluster: Cluster) -> bool:
    return await cluster.admin.get_isr_change_notifications() == []


def test_auto_rebalance_moves_leadership_back_to_the_preferred_replica(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, _ = await cluster.start_brokers(1, 2)
            await cluster.create_topic("t", {0: (1, 2), 1: (2, 1)})
            props = {
                "auto.leader.rebalance.enable": "true",
                "leader.imbalance.check.interval.seconds": "1",
            }
            await cluster.start_controller(9, props)
            await cluster.wait_state(("t", 0), lambda s: s.leader == 1, "t-0 led by 1")
            await b1.kill()
            await cluster.wait_state(("t", 0), lambda s: s.leader == 2, "t-0 led by 2")
            await cluster.restart(1)
            await eventually(lambda: b1.latest_state(("t", 0)) is not None, "1 is back")
            await expand_isr(cluster, ("t", 0), (2, 1))
            # Broker 1 leads none of the partitions it prefers (100% > 10%): the periodic
            # check elects it again.
            state = await cluster.wait_state(("t", 0), lambda s: s.leader == 1, "rebalance")
            assert state.isr == (2, 1)
            assert (await cluster.state(("t", 1))).leader == 2

    run(scenario())


def test_a_bounced_broker_is_handled_as_a_failure_then_a_startup(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2 = await cluster.start_brokers(1, 2)
            await cluster.create_topic("t", {0: (1, 2), 1: (2, 1)})
            await cluster.start_controller(9)
            await eventually(lambda: b1.latest_state(("t", 1)) is not None, "metadata")
            old_epoch = b1.epoch
            await b1.bounce()
            assert b1.epoch > old_epoch
            # As a failure: its leadership moves, it leaves the ISRs (epochs bumped) ...
            t0 = await cluster.wait_state(("t", 0), lambda s: s.leader == 2, "t-0 led by 2")
            assert (t0.isr, t0.leader_epoch) == ((2,), 1)
            t1 = await cluster.wait_state(("t", 1), lambda s: s.isr == (2,), "1 out of t-1's ISR")
            assert t1.leader_epoch == 1
            # ... then as a startup: it is told its partitions, with its new epoch.
            await eventually(
                lambda: (
                    b1.latest_state(("t", 0)).leader == 2
                    and b1.latest_state(("t", 1)).leader_epoch == 1
                ),
                "LeaderAndIsr to the bounced broker",
            )
            assert b1.requests(ApiKey.LEADER_AND_ISR)[-1].broker_epoch == b1.epoch
            assert b2.latest_state(("t", 0)).leader == 2

    run(scenario())


def test_the_brokers_unclean_default_applies_unless_the_topic_says_otherwise(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2 = await cluster.start_brokers(1, 2)
            await cluster.create_topic("dirty", {0: (1, 2)})
            await cluster.create_topic("clean", {0: (1, 2)})
            await cluster.admin.set_topic_config(
                "clean", {"unclean.leader.election.enable": "false"}
            )
            await cluster.start_controller(9, {"unclean.leader.election.enable": "true"})
            await eventually(lambda: b2.cache.partition(("clean", 0)) is not None, "metadata")
            await b2.kill()
            for topic in ("dirty", "clean"):
                await cluster.wait_state((topic, 0), lambda s: s.isr == (1,), "2 out of ISR")
            await b1.kill()
            for topic in ("dirty", "clean"):
                await cluster.wait_state((topic, 0), lambda s: s.leader == -1, "leaderless")
            # Broker 2 returns, out of both ISRs: only the topic without an override leads.
            await cluster.restart(2)
            dirty = await cluster.wait_state(("dirty", 0), lambda s: s.leader == 2, "unclean")
            assert (dirty.isr, int(dirty.leader_recovery_state)) == ((2,), 1)
            await eventually(lambda: b2.cache.is_alive(2), "broker 2 back")
            assert (await cluster.state(("clean", 0))).leader == -1

    run(scenario())


def test_controlled_shutdown_moves_leaderships_away_and_returns_what_cannot_move(
    zk_chroot, tmp_path
):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2, b3 = await cluster.start_brokers(1, 2, 3)
            await cluster.create_topic("t", {0: (1, 2, 3), 1: (2, 1, 3), 2: (1, 3)})
            await cluster.create_topic("single", {0: (1,)})
            await cluster.create_topic("other", {0: (2, 3)})
            controller = await cluster.start_controller(9)
            await eventually(lambda: b3.cache.partition(("other", 0)) is not None, "metadata")
            with pytest.raises(StaleBrokerEpochError) as stale:
                await controller.controlled_shutdown(1, b1.epoch - 1)
            assert stale.value.error_code == 77
            with pytest.raises(BrokerNotAvailableError) as unknown:
                await controller.controlled_shutdown(7, -1)
            assert unknown.value.error_code == 8
            remaining = await controller.controlled_shutdown(1, b1.epoch)
            # Only the one-replica partition stays with broker 1.
            assert remaining == {("single", 0)}
            t0, t1, t2 = [await cluster.state(("t", p)) for p in range(3)]
            assert (t0.leader, t0.isr, t0.leader_epoch) == (2, (2, 3), 1)
            assert (t2.leader, t2.isr, t2.leader_epoch) == (3, (3,), 1)
            # Followed by 1: out of the ISR (epoch bumped), and 1 stops its replica.
            assert (t1.leader, t1.isr, t1.leader_epoch) == (2, (2, 3), 1)
            await eventually(lambda: (("t", 1), 0, False) in b1.stop_replicas(), "StopReplica")
            assert all(not delete for _, _, delete in b1.stop_replicas())
            # The new leaders and the shutting-down broker (now a follower) are told.
            await eventually(lambda: b2.latest_state(("t", 0)).leader == 2, "2 leads t-0")
            await eventually(lambda: b1.latest_state(("t", 0)).leader == 2, "1 follows t-0")
            await eventually(lambda: b3.latest_state(("t", 2)).leader == 3, "3 leads t-2")
            # A shutting-down broker does not get leadership back, nor new ISRs.
            await b2.kill()
            t0 = await cluster.wait_state(("t", 0), lambda s: s.leader == 3, "t-0 led by 3")
            assert 1 not in t0.isr
            await cluster.create_topic("late", {0: (1, 3)})
            late = await cluster.wait_state(("late", 0), lambda s: True, "late-0's state")
            assert (late.leader, late.isr) == (3, (3,))
            # Another controller cannot be asked.
            other = await cluster.start_controller(8)
            with pytest.raises(NotControllerError):
                await other.controlled_shutdown(1, b1.epoch)
            with pytest.raises(NotControllerError):
                await other.elect_leaders(ElectionType.PREFERRED, None)

    run(scenario())


def test_elect_leaders_answers_kafkas_error_codes(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2, b3 = await cluster.start_brokers(1, 2, 3)
            await cluster.create_topic("t", {0: (1, 2), 1: (2, 3), 2: (3, 1)})
            controller = await cluster.start_controller(9)
            await eventually(lambda: b1.cache.partition(("t", 2)) is not None, "metadata")
            await b3.kill()
            await cluster.wait_state(("t", 1), lambda s: s.isr == (2,), "3 out of t-1's ISR")
            await cluster.wait_state(("t", 2), lambda s: s.leader == 1, "t-2 led by 1")
            results = await controller.elect_leaders(
                ElectionType.PREFERRED, {("t", 0), ("t", 2), ("t", 9), ("nope", 0)}
            )
            assert results[("t", 0)] == (84, None)  # already led by its preferred replica
            assert results[("t", 2)][0] == 80  # the preferred replica 3 is down
            assert results[("t", 9)] == (3, "The partition does not exist.")
            assert results[("nope", 0)][0] == 3
            # Every partition: those needing no election are left out.
            results = await controller.elect_leaders(ElectionType.PREFERRED, None)
            assert set(results) == {("t", 2)}
            # Unclean: only for partitions whose leader is gone.
            results = await controller.elect_leaders(ElectionType.UNCLEAN, {("t", 0)})
            assert results == {("t", 0): (84, None)}
            # t-1: leader 2 with ISR (2,); 2 dies, 3 is down too: no replica can lead.
            await b2.kill()
            await cluster.wait_state(("t", 1), lambda s: s.leader == -1, "t-1 leaderless")
            results = await controller.elect_leaders(ElectionType.UNCLEAN, {("t", 1)})
            assert results[("t", 1)][0] == 83  # ELIGIBLE_LEADERS_NOT_AVAILABLE
            # 3 comes back: out of the ISR, so only an unclean election makes it leader.
            await cluster.restart(3)
            await eventually(lambda: b1.cache.is_alive(3), "3 is back")
            assert (await cluster.state(("t", 1))).leader == -1
            results = await controller.elect_leaders(ElectionType.UNCLEAN, {("t", 1)})
            assert results == {("t", 1): (0, None)}
            t1 = await cluster.state(("t", 1))
            assert (t1.leader, t1.isr, int(t1.leader_recovery_state)) == (3, (3,), 1)

    run(scenario())
