"""Recreating a topic from the remote tier alone, for a broker that lost its disks.

Two steps. ``plan_topic`` reads the bucket only: the topic's ``topic-manifest.json`` (topic
id, partition count, configs), every segment manifest, and per partition the canonical
log (``spark_jobs.lineage``: each offset once, along the leader-epoch lineage of the newest
leader's segment), then the last canonical segment's leader-epoch checkpoint and producer
snapshot. ``restore`` writes what a broker needs to serve the topic, in the stopped
broker's own storage (``tierlog.offline_storage``, which refuses a running broker):

1. ``__remote_log_metadata`` (created if missing): the canonical segments, each added
   (COPY_SEGMENT_STARTED, the manifest's metadata) and finished (COPY_SEGMENT_FINISHED)
   through the RLMM itself, as the broker's RemoteLogManager records a copy;
2. each partition's local log, empty and starting right after the last remote offset, with
   the log start offset at the first remote offset, the leader-epoch cache of the lineage
   and the producer state of the last segment's snapshot: what Kafka's follower builds from
   the remote tier before it fetches (``buildRemoteLogAuxState``);
3. last, the topic in the registry (the commit): same topic id, partition count and
   configs, each partition's leader epoch at the lineage's latest (the broker's start
   begins the next one), and producer ids at or below those of the restored producer state
   never handed out again.

A run cut short leaves no topic in the registry and is run again: segments it recorded are
not recorded twice, and the partition logs it left, empty, are reset. Segments off the
canonical log (a branch an unclean election left, a second copy of a range) are not
registered: ``tierlog metadata verify`` then reports their objects as orphans and
``--repair`` deletes them.

A bucket written before topic manifests existed has none: the partition count and configs
must then be given (``partitions``, ``configs``); ``remote.storage.enable=true`` is implied.

In a cluster, ``tierlog.cluster_restore`` registers the topic in ZooKeeper instead of step
3, after ``publish_segments`` wrote step 1 over the Kafka protocol (see there for step 2).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from core.errors import CoreError
from core.fs import atomic_write
from core.kafka_uuid import uuid_to_base64
from core.log.leader_epoch import EpochEntry, LeaderEpochCheckpointFile
from core.log.partition_log import PartitionLog
from core.log.producer_state import CorruptSnapshotError, decode_snapshot, snapshot_path
from core.server.topics import TopicInfo
from core.topic_name import validate_topic_name
from rlmm.manager import BROKER_ID_KEY, NUM_PARTITIONS_KEY, TopicBasedRemoteLogMetadataManager
from rlmm.topic_client import DEFAULT_METADATA_PARTITIONS, MetadataTopicClient
from rsm_plugins.base import ObjectStoreRemoteStorageManager
from rsm_plugins.layout import ObjectSuffix, SegmentManifest, TopicManifest, parse_key
from spark_jobs.lineage import Lineage, canonical_ranges, newest_segment
from tiered.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageError,
    TopicIdPartition,
)
from tierlog.offline_storage import OfflineBrokerStorage

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState
REMOTE_STORAGE_ENABLE = "remote.storage.enable"
RLMM_TIMEOUT_S = 120.0

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


class RestoreError(Exception):
    """The topic cannot be restored; the message names the topic and what is missing."""


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """One partition as the bucket gives it back.

    Attributes:
        segments: the canonical segments, in offset order (registered as finished).
        log_start_offset: the first remote offset (0 without segments).
        next_offset: the last remote offset + 1, where the local log restarts (0 without).
        epochs: the leader-epoch lineage up to ``next_offset``.
        producer_snapshot: the producer state at ``next_offset`` (snapshot file bytes),
            or None.
        gaps: offset ranges (inclusive) of the canonical log that no segment holds.
        left_out: finished copies off the canonical log (not registered).
    """

    partition: int
    segments: tuple[RemoteLogSegmentMetadata, ...] = ()
    log_start_offset: int = 0
    next_offset: int = 0
    epochs: tuple[EpochEntry, ...] = ()
    producer_snapshot: bytes | None = None
    max_producer_id: int = -1
    gaps: tuple[tuple[int, int], ...] = ()
    left_out: tuple[RemoteLogSegmentMetadata, ...] = ()

    @property
    def remote_bytes(self) -> int:
        return sum(md.segment_size_in_bytes for md in self.segments)

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1].epoch if self.epochs else 0


@dataclass(frozen=True, slots=True)
class TopicPlan:
    topic: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str]
    from_manifest: bool
    partition_plans: tuple[PartitionPlan, ...]
    other_topic_ids: tuple[uuid.UUID, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def segments(self) -> int:
        return sum(len(p.segments) for p in self.partition_plans)

    @property
    def remote_bytes(self) -> int:
        return sum(p.remote_bytes for p in self.partition_plans)


# -- planning (reads the bucket only) ---------------------------------------------------------


@dataclass
class _TopicObjects:
    has_manifest: bool = False
    segment_manifests: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))


def plan_topic(
    rsm: ObjectStoreRemoteStorageManager,
    topic: str,
    *,
    partitions: int | None = None,
    configs: Mapping[str, str] | None = None,
    threads: int = 8,
    progress: Progress = _quiet,
) -> TopicPlan:
    """What restoring ``topic`` from ``rsm``'s bucket takes.

    Args:
        partitions, configs: the partition count and topic configs, for a bucket without a
            topic manifest (ignored when it has one).

    Raises:
        RestoreError: the bucket has no such topic, or (without a topic manifest) neither
            the partition count, or several topic ids of that name without manifests.
        RemoteStorageError: the bucket cannot be read.
    """
    try:
        validate_topic_name(topic)
    except CoreError as e:
        raise RestoreError(str(e)) from e
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="restore-read") as pool:
        return _plan(rsm, topic, partitions, configs, pool, progress)


def _plan(
    rsm: ObjectStoreRemoteStorageManager,
    topic: str,
    partitions: int | None,
    configs: Mapping[str, str] | None,
    pool: ThreadPoolExecutor,
    progress: Progress,
) -> TopicPlan:
    by_id: dict[uuid.UUID, _TopicObjects] = defaultdict(_TopicObjects)
    listed = 0
    manifest_suffix = ObjectSuffix.MANIFEST.value
    # Each segment manifest is read as soon as the listing names it: reading and listing
    # overlap (both take time, on both sides of the connection).
    reads: dict[str, Future[RemoteLogSegmentMetadata | str]] = {}
    for key in rsm.store.list_keys(f"{rsm.key_prefix}{topic}-"):
        listed += 1
        parsed = parse_key(rsm.key_prefix, key)
        if parsed is None or parsed.topic != topic:
            continue  # not of the layout, or another topic whose name starts alike
        if parsed.is_topic_manifest:
            by_id[parsed.topic_id].has_manifest = True
        elif parsed.suffix == manifest_suffix and parsed.partition is not None:
            by_id[parsed.topic_id].segment_manifests[parsed.partition].append(key)
            reads[key] = pool.submit(_read_manifest, rsm, key)
    progress(f"{topic}: listed {listed} objects")
    if not by_id:
        raise RestoreError(
            f"topic {topic}: nothing under {rsm.key_prefix}{topic}-<topicId>/ in the bucket"
        )
    manifests = {
        topic_id: rsm.read_topic_manifest(topic, topic_id)
        for topic_id, objects in by_id.items()
        if objects.has_manifest
    }
    warnings: list[str] = []
    manifest: TopicManifest | None = None
    if manifests:
        # Topic ids are never reused: the newest manifest is the topic that exists now; a
        # deleted incarnation's manifest goes before its segments, so it seldom remains.
        valid = {tid: m for tid, m in manifests.items() if m is not None}
        if not valid:
            raise RestoreError(f"topic {topic}: its topic manifest vanished while being read")
        topic_id = max(valid, key=lambda tid: valid[tid].updated_ms)
        manifest = valid[topic_id]
        if manifest.topic != topic or manifest.topic_id != topic_id:
            raise RestoreError(
                f"topic {topic}: the topic manifest of {uuid_to_base64(topic_id)} names "
                f"{manifest.topic} ({uuid_to_base64(manifest.topic_id)})"
            )
        count, topic_configs = manifest.partitions, dict(manifest.configs)
    else:
        if len(by_id) > 1:
            ids = ", ".join(sorted(uuid_to_base64(t) for t in by_id))
            raise RestoreError(
                f"topic {topic}: the bucket holds topic ids {ids} and no topic manifest "
                "says which is the topic: restore cannot choose"
            )
        (topic_id,) = by_id
        if partitions is None:
            raise RestoreError(
                f"topic {topic}: no topic manifest ({rsm.key_prefix}{topic}-"
                f"{uuid_to_base64(topic_id)}/topic-manifest.json; the bucket predates them), "
                "so its partition count and configs are unknown: give --partitions N (and "
                "--topic-config KEY=VALUE for each config to keep)"
            )
        count = partitions
        topic_configs = {**(configs or {}), REMOTE_STORAGE_ENABLE: "true"}
        warnings.append(
            f"no topic manifest: {count} partitions and configs {topic_configs} as given"
        )
    objects = by_id[topic_id]
    beyond = [p for p in objects.segment_manifests if p >= count]
    if beyond:
        raise RestoreError(
            f"topic {topic}: partition {max(beyond)} has segments but the topic has "
            f"{count} partitions"
        )
    keys = [k for p in sorted(objects.segment_manifests) for k in objects.segment_manifests[p]]
    by_partition: dict[int, list[RemoteLogSegmentMetadata]] = defaultdict(list)
    for n, key in enumerate(keys, 1):
        result = reads[key].result()
        if isinstance(result, str):
            warnings.append(f"segment manifest left out: {result}")
        else:
            by_partition[result.topic_id_partition.partition].append(result)
        if n % 1000 == 0:
            progress(f"{topic}: read {n}/{len(keys)} segment manifests")
    progress(f"{topic}: read {len(keys)} segment manifests")
    plans = tuple(
        pool.map(
            lambda p: _plan_partition(
                rsm, TopicIdPartition(topic_id, topic, p), by_partition[p], warnings
            ),
            range(count),
        )
    )
    return TopicPlan(
        topic,
        topic_id,
        count,
        topic_configs,
        manifest is not None,
        plans,
        tuple(t for t in by_id if t != topic_id),
        tuple(warnings),
    )


def _read_manifest(
    rsm: ObjectStoreRemoteStorageManager, key: str
) -> RemoteLogSegmentMetadata | str:
    """The finished segment a manifest describes, or why it is left out."""
    try:
        manifest = SegmentManifest.from_json(rsm.store.get_bytes(key), key)
    except RemoteStorageError as e:
        return f"{key}: {e}"
    md = manifest.metadata
    parsed = parse_key(rsm.key_prefix, key)
    expected = None if parsed is None else (parsed.topic_id, parsed.partition, parsed.stem)
    actual = (
        md.topic_id_partition.topic_id,
        md.topic_id_partition.partition,
        (md.start_offset, md.segment_id),
    )
    if expected != actual:
        return f"{key}: the manifest describes another segment ({md.remote_log_segment_id})"
    # Its presence means a complete copy: written last, deleted first.
    return dataclasses.replace(md, state=_S.COPY_SEGMENT_FINISHED)


def _plan_partition(
    rsm: ObjectStoreRemoteStorageManager,
    tp: TopicIdPartition,
    segments: list[RemoteLogSegmentMetadata],
    warnings: list[str],
) -> PartitionPlan:
    if not segments:
        return PartitionPlan(tp.partition)
    newest = newest_segment(segments)
    checkpoint = _fetch(rsm, newest, IndexType.LEADER_EPOCH)
    entries = LeaderEpochCheckpointFile.decode(checkpoint, str(newest.remote_log_segment_id))
    ranges = canonical_ranges(segments, Lineage((e.epoch, e.start_offset) for e in entries))
    if not ranges:
        raise RestoreError(f"{tp.topic}-{tp.partition}: no segment is on the leader-epoch lineage")
    # Each segment once, in offset order (one may serve two ranges around another's).
    by_id = {r.segment.segment_id: r.segment for r in ranges}
    used = sorted(by_id.values(), key=lambda md: (md.start_offset, md.end_offset))
    used_ids = set(by_id)
    first, last = ranges[0].start, ranges[-1].end
    gaps = tuple(
        (a.end + 1, b.start - 1) for a, b in itertools.pairwise(ranges) if b.start > a.end + 1
    )
    for lo, hi in gaps:
        warnings.append(f"{tp.topic}-{tp.partition}: offsets {lo}..{hi} are in no segment")
    epochs = tuple(e for e in entries if e.start_offset <= last)
    last_segment = ranges[-1].segment
    snapshot: bytes | None = None
    max_pid = -1
    if last == last_segment.end_offset:
        snapshot = _fetch(rsm, last_segment, IndexType.PRODUCER_SNAPSHOT)
        try:
            source = str(last_segment.remote_log_segment_id)
            rows = decode_snapshot(snapshot, source) if snapshot else []
        except CorruptSnapshotError as e:
            warnings.append(f"{tp.topic}-{tp.partition}: producer state not restored: {e}")
            snapshot, rows = None, []
        max_pid = max((r.producer_id for r in rows), default=-1)
        if not rows:
            snapshot = None  # nothing to restore: the broker starts with no producers
    else:
        warnings.append(
            f"{tp.topic}-{tp.partition}: the canonical log ends at {last}, inside segment "
            f"{uuid_to_base64(last_segment.segment_id)}: producer state not restored"
        )
    return PartitionPlan(
        tp.partition,
        tuple(used),
        first,
        last + 1,
        epochs,
        snapshot,
        max_pid,
        gaps,
        tuple(md for md in segments if md.segment_id not in used_ids),
    )


def _fetch(
    rsm: ObjectStoreRemoteStorageManager, md: RemoteLogSegmentMetadata, index: IndexType
) -> bytes:
    try:
        with rsm.fetch_index(md, index) as stream:
            return stream.read()
    except RemoteStorageError as e:
        tp = md.topic_id_partition
        raise RestoreError(
            f"{tp.topic}-{tp.partition}: cannot read the {index.value} of segment "
            f"{uuid_to_base64(md.segment_id)}: {e}"
        ) from e


# -- restoring (writes the stopped broker's storage) -----------------------------------------


@dataclass(frozen=True, slots=True)
class RestoredTopic:
    plan: TopicPlan
    info: TopicInfo


def check_restorable(storage: OfflineBrokerStorage, plans: Sequence[TopicPlan]) -> None:
    """Refuse topics that exist, that collide with one, and leftovers that hold records.

    Raises:
        RestoreError: naming the topic (or the partition directory).
    """
    for plan in plans:
        if storage.registry.get(plan.topic) is not None:
            raise RestoreError(f"topic {plan.topic} exists: restore refuses to replace it")
        if storage.registry.by_id(plan.topic_id) is not None:
            other = storage.registry.by_id(plan.topic_id)
            raise RestoreError(
                f"topic {plan.topic}: its id {uuid_to_base64(plan.topic_id)} is topic "
                f"{other.name if other else '?'} here"
            )
        try:
            storage.registry.create(plan.topic, plan.partitions, plan.configs, validate_only=True)
        except CoreError as e:
            raise RestoreError(f"topic {plan.topic}: {e}") from e
        config = storage.log_config(plan.configs)
        if not config.remote_storage_enable:
            raise RestoreError(
                f"topic {plan.topic}: its configs do not enable {REMOTE_STORAGE_ENABLE}: the "
                "broker would not read its remote data"
            )
        for index in range(plan.partitions):
            plog = storage.log_manager.get_log(plan.topic, index)
            if plog is not None and plog.log_end_offset > plog.local_log_start_offset:
                raise RestoreError(
                    f"topic {plan.topic}: {plog.dir} holds records of a topic the registry "
                    "does not know: move it away first"
                )


def restore(
    storage: OfflineBrokerStorage,
    plans: Sequence[TopicPlan],
    *,
    metadata_partitions: int = DEFAULT_METADATA_PARTITIONS,
    progress: Progress = _quiet,
    clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> list[RestoredTopic]:
    """Write ``plans`` into the stopped broker's ``storage`` (see the module docstring),
    close it (flushed, checkpointed, shut down cleanly) and only then register the topics.

    Raises:
        RestoreError: a topic exists or collides (nothing was written for any topic).
        RemoteStorageError: the metadata could not be written (run again).
    """
    check_restorable(storage, plans)
    publish_segments(
        storage.metadata_client(),
        storage.node_id,
        plans,
        metadata_partitions=metadata_partitions,
        progress=progress,
        clock=clock,
    )
    for plan in plans:
        config = storage.log_config(plan.configs)
        for p in plan.partition_plans:
            plog = storage.log_manager.get_or_create_log(plan.topic, p.partition, config)
            _restart_log(plog, p)
        progress(f"{plan.topic}: {plan.partitions} local logs prepared")
    # Offsets checkpointed (the log start offsets among them) before the topic exists.
    storage.close()
    restored = []
    for plan in plans:
        # The commit: from here on the broker serves the topic.
        info = storage.registry.create(
            plan.topic,
            plan.partitions,
            plan.configs,
            topic_id=plan.topic_id,
            leader_epochs=tuple(p.latest_epoch for p in plan.partition_plans),
        )
        highest_pid = max((p.max_producer_id for p in plan.partition_plans), default=-1)
        if highest_pid >= 0:
            storage.registry.reserve_producer_ids_through(highest_pid)
        restored.append(RestoredTopic(plan, info))
    return restored


def publish_segments(
    client: MetadataTopicClient,
    broker_id: int,
    plans: Sequence[TopicPlan],
    *,
    metadata_partitions: int = DEFAULT_METADATA_PARTITIONS,
    progress: Progress = _quiet,
    clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> None:
    """Record the plans' canonical segments in ``__remote_log_metadata`` through ``client``
    (a stopped broker's log dirs, or a cluster over the Kafka protocol), in ``broker_id``'s
    name, through the RLMM: each added (COPY_SEGMENT_STARTED) then COPY_SEGMENT_FINISHED,
    as a copy is recorded. Segments already recorded by a run cut short are not recorded
    again. The client is closed.

    Raises:
        RestoreError: a segment is being deleted there.
        RemoteStorageError: the metadata could not be read or written (run again).
    """
    segments = [md for plan in plans for p in plan.partition_plans for md in p.segments]
    rlmm = TopicBasedRemoteLogMetadataManager(client)
    try:
        rlmm.configure(
            {NUM_PARTITIONS_KEY: str(metadata_partitions), BROKER_ID_KEY: str(broker_id)}
        )
        tps = {md.topic_id_partition for md in segments}
        # Loaded as followed partitions: the events are the RemoteLogManager's records of
        # copies, replayed at the broker's start like any written before a restart.
        rlmm.on_partition_leadership_changes(set(), tps)
        for tp in tps:
            if not rlmm.wait_ready(tp, RLMM_TIMEOUT_S):
                raise RemoteStorageError(f"the remote log metadata of {tp} did not load")
        # A run cut short recorded some already: record each segment once.
        known = {md.segment_id: md.state for tp in tps for md in rlmm.list_remote_log_segments(tp)}
        for md in segments:
            state = known.get(md.segment_id)
            if state is not None and state not in (
                _S.COPY_SEGMENT_STARTED,
                _S.COPY_SEGMENT_FINISHED,
            ):
                raise RestoreError(
                    f"segment {uuid_to_base64(md.segment_id)} of {md.topic_id_partition.topic}-"
                    f"{md.topic_id_partition.partition} is {state.name} in "
                    "__remote_log_metadata here: its data is being deleted"
                )
        _wait_all(
            [
                rlmm.add_remote_log_segment_metadata(
                    dataclasses.replace(md, state=_S.COPY_SEGMENT_STARTED)
                )
                for md in segments
                if md.segment_id not in known
            ]
        )
        progress(f"recorded {len(segments)} segments in __remote_log_metadata")
        now = clock()
        _wait_all(
            [
                rlmm.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(
                        md.remote_log_segment_id, now, None, _S.COPY_SEGMENT_FINISHED,
                        broker_id,
                    )
                )
                for md in segments
                if known.get(md.segment_id) != _S.COPY_SEGMENT_FINISHED
            ]
        )  # fmt: skip
        progress(f"finished {len(segments)} segments in __remote_log_metadata")
    finally:
        rlmm.close()


def _wait_all(futures: list[Future[None]]) -> None:
    deadline = time.monotonic() + RLMM_TIMEOUT_S
    for future in futures:
        future.result(timeout=max(0.0, deadline - time.monotonic()))


def _restart_log(plog: PartitionLog, p: PartitionPlan) -> None:
    """Empty the local log and restart it at ``p.next_offset``, with the log start offset,
    leader epochs and producer state the remote tier gives (Kafka's
    ``buildRemoteLogAuxState``: ``truncateFullyAndStartAt``, the epoch cache from the remote
    checkpoint, the producer snapshot at the local log start)."""
    with plog.lock:
        plog.truncate_fully_and_start_at(p.next_offset)
        for entry in p.epochs:
            plog.leader_epoch_cache.assign(entry.epoch, entry.start_offset)
        if p.producer_snapshot is not None:
            path = snapshot_path(plog.dir, p.next_offset)
            atomic_write(path, p.producer_snapshot)
            # Loaded now so that the clean shutdown keeps it (it snapshots the state held).
            plog.producer_state.load(p.log_start_offset, p.next_offset)
            plog.producer_state.update_map_end_offset(p.next_offset)
        # Below the local log: the remote tier serves [log start, next offset).
        plog.log_start_offset = p.log_start_offset
        plog.recovery_point = p.next_offset
        plog.update_high_watermark(p.next_offset)
