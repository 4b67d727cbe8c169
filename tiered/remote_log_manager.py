"""RemoteLogManager: tiering of the partitions this broker hosts, and reads from the remote tier.

Kafka's RemoteLogManager. Leadership drives it (``on_leadership_change``, Kafka's
onLeadershipChange): each partition this broker leads gets a ``CopyTask`` and an
``ExpirationTask``, each partition it follows a ``FollowerTask`` (``tiered.rlm_tasks``), and
the RLMM loads their metadata. ``on_stop_partitions`` (Kafka's stopPartitions) cancels a
partition's tasks when this broker stops hosting it and releases its metadata; the deletion
of a deleted topic's remote data is not its job (the controller marks the partitions and the
partition remover of the metadata partition's leader deletes them, see ``rlmm.remover``).

Each task runs every ``remote.log.manager.task.interval.ms`` (after a failure, sooner, with
backoff and jitter), at most once at a time, on core's ``Scheduler`` (Kafka's
KafkaScheduler): copies on ``remote.log.manager.copier.thread.pool.size`` threads,
expirations and follower tasks on ``remote.log.manager.expiration.thread.pool.size``
threads, never on the event loop.

Reads (``start_read``, ``offset_for_timestamp``) implement the read half of core's
``RemoteTier`` seam; ``tierlog.remote_tier.RemoteStorageSystem`` plugs them into the broker.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.clock import now_ms
from core.errors import CoreError, KafkaStorageError
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.partition_log import MAX_TIMESTAMP, TimestampAndOffset
from core.scheduler import Scheduler
from core.server.remote_seam import (
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    RemoteFetchResult,
    RemoteLogAuxState,
    RemoteLogStart,
)
from tiered.api import (
    IndexType,
    RemoteLogMetadataManager,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from tiered.lineage import highest_remote_offset, remote_log_start_offset, remote_log_tip
from tiered.metrics import TieringMetrics
from tiered.quota import TokenBucket
from tiered.remote_index_cache import RemoteIndexCache
from tiered.remote_reader import RemoteLogReader, RemoteReadRejectedError
from tiered.rlm_config import LONG_MAX, RemoteLogManagerConfig
from tiered.rlm_tasks import (
    CopyTask,
    ExpirationTask,
    FollowerTask,
    RLMTask,
    TaskContext,
)

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

LEADER_TASKS: tuple[type[RLMTask], ...] = (CopyTask, ExpirationTask)
FOLLOWER_TASKS: tuple[type[RLMTask], ...] = (FollowerTask,)


class RemoteLogManager:
    """Tiering for the partitions this broker hosts, and reads from the remote tier.

    Args:
        rsm, rlmm: the configured plugins (this class does not close them unless
            ``shutdown(close_plugins=True)``).
        broker_id: written into the metadata events.
        config: a ``RemoteLogManagerConfig`` or a mapping with Kafka's keys.
        log_dir: where the remote index cache lives (``<log_dir>/remote-log-index-cache``).
        clock: wall-clock milliseconds, for retention and event timestamps.
    """

    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        broker_id: int,
        config: RemoteLogManagerConfig | Mapping[str, Any] | None,
        log_dir: Path,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.broker_id = broker_id
        self.config = (
            config
            if isinstance(config, RemoteLogManagerConfig)
            else RemoteLogManagerConfig.from_props(config)
        )
        self.clock = clock
        self.metrics = TieringMetrics()
        cfg = self.config
        copy_quota = (
            TokenBucket(cfg.remote_log_manager_copy_max_bytes_per_second)
            if cfg.remote_log_manager_copy_max_bytes_per_second < LONG_MAX
            else None
        )
        fetch_quota = (
            TokenBucket(cfg.remote_log_manager_fetch_max_bytes_per_second)
            if cfg.remote_log_manager_fetch_max_bytes_per_second < LONG_MAX
            else None
        )
        self.index_cache = RemoteIndexCache(
            Path(log_dir), rsm, cfg.remote_log_index_file_cache_total_size_bytes
        )
        self.reader = RemoteLogReader(
            rsm,
            rlmm,
            self.index_cache,
            threads=cfg.remote_log_reader_threads,
            max_pending_tasks=cfg.remote_log_reader_max_pending_tasks,
            fetch_quota=fetch_quota,
            metrics=self.metrics,
        )
        self._context = TaskContext(
            rsm=rsm,
            rlmm=rlmm,
            broker_id=broker_id,
            config=cfg,
            clock=clock,
            metrics=self.metrics,
            index_cache=self.index_cache,
            copy_quota=copy_quota,
            random=random.Random(),
        )
        self._copier = Scheduler(cfg.remote_log_manager_copier_thread_pool_size, "rlm-copier")
        self._expirer = Scheduler(
            cfg.remote_log_manager_expiration_thread_pool_size, "rlm-expiration"
        )
        # Guards the task table and every (re)scheduling, so that a cancelled or closed
        # task is never scheduled again.
        self._lock = threading.Lock()
        self._tasks: dict[TopicIdPartition, tuple[RLMTask, ...]] = {}
        # The topic ids of the partitions this broker hosts (Kafka's topicIdByPartitionMap):
        # a StopReplica names partitions by topic name only, and by the time a topic
        # deletion's StopReplica arrives the controller's UpdateMetadata has already
        # removed the topic from the broker's metadata.
        self._hosted: dict[tuple[str, int], TopicIdPartition] = {}
        self._started = False
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Start running tasks; those of partitions already hosted run now."""
        with self._lock:
            if self._started or self._closed:
                return
            self._started = True
            for tasks in self._tasks.values():
                for task in tasks:
                    self._schedule(task, 0)

    def shutdown(self, *, close_plugins: bool = False) -> None:
        """Cancel every task, wait for the running ones, stop the reader pool."""
        with self._lock:
            self._closed = True
            for tasks in self._tasks.values():
                self._cancel(tasks)
        self._copier.shutdown()
        self._expirer.shutdown()
        self.reader.shutdown()
        self.index_cache.close()
        if close_plugins:
            self.rsm.close()
            self.rlmm.close()

    # -- leadership ----------------------------------------------------------------------
    def on_leadership_change(
        self,
        leaders: Mapping[TopicIdPartition, PartitionLog],
        followers: Mapping[TopicIdPartition, PartitionLog],
    ) -> None:
        """This broker now leads ``leaders`` and follows ``followers`` (tiered partitions,
        with their logs). The RLMM loads their metadata; leaders get a copy and an
        expiration task, followers a follower task, replacing the tasks they had. A
        partition that keeps its role and its log keeps its tasks. Blocking (the RLMM may
        read its metadata topic)."""
        if not leaders and not followers:
            return
        self.rlmm.on_partition_leadership_changes(set(leaders), set(followers))
        with self._lock:
            for tp in (*leaders, *followers):
                self._hosted[(tp.topic, tp.partition)] = tp
            for tp, plog in followers.items():
                self._assign(tp, plog, FOLLOWER_TASKS)
            for tp, plog in leaders.items():
                self._assign(tp, plog, LEADER_TASKS)
        for tp in followers:
            # A former leader's gauges would otherwise stay, frozen (Kafka removes them too).
            self.metrics.remove(tp)
            log.info("remote log manager: following %s", tp)
        for tp in leaders:
            log.info("remote log manager: leading %s", tp)

    def on_leadership(self, partitions: Iterable[tuple[TopicIdPartition, PartitionLog]]) -> None:
        """This broker leads these partitions (a single broker leads every partition)."""
        self.on_leadership_change(dict(partitions), {})

    def hosted_partition(self, topic: str, partition: int) -> TopicIdPartition | None:
        """The topic id partition of a partition this broker hosts or has stopped hosting
        without a deletion yet; None if unknown."""
        with self._lock:
            return self._hosted.get((topic, partition))

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition], *, delete: bool) -> None:
        """This broker no longer hosts these partitions (Kafka's stopPartitions).

        Their tasks are cancelled (a run in progress finishes its current segment), their
        metrics dropped and their metadata released from the RLMM. With ``delete`` (the
        replica is deleted: a topic deletion or a move) the partition is also forgotten
        here. Unlike Kafka 3.9, which deletes a deleted topic's remote segments right here
        on the leader, nothing is deleted or marked: the controller marks the partitions
        of a deleted topic DELETE_PARTITION_MARKED, and the partition remover on the
        leader of their metadata partition deletes the remote data (``rlmm.remover``), so
        the deletion survives any broker restart. Blocking.
        """
        tps = set(partitions)
        with self._lock:
            stopped = {tp: self._tasks.pop(tp) for tp in tps if tp in self._tasks}
            for tasks in stopped.values():
                self._cancel(tasks)
            if delete:
                for tp in tps:
                    self._hosted.pop((tp.topic, tp.partition), None)
        for tp in stopped:
            self.metrics.remove(tp)
            log.info("remote log manager: stopped %s%s", tp, " (deleted)" if delete else "")
        if stopped:
            self.rlmm.on_stop_partitions(set(stopped))

    def tasks(self, tp: TopicIdPartition) -> tuple[RLMTask, ...]:
        """The tasks of a hosted partition (none when it is not hosted)."""
        with self._lock:
            return self._tasks.get(tp, ())

    # -- scheduling: _assign, _cancel and _schedule are called holding self._lock ---------
    def _assign(
        self, tp: TopicIdPartition, plog: PartitionLog, kinds: tuple[type[RLMTask], ...]
    ) -> None:
        current = self._tasks.get(tp, ())
        if tuple(type(t) for t in current) == kinds and all(t.plog is plog for t in current):
            return
        self._cancel(current)
        tasks = tuple(kind(self._context, tp, plog) for kind in kinds)
        self._tasks[tp] = tasks
        if self._started and not self._closed:
            for task in tasks:
                self._schedule(task, 0)

    @staticmethod
    def _cancel(tasks: Iterable[RLMTask]) -> None:
        # A cancelled task's next run, already scheduled, returns at once and is its last.
        for task in tasks:
            task.cancel()

    def _schedule(self, task: RLMTask, delay_ms: float) -> None:
        scheduler = self._copier if isinstance(task, CopyTask) else self._expirer
        scheduler.schedule_once(f"{task.kind} {task.tp}", lambda: self._run(task), delay_ms)

    def _run(self, task: RLMTask) -> None:
        delay_ms = task.run()
        with self._lock:
            # Runs of a task never overlap: the next one is scheduled when this one ends.
            if not task.cancelled and not self._closed:
                self._schedule(task, delay_ms)

    # -- reads (blocking; for the reader pool and tests) ---------------------------------
    def read_remote(
        self, tp: TopicIdPartition, plog: PartitionLog, fetch_offset: int, max_bytes: int
    ) -> bytes:
        """See ``RemoteLogReader.read``; blocking."""
        return self.reader.read(tp, plog, fetch_offset, max_bytes)

    def remote_log_aux_state(
        self, tp: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogAuxState:
        """What a follower restores instead of the records below its leader's local log
        start (Kafka's TierStateMachine.buildRemoteLogAuxState): the COPY_SEGMENT_FINISHED
        segment holding ``offset`` in ``epoch`` (RLMM), its leader-epoch checkpoint and its
        producer snapshot (RSM). Blocking.

        Raises:
            KafkaStorageError: the partition's metadata is not loaded here yet, no such
                segment (the leader's metadata has not arrived yet), or a remote failure.
        """
        if not self.rlmm.is_ready(tp):
            raise KafkaStorageError(f"{tp}: the remote log metadata is still loading")
        try:
            md = self.rlmm.remote_log_segment_metadata(tp, epoch, offset)
            if md is None:
                raise KafkaStorageError(
                    f"{tp}: no remote segment holds offset {offset} in leader epoch {epoch}"
                )
            with self.rsm.fetch_index(md, IndexType.LEADER_EPOCH) as stream:
                checkpoint = stream.read()
            with self.rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) as stream:
                snapshot = stream.read()
        except (RemoteStorageError, OSError) as e:
            raise KafkaStorageError(f"{tp}: cannot read the remote segment state: {e}") from e
        try:
            entries = LeaderEpochCheckpointFile.decode(checkpoint, f"{md.segment_id} epochs")
        except CoreError as e:
            raise KafkaStorageError(f"{tp}: corrupt remote leader-epoch checkpoint: {e}") from e
        return RemoteLogAuxState(
            next_offset=md.end_offset + 1,
            leader_epochs=tuple((e.epoch, e.start_offset) for e in entries),
            producer_snapshot=snapshot,
        )

    def is_ready(self, tp: TopicIdPartition) -> bool:
        """Whether the RLMM has caught up on the partition's metadata. Never blocks."""
        return self.rlmm.is_ready(tp)

    def remote_log_start(self, tp: TopicIdPartition) -> RemoteLogStart | None:
        """Where a leader whose local log is empty starts the partition: the state after
        the newest finished segment of the newest leader epoch (``lineage.remote_log_tip``,
        read as ``remote_log_aux_state`` reads a follower's), with the first remote offset
        as log start; None when no segment is finished (a new topic). Kafka has no such
        step (it has no topic restore); tierlog needs it for a topic restored from the
        bucket into a cluster, whose replicas all start empty. Blocking.

        Raises:
            KafkaStorageError: the RLMM has not caught up on the partition's metadata (an
                answer from a cache still loading would take a restored partition for a
                new one), or a remote failure.
        """
        if not self.rlmm.is_ready(tp):
            raise KafkaStorageError(f"{tp}: the remote log metadata is still loading")
        try:
            tip = remote_log_tip(self.rlmm, tp)
            first = remote_log_start_offset(self.rlmm, tp)
        except RemoteStorageError as e:
            raise KafkaStorageError(f"{tp}: cannot read the remote log metadata: {e}") from e
        if tip is None or first is None:
            return None
        state = self.remote_log_aux_state(tp, max(tip.segment_leader_epochs), tip.end_offset)
        return RemoteLogStart(min(first, state.next_offset), state)

    def find_offset_by_timestamp(
        self, tp: TopicIdPartition, plog: PartitionLog, timestamp: int
    ) -> TimestampAndOffset | None:
        """ListOffsets over the remote tier; blocking. ``timestamp`` >= 0, -3 or -6."""
        if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            return self.earliest_pending_upload(tp, plog)
        if timestamp == MAX_TIMESTAMP:
            return self.reader.find_max_timestamp(tp, plog)
        return self.reader.find_offset_by_timestamp(tp, plog, timestamp)

    def earliest_pending_upload(
        self, tp: TopicIdPartition, plog: PartitionLog
    ) -> TimestampAndOffset | None:
        """ListOffsets -6 (KIP-1023): the first offset not yet in the remote tier."""
        if not plog.config.remote_storage_enable:
            return None
        highest = plog.highest_offset_in_remote_storage
        if highest < 0 and self.rlmm.is_ready(tp):
            highest = highest_remote_offset(self.rlmm, tp, plog)
        offset = highest + 1 if highest >= 0 else plog.log_start_offset
        offset = min(max(offset, plog.log_start_offset), plog.log_end_offset)
        return TimestampAndOffset(-1, offset, plog.leader_epoch_cache.epoch_for_offset(offset))

    # -- the read half of core's RemoteTier seam (async; the event loop only awaits) -----
    @property
    def fetch_max_wait_ms(self) -> int:
        """core's ``RemoteTier.fetch_max_wait_ms``: ``remote.fetch.max.wait.ms``."""
        return self.config.remote_fetch_max_wait_ms

    def start_read(
        self,
        topic_id: object,
        topic: str,
        partition: int,
        log: PartitionLog,
        fetch_offset: int,
        max_bytes: int,
        *,
        read_committed: bool,
    ) -> asyncio.Future[RemoteFetchResult]:
        """core's ``RemoteTier.start_read``: ``RemoteLogReader.fetch`` on the reader pool.

        Cancelling the returned future cancels the read if it has not started yet.

        Raises:
            KafkaStorageError: at once, when ``remote.log.reader.max.pending.tasks`` reads
                are already queued.
        """
        tp = TopicIdPartition(topic_id, topic, partition)  # type: ignore[arg-type]
        try:
            future = self.reader.submit_fetch(
                tp, log, fetch_offset, max_bytes, read_committed=read_committed
            )
        except RemoteReadRejectedError as e:
            raise KafkaStorageError(str(e)) from e
        if future.done() and not future.cancelled():
            # Answered at once (from memory, or a slice of a local file): hand it over
            # directly. wrap_future would schedule it with call_soon_threadsafe, a wake-up
            # of the event loop through its self-pipe for every such fetch.
            answer: asyncio.Future[RemoteFetchResult] = asyncio.get_running_loop().create_future()
            error = future.exception()
            if error is None:
                answer.set_result(future.result())
            else:
                answer.set_exception(error)
            return answer
        return asyncio.wrap_future(future)

    async def _await(self, future: Future[Any]) -> Any:
        timeout = self.config.remote_fetch_max_wait_ms / 1000
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except CoreError:
            raise
        except (RemoteStorageError, OSError) as e:
            if isinstance(e, TimeoutError):
                raise
            raise KafkaStorageError(f"remote tier failed: {e}") from e

    async def offset_for_timestamp(
        self, topic_id: object, topic: str, partition: int, log: PartitionLog, timestamp: int
    ) -> TimestampAndOffset | None:
        """core's ``RemoteTier.offset_for_timestamp`` (timestamps >= 0, -3 and -6)."""
        tp = TopicIdPartition(topic_id, topic, partition)  # type: ignore[arg-type]
        if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            return self.earliest_pending_upload(tp, log)
        if timestamp < 0 and timestamp != MAX_TIMESTAMP:
            return None
        try:
            future = self.reader.submit_offset_for_timestamp(tp, log, timestamp)
        except RemoteReadRejectedError as e:
            raise KafkaStorageError(str(e)) from e
        return await self._await(future)
