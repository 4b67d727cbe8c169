"""ReplicaManager: the partitions this broker hosts, their roles, and produce/fetch over them.

The controller (a ZooKeeper-mode controller's LeaderAndIsr and StopReplica, or the local
controller of an embedded broker) drives the roles through ``become_leader_or_follower``
and ``stop_replicas``; everything else reads the hosted ``Partition`` objects
(core.server.partition).

- **Leaders** append clients' batches and serve fetches. Consumers read up to the high
  watermark (or the last stable offset); followers (``replica_id >= 0``) read up to the log
  end and their fetch offsets move the high watermark and the ISR. acks=all produces wait in
  the produce purgatory (DelayedProduce) until the high watermark passes them; fetches wait
  in the fetch purgatory (DelayedFetch) until ``min_bytes`` are there: a follower's wakes on
  appends, a consumer's on high-watermark moves.
- **Followers** are fetched by the replica fetchers (core.server.replica_fetcher), which
  call back here to truncate and append.
- Roles change one controller request at a time (one lock). New logs are created on executor
  threads, ``PARTITIONS_PER_STEP`` at a time, each step served as soon as it is done; a
  partition becoming leader is removed from the fetchers first, one becoming follower is
  added to its leader's fetcher once its role is set. Listeners (the group coordinator, the
  remote tier) hear of the changes afterwards, on the loop.
- Every ``replica.lag.time.max.ms / 2`` the leaders drop the followers that fell behind.
- **Remote start.** A leader of a tiered partition whose local log is empty, at a leader
  epoch above 0, on a broker that tiers, first asks the remote tier where the partition
  ends there (``RemoteTier.remote_log_start``, once this broker's metadata of the partition
  has caught up): if finished remote segments exist, the log restarts after the newest one
  of the newest leader epoch, with that segment's leader epochs and producer state (the
  state a follower builds on OFFSET_MOVED_TO_TIERED_STORAGE, ``build_remote_log_aux_state``,
  read by the same remote-tier code), and only then is the partition served; meanwhile it
  answers NOT_LEADER_OR_FOLLOWER (produce, fetch, ListOffsets), followers' fetches
  included. Apache Kafka has no such step (it has no topic restore, and a leader whose log
  is empty starts at offset 0): tierlog needs it for a topic restored from the bucket into a
  cluster (``tierlog restore``), whose replicas all start empty and must not append over
  the remote offsets. A follower with an empty log needs nothing more than Kafka's path:
  its fetch at 0 is answered OFFSET_MOVED_TO_TIERED_STORAGE by the started leader, and it
  builds its state below the leader's local log start (KIP-405). A new topic (leader epoch
  0) and any leader with local data are never held.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.errors import (
    CoreError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from core.log.divergence import EpochEndOffset
from core.log.file_records import FileSlice
from core.log.leader_epoch import EpochEntry
from core.log.log_manager import LogManager
from core.log.partition_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    LogAppendInfo,
    PartitionLog,
    TimestampAndOffset,
)
from core.server.cluster_types import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    NO_LEADER,
    ZERO_UUID,
    LeaderAndIsr,
    PartitionState,
    StopReplicaPartition,
    TopicPartition,
)
from core.server.isr_writer import IsrWriter, LocalIsrWriter
from core.server.metadata_cache import MetadataCache
from core.server.node_client import BrokerEndpoint as NodeEndpoint
from core.server.node_client import NodeClient
from core.server.partition import (
    FencedLeaderEpochError,
    NotLeaderError,
    Partition,
    UnknownLeaderEpochError,
    monotonic_ms,
)
from core.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from core.server.remote_seam import (
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    RemoteFetchResult,
    RemoteLogStart,
    RemoteTier,
)
from core.server.replica_fetcher import (
    FETCH_MAX_VERSION,
    InitialFetchState,
    ReplicaFetcherManager,
)
from core.server.replication_quota import is_throttled
from core.server.replication_settings import ReplicationSettings
from core.server.timing_wheel import Timer
from core.server.topics import TopicInfo, write_partition_metadata

log = logging.getLogger(__name__)

# How long a leader waiting to start its empty log after the remote tier waits for this
# broker's remote tier and its metadata of the partition before it logs a warning and asks
# again (it stays unserved: serving the empty log would append over the remote offsets).
REMOTE_START_WAIT_S = 30.0
REMOTE_START_RETRY_S = 1.0

# Partitions whose logs one executor step opens or deletes when roles change while the
# broker serves (the event loop registers each step's partitions in between).
PARTITIONS_PER_STEP = 100

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
BROKER_NOT_AVAILABLE = 8
STALE_CONTROLLER_EPOCH = 11
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
INCONSISTENT_TOPIC_ID = 103
OFFSET_MOVED_TO_TIERED_STORAGE = 109

__all__ = [
    "FencedLeaderEpochError",
    "NotLeaderError",
    "UnknownLeaderEpochError",
]


class UnknownTopicOrPartitionError(CoreError):
    """UNKNOWN_TOPIC_OR_PARTITION: no such partition in the cluster."""

    error_code = 3


class LeadershipListener(Protocol):
    """Told, on the event loop, once a controller request changed roles."""

    def on_partitions_changed(
        self, leaders: Sequence[Partition], followers: Sequence[Partition]
    ) -> None:
        """These partitions are now led here / followed here (new or changed role, or a new
        leader epoch)."""
        ...

    def on_partitions_stopped(self, stopped: Sequence[TopicPartition], deleted: bool) -> None:
        """These partitions are no longer replicas here; ``deleted``: their logs are gone."""
        ...


@dataclass(slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    topic_id: uuid.UUID | None = None
    last_fetched_epoch: int = -1  # Fetch v12+
    log_start_offset: int = -1  # a follower's log start offset


@dataclass(slots=True)
class FetchPartitionResult:
    error: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # A local read's slice of a segment file (sent from the file), or a remote read's bytes.
    records: bytes | FileSlice | None = None
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset)
    remote: bool = False  # to be read from the remote tier
    diverging_epoch: EpochEndOffset | None = None  # a follower must truncate first
    leader_log_end_offset: int = -1  # at the read (a follower's caught-up rule)
    fetch_time_ms: int = 0  # when it was read, on the replica-lag clock


@dataclass(slots=True)
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    partitions: list[FetchRequestPartition] = field(default_factory=list)
    replica_id: int = -1  # a follower's broker id; -1 for consumers

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


class ReplicaManager:
    """The partitions of this broker: roles, produce, fetch and offset queries.

    Args:
        log_manager: the logs.
        timer: the purgatories' timer.
        metadata_cache: what the cluster looks like (leaders for NOT_LEADER_OR_FOLLOWER
            hints, the leaders' endpoints for the fetchers).
        settings: replica.* settings.
        max_fetch_version: the highest Fetch version followers send (below 12 they
            truncate with OffsetsForLeaderEpoch only).
        clock: replica-lag time in milliseconds (monotonic).
    """

    def __init__(
        self,
        log_manager: LogManager,
        timer: Timer,
        metadata_cache: MetadataCache,
        settings: ReplicationSettings | None = None,
        *,
        max_fetch_version: int = FETCH_MAX_VERSION,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._remote: RemoteTier | None = None  # plugged in by the composition root
        self._remote_plugged = asyncio.Event()
        # Leaders waiting to start after the remote tier (see the module docstring).
        self._remote_starts: dict[TopicPartition, asyncio.Task[None]] = {}
        self.log_manager = log_manager
        self.timer = timer
        self.metadata_cache = metadata_cache
        self.settings = settings or ReplicationSettings()
        # Replication throttles (Kafka's ReplicationQuotaManager LEADER and FOLLOWER).
        self.leader_quota = self.settings.leader_quota()
        self.follower_quota = self.settings.follower_quota()
        self.max_fetch_version = max_fetch_version
        self._clock = clock
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = -1  # of the last controller request applied
        self.stopping = False  # the broker is shutting down: role changes stop early
        self._isr_writer: IsrWriter = LocalIsrWriter()
        self.fetchers: ReplicaFetcherManager | None = None  # set_node_client
        self._listener_name: str | None = None
        self._listeners: list[LeadershipListener] = []
        self._state_change_lock = asyncio.Lock()
        self._shrink_handle: asyncio.TimerHandle | None = None
        self._adoption: asyncio.Future[None] | None = None  # see set_node_client
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory(
            "Fetch", timer
        )
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("Produce", timer)
        )
        self.remote_fetch_purgatory: DelayedOperationPurgatory[TopicPartition] = (
            DelayedOperationPurgatory("RemoteFetch", timer)
        )

    @property
    def remote(self) -> RemoteTier | None:
        """The remote tier, once the composition root plugged it in (None: not tiering)."""
        return self._remote

    @remote.setter
    def remote(self, tier: RemoteTier | None) -> None:
        self._remote = tier
        if tier is None:
            self._remote_plugged.clear()
        else:
            self._remote_plugged.set()

    # -- what partitions and fetchers see (ReplicaHost, FollowerTarget) ----------------------
    @property
    def broker_id(self) -> int:
        return self.metadata_cache.broker_id

    @property
    def replica_lag_time_max_ms(self) -> int:
        return self.settings.replica_lag_time_max_ms

    @property
    def isr_writer(self) -> IsrWriter:
        return self._isr_writer

    def clock_ms(self) -> int:
        return self._clock()

    def on_high_watermark_advanced(self, partition: Partition) -> None:
        tp = partition.tp
        if self.produce_purgatory.watched():
            self.produce_purgatory.check_and_complete(tp)
        if self.fetch_purgatory.watched():
            self.fetch_purgatory.check_and_complete(tp)

    # -- wiring ------------------------------------------------------------------------------
    def set_isr_writer(self, writer: IsrWriter) -> None:
        """Where leaders record ISR changes (ZooKeeper in cluster mode)."""
        self._isr_writer = writer

    def set_node_client(self, client: NodeClient, listener: str) -> None:
        """Fetch as a follower through ``client``, reaching leaders on ``listener`` (the
        inter-broker listener). Partitions followed already start fetching."""
        self._listener_name = listener
        self.fetchers = ReplicaFetcherManager(
            self,
            client,
            self.settings,
            max_fetch_version=self.max_fetch_version,
            quota=self.follower_quota,
        )
        if any(not p.is_leader for p in self.partitions.values()):
            self._adoption = asyncio.ensure_future(self._fetch_followed())

    async def _fetch_followed(self) -> None:
        async with self._state_change_lock:
            await self._add_fetchers([p for p in self.partitions.values() if not p.is_leader])

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._listeners.append(listener)

    def startup(self) -> None:
        """Start the periodic ISR check (on the running loop)."""
        self._schedule_isr_check()

    def _schedule_isr_check(self) -> None:
        # Kafka checks every half of the lag time.
        interval = max(self.settings.replica_lag_time_max_ms // 2, 10) / 1000
        self._shrink_handle = asyncio.get_running_loop().call_later(interval, self._check_isrs)

    def _check_isrs(self) -> None:
        self._schedule_isr_check()
        now = self.clock_ms()
        for partition in list(self.partitions.values()):
            # A leader waiting to start after the remote tier is fetched by nobody yet.
            if partition.is_leader and not partition.awaiting_remote_start:
                partition.maybe_shrink_isr(now)

    async def shutdown(self) -> None:
        """Stop the fetchers and the ISR check; waiting operations are dropped."""
        self.stopping = True
        for task in list(self._remote_starts.values()):
            task.cancel()
        if self._shrink_handle is not None:
            self._shrink_handle.cancel()
            self._shrink_handle = None
        if self.fetchers is not None:
            await self.fetchers.shutdown()
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
        self.remote_fetch_purgatory.shutdown()

    # -- lookups -----------------------------------------------------------------------------
    def partition(self, topic: str, index: int) -> Partition | None:
        """The hosted partition, leader or follower."""
        return self.partitions.get((topic, index))

    def missing_partition_error(self, tp: TopicPartition) -> int:
        """The error for a partition not hosted here (Kafka's getPartitionOrError):
        NOT_LEADER_OR_FOLLOWER if the cluster has it, else UNKNOWN_TOPIC_OR_PARTITION."""
        if self.metadata_cache.partition(tp) is not None:
            return NOT_LEADER_OR_FOLLOWER
        return UNKNOWN_TOPIC_OR_PARTITION

    def leader_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it.

        Raises:
            NotLeaderError, UnknownTopicOrPartitionError.
        """
        partition = self.partitions.get((topic, index))
        if partition is None:
            if self.missing_partition_error((topic, index)) == NOT_LEADER_OR_FOLLOWER:
                raise NotLeaderError(f"broker {self.broker_id} hosts no replica of {topic}-{index}")
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{index}")
        partition.check_leader()
        return partition

    # -- roles: the controller's requests ----------------------------------------------------
    async def become_leader_or_follower(
        self, controller_id: int, controller_epoch: int, states: Sequence[PartitionState]
    ) -> dict[TopicPartition, int]:
        """Apply a LeaderAndIsr (Kafka's becomeLeaderOrFollower).

        Per partition: UNKNOWN_TOPIC_OR_PARTITION if this broker is not one of its replicas,
        INCONSISTENT_TOPIC_ID if it is hosted under another topic id, FENCED_LEADER_EPOCH
        for a leader epoch older than the hosted one (the same epoch is applied only when it
        brings a newer partition epoch, else answered without change),
        KAFKA_STORAGE_ERROR if its log cannot be opened, BROKER_NOT_AVAILABLE if the
        broker began stopping first; else NONE once the role is applied.

        Returns:
            The error code of every partition of ``states``; all STALE_CONTROLLER_EPOCH if
            ``controller_epoch`` is older than the last one applied.
        """
        async with self._state_change_lock:
            if controller_epoch < self.controller_epoch:
                log.warning(
                    "LeaderAndIsr from controller %d with epoch %d refused: the latest "
                    "controller epoch is %d",
                    controller_id,
                    controller_epoch,
                    self.controller_epoch,
                )
                return dict.fromkeys((s.tp for s in states), STALE_CONTROLLER_EPOCH)
            self.controller_epoch = controller_epoch
            errors: dict[TopicPartition, int] = {}
            accepted = [s for s in states if self._accepts(s, errors)]
            leaders: list[Partition] = []
            followers: list[Partition] = []
            for first in range(0, len(accepted), PARTITIONS_PER_STEP):
                step = accepted[first : first + PARTITIONS_PER_STEP]
                if self.stopping:
                    errors.update(dict.fromkeys((s.tp for s in step), BROKER_NOT_AVAILABLE))
                    continue
                led, followed = await self._apply_step(step, errors)
                leaders += led
                followers += followed
            if leaders or followers:
                # The remote tier hears of them first: its metadata of the partitions
                # loads from here, and the remote starts below wait for it.
                for listener in self._listeners:
                    listener.on_partitions_changed(leaders, followers)
            for partition in [*leaders, *followers]:
                if partition.awaiting_remote_start and partition.tp not in self._remote_starts:
                    self._remote_starts[partition.tp] = asyncio.ensure_future(
                        self._start_from_remote(partition.tp)
                    )
            return errors

    def _accepts(self, state: PartitionState, errors: dict[TopicPartition, int]) -> bool:
        tp = state.tp
        errors[tp] = NONE
        if self.broker_id not in state.replicas:
            log.warning(
                "LeaderAndIsr for %s-%d ignored: broker %d is not among its replicas %s",
                *tp,
                self.broker_id,
                list(state.replicas),
            )
            errors[tp] = UNKNOWN_TOPIC_OR_PARTITION
            return False
        current = self.partitions.get(tp)
        if current is None:
            return True
        if state.topic_id != ZERO_UUID and current.topic_id not in (ZERO_UUID, state.topic_id):
            errors[tp] = INCONSISTENT_TOPIC_ID
            return False
        if state.leader_epoch < current.leader_epoch:
            log.warning(
                "LeaderAndIsr for %s-%d refused: leader epoch %d is older than %d",
                *tp,
                state.leader_epoch,
                current.leader_epoch,
            )
            errors[tp] = FENCED_LEADER_EPOCH
            return False
        # The same epoch is new only with a newer partition epoch (an ISR the controller
        # changed) or another leader; else the controller sends its state again.
        return (
            state.leader_epoch > current.leader_epoch
            or state.leader_and_isr.partition_epoch > current.partition_epoch
            or state.leader != current.leader_id
        )

    async def _apply_step(
        self, states: list[PartitionState], errors: dict[TopicPartition, int]
    ) -> tuple[list[Partition], list[Partition]]:
        loop = asyncio.get_running_loop()
        missing = [s for s in states if s.tp not in self.partitions]
        logs: dict[TopicPartition, PartitionLog] = {}
        if missing:
            logs, failed = await loop.run_in_executor(None, self._open_logs, missing)
            errors.update(dict.fromkeys(failed, KAFKA_STORAGE_ERROR))
        to_lead: list[tuple[Partition, PartitionState]] = []
        to_follow: list[tuple[Partition, PartitionState]] = []
        for state in states:
            partition = self.partitions.get(state.tp)
            if partition is None:
                plog = logs.get(state.tp)
                if plog is None:
                    continue  # could not be opened
                plog.inline_flush = False  # fsyncs go to a thread: see wait_durable()
                partition = Partition(state.topic, state.topic_id, state.partition, plog, self)
            # Held before the role is visible: no produce may reach the empty log first.
            partition.awaiting_remote_start = self._needs_remote_start(partition, state)
            if state.leader == self.broker_id:
                to_lead.append((partition, state))
            else:
                to_follow.append((partition, state))
        leaders = await self._make_leaders(to_lead)
        followers = await self._make_followers(to_follow)
        return leaders, followers

    def _needs_remote_start(self, partition: Partition, state: PartitionState) -> bool:
        """Whether the partition, led here as ``state`` says, must start its log after the
        remote tier before serving (see the module docstring). Leader epoch 0 is a new
        partition: no leader before this one can have tiered anything, so a new topic is
        never held. A follower never is: Kafka's follower path builds its state."""
        if state.leader != self.broker_id:
            return False
        if partition.awaiting_remote_start:
            return True
        plog = partition.log
        return (
            self.settings.remote_log_storage_system_enable
            and plog.config.remote_storage_enable
            and state.leader_epoch > 0
            and plog.log_end_offset == 0
        )

    async def _start_from_remote(self, tp: TopicPartition) -> None:
        """Start a held leader's log after the remote tier, then serve it; asks again until
        it is done, the partition is no longer held here (led by another broker, stopped),
        or the broker stops."""
        try:
            attempt = 0
            while not self.stopping:
                partition = self.partitions.get(tp)
                if partition is None or not partition.awaiting_remote_start:
                    return
                try:
                    start = await self._ask_remote_start(partition)
                except CoreError as e:
                    attempt += 1
                    log.warning(
                        "%s-%d: the leader's empty log waits to start after the remote tier "
                        "(attempt %d), answering NOT_LEADER_OR_FOLLOWER meanwhile: %s",
                        *tp,
                        attempt,
                        e,
                    )
                    await asyncio.sleep(REMOTE_START_RETRY_S)
                    continue
                async with self._state_change_lock:
                    if self.partitions.get(tp) is partition and partition.awaiting_remote_start:
                        await self._finish_remote_start(partition, start)
                return
        finally:
            self._remote_starts.pop(tp, None)

    async def _ask_remote_start(self, partition: Partition) -> RemoteLogStart | None:
        """Raises CoreError: the remote tier has not started, or had no answer in time."""
        if self._remote is None:
            # In a cluster the remote tier starts once __remote_log_metadata is reachable,
            # after the broker has taken its roles.
            try:
                await asyncio.wait_for(self._remote_plugged.wait(), REMOTE_START_WAIT_S)
            except TimeoutError:
                raise KafkaStorageError(
                    f"the remote tier has not started within {REMOTE_START_WAIT_S:g} s"
                ) from None
        remote = self._remote
        if remote is None:
            raise KafkaStorageError("the remote tier stopped")
        return await remote.remote_log_start(
            partition.topic_id, partition.topic, partition.index, REMOTE_START_WAIT_S
        )

    async def _finish_remote_start(
        self, partition: Partition, start: RemoteLogStart | None
    ) -> None:
        """Under the state-change lock: restart the held leader's empty log after the remote
        tier (as a follower rebuilding its BuildingRemoteLogAux state does), then serve."""
        plog = partition.log
        loop = asyncio.get_running_loop()
        if start is not None and plog.log_end_offset == 0:
            state = start.state
            await loop.run_in_executor(
                None,
                self.log_manager.restore_from_remote,
                partition.topic,
                partition.index,
                state.next_offset,
                start.log_start_offset,
                [EpochEntry(e, offset) for e, offset in state.leader_epochs],
                state.producer_snapshot,
            )
            log.info(
                "%s-%d: the empty log starts after the remote tier: log start %d, local log "
                "at %d, leader epochs %s",
                *partition.tp,
                plog.log_start_offset,
                plog.log_end_offset,
                [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()],
            )
            # The leader's epoch starts where the log now ends, not at 0.
            partition.restart_epoch_at_log_end()
            await loop.run_in_executor(None, self._assign_epoch_starts, [partition])
        elif start is None:
            log.info("%s-%d: no remote segment: the log starts empty", *partition.tp)
        partition.awaiting_remote_start = False

    def _open_logs(
        self, states: list[PartitionState]
    ) -> tuple[dict[TopicPartition, PartitionLog], list[TopicPartition]]:
        """Open or create the logs of partitions (blocking, on an executor thread)."""
        by_topic: dict[str, list[PartitionState]] = {}
        for state in states:
            by_topic.setdefault(state.topic, []).append(state)
        opened: dict[TopicPartition, PartitionLog] = {}
        failed: list[TopicPartition] = []
        for topic, parts in by_topic.items():
            try:
                logs = self.log_manager.get_or_create_logs(topic, [s.partition for s in parts])
                for state, plog in zip(parts, logs, strict=True):
                    if state.topic_id != ZERO_UUID:
                        write_partition_metadata(plog.dir, state.topic_id)
                    opened[state.tp] = plog
            except (CoreError, ValueError, OSError) as e:
                log.error("cannot open the logs of topic %s: %s", topic, e)
                failed += [s.tp for s in parts if s.tp not in opened]
        return opened, failed

    async def _make_leaders(self, pairs: list[tuple[Partition, PartitionState]]) -> list[Partition]:
        if not pairs:
            return []
        # Kafka's order: no fetcher touches the logs any more, then the role changes.
        await self._remove_fetchers([p.tp for p, _ in pairs])
        new_epochs = []
        for partition, state in pairs:
            if partition.make_leader(state):
                new_epochs.append(partition)
            self.partitions[partition.tp] = partition
        if new_epochs:
            # The epoch cache takes the new epochs' start offsets at once (Kafka's
            # makeLeader); appends in between assign the same start themselves.
            await asyncio.get_running_loop().run_in_executor(
                None, self._assign_epoch_starts, new_epochs
            )
        return [p for p, _ in pairs]

    @staticmethod
    def _assign_epoch_starts(partitions: list[Partition]) -> None:
        for partition in partitions:
            try:
                partition.assign_epoch_start_offset()
            except CoreError as e:
                log.error("%s-%d: cannot record the epoch start: %s", *partition.tp, e)

    async def _make_followers(
        self, pairs: list[tuple[Partition, PartitionState]]
    ) -> list[Partition]:
        if not pairs:
            return []
        restart = [p for p, s in pairs if self._needs_fetcher_restart(p, s)]
        # No fetcher may act on a partition while its role and leader change.
        await self._remove_fetchers([p.tp for p in restart])
        for partition, state in pairs:
            partition.make_follower(state)
            self.partitions[partition.tp] = partition
        for partition in restart:
            # Produces waiting for acks=all and fetches of a deposed leader end now.
            self.produce_purgatory.check_and_complete(partition.tp)
            self.fetch_purgatory.check_and_complete(partition.tp)
        await self._add_fetchers(restart)
        return [p for p, _ in pairs]

    def _needs_fetcher_restart(self, partition: Partition, state: PartitionState) -> bool:
        if partition.tp not in self.partitions or partition.is_leader:
            return True
        if partition.leader_id != state.leader or partition.leader_epoch != state.leader_epoch:
            return True
        fetchers = self.fetchers
        return fetchers is not None and fetchers.fetch_state(partition.tp) is None

    async def _add_fetchers(self, partitions: Iterable[Partition]) -> None:
        initial: dict[TopicPartition, InitialFetchState] = {}
        for partition in partitions:
            if partition.is_leader or partition.leader_id == NO_LEADER:
                continue  # no leader to fetch from: the next LeaderAndIsr names one
            plog = partition.log
            latest = plog.latest_epoch
            initial[partition.tp] = InitialFetchState(
                topic_id=partition.topic_id,
                leader_id=partition.leader_id,
                leader_epoch=partition.leader_epoch,
                # With epochs the log end (truncation is found from there), else the high
                # watermark, where a log without epochs truncates (Kafka's initial offset).
                fetch_offset=plog.log_end_offset if latest is not None else plog.high_watermark,
                last_fetched_epoch=latest,
            )
        if not initial:
            return
        if self.fetchers is None:
            log.warning(
                "broker %d follows %d partitions but has no inter-broker client to fetch them",
                self.broker_id,
                len(initial),
            )
            return
        await self.fetchers.add_partitions(initial)

    async def _remove_fetchers(self, tps: list[TopicPartition]) -> None:
        if self.fetchers is not None and tps:
            await self.fetchers.remove_partitions(tps)

    async def stop_replicas(
        self,
        controller_id: int,
        controller_epoch: int,
        partitions: Sequence[StopReplicaPartition],
    ) -> dict[TopicPartition, int]:
        """Apply a StopReplica (Kafka's stopReplicas): stop fetching and serving the
        partitions, and delete their logs where asked (also logs of partitions not hosted).

        Per partition: FENCED_LEADER_EPOCH if its leader epoch is older than the hosted one
        (-1 and -2, a deletion, skip the check); KAFKA_STORAGE_ERROR if a log could not be
        deleted; else NONE.

        Returns:
            The error code of every partition; all STALE_CONTROLLER_EPOCH for an old
            controller epoch.
        """
        async with self._state_change_lock:
            if controller_epoch < self.controller_epoch:
                log.warning(
                    "StopReplica from controller %d with epoch %d refused: the latest "
                    "controller epoch is %d",
                    controller_id,
                    controller_epoch,
                    self.controller_epoch,
                )
                return dict.fromkeys((p.tp for p in partitions), STALE_CONTROLLER_EPOCH)
            self.controller_epoch = controller_epoch
            errors: dict[TopicPartition, int] = {}
            stopping: list[StopReplicaPartition] = []
            for entry in partitions:
                current = self.partitions.get(entry.tp)
                errors[entry.tp] = NONE
                if (
                    current is not None
                    and entry.leader_epoch not in (EPOCH_DURING_DELETE, NO_EPOCH)
                    and entry.leader_epoch < current.leader_epoch
                ):
                    errors[entry.tp] = FENCED_LEADER_EPOCH
                    continue
                stopping.append(entry)
            await self._remove_fetchers([e.tp for e in stopping])
            for entry in stopping:
                partition = self.partitions.pop(entry.tp, None)
                if partition is not None:
                    partition.make_stopped()
                    self.produce_purgatory.check_and_complete(entry.tp)
                    self.fetch_purgatory.check_and_complete(entry.tp)
            doomed = [e.tp for e in stopping if e.delete]
            loop = asyncio.get_running_loop()
            for first in range(0, len(doomed), PARTITIONS_PER_STEP):
                step = doomed[first : first + PARTITIONS_PER_STEP]
                failed = await loop.run_in_executor(None, self._delete_logs, step)
                errors.update(dict.fromkeys(failed, KAFKA_STORAGE_ERROR))
            kept = [e.tp for e in stopping if not e.delete]
            for listener in self._listeners:
                if doomed:
                    listener.on_partitions_stopped(doomed, True)
                if kept:
                    listener.on_partitions_stopped(kept, False)
            return errors

    def _delete_logs(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        failed = []
        for topic, index in tps:
            try:
                self.log_manager.delete_log(topic, index)
            except (CoreError, OSError) as e:
                log.error("cannot delete the log of %s-%d: %s", topic, index, e)
                failed.append((topic, index))
        return failed

    # -- single-replica topics, blocking (tests, tools without a controller) ---------------
    def open_topic(self, info: TopicInfo) -> list[Partition]:
        """Lead every partition of a topic as its only replica, blocking (before an event
        loop serves: tools and tests). A broker goes through its controller instead."""
        states = [
            PartitionState(
                topic=info.name,
                topic_id=info.topic_id,
                partition=index,
                controller_epoch=max(self.controller_epoch, 0),
                leader_and_isr=LeaderAndIsr(
                    leader=self.broker_id,
                    leader_epoch=(
                        info.leader_epochs[index] if index < len(info.leader_epochs) else 0
                    ),
                    isr=(self.broker_id,),
                ),
                replicas=(self.broker_id,),
            )
            for index in range(info.partitions)
        ]
        missing = [s for s in states if s.tp not in self.partitions]
        logs, failed = self._open_logs(missing)
        if failed:
            raise CoreError(f"cannot open the logs of {failed}")
        for state in missing:
            plog = logs[state.tp]
            plog.inline_flush = False
            partition = Partition(info.name, info.topic_id, state.partition, plog, self)
            partition.make_leader(state)
            partition.assign_epoch_start_offset()
            self.partitions[state.tp] = partition
        return [self.partitions[s.tp] for s in states]

    def remove_topic(self, name: str) -> None:
        """Stop serving a topic's partitions and delete their logs, blocking."""
        for tp in [tp for tp in self.partitions if tp[0] == name]:
            self.partitions.pop(tp).make_stopped()
            self.fetch_purgatory.check_and_complete(tp)
            self.log_manager.delete_log(*tp)

    # -- follower side (the fetchers' FollowerTarget) ----------------------------------------
    def follower(self, tp: TopicPartition, leader_epoch: int) -> Partition | None:
        partition = self.partitions.get(tp)
        if partition is None or partition.is_leader or partition.leader_epoch != leader_epoch:
            return None
        return partition

    def leader_endpoint(self, leader_id: int) -> NodeEndpoint | None:
        if self._listener_name is None:
            return None
        endpoint = self.metadata_cache.endpoint(leader_id, self._listener_name)
        return None if endpoint is None else NodeEndpoint(leader_id, endpoint.host, endpoint.port)

    async def truncate_to(self, partition: Partition, offset: int) -> None:
        """Truncate a follower's log (and write its checkpoints), on a thread."""
        await asyncio.get_running_loop().run_in_executor(
            None, self.log_manager.truncate_to, partition.topic, partition.index, offset
        )

    async def truncate_fully_and_start_at(self, partition: Partition, offset: int) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None,
            self.log_manager.truncate_fully_and_start_at,
            partition.topic,
            partition.index,
            offset,
        )

    async def build_remote_log_aux_state(
        self, partition: Partition, epoch: int, offset: int, leader_log_start: int
    ) -> int:
        """A follower of a tiered partition whose leader keeps ``offset`` + 1 and below
        only in the remote tier: restart the log after the remote segment holding
        ``offset`` (in leader epoch ``epoch``), with that segment's leader epochs and
        producer state, and the leader's log start (Kafka's TierStateMachine). Returns the
        offset to fetch from.

        Raises:
            KafkaStorageError: this broker has no remote tier, or the partition is not
                tiered here.
            CoreError: as ``RemoteTier.remote_log_aux_state`` and
                ``PartitionLog.restore_from_remote``.
        """
        remote = self.remote
        plog = partition.log
        if remote is None or not plog.config.remote_storage_enable:
            raise KafkaStorageError(
                f"{partition.topic}-{partition.index}: the leader keeps offsets up to {offset} "
                "only in the remote tier, and this broker has no remote tier for it"
            )
        state = await remote.remote_log_aux_state(
            partition.topic_id, partition.topic, partition.index, epoch, offset
        )
        epochs = [EpochEntry(e, start) for e, start in state.leader_epochs]
        await asyncio.get_running_loop().run_in_executor(
            None,
            self.log_manager.restore_from_remote,
            partition.topic,
            partition.index,
            state.next_offset,
            min(max(leader_log_start, 0), state.next_offset),
            epochs,
            state.producer_snapshot,
        )
        log.info(
            "%s-%d: rebuilt from the remote tier: log start %d, local log restarts at %d, "
            "leader epochs %s",
            partition.topic,
            partition.index,
            plog.log_start_offset,
            state.next_offset,
            [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()],
        )
        return state.next_offset

    async def append_as_follower(self, partition: Partition, records: bytes) -> LogAppendInfo:
        """Append fetched batches (a page-cache write on the loop; an fsync due by the
        flush policy on a thread).

        Raises:
            CoreError subclasses of ``PartitionLog.append_as_follower``.
        """
        plog = partition.log
        try:
            info = plog.append_as_follower(records)
        except UnexpectedAppendOffsetError as e:
            # Kafka's one recovery: an empty log and a first batch straddling its end (the
            # leader's log start moved inside a batch); anything else is a wrong position.
            end = plog.log_end_offset
            if not (end == plog.log_start_offset and e.first_offset < end <= e.last_offset):
                raise
            log.info(
                "%s-%d: restarting the empty log at %d, the first offset of the fetched batch",
                *partition.tp,
                e.first_offset,
            )
            await self.truncate_fully_and_start_at(partition, e.first_offset)
            info = plog.append_as_follower(records)
        await self.wait_durable(partition)
        return info

    async def update_log_start_offset(self, partition: Partition, leader_log_start: int) -> None:
        plog = partition.log
        target = min(leader_log_start, plog.high_watermark)
        if target > plog.log_start_offset:
            await asyncio.get_running_loop().run_in_executor(
                None, plog.maybe_increment_log_start_offset, target, "the leader's log start"
            )

    # -- produce ---------------------------------------------------------------------------
    def append(
        self, partition: Partition, records: bytearray | memoryview, required_acks: int = 1
    ) -> LogAppendInfo:
        """Append client batches to a leader partition and wake fetches waiting on it.

        Runs on the event loop without waiting: a write to the page cache. When the flush
        policy asks for an fsync, ``wait_durable`` performs it on a thread.

        Raises:
            CoreError subclasses carrying the Kafka error code for the partition
            (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS for acks=-1, the log's).
        """
        hw_before = partition.log.high_watermark
        info = partition.append_as_leader(records, required_acks)
        # Followers' fetches wait for appends; consumers' for the high watermark, whose move
        # has woken the fetches already.
        if (
            not info.duplicate
            and partition.log.high_watermark == hw_before
            and self.fetch_purgatory.watched()
        ):
            self.fetch_purgatory.check_and_complete(partition.tp)
        return info

    def append_marker(self, topic: str, index: int, batch: bytearray) -> int:
        """Append a transaction marker to a partition led here, waking its fetches (the
        LSO may move); returns the log end offset after it (what its replication waits
        for). ``MarkerPartitions`` of core.server.transaction_marker_channel.

        Raises:
            LookupError: the partition is not hosted here.
            CoreError: not its leader (NOT_LEADER_OR_FOLLOWER), fewer in-sync replicas
                than ``min.insync.replicas`` (markers are written with acks=all, as
                Kafka's are), or the log refused the marker.
        """
        partition = self.partition(topic, index)
        if partition is None:
            raise LookupError(f"{topic}-{index} is not hosted here")
        partition.append_as_coordinator(batch)
        if self.fetch_purgatory.watched():
            self.fetch_purgatory.check_and_complete(partition.tp)
        return partition.log.log_end_offset

    async def wait_marker_replicated(self, topic: str, index: int, end: int) -> int:
        """Wait until the in-sync replicas of a partition have its log up to ``end``;
        returns the error code (0, or as ``wait_replicated``)."""
        partition = self.partition(topic, index)
        if partition is None:
            return NOT_LEADER_OR_FOLLOWER
        # After request.timeout.ms the coordinator sends the marker again.
        return await self.wait_replicated(partition, end, self.settings.request_timeout_ms)

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

        Returns the error code: 0; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is below
        ``min.insync.replicas`` when it does; NOT_LEADER_OR_FOLLOWER if the leadership moved
        first; REQUEST_TIMED_OUT after ``timeout_ms``.
        """
        # Kafka's tryCompleteElseWatch tries first: with the leader alone in the ISR (or
        # followers already there) the high watermark has moved at the append, and no
        # delayed operation is made.
        hosted = self.partitions.get(partition.tp)
        if hosted is None:
            return NOT_LEADER_OR_FOLLOWER  # as DelayedProduce.try_complete says
        done, error = hosted.check_enough_replicas_reached(required_offset)
        if done:
            return error
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        op = DelayedProduce(self, partition.tp, required_offset, timeout_ms, future)
        self.produce_purgatory.try_complete_else_watch(op, [partition.tp])
        return await future

    # -- fetch -----------------------------------------------------------------------------
    def read(self, params: FetchParams) -> tuple[list[FetchPartitionResult], int]:
        """One pass over the requested partitions; returns results and bytes gathered.

        Kafka's rules: the first partition with data may exceed the limits (at least one
        batch, so a batch larger than the limits is never stuck); the response stays within
        ``max_bytes`` otherwise; each partition within its ``partition_max_bytes``.
        Consumers read up to the high watermark (the last stable offset for READ_COMMITTED),
        followers up to the log end; a fetch naming its last fetched epoch (v12+) gets a
        ``diverging_epoch`` instead of records when that epoch is off the leader's lineage.
        """
        results: list[FetchPartitionResult] = []
        remaining = params.max_bytes
        gathered = 0
        min_one_message = True
        from_follower = params.is_from_follower
        now = self.clock_ms()
        for req in params.partitions:
            result = FetchPartitionResult(fetch_time_ms=now)
            results.append(result)
            tp = (req.topic, req.partition)
            partition = self.partitions.get(tp)
            if partition is None:
                result.error = self.missing_partition_error(tp)
                continue
            plog = partition.log
            try:
                partition.check_leader()
                partition.check_leader_epoch(req.current_leader_epoch)
            except CoreError as e:
                result.error = e.error_code
                continue
            # As of the read: appends after it must not keep a follower out of the ISR.
            hw = plog.high_watermark
            lso = partition.last_stable_offset
            result.high_watermark = hw
            result.last_stable_offset = lso
            result.log_start_offset = plog.log_start_offset
            result.leader_log_end_offset = plog.log_end_offset
            try:
                diverging = plog.diverging_epoch(req.fetch_offset, req.last_fetched_epoch)
                if diverging is not None:
                    result.diverging_epoch = diverging
                    continue
                if from_follower:
                    max_offset = None
                else:
                    max_offset = lso if params.isolation_level == READ_COMMITTED else hw
                if from_follower and self._leader_throttled(partition, params.replica_id):
                    continue  # Kafka answers the throttled partition with no records
                limit = min(req.max_bytes, remaining)
                info = plog.read(
                    req.fetch_offset,
                    max(limit, 0),
                    max_offset=max_offset,
                    min_one_message=min_one_message,
                )
            except OffsetOutOfRangeError:
                if from_follower and self._moved_to_remote(plog, req.fetch_offset):
                    result.error = OFFSET_MOVED_TO_TIERED_STORAGE
                elif not from_follower and self._in_remote_range(plog, req.fetch_offset):
                    result.remote = True  # served by the remote tier, see fetch()
                else:
                    result.error = OffsetOutOfRangeError.error_code
                continue
            except CoreError as e:
                result.error = e.error_code
                continue
            if info.records is not None and info.records.size > 0:
                # The slice itself: the network layer sends it from the file (sendfile).
                data = info.records
                result.records = data
                remaining -= data.size
                gathered += data.size
                min_one_message = False
                if params.isolation_level == READ_COMMITTED:
                    upper = req.fetch_offset + data.size  # a bound: offsets <= bytes
                    txns = plog.collect_aborted_txns(req.fetch_offset, max(upper, lso))
                    result.aborted = [(t.producer_id, t.first_offset) for t in txns]
            elif params.isolation_level == READ_COMMITTED:
                result.aborted = []
        return results, gathered

    def _leader_throttled(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: a follower outside the ISR fetching a partition
        leader-throttled on this broker while the leader quota is exceeded."""
        quota = self.leader_quota
        if not quota.enabled:
            return False
        entries = partition.log.config.leader_replication_throttled_replicas
        throttled = is_throttled(entries, partition.tp[1], self.broker_id)
        in_sync = replica_id in partition.isr
        return quota.should_throttle(throttled, in_sync, self.clock_ms())

    def _record_leader_throttled(
        self, params: FetchParams, results: list[FetchPartitionResult]
    ) -> None:
        """Kafka records the bytes of a follower's response for the leader-throttled
        partitions (ISR members' bytes too: they count against the rate, unthrottled)."""
        quota = self.leader_quota
        if not quota.enabled:
            return
        size = 0
        for req, result in zip(params.partitions, results, strict=True):
            if not result.records:
                continue
            partition = self.partitions.get((req.topic, req.partition))
            if partition is None:
                continue
            entries = partition.log.config.leader_replication_throttled_replicas
            if is_throttled(entries, req.partition, self.broker_id):
                size += len(result.records)
        quota.record(size, self.clock_ms())

    def _in_remote_range(self, plog: PartitionLog, offset: int) -> bool:
        return (
            self.remote is not None
            and plog.config.remote_storage_enable
            and plog.log_start_offset <= offset < plog.local_log_start_offset
        )

    @staticmethod
    def _moved_to_remote(plog: PartitionLog, offset: int) -> bool:
        """A follower asking for offsets the leader keeps only in remote storage (Kafka
        answers OFFSET_MOVED_TO_TIERED_STORAGE)."""
        return (
            plog.config.remote_storage_enable
            and plog.log_start_offset <= offset < plog.local_log_start_offset
        )

    def update_follower_fetch_states(
        self, params: FetchParams, results: list[FetchPartitionResult]
    ) -> None:
        """A follower's fetch was read: record its positions (ISR, high watermark), and
        answer the high watermark as it is now. A partition of which the fetching broker is
        no replica gets no records (Kafka's rule)."""
        for req, result in zip(params.partitions, results, strict=True):
            if result.error or result.diverging_epoch is not None:
                continue
            partition = self.partitions.get((req.topic, req.partition))
            if partition is None:
                continue
            if not partition.update_follower_fetch_state(
                params.replica_id,
                req.fetch_offset,
                req.log_start_offset,
                result.fetch_time_ms,
                result.leader_log_end_offset,
            ):
                log.warning(
                    "broker %d fetched %s-%d but is not one of its replicas %s",
                    params.replica_id,
                    req.topic,
                    req.partition,
                    list(partition.replicas),
                )
                result.records = None
                continue
            result.high_watermark = partition.high_watermark
            result.last_stable_offset = partition.last_stable_offset

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
        # Watched under the partitions read remotely only, as Kafka does: only their reads'
        # completions check this purgatory, so under another key a completed operation
        # stayed watched until the next purge (1,000 completions later), holding its data.
        keys = {(req.topic, req.partition) for req, _, _ in reads}
        self.remote_fetch_purgatory.try_complete_else_watch(op, keys)
        try:
            await done
        except asyncio.CancelledError:
            op.force_complete()  # the connection went away: abandon the reads
            raise
        return results

    async def fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        """Read now, or wait (long poll) until ``min_bytes`` are there or ``max_wait_ms``."""
        results = await self._fetch(params)
        if params.is_from_follower:
            self._record_leader_throttled(params, results)
        return results

    async def _fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        results, gathered = self.read(params)
        if params.is_from_follower:
            self.update_follower_fetch_states(params, results)
        if any(r.remote for r in results):
            # Remote data is "available now": the fetch waits for the remote reads only,
            # never for fetch.min.bytes (Kafka's order).
            return await self._fetch_remote(params, results, gathered)
        if (
            params.max_wait_ms <= 0
            or gathered >= params.min_bytes
            or not params.partitions
            or any(r.error or r.diverging_epoch is not None for r in results)
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
        self,
        partition: Partition,
        timestamp: int,
        isolation_level: int,
        current_leader_epoch: int,
        *,
        from_follower: bool = False,
    ) -> TimestampAndOffset | None:
        """ListOffsets on the leader. Consumers never see offsets above what they may read;
        a follower (``from_follower``) sees the log end (Kafka: no isolation for replicas).

        Raises:
            NotLeaderError, FencedLeaderEpochError, UnknownLeaderEpochError.
        """
        partition.check_leader()
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
        if found is None or from_follower:
            return found
        # Consumers never see offsets above what they may read (Kafka clamps LATEST too).
        bound = (
            partition.last_stable_offset
            if isolation_level == READ_COMMITTED
            else partition.high_watermark
        )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, bound, partition.leader_epoch)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return found
        # A lookup by timestamp (or the max timestamp) that lands on an offset the consumer
        # may not read yet finds nothing: Kafka answers (-1, -1), not the bound.
        return found if found.offset < bound else None

    def delete_records(self, partition: Partition, offset: int) -> int:
        """DeleteRecords on the leader: move the log start offset (-1 means the high
        watermark). Followers follow it from the fetch responses.

        Raises:
            NotLeaderError, OffsetOutOfRangeError.
        """
        partition.check_leader()
        target = partition.high_watermark if offset == -1 else offset
        if target < 0 or target > partition.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {partition.topic}-{partition.index} before offset "
                f"{offset}: the high watermark is {partition.high_watermark}"
            )
        partition.log.maybe_increment_log_start_offset(target, "DeleteRecords")
        return partition.log.log_start_offset


class DelayedFetch(DelayedOperation):
    """A fetch waiting for ``min_bytes`` (read again on every append to, and every high
    watermark move of, its partitions). A follower's positions are recorded again with the
    final read, as Kafka does."""

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
        if gathered >= self.params.min_bytes or any(
            r.error or r.diverging_epoch is not None for r in results
        ):
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
        if self.params.is_from_follower:
            self.manager.update_follower_fetch_states(self.params, results)
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
        # The answers are in the results now; a completed operation may stay watched under
        # a key until that key is checked again or purged, so it keeps no data of its own.
        self.reads = []
        if not self.done.done():
            self.done.set_result(None)


class DelayedProduce(DelayedOperation):
    """An acks=-1 produce waiting for the high watermark to pass its last offset (Kafka's
    DelayedProduce): completes when it does, when the partition's leadership moves, or
    after the produce's timeout (REQUEST_TIMED_OUT)."""

    def __init__(
        self,
        manager: ReplicaManager,
        tp: TopicPartition,
        required_offset: int,
        timeout_ms: int,
        future: asyncio.Future[int],
    ) -> None:
        super().__init__(max(timeout_ms, 0))
        self.manager = manager
        self.tp = tp
        self.required_offset = required_offset
        self.future = future
        self._error = REQUEST_TIMED_OUT  # unless the high watermark arrives

    def try_complete(self) -> bool:
        partition = self.manager.partitions.get(self.tp)
        if partition is None:
            done, error = True, NOT_LEADER_OR_FOLLOWER
        else:
            done, error = partition.check_enough_replicas_reached(self.required_offset)
        if done:
            self._error = error
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self._error)
