"""``__transaction_state``: the compacted internal topic behind the transaction coordinator.

Created with ``transaction.state.log.num.partitions`` partitions (by a broker alone at
start-up; in a cluster through the ZooKeeper admin when a transactional producer first
looks for its coordinator, ``Broker.ensure_transaction_state_topic``; an existing
topic keeps its count: changing it would move transactional ids between partitions) and
Kafka's topic configs: ``cleanup.policy=compact``, ``compression.type=uncompressed``,
``min.insync.replicas=transaction.state.log.min.isr``, ``unclean.leader.election.enable=
false``, ``segment.bytes=transaction.state.log.segment.bytes``. Each record is one
transactional id's state (``core.server.transaction_log``); a write is answered once it is
fsynced (and, in a cluster, replicated), so a state the coordinator acted on survives a
crash.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from core.clock import now_ms
from core.errors import CoreError
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records
from core.server.internal_topics import TRANSACTION_STATE_TOPIC
from core.server.topics import TopicInfo, TopicRegistry

if TYPE_CHECKING:
    from core.log.partition_log import LogAppendInfo
    from core.server.partition import Partition

log = logging.getLogger(__name__)


class StateNotReplicatedError(CoreError):
    """A record of ``__transaction_state`` was appended but its in-sync replicas did not
    confirm it (Kafka's coordinator answers COORDINATOR_NOT_AVAILABLE: retry)."""

    error_code = 15

    def __init__(self, message: str, cause_code: int) -> None:
        super().__init__(message)
        self.cause_code = cause_code


def transaction_state_topic_configs(segment_bytes: int, min_isr: int) -> dict[str, str]:
    """The topic-level configs Kafka gives ``__transaction_state``."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "min.insync.replicas": str(min_isr),
        "unclean.leader.election.enable": "false",
        "segment.bytes": str(segment_bytes),
    }


def ensure_transaction_state_topic(
    topics: TopicRegistry,
    partitions: int,
    segment_bytes: int,
    replication_factor: int,
    min_isr: int,
    *,
    live_brokers: int = 1,
) -> TopicInfo:
    """The registry's ``__transaction_state``, created if missing.

    ``transaction.state.log.replication.factor`` is capped to the live brokers at creation,
    with a warning (a broker alone: 1), and ``transaction.state.log.min.isr`` to the
    replication factor, so that the coordinator can write at all."""
    info = topics.get(TRANSACTION_STATE_TOPIC)
    if info is None:
        replicas = min(replication_factor, live_brokers)
        if replicas < replication_factor:
            log.warning(
                "creating %s with %d replica(s): transaction.state.log.replication.factor=%d "
                "but only %d broker(s) are live",
                TRANSACTION_STATE_TOPIC,
                replicas,
                replication_factor,
                live_brokers,
            )
        configs = transaction_state_topic_configs(segment_bytes, min(min_isr, replicas))
        info = topics.create(TRANSACTION_STATE_TOPIC, partitions, configs)
        log.info("created %s with %d partitions", TRANSACTION_STATE_TOPIC, partitions)
    elif info.partitions != partitions:
        log.warning(
            "%s has %d partitions; transaction.state.log.num.partitions=%d is ignored "
            "(changing it would move transactional ids to other partitions)",
            TRANSACTION_STATE_TOPIC,
            info.partitions,
            partitions,
        )
    return info


class TransactionStateLog:
    """Appends transaction records to ``__transaction_state`` and replays a partition.

    Args:
        partition: the leader partition with that index, None if not led here.
        wait_written: awaits durability and replication of a partition up to an offset;
            returns the error code of the replication (0: replicated; None alone).
        append: appends a batch with acks=all (the broker's: through its replica manager,
            which wakes the followers' fetches); default: straight to the partition.
    """

    def __init__(
        self,
        partition: Callable[[int], Partition | None],
        wait_written: Callable[[Partition, int], Awaitable[int | None]],
        *,
        append: Callable[[Partition, bytearray], LogAppendInfo] | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._partition = partition
        self._wait_written = wait_written
        self._append = append or (lambda p, batch: p.append_as_leader(batch, -1))
        self._clock = clock

    def leader_epoch(self, index: int) -> int | None:
        partition = self._partition(index)
        return None if partition is None else partition.leader_epoch

    async def append(
        self, index: int, key: bytes, value: bytes | None, *, durable: bool = True
    ) -> None:
        """Append one record and wait until it is durable (``durable=False``: appended,
        left to the flush policy, for records whose loss a restart repairs).

        Raises:
            LookupError: the partition is not led here.
            StateNotReplicatedError: appended, not replicated in time.
            CoreError: the write failed (its Kafka error code says why; NOT_ENOUGH_REPLICAS
                below ``min.insync.replicas``: the coordinator writes with acks=all).
        """
        partition = self._partition(index)
        if partition is None:
            raise LookupError(f"{TRANSACTION_STATE_TOPIC}-{index} is not led here")
        builder = RecordBatchBuilder()
        builder.append(value, key=key, timestamp=self._clock())
        info = self._append(partition, builder.build())
        if durable:
            code = await self._wait_written(partition, info.last_offset + 1)
            if code:
                raise StateNotReplicatedError(
                    f"{TRANSACTION_STATE_TOPIC}-{index} up to {info.last_offset + 1}: error "
                    f"{code} waiting for the in-sync replicas",
                    code,
                )

    def replay(self, index: int) -> Iterator[tuple[bytes, bytes | None]]:
        """Every keyed record of the partition from its log start, in offset order
        (blocking: run it on an executor thread)."""
        partition = self._partition(index)
        if partition is None:
            return
        plog = partition.log
        start = plog.log_start_offset
        for segment in plog.segments():
            for _, header in segment.log.scan_batches(0):
                if header.is_control or header.last_offset < start:
                    continue
                for record in decode_records(header, verify=False):
                    if record.offset >= start and record.key is not None:
                        yield record.key, record.value
