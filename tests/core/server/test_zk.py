"""KafkaZkClient against a real ZooKeeper (tests/support/zookeeper_server.py).

Each test gets a chroot of its own on the shared server (``zk_chroot``); tests that stop or
restart ZooKeeper start one of their own (``zookeeper_factory``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from core.server.zookeeper import paths as zk_paths
from core.server.zookeeper.client import ZkConnectionState
from core.server.zookeeper.data import (
    BrokerRegistration,
    EndPoint,
    ProducerIdBlock,
    encode_broker_registration,
    encode_cluster_id,
)
from core.server.zookeeper.errors import (
    ZkBrokerIdInUseError,
    ZkClosedError,
    ZkConnectionTimeoutError,
    ZkControllerMovedError,
    ZkNodeExistsError,
    ZkNoNodeError,
)
from core.server.zookeeper.kafka_zk import ControllerEpoch, KafkaZkClient, split_chroot
from core.server.zookeeper.ops import ZnodeData
from core.server.zookeeper.paths import MATCH_ANY_VERSION
from core.server.zookeeper.topic_data import (
    PartitionState,
    ReplicaAssignment,
    TopicAssignment,
    encode_config,
)
from tests.support.waiting import until
from tests.support.zookeeper_server import expire_session, free_port

T = TypeVar("T")
TEST_TIMEOUT_S = 90.0
WAIT_S = 30.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, TEST_TIMEOUT_S))


async def connect(connect_string: str, **options: Any) -> KafkaZkClient:
    options.setdefault("session_timeout_ms", 20_000)
    return await KafkaZkClient.connect(connect_string, **options)


async def next_matching(queue: asyncio.Queue[T], predicate: Callable[[T], bool]) -> T:
    """The first item from ``queue`` that satisfies ``predicate`` (earlier ones are dropped)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            item = await queue.get()
            if predicate(item):
                return item


def registration(broker_id: int, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT"),))


async def create_topic(zk: KafkaZkClient, topic: str, partitions: int = 2) -> None:
    replicas = {p: ReplicaAssignment((1, 2)) for p in range(partitions)}
    await zk.create_topic_assignment(topic, TopicAssignment(None, replicas))


# -- connection and layout ---------------------------------------------------------------------
def test_connect_creates_the_chroot_as_kafka_does(zookeeper):
    chroot = f"/tierlog-{free_port()}/kafka"

    async def scenario():
        root = await connect(zookeeper)
        zk = await connect(zookeeper + chroot)
        try:
            await zk.ensure_persistent_paths()
            await zk.get_or_create_cluster_id("eQzK4lYlQ9y8P21IScOl_g")
            # The chroot and its parents are created with no data, as Kafka's createRecursive.
            assert (await root.zookeeper.get(chroot)).data is None
            assert await root.zookeeper.exists(f"{chroot}/brokers/ids") is not None
            cluster_id = await root.zookeeper.get(f"{chroot}/cluster/id")
            assert cluster_id.data == encode_cluster_id("eQzK4lYlQ9y8P21IScOl_g")
            assert await root.zookeeper.exists("/cluster/id") is None
        finally:
            await zk.close()
            await root.close()

    run(scenario())


def test_malformed_chroot_is_refused():
    assert split_chroot("a:1,b:2/kafka/x") == ("a:1,b:2", "/kafka/x")
    assert split_chroot("a:1/") == ("a:1", None)
    for bad in ("a:1/kafka/", "a:1/kafka//x", "a:1/./x"):
        with pytest.raises(ValueError, match="chroot"):
            split_chroot(bad)


def test_persistent_paths_are_created_with_no_data(zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        try:
            await zk.ensure_persistent_paths()
            await zk.ensure_persistent_paths()  # a restarted broker finds them there
            for path in zk_paths.PERSISTENT_PATHS:
                assert (await zk.zookeeper.get(path)).data is None, path
            assert "/config/users" in zk_paths.PERSISTENT_PATHS
            # An empty /latest_producer_id_block means no block was handed out yet.
            assert await zk.allocate_producer_id_block(3) == ProducerIdBlock(3, 0, 1000)
        finally:
            await zk.close()

    run(scenario())


def test_connect_times_out_when_no_zookeeper_answers():
    async def scenario():
        with pytest.raises(ZkConnectionTimeoutError):
            await KafkaZkClient.connect(f"127.0.0.1:{free_port()}", connection_timeout_ms=1500)

    run(scenario())


def test_operations_after_close_fail_clearly(zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        await zk.close()
        with pytest.raises(ZkClosedError):
            await zk.get_broker_ids()

    run(scenario())


# -- brokers -----------------------------------------------------------------------------------
def test_broker_registration_round_trips_and_its_epoch_is_the_czxid(zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        try:
            await zk.ensure_persistent_paths()
            broker = registration(1)
            epoch = await zk.register_broker(broker)
            node = await zk.zookeeper.get("/brokers/ids/1")
            assert node.stat.czxid == epoch
            assert node.stat.ephemeral_owner == zk.zookeeper.session_id
            assert node.data == encode_broker_registration(broker)
            assert await zk.get_broker(1) == replace(broker, epoch=epoch)
            assert await zk.get_broker_ids() == [1]
            assert await zk.get_broker(2) is None
            # Registering again on the same session (a retried create) keeps the epoch.
            assert await zk.register_broker(broker) == epoch
        finally:
            await zk.close()

    run(scenario())


def test_broker_id_held_by_another_session_is_refused(zk_chroot):
    async def scenario():
        first, second = await connect(zk_chroot), await connect(zk_chroot)
        try:
            await first.ensure_persistent_paths()
            await first.register_broker(registration(1))
            with pytest.raises(ZkBrokerIdInUseError, match="broker id 1 is already registered"):
                await second.register_broker(registration(1, port=9093))
            found = await second.get_broker(1)
            assert found is not None and found.endpoints[0].port == 9092
        finally:
            await first.close()
            await second.close()

    run(scenario())


def test_registration_disappears_when_the_session_closes(zk_chroot):
    async def scenario():
        broker, observer = await connect(zk_chroot), await connect(zk_chroot)
        try:
            await observer.ensure_persistent_paths()
            ids: asyncio.Queue[list[str]] = asyncio.Queue()
            await observer.watch_broker_ids(ids.put_nowait)
            assert await ids.get() == []
            await broker.register_broker(registration(1))
            await broker.register_broker(registration(2, port=9093))
            await next_matching(ids, lambda children: children == ["1", "2"])
            live = await observer.get_live_brokers()
            assert sorted(live) == [1, 2] and live[2].endpoints[0].port == 9093
            await broker.close()
            await next_matching(ids, lambda children: children == [])
            assert await observer.get_live_brokers() == {}
        finally:
            await broker.close()
            await observer.close()

    run(scenario())


# -- controller --------------------------------------------------------------------------------
def test_one_of_two_brokers_becomes_controller_and_the_other_takes_over(zk_chroot):
    async def scenario():
        a, b = await connect(zk_chroot), await connect(zk_chroot)
        clients = {1: a, 2: b}
        try:
            results = await asyncio.gather(a.try_create_controller(1), b.try_create_controller(2))
            winners = [bid for bid, r in zip((1, 2), results, strict=True) if r is not None]
            assert len(winners) == 1
            winner_id = winners[0]
            loser_id = 3 - winner_id
            assert results[winner_id - 1] == ControllerEpoch(1, 1)
            loser = clients[loser_id]
            seen: asyncio.Queue[int | None] = asyncio.Queue()
            await loser.watch_controller(
                lambda c: seen.put_nowait(None if c is None else c.broker_id)
            )
            assert await seen.get() == winner_id
            assert await loser.try_create_controller(loser_id) is None
            # The winner's session ends: /controller goes, the loser's watch fires.
            await clients[winner_id].close()
            await next_matching(seen, lambda c: c is None)
            assert await loser.try_create_controller(loser_id) == ControllerEpoch(2, 2)
            await next_matching(seen, lambda c: c == loser_id)
            assert await loser.get_controller_epoch() == ControllerEpoch(2, 2)
        finally:
            await a.close()
            await b.close()

    run(scenario())


def test_writes_of_a_deposed_controller_are_fenced(zk_chroot):
    async def scenario():
        old, new = await connect(zk_chroot), await connect(zk_chroot)
        try:
            old_epoch = await old.try_create_controller(1)
            assert old_epoch is not None
            await create_topic(old, "t")
            tp = ("t", 0)
            state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
            created = await old.create_partition_states(
                {tp: state}, controller_epoch_zk_version=old_epoch.zk_version
            )
            assert created[tp] == replace(state, partition_epoch=0)
            # Broker 1 resigns; broker 2 is elected. Broker 1 still holds its old epoch.
            await old.delete_controller(controller_epoch_zk_version=old_epoch.zk_version)
            new_epoch = await new.try_create_controller(2)
            assert new_epoch == ControllerEpoch(2, 2)
            stale = replace(state, leader=2, leader_epoch=1, partition_epoch=0)
            with pytest.raises(ZkControllerMovedError):
                await old.update_partition_states(
                    {tp: stale}, controller_epoch_zk_version=old_epoch.zk_version
                )
            with pytest.raises(ZkControllerMovedError):
                await old.create_partition_states(
                    {("t", 1): state}, controller_epoch_zk_version=old_epoch.zk_version
                )
            assert await new.get_partition_state(tp) == replace(state, partition_epoch=0)
            assert await new.get_partition_state(("t", 1)) is None
            # The new controller's fenced write goes through.
            result = await new.update_partition_states(
                {tp: stale}, controller_epoch_zk_version=new_epoch.zk_version
            )
            assert result.finished == {tp: replace(stale, partition_epoch=1)}
        finally:
            await old.close()
            await new.close()

    run(scenario())


def test_controller_epoch_increment_is_conditional(zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        try:
            elected = await zk.try_create_controller(1)
            assert elected == ControllerEpoch(1, 1)
            assert await zk.increment_controller_epoch(elected) == ControllerEpoch(2, 2)
            with pytest.raises(Exception) as failure:
                await zk.increment_controller_epoch(elected)
            assert type(failure.value).__name__ == "ZkBadVersionError"
            assert await zk.get_controller_epoch() == ControllerEpoch(2, 2)
        finally:
            await zk.close()

    run(scenario())


# -- partition states --------------------------------------------------------------------------
def test_partition_state_update_on_a_stale_version_is_sent_back_for_retry(zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        try:
            controller = await zk.try_create_controller(1)
            assert controller is not None
            await create_topic(zk, "t")
            tp = ("t", 0)
            state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
            created = await zk.create_partition_states(
                {tp: state, ("no-such-topic", 0): state},
                controller_epoch_zk_version=controller.zk_version,
            )
            assert isinstance(created[("no-such-topic", 0)], ZkNoNodeError)
            read = created[tp]
            assert isinstance(read, PartitionState) and read.partition_epoch == 0
            # The leader shrinks the ISR first (brokers write unfenced, on the version they know).
            shrunk = await zk.update_partition_states(
                {tp: replace(read, isr=(1,))}, controller_epoch_zk_version=MATCH_ANY_VERSION
            )
            assert shrunk.finished[tp] == replace(read, isr=(1,), partition_epoch=1)
            # The controller's write based on version 0 is refused, not applied.
            moved = await zk.update_partition_states(
                {tp: replace(read, leader=2, leader_epoch=1)},
                controller_epoch_zk_version=controller.zk_version,
            )
            assert moved.to_retry == [tp] and moved.finished == {}
            assert await zk.get_partition_state(tp) == replace(read, isr=(1,), partition_epoch=1)
            again = await zk.create_partition_states(
                {tp: state}, controller_epoch_zk_version=controller.zk_version
            )
            assert isinstance(again[tp], ZkNodeExistsError)
        finally:
            await zk.close()

    run(scenario())


def test_partition_states_of_many_partitions_are_read_in_one_batch(zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        try:
            controller = await zk.try_create_controller(1)
            assert controller is not None
            for t in range(5):
                await create_topic(zk, f"t{t}", partitions=60)
            states = {
                (f"t{i % 5}", i // 5): PartitionState(i % 3, i, (i % 3, 7), 1) for i in range(300)
            }
            created = await zk.create_partition_states(
                states, controller_epoch_zk_version=controller.zk_version
            )
            assert all(isinstance(s, PartitionState) for s in created.values())
            read = await zk.get_partition_states([*states, ("missing", 0)])
            assert read == {tp: replace(s, partition_epoch=0) for tp, s in states.items()}
        finally:
            await zk.close()

    run(scenario())


# -- topics, configs, notifications ------------------------------------------------------------
def test_topic_assignment_config_and_deletion_lifecycle(zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        try:
            await zk.ensure_persistent_paths()
            controller = await zk.try_create_controller(1)
            assert controller is not None
            assignment = TopicAssignment(None, {0: ReplicaAssignment((1, 2))})
            await zk.create_topic_assignment("orders", assignment)
            with pytest.raises(ZkNodeExistsError):
                await zk.create_topic_assignment("orders", assignment)
            assert await zk.get_all_topics() == {"orders"}
            assert await zk.get_topic_assignments(["orders", "nope"]) == {"orders": assignment}
            grown = TopicAssignment(
                None, {0: ReplicaAssignment((1, 2)), 1: ReplicaAssignment((2,))}
            )
            await zk.set_topic_assignment(
                "orders", grown, controller_epoch_zk_version=controller.zk_version
            )
            assert await zk.get_topic_assignment("orders") == grown

            await zk.set_topic_config("orders", {"retention.ms": "1000"})
            assert await zk.get_topic_config("orders") == {"retention.ms": "1000"}
            node = await zk.zookeeper.get("/config/topics/orders")
            assert node.data == encode_config({"retention.ms": "1000"})
            changes = await zk.get_config_changes()
            assert list(changes.values()) == ["topics/orders"]
            assert next(iter(changes)).startswith("config_change_")
            await zk.delete_config_changes(changes)
            assert await zk.get_config_changes() == {}

            await zk.mark_topic_for_deletion("orders")
            with pytest.raises(ZkNodeExistsError):
                await zk.mark_topic_for_deletion("orders")
            assert await zk.get_topics_marked_for_deletion() == {"orders"}
            await zk.create_partition_states(
                {("orders", 0): PartitionState(1, 0, (1, 2), 1)},
                controller_epoch_zk_version=controller.zk_version,
            )
            await zk.delete_topic_znodes(
                "orders", controller_epoch_zk_version=controller.zk_version
            )
            assert await zk.get_all_topics() == set()
            assert await zk.get_topic_config("orders") == {}
            assert await zk.get_topics_marked_for_deletion() == set()
        finally:
            await zk.close()

    run(scenario())


def test_isr_change_notifications_are_listed_in_order_and_deleted(zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        try:
            await zk.ensure_persistent_paths()
            first = await zk.create_isr_change_notification([("a", 0), ("a", 1)])
            second = await zk.create_isr_change_notification([("b", 0)])
            assert first.startswith("isr_change_")
            assert await zk.get_isr_change_notifications() == [first, second]
            changed = await zk.get_isr_changes([first, second, "isr_change_9999999999"])
            assert changed == {("a", 0), ("a", 1), ("b", 0)}
            await zk.delete_isr_change_notifications([first, second])
            assert await zk.get_isr_change_notifications() == []
        finally:
            await zk.close()

    run(scenario())


def test_cluster_id_is_created_once(zk_chroot):
    async def scenario():
        a, b = await connect(zk_chroot), await connect(zk_chroot)
        try:
            assert await a.get_cluster_id() is None
            ids = await asyncio.gather(a.get_or_create_cluster_id(), b.get_or_create_cluster_id())
            assert ids[0] == ids[1] and len(ids[0]) == 22
            assert await b.get_or_create_cluster_id("another") == ids[0]
        finally:
            await a.close()
            await b.close()

    run(scenario())


def test_producer_id_blocks_are_unique_under_concurrent_allocators(zk_chroot):
    async def scenario():
        a, b = await connect(zk_chroot), await connect(zk_chroot)
        try:
            # No /latest_producer_id_block yet: the allocators also race to create it.
            blocks: list[ProducerIdBlock] = await asyncio.gather(
                *(a.allocate_producer_id_block(1) for _ in range(15)),
                *(b.allocate_producer_id_block(2) for _ in range(15)),
            )
            starts = sorted(block.first_producer_id for block in blocks)
            assert starts == [i * 1000 for i in range(30)]
            assert {block.broker_id for block in blocks} == {1, 2}
            assert all(block.size == 1000 for block in blocks)
        finally:
            await a.close()
            await b.close()

    run(scenario())


# -- watches, sessions, outages ----------------------------------------------------------------
def test_watch_callbacks_run_on_the_event_loop(zk_chroot):
    async def scenario():
        zk, writer = await connect(zk_chroot), await connect(zk_chroot)
        loop_thread = threading.get_ident()
        seen: asyncio.Queue[bytes | None] = asyncio.Queue()
        threads: set[int] = set()

        async def on_change(node: ZnodeData | None) -> None:
            threads.add(threading.get_ident())
            asyncio.get_running_loop()  # raises off the loop
            await seen.put(None if node is None else node.data)

        try:
            watch = await zk.zookeeper.watch_data("/w", on_change)
            assert await seen.get() is None
            await writer.zookeeper.create("/w", b"1")
            await next_matching(seen, lambda data: data == b"1")
            await writer.zookeeper.set("/w", b"2")
            await next_matching(seen, lambda data: data == b"2")
            await writer.zookeeper.delete("/w")
            await next_matching(seen, lambda data: data is None)
            assert threads == {loop_thread}
            # A cancelled watch delivers nothing more; a second watch, whose delivery comes
            # after the first one's event was handed to the loop, shows the change happened.
            watch.cancel()
            after: asyncio.Queue[bytes | None] = asyncio.Queue()
            await zk.zookeeper.watch_data("/w", lambda n: after.put_nowait(n and n.data))
            await writer.zookeeper.create("/w", b"3")
            await next_matching(after, lambda data: data == b"3")
            assert seen.empty()
        finally:
            await zk.close()
            await writer.close()

    run(scenario())


def test_session_expiry_is_reported_and_watches_carry_on_in_the_new_session(zookeeper, zk_chroot):
    async def scenario():
        zk = await connect(zk_chroot)
        states: list[ZkConnectionState] = []
        zk.add_state_listener(states.append)
        try:
            await zk.ensure_persistent_paths()
            epoch = await zk.register_broker(registration(1))
            ids: asyncio.Queue[list[str]] = asyncio.Queue()
            await zk.watch_broker_ids(ids.put_nowait)
            assert await ids.get() == ["1"]
            old_session = zk.zookeeper.session_id
            client_id = zk.zookeeper.client_id
            assert client_id is not None
            await asyncio.to_thread(expire_session, zookeeper, client_id)
            await until(
                lambda: ZkConnectionState.NEW_SESSION in states, WAIT_S, what="a new session"
            )
            expired_at = states.index(ZkConnectionState.EXPIRED)
            assert expired_at < states.index(ZkConnectionState.NEW_SESSION)
            assert zk.zookeeper.session_id != old_session
            # The ephemeral registration went with the old session; registering again gives
            # a new broker epoch, and the watch (re-armed in the new session) sees it.
            assert await zk.get_broker(1) is None
            new_epoch = await zk.register_broker(registration(1))
            assert new_epoch > epoch
            await zk.register_broker(registration(2, port=9093))
            await next_matching(ids, lambda children: children == ["1", "2"])
        finally:
            await zk.close()
        assert states[-1] == ZkConnectionState.CLOSED

    run(scenario())


def test_operations_wait_out_a_zookeeper_restart_and_watches_survive_it(zookeeper_factory):
    server = zookeeper_factory()

    async def scenario():
        # The session must outlast the restart (a JVM start on a busy machine): ZooKeeper
        # keeps a session that reconnects within its timeout, which is what is shown here.
        zk = await connect(server.connect_string, session_timeout_ms=60_000)
        states: list[ZkConnectionState] = []
        zk.add_state_listener(states.append)
        seen: asyncio.Queue[bytes | None] = asyncio.Queue()
        try:
            await zk.zookeeper.watch_data("/w", lambda n: seen.put_nowait(n and n.data))
            assert await seen.get() is None
            await asyncio.to_thread(server.stop)
            await until(
                lambda: ZkConnectionState.SUSPENDED in states, WAIT_S, what="a lost connection"
            )
            # Issued while ZooKeeper is down: applied once it is back (Kafka's retry until
            # connected).
            pending = asyncio.create_task(zk.zookeeper.create("/w", b"while down"))
            await asyncio.to_thread(server.start)
            await asyncio.wait_for(pending, WAIT_S)
            await next_matching(seen, lambda data: data == b"while down")
            other = await connect(server.connect_string)
            try:
                await other.zookeeper.set("/w", b"after restart")
            finally:
                await other.close()
            await next_matching(seen, lambda data: data == b"after restart")
            # ZooKeeper keeps sessions across its restart: same session, ephemerals kept.
            assert ZkConnectionState.RECONNECTED in states
            assert ZkConnectionState.EXPIRED not in states
        finally:
            await zk.close()

    run(scenario())
    assert server.start_times and all(t > 0 for t in server.start_times)


# -- topic admin -------------------------------------------------------------------------------
def test_create_topics_counts_the_brokers_registered_in_zookeeper_not_the_lagging_cache(
    zk_chroot,
):
    """All three brokers are registered, but the broker answering CreateTopics has not yet
    had the controller's UpdateMetadata naming the third (its MetadataCache lags
    ``/brokers/ids`` under load). Replication factor 3 is valid, as in Kafka's
    AdminZkClient, which reads the registrations."""
    from core.server.cluster_types import BrokerInfo
    from core.server.metadata_cache import MetadataCache
    from core.server.zk_admin import MetadataWaiters, RequestTimedOutError, ZkClusterAdmin

    async def scenario():
        zk = await connect(zk_chroot)
        try:
            await zk.ensure_persistent_paths()
            for broker_id in (1, 2, 3):
                await zk.register_broker(registration(broker_id, port=9092 + broker_id))
            cache = MetadataCache(1)
            cache.update(1, 1, [BrokerInfo(1, ()), BrokerInfo(2, ())], [])
            admin = ZkClusterAdmin(zk, MetadataWaiters(cache), {})
            info = await admin.create_topic("t", 4, {}, replication_factor=3, validate_only=True)
            assert info.partitions == 4
            with pytest.raises(RequestTimedOutError):  # written; no controller acts on it
                await admin.create_topic("u", 2, {}, replication_factor=3, timeout_ms=1)
            stored = await zk.get_topic_assignment("u")
            assert all(sorted(a.replicas) == [1, 2, 3] for a in stored.partitions.values())
        finally:
            await zk.close()

    run(scenario())
