"""ZkController against a real ZooKeeper with fake brokers: topic deletion (Kafka's
TopicDeletionManager), including replicas on dead brokers and replicas that fail."""

from __future__ import annotations

from core.server.api_keys import ApiKey
from core.server.cluster_types import EPOCH_DURING_DELETE
from core.server.controller.elections import ElectionType

from .fake_brokers import Cluster, eventually, run


async def topic_gone(cluster: Cluster, topic: str) -> bool:
    admin = cluster.admin
    return (
        await admin.get_topic_assignment(topic) is None
        and topic not in await admin.get_topics_marked_for_deletion()
    )


def test_deletion_stops_then_deletes_every_replica_and_removes_the_znodes(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2 = await cluster.start_brokers(1, 2)
            await cluster.create_topic("t", {0: (1, 2), 1: (2, 1)})
            await cluster.create_topic("keep", {0: (1, 2)})
            await cluster.admin.set_topic_config("t", {"retention.ms": "1000"})
            await cluster.start_controller(9)
            await eventually(lambda: b2.cache.partition(("t", 1)) is not None, "metadata")
            await cluster.admin.mark_topic_for_deletion("t")
            await eventually(lambda: topic_gone(cluster, "t"), "t deleted from ZooKeeper")
            assert await cluster.admin.get_topic_config("t") == {}
            for broker in (b1, b2):
                # Gone from the metadata; each replica stopped, then deleted (epoch -2).
                assert not broker.cache.contains_topic("t")
                assert broker.cache.contains_topic("keep")
                stops = [(tp, e, d) for tp, e, d in broker.stop_replicas() if tp[0] == "t"]
                for p in (0, 1):
                    mine = [(e, d) for tp, e, d in stops if tp == ("t", p)]
                    assert mine == [(EPOCH_DURING_DELETE, False), (EPOCH_DURING_DELETE, True)]
            assert (await cluster.state(("keep", 0))).leader == 1

    run(scenario())


def test_the_controller_tells_its_broker_once_per_deleted_topic_with_id_and_configs(
    zk_chroot, tmp_path
):
    """The controller's broker marks a tiered topic's remote partitions for deletion: it is
    told the topic's id (from ZooKeeper), partitions and config overrides, once."""

    async def scenario():
        started = []
        async with Cluster(zk_chroot, tmp_path) as cluster:
            await cluster.start_brokers(1, 2)
            await cluster.create_topic("t", {0: (1, 2), 1: (2, 1)})
            await cluster.admin.set_topic_config("t", {"remote.storage.enable": "true"})
            await cluster.start_controller(9, deletion_started=lambda *a: started.append(a))

            async def topic_id():
                assignment = await cluster.admin.get_topic_assignment("t")
                return assignment is not None and assignment.topic_id

            await eventually(topic_id, "a topic id given by the controller")
            assignment = await cluster.admin.get_topic_assignment("t")
            await cluster.admin.mark_topic_for_deletion("t")
            await eventually(lambda: topic_gone(cluster, "t"), "t deleted from ZooKeeper")
            tiered = {"remote.storage.enable": "true"}
            assert started == [("t", assignment.topic_id, [0, 1], tiered)]

    run(scenario())


def test_deletion_with_a_dead_replica_completes_when_the_replica_returns(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2 = await cluster.start_brokers(1, 2)
            await cluster.create_topic("t", {0: (1, 2)})
            controller = await cluster.start_controller(9)
            await eventually(lambda: b2.cache.partition(("t", 0)) is not None, "metadata")
            await b2.kill()
            await cluster.wait_state(("t", 0), lambda s: s.isr == (1,), "2 out of the ISR")
            await cluster.admin.mark_topic_for_deletion("t")
            await eventually(
                lambda: (("t", 0), EPOCH_DURING_DELETE, True) in b1.stop_replicas(),
                "the live replica deleted",
            )
            await eventually(lambda: not b1.cache.contains_topic("t"), "t gone from metadata")
            # The replica on the dead broker holds the deletion back.
            assert await cluster.admin.get_topic_assignment("t") is not None
            results = await controller.elect_leaders(ElectionType.PREFERRED, {("t", 0)})
            assert results[("t", 0)] == (17, "The topic is being deleted")
            await cluster.restart(2)
            await eventually(lambda: topic_gone(cluster, "t"), "t deleted")
            assert (("t", 0), EPOCH_DURING_DELETE, True) in b2.stop_replicas()
            # The returning broker was not told to host the partition being deleted.
            restarted = b2.requests(ApiKey.LEADER_AND_ISR)[1:]
            assert all(s.topic != "t" for r in restarted for s in r.topic_states)

    run(scenario())


def test_a_replica_that_fails_to_delete_is_retried_when_its_broker_returns(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            b1, b2 = await cluster.start_brokers(1, 2)
            await cluster.create_topic("t", {0: (1, 2)})
            await cluster.start_controller(9)
            await eventually(lambda: b1.cache.partition(("t", 0)) is not None, "metadata")
            b1.partition_errors[ApiKey.STOP_REPLICA] = {("t", 0): 56}  # KAFKA_STORAGE_ERROR
            await cluster.admin.mark_topic_for_deletion("t")
            await eventually(
                lambda: (("t", 0), EPOCH_DURING_DELETE, True) in b1.stop_replicas(),
                "broker 1 asked to delete",
            )
            await eventually(
                lambda: (("t", 0), EPOCH_DURING_DELETE, True) in b2.stop_replicas(),
                "broker 2 asked to delete",
            )
            # Broker 2 deleted its replica, broker 1 failed: the topic stays.
            await eventually(lambda: not b2.cache.contains_topic("t"), "t gone from metadata")
            assert await cluster.admin.get_topic_assignment("t") is not None
            b1.partition_errors.clear()
            await cluster.restart(1)
            await eventually(lambda: topic_gone(cluster, "t"), "t deleted")
            deletes = [x for x in b1.stop_replicas() if x == (("t", 0), EPOCH_DURING_DELETE, True)]
            assert len(deletes) == 2

    run(scenario())


def test_deletion_markers_of_unknown_topics_are_removed(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            await cluster.start_brokers(1)
            controller = await cluster.start_controller(9)
            await eventually(lambda: controller.is_active, "an active controller")
            await cluster.admin.mark_topic_for_deletion("ghost")
            await eventually(
                lambda: _markers(cluster), "the marker of a topic that does not exist removed"
            )

    run(scenario())


def test_without_delete_topic_enable_markers_are_removed_and_topics_kept(zk_chroot, tmp_path):
    async def scenario():
        async with Cluster(zk_chroot, tmp_path) as cluster:
            (b1,) = await cluster.start_brokers(1)
            await cluster.create_topic("t", {0: (1,)})
            await cluster.start_controller(9, {"delete.topic.enable": "false"})
            await eventually(lambda: b1.cache.contains_topic("t"), "metadata")
            await cluster.admin.mark_topic_for_deletion("t")
            await eventually(lambda: _markers(cluster), "the marker removed")
            assert await cluster.admin.get_topic_assignment("t") is not None
            assert b1.cache.contains_topic("t") and b1.stop_replicas() == []

    run(scenario())


async def _markers(cluster: Cluster) -> bool:
    return await cluster.admin.get_topics_marked_for_deletion() == set()
