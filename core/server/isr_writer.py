"""How a partition leader records its ISR changes: the ``IsrWriter`` port.

A leader shrinks its ISR when a follower falls behind and expands it when one catches up
(core.server.partition); the change counts only once it is written where the controller
reads partition states. In ZooKeeper mode that is the partition's state znode, written
conditionally on the version the leader last saw (its partition epoch), as Kafka's brokers
did before AlterPartition (KIP-497): if the controller wrote the znode meanwhile (a new
leader, an ISR it changed itself), the write is refused and the leader waits for the
controller's LeaderAndIsr. The controller learns of accepted changes from sequential
``/isr_change_notification/isr_change_`` znodes, which the writer batches.

Embedded mode has one replica per partition: its ISR never changes, and ``LocalIsrWriter``
only exists so that a leader always has a writer.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Protocol

from core.errors import CoreError
from core.server.cluster_types import (
    LeaderAndIsr,
    TopicPartition,
    leader_and_isr_from_zk,
    leader_and_isr_to_zk,
)
from core.server.zookeeper.errors import ZkError, ZkNoNodeError
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.paths import MATCH_ANY_VERSION

log = logging.getLogger(__name__)

# How long accepted changes wait to be announced together (Kafka batches them too).
ISR_CHANGE_NOTIFICATION_DELAY_MS = 200


class IsrWriteError(CoreError):
    """The ISR change could not be written (ZooKeeper unreachable, session lost); the
    leader keeps its committed ISR and proposes again later."""


class IsrWriter(Protocol):
    """Where a leader's ISR changes are recorded."""

    async def submit(
        self, tp: TopicPartition, proposed: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        """Record ``proposed`` (the leader's own leader epoch, the new ISR, and the
        partition epoch the change is based on).

        Args:
            controller_epoch: the epoch of the controller whose LeaderAndIsr made this
                broker leader; stored with the state, as Kafka does.

        Returns:
            The committed state with its new partition epoch, or None when the change was
            refused because the state moved since ``proposed.partition_epoch`` (or the
            partition is gone): the leader then waits for the controller's LeaderAndIsr.

        Raises:
            IsrWriteError: the write could not be made; nothing changed.
        """
        ...


class LocalIsrWriter:
    """Embedded mode: the only replica is the leader, so no ISR change is ever proposed.
    Should one be, it is accepted as proposed, with the next partition epoch."""

    async def submit(
        self, tp: TopicPartition, proposed: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        return replace(proposed, partition_epoch=proposed.partition_epoch + 1)


class ZkIsrWriter:
    """ISR changes written to ``/brokers/topics/<t>/partitions/<p>/state`` on the version the
    leader holds, then announced to the controller in batches.

    Accepted changes are gathered for ``notification_delay_ms`` and announced by one
    ``isr_change_`` znode; a failed announcement is kept and retried with the next batch.
    ``close`` announces what is pending.
    """

    def __init__(
        self,
        zk: KafkaZkClient,
        *,
        notification_delay_ms: int = ISR_CHANGE_NOTIFICATION_DELAY_MS,
    ) -> None:
        self._zk = zk
        self._delay_s = notification_delay_ms / 1000
        self._pending: set[TopicPartition] = set()
        self._flush: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None

    async def submit(
        self, tp: TopicPartition, proposed: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        state = leader_and_isr_to_zk(proposed, controller_epoch)
        try:
            # Brokers write without the controller's fence: the partition epoch is the check.
            result = await self._zk.update_partition_states(
                {tp: state}, controller_epoch_zk_version=MATCH_ANY_VERSION
            )
        except ZkError as e:
            raise IsrWriteError(f"ISR update of {tp[0]}-{tp[1]} failed: {e}") from e
        if tp in result.to_retry:
            log.info(
                "ISR update of %s-%d to %s refused: its state is no longer at partition epoch "
                "%d; waiting for the controller's LeaderAndIsr",
                tp[0],
                tp[1],
                list(proposed.isr),
                proposed.partition_epoch,
            )
            return None
        outcome = result.finished.get(tp)
        if isinstance(outcome, ZkNoNodeError):
            log.info("ISR update of %s-%d refused: the partition has no state znode", *tp)
            return None
        if isinstance(outcome, ZkError) or outcome is None:
            raise IsrWriteError(f"ISR update of {tp[0]}-{tp[1]} failed: {outcome}")
        self._announce(tp)
        return leader_and_isr_from_zk(outcome)

    def _announce(self, tp: TopicPartition) -> None:
        self._pending.add(tp)
        if self._flush is None and self._flushing is None:
            loop = asyncio.get_running_loop()
            self._flush = loop.call_later(self._delay_s, self._start_flush)

    def _start_flush(self) -> None:
        self._flush = None
        self._flushing = asyncio.ensure_future(self._send_notification())

    async def _send_notification(self) -> None:
        batch, self._pending = self._pending, set()
        try:
            await self._zk.create_isr_change_notification(sorted(batch))
        except ZkError as e:
            log.warning("cannot announce the ISR changes of %d partitions: %s", len(batch), e)
            self._pending |= batch
        finally:
            self._flushing = None
        if self._pending and self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(self._delay_s, self._start_flush)

    async def close(self) -> None:
        """Announce the pending changes now (a stopping broker's last ISR changes)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._flushing is not None:
            await asyncio.shield(self._flushing)
        if self._pending:
            await self._send_notification()
        if self._flush is not None:  # the last attempt failed: nothing more to do
            self._flush.cancel()
            self._flush = None
