"""The transaction coordinator follows the leadership of ``__transaction_state`` partitions.

A ReplicaManager leadership listener (Kafka's onLeadershipChange for the transaction
coordinator, like ``GroupLoader`` for groups): when this broker becomes the leader of
``__transaction_state-p`` the coordinator loads the partition with the leader epoch as its
coordinator epoch (COORDINATOR_LOAD_IN_PROGRESS meanwhile), then completes or aborts the
transactions the log shows in progress; when it stops leading it, the partition's
transactional ids are unloaded at once (NOT_COORDINATOR: producers find the new
coordinator, which loads the same log). Loads and unloads of one partition run in the
order the leadership changed. A broker alone leads every partition through its
``LocalController``: the same path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from core.server.internal_topics import TRANSACTION_STATE_TOPIC
from core.server.transaction_coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class TransactionLoader:
    """Loads and unloads the ``__transaction_state`` partitions this broker leads."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator
        self._leading: dict[int, int] = {}  # partition -> leader epoch
        self._last: dict[int, asyncio.Future[None]] = {}  # the latest operation per partition

    # -- LeadershipListener ---------------------------------------------------------------------
    def on_partitions_changed(self, leaders: Sequence[Any], followers: Sequence[Any]) -> None:
        for partition in leaders:
            if partition.topic == TRANSACTION_STATE_TOPIC:
                self._lead(partition.index, partition.leader_epoch)
        for partition in followers:
            if partition.topic == TRANSACTION_STATE_TOPIC:
                self._resign(partition.index)

    def on_partitions_stopped(self, stopped: Sequence[TopicPartition], deleted: bool) -> None:
        for topic, index in stopped:
            if topic == TRANSACTION_STATE_TOPIC:
                self._resign(index)

    # -- loading and unloading ----------------------------------------------------------------
    def _lead(self, index: int, leader_epoch: int) -> None:
        if self._leading.get(index) == leader_epoch:
            return  # still the leader in the same epoch (an ISR change)
        # A new epoch reloads with it: markers carry the coordinator epoch, and a leader
        # elected again must fence what its earlier term sent (Kafka's onElection).
        self._leading[index] = leader_epoch
        self._chain(index, lambda: self._load(index, leader_epoch))

    def _resign(self, index: int) -> None:
        if self._leading.pop(index, None) is None:
            return
        self.coordinator.unload(index)
        log.info("%s-%d: no longer its leader; its transactional ids unloaded",
                 TRANSACTION_STATE_TOPIC, index)  # fmt: skip

    def _chain(self, index: int, operation: Callable[[], Awaitable[None]]) -> None:
        previous = self._last.get(index)

        async def run() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            try:
                await operation()
            except Exception:
                log.exception("%s-%d: loading its transactions failed", TRANSACTION_STATE_TOPIC,
                              index)  # fmt: skip

        self._last[index] = asyncio.ensure_future(run())

    async def _load(self, index: int, leader_epoch: int) -> None:
        if self._leading.get(index) != leader_epoch:
            return  # resigned (or a newer epoch came) before the load began
        await self.coordinator.load(index, leader_epoch)
        if index not in self._leading:
            self.coordinator.unload(index)  # resigned while it loaded

    async def wait_idle(self) -> None:
        """Until every load started so far is done (a broker alone waits for its
        partitions before it serves)."""
        pending = [f for f in self._last.values() if not f.done()]
        if pending:
            await asyncio.wait(pending)
