"""Audit of the remote tier against ``__remote_log_metadata``, and its repair.

What ``tierlog metadata verify`` checks, per user partition (docs/ARCHITECTURE.md, "Remote
storage object layout", for the keys):

- every COPY_SEGMENT_FINISHED segment has its objects (``log``, ``index``, ``timeindex``,
  ``snapshot``, ``leader-epoch-checkpoint``, ``txnindex`` unless the metadata says it has
  none, and the manifest), each of the size its manifest records (the ``log``: of the
  metadata's size too); with ``deep``, each object is read and its CRC32C compared with
  the manifest's. The manifest must describe the segment the metadata describes (ids,
  offsets, size, leader epochs, max timestamp, transaction index);
- orphans: objects of the layout that belong to no segment in COPY_SEGMENT_STARTED,
  COPY_SEGMENT_FINISHED or DELETE_SEGMENT_STARTED (same start offset and segment id),
  ignoring objects written less than the grace period ago (a copy in progress) and objects
  whose store gives no time;
- segments in COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED whose last event is older than
  the grace period (stuck);
- gaps and overlaps of the finished segments along the leader-epoch lineage: the lineage is
  the ``leader-epoch-checkpoint`` object of the newest leader's segment (as
  ``spark_jobs.lineage`` finds it), segments belong to it by Kafka's rule
  (``tiered.lineage.is_within_lineage``); finished segments outside it (a branch an unclean
  election left) are reported as notes, not findings, each saying what the leader's
  expiration task does with it: deletes it when it holds an epoch the lineage truncated
  away, else keeps it (a later unclean election may need it) until the log start offset
  passes it;
- each tiered topic has its ``topic-manifest.json``, naming the topic and at least as many
  partitions as the bucket and metadata have.

Objects under the key prefix that the layout does not produce are counted in a note and
never touched. ``repair`` deletes orphans (manifests first) and finishes stuck deletions
(RSM delete, then DELETE_SEGMENT_FINISHED through the RLMM); it is idempotent, and a run cut
short is resumed by running it again.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from core.errors import CoreError
from core.kafka_uuid import uuid_to_base64
from core.log.leader_epoch import LeaderEpochCheckpointFile
from rsm_plugins.base import ObjectStoreRemoteStorageManager
from rsm_plugins.layout import (
    ObjectSuffix,
    SegmentManifest,
    TopicManifest,
    checksum_bytes,
    object_key,
    parse_key,
    partition_prefix,
    topic_manifest_key,
)
from rsm_plugins.store import ObjectInfo
from tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    RemoteStorageError,
    TopicIdPartition,
)
from tiered.lineage import filtered_leader_epochs, has_truncated_epoch, is_within_lineage

_S = RemoteLogSegmentState
LIVE_STATES = frozenset(
    {_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}
)
REQUIRED_SUFFIXES = (
    ObjectSuffix.LOG,
    ObjectSuffix.OFFSET_INDEX,
    ObjectSuffix.TIME_INDEX,
    ObjectSuffix.PRODUCER_SNAPSHOT,
    ObjectSuffix.LEADER_EPOCH,
)
NO_END = 1 << 62  # "no log end": the audit knows no partition's log end offset
LINEAGE_CANDIDATES = 3  # newest segments tried for the lineage's checkpoint object
RLMM_WRITE_TIMEOUT_S = 60.0
DELETE_BATCH = 500  # keys per store delete call (S3 takes at most 1000 per request)


class FindingKind(enum.Enum):
    """What is wrong; ``repairable`` ones are what ``repair`` fixes."""

    MISSING_OBJECT = "missing_object"
    WRONG_SIZE = "wrong_size"
    WRONG_CHECKSUM = "wrong_checksum"
    BAD_MANIFEST = "bad_manifest"
    MANIFEST_MISMATCH = "manifest_mismatch"
    ORPHAN = "orphan"
    STUCK = "stuck"
    GAP = "gap"
    OVERLAP = "overlap"
    TOPIC_MANIFEST = "topic_manifest"


@dataclass(frozen=True, slots=True)
class Finding:
    """One inconsistency, naming the object key or segment id it is about."""

    kind: FindingKind
    topic: str
    topic_id: uuid.UUID
    partition: int | None
    message: str
    key: str | None = None
    segment: RemoteLogSegmentMetadata | None = None

    @property
    def segment_id(self) -> uuid.UUID | None:
        return None if self.segment is None else self.segment.segment_id

    @property
    def repairable(self) -> bool:
        """An orphan (deleted) or a stuck deletion (finished) is what ``repair`` fixes."""
        return self.kind is FindingKind.ORPHAN or (
            self.kind is FindingKind.STUCK
            and self.segment is not None
            and self.segment.state == _S.DELETE_SEGMENT_STARTED
        )


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth saying that is not an inconsistency (exit status 0 stays)."""

    kind: str
    message: str
    topic: str | None = None
    partition: int | None = None


@dataclass
class PartitionSummary:
    topic: str
    topic_id: uuid.UUID
    partition: int
    segments: dict[str, int] = field(default_factory=dict)  # by state name
    objects: int = 0
    remote_bytes: int = 0  # of the finished segments' log objects, per the metadata
    findings: int = 0


@dataclass
class AuditReport:
    findings: list[Finding] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    partitions: list[PartitionSummary] = field(default_factory=list)
    objects_listed: int = 0
    segments_checked: int = 0
    objects_read: int = 0

    @property
    def consistent(self) -> bool:
        return not self.findings


@dataclass(frozen=True, slots=True)
class AuditOptions:
    """``topic``/``partition``: only these; ``grace_ms``: how old an object or a segment's
    last event must be before it counts as orphaned or stuck; ``deep``: read every object
    of every finished segment; ``now_ms``: the clock (tests)."""

    topic: str | None = None
    partition: int | None = None
    deep: bool = False
    grace_ms: int = 3_600_000
    now_ms: int | None = None
    threads: int = 8


Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


# -- what the bucket holds ----------------------------------------------------------------------


@dataclass
class _PartitionObjects:
    """The objects of one partition folder, by segment stem (start offset, segment id)."""

    stems: dict[tuple[int, uuid.UUID], dict[str, ObjectInfo]] = field(
        default_factory=lambda: defaultdict(dict)
    )


@dataclass
class _Bucket:
    partitions: dict[tuple[str, uuid.UUID, int], _PartitionObjects] = field(
        default_factory=lambda: defaultdict(_PartitionObjects)
    )
    topic_manifests: dict[tuple[str, uuid.UUID], ObjectInfo] = field(default_factory=dict)
    unrecognized: list[str] = field(default_factory=list)
    listed: int = 0


# A partition to check: its segments in the metadata and its objects in the bucket.
_Work = tuple[TopicIdPartition, list[RemoteLogSegmentMetadata], _PartitionObjects]


def _list_bucket(
    rsm: ObjectStoreRemoteStorageManager, options: AuditOptions, progress: Progress
) -> _Bucket:
    prefix = rsm.key_prefix + (f"{options.topic}-" if options.topic is not None else "")
    bucket = _Bucket()
    for info in rsm.store.list_objects(prefix):
        bucket.listed += 1
        if bucket.listed % 10_000 == 0:
            progress(f"listed {bucket.listed} objects")
        parsed = parse_key(rsm.key_prefix, info.key)
        if parsed is None:
            if options.topic is None:
                bucket.unrecognized.append(info.key)
            continue  # with --topic: another topic's object whose name starts alike
        if options.topic is not None and parsed.topic != options.topic:
            continue
        if parsed.is_topic_manifest:
            bucket.topic_manifests[(parsed.topic, parsed.topic_id)] = info
            continue
        if options.partition is not None and parsed.partition != options.partition:
            continue
        stem = parsed.stem
        assert stem is not None and parsed.partition is not None and parsed.suffix is not None
        where = (parsed.topic, parsed.topic_id, parsed.partition)
        bucket.partitions[where].stems[stem][parsed.suffix] = info
    return bucket


# -- the audit --------------------------------------------------------------------------------


def audit(
    rsm: ObjectStoreRemoteStorageManager,
    metadata: Mapping[TopicIdPartition, Sequence[RemoteLogSegmentMetadata]],
    options: AuditOptions,
    *,
    deleted: Mapping[TopicIdPartition, RemotePartitionDeleteState] | None = None,
    progress: Progress = _quiet,
) -> AuditReport:
    """Compare ``metadata`` (every user partition's segments, as the RLMM holds them) with
    the objects of ``rsm``'s bucket.

    Args:
        deleted: the partitions with a partition-deletion state (their topics were deleted;
            no topic manifest is expected of them).

    Raises:
        RemoteStorageError: the bucket cannot be listed.
    """
    now = options.now_ms if options.now_ms is not None else time.time_ns() // 1_000_000
    deleted = deleted or {}
    report = AuditReport()
    wanted = {
        tp: list(segments)
        for tp, segments in metadata.items()
        if (options.topic is None or tp.topic == options.topic)
        and (options.partition is None or tp.partition == options.partition)
    }
    checker = _Checker(rsm, options, now, report, progress)
    with ThreadPoolExecutor(max(1, options.threads), thread_name_prefix="verify") as pool:
        checker.pool = pool
        # The metadata says which manifests to read: they are read while the bucket is
        # listed (both take time, on both sides of the connection).
        manifests = checker.start_manifest_reads(
            [md for segs in wanted.values() for md in segs if md.state == _S.COPY_SEGMENT_FINISHED]
        )
        bucket = _list_bucket(rsm, options, progress)
        report.objects_listed = bucket.listed
        progress(f"listed {bucket.listed} objects")
        if bucket.unrecognized:
            sample = ", ".join(bucket.unrecognized[:3])
            report.notes.append(
                Note(
                    "unrecognized",
                    f"{len(bucket.unrecognized)} objects under the key prefix are not of the "
                    f"layout and were left alone (e.g. {sample})",
                )
            )
        tps = set(wanted) | {
            TopicIdPartition(topic_id, topic, partition)
            for topic, topic_id, partition in bucket.partitions
        }
        work: list[_Work] = []
        for tp in sorted(tps, key=lambda tp: (tp.topic, tp.partition, tp.topic_id.bytes)):
            objects = bucket.partitions.get((tp.topic, tp.topic_id, tp.partition))
            work.append((tp, wanted.get(tp, []), objects or _PartitionObjects()))
        checker.finish_manifest_reads(manifests)
        lineages = checker.read_lineages(work)
        for tp, segments, objects in work:
            checker.partition(tp, segments, objects, lineages.get(tp))
        checker.deep_checks()
        _check_topic_manifests(rsm, bucket, wanted, deleted, report)
    return report


class _Checker:
    def __init__(
        self,
        rsm: ObjectStoreRemoteStorageManager,
        options: AuditOptions,
        now: int,
        report: AuditReport,
        progress: Progress,
    ) -> None:
        self.rsm = rsm
        self.options = options
        self.now = now
        self.report = report
        self.progress = progress
        self.pool: ThreadPoolExecutor | None = None
        self.manifests: dict[uuid.UUID, SegmentManifest | str] = {}
        self._deep: list[tuple[TopicIdPartition, RemoteLogSegmentMetadata, str, int, str]] = []

    def _find(self, tp: TopicIdPartition, kind: FindingKind, message: str, **kw: Any) -> None:
        self.report.findings.append(
            Finding(kind, tp.topic, tp.topic_id, tp.partition, message, **kw)
        )

    def _map(self, fn: Callable[[Any], Any], items: Sequence[Any], what: str) -> list[Any]:
        """``fn`` over ``items`` on the pool, in order, with progress."""
        assert self.pool is not None
        out = []
        for n, result in enumerate(self.pool.map(fn, items), 1):
            out.append(result)
            if n % 100 == 0:
                self.progress(f"{what} {n}/{len(items)}")
        return out

    def partition(
        self,
        tp: TopicIdPartition,
        segments: list[RemoteLogSegmentMetadata],
        objects: _PartitionObjects,
        lineage: dict[int, int] | None,
    ) -> None:
        before = len(self.report.findings)
        summary = PartitionSummary(tp.topic, tp.topic_id, tp.partition)
        summary.objects = sum(len(v) for v in objects.stems.values())
        for md in segments:
            summary.segments[md.state.name] = summary.segments.get(md.state.name, 0) + 1
        live = {(md.start_offset, md.segment_id): md for md in segments if md.state in LIVE_STATES}
        finished = [md for md in segments if md.state == _S.COPY_SEGMENT_FINISHED]
        summary.remote_bytes = sum(md.segment_size_in_bytes for md in finished)

        self._orphans(tp, objects, live)
        self._stuck(tp, segments)
        for md in finished:
            by_suffix = objects.stems.get((md.start_offset, md.segment_id), {})
            self._check_finished(tp, md, by_suffix, self.manifests.get(md.segment_id))
            self.report.segments_checked += 1
        self._lineage(tp, finished, lineage)
        summary.findings = len(self.report.findings) - before
        self.report.partitions.append(summary)

    # -- orphans and stuck segments -------------------------------------------------------
    def _orphans(
        self,
        tp: TopicIdPartition,
        objects: _PartitionObjects,
        live: Mapping[tuple[int, uuid.UUID], RemoteLogSegmentMetadata],
    ) -> None:
        young = 0
        live_ids = {segment_id for _, segment_id in live}
        for stem, by_suffix in sorted(objects.stems.items()):
            if stem in live:
                # Objects of a live segment with a suffix of no object of the layout: the
                # copy never names them, no reader reads them.
                strays = {s: i for s, i in by_suffix.items() if not _known_suffix(s)}
            else:
                strays = by_suffix
            # The manifest first: repair deletes in this order, as the RSM does.
            for _, info in sorted(
                strays.items(), key=lambda kv: kv[0] != ObjectSuffix.MANIFEST.value
            ):
                if info.last_modified_ms is None or self.now - info.last_modified_ms < (
                    self.options.grace_ms
                ):
                    young += 1
                    continue
                age = (self.now - info.last_modified_ms) // 1000
                why = (
                    "no object of its segment has this suffix"
                    if stem in live
                    else "belongs to no segment in the metadata"
                    if stem[1] not in live_ids
                    else "its segment id is in the metadata with another start offset"
                )
                self._find(
                    tp,
                    FindingKind.ORPHAN,
                    f"orphan object ({why}; written {age} s ago)",
                    key=info.key,
                )
        if young:
            self.report.notes.append(
                Note(
                    "young_objects",
                    f"{young} objects of no live segment are younger than the grace period "
                    "(or of unknown age) and were not judged",
                    tp.topic,
                    tp.partition,
                )
            )

    def _stuck(self, tp: TopicIdPartition, segments: Iterable[RemoteLogSegmentMetadata]) -> None:
        for md in segments:
            if md.state not in (_S.COPY_SEGMENT_STARTED, _S.DELETE_SEGMENT_STARTED):
                continue
            age = self.now - md.event_timestamp_ms
            if age < self.options.grace_ms:
                continue
            self._find(
                tp,
                FindingKind.STUCK,
                f"segment {uuid_to_base64(md.segment_id)} (offsets {md.start_offset}.."
                f"{md.end_offset}) has been {md.state.name} for {age // 1000} s",
                segment=md,
            )

    # -- finished segments ----------------------------------------------------------------
    def start_manifest_reads(
        self, finished: Sequence[RemoteLogSegmentMetadata]
    ) -> list[tuple[RemoteLogSegmentMetadata, Future[SegmentManifest | str]]]:
        """Start reading the manifest of every finished segment on the pool."""
        store = self.rsm.store

        def read(md: RemoteLogSegmentMetadata) -> SegmentManifest | str:
            key = object_key(self.rsm.key_prefix, md, ObjectSuffix.MANIFEST)
            try:
                return SegmentManifest.from_json(store.get_bytes(key), key)
            except RemoteStorageError as e:
                return str(e)  # a missing one is named from the listing

        assert self.pool is not None
        return [(md, self.pool.submit(read, md)) for md in finished]

    def finish_manifest_reads(
        self, reads: list[tuple[RemoteLogSegmentMetadata, Future[SegmentManifest | str]]]
    ) -> None:
        """Wait for the manifests (by segment id: the manifest, or why it could not be
        read)."""
        for n, (md, future) in enumerate(reads, 1):
            self.manifests[md.segment_id] = future.result()
            if n % 100 == 0:
                self.progress(f"read manifests {n}/{len(reads)}")

    def _check_finished(
        self,
        tp: TopicIdPartition,
        md: RemoteLogSegmentMetadata,
        by_suffix: Mapping[str, ObjectInfo],
        manifest: SegmentManifest | str | None,
    ) -> None:
        prefix = self.rsm.key_prefix
        sid = uuid_to_base64(md.segment_id)
        expected = list(REQUIRED_SUFFIXES)
        if not md.txn_index_empty:
            expected.append(ObjectSuffix.TRANSACTION_INDEX)
        for suffix in (*expected, ObjectSuffix.MANIFEST):
            if suffix.value not in by_suffix:
                self._find(
                    tp,
                    FindingKind.MISSING_OBJECT,
                    f"segment {sid} (offsets {md.start_offset}..{md.end_offset}, "
                    f"COPY_SEGMENT_FINISHED): object missing",
                    key=object_key(prefix, md, suffix),
                    segment=md,
                )
        log_info = by_suffix.get(ObjectSuffix.LOG.value)
        if log_info is not None and log_info.size not in (None, md.segment_size_in_bytes):
            self._find(
                tp,
                FindingKind.WRONG_SIZE,
                f"segment {sid}: {log_info.size} bytes where the metadata says "
                f"{md.segment_size_in_bytes}",
                key=log_info.key,
                segment=md,
            )
        if manifest is None or ObjectSuffix.MANIFEST.value not in by_suffix:
            return  # none, or not listed: reported as missing above
        manifest_key = object_key(prefix, md, ObjectSuffix.MANIFEST)
        if isinstance(manifest, str):
            self._find(tp, FindingKind.BAD_MANIFEST, manifest, key=manifest_key, segment=md)
            return
        differences = _manifest_differences(manifest.metadata, md)
        missing_entries = [s.value for s in expected if s not in manifest.objects]
        if missing_entries:
            differences.append(f"no entry for {', '.join(missing_entries)}")
        if differences:
            self._find(
                tp,
                FindingKind.MANIFEST_MISMATCH,
                f"segment {sid}: the manifest disagrees with the metadata: "
                + "; ".join(differences),
                key=manifest_key,
                segment=md,
            )
        folder = partition_prefix(prefix, tp)
        for suffix, entry in manifest.objects.items():
            key = folder + entry.key
            info = _listed(by_suffix, entry.key, md)
            if info is None:
                if suffix in expected:
                    continue  # reported as missing above
                self._find(
                    tp,
                    FindingKind.MISSING_OBJECT,
                    f"segment {sid}: object named by the manifest missing",
                    key=key,
                    segment=md,
                )
                continue
            if info.size is not None and info.size != entry.size:
                self._find(
                    tp,
                    FindingKind.WRONG_SIZE,
                    f"segment {sid}: {info.size} bytes where the manifest says {entry.size}",
                    key=key,
                    segment=md,
                )
                continue
            if self.options.deep:
                self._deep.append((tp, md, key, entry.size, entry.checksum))

    def deep_checks(self) -> None:
        """Read every object queued by the checks above (in parallel) and compare its size
        and CRC32C with its manifest entry."""

        def read(task: tuple[Any, Any, str, int, str]) -> bytes | str:
            try:
                return self.rsm.store.get_bytes(task[2])
            except RemoteStorageError as e:
                return str(e)

        results = self._map(read, self._deep, "read objects")
        for task, data in zip(self._deep, results, strict=True):
            self.report.objects_read += 1
            self._deep_check(*task, data)
        self._deep = []

    def _deep_check(
        self,
        tp: TopicIdPartition,
        md: RemoteLogSegmentMetadata,
        key: str,
        size: int,
        crc: str,
        data: bytes | str,
    ) -> None:
        if isinstance(data, str):
            message = f"cannot read it: {data}"
            self._find(tp, FindingKind.WRONG_CHECKSUM, message, key=key, segment=md)
            return
        if len(data) != size:
            self._find(
                tp,
                FindingKind.WRONG_SIZE,
                f"read {len(data)} bytes where the manifest says {size}",
                key=key,
                segment=md,
            )
            return
        actual = checksum_bytes(data)
        if actual != crc:
            self._find(
                tp,
                FindingKind.WRONG_CHECKSUM,
                f"segment {uuid_to_base64(md.segment_id)}: crc32c {actual} where the manifest "
                f"says {crc}",
                key=key,
                segment=md,
            )

    # -- the lineage ----------------------------------------------------------------------
    def _lineage(
        self,
        tp: TopicIdPartition,
        finished: list[RemoteLogSegmentMetadata],
        lineage: dict[int, int] | None,
    ) -> None:
        if not finished:
            return
        if lineage is None:
            on, off = finished, []
            self.report.notes.append(
                Note(
                    "lineage_unknown",
                    "no leader-epoch-checkpoint object of the newest segments could be read: "
                    "gaps and overlaps checked on offsets alone",
                    tp.topic,
                    tp.partition,
                )
            )
        else:
            on = [md for md in finished if is_within_lineage(md, NO_END, lineage)]
            off = [md for md in finished if not is_within_lineage(md, NO_END, lineage)]
        for md in off:
            self.report.notes.append(
                Note(
                    "off_lineage",
                    f"segment {uuid_to_base64(md.segment_id)} (offsets {md.start_offset}.."
                    f"{md.end_offset}, epochs {_epochs(md)}) is outside the current "
                    f"leader-epoch lineage (a diverged branch): {_fate(md, lineage or {})}; "
                    "tierlog restore leaves it out",
                    tp.topic,
                    tp.partition,
                )
            )
        ordered = sorted(on, key=lambda m: (m.start_offset, m.end_offset))
        covering: RemoteLogSegmentMetadata | None = None
        for md in ordered:
            if covering is not None:
                if md.start_offset > covering.end_offset + 1:
                    self._find(
                        tp,
                        FindingKind.GAP,
                        f"offsets {covering.end_offset + 1}..{md.start_offset - 1} are in no "
                        f"finished segment, between segments {uuid_to_base64(covering.segment_id)} "
                        f"and {uuid_to_base64(md.segment_id)}",
                        segment=md,
                    )
                elif md.start_offset <= covering.end_offset:
                    self._find(
                        tp,
                        FindingKind.OVERLAP,
                        f"offsets {md.start_offset}..{min(md.end_offset, covering.end_offset)} "
                        f"are in segments {uuid_to_base64(covering.segment_id)} and "
                        f"{uuid_to_base64(md.segment_id)}",
                        segment=md,
                    )
            if covering is None or md.end_offset > covering.end_offset:
                covering = md

    def read_lineages(self, work: Sequence[_Work]) -> dict[TopicIdPartition, dict[int, int]]:
        """Each partition's current lineage (filtered epoch -> start offset): the
        ``leader-epoch-checkpoint`` object of its newest leader's segment, checked against
        that segment's manifest; the next newest when it cannot be read (read in
        parallel). Partitions without a readable one are left out."""
        store = self.rsm.store

        def read(item: tuple[TopicIdPartition, list[RemoteLogSegmentMetadata]]) -> Any:
            tp, candidates = item
            for md in candidates:
                manifest = self.manifests.get(md.segment_id)
                if not isinstance(manifest, SegmentManifest):
                    continue
                entry = manifest.objects.get(ObjectSuffix.LEADER_EPOCH)
                if entry is None:
                    continue
                key = partition_prefix(self.rsm.key_prefix, tp) + entry.key
                try:
                    data = store.get_bytes(key)
                    entry.verify(data, key)
                    entries = LeaderEpochCheckpointFile.decode(data, key)
                except (RemoteStorageError, CoreError, ValueError):
                    continue
                if entries:
                    return filtered_leader_epochs({e.epoch: e.start_offset for e in entries})
            return None

        items = []
        for tp, segments, _ in work:
            finished = [md for md in segments if md.state == _S.COPY_SEGMENT_FINISHED]
            newest_first = sorted(
                finished,
                key=lambda m: (max(m.segment_leader_epochs), m.end_offset, m.event_timestamp_ms),
                reverse=True,
            )
            if newest_first:
                items.append((tp, newest_first[:LINEAGE_CANDIDATES]))
        results = self._map(read, items, "read lineages")
        return {tp: lineage for (tp, _), lineage in zip(items, results, strict=True) if lineage}


def _known_suffix(suffix: str) -> bool:
    return suffix in ObjectSuffix._value2member_map_


def _listed(
    by_suffix: Mapping[str, ObjectInfo], name: str, md: RemoteLogSegmentMetadata
) -> ObjectInfo | None:
    """The listed object a manifest entry names (``name`` is relative to the partition
    folder: ``<startOffset>-<segmentId>.<suffix>``)."""
    stem = f"{md.start_offset:020d}-{uuid_to_base64(md.segment_id)}."
    if not name.startswith(stem):
        return None
    return by_suffix.get(name[len(stem) :])


def _fate(md: RemoteLogSegmentMetadata, lineage: Mapping[int, int]) -> str:
    """What the leader's expiration task does with a finished segment off the lineage
    (``tiered.rlm_tasks.ExpirationTask``)."""
    if has_truncated_epoch(md, lineage):
        earliest, latest = min(lineage), max(lineage)
        truncated = [
            e
            for e in filtered_leader_epochs(md.segment_leader_epochs)
            if earliest < e < latest and e not in lineage
        ]
        return (
            f"it holds epoch {','.join(map(str, truncated))}, which the lineage truncated away: "
            "the leader's expiration deletes it once the lineage's segments or local log hold "
            "the offsets it may serve"
        )
    # Typically a deposed leader's copy of records an unclean election truncated, in epochs
    # the lineage still has: a later unclean election may make it the lineage's again
    # (KIP-405's scenario 5), so it is kept until retention moves the log start past it.
    return (
        "the leader's expiration keeps it (a later unclean election may need it) until the "
        "log start offset passes it"
    )


def _epochs(md: RemoteLogSegmentMetadata) -> str:
    return ",".join(f"{e}@{o}" for e, o in md.segment_leader_epochs.items())


def _manifest_differences(
    seen: RemoteLogSegmentMetadata, md: RemoteLogSegmentMetadata
) -> list[str]:
    """Fields of a manifest's segment that differ from the metadata's (state, broker, event
    time and custom metadata change after the copy and are not compared)."""
    pairs = {
        "topic id": (seen.topic_id_partition.topic_id, md.topic_id_partition.topic_id),
        "topic": (seen.topic_id_partition.topic, md.topic_id_partition.topic),
        "partition": (seen.topic_id_partition.partition, md.topic_id_partition.partition),
        "segment id": (seen.segment_id, md.segment_id),
        "start offset": (seen.start_offset, md.start_offset),
        "end offset": (seen.end_offset, md.end_offset),
        "size": (seen.segment_size_in_bytes, md.segment_size_in_bytes),
        "leader epochs": (dict(seen.segment_leader_epochs), dict(md.segment_leader_epochs)),
        "max timestamp": (seen.max_timestamp_ms, md.max_timestamp_ms),
        "txn index empty": (seen.txn_index_empty, md.txn_index_empty),
    }
    return [f"{name} {a} (metadata: {b})" for name, (a, b) in pairs.items() if a != b]


def _check_topic_manifests(
    rsm: ObjectStoreRemoteStorageManager,
    bucket: _Bucket,
    metadata: Mapping[TopicIdPartition, Sequence[RemoteLogSegmentMetadata]],
    deleted: Mapping[TopicIdPartition, RemotePartitionDeleteState],
    report: AuditReport,
) -> None:
    """Every topic with finished segments (and no partition deletion) has a manifest that
    names it and counts at least the partitions seen."""
    partitions_seen: dict[tuple[str, uuid.UUID], int] = defaultdict(int)
    live_topics: set[tuple[str, uuid.UUID]] = set()
    for tp, segments in metadata.items():
        key = (tp.topic, tp.topic_id)
        partitions_seen[key] = max(partitions_seen[key], tp.partition + 1)
        if tp not in deleted and any(md.state == _S.COPY_SEGMENT_FINISHED for md in segments):
            live_topics.add(key)
    for topic, topic_id, partition in bucket.partitions:
        partitions_seen[(topic, topic_id)] = max(partitions_seen[(topic, topic_id)], partition + 1)
    for topic, topic_id in sorted(live_topics | set(bucket.topic_manifests)):
        key = topic_manifest_key(rsm.key_prefix, topic, topic_id)
        if (topic, topic_id) not in bucket.topic_manifests:
            report.findings.append(
                Finding(
                    FindingKind.TOPIC_MANIFEST,
                    topic,
                    topic_id,
                    None,
                    "no topic manifest: tierlog restore cannot recreate the topic from the "
                    "bucket alone (a broker writes it when tiering starts for the topic)",
                    key=key,
                )
            )
            continue
        try:
            manifest = rsm.read_topic_manifest(topic, topic_id)
        except RemoteStorageError as e:
            report.findings.append(
                Finding(FindingKind.TOPIC_MANIFEST, topic, topic_id, None, str(e), key=key)
            )
            continue
        problem = _topic_manifest_problem(manifest, topic, topic_id, partitions_seen)
        if problem is not None:
            report.findings.append(
                Finding(FindingKind.TOPIC_MANIFEST, topic, topic_id, None, problem, key=key)
            )


def _topic_manifest_problem(
    manifest: TopicManifest | None,
    topic: str,
    topic_id: uuid.UUID,
    partitions_seen: Mapping[tuple[str, uuid.UUID], int],
) -> str | None:
    if manifest is None:
        return "the topic manifest disappeared while it was being checked"
    if (manifest.topic, manifest.topic_id) != (topic, topic_id):
        return (
            f"the topic manifest names topic {manifest.topic} ({uuid_to_base64(manifest.topic_id)})"
        )
    seen = partitions_seen.get((topic, topic_id), 0)
    if manifest.partitions < seen:
        return (
            f"the topic manifest says {manifest.partitions} partitions, but partition "
            f"{seen - 1} has remote data"
        )
    return None


# -- repair -------------------------------------------------------------------------------------


@dataclass
class RepairResult:
    dry_run: bool
    deleted_objects: list[str] = field(default_factory=list)
    finished_deletions: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    not_repaired: list[tuple[Finding, str]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.dry_run and not self.not_repaired


def repair(
    rsm: ObjectStoreRemoteStorageManager,
    report: AuditReport,
    *,
    rlmm: RemoteLogMetadataManager | None,
    broker_id: int,
    dry_run: bool,
    metadata_unwritable: str | None = None,
    progress: Progress = _quiet,
    clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> RepairResult:
    """Delete the orphans of ``report`` and finish its stuck deletions.

    Orphans are deleted manifests first. A stuck DELETE_SEGMENT_STARTED segment gets its
    objects deleted through the RSM, then DELETE_SEGMENT_FINISHED through ``rlmm`` (which
    must have loaded the segment's partition), in ``broker_id``'s name; with
    ``metadata_unwritable`` (why the metadata cannot be written) it is left. Every other
    finding is left as it is. With ``dry_run`` nothing changes: the result says what would
    be done.

    Raises:
        RemoteStorageError: a delete or a metadata write failed (running again resumes).
    """
    result = RepairResult(dry_run)
    orphans = [str(f.key) for f in report.findings if f.kind is FindingKind.ORPHAN and f.key]
    # Every manifest before any other object: a copy stops counting as complete first.
    orphans.sort(key=lambda key: not key.endswith("." + ObjectSuffix.MANIFEST.value))
    for at in range(0, len(orphans), DELETE_BATCH):
        keys = orphans[at : at + DELETE_BATCH]
        if not dry_run:
            rsm.store.delete(keys)
            progress(f"deleted {at + len(keys)}/{len(orphans)} orphans")
        result.deleted_objects += keys
    for finding in report.findings:
        if finding.kind is FindingKind.ORPHAN:
            continue
        if not finding.repairable:
            result.not_repaired.append((finding, _why_not(finding)))
            continue
        md = finding.segment
        assert md is not None
        if metadata_unwritable is not None:
            result.not_repaired.append((finding, metadata_unwritable))
            continue
        if not dry_run:
            if rlmm is None:
                raise ValueError("finishing a deletion needs the metadata manager")
            rsm.delete_log_segment_data(md)
            rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    md.remote_log_segment_id, clock(), None, _S.DELETE_SEGMENT_FINISHED, broker_id
                )
            ).result(timeout=RLMM_WRITE_TIMEOUT_S)
        result.finished_deletions.append(md)
    return result


def _why_not(finding: Finding) -> str:
    if finding.kind is FindingKind.STUCK:
        return (
            "a copy left COPY_SEGMENT_STARTED is deleted by the partition leader's copy task "
            "at its next run"
        )
    return "repair deletes orphans and finishes stuck deletions only"
