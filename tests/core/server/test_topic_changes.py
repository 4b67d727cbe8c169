"""Topic creation and deletion on a running broker: off the event loop, in steps, whole."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from core.server.broker import Broker
from core.server.config import BrokerConfig
from core.server.replica_manager import PARTITIONS_PER_STEP
from core.server.topics import InvalidPartitionsError, TopicExistsError

PARTITIONS = 3 * PARTITIONS_PER_STEP


def run(tmp_path: Path, scenario: Callable[[Broker], Coroutine[Any, Any, None]]) -> None:
    config = BrokerConfig.from_props(
        {"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"}
    )

    async def main() -> None:
        broker = Broker(config)
        await broker.start()
        try:
            await scenario(broker)
        finally:
            await broker.stop()

    asyncio.run(main())


def partition_dirs(tmp_path: Path, topic: str) -> list[str]:
    return sorted(d.name for d in (tmp_path / "data").iterdir() if d.name.startswith(topic + "-"))


async def until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not predicate():
            await asyncio.sleep(0.01)


def test_the_event_loop_serves_while_partitions_open_and_each_step_is_served_at_once(
    tmp_path: Path,
) -> None:
    async def scenario(broker: Broker) -> None:
        creation = asyncio.ensure_future(broker.create_topic("wide", PARTITIONS, {}))
        ticks = 0
        opened_while_creating = []
        while not creation.done():
            await asyncio.sleep(0.001)  # the loop turns while the disk work goes on
            ticks += 1
            opened_while_creating.append(
                sum(broker.replica_manager.partition("wide", i) is not None for i in range(3))
            )
        info = await creation
        assert ticks > 3
        assert broker.topics.get("wide") == info
        assert all(broker.replica_manager.partition("wide", i) for i in range(PARTITIONS))
        assert len(partition_dirs(tmp_path, "wide")) == PARTITIONS

    run(tmp_path, scenario)


def test_a_creation_whose_client_went_away_completes_and_the_name_is_taken_once(
    tmp_path: Path,
) -> None:
    async def scenario(broker: Broker) -> None:
        first = asyncio.ensure_future(broker.create_topic("t", PARTITIONS, {}))
        await until(lambda: broker.topics.get("t") is not None)
        with pytest.raises(TopicExistsError):
            await broker.create_topic("t", 1, {})
        first.cancel()  # the request's connection closed
        await until(lambda: broker.replica_manager.partition("t", PARTITIONS - 1) is not None)
        assert len(partition_dirs(tmp_path, "t")) == PARTITIONS

    run(tmp_path, scenario)


def test_a_creation_cancelled_while_registering_still_opens_the_topic(tmp_path: Path) -> None:
    """The client went away while the registry write ran on its executor thread: the write
    completes anyway, so the opening must too, or the name stays taken by a topic nobody
    serves (clients got LEADER_NOT_AVAILABLE for it until a restart)."""

    async def scenario(broker: Broker) -> None:
        creation = asyncio.ensure_future(broker.create_topic("t", 2, {}))
        await asyncio.sleep(0)  # the creation is now waiting for the registry write
        creation.cancel()
        with pytest.raises(asyncio.CancelledError):
            await creation
        await until(
            lambda: (
                broker.metadata_cache.contains_topic("t")
                and broker.replica_manager.partition("t", 1) is not None
            )
        )
        assert partition_dirs(tmp_path, "t") == ["t-0", "t-1"]

    run(tmp_path, scenario)


def test_partitions_added_by_a_cancelled_request_are_still_opened(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        await broker.create_topic("t", 1, {})
        growth = asyncio.ensure_future(broker.create_partitions("t", 3))
        await asyncio.sleep(0)  # waiting for the registry write
        growth.cancel()
        with pytest.raises(asyncio.CancelledError):
            await growth
        await until(lambda: broker.replica_manager.partition("t", 2) is not None)
        assert partition_dirs(tmp_path, "t") == ["t-0", "t-1", "t-2"]

    run(tmp_path, scenario)


def test_a_refused_partition_growth_is_answered_and_adds_nothing(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        await broker.create_topic("t", 2, {})
        with pytest.raises(InvalidPartitionsError):
            await broker.create_partitions("t", 1)
        assert broker.topics.get("t").partitions == 2

    run(tmp_path, scenario)


@pytest.mark.parametrize("moment", ["registered", "opening"])
def test_a_deletion_during_the_creation_leaves_nothing(tmp_path: Path, moment: str) -> None:
    async def scenario(broker: Broker) -> None:
        creation = asyncio.ensure_future(broker.create_topic("t", PARTITIONS, {}))
        if moment == "registered":  # seen at once: before the creation goes on to open
            async with asyncio.timeout(30):
                while broker.topics.get("t") is None:
                    await asyncio.sleep(0)
        else:
            await until(lambda: broker.replica_manager.partition("t", 0) is not None)
        await broker.delete_topic("t")
        await creation
        assert broker.topics.get("t") is None
        assert not [tp for tp in broker.replica_manager.partitions if tp[0] == "t"]
        assert partition_dirs(tmp_path, "t") == []

    run(tmp_path, scenario)


def test_a_creation_during_the_deletion_of_its_name_waits_for_it(tmp_path: Path) -> None:
    async def scenario(broker: Broker) -> None:
        await broker.create_topic("t", PARTITIONS, {})
        old = broker.topics.get("t")
        deletion = asyncio.ensure_future(broker.delete_topic("t"))
        await until(lambda: broker.topics.get("t") is None)
        recreated = await broker.create_topic("t", 2, {})
        assert (await deletion) == old
        assert recreated.topic_id != old.topic_id
        assert partition_dirs(tmp_path, "t") == ["t-0", "t-1"]
        partition = broker.replica_manager.partition("t", 0)
        assert partition is not None and partition.topic_id == recreated.topic_id

    run(tmp_path, scenario)
