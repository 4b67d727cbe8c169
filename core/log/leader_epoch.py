"""The leader-epoch cache of a partition and its ``leader-epoch-checkpoint`` file (KIP-101).

The cache maps each leader epoch to the first offset written in it. Followers use it to
find where their log diverges from the leader's (OffsetsForLeaderEpoch, ``end_offset_for``),
consumers to detect truncation, and tiered storage to record which epochs own a segment.

The file is a Kafka text checkpoint (see ``core.log.checkpoints``), version 0, one entry per
line::

    0
    <count>
    <epoch> <start offset>
    ...

Semantics follow Kafka's ``LeaderEpochFileCache``. One difference: truncations flush the
checkpoint synchronously in the calling thread, where Kafka schedules the flush on a
background thread; callers that cannot block should call from an executor.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from core.log.checkpoints import (
    INT32_MAX,
    INT64_MAX,
    CheckpointFile,
    CheckpointFormat,
    parse_decimal,
    split_fields,
)

LEADER_EPOCH_CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Leader ``epoch`` started at ``start_offset`` (the first offset written in it)."""

    epoch: int
    start_offset: int

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {self}: epoch and offset must be >= 0")


def _to_line(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


def _from_line(line: str) -> EpochEntry | None:
    fields = split_fields(line)
    if len(fields) != 2:
        return None
    # Negative values parse in Kafka but are rejected when assigned; reject them on read.
    epoch = parse_decimal(fields[0], 0, INT32_MAX)
    offset = parse_decimal(fields[1], 0, INT64_MAX)
    if epoch is None or offset is None:
        return None
    return EpochEntry(epoch, offset)


LEADER_EPOCH_CHECKPOINT_FORMAT: CheckpointFormat[EpochEntry] = CheckpointFormat(
    LEADER_EPOCH_CHECKPOINT_VERSION, _to_line, _from_line
)


class LeaderEpochCheckpointFile:
    """The ``leader-epoch-checkpoint`` file of one partition."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = CheckpointFile(path, LEADER_EPOCH_CHECKPOINT_FORMAT)

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> list[EpochEntry]:
        """The entries in file order; a missing file reads as ``[]``.

        Raises:
            CorruptCheckpointError: the file is malformed; the message names file and line.
            KafkaStorageError: the file exists but cannot be read.
        """
        return self._file.read()

    def write(self, entries: Iterable[EpochEntry], *, durable: bool = True) -> None:
        """Replace the file with ``entries`` atomically.

        Raises:
            KafkaStorageError: the file could not be written; the old file is then intact.
        """
        self._file.write(entries, durable=durable)

    @staticmethod
    def encode(entries: Iterable[EpochEntry]) -> bytes:
        """The file's bytes for ``entries``; tiered storage ships these next to a segment."""
        return LEADER_EPOCH_CHECKPOINT_FORMAT.encode(entries)

    @staticmethod
    def decode(data: bytes, source: str = "<bytes>") -> list[EpochEntry]:
        """Parse file bytes (for instance a copy fetched from the remote tier).

        Raises:
            CorruptCheckpointError: the bytes are malformed; the message names ``source``.
        """
        return LEADER_EPOCH_CHECKPOINT_FORMAT.decode(data, source)


def _truncate_from_start(entries: list[EpochEntry], start_offset: int) -> bool:
    """Kafka's truncateFromStart on a sorted list, in place; True if anything was removed.

    Entries starting at or below ``start_offset`` go; the last of them comes back starting at
    ``start_offset``, because its epoch still owns the offsets from there on.
    """
    removed = 0
    while removed < len(entries) and entries[removed].start_offset <= start_offset:
        removed += 1
    if removed == 0:
        return False
    kept = EpochEntry(entries[removed - 1].epoch, start_offset)
    entries[:removed] = [kept]
    return True


def _truncate_from_end(entries: list[EpochEntry], end_offset: int) -> bool:
    """Kafka's truncateFromEnd on a sorted list, in place: drop entries starting >= end_offset.

    A negative ``end_offset`` is a no-op, as in Kafka.
    """
    if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
        return False
    while entries and entries[-1].start_offset >= end_offset:
        entries.pop()
    return True


class LeaderEpochFileCache:
    """Leader epoch -> start offset for one partition, backed by its checkpoint file.

    Entries are kept sorted by epoch, and start offsets are strictly increasing with epochs
    (``assign`` removes entries that would break that). Every method is thread-safe: the
    fetch path reads while the append path assigns. Methods that change the cache write the
    checkpoint before returning.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile) -> None:
        """Load the cache from ``checkpoint``; entries are applied with ``assign``'s rules.

        Raises:
            CorruptCheckpointError, KafkaStorageError: as ``LeaderEpochCheckpointFile.read``.
        """
        self.checkpoint = checkpoint
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        for entry in checkpoint.read():
            self._assign(entry)

    # -- writes ------------------------------------------------------------------------------
    def _is_update_needed(self, entry: EpochEntry) -> bool:
        if not self._entries:
            return True
        latest = self._entries[-1]
        return entry.epoch != latest.epoch or entry.start_offset < latest.start_offset

    def _assign(self, entry: EpochEntry) -> bool:
        if not self._is_update_needed(entry):
            return False
        # Kafka's maybeTruncateNonMonotonicEntries: drop, from the end, entries whose epoch or
        # start offset is not below the new one, so both columns stay increasing.
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch
            or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
        self._entries.append(entry)
        return True

    def _flush(self) -> None:
        self.checkpoint.write(self._entries)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; flush the checkpoint if it changed.

        A no-op when ``epoch`` is the latest epoch and ``start_offset`` is not below its start
        (the append path calls this for every batch). Otherwise entries with an epoch >=
        ``epoch`` or a start offset >= ``start_offset`` are removed first, then the entry is
        appended, as Kafka's ``assign`` does.

        Returns:
            True if the cache changed.

        Raises:
            ValueError: a negative epoch or offset.
            KafkaStorageError: the checkpoint could not be written (the cache has changed).
        """
        entry = EpochEntry(epoch, start_offset)
        with self._lock:
            if not self._assign(entry):
                return False
            self._flush()
            return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries with a start offset >= ``end_offset`` (log truncated to it).

        A negative ``end_offset`` is a no-op, as in Kafka.

        Raises:
            KafkaStorageError: the checkpoint could not be written.
        """
        with self._lock:
            if _truncate_from_end(self._entries, end_offset):
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly below ``start_offset`` (log start moved up to it).

        Entries starting at or below ``start_offset`` are removed, and the last of them is
        kept with its start moved to ``start_offset``; exclusive as in Kafka, so an entry
        starting exactly at ``start_offset`` stays as it is.

        Raises:
            KafkaStorageError: the checkpoint could not be written.
        """
        with self._lock:
            if _truncate_from_start(self._entries, start_offset):
                self._flush()

    def clear_and_flush(self) -> None:
        """Remove every entry and write the empty checkpoint.

        Raises:
            KafkaStorageError: the checkpoint could not be written.
        """
        with self._lock:
            self._entries.clear()
            self._flush()

    # -- reads -------------------------------------------------------------------------------
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, by increasing epoch."""
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the latest entry: the epoch being written to on a leader."""
        latest = self.latest_entry
        return None if latest is None else latest.epoch

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        with self._lock:
            i = self._index_of_epoch(epoch)
            return self._entries[i] if i is not None else None

    def previous_epoch(self, epoch: int) -> int | None:
        """The highest cached epoch below ``epoch``."""
        with self._lock:
            i = bisect.bisect_left(self._epochs(), epoch)
            return self._entries[i - 1].epoch if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The lowest cached epoch above ``epoch``."""
        with self._lock:
            i = bisect.bisect_right(self._epochs(), epoch)
            return self._entries[i].epoch if i < len(self._entries) else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the latest entry starting at or below it.

        None when ``offset`` lies below the earliest entry or the cache is empty.
        """
        with self._lock:
            i = bisect.bisect_right([e.start_offset for e in self._entries], offset)
            return self._entries[i - 1].epoch if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetFor: ``(epoch, end offset)`` answering OffsetsForLeaderEpoch.

        - ``requested_epoch`` is UNDEFINED_EPOCH (-1): ``(-1, -1)``.
        - it is the latest epoch: ``(requested_epoch, log_end_offset)``; the leader is still
          writing to it.
        - no cached epoch is above it (it is above the latest, or the cache is empty):
          ``(-1, -1)``.
        - it is below every cached epoch: ``(requested_epoch, start of the earliest entry)``;
          the data of older epochs is gone, so the follower restarts from the leader's start.
        - otherwise: ``(largest cached epoch <= requested, start of the next higher epoch)``.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self._entries and self._entries[-1].epoch == requested_epoch:
                return requested_epoch, log_end_offset
            epochs = self._epochs()
            higher = bisect.bisect_right(epochs, requested_epoch)
            if higher == len(epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            higher_start = self._entries[higher].start_offset
            if higher == 0:
                return requested_epoch, higher_start
            return self._entries[higher - 1].epoch, higher_start

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """Kafka's epochEntriesInRange: entries owning offsets in ``[start_offset, end_offset)``.

        The cache is unchanged. The entry owning ``start_offset`` is returned starting at
        ``start_offset``; a negative ``start_offset`` keeps the start of the cache as it is
        (tiered storage uses that to ship the checkpoint truncated to a segment's end).
        Entries starting at or after ``end_offset`` are left out.
        """
        with self._lock:
            entries = list(self._entries)
        if start_offset >= 0:
            _truncate_from_start(entries, start_offset)
        _truncate_from_end(entries, end_offset)
        return entries

    def entries_for_range(self, start_offset: int, end_offset_inclusive: int) -> dict[int, int]:
        """Epoch -> start offset of the epochs owning offsets in ``[start, end]`` (inclusive).

        This is KIP-405's ``segmentLeaderEpochs`` for a segment spanning those offsets: the
        first epoch starts at ``start_offset``. Insertion order is by increasing epoch.

        Raises:
            ValueError: ``end_offset_inclusive`` < ``start_offset``.
        """
        if end_offset_inclusive < start_offset:
            raise ValueError(
                f"end offset {end_offset_inclusive} is below start offset {start_offset}"
            )
        entries = self.epoch_entries_in_range(start_offset, end_offset_inclusive + 1)
        return {e.epoch: e.start_offset for e in entries}

    # -- helpers (lock held) -----------------------------------------------------------------
    def _epochs(self) -> list[int]:
        return [e.epoch for e in self._entries]

    def _index_of_epoch(self, epoch: int) -> int | None:
        epochs = self._epochs()
        i = bisect.bisect_left(epochs, epoch)
        return i if i < len(epochs) and epochs[i] == epoch else None

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.checkpoint.path}, {self.entries()})"
