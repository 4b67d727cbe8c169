"""TransactionLoader: the coordinator follows the leadership of ``__transaction_state``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.errors import CoreError
from core.server.transaction_coordinator import COORDINATOR_NOT_AVAILABLE, NONE
from core.server.transaction_loader import TransactionLoader

from .fake_broker import FakeBroker
from .test_transaction_coordinator import Clock, coordinator, loaded

STATE = "__transaction_state"


@dataclass
class Role:
    topic: str
    index: int
    leader_epoch: int


@dataclass
class RecordingCoordinator:
    """Records loads and unloads; a load waits for ``release`` when it is set."""

    calls: list[tuple[str, int, int]] = field(default_factory=list)
    loaded: dict[int, int] = field(default_factory=dict)
    release: asyncio.Event | None = None

    async def load(self, index: int, epoch: int) -> None:
        self.calls.append(("load", index, epoch))
        if self.release is not None:
            await self.release.wait()
        self.loaded[index] = epoch

    def unload(self, index: int) -> None:
        self.calls.append(("unload", index, -1))
        self.loaded.pop(index, None)


def loader_with(recording: RecordingCoordinator) -> TransactionLoader:
    return TransactionLoader(recording)  # type: ignore[arg-type]


def test_leadership_loads_and_unloads_its_partitions_only() -> None:
    async def go() -> None:
        recording = RecordingCoordinator()
        loader = loader_with(recording)
        loader.on_partitions_changed([Role(STATE, 0, 3), Role("other", 0, 1)], [Role(STATE, 1, 2)])
        await loader.wait_idle()
        assert recording.loaded == {0: 3}
        # An ISR change (same epoch) does not reload; a new epoch does, with that epoch.
        loader.on_partitions_changed([Role(STATE, 0, 3)], [])
        await loader.wait_idle()
        assert recording.calls == [("load", 0, 3)]
        loader.on_partitions_changed([Role(STATE, 0, 4)], [])
        await loader.wait_idle()
        assert recording.loaded == {0: 4}
        # Becoming a follower, or the replica stopped: the ids go at once.
        loader.on_partitions_changed([], [Role(STATE, 0, 5)])
        assert recording.loaded == {}
        loader.on_partitions_changed([Role(STATE, 1, 6)], [])
        await loader.wait_idle()
        loader.on_partitions_stopped([(STATE, 1)], deleted=False)
        assert recording.loaded == {}

    asyncio.run(go())


def test_a_partition_lost_while_it_loads_ends_unloaded() -> None:
    async def go() -> None:
        recording = RecordingCoordinator(release=asyncio.Event())
        loader = loader_with(recording)
        loader.on_partitions_changed([Role(STATE, 2, 1)], [])
        await asyncio.sleep(0)  # the load started and waits
        loader.on_partitions_changed([], [Role(STATE, 2, 2)])
        assert recording.release is not None
        recording.release.set()
        await loader.wait_idle()
        assert recording.loaded == {}

    asyncio.run(go())


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path)
    yield b
    b.close()


def test_a_failed_producer_id_allocation_answers_coordinator_not_available(
    broker: FakeBroker,
) -> None:
    async def go() -> None:
        c = await loaded(coordinator(broker, Clock()))

        async def failing() -> int:
            raise CoreError("no producer id block from ZooKeeper")

        allocate, c._allocate = c._allocate, failing  # the broker's allocator, failing
        assert (await c.init_producer_id("p", 10_000, -1, -1))[0] == COORDINATOR_NOT_AVAILABLE
        c._allocate = allocate
        error, _, epoch = await c.init_producer_id("p", 10_000, -1, -1)
        assert (error, epoch) == (NONE, 0)

    asyncio.run(go())
