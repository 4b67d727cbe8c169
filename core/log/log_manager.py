"""LogManager: the partition logs of every log dir, loaded in parallel, kept by background tasks.

Start-up locks each log dir, checks its ``meta.properties``, reads the per-dir checkpoints
and opens every ``<topic>-<partition>`` directory; a dir without the clean-shutdown marker
is recovered from its recovery points. Background tasks flush (``flush.ms``), write the
checkpoints and apply retention. A clean shutdown flushes everything, writes the
checkpoints and leaves the marker so the next start skips recovery.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from core.clock import now_ms
from core.errors import CoreError, KafkaStorageError, LogDirNotUsableError
from core.fs import atomic_write, fsync_dir
from core.kafka_uuid import uuid_to_base64
from core.log import meta_properties
from core.log.checkpoints import OffsetCheckpointFile
from core.log.cleaner import CleanerConfig, LogCleaner
from core.log.config import LogConfig
from core.log.files import (
    CLEAN_SHUTDOWN_MARKER,
    KNOWN_NON_PARTITION_DIRS,
    LOG_START_OFFSET_CHECKPOINT,
    MAX_PARTITION,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    is_deleted_partition_dir,
    parse_partition_dir,
    partition_dir_name,
)
from core.log.partition_log import PartitionLog
from core.scheduler import Scheduler
from core.topic_name import validate_topic_name

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
LOCK_FILE = ".lock"


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """Broker-level settings of the log layer, with Kafka's defaults."""

    log_dirs: tuple[Path, ...]
    node_id: int = 1
    cluster_id: str = ""
    num_recovery_threads_per_data_dir: int = 2
    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    flush_scheduler_interval_ms: int = (1 << 63) - 1  # log.flush.scheduler.interval.ms
    flush_offset_checkpoint_interval_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    flush_start_offset_checkpoint_interval_ms: int = 60_000
    high_watermark_checkpoint_interval_ms: int = 5_000  # replica.high.watermark.checkpoint...
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms
    # producer.id.expiration.check.interval.ms
    producer_id_expiration_check_interval_ms: int = 600_000
    default_log_config: LogConfig = field(default_factory=LogConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)  # log.cleaner.*


def _read_or_reset(path: Path, reset: str) -> dict[TopicPartition, int]:
    """A recovery-point or log-start-offset checkpoint, or none when it cannot be read.

    Kafka's LogManager.loadLogs does the same for these two files: it warns and goes on as
    if they were absent, which costs a full recovery from offset 0, or a log start at the
    first segment, and loses nothing.
    """
    try:
        return OffsetCheckpointFile(path).read()
    except KafkaStorageError as e:  # CorruptCheckpointError included
        log.warning("ignoring checkpoint %s (%s): %s", path, e, reset)
        return {}


class LogManager:
    """Owns every PartitionLog of this broker.

    Args:
        config: the log-layer settings.
        topic_config: the effective LogConfig of a topic (topic overrides over broker
            defaults); defaults to the broker default for every topic.
    """

    def __init__(
        self,
        config: LogManagerConfig,
        *,
        topic_config: Callable[[str], LogConfig] | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        if not config.log_dirs:
            raise LogDirNotUsableError("log.dirs is empty: at least one log dir is needed")
        self.config = config
        self.clock = clock
        self._topic_config = topic_config or (lambda _topic: config.default_log_config)
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._lock = threading.RLock()
        self._lock_files: list[int] = []
        self.scheduler = Scheduler(threads=2, name="log-manager")
        self.cluster_id = config.cluster_id or self._existing_cluster_id() or _new_cluster_id()
        self._started = False
        self._shut_down = False
        # Logs whose recovery point is below their log end after loading (recovered, or
        # loaded without a clean shutdown): flushed and checkpointed once started.
        self._recovered: list[PartitionLog] = []
        self.log_dirs = [self._prepare_dir(Path(d)) for d in config.log_dirs]
        self._load_all()
        self.cleaner = LogCleaner(config.cleaner, self.all_logs, clock)

    # -- start-up --------------------------------------------------------------------------
    def _existing_cluster_id(self) -> str | None:
        for d in self.config.log_dirs:
            try:
                mp = meta_properties.read(Path(d) / META_PROPERTIES)
            except CoreError:
                continue
            if mp is not None and mp.cluster_id:
                return mp.cluster_id
        return None

    def _prepare_dir(self, directory: Path) -> Path:
        """Create, lock and identify one log dir, or fail naming it."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
            probe = directory / f".probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise LogDirNotUsableError(f"log dir {directory} is not usable: {e}") from e
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise LogDirNotUsableError(
                f"log dir {directory} is locked by another process (another broker?)"
            ) from e
        self._lock_files.append(fd)
        path = directory / META_PROPERTIES
        existing = meta_properties.read(path)
        if existing is None:
            meta_properties.write(
                path,
                meta_properties.MetaProperties(
                    node_id=self.config.node_id,
                    cluster_id=self.cluster_id,
                    directory_id=meta_properties.random_directory_id(),
                ),
            )
        else:
            meta_properties.check_matches(
                directory, existing, node_id=self.config.node_id, cluster_id=self.cluster_id
            )
        return directory

    def _load_all(self) -> None:
        threads = max(1, self.config.num_recovery_threads_per_data_dir) * len(self.log_dirs)
        jobs = []
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="log-recovery") as pool:
            for directory in self.log_dirs:
                marker = directory / CLEAN_SHUTDOWN_MARKER
                clean = marker.exists()
                recovery = _read_or_reset(
                    directory / RECOVERY_POINT_CHECKPOINT,
                    "recovering every segment from offset 0",
                )
                starts = _read_or_reset(
                    directory / LOG_START_OFFSET_CHECKPOINT,
                    "each log starts at its first segment (or its remote start)",
                )
                hws = OffsetCheckpointFile(directory / REPLICATION_OFFSET_CHECKPOINT).read()
                children = _partition_dirs(directory)
                if children and not clean:
                    log.warning(
                        "%s: no clean-shutdown marker; recovering unflushed segments", directory
                    )
                for child, tp in children:
                    jobs.append(
                        pool.submit(
                            self._open_log,
                            child,
                            tp,
                            clean,
                            recovery.get(tp, 0),
                            starts.get(tp, 0),
                            # No checkpointed high watermark: 0 (the log start), as Kafka's
                            # Partition does, never the log end, which may hold offsets no
                            # other replica has.
                            hws.get(tp, 0),
                        )
                    )
            for job in jobs:
                plog = job.result()
                self._logs[(plog.topic, plog.partition)] = plog
                if plog.recovery_point < plog.log_end_offset:
                    self._recovered.append(plog)
        for directory in self.log_dirs:
            # Removed only now: a crash during loading must recover again next time.
            (directory / CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)
            for child in directory.iterdir():
                if child.is_dir() and is_deleted_partition_dir(child.name):
                    self.scheduler.schedule_once("delete-dir", lambda c=child: _rmtree(c))
        log.info("loaded %d partition logs from %d log dirs", len(self._logs), len(self.log_dirs))

    def _open_log(
        self,
        directory: Path,
        tp: TopicPartition,
        clean: bool,
        recovery_point: int,
        log_start_offset: int,
        high_watermark: int | None,
    ) -> PartitionLog:
        return PartitionLog(
            directory,
            tp[0],
            tp[1],
            self._topic_config(tp[0]),
            scheduler=self.scheduler,
            log_start_offset=log_start_offset,
            recovery_point=recovery_point,
            high_watermark=high_watermark,
            had_clean_shutdown=clean,
            producer_id_expiration_ms=self.config.producer_id_expiration_ms,
            clock=self.clock,
        )

    def startup(self) -> None:
        """Start the periodic flush, checkpoint and retention tasks."""
        if self._started:
            return
        self._started = True
        c = self.config
        self.cleaner.startup()
        if self._recovered:
            self.scheduler.schedule_once("flush-recovered-logs", self._flush_recovered_logs)
        self.scheduler.schedule(
            "log-retention",
            self.cleanup_logs,
            c.retention_check_interval_ms,
            c.retention_check_interval_ms,
        )
        if c.flush_scheduler_interval_ms < (1 << 62):
            self.scheduler.schedule(
                "log-flusher",
                self.flush_dirty_logs,
                c.flush_scheduler_interval_ms,
                c.flush_scheduler_interval_ms,
            )
        self.scheduler.schedule(
            "recovery-point-checkpoint",
            self.checkpoint_recovery_points,
            c.flush_offset_checkpoint_interval_ms,
            c.flush_offset_checkpoint_interval_ms,
        )
        self.scheduler.schedule(
            "log-start-offset-checkpoint",
            self.checkpoint_log_start_offsets,
            c.flush_start_offset_checkpoint_interval_ms,
            c.flush_start_offset_checkpoint_interval_ms,
        )
        self.scheduler.schedule(
            "producer-id-expiration",
            self.remove_expired_producers,
            c.producer_id_expiration_check_interval_ms,
            c.producer_id_expiration_check_interval_ms,
        )
        self.scheduler.schedule(
            "high-watermark-checkpoint",
            self.checkpoint_high_watermarks,
            c.high_watermark_checkpoint_interval_ms,
            c.high_watermark_checkpoint_interval_ms,
        )

    # -- logs ------------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        with self._lock:
            return list(self._logs.values())

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None
    ) -> PartitionLog:
        """The log of a partition, created in the least-loaded log dir if it does not exist.

        Raises:
            As ``get_or_create_logs``.
        """
        return self.get_or_create_logs(topic, [partition], config)[0]

    def get_or_create_logs(
        self, topic: str, partitions: Iterable[int], config: LogConfig | None = None
    ) -> list[PartitionLog]:
        """The logs of several partitions of a topic, each created where missing in the
        least-loaded log dir. Each log dir that received one is fsynced once at the end.

        Raises:
            InvalidTopicError: ``topic`` is not a legal topic name. Checked here too, the one
                place partition directories are made: a directory the loader would not
                recognise must never be created, nor a name that cannot be written to the
                offset checkpoints.
            ValueError: a partition is not in 0..2^31-1.
            KafkaStorageError: a partition directory could not be created (the logs created
                before it are kept).
        """
        validate_topic_name(topic)
        partitions = list(partitions)
        for partition in partitions:
            if not 0 <= partition <= MAX_PARTITION:
                raise ValueError(f"partition {partition} of {topic} is out of range")
        with self._lock:
            counts = self._logs_per_dir()
            created_in: set[Path] = set()
            out = []
            try:
                for partition in partitions:
                    existing = self._logs.get((topic, partition))
                    if existing is not None:
                        out.append(existing)
                        continue
                    parent = min(self.log_dirs, key=lambda d: (counts[d], str(d)))
                    directory = parent / partition_dir_name(topic, partition)
                    try:
                        directory.mkdir(parents=True, exist_ok=False)
                    except OSError as e:
                        raise KafkaStorageError(f"cannot create {directory}: {e}") from e
                    created_in.add(parent)
                    plog = PartitionLog(
                        directory,
                        topic,
                        partition,
                        config or self._topic_config(topic),
                        scheduler=self.scheduler,
                        had_clean_shutdown=True,
                        producer_id_expiration_ms=self.config.producer_id_expiration_ms,
                        clock=self.clock,
                    )
                    self._logs[(topic, partition)] = plog
                    counts[parent] += 1
                    out.append(plog)
            finally:
                for parent in sorted(created_in):
                    try:
                        fsync_dir(parent)
                    except OSError as e:
                        raise KafkaStorageError(f"cannot fsync {parent}: {e}") from e
            return out

    def _logs_per_dir(self) -> dict[Path, int]:
        counts = {d: 0 for d in self.log_dirs}
        for plog in self._logs.values():
            parent = plog.dir.parent
            if parent in counts:
                counts[parent] += 1
        return counts

    def truncate_to(self, topic: str, partition: int, offset: int) -> bool:
        """Truncate a partition's log to ``offset`` (a follower after a leader change) and
        write its log dir's recovery-point and high-watermark checkpoints at once.

        Kafka's LogManager.truncateTo: cleaning of the log is stopped while segments go
        (and its cleaner checkpoint lowered to the new active segment), and the recovery
        points are checkpointed, so that a crash right after cannot start recovery above data
        that replaced what was truncated (and the log start offsets, if the truncation
        lowered one). tierlog also checkpoints the high watermarks here:
        a high watermark only ever goes down by truncation, and a stale checkpoint naming a
        higher one would, after a restart, count as committed offsets that the new leader's
        lineage never committed.

        Returns:
            True if any batch was removed (``PartitionLog.truncate_to``).

        Raises:
            KeyError: no log for the partition.
            ValueError, KafkaStorageError: as ``PartitionLog.truncate_to``.
        """
        plog = self._logs[(topic, partition)]
        start = plog.log_start_offset
        # The cleaner never touches the active segment: only a truncation reaching below it
        # must stop a cleaning in progress (Kafka's rule).
        below_active = offset < plog.active_segment.base_offset
        with self.cleaner.paused(topic, partition) if below_active else nullcontext():
            truncated = plog.truncate_to(offset)
            if truncated and below_active:
                self.cleaner.maybe_truncate_checkpoint(
                    topic, partition, plog.dir.parent, plog.active_segment.base_offset
                )
        if truncated:
            self.checkpoint_recovery_points()
            self.checkpoint_high_watermarks()
            if plog.log_start_offset != start:
                self.checkpoint_log_start_offsets()
        return truncated

    def truncate_fully_and_start_at(self, topic: str, partition: int, offset: int) -> None:
        """Empty a partition's log and restart it at ``offset`` (a follower whose fetch
        offset is out of the leader's range), then checkpoint recovery points, log start
        offsets and high watermarks, as ``truncate_to`` does (Kafka's
        LogManager.truncateFullyAndStartAt).

        Raises:
            KeyError: no log for the partition.
            ValueError, KafkaStorageError: as ``PartitionLog.truncate_fully_and_start_at``.
        """
        plog = self._logs[(topic, partition)]
        with self.cleaner.paused(topic, partition):
            plog.truncate_fully_and_start_at(offset)
            self.cleaner.maybe_truncate_checkpoint(topic, partition, plog.dir.parent, offset)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()

    def delete_log(self, topic: str, partition: int) -> bool:
        with self._lock:
            plog = self._logs.pop((topic, partition), None)
        if plog is None:
            return False
        with self.cleaner.paused(topic, partition):
            plog.delete()
        self.cleaner.forget(topic, partition, plog.dir.parent)
        return True

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        for plog in self.all_logs():
            if plog.topic == topic:
                plog.update_config(config)

    # -- background tasks ------------------------------------------------------------------
    def cleanup_logs(self) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        deleted = 0
        for plog in self.all_logs():
            if not plog.config.delete:
                continue
            try:
                deleted += plog.delete_old_segments()
            except CoreError:
                log.exception("retention failed for %s", plog)
        return deleted

    def remove_expired_producers(self) -> int:
        """Kafka's PeriodicProducerExpirationCheck over every log; returns the producers
        dropped."""
        dropped = 0
        for plog in self.all_logs():
            try:
                dropped += plog.remove_expired_producers()
            except CoreError:
                log.exception("producer expiration failed for %s", plog)
        return dropped

    def _flush_recovered_logs(self) -> None:
        """fsync what start-up recovered and checkpoint the recovery points at once.

        Recovery validated the segments after each recovery point but did not make them
        durable, so the recovery point stays where it was (Kafka's rule: it only moves
        over flushed data). Kafka then leaves it to the next flush and the periodic
        checkpoint (``log.flush.offset.checkpoint.interval.ms``, a minute): a broker killed
        again within that minute validates the same segments again, plus everything
        since, so each restart of a crash loop takes longer than the last. tierlog flushes
        the recovered logs in the background right after start-up and writes the
        checkpoint, so the next restart starts where this one ended.
        """
        logs, self._recovered = self._recovered, []
        for plog in logs:
            try:
                plog.flush()
            except CoreError:
                log.exception("flush after recovery failed for %s", plog)
        self.checkpoint_recovery_points()

    def flush_dirty_logs(self) -> None:
        for plog in self.all_logs():
            try:
                plog.flush_if_due()
            except CoreError:
                log.exception("flush failed for %s", plog)

    def _checkpoint(self, name: str, value: Callable[[PartitionLog], int]) -> None:
        by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for plog in self.all_logs():
            # Under the log's lock: a truncation lowers the log end offset, then the offsets
            # kept with it, and a checkpoint must never see the first without the second.
            with plog.lock:
                offset = value(plog)
            by_dir.setdefault(plog.dir.parent, {})[(plog.topic, plog.partition)] = offset
        for directory, offsets in by_dir.items():
            OffsetCheckpointFile(directory / name).write(offsets)

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda p: p.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda p: p.log_start_offset)

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda p: p.high_watermark)

    # -- shutdown --------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Flush and close every log, write checkpoints and the clean-shutdown markers."""
        if self._shut_down:
            return
        self._shut_down = True
        self.cleaner.shutdown()
        self.scheduler.shutdown()
        logs = self.all_logs()
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="log-close") as pool:
            list(pool.map(lambda p: p.close(), logs))
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        for directory in self.log_dirs:
            atomic_write(directory / CLEAN_SHUTDOWN_MARKER, b"")
        for fd in self._lock_files:
            os.close(fd)
        self._lock_files.clear()
        log.info("log manager shut down cleanly")

    def close_without_marker(self) -> None:
        """Release files without a clean shutdown (tests simulating a crash in-process)."""
        self.cleaner.shutdown()
        self.scheduler.shutdown()
        for fd in self._lock_files:
            os.close(fd)
        self._lock_files.clear()
        self._shut_down = True


def _partition_dirs(directory: Path) -> list[tuple[Path, TopicPartition]]:
    """The partition directories of a log dir, each with its topic and partition.

    Any other directory is logged with its path and skipped, its content left as it is;
    directories renamed for deletion and those other layers keep here are skipped quietly.
    Apache Kafka's LogManager.loadLogs instead stops the broker's start-up on a directory
    whose name is not ``<topic>-<partition>`` (UnifiedLog.parseTopicPartitionName throws
    "Found directory ..., '...' is not in the form of topic-partition ..."), and it does not
    check the topic name at all. tierlog goes on: a stray directory (one planted by hand, or
    left by an older tierlog that accepted a topic name ending in a newline) must not keep
    every partition of the broker offline, and loading one whose topic name is illegal would
    break the offset checkpoints, whose fields are separated by whitespace.
    """
    found = []
    for child in sorted(directory.iterdir()):
        if not child.is_dir() or child.name in KNOWN_NON_PARTITION_DIRS:
            continue
        if is_deleted_partition_dir(child.name):
            continue
        tp = parse_partition_dir(child.name)
        if tp is None:
            # %r: the name may hold a newline or other control characters, which must not
            # forge lines in the broker's log.
            log.warning(
                "%r is not a partition directory (<topic>-<partition>, with a legal topic "
                "name and partition number); skipped and left as it is",
                str(child),
            )
            continue
        found.append((child, tp))
    return found


def _new_cluster_id() -> str:
    return uuid_to_base64(uuid.uuid4())


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
