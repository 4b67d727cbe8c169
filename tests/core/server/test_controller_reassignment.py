"""ZkController's partition reassignment against a real ZooKeeper with fake brokers: the
two phases (adding replicas, then moving leadership and removing the old ones once the ISR
has them), the topic znode's adding/removing replicas, cancellation, Kafka's error codes,
and a new controller resuming a reassignment in progress."""

from __future__ import annotations

from core.server.api_keys import ApiKey
from core.server.controller.errors import NotControllerError
from core.server.zookeeper.topic_data import ReplicaAssignment

from .fake_brokers import Cluster, eventually, run
from .test_controller_brokers import expand_isr

TP = ("t", 0)


async def assignment(cluster: Cluster) -> ReplicaAssignment:
    found = await cluster.admin.get_topic_assignment("t")
    assert found is not None
    return found.partitions[0]


def test_a_reassignment_adds_then_moves_leadership_then_removes(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2, b3 = await cluster.start_brokers(1, 2, 3)
            await cluster.create_topic("t", {0: (1, 2)})
            controller = await cluster.start_controller(9)
            before = await cluster.wait_state(TP, lambda s: s.leader == 1, "t-0 led by 1")
            results = await controller.alter_partition_reassignments({TP: (3, 2)})
            assert results == {TP: (0, None)}
            # Phase 1: RS = target + old, with the adding / removing replicas recorded.
            assert await assignment(cluster) == ReplicaAssignment((3, 2, 1), (3,), (1,))
            state = await cluster.state(TP)
            assert (state.leader, state.leader_epoch) == (1, before.leader_epoch + 1)
            await eventually(lambda: b3.latest_state(TP) is not None, "LeaderAndIsr to 3")
            assert b3.latest_state(TP).replicas == (3, 2, 1)
            listed = await controller.list_partition_reassignments()
            assert listed == {TP: ReplicaAssignment((3, 2, 1), (3,), (1,))}
            # Nothing more until 3 is in the ISR; then leadership leaves 1 and 1 is removed.
            await expand_isr(cluster, TP, (1, 2, 3))
            final = await cluster.wait_state(TP, lambda s: s.leader != 1, "leader moved")
            assert final.leader in (3, 2) and sorted(final.isr) == [2, 3]
            assert await assignment(cluster) == ReplicaAssignment((3, 2))
            await eventually(lambda: (TP, final.leader_epoch, True) in b1.stop_replicas(),
                             "StopReplica(delete) to 1")  # fmt: skip
            await eventually(lambda: b2.latest_state(TP).leader == final.leader, "2 told")
            assert await controller.list_partition_reassignments() == {}
            assert any(r for r in b3.requests(ApiKey.LEADER_AND_ISR))

    run(scenario())


def test_cancellation_errors_and_resumption_by_a_new_controller(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            await cluster.start_brokers(1, 2, 3)
            await cluster.create_topic("t", {0: (1, 2)})
            controller = await cluster.start_controller(9)
            await cluster.wait_state(TP, lambda s: s.leader == 1, "t-0 led by 1")
            results = await controller.alter_partition_reassignments(
                {TP: None, ("t", 5): (1,), ("nope", 0): (1,)}
            )
            assert results == {
                TP: (85, "No reassignment in progress."),
                ("t", 5): (3, "The partition does not exist."),
                ("nope", 0): (3, "The partition does not exist."),
            }
            bad = await controller.alter_partition_reassignments({TP: (1, 1)})
            assert bad[TP][0] == 39  # INVALID_REPLICA_ASSIGNMENT
            dead = await controller.alter_partition_reassignments({TP: (1, 7)})
            assert dead[TP][0] == 39
            # Cancelled while 3 is not in the ISR yet: back to the original replicas.
            await controller.alter_partition_reassignments({TP: (2, 3)})
            assert await assignment(cluster) == ReplicaAssignment((2, 3, 1), (3,), (1,))
            assert await controller.alter_partition_reassignments({TP: None}) == {TP: (0, None)}
            # Kafka's originReplicas: the replicas minus the adding ones, in RS's order.
            assert await assignment(cluster) == ReplicaAssignment((2, 1))
            assert (await cluster.state(TP)).leader == 1
            assert await controller.list_partition_reassignments() == {}
            # Started, then the controller goes: the next one finds it in the topic znode.
            await controller.alter_partition_reassignments({TP: (2, 3)})
            assert await assignment(cluster) == ReplicaAssignment((2, 3, 1), (3,), (1,))
            await controller.stop()
            await cluster.controller_zk(controller).close()  # /controller goes with the session
            other = await cluster.start_controller(8)
            await eventually(lambda: other.is_active, "8 is the controller")
            listed = await other.list_partition_reassignments()
            assert listed == {TP: ReplicaAssignment((2, 3, 1), (3,), (1,))}
            await expand_isr(cluster, TP, (1, 2, 3))
            final = await cluster.wait_state(TP, lambda s: sorted(s.isr) == [2, 3], "finished")
            assert final.leader == 2
            assert await assignment(cluster) == ReplicaAssignment((2, 3))
            try:
                await controller.list_partition_reassignments()
                raise AssertionError("a stopped controller answered")
            except NotControllerError:
                pass

    run(scenario())
