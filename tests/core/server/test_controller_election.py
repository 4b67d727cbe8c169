"""ZkController against a real ZooKeeper with fake brokers: election, failover, fencing, and
topic creation (tests/core/server/fake_brokers.py)."""

from __future__ import annotations

import asyncio

import pytest

from core.server.api_keys import ApiKey
from core.server.cluster_types import leader_and_isr_request_states, update_metadata_request_states
from core.server.controller.errors import NotControllerError
from tests.support.zookeeper_server import expire_session

from .fake_brokers import Cluster, eventually, run

SPREAD = {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}


def test_a_new_topic_gets_leaders_spread_isrs_of_live_replicas_and_is_announced(
    zk_chroot, tmp_path
):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            brokers = await cluster.start_brokers(1, 2, 3)
            controller = await cluster.start_controller(1)
            await eventually(lambda: controller.is_active, "an active controller")
            await cluster.create_topic("t", SPREAD)
            for p, replicas in SPREAD.items():
                state = await cluster.wait_state(("t", p), lambda s: True, "a partition state")
                # The first live replica leads; every live replica is in the ISR.
                assert (state.leader, state.isr, state.leader_epoch) == (replicas[0], replicas, 0)
                assert state.controller_epoch == controller.controller_epoch == 1
            assignment = await cluster.admin.get_topic_assignment("t")
            assert assignment.topic_id is not None  # the controller gives the topic its id
            for broker in brokers:
                await eventually(
                    lambda b=broker: len(b.cache.partitions_of("t")) == 3, "the metadata"
                )
                assert broker.cache.topic_id("t") == assignment.topic_id
                assert {p: broker.cache.leader(("t", p)) for p in SPREAD} == {0: 1, 1: 2, 2: 3}
                # Each replica is told of its new partitions, with is_new.
                states = {s.tp: s for s in broker.leader_and_isr_states()}
                assert set(states) == {("t", p) for p in SPREAD}
                assert all(s.is_new for s in states.values())
                assert states[("t", 1)].leader == 2 and states[("t", 1)].isr == (2, 3, 1)
                assert states[("t", 1)].topic_id == assignment.topic_id
                for request in broker.requests(ApiKey.LEADER_AND_ISR):
                    assert (request.controller_id, request.controller_epoch) == (1, 1)
                    assert request.broker_epoch == broker.epoch

    run(scenario())


def test_partitions_without_live_replicas_wait_and_added_partitions_are_created(
    zk_chroot, tmp_path
):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2 = await cluster.start_brokers(1, 2)
            controller = await cluster.start_controller(1)
            await eventually(lambda: controller.is_active, "an active controller")
            await cluster.create_topic("t", {0: (1, 4), 1: (5,)})
            state = await cluster.wait_state(("t", 0), lambda s: True, "t-0's state")
            assert (state.leader, state.isr) == (1, (1,))  # 4 is not live
            # t-1's only replica is not live: no state until broker 5 comes.
            await eventually(lambda: b1.cache.partition(("t", 0)) is not None, "t-0 announced")
            assert await cluster.state(("t", 1)) is None
            (b5,) = await cluster.start_brokers(5)
            state = await cluster.wait_state(("t", 1), lambda s: True, "t-1's state")
            assert (state.leader, state.isr) == (5, (5,))
            await eventually(lambda: b5.latest_state(("t", 1)) is not None, "t-1 to broker 5")
            assert b5.latest_state(("t", 1)).is_new
            # Partitions added to the assignment (as Kafka's CreatePartitions writes them).
            assignment = await cluster.admin.get_topic_assignment("t")
            grown = dict(assignment.partitions)
            grown[2] = type(grown[0])((2, 1))
            await cluster.admin.set_topic_assignment(
                "t", type(assignment)(assignment.topic_id, grown)
            )
            state = await cluster.wait_state(("t", 2), lambda s: True, "t-2's state")
            assert (state.leader, state.isr, state.leader_epoch) == (2, (2, 1), 0)
            await eventually(lambda: b2.latest_state(("t", 2)) is not None, "t-2 to broker 2")
            await eventually(lambda: b5.cache.leader(("t", 2)) == 2, "t-2 in every cache")

    run(scenario())


def test_failover_to_another_controller_bumps_the_epoch_and_resends_full_metadata(
    zk_chroot, tmp_path
):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            brokers = await cluster.start_brokers(1, 2, 3)
            await cluster.create_topic("t", SPREAD)
            first = await cluster.start_controller(1)
            await eventually(lambda: first.is_active, "controller 1 elected")
            second = await cluster.start_controller(2)
            for broker in brokers:
                await eventually(lambda b=broker: len(b.cache.partitions_of("t")) == 3, "metadata")
                assert broker.cache.controller_id == 1
            assert not second.is_active and first.controller_epoch == 1
            # Controller 1's ZooKeeper session ends: controller 2 takes over.
            client_id = cluster.controller_zk(first).zookeeper.client_id
            await asyncio.to_thread(expire_session, zk_chroot, client_id)
            await eventually(lambda: second.is_active, "controller 2 elected")
            await eventually(lambda: not first.is_active, "controller 1 resigned")
            assert second.controller_epoch == 2
            for broker in brokers:
                # A full UpdateMetadata from the new controller: every partition, every broker.
                def full_from_second(b=broker) -> bool:
                    return any(
                        r.controller_id == 2
                        and r.controller_epoch == 2
                        and len(update_metadata_request_states(r)) == 3
                        and len(r.live_brokers) == 3
                        for r in b.requests(ApiKey.UPDATE_METADATA)
                    )

                await eventually(full_from_second, "a full UpdateMetadata from controller 2")
                assert broker.cache.controller_id == 2 and broker.cache.controller_epoch == 2
                # Each request carries the epoch of the controller that sent it.
                sent = {(r.request.controller_id, r.controller_epoch) for r in broker.received}
                assert sent == {(1, 1), (2, 2)}
                assert {r.broker_epoch for r in broker.received} == {broker.epoch}
            # The partition states are unchanged: a failover elects no one.
            for p, replicas in SPREAD.items():
                state = await cluster.state(("t", p))
                assert (state.leader, state.leader_epoch) == (replicas[0], 0)
            # Controller 1 is not the controller any more: requests to it are refused.
            with pytest.raises(NotControllerError) as refused:
                await first.controlled_shutdown(3, brokers[2].epoch)
            assert refused.value.error_code == 41

    run(scenario())


def test_a_deposed_controller_writes_nothing(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2 = await cluster.start_brokers(1, 2)
            await cluster.create_topic("t", {0: (1, 2)})
            controller = await cluster.start_controller(1)
            await eventually(lambda: controller.is_active, "an active controller")
            await cluster.wait_state(("t", 0), lambda s: s.leader == 1, "t-0 led by 1")
            # Another controller's election bumps /controller_epoch behind this one's back.
            epoch = await cluster.admin.get_controller_epoch()
            await cluster.admin.increment_controller_epoch(epoch)
            # Broker 1 fails: the election the controller tries is fenced. It resigns without
            # writing, gives up /controller and is elected again with the next epoch.
            await b1.kill()
            state = await cluster.wait_state(("t", 0), lambda s: s.leader == 2, "t-0 led by 2")
            assert state.controller_epoch == 3 == controller.controller_epoch
            assert state.leader_epoch == 1  # one election: the fenced one left no trace
            assert state.isr == (2,)
            stale = [
                s
                for request in b2.requests(ApiKey.LEADER_AND_ISR)
                if request.controller_epoch == 1
                for s in leader_and_isr_request_states(request)
                if s.leader == 2
            ]
            assert stale == []

    run(scenario())
