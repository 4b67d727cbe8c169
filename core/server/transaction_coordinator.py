"""The transaction coordinator (Kafka's TransactionCoordinator, transactions v1).

Each transactional id belongs to one ``__transaction_state`` partition
(``transaction_partition_for``); the broker leading that partition coordinates it. The
coordinator follows leadership as the group coordinator does: ``load(index, epoch)``
replays the partition into memory and then finishes what the log shows in progress
(PrepareCommit/PrepareAbort: the markers are sent again and the transaction completed;
PrepareEpochFence: aborted); ``unload(index)`` forgets the partition's ids. The
partition's leader epoch is the coordinator epoch its markers carry, so that a newer
coordinator's markers win over an older one's. ``TransactionLoader`` calls them as the
broker's leadership of the partitions changes (a broker running alone leads them all).

Requests (error codes as Kafka answers them):

- InitProducerId: a new id gets a producer id at epoch 0; a known one gets its epoch bumped
  (a new producer id when the epoch is exhausted), which fences the previous producer; an
  open transaction is first aborted with a bumped epoch (CONCURRENT_TRANSACTIONS meanwhile;
  the client retries). KIP-360: a producer giving its current id and epoch keeps the id.
- AddPartitionsToTxn / AddOffsetsToTxn: the partitions join the Ongoing transaction (one
  write to the log). ``verify`` answers a partition leader's KIP-890 check: is this
  partition in this producer's ongoing transaction?
- EndTxn: PrepareCommit/PrepareAbort is written and answered; the markers are then written
  in every partition (``transaction_marker_channel``) and CompleteCommit/CompleteAbort
  written.
- Timeouts: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` the
  Ongoing transactions older than their timeout are aborted with a bumped epoch (Kafka's
  abortTimedOutTransactions); every ``transaction.remove.expired.transaction.cleanup.
  interval.ms`` the ids idle for ``transactional.id.expiration.ms`` are removed (a
  tombstone).

Single-threaded: everything runs on the event loop. While a write for an id is in flight
its ``pending`` state is set, and other requests for it get CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from core.clock import now_ms
from core.errors import CoreError
from core.server.coordinator_records import CoordinatorRecordError
from core.server.transaction_log import (
    TopicPartition,
    TransactionState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    transaction_partition_for,
)
from core.server.transaction_marker_channel import MarkerChannel, TxnMarker
from core.server.transaction_metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TransactionMetadata,
    check_transition,
)
from core.server.transaction_state_topic import TransactionStateLog
from core.server.zookeeper.errors import ZkError

log = logging.getLogger(__name__)

S = TransactionState

# Kafka's error codes.
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
KAFKA_STORAGE_ERROR = 56


# Kafka's TransactionStateManager answers a failed write of the log so: the producer finds
# the coordinator again, or retries the same one.
NOT_COORDINATOR_WRITE_ERRORS = frozenset({6, KAFKA_STORAGE_ERROR})  # NOT_LEADER_OR_FOLLOWER
RETRIABLE_WRITE_ERRORS = frozenset({3, 7, 19, 20})  # UNKNOWN_TOPIC_OR_PARTITION, timeouts,
# NOT_ENOUGH_REPLICAS(_AFTER_APPEND)


def write_error(code: int) -> int:
    """The answer to a request whose ``__transaction_state`` write failed with ``code``."""
    if code in NOT_COORDINATOR_WRITE_ERRORS:
        return NOT_COORDINATOR
    if code in RETRIABLE_WRITE_ERRORS:
        return COORDINATOR_NOT_AVAILABLE
    return code


OPEN_STATES = frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE})


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    max_timeout_ms: int = 900_000
    abort_interval_ms: int = 10_000
    id_expiration_ms: int = 604_800_000
    remove_interval_ms: int = 3_600_000


RemoteVerify = Callable[[str, int, int, list[TopicPartition]], Awaitable[dict[TopicPartition, int]]]


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: TransactionState


class TransactionCoordinator:
    """Transactional ids of the ``__transaction_state`` partitions loaded here.

    Args:
        num_partitions: the topic's partition count (a callable: the topic may be created
            after the coordinator).
        state_log: reads and writes the partitions.
        markers: writes COMMIT/ABORT markers in a transaction's partitions.
        allocate_producer_id: a new producer id, unique in the cluster (awaited: in a
            cluster it may fetch a new block from ZooKeeper).
    """

    def __init__(
        self,
        num_partitions: Callable[[], int],
        state_log: TransactionStateLog,
        markers: MarkerChannel,
        allocate_producer_id: Callable[[], Awaitable[int]],
        settings: CoordinatorSettings,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._num_partitions = num_partitions
        self.state_log = state_log
        self.markers = markers
        self._allocate = allocate_producer_id
        self.settings = settings
        self._clock = clock
        self._loaded: dict[int, int] = {}  # partition -> coordinator epoch
        self._loading: set[int] = set()
        self._txns: dict[int, dict[str, TransactionMetadata]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._completing: set[str] = set()  # ids whose markers are being sent
        self._timers: list[asyncio.TimerHandle] = []
        # KIP-890 in a cluster: asks the coordinator of a transactional id led by another
        # broker (transaction_verification.verify_remotely with that broker's endpoint);
        # None on a broker alone, which coordinates every id; set when it joins a cluster.
        self.remote: RemoteVerify | None = None

    # -- partitions ----------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return transaction_partition_for(transactional_id, self._num_partitions())

    def is_coordinator(self, transactional_id: str) -> bool:
        return self.partition_for(transactional_id) in self._loaded

    async def load(self, index: int, coordinator_epoch: int) -> None:
        """Become the coordinator of partition ``index``: replay it (on a thread), then
        complete or abort what it shows in progress."""
        if self._loaded.get(index) == coordinator_epoch:
            return
        self._loading.add(index)
        self._loaded.pop(index, None)
        loop = asyncio.get_running_loop()
        try:
            records = await loop.run_in_executor(None, lambda: list(self.state_log.replay(index)))
        finally:
            self._loading.discard(index)
        txns: dict[str, TransactionMetadata] = {}
        for key, value in records:
            try:
                txn_id = decode_key(key)
                if value is None:
                    txns.pop(txn_id, None)
                    continue
                txns[txn_id] = TransactionMetadata.from_value(
                    txn_id, decode_value(value), coordinator_epoch
                )
            except CoordinatorRecordError as e:
                log.warning("skipping an unreadable record of __transaction_state-%d: %s", index, e)
        self._txns[index] = txns
        self._loaded[index] = coordinator_epoch
        for meta in txns.values():
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._completing.add(meta.transactional_id)
                self._spawn(self._complete(index, meta))
            elif meta.state is S.PREPARE_EPOCH_FENCE:
                self._spawn(self._abort_quietly(index, meta, bump=False))
        if txns:
            log.info("__transaction_state-%d loaded: %d transactional ids", index, len(txns))

    def unload(self, index: int) -> None:
        """Stop coordinating partition ``index`` (another broker leads it now)."""
        self._loaded.pop(index, None)
        self._loading.discard(index)
        self._txns.pop(index, None)

    def loaded_partitions(self) -> set[int]:
        return set(self._loaded)

    def _lookup(self, transactional_id: str) -> tuple[int, int, TransactionMetadata | None]:
        """(error, partition, metadata): NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
        for an id this broker does not coordinate (yet)."""
        index = self.partition_for(transactional_id)
        if index in self._loading:
            return COORDINATOR_LOAD_IN_PROGRESS, index, None
        if index not in self._loaded:
            return NOT_COORDINATOR, index, None
        return NONE, index, self._txns[index].get(transactional_id)

    def _still_coordinating(self, index: int, epoch: int) -> Callable[[], bool]:
        return lambda: self._loaded.get(index) == epoch

    # -- writing -------------------------------------------------------------------------------
    async def _write(
        self, index: int, meta: TransactionMetadata, target: TransactionState, **changes: object
    ) -> int:
        """Write ``meta`` in state ``target`` (with ``changes``) and apply it once durable."""
        try:
            check_transition(meta.state, target)
        except IllegalTransitionError as e:
            log.error("transactional id %s: %s (a coordinator bug)", meta.transactional_id, e)
            return INVALID_TXN_STATE
        epoch = self._loaded.get(index)
        if epoch is None:
            return NOT_COORDINATOR
        value = meta.value_for(target, meta.partitions, now_ms=self._clock(), **changes)  # type: ignore[arg-type]
        meta.pending = target
        try:
            # CompleteCommit/CompleteAbort need no fsync: lost in a crash, the reload finds
            # PrepareCommit/PrepareAbort and writes the (idempotent) markers again.
            await self.state_log.append(
                index,
                encode_key(meta.transactional_id),
                encode_value(value),
                durable=target not in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT),
            )
        except LookupError:
            return NOT_COORDINATOR
        except CoreError as e:
            log.warning("cannot write the state of %s: %s", meta.transactional_id, e)
            return write_error(e.error_code)
        finally:
            meta.pending = None
        if self._loaded.get(index) != epoch:
            return NOT_COORDINATOR  # lost the partition while writing
        meta.apply(value)
        meta.coordinator_epoch = epoch
        return NONE

    def _spawn(self, coroutine: object) -> None:
        task = asyncio.ensure_future(coroutine)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("transaction coordinator task failed", exc_info=task.exception())

    # -- InitProducerId ------------------------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch) for a transactional producer's InitProducerId."""
        if not transactional_id:
            return INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        error, index, meta = self._lookup(transactional_id)
        if error:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if meta is None:
            pid = await self._allocate_or_none()
            if pid is None:
                return COORDINATOR_NOT_AVAILABLE, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            # The allocation may have suspended: the id may have arrived or moved meanwhile.
            error, index, meta = self._lookup(transactional_id)
            if error:
                return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if meta is not None:
                return CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            meta = TransactionMetadata(
                transactional_id, pid, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY
            )
            self._txns[index][transactional_id] = meta
            error = await self._write(index, meta, S.EMPTY, producer_epoch=0, timeout_ms=timeout_ms)
            if error:
                if meta.producer_epoch == NO_PRODUCER_EPOCH:
                    self._txns.get(index, {}).pop(transactional_id, None)
                return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            return NONE, meta.producer_id, meta.producer_epoch
        if meta.pending is not None or transactional_id in self._completing:
            return CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if producer_id != NO_PRODUCER_ID:
            # KIP-360: the producer names its current id and epoch.
            retry = (producer_id, producer_epoch) == (
                meta.last_producer_id,
                meta.last_producer_epoch,
            )
            if retry and meta.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
                return NONE, meta.producer_id, meta.producer_epoch
            if producer_id != meta.producer_id:
                return INVALID_PRODUCER_ID_MAPPING, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            if producer_epoch != meta.producer_epoch:
                return PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE, S.DEAD):
            return CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if meta.state is S.ONGOING:
            # Fence the producer of the open transaction: abort it with a bumped epoch.
            self._spawn(self._abort_quietly(index, meta, bump=True))
            return CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch >= MAX_PRODUCER_EPOCH:
            meta.pending = S.EMPTY  # no other request of this id while the id is allocated
            try:
                allocated = await self._allocate_or_none()
            finally:
                meta.pending = None
            if allocated is None:
                return COORDINATOR_NOT_AVAILABLE, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            pid, epoch = allocated, 0
        error = await self._write(
            index, meta, S.EMPTY, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
            start_ms=-1,
        )  # fmt: skip
        if error:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        return NONE, meta.producer_id, meta.producer_epoch

    async def _allocate_or_none(self) -> int | None:
        """A new producer id; None when none can be allocated now (Kafka answers
        COORDINATOR_NOT_AVAILABLE then, and the producer retries)."""
        try:
            return await self._allocate()
        except (CoreError, ZkError) as e:
            log.warning("cannot allocate a producer id: %s", e)
            return None

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------
    def _check_producer(
        self, meta: TransactionMetadata | None, producer_id: int, producer_epoch: int
    ) -> int:
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return PRODUCER_FENCED
        return NONE

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> int:
        """Add ``partitions`` to the producer's transaction (starting it if need be)."""
        error, index, meta = self._lookup(transactional_id)
        if error:
            return error
        error = self._check_producer(meta, producer_id, producer_epoch)
        if error:
            return error
        assert meta is not None
        if meta.pending is not None or transactional_id in self._completing:
            return CONCURRENT_TRANSACTIONS
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE):
            return CONCURRENT_TRANSACTIONS
        if meta.state is S.DEAD:
            return INVALID_PRODUCER_ID_MAPPING
        wanted = set(partitions)
        if meta.state is S.ONGOING and wanted <= meta.partitions:
            return NONE
        start = meta.start_ms if meta.state is S.ONGOING else self._clock()
        # value_for writes the metadata's partitions: the union, restored if the write fails.
        before = set(meta.partitions)
        meta.partitions = before | wanted
        error = await self._write(index, meta, S.ONGOING, start_ms=start)
        if error:
            meta.partitions = before
        return error

    def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """KIP-890 part 1: a leader asks whether each partition is in this producer's
        ongoing transaction before it appends a transactional batch that would open one.
        NONE if it is; INVALID_TXN_STATE if not; the producer's error otherwise."""
        wanted = list(partitions)
        error, _, meta = self._lookup(transactional_id)
        if not error:
            error = self._check_producer(meta, producer_id, producer_epoch)
            if error == PRODUCER_FENCED:
                error = INVALID_PRODUCER_EPOCH  # what the leader answers the producer
        if error:
            return dict.fromkeys(wanted, error)
        assert meta is not None
        ongoing = meta.state is S.ONGOING
        return {tp: NONE if ongoing and tp in meta.partitions else INVALID_TXN_STATE
                for tp in wanted}  # fmt: skip

    def knows_open_transaction(self, producer_id: int, tp: TopicPartition) -> bool | None:
        """Whether a transaction of ``producer_id`` including ``tp`` is open here; None
        when no such transaction is known here and this broker does not coordinate every
        ``__transaction_state`` partition (another broker may know it)."""
        for txns in self._txns.values():
            for meta in txns.values():
                if (
                    meta.producer_id == producer_id
                    and tp in meta.partitions
                    and meta.state in OPEN_STATES
                ):
                    return True
        # Unknown here, but another broker may coordinate it: no verdict.
        return False if len(self._loaded) >= self._num_partitions() else None

    # -- EndTxn ----------------------------------------------------------------------------------
    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        error, index, meta = self._lookup(transactional_id)
        if error:
            return error
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            # A retry after a bump by this very end (KIP-360) is not fenced.
            return PRODUCER_FENCED
        if meta.pending is not None:
            return CONCURRENT_TRANSACTIONS
        state = meta.state
        if state is S.ONGOING:
            return await self._end(index, meta, commit, bump=False)
        if state is S.COMPLETE_COMMIT:
            return NONE if commit else INVALID_TXN_STATE
        if state is S.COMPLETE_ABORT:
            return INVALID_TXN_STATE if commit else NONE
        if state is S.PREPARE_COMMIT:
            return CONCURRENT_TRANSACTIONS if commit else INVALID_TXN_STATE
        if state is S.PREPARE_ABORT:
            return INVALID_TXN_STATE if commit else CONCURRENT_TRANSACTIONS
        if state is S.PREPARE_EPOCH_FENCE:
            return CONCURRENT_TRANSACTIONS
        return INVALID_TXN_STATE  # Empty, Dead

    async def _end(self, index: int, meta: TransactionMetadata, commit: bool, *, bump: bool) -> int:
        """Write PrepareCommit/PrepareAbort, then send the markers in the background."""
        target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        changes: dict[str, object] = {}
        if bump and meta.producer_epoch + 1 < MAX_PRODUCER_EPOCH:
            changes["producer_epoch"] = meta.producer_epoch + 1
        error = await self._write(index, meta, target, **changes)
        if error:
            return error
        self._completing.add(meta.transactional_id)
        self._spawn(self._complete(index, meta))
        return NONE

    async def _abort_quietly(self, index: int, meta: TransactionMetadata, *, bump: bool) -> None:
        if meta.state is S.PREPARE_EPOCH_FENCE:
            meta.state = S.ONGOING  # Kafka's fence is an abort with the bumped epoch
        if meta.state is not S.ONGOING or meta.pending is not None:
            return
        error = await self._end(index, meta, commit=False, bump=bump)
        if error:
            log.info("cannot abort the transaction of %s: error %d", meta.transactional_id, error)

    async def _complete(self, index: int, meta: TransactionMetadata) -> None:
        """Write the markers of a prepared transaction, then its Complete state."""
        txn_id = meta.transactional_id
        self._completing.add(txn_id)
        try:
            epoch = self._loaded.get(index)
            if epoch is None:
                return
            commit = meta.state is S.PREPARE_COMMIT
            marker = TxnMarker(
                meta.producer_id, meta.producer_epoch, epoch, commit, frozenset(meta.partitions)
            )
            done = await self.markers.send(marker, self._still_coordinating(index, epoch))
            if not done or self._txns.get(index, {}).get(txn_id) is not meta:
                return
            target = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
            error = await self._write(index, meta, target)
            if error:
                log.warning("cannot complete the transaction of %s: error %d", txn_id, error)
        finally:
            self._completing.discard(txn_id)

    # -- timeouts --------------------------------------------------------------------------------
    def start(self) -> None:
        """Schedule the periodic aborts of timed-out transactions and removal of expired
        transactional ids (event loop)."""
        loop = asyncio.get_running_loop()

        def every(slot: int, seconds: float, job: Callable[[], None]) -> None:
            def run() -> None:
                try:
                    job()
                finally:
                    self._timers[slot] = loop.call_later(seconds, run)

            self._timers.append(loop.call_later(seconds, run))

        every(0, self.settings.abort_interval_ms / 1000, self.abort_timed_out)
        every(1, self.settings.remove_interval_ms / 1000, self.remove_expired)

    def shutdown(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()

    def abort_timed_out(self) -> None:
        """Abort, with a bumped epoch, every Ongoing transaction past its timeout (Kafka's
        abortTimedOutTransactions); re-drive prepared ones whose markers are not moving."""
        now = self._clock()
        for index, txns in list(self._txns.items()):
            for meta in list(txns.values()):
                if meta.pending is not None or meta.transactional_id in self._completing:
                    continue
                if meta.state is S.ONGOING and now > meta.start_ms + meta.timeout_ms:
                    log.info(
                        "aborting the transaction of %s (producer %d): open for more than "
                        "its timeout of %d ms",
                        meta.transactional_id,
                        meta.producer_id,
                        meta.timeout_ms,
                    )
                    self._spawn(self._abort_quietly(index, meta, bump=True))
                elif meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    self._completing.add(meta.transactional_id)
                    self._spawn(self._complete(index, meta))

    def remove_expired(self) -> None:
        """Forget ids without a transaction for ``transactional.id.expiration.ms``."""
        now = self._clock()
        for index, txns in list(self._txns.items()):
            for meta in list(txns.values()):
                idle = meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                if (
                    idle
                    and meta.pending is None
                    and now - meta.last_update_ms > self.settings.id_expiration_ms
                ):
                    self._spawn(self._remove(index, meta))

    async def _remove(self, index: int, meta: TransactionMetadata) -> None:
        meta.pending = S.DEAD
        try:
            await self.state_log.append(index, encode_key(meta.transactional_id), None)
        except (LookupError, CoreError) as e:
            log.info("cannot expire transactional id %s: %s", meta.transactional_id, e)
            return
        finally:
            meta.pending = None
        txns = self._txns.get(index, {})
        if txns.get(meta.transactional_id) is meta:
            del txns[meta.transactional_id]
            log.info("transactional id %s expired", meta.transactional_id)

    # -- describing ------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> tuple[int, TransactionMetadata | None]:
        error, _, meta = self._lookup(transactional_id)
        if error:
            return error, None
        if meta is None:
            return TRANSACTIONAL_ID_NOT_FOUND, None
        return NONE, meta.snapshot()

    def list_transactions(
        self,
        states: set[TransactionState] | None = None,
        producer_ids: set[int] | None = None,
        min_duration_ms: int = -1,
    ) -> list[TransactionListing]:
        now = self._clock()
        out = []
        for txns in self._txns.values():
            for meta in txns.values():
                if states and meta.state not in states:
                    continue
                if producer_ids and meta.producer_id not in producer_ids:
                    continue
                if min_duration_ms >= 0 and (
                    meta.state is not S.ONGOING or now - meta.start_ms < min_duration_ms
                ):
                    continue
                out.append(TransactionListing(meta.transactional_id, meta.producer_id, meta.state))
        return sorted(out, key=lambda x: x.transactional_id)

    @property
    def loading(self) -> bool:
        return bool(self._loading)
