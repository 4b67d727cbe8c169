"""The group coordinator follows the leadership of ``__consumer_offsets`` partitions.

A ReplicaManager leadership listener (Kafka's onLeadershipChange for the group
coordinator): when this broker becomes the leader of ``__consumer_offsets-p`` it loads the
partition (replays its log into the offset store on an executor thread, then brings its
groups back in the coordinator), answering COORDINATOR_LOAD_IN_PROGRESS for its groups
meanwhile; when it stops leading it (becomes a follower, or the replica is stopped), the
partition's groups are unloaded at once (NOT_COORDINATOR: members find the new
coordinator). Loads and unloads of one partition run in the order the leadership changed,
so a quick lead-follow-lead ends with the partition loaded once, from the newest log.

``TransactionLoader`` does the same for the transaction coordinator and
``__transaction_state``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from core.server.group_coordinator import GroupCoordinator
from core.server.group_offsets import GroupOffsetStore
from core.server.offsets_topic import OFFSETS_TOPIC

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class GroupLoader:
    """Loads and unloads the groups of the ``__consumer_offsets`` partitions this broker
    leads; ``partition_count`` says how many the topic has (it may be created late)."""

    def __init__(
        self,
        store: GroupOffsetStore,
        coordinator: GroupCoordinator,
        partition_count: Callable[[], int],
    ) -> None:
        self.store = store
        self.coordinator = coordinator
        self._partition_count = partition_count
        self._count = 0
        self._leading: set[int] = set()
        self._last: dict[int, asyncio.Future[None]] = {}  # the latest operation per partition

    # -- LeadershipListener ---------------------------------------------------------------------
    def on_partitions_changed(self, leaders: Sequence[Any], followers: Sequence[Any]) -> None:
        for partition in leaders:
            if partition.topic == OFFSETS_TOPIC:
                self._lead(partition.index)
        for partition in followers:
            if partition.topic == OFFSETS_TOPIC:
                self._resign(partition.index)

    def on_partitions_stopped(self, stopped: Sequence[TopicPartition], deleted: bool) -> None:
        for topic, index in stopped:
            if topic == OFFSETS_TOPIC:
                self._resign(index)

    # -- loading and unloading ----------------------------------------------------------------
    def _check_count(self) -> None:
        count = self._partition_count()
        if count and count != self._count:
            self._count = count
            self.coordinator.coordinate_partitions(count)
            if self.store.journal is not None:
                self.store.journal.num_partitions = count

    def _lead(self, index: int) -> None:
        self._check_count()
        if index in self._leading:
            return  # still the leader (a new epoch or ISR): the groups stay loaded
        self._leading.add(index)
        self.coordinator.partition_loading(index)
        self._chain(index, lambda: self._load(index))

    def _resign(self, index: int) -> None:
        if index not in self._leading:
            return
        self._leading.discard(index)
        gone = self.coordinator.partition_unloaded(index)
        log.info("%s-%d: no longer its leader; %d groups unloaded", OFFSETS_TOPIC, index, len(gone))
        self._chain(index, lambda: self._unload(index))

    def _chain(self, index: int, operation: Callable[[], Awaitable[None]]) -> None:
        previous = self._last.get(index)

        async def run() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            try:
                await operation()
            except Exception:
                log.exception("%s-%d: loading or unloading its groups failed", OFFSETS_TOPIC,
                              index)  # fmt: skip

        self._last[index] = asyncio.ensure_future(run())

    async def _load(self, index: int) -> None:
        if index not in self._leading:
            return  # resigned before the load began
        loop = asyncio.get_running_loop()
        self.store.unload_partition(index)  # anything left of an earlier term goes first
        stored = await loop.run_in_executor(None, self.store.load_partition, index)
        if index in self._leading:
            self.coordinator.partition_loaded(index, stored)
            log.info("%s-%d loaded: %d groups", OFFSETS_TOPIC, index, len(stored))
        else:
            self.store.unload_partition(index)  # resigned while it loaded

    async def _unload(self, index: int) -> None:
        if index not in self._leading:
            self.store.unload_partition(index)

    async def wait_idle(self) -> None:
        """Until every load and unload started so far is done (start-up of a broker
        running alone waits for its partitions before it serves)."""
        pending = [f for f in self._last.values() if not f.done()]
        if pending:
            await asyncio.wait(pending)
