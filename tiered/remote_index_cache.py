"""RemoteIndexCache: the offset, time and transaction indexes of remote segments, on disk.

Kafka's RemoteIndexCache. Remote reads need a segment's byte position for an offset, and
ListOffsets its time index; fetching those from the remote tier on every read would cost a
round trip each, so the first use downloads them into ``<log dir>/remote-log-index-cache/``
and later uses read the copy kept in memory (the index bytes themselves, searched in place,
so that the byte bound below also bounds the cache's memory). As in Kafka the three indexes
of a segment are fetched together; READ_COMMITTED fetches need the transaction index, and a segment
without one (no aborted transaction) is cached as an empty file.

Files are named ``<20-digit start offset>_<segment uuid>.index`` / ``.timeindex`` /
``.txnindex``, written
atomically (temp file, fsync, rename, fsync of the directory). The cache is bounded by the
total size of its files (``remote.log.index.file.cache.total.size.bytes``) and evicts the
least recently used segment first (size-weighted LRU). Files are not fsynced (a cache):
after a clean shutdown (``close()`` leaves a marker) complete entries are kept, so a restart
does not download them again, and leftovers of an interrupted write (``*.tmp``) and
incomplete entries (a segment missing one of its three files) are deleted; after a crash
the whole cache is dropped, as its files may have lost their data.

Index layouts (Kafka's, big-endian)::

    .index      8-byte entries:  int32 relativeOffset, int32 position
    .timeindex  12-byte entries: int64 timestamp,      int32 relativeOffset
    .txnindex   34-byte entries: see core.log.txn_index
"""

from __future__ import annotations

import logging
import struct
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core.fs import TMP_SUFFIX, atomic_write
from core.log.files import REMOTE_LOG_INDEX_CACHE_DIR
from core.log.txn_index import TransactionIndex
from tiered.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)

log = logging.getLogger(__name__)

DIR_NAME = REMOTE_LOG_INDEX_CACHE_DIR  # the LogManager skips it when loading partitions
OFFSET_SUFFIX = ".index"
TIME_SUFFIX = ".timeindex"
TXN_SUFFIX = ".txnindex"
SUFFIXES = (OFFSET_SUFFIX, TIME_SUFFIX, TXN_SUFFIX)
# Written by close(); a cache directory without it after a restart may hold files whose
# data a crash lost (they are not fsynced), so it is emptied instead of trusted.
CLEAN_MARKER = ".clean-shutdown"

_OFFSET_ENTRY = struct.Struct(">ii")  # relativeOffset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset


def _valid_entries(data: bytes, entry: struct.Struct, increasing: int, strict: int) -> int:
    """How many leading entries of an index file are valid: the ``increasing`` field of each
    entry grows strictly (``strict``) or not at all below the previous one, and a
    preallocated zero tail stops the count."""
    usable = len(data) - len(data) % entry.size
    count = 0
    previous: tuple[int, ...] | None = None
    for fields in entry.iter_unpack(data[:usable]):
        if previous is not None and (
            fields[strict] <= previous[strict] or fields[increasing] < previous[increasing]
        ):
            break
        previous = fields
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class OffsetIndexView:
    """A remote offset index kept as its file bytes (8 bytes an entry, so the cache's byte
    bound is also its memory bound), searched in place."""

    base_offset: int
    data: bytes
    count: int

    @classmethod
    def parse(cls, base_offset: int, data: bytes) -> OffsetIndexView:
        return cls(base_offset, bytes(data), _valid_entries(data, _OFFSET_ENTRY, 0, 0))

    @property
    def relatives(self) -> list[int]:
        return [self._entry(i)[0] for i in range(self.count)]

    def _entry(self, i: int) -> tuple[int, int]:
        return _OFFSET_ENTRY.unpack_from(self.data, i * _OFFSET_ENTRY.size)  # type: ignore[return-value]

    def lookup(self, offset: int) -> int:
        """The position of the last entry at or below ``offset`` (0 when there is none)."""
        target = offset - self.base_offset
        lo, hi = 0, self.count  # the first entry above target, by bisection
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entry(mid)[0] <= target:
                lo = mid + 1
            else:
                hi = mid
        return self._entry(lo - 1)[1] if lo > 0 else 0


@dataclass(frozen=True, slots=True)
class TimeIndexView:
    """A remote time index kept as its file bytes (12 bytes an entry), searched in place."""

    base_offset: int
    data: bytes
    count: int

    @classmethod
    def parse(cls, base_offset: int, data: bytes) -> TimeIndexView:
        return cls(base_offset, bytes(data), _valid_entries(data, _TIME_ENTRY, 0, 1))

    @property
    def timestamps(self) -> list[int]:
        return [self._entry(i)[0] for i in range(self.count)]

    def _entry(self, i: int) -> tuple[int, int]:
        return _TIME_ENTRY.unpack_from(self.data, i * _TIME_ENTRY.size)  # type: ignore[return-value]

    def lookup(self, timestamp: int) -> int:
        """The offset of the last entry with a timestamp <= ``timestamp``, else the base
        offset: a scan for the first record at or after ``timestamp`` may start there."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self._entry(mid)[0] <= timestamp:
                lo = mid + 1
            else:
                hi = mid
        return self.base_offset + self._entry(lo - 1)[1] if lo > 0 else self.base_offset


@dataclass(slots=True)
class _Entry:
    start_offset: int
    size: int
    offsets: OffsetIndexView | None = None
    times: TimeIndexView | None = None
    txns: TransactionIndex | None = None

    @property
    def parsed(self) -> bool:
        return self.offsets is not None and self.times is not None and self.txns is not None


def _file_stem(start_offset: int, segment_id: uuid.UUID) -> str:
    return f"{start_offset:020d}_{segment_id}"


def _parse_stem(name: str) -> tuple[int, uuid.UUID] | None:
    stem, _, _ = name.partition(".")
    offset, _, sid = stem.partition("_")
    try:
        return int(offset), uuid.UUID(sid)
    except ValueError:
        return None


def _write_cached(path: Path, data: bytes) -> None:
    """Temp file, then rename: readers never see a half-written file. No fsync: this is a
    cache, and a file a crash may have left unwritten is never trusted (see
    ``CLEAN_MARKER``); six fsyncs per downloaded segment made first reads of many
    partitions at once miss remote.fetch.max.wait.ms."""
    atomic_write(path, data, durable=False)


def _loaded_txn_index(path: Path, start_offset: int) -> TransactionIndex:
    """core's TransactionIndex over a cached file, read into memory at once so that an
    eviction of the file later does not affect readers holding it.

    Raises:
        FileNotFoundError: the file is gone.
    """
    if not path.exists():
        raise FileNotFoundError(path)
    index = TransactionIndex(path, start_offset)
    index.all_aborted_txns()
    return index


def _read_all(stream: BinaryIO) -> bytes:
    chunks = []
    while chunk := stream.read(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


class RemoteIndexCache:
    """Offset, time and transaction indexes of remote segments, on disk and in memory, LRU
    by bytes.

    Thread-safe. Downloads happen outside the cache lock; two threads asking for the same
    segment at once may both download it (the second write replaces the first atomically).
    """

    def __init__(self, log_dir: Path, rsm: RemoteStorageManager, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache size must be positive, got {max_bytes}")
        self.directory = Path(log_dir) / DIR_NAME
        self.rsm = rsm
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[uuid.UUID, _Entry] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        self._load_existing()

    # -- start-up ------------------------------------------------------------------------
    def _load_existing(self) -> None:
        marker = self.directory / CLEAN_MARKER
        if not marker.exists():
            stale = [p for p in self.directory.iterdir() if p.is_file()]
            if stale:
                log.info(
                    "remote index cache: no clean shutdown; dropping %d cached files", len(stale)
                )
            for path in stale:
                path.unlink(missing_ok=True)
            return
        marker.unlink()
        pairs: dict[uuid.UUID, dict[str, Path]] = {}
        starts: dict[uuid.UUID, int] = {}
        for path in sorted(self.directory.iterdir(), key=lambda p: p.stat().st_mtime):
            parsed = _parse_stem(path.name)
            if path.name.endswith((TMP_SUFFIX, ".deleted")) or parsed is None:
                log.info("remote index cache: removing leftover %s", path)
                path.unlink(missing_ok=True)
                continue
            start, sid = parsed
            starts[sid] = start
            pairs.setdefault(sid, {})[path.suffix] = path
        for sid, files in pairs.items():
            if set(files) != set(SUFFIXES):
                log.info("remote index cache: removing incomplete entry %s", sid)
                for p in files.values():
                    p.unlink(missing_ok=True)
                continue
            size = sum(p.stat().st_size for p in files.values())
            self._entries[sid] = _Entry(starts[sid], size)
            self._size += size
        self._evict()

    # -- lookups -------------------------------------------------------------------------
    def offset_index(self, md: RemoteLogSegmentMetadata) -> OffsetIndexView:
        """The segment's offset index, downloaded on first use.

        Raises:
            RemoteStorageError: the index could not be fetched.
        """
        entry = self._entry(md)
        assert entry.offsets is not None
        return entry.offsets

    def time_index(self, md: RemoteLogSegmentMetadata) -> TimeIndexView:
        """The segment's time index, downloaded on first use.

        Raises:
            RemoteStorageError: the index could not be fetched.
        """
        entry = self._entry(md)
        assert entry.times is not None
        return entry.times

    def txn_index(self, md: RemoteLogSegmentMetadata) -> TransactionIndex:
        """The segment's aborted transactions (empty when the segment had none), downloaded
        on first use.

        Raises:
            RemoteStorageError: the index could not be fetched.
        """
        entry = self._entry(md)
        assert entry.txns is not None
        return entry.txns

    def txn_index_in_memory(self, md: RemoteLogSegmentMetadata) -> TransactionIndex | None:
        """The segment's aborted transactions if they are parsed in memory; None (nothing
        read, nothing fetched) otherwise. For callers that must not block on I/O."""
        with self._lock:
            entry = self._entries.get(md.segment_id)
            if entry is None or not entry.parsed:
                return None
            self._entries.move_to_end(md.segment_id)
            return entry.txns

    def lookup_position(self, md: RemoteLogSegmentMetadata, offset: int) -> int:
        """A byte position in the segment's log at or before the batch holding ``offset``."""
        return self.offset_index(md).lookup(offset)

    def lookup_timestamp(self, md: RemoteLogSegmentMetadata, timestamp: int) -> int:
        """An offset from which to scan for the first record at or after ``timestamp``."""
        return self.time_index(md).lookup(timestamp)

    def _paths(self, md: RemoteLogSegmentMetadata) -> tuple[Path, Path, Path]:
        stem = _file_stem(md.start_offset, md.segment_id)
        offset_path, time_path, txn_path = (self.directory / (stem + sx) for sx in SUFFIXES)
        return offset_path, time_path, txn_path

    def _entry(self, md: RemoteLogSegmentMetadata) -> _Entry:
        sid = md.segment_id
        offset_path, time_path, txn_path = self._paths(md)
        with self._lock:
            entry = self._entries.get(sid)
            if entry is not None:
                self._entries.move_to_end(sid)
                if entry.parsed:
                    self.hits += 1
                    return entry
        if entry is not None:
            try:  # on disk from an earlier run: parse it
                offsets = OffsetIndexView.parse(md.start_offset, offset_path.read_bytes())
                times = TimeIndexView.parse(md.start_offset, time_path.read_bytes())
                txns = _loaded_txn_index(txn_path, md.start_offset)
            except FileNotFoundError:
                entry = None  # evicted meanwhile: download again
            else:
                with self._lock:
                    entry.offsets, entry.times, entry.txns = offsets, times, txns
                    self.hits += 1
                return entry
        offset_bytes = self._fetch(md, IndexType.OFFSET)
        time_bytes = self._fetch(md, IndexType.TIMESTAMP)
        try:
            txn_bytes = self._fetch(md, IndexType.TRANSACTION)
        except RemoteResourceNotFoundError:
            txn_bytes = b""  # no aborted transaction in the segment (Kafka's contract)
        with self._lock:
            # Files are written under the lock so that an eviction never races a write.
            _write_cached(offset_path, offset_bytes)
            _write_cached(time_path, time_bytes)
            _write_cached(txn_path, txn_bytes)
            entry = _Entry(
                md.start_offset,
                len(offset_bytes) + len(time_bytes) + len(txn_bytes),
                OffsetIndexView.parse(md.start_offset, offset_bytes),
                TimeIndexView.parse(md.start_offset, time_bytes),
                _loaded_txn_index(txn_path, md.start_offset),
            )
            old = self._entries.pop(sid, None)
            if old is not None:
                self._size -= old.size
            self._entries[sid] = entry
            self._size += entry.size
            self.misses += 1
            self._evict()
        return entry

    def _fetch(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        try:
            with self.rsm.fetch_index(md, index_type) as stream:
                return _read_all(stream)
        except RemoteResourceNotFoundError:
            raise
        except OSError as e:
            raise RemoteStorageError(
                f"cannot fetch {index_type.value} of {md.remote_log_segment_id}: {e}"
            ) from e

    # -- eviction ------------------------------------------------------------------------
    def _evict(self) -> None:
        """Drop least recently used entries until the files fit (lock held). The newest
        entry stays even when it alone is larger than the bound."""
        while self._size > self.max_bytes and len(self._entries) > 1:
            sid, entry = self._entries.popitem(last=False)
            self._delete_files(sid, entry)

    def _delete_files(self, sid: uuid.UUID, entry: _Entry) -> None:
        self._size -= entry.size
        stem = _file_stem(entry.start_offset, sid)
        for suffix in SUFFIXES:
            (self.directory / (stem + suffix)).unlink(missing_ok=True)

    def remove(self, segment_id: uuid.UUID) -> None:
        """Forget a segment (it was deleted from the remote tier)."""
        with self._lock:
            entry = self._entries.pop(segment_id, None)
            if entry is not None:
                self._delete_files(segment_id, entry)

    def close(self) -> None:
        """Mark the cache clean (its files complete) for the next start."""
        with self._lock:
            (self.directory / CLEAN_MARKER).touch()

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._size

    def __contains__(self, segment_id: object) -> bool:
        with self._lock:
            return segment_id in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
