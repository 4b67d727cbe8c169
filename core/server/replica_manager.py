"""ReplicaManager: the partitions this broker leads, and produce/fetch over their logs.

One broker, one replica per partition: the leader's log end offset is the high watermark
once an append returns, so acks=-1 completes as soon as the write does. The machinery is
the one replication will use: DelayedProduce waits for the high watermark, DelayedFetch
waits for ``fetch.min.bytes`` or ``max.wait.ms``, both in purgatories keyed by partition
and woken by ``check_and_complete`` after appends.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.errors import CoreError, OffsetOutOfRangeError
from core.log.log_manager import LogManager
from core.log.partition_log import (
    MAX_TIMESTAMP,
    LogAppendInfo,
    PartitionLog,
    TimestampAndOffset,
)
from core.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from core.server.remote_seam import (
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    RemoteFetchResult,
    RemoteTier,
)
from core.server.timing_wheel import Timer
from core.server.topics import TopicInfo, TopicRegistry, write_partition_metadata

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# Partitions whose logs one executor step opens or deletes when a topic is created or
# deleted while the broker serves (the event loop registers each step's in between).
PARTITIONS_PER_STEP = 100

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
REQUEST_TIMED_OUT = 7
KAFKA_STORAGE_ERROR = 56


class NotLeaderError(CoreError):
    """NOT_LEADER_OR_FOLLOWER."""

    error_code = 6


class FencedLeaderEpochError(CoreError):
    """FENCED_LEADER_EPOCH: the client's leader epoch is older than the broker's."""

    error_code = 74


class UnknownLeaderEpochError(CoreError):
    """UNKNOWN_LEADER_EPOCH: the client's leader epoch is newer than the broker's."""

    error_code = 75


class Partition:
    """A partition this broker leads."""

    def __init__(self, topic: TopicInfo, index: int, log: PartitionLog, leader_epoch: int) -> None:
        self.topic = topic.name
        self.topic_id = topic.topic_id
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.index)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's check of a request's current leader epoch (-1 = not given)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}"
            )

    def append_as_leader(self, records: bytearray) -> LogAppendInfo:
        info = self.log.append_as_leader(records, self.leader_epoch)
        # The only replica: everything appended is replicated, the HW is the log end.
        self.log.update_high_watermark(self.log.log_end_offset)
        return info

    def append_as_coordinator(self, records: bytearray) -> LogAppendInfo:
        """Append batches of this broker's coordinators: transaction markers and
        transactional offset commits (Kafka's AppendOrigin.COORDINATOR)."""
        info = self.log.append_as_coordinator(records, self.leader_epoch)
        self.log.update_high_watermark(self.log.log_end_offset)
        return info

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset


@dataclass(slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    topic_id: uuid.UUID | None = None


@dataclass(slots=True)
class FetchPartitionResult:
    error: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | None = None
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset)
    remote: bool = False  # to be read from the remote tier


@dataclass(slots=True)
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    partitions: list[FetchRequestPartition] = field(default_factory=list)


class ReplicaManager:
    """Produce, fetch and offset queries over the partitions of this broker."""

    def __init__(self, log_manager: LogManager, topics: TopicRegistry, timer: Timer) -> None:
        self.remote: RemoteTier | None = None  # plugged in by the composition root
        self.log_manager = log_manager
        self.topics = topics
        self.timer = timer
        self.partitions: dict[TopicPartition, Partition] = {}
        self.stopping = False  # the broker is shutting down: topic creations stop early
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory(
            "Fetch", timer
        )
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("Produce", timer)
        )
        self.remote_fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("RemoteFetch", timer)
        )

    # -- partitions ------------------------------------------------------------------------
    def open_topic(self, info: TopicInfo) -> list[Partition]:
        """Open (creating where needed) the logs of every partition of a topic, blocking:
        for start-up, before the broker serves. ``open_topic_in_steps`` is the serving
        broker's way."""
        self.register(info, self.open_logs(info, self._not_open(info, range(info.partitions))))
        return [self.partitions[(info.name, index)] for index in range(info.partitions)]

    async def open_topic_in_steps(self, info: TopicInfo) -> bool:
        """Open the logs of a topic's partitions on executor threads, ``PARTITIONS_PER_STEP``
        at a time, each step registered on the event loop as it completes, so that the loop
        serves other requests meanwhile. A partition not yet open is absent from
        ``partitions`` (Metadata answers LEADER_NOT_AVAILABLE for it, as Kafka does while a
        leader is being elected). Returns False if ``stopping`` cut it short (the next
        start opens the rest)."""
        loop = asyncio.get_running_loop()
        for first in range(0, info.partitions, PARTITIONS_PER_STEP):
            if self.stopping:
                return False
            step = range(first, min(first + PARTITIONS_PER_STEP, info.partitions))
            logs = await loop.run_in_executor(
                None, self.open_logs, info, self._not_open(info, step)
            )
            self.register(info, logs)
        return True

    def _not_open(self, info: TopicInfo, indexes: range) -> list[int]:
        return [i for i in indexes if (info.name, i) not in self.partitions]

    def open_logs(self, info: TopicInfo, indexes: Iterable[int]) -> list[PartitionLog]:
        """Open or create the logs of some partitions of a topic (blocking disk work,
        thread-safe): the logs, in the order of ``indexes``."""
        logs = self.log_manager.get_or_create_logs(
            info.name, indexes, self.topics.log_config(info.name)
        )
        for plog in logs:
            write_partition_metadata(plog.dir, info.topic_id)
            # Becoming leader with an ISR of one: the high watermark is the log end at
            # once (Kafka's maybeIncrementHighWatermark), not the last checkpoint, or
            # records acknowledged after that checkpoint stay invisible after a crash
            # until the next produce.
            plog.update_high_watermark(plog.log_end_offset)
        return logs

    def register(self, info: TopicInfo, logs: Iterable[PartitionLog]) -> None:
        """Lead the partitions of opened logs (on the event loop)."""
        for plog in logs:
            tp = (info.name, plog.partition)
            if tp in self.partitions:
                continue
            index = plog.partition
            epoch = info.leader_epochs[index] if index < len(info.leader_epochs) else 0
            plog.inline_flush = False  # fsyncs go to a thread: see append()
            self.partitions[tp] = Partition(info, index, plog, epoch)

    def remove_topic(self, name: str) -> None:
        """Stop leading a topic's partitions and delete their logs, blocking."""
        for tp in self.forget_topic(name):
            self.log_manager.delete_log(*tp)

    async def remove_topic_in_steps(self, info: TopicInfo) -> None:
        """Stop leading a topic's partitions at once, then delete their logs on executor
        threads, ``PARTITIONS_PER_STEP`` at a time (also logs never registered, such as
        those of a creation cut short)."""
        self.forget_topic(info.name)
        loop = asyncio.get_running_loop()
        for first in range(0, info.partitions, PARTITIONS_PER_STEP):
            indexes = range(first, min(first + PARTITIONS_PER_STEP, info.partitions))
            await loop.run_in_executor(None, self._delete_logs, info.name, indexes)

    def _delete_logs(self, name: str, indexes: range) -> None:
        for index in indexes:
            self.log_manager.delete_log(name, index)

    def forget_topic(self, name: str) -> list[TopicPartition]:
        """Drop a topic's partitions from those led; fetches waiting on them complete."""
        gone = [tp for tp in self.partitions if tp[0] == name]
        for tp in gone:
            del self.partitions[tp]
            self.fetch_purgatory.check_and_complete(tp)
        return gone

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # -- produce ---------------------------------------------------------------------------
    def append(self, partition: Partition, records: bytearray) -> LogAppendInfo:
        """Append client batches to a leader partition and wake fetches waiting on it.

        Runs on the event loop without waiting: a write to the page cache. When the flush
        policy asks for an fsync, ``wait_durable`` performs it on a thread.

        Raises:
            CoreError subclasses carrying the Kafka error code for the partition.
        """
        info = partition.append_as_leader(records)
        if not info.duplicate and self.fetch_purgatory.watched():
            self.fetch_purgatory.check_and_complete(partition.tp)
        return info

    def append_marker(self, topic: str, index: int, batch: bytearray) -> None:
        """Append a transaction marker to a partition led here, waking its fetches (the
        LSO may move). ``MarkerPartitions`` of core.server.transaction_marker_channel.

        Raises:
            LookupError: the partition is not led here.
            CoreError: the log refused the marker.
        """
        partition = self.partition(topic, index)
        if partition is None:
            raise LookupError(f"{topic}-{index} is not led here")
        partition.append_as_coordinator(batch)
        if self.fetch_purgatory.watched():
            self.fetch_purgatory.check_and_complete(partition.tp)

    async def wait_durable_always(self, partition: Partition) -> None:
        """fsync the partition off the event loop, whatever ``flush.messages`` says (the
        coordinators' state must survive a crash once they act on it)."""
        await asyncio.get_running_loop().run_in_executor(None, partition.log.sync_data)

    async def wait_durable(self, partition: Partition) -> None:
        """fsync the partition if ``flush.messages`` says so, off the event loop."""
        if partition.log.flush_due:
            await asyncio.get_running_loop().run_in_executor(None, partition.log.flush)

    async def wait_replicated(
        self, partition: Partition, required_offset: int, timeout_ms: int
    ) -> int:
        """acks=-1: wait until the high watermark reaches ``required_offset``.

        Returns the error code (0, or REQUEST_TIMED_OUT). With one replica the high
        watermark moves with the append, so this completes at once; the DelayedProduce
        path is the one replication will use.
        """
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        op = DelayedProduce(partition, required_offset, timeout_ms, future)
        self.produce_purgatory.try_complete_else_watch(op, [partition.tp])
        return await future

    # -- fetch -----------------------------------------------------------------------------
    def read(self, params: FetchParams) -> tuple[list[FetchPartitionResult], int]:
        """One pass over the requested partitions; returns results and bytes gathered.

        Kafka's rules: the first partition with data may exceed the limits (at least one
        batch, so a batch larger than the limits is never stuck); the response stays within
        ``max_bytes`` otherwise; each partition within its ``partition_max_bytes``.
        """
        results: list[FetchPartitionResult] = []
        remaining = params.max_bytes
        gathered = 0
        min_one_message = True
        for req in params.partitions:
            result = FetchPartitionResult()
            results.append(result)
            partition = self.partitions.get((req.topic, req.partition))
            if partition is None:
                result.error = 3  # UNKNOWN_TOPIC_OR_PARTITION
                continue
            plog = partition.log
            try:
                partition.check_leader_epoch(req.current_leader_epoch)
                hw = plog.high_watermark
                lso = partition.last_stable_offset
                max_offset = lso if params.isolation_level == READ_COMMITTED else hw
                limit = min(req.max_bytes, remaining)
                info = plog.read(
                    req.fetch_offset,
                    max(limit, 0),
                    max_offset=max_offset,
                    min_one_message=min_one_message,
                )
            except OffsetOutOfRangeError:
                result.high_watermark = plog.high_watermark
                result.log_start_offset = plog.log_start_offset
                if self._in_remote_range(plog, req.fetch_offset):
                    result.last_stable_offset = partition.last_stable_offset
                    result.remote = True  # served by the remote tier, see fetch()
                else:
                    result.error = OffsetOutOfRangeError.error_code
                continue
            except CoreError as e:
                result.error = e.error_code
                continue
            result.high_watermark = hw
            result.last_stable_offset = lso
            result.log_start_offset = plog.log_start_offset
            if info.records is not None and info.records.size > 0:
                data = info.records.read_bytes()
                result.records = data
                remaining -= len(data)
                gathered += len(data)
                min_one_message = False
                if params.isolation_level == READ_COMMITTED:
                    upper = req.fetch_offset + len(data)  # a bound: offsets <= bytes
                    txns = plog.collect_aborted_txns(req.fetch_offset, max(upper, max_offset))
                    result.aborted = [(t.producer_id, t.first_offset) for t in txns]
            elif params.isolation_level == READ_COMMITTED:
                result.aborted = []
        return results, gathered

    def _in_remote_range(self, plog: PartitionLog, offset: int) -> bool:
        return (
            self.remote is not None
            and plog.config.remote_storage_enable
            and plog.log_start_offset <= offset < plog.local_log_start_offset
        )

    async def _fetch_remote(
        self, params: FetchParams, results: list[FetchPartitionResult], gathered: int
    ) -> list[FetchPartitionResult]:
        """Kafka's DelayedRemoteFetch: start the reads of the partitions marked remote, then
        wait in the remote-fetch purgatory until all are done or ``remote.fetch.max.wait.ms``
        passes. Unlike Kafka before KAFKA-14915, every remote partition of the fetch is read,
        in parallel, within what is left of the response's ``max_bytes``. A read that fails
        errors its partition only; one that does not finish in time leaves its partition
        empty (Kafka's answer); the others keep their data."""
        remote = self.remote
        assert remote is not None
        loop = asyncio.get_running_loop()
        read_committed = params.isolation_level == READ_COMMITTED
        budget = params.max_bytes - gathered
        reads: list[
            tuple[FetchRequestPartition, FetchPartitionResult, asyncio.Future[RemoteFetchResult]]
        ] = []
        for req, result in zip(params.partitions, results, strict=True):
            if not result.remote:
                continue
            result.remote = False
            if budget <= 0 and (gathered > 0 or reads):
                continue  # the response is full: an empty answer, as for a local partition
            partition = self.partitions[(req.topic, req.partition)]
            max_bytes = max(min(req.max_bytes, budget), 1)
            budget -= max_bytes
            try:
                future = remote.start_read(
                    partition.topic_id,
                    req.topic,
                    req.partition,
                    partition.log,
                    req.fetch_offset,
                    max_bytes,
                    read_committed=read_committed,
                )
            except CoreError as e:
                result.error = e.error_code
                continue
            tp = partition.tp
            future.add_done_callback(
                lambda _, tp=tp: self.remote_fetch_purgatory.check_and_complete(tp)
            )
            reads.append((req, result, future))
        if not reads:
            return results
        done: asyncio.Future[None] = loop.create_future()
        op = DelayedRemoteFetch(reads, remote.fetch_max_wait_ms, done)
        keys = {(p.topic, p.partition) for p in params.partitions}
        self.remote_fetch_purgatory.try_complete_else_watch(op, keys)
        try:
            await done
        except asyncio.CancelledError:
            op.force_complete()  # the connection went away: abandon the reads
            raise
        return results

    async def fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        """Read now, or wait (long poll) until ``min_bytes`` are there or ``max_wait_ms``."""
        results, gathered = self.read(params)
        if any(r.remote for r in results):
            # Remote data is "available now": the fetch waits for the remote reads only,
            # never for fetch.min.bytes (Kafka's order).
            return await self._fetch_remote(params, results, gathered)
        if (
            params.max_wait_ms <= 0
            or gathered >= params.min_bytes
            or not params.partitions
            or any(r.error for r in results)
        ):
            return results
        future: asyncio.Future[list[FetchPartitionResult]] = (
            asyncio.get_running_loop().create_future()
        )
        op = DelayedFetch(self, params, future)
        keys = [(p.topic, p.partition) for p in params.partitions]
        self.fetch_purgatory.try_complete_else_watch(op, keys)
        return await future

    # -- offsets ---------------------------------------------------------------------------
    async def list_offset(
        self, partition: Partition, timestamp: int, isolation_level: int, current_leader_epoch: int
    ) -> TimestampAndOffset | None:
        partition.check_leader_epoch(current_leader_epoch)
        plog = partition.log
        found = None
        tiered = self.remote is not None and plog.config.remote_storage_enable
        remote_only = tiered and plog.log_start_offset < plog.local_log_start_offset
        if (remote_only and (timestamp >= 0 or timestamp == MAX_TIMESTAMP)) or (
            tiered and timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP
        ):
            # Older records live in the remote tier: ask it first (Kafka's order).
            assert self.remote is not None
            found = await self.remote.offset_for_timestamp(
                partition.topic_id, partition.topic, partition.index, plog, timestamp
            )
        if found is None or timestamp == MAX_TIMESTAMP:
            if timestamp >= 0 or timestamp == MAX_TIMESTAMP:
                # These read the segments (a search, or the batch holding the max).
                local = await asyncio.get_running_loop().run_in_executor(
                    None, plog.fetch_offset_by_timestamp, timestamp
                )
            else:
                local = plog.fetch_offset_by_timestamp(timestamp)
            # MAX_TIMESTAMP over both tiers: the larger timestamp, the earlier record on ties
            # (the remote tier answered only if it may hold either).
            if found is None or (
                local is not None
                and (local.timestamp, -local.offset) > (found.timestamp, -found.offset)
            ):
                found = local
        if found is None:
            return None
        # Consumers never see offsets above what they may read (Kafka clamps LATEST too).
        bound = (
            partition.last_stable_offset
            if isolation_level == READ_COMMITTED
            else partition.high_watermark
        )
        if timestamp == -1 or found.offset > bound:
            return TimestampAndOffset(-1, bound, partition.leader_epoch)
        return found

    def delete_records(self, partition: Partition, offset: int) -> int:
        """DeleteRecords: move the log start offset (-1 means the high watermark)."""
        target = partition.high_watermark if offset == -1 else offset
        if target < 0 or target > partition.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {partition.topic}-{partition.index} before offset "
                f"{offset}: the high watermark is {partition.high_watermark}"
            )
        partition.log.maybe_increment_log_start_offset(target, "DeleteRecords")
        return partition.log.log_start_offset

    def shutdown(self) -> None:
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
        self.remote_fetch_purgatory.shutdown()


class DelayedFetch(DelayedOperation):
    """A fetch waiting for ``min_bytes`` (re-read on every append to its partitions)."""

    def __init__(
        self,
        manager: ReplicaManager,
        params: FetchParams,
        future: asyncio.Future[list[FetchPartitionResult]],
    ) -> None:
        super().__init__(params.max_wait_ms)
        self.manager = manager
        self.params = params
        self.future = future
        self._results: list[FetchPartitionResult] | None = None

    def try_complete(self) -> bool:
        if self.future.done():  # the client went away
            return self.force_complete()
        results, gathered = self.manager.read(self.params)
        if gathered >= self.params.min_bytes or any(r.error for r in results):
            self._results = results
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        if self.future.done():
            return
        results = self._results
        if results is None:
            results, _ = self.manager.read(self.params)
        self.future.set_result(results)


class DelayedRemoteFetch(DelayedOperation):
    """A fetch waiting for its remote reads (Kafka's DelayedRemoteFetch).

    Completes when every read is done (each read's completion calls ``check_and_complete``
    for its partition) or when ``remote.fetch.max.wait.ms`` expires; on completion each
    remote partition gets its records or the error of its read. A read still running is
    cancelled and its partition answered with no records and no error, as Kafka answers it:
    the client fetches again. (An error code here, REQUEST_TIMED_OUT, reaches applications
    as a consumer error through librdkafka, which does not flag it retriable; the expiry is
    logged instead.)
    """

    def __init__(
        self,
        reads: list[
            tuple[FetchRequestPartition, FetchPartitionResult, asyncio.Future[RemoteFetchResult]]
        ],
        timeout_ms: int,
        done: asyncio.Future[None],
    ) -> None:
        super().__init__(max(timeout_ms, 0))
        self.reads = reads
        self.done = done

    def try_complete(self) -> bool:
        if self.done.done() or all(future.done() for _, _, future in self.reads):
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        for req, result, future in self.reads:
            if not future.done() or future.cancelled():
                future.cancel()
                log.info(
                    "remote read of %s-%d at offset %d did not finish within "
                    "remote.fetch.max.wait.ms (%d ms): answered with no records",
                    req.topic,
                    req.partition,
                    req.fetch_offset,
                    self.delay_ms,
                )
                continue
            error = future.exception()
            if error is None:
                answer = future.result()
                result.records = answer.records
                if answer.aborted_txns is not None:
                    result.aborted = list(answer.aborted_txns)
            elif isinstance(error, CoreError):
                result.error = error.error_code
            else:
                # The remote tier logged the failure with its details where it happened.
                log.warning("remote read failed: %s", error)
                result.error = KAFKA_STORAGE_ERROR
        if not self.done.done():
            self.done.set_result(None)


def topic_partitions(infos: Iterable[TopicInfo]) -> list[TopicPartition]:
    return [(t.name, p) for t in infos for p in range(t.partitions)]


class DelayedProduce(DelayedOperation):
    """An acks=-1 produce waiting for the high watermark to pass its last offset."""

    def __init__(
        self,
        partition: Partition,
        required_offset: int,
        timeout_ms: int,
        future: asyncio.Future[int],
    ) -> None:
        super().__init__(max(timeout_ms, 0))
        self.partition = partition
        self.required_offset = required_offset
        self.future = future
        self._error = 7  # REQUEST_TIMED_OUT unless the high watermark arrives

    def try_complete(self) -> bool:
        if self.partition.high_watermark >= self.required_offset:
            self._error = 0
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self._error)
