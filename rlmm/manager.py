"""TopicBasedRemoteLogMetadataManager: the RLMM on the ``__remote_log_metadata`` topic.

Writes: an event is serialised (Kafka's RemoteLogMetadataSerde), appended to the metadata
partition of its user partition (Kafka's partitioner) through a ``MetadataTopicClient``;
the returned future completes only when this manager's own consumer has read the event back
and applied it to the cache, so a caller sees its write in every later read.

Which writes are synced (``_needs_sync``). Kafka syncs no metadata event (the topic is
replicated and flushed by the log's flush policy); a single tierlog broker has no replica,
so the events a crash of the machine must not lose are made durable before their future
completes: COPY_SEGMENT_FINISHED (it lets local retention delete the local copy, the only
other copy of the data; its sync covers the COPY_SEGMENT_STARTED before it in the same
metadata partition), DELETE_SEGMENT_STARTED (the remote objects are deleted after it; lost,
a restart would serve a FINISHED segment whose objects are gone) and the partition-deletion
events. COPY_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED are not synced: losing the first
leaves the copy's objects unreferenced in the store, never read (as Kafka can when the
metadata topic's unflushed tail is lost); losing the second leaves the segment in
DELETE_SEGMENT_STARTED, whose deletion the next run resumes.

Reads: a consumer thread reads the metadata partitions of the user partitions this broker
hosts and applies each event to the cache (``rlmm.metadata_cache``). ``is_ready(tp)`` turns
true once the cache has caught up to the end offset seen when the partition was assigned.

Which events apply. Kafka's rules first: an update for a segment id never added, or a state
that does not follow the current one (``RemoteLogSegmentState``), is refused. Then
authorship, for a manager that knows its broker (``broker.id``, which the broker passes): a
user partition this broker leads has one writer of its metadata, this broker's remote log
manager, and this manager knows every event it wrote. So an event for such a partition that
it did not write, read after the partition's metadata caught up (at an offset at or past the
end seen when the partition was assigned), is refused: a copy or deletion in this broker's
name that it never started, or one by any other broker id. In a cluster, events by the
other live brokers (``set_other_brokers``) still apply: a former leader may finish a copy or
a deletion it started before the leadership moved. Events read while catching up (written
before a restart, or by a former leader) and events of partitions this broker follows are
held to Kafka's rules only: nothing tells them apart from forged ones, so the remote log
manager and the partition remover re-check what they act on (see their docstrings). Every
refused event is logged (WARNING) with its metadata partition, offset and segment id, and
changes nothing.

Partition deletions (tierlog's rule; Kafka 3.9 has no such reader, see
docs/ARCHITECTURE.md): a broker also follows the metadata partitions it leads
(``follow_metadata_partitions``). Reading them from the start, it notes the last
DELETE_PARTITION_* event of every user partition in them, and loads the metadata of each
partition marked or started and not finished (as a partition it follows), so that the
partition remover on the metadata partition's leader finishes the deletion, after any
restart or failover. ``deletion_listener`` is called when such a partition has caught up.

Fast restart (which Kafka dropped and tierlog keeps): per user partition, a snapshot file
of the cache as of a metadata-partition offset, and the committed-offsets file
``_rlmm_committed_offsets`` (``<partition> <offset>`` lines), written atomically. A restart
loads the snapshots and replays only the events after them; a damaged snapshot is
discarded and the partition replayed from the start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

from core.clock import now_ms
from core.kafka_uuid import uuid_to_base64
from rlmm.metadata_cache import RemoteLogMetadataCache
from rlmm.partition_store import RemotePartitionMetadataStore
from rlmm.partitioner import metadata_partition
from rlmm.serde import RemoteLogSegmentMetadataSnapshot, deserialize, serialize
from rlmm.snapshot import (
    CorruptSnapshotError,
    Snapshot,
    open_snapshot_stream,
    snapshot_path,
    write_committed_offsets,
    write_snapshot,
)
from rlmm.topic_client import (
    DEFAULT_METADATA_PARTITIONS,
    METADATA_TOPIC,
    MetadataTopicBatchAppender,
    MetadataTopicClient,
    MetadataTopicError,
)
from tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
)

log = logging.getLogger(__name__)

NUM_PARTITIONS_KEY = "remote.log.metadata.topic.num.partitions"
# Kafka's key and default: the metadata topic is replicated like the other internal topics.
REPLICATION_FACTOR_KEY = "remote.log.metadata.topic.replication.factor"
DEFAULT_METADATA_REPLICATION_FACTOR = 3
LOG_DIR_KEY = "log.dir"
BROKER_ID_KEY = "broker.id"
BOOTSTRAP_KEY = "remote.log.metadata.common.client.bootstrap.servers"
# Kafka's prefix for the metadata topic's client settings (security.protocol, sasl.*, ...).
CLIENT_PREFIX = "remote.log.metadata.common.client."
SNAPSHOT_INTERVAL_KEY = "remote.log.metadata.snapshot.interval.ms"
RLMM_DIR = "__remote_log_metadata_snapshots"
COMMITTED_OFFSETS_FILE = "_rlmm_committed_offsets"

# How long the consumer waits for news when its partitions are idle. Writes of this
# process wake it at once; only events from other writers wait up to this long.
IDLE_POLL_S = 0.1
READ_BATCH = 2000


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """Kafka's TopicBasedRemoteLogMetadataManager, with snapshots for fast restarts.

    Args:
        client: the metadata-topic client; the composition root passes the broker's
            in-process one. Without it, ``configure`` connects to
            ``remote.log.metadata.common.client.bootstrap.servers`` with a Kafka client.
        clock: milliseconds since the epoch (tests).
    """

    def __init__(
        self,
        client: MetadataTopicClient | None = None,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.client = client
        self.clock = clock
        self.store = RemotePartitionMetadataStore()
        self.num_partitions = DEFAULT_METADATA_PARTITIONS
        self.rlmm_dir: Path | None = None
        self.snapshot_interval_ms = 30_000
        self._lock = threading.Condition()
        # Metadata partition -> next offset to read; and the user partitions assigned.
        self._next_offset: dict[int, int] = {}
        self._assigned: dict[TopicIdPartition, int] = {}
        # User partition -> metadata-partition end offset to reach before it is ready.
        self._ready_at: dict[TopicIdPartition, int] = {}
        # User partition -> the metadata offset of the last event applied to its cache (from
        # a snapshot or read since). A metadata partition is re-read from an earlier offset
        # when another user partition joins it; events at or below this are skipped.
        self._applied: dict[TopicIdPartition, int] = {}
        # Authorship (see the module docstring): this broker's id, the user partitions it
        # leads, the metadata offset from which each assigned partition's events are live,
        # the other brokers of the cluster, and the values this manager is writing (a
        # multiset: the consumer takes each out when it reads it back).
        self.broker_id: int | None = None
        self._leading: set[TopicIdPartition] = set()
        self._live_from: dict[TopicIdPartition, int] = {}
        self._other_brokers: frozenset[int] = frozenset()
        self._own: dict[bytes, int] = {}
        self._writer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rlmm-writer")
        self._consumer: threading.Thread | None = None
        self._closed = False
        self._wake = threading.Event()
        self._last_snapshot_ms = 0
        # One snapshot writer at a time: close() writes too, and its join of the consumer
        # may time out while the consumer is writing; two writers of one file would share
        # atomic_write's temp file and could rename a mix of both into place.
        self._snapshot_lock = threading.Lock()
        # Deletions (see the module docstring): the metadata partitions this broker leads,
        # the offset up to which each was scanned for DELETE_PARTITION_* events, the last
        # such state of each user partition seen there, and the callback of the remover.
        self._followed: set[int] = set()
        self._scanned: dict[int, int] = {}
        self._delete_states: dict[TopicIdPartition, RemotePartitionDeleteState] = {}
        self._loaded_for_deletion: set[TopicIdPartition] = set()
        self.deletion_listener: Callable[[], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def attach_client(self, client: MetadataTopicClient) -> None:
        self.client = client

    def configure(self, configs: Mapping[str, str]) -> None:
        """Settings: ``remote.log.metadata.topic.num.partitions`` (50),
        ``remote.log.metadata.topic.replication.factor`` (3, for a topic the Kafka client
        creates), ``log.dir`` (where
        snapshots and committed offsets go; none without it), the snapshot interval,
        ``broker.id`` (this broker: enables the authorship check of the module docstring),
        and, when no client was attached, the bootstrap servers with the other
        ``remote.log.metadata.common.client.*`` settings (prefix stripped) for the Kafka
        client.

        Raises:
            RemoteStorageError: an invalid setting, or a metadata topic that cannot be
                created or has another partition count.
        """
        try:
            self.num_partitions = int(configs.get(NUM_PARTITIONS_KEY, DEFAULT_METADATA_PARTITIONS))
            self.snapshot_interval_ms = int(configs.get(SNAPSHOT_INTERVAL_KEY, 30_000))
            if configs.get(BROKER_ID_KEY) is not None:
                self.broker_id = int(configs[BROKER_ID_KEY])
        except ValueError as e:
            raise RemoteStorageError(f"invalid RLMM setting: {e}") from e
        if self.num_partitions <= 0:
            raise RemoteStorageError(f"{NUM_PARTITIONS_KEY} must be positive")
        if LOG_DIR_KEY in configs:
            self.rlmm_dir = Path(configs[LOG_DIR_KEY]) / RLMM_DIR
            self.rlmm_dir.mkdir(parents=True, exist_ok=True)
        if self.client is None:
            bootstrap = configs.get(BOOTSTRAP_KEY)
            if not bootstrap:
                raise RemoteStorageError(
                    f"no metadata-topic client attached and no {BOOTSTRAP_KEY} configured"
                )
            from rlmm.kafka_client import KafkaMetadataTopicClient

            client_config = {
                k[len(CLIENT_PREFIX) :]: v
                for k, v in configs.items()
                if k.startswith(CLIENT_PREFIX) and k != BOOTSTRAP_KEY
            }
            try:
                replication = int(
                    configs.get(REPLICATION_FACTOR_KEY, DEFAULT_METADATA_REPLICATION_FACTOR)
                )
            except ValueError as e:
                raise RemoteStorageError(f"invalid {REPLICATION_FACTOR_KEY}: {e}") from e
            self.client = KafkaMetadataTopicClient(
                bootstrap, replication_factor=replication, **client_config
            )
        self.client.ensure_topic(self.num_partitions)
        self._consumer = threading.Thread(
            target=self._consume_loop, name="rlmm-consumer", daemon=True
        )
        self._consumer.start()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        self._wake.set()
        if self._consumer is not None:
            self._consumer.join(10)
        self._writer.shutdown(wait=True)
        self.write_snapshots()
        if self.client is not None:
            self.client.close()

    # -- assignment ------------------------------------------------------------------------
    def metadata_partition_of(self, tp: TopicIdPartition) -> int:
        return metadata_partition(tp, self.num_partitions)

    def on_partition_leadership_changes(
        self, leader_partitions: set[TopicIdPartition], follower_partitions: set[TopicIdPartition]
    ) -> None:
        """Start reading the metadata of these partitions (snapshot first, then events)."""
        assert self.client is not None
        with self._lock:
            self._leading |= leader_partitions
            self._leading -= follower_partitions
        for tp in leader_partitions | follower_partitions:
            with self._lock:
                if tp in self._assigned:
                    continue
            mp = self.metadata_partition_of(tp)
            snapshot_offset = self._load_snapshot(tp, mp)
            end = self.client.end_offset(mp)
            with self._lock:
                self._assigned[tp] = mp
                self._ready_at[tp] = end
                self._applied[tp] = snapshot_offset if snapshot_offset is not None else -1
                self._live_from[tp] = end
                start = snapshot_offset + 1 if snapshot_offset is not None else 0
                # Read the partition from the earliest point any assigned user partition
                # still needs; events already in a snapshot are skipped when applied.
                current = self._next_offset.get(mp)
                self._next_offset[mp] = start if current is None else min(current, start)
                if end <= self._next_offset[mp]:
                    self._mark_ready(tp)
                self._lock.notify_all()
        self._wake.set()

    def follow_metadata_partitions(self, partitions: set[int]) -> None:
        """The metadata partitions this broker leads now (all of them, replacing the last
        call): each newly followed one is read from its start for unfinished deletions; the
        deletions of one no longer followed are released (its new leader runs them)."""
        released: set[TopicIdPartition] = set()
        with self._lock:
            for mp in partitions - self._followed:
                self._scanned[mp] = -1
                self._next_offset[mp] = min(self._next_offset.get(mp, 0), 0)
            for mp in self._followed - partitions:
                self._scanned.pop(mp, None)
                for tp in [t for t in self._delete_states if self.metadata_partition_of(t) == mp]:
                    del self._delete_states[tp]
                    if tp in self._loaded_for_deletion:
                        released.add(tp)
            self._followed = set(partitions)
        if released:
            self.on_stop_partitions(released)
        self._wake.set()

    def unfinished_deletions(self) -> set[TopicIdPartition]:
        """Partitions of the followed metadata partitions marked or started for deletion
        and not finished, as far as they were read."""
        with self._lock:
            return {tp for tp, state in self._delete_states.items() if state in _UNFINISHED}

    def _load_unfinished_deletions(self) -> None:
        """Load the metadata of the unfinished deletions not loaded yet (consumer thread)."""
        with self._lock:
            missing = {
                tp
                for tp, state in self._delete_states.items()
                if state in _UNFINISHED and tp not in self._assigned
            }
        if not missing:
            return
        with self._lock:
            self._loaded_for_deletion |= missing
        try:
            self.on_partition_leadership_changes(set(), missing)
        except (RemoteStorageError, OSError):
            log.exception("loading the metadata of partitions being deleted failed; retrying")
            return
        log.info("loading the remote log metadata of partitions being deleted: %s", missing)

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._loaded_for_deletion.discard(tp)
                self._assigned.pop(tp, None)
                self._ready_at.pop(tp, None)
                self._applied.pop(tp, None)
                self._live_from.pop(tp, None)
                self._leading.discard(tp)
                self.store.remove(tp)

    def set_other_brokers(self, broker_ids: set[int]) -> None:
        """The other brokers of the cluster, whose events on partitions this broker leads
        still apply (a former leader finishing its work). None on a single broker."""
        with self._lock:
            self._other_brokers = frozenset(broker_ids) - {self.broker_id}

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        with self._lock:
            return topic_id_partition in self._assigned and topic_id_partition not in self._ready_at

    def wait_ready(self, topic_id_partition: TopicIdPartition, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not (
                topic_id_partition in self._assigned and topic_id_partition not in self._ready_at
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                self._lock.wait(remaining)
            return True

    def _mark_ready(self, tp: TopicIdPartition) -> None:
        self._ready_at.pop(tp, None)
        # A ready partition has a cache even before its first segment: reads answer "none"
        # rather than "unknown partition".
        self.store.get_or_create(tp)
        if tp in self._loaded_for_deletion and self.deletion_listener is not None:
            self.deletion_listener()  # the remover acts on caught-up partitions only

    # -- writes ----------------------------------------------------------------------------
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> Future[None]:
        if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(
                f"add needs state COPY_SEGMENT_STARTED, got {metadata.state.name} "
                f"for {metadata.remote_log_segment_id}"
            )
        return self._publish(metadata.topic_id_partition, metadata)

    def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> Future[None]:
        return self.update_remote_log_segment_metadata_in_order([update])

    def update_remote_log_segment_metadata_in_order(
        self, updates: Sequence[RemoteLogSegmentMetadataUpdate]
    ) -> Future[None]:
        """The updates (of one user partition, so of one metadata partition) appended in
        order by one writer job, only the last synced when any needs it: that sync covers
        every earlier record of the partition, so a batch of COPY_SEGMENT_FINISHED events
        costs one sync, and a crash keeps a prefix of them, never a later one without an
        earlier one.

        Raises:
            ValueError: the updates are of several user partitions (raised at once).
        """
        if not updates:
            done: Future[None] = Future()
            done.set_result(None)
            return done
        tp = updates[0].topic_id_partition
        if any(u.topic_id_partition != tp for u in updates):
            raise ValueError("updates of several partitions cannot be ordered together")
        try:
            for update in updates:
                current = self._current(tp, update.remote_log_segment_id.id)
                if current is None:
                    raise RemoteResourceNotFoundError(
                        f"no remote log segment {update.remote_log_segment_id} to update"
                    )
                current.create_with_update(update)  # InvalidStateTransitionError
        except RemoteStorageError as e:
            failed: Future[None] = Future()
            failed.set_exception(e)
            return failed
        return self._publish_all(tp, updates)

    def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> Future[None]:
        return self._publish(metadata.topic_id_partition, metadata)

    def _current(self, tp: TopicIdPartition, segment_id: object) -> RemoteLogSegmentMetadata | None:
        try:
            cache = self.store.cache(tp)
        except RemoteResourceNotFoundError:
            return None
        return cache.describe(segment_id)  # type: ignore[arg-type]

    def _publish(self, tp: TopicIdPartition, event: object) -> Future[None]:
        return self._publish_all(tp, [event])

    def _publish_all(self, tp: TopicIdPartition, events: Sequence[object]) -> Future[None]:
        """Append ``events`` to ``tp``'s metadata partition in order, in one writer job;
        the last is appended durable if any event needs a sync (``_needs_sync``: that sync
        covers the earlier ones); completes once this manager read the last one back."""
        assert self.client is not None, "configure() first"
        client = self.client
        mp = self.metadata_partition_of(tp)
        datas = [serialize(event) for event in events]
        durable = any(_needs_sync(event) for event in events)

        def write() -> None:
            if len(datas) > 1 and isinstance(client, MetadataTopicBatchAppender):
                # One batch: one wait for the writer's loop and one sync for all.
                append_all = partial(client.append_all, mp, datas, durable=durable)
                offset = self._append(mp, datas, append_all)
            else:
                for i, data in enumerate(datas):
                    last = i == len(datas) - 1
                    append = partial(client.append, mp, data, durable=durable and last)
                    offset = self._append(mp, [data], append)
            self._wake.set()
            self._wait_consumed(mp, offset, tp)

        return self._writer.submit(write)

    def _append(self, mp: int, datas: Sequence[bytes], append: Callable[[], int]) -> int:
        """Run ``append`` (of ``datas``, all or none) and return its offset; ``datas`` are
        known as ours before they can be read back (the consumer may read them before the
        append returns)."""
        for data in datas:
            self._own_change(data, +1)
        try:
            offset = append()
        except BaseException:
            for data in datas:
                self._own_change(data, -1)
            raise
        with self._lock:
            if mp not in self._next_offset:
                for data in datas:
                    self._own_change(data, -1)  # nobody here reads them back
        return offset

    def _own_change(self, value: bytes, delta: int) -> bool:
        """Count a value this manager writes (+1) or take one out (-1); False when there
        was none to take."""
        with self._lock:
            count = self._own.get(value, 0) + delta
            if count < 0:
                return False
            if count:
                self._own[value] = count
            else:
                self._own.pop(value, None)
            return True

    def _wait_consumed(self, mp: int, offset: int, tp: TopicIdPartition) -> None:
        deadline = time.monotonic() + 60
        with self._lock:
            if tp not in self._assigned:
                # Not hosted here (a remover, a tool): durable is all that can be promised.
                return
            while self._next_offset.get(mp, 0) <= offset:
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0:
                    raise MetadataTopicError(
                        f"event at {mp}:{offset} was stored but not read back in time"
                    )
                self._lock.wait(min(remaining, 1.0))

    # -- the consumer ----------------------------------------------------------------------
    def _consume_loop(self) -> None:
        assert self.client is not None
        while not self._closed:
            progressed = False
            with self._lock:
                positions = dict(self._next_offset)
            for mp, offset in positions.items():
                try:
                    records = self.client.read(mp, offset, READ_BATCH)
                except MetadataTopicError:
                    log.exception("reading %d of the metadata topic failed", mp)
                    continue
                with self._lock:
                    if self._next_offset.get(mp) != offset:
                        # A user partition was assigned meanwhile and moved this metadata
                        # partition's position back (to re-read its events from the start
                        # or its snapshot). What was read from the old position must not
                        # count: applied now, it would put the newcomer's later events
                        # before its earlier ones (which _applied would then skip), and
                        # the old position would mark it ready before they were re-read.
                        progressed = True
                        continue
                    if not records:
                        self._check_ready(mp, offset)
                        continue
                    progressed = True
                    for record in records:
                        self._apply(mp, record.offset, record.value)
                    self._next_offset[mp] = records[-1].offset + 1
                    self._check_ready(mp, self._next_offset[mp])
                    self._lock.notify_all()
            self._load_unfinished_deletions()
            if self.rlmm_dir is not None and (
                self.clock() - self._last_snapshot_ms >= self.snapshot_interval_ms
            ):
                self.write_snapshots()
            if not progressed:
                self._wake.wait(IDLE_POLL_S)
                self._wake.clear()

    def _check_ready(self, mp: int, next_offset: int) -> None:
        with self._lock:
            for tp, end in list(self._ready_at.items()):
                if self._assigned.get(tp) == mp and next_offset >= end:
                    self._mark_ready(tp)
                    self._lock.notify_all()

    def _apply(self, mp: int, offset: int, value: bytes) -> None:
        own = self._own_change(value, -1)
        try:
            event = deserialize(value)
        except RemoteStorageError:
            log.exception("skipping undecodable event at %d:%d of the metadata topic", mp, offset)
            return
        tp = event.topic_id_partition
        if mp in self._followed and offset > self._scanned.get(mp, -1):
            # A metadata partition this broker leads: its deletions are this broker's.
            self._scanned[mp] = offset
            if isinstance(event, RemotePartitionDeleteMetadata):
                self._delete_states[tp] = event.state
        if tp not in self._assigned:
            return  # another broker's partition sharing this metadata partition
        if offset <= self._applied.get(tp, -1):
            return  # already applied (from the snapshot, or read before a re-read)
        self._applied[tp] = offset
        problem = None if own else self._not_authored(tp, offset, event)
        if problem is None:
            try:
                if isinstance(event, RemoteLogSegmentMetadata):
                    self.store.get_or_create(tp).add_copy_in_progress_segment(event)
                elif isinstance(event, RemoteLogSegmentMetadataUpdate):
                    self.store.update_remote_log_segment_metadata(event)
                else:
                    self.store.put_remote_partition_delete_metadata(event)
                return
            except (RemoteStorageError, ValueError) as e:
                problem = str(e)
        # Kafka logs and skips events that do not apply; the log must go on.
        log.warning(
            "refused %s at %s-%d offset %d (segment %s, broker %d): %s",
            type(event).__name__,
            METADATA_TOPIC,
            mp,
            offset,
            _segment_of(event),
            event.broker_id,
            problem,
        )

    def _not_authored(self, tp: TopicIdPartition, offset: int, event: object) -> str | None:
        """Why a live event of a partition this broker leads cannot be its leader's, or None
        (see the module docstring). Called with the lock held, for events not written here."""
        if self.broker_id is None or tp not in self._leading:
            return None
        if offset < self._live_from.get(tp, 0):
            return None  # catching up: written before the assignment
        broker = getattr(event, "broker_id", None)
        if broker in self._other_brokers:
            return None
        return (
            f"this broker ({self.broker_id}) leads {tp} and did not write this event; "
            "only the leader writes the metadata of its partitions"
        )

    # -- reads -----------------------------------------------------------------------------
    def _ready_cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        if not self.is_ready(tp):
            raise RemoteStorageError(f"remote log metadata of {tp} is not loaded yet")
        return self.store.cache(tp)

    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._ready_cache(topic_id_partition).remote_log_segment_metadata(epoch, offset)

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, epoch: int
    ) -> int | None:
        return self._ready_cache(topic_id_partition).highest_offset_for_epoch(epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        return iter(self._ready_cache(topic_id_partition).list_remote_log_segments(leader_epoch))

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        return self._ready_cache(topic_id_partition).remote_log_size(leader_epoch)

    # -- snapshots -------------------------------------------------------------------------
    def _load_snapshot(self, tp: TopicIdPartition, mp: int) -> int | None:
        if self.rlmm_dir is None:
            return None
        path = snapshot_path(self.rlmm_dir, tp)
        try:
            snapshot = open_snapshot_stream(path)
            if snapshot is None:
                return None
            if snapshot.metadata_partition != mp:
                snapshot.entries.close()
                return None
            # The entries go in as they are read, runs of the usual ones as columns: building
            # record or metadata objects first would cost tens of seconds for millions of
            # segments, and holding them all would cost far more memory than the cache.
            cache = RemoteLogMetadataCache.from_entries(tp, snapshot.entries, count=snapshot.count)
        except CorruptSnapshotError as e:
            log.warning("discarding damaged RLMM snapshot %s (%s): replaying %s", path, e, tp)
            path.unlink(missing_ok=True)
            return None
        with self._lock:
            self.store.install(cache)
        return snapshot.metadata_partition_offset

    def write_snapshots(self) -> None:
        """Snapshot every assigned partition's cache and the offsets they reach."""
        with self._snapshot_lock:
            self._write_snapshots()

    def _write_snapshots(self) -> None:
        if self.rlmm_dir is None:
            return
        # Each partition's entries and the offset they reach are taken in one hold of the
        # lock: taken apart, a partition stopped and loaded again in between (its position
        # moved back, its cache replaced) would be written with the old, higher offset over
        # fewer entries, and the next load would skip the events in the difference.
        snapshots: dict[TopicIdPartition, Snapshot] = {}
        with self._lock:
            positions = dict(self._next_offset)
            for tp, mp in self._assigned.items():
                # Every event of the metadata partition below its position has been applied;
                # when another partition moved the position back, this one's cache already
                # holds its events up to the last it applied.
                reached = max(positions.get(mp, 0) - 1, self._applied.get(tp, -1))
                if tp in self._ready_at or reached < 0:
                    continue
                try:
                    cache = self.store.cache(tp)
                except RemoteResourceNotFoundError:
                    continue
                entries = [
                    RemoteLogSegmentMetadataSnapshot.from_metadata(m) for m in cache.entries()
                ]
                snapshots[tp] = Snapshot(mp, reached, entries)
        for tp, snapshot in snapshots.items():
            write_snapshot(snapshot_path(self.rlmm_dir, tp), snapshot)
        committed = {mp: off for mp, off in positions.items() if off > 0}
        write_committed_offsets(self.rlmm_dir / COMMITTED_OFFSETS_FILE, committed)
        self._last_snapshot_ms = self.clock()


_UNFINISHED = (
    RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
    RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
)


def _needs_sync(event: object) -> bool:
    """Whether a crash of the machine must not lose ``event`` once its write completed
    (see the module docstring): all but COPY_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED."""
    if isinstance(event, RemoteLogSegmentMetadata):
        return event.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return event.state != RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
    return True


def _segment_of(event: object) -> str:
    """The segment id an event is about, as Kafka prints it (``tierlog metadata describe``
    takes it); ``-`` for a partition deletion event."""
    if isinstance(event, RemoteLogSegmentMetadata):
        return uuid_to_base64(event.segment_id)
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return uuid_to_base64(event.remote_log_segment_id.id)
    return "-"
