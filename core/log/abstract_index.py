"""The memory-mapped, preallocated index file shared by the offset and time indexes.

Kafka's ``AbstractIndex``: a file of fixed-size big-endian entries, preallocated to
``max_index_size`` (rounded down to a whole number of entries) while its segment is active and
trimmed to exactly ``entries * ENTRY_SIZE`` bytes on roll and close, so a closed file holds
nothing but entries. The entry formats live in the subclasses (``offset_index``, ``time_index``).

Crash tolerance: after an unclean shutdown the file still has its preallocated zeros past the
last entry. Kafka counts every slot of such a file as an entry and relies on log recovery to
rebuild it; we count only the longest prefix of slots that obey the index's ordering rule, so
the zeroed tail is never mistaken for entries. To keep that scan truthful, every byte past the
last entry is kept zero: truncation zeroes the slots it drops, and re-opening a file for
writing cuts off whatever followed the valid prefix before it grows the file again.

Writes: new entries are kept in memory and written to the file with ``pwrite``, a page
(``PENDING_BYTES``) at a time, and before anything reads the mapping there, trims, resizes,
flushes or closes the file. Writing them through the mapping instead made the first entry on
each page of the sparse, preallocated file a page fault with a block allocation (120-300 us
on a VM), taken with the GIL held by the appending thread (the broker's event loop). Until
written, entries are only in this process, which answers every lookup from memory or after
writing them; another process reading the file of an active segment may see fewer entries
(a valid prefix: the rest is zeros, as after a crash). A crash loses them as it loses the
file's unsynced pages: the log's recovery rebuilds the indexes of every segment from the
recovery point on, and every segment below it was flushed, which writes them first.

Thread safety: every method takes one re-entrant lock (Kafka also serialises its index
operations). A lock-free read path would race with ``resize`` swapping the mapping: CPython
raises ``ValueError`` on a read from a closed mmap, and the lock costs far less than the
``struct`` call it guards.
"""

from __future__ import annotations

import array
import errno
import itertools
import mmap
import operator
import os
import struct
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from core.errors import CorruptIndexError, InvalidOffsetError

E = TypeVar("E")  # the entry type: OffsetPosition or TimestampOffset

# Kafka's "warm section": lookups first try the last 8 KiB of entries, where nearly every
# in-sync fetch lands, so that a binary search does not fault in cold pages from the head.
_WARM_SECTION_BYTES = 8192

assert array.array("i").itemsize == 4 and array.array("I").itemsize == 4

# Entries kept in memory before one pwrite writes them: a page of the file.
PENDING_BYTES = 4096


def int32_columns(data: bytes | memoryview, fields: int, typecode: str) -> list[array.array[int]]:
    """Split big-endian 32-bit words into ``fields`` columns (word ``k`` of every entry).

    The open-time scan of a full 10 MiB index runs over a million entries; ``array`` and the
    ``map``-based helpers below keep that work in C (struct.iter_unpack is ~6x slower).
    """
    words = array.array(typecode)
    words.frombytes(data)
    if sys.byteorder == "little":
        words.byteswap()
    return [words[k::fields] for k in range(fields)]


def first_break(ordered: Callable[[int, int], bool], values: Sequence[int]) -> int | None:
    """The first ``i`` with ``not ordered(values[i], values[i + 1])``, or None."""
    if all(map(ordered, values, itertools.islice(values, 1, None))):
        return None  # the common case, and the fastest loop: all() over a C map
    broken = map(operator.not_, map(ordered, values, itertools.islice(values, 1, None)))
    return next(itertools.compress(itertools.count(), broken), None)


def _data_end(fd: int, length: int) -> int:
    """Where the last data region of the file ends (``SEEK_DATA``/``SEEK_HOLE``): every
    byte past it is a hole and reads as zero. ``length`` where holes cannot be found."""
    end = position = 0
    try:
        while position < length:
            position = os.lseek(fd, position, os.SEEK_DATA)
            position = end = os.lseek(fd, position, os.SEEK_HOLE)
    except OSError as e:
        if e.errno != errno.ENXIO:  # ENXIO: no data after position
            return length
    return min(end, length)


class AbstractIndex(ABC, Generic[E]):
    """A preallocated, mmapped file of ``ENTRY_SIZE``-byte entries ordered by offset.

    Args:
        path: the index file. Created and preallocated when missing (writable indexes only).
        base_offset: the base offset of the segment; entries store offsets relative to it.
        max_index_size: bytes to preallocate, rounded down to a multiple of ``ENTRY_SIZE``.
        writable: False maps the file read-only and never changes it; mutators then raise
            ``ValueError``.
        grow: whether an existing writable file is grown back to ``max_index_size`` on
            open (a new file always is). Only an active segment's indexes need the room;
            Kafka opens the others at their trimmed size and resizes the active segment's
            (``resize``) when it is loaded. False keeps an old segment's file as it is,
            cut to its valid entries.

    Raises:
        ValueError: ``max_index_size`` is smaller than one entry (writable indexes).
        FileNotFoundError: a read-only index whose file does not exist.
    """

    ENTRY_SIZE: ClassVar[int]

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int = 10 * 1024 * 1024,
        writable: bool = True,
        *,
        grow: bool = True,
    ) -> None:
        if writable and max_index_size < self.ENTRY_SIZE:
            raise ValueError(f"invalid max index size {max_index_size} for {path}")
        self._path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._lock = threading.RLock()
        self._mmap: mmap.mmap | None = None
        self._length = 0
        self._entries = 0
        self._max_entries = 0
        self._closed = False
        # Entries from slot ``_pending_from`` on are in ``_pending`` only, not yet in the file.
        self._pending = bytearray()
        self._pending_from = 0
        # Found while opening; reported by sanity_check, which Kafka's loader calls right after.
        self._open_problem: str | None = None
        self._open(grow)
        self._entries_changed()

    # -- opening ------------------------------------------------------------------------

    def _open(self, grow: bool) -> None:
        size = self._rounded(self.max_index_size)
        if not self.writable:
            with open(self._path, "rb") as f:
                length = os.fstat(f.fileno()).st_size
                if length:
                    self._mmap = mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ)
                data_end = _data_end(f.fileno(), length)
            self._length = length
            self._entries = self._scan_existing(length, data_end)
            self._max_entries = length // self.ENTRY_SIZE
            return
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            created = True
        except FileExistsError:
            fd = os.open(self._path, os.O_RDWR)
            created = False
        try:
            if created:
                self._entries = 0
            else:
                length = os.fstat(fd).st_size
                if length:
                    self._mmap = mmap.mmap(fd, length, access=mmap.ACCESS_READ)
                self._entries = self._scan_existing(length, _data_end(fd, length))
                self._unmap()
                # Cut everything after the valid prefix first: growing the file back then
                # zero-fills, which keeps the next crash scan from seeing stale slots.
                valid = self._entries * self.ENTRY_SIZE
                size = max(size, valid) if grow else valid
                if length != valid:
                    os.ftruncate(fd, valid)
            if size != (0 if created else self._entries * self.ENTRY_SIZE):
                os.ftruncate(fd, size)
            if size:
                self._mmap = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
            self._length = size
            self._max_entries = size // self.ENTRY_SIZE
        finally:
            # The mmap keeps its own descriptor; Kafka likewise closes the file after mapping.
            os.close(fd)

    def _scan_existing(self, length: int, data_end: int) -> int:
        """Count the entries of an existing file and note anything that looks corrupt.

        Only the bytes before ``data_end`` are read: past it the file is a hole (the
        preallocated tail ``ftruncate`` left sparse), which reads as zeros anyway. An
        untrimmed 10 MiB index after a crash then costs its entries, not 10 MiB.
        """
        size = self.ENTRY_SIZE
        if length % size:
            self._open_problem = (
                f"index file {self._path} is corrupt: its size {length} is not a multiple of {size}"
            )
        slots = length // size
        if slots == 0 or self._mmap is None:
            return 0
        data = self._mmap[: min(slots * size, -(-data_end // size) * size)]
        # Only slots up to the last non-zero byte can hold entries: the rest is the zeroed
        # preallocation of a file that was never trimmed.
        candidates = -(-len(data.rstrip(b"\0")) // size)
        if candidates == 0:
            # All zeros. A trimmed one-entry file is a genuine (relative offset 0, 0) entry;
            # a longer one is untouched preallocation. (A crash can blur the two, but a
            # lone entry at the base offset says nothing a lookup would not answer anyway.)
            return 1 if slots == 1 else 0
        valid = self._valid_prefix(memoryview(data)[: candidates * size], candidates)
        if valid < candidates and self._open_problem is None:
            self._open_problem = (
                f"index file {self._path} is corrupt: non-zero bytes follow its {valid} "
                f"valid entries (slot {valid} breaks the ordering of the index)"
            )
        return valid

    @abstractmethod
    def _valid_prefix(self, data: memoryview, slots: int) -> int:
        """The number of leading slots of ``data`` that form a valid index."""

    @abstractmethod
    def _entries_changed(self) -> None:
        """Refresh whatever the subclass caches about the last entry."""

    def _rounded(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    # -- properties ---------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The current file name (changes with ``rename_to``)."""
        return self._path

    @property
    def entries(self) -> int:
        """The number of entries in the index."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """How many entries the current file size can hold."""
        return self._max_entries

    def is_full(self) -> bool:
        """True when no slot is left for another entry."""
        return self._entries >= self._max_entries

    def size_in_bytes(self) -> int:
        """The bytes used by entries (the file size once trimmed)."""
        return self._entries * self.ENTRY_SIZE

    def can_append_offset(self, offset: int) -> bool:
        """True when ``offset`` fits the int32 relative offset of an entry."""
        return 0 <= offset - self.base_offset <= 2**31 - 1

    # -- entries ------------------------------------------------------------------------

    def _unpack(self, layout: struct.Struct, slot: int) -> tuple[int, ...]:
        """The fields ``layout`` reads at the start of ``slot``."""
        if slot >= self._pending_from:
            self._write_pending()
        assert self._mmap is not None
        return layout.unpack_from(self._mmap, slot * self.ENTRY_SIZE)

    def _relative_offset(self, offset: int) -> int:
        """``offset`` as an entry stores it: relative to the base offset.

        Raises:
            InvalidOffsetError: it does not fit an int32 (Kafka's
                IndexOffsetOverflowException).
        """
        if not self.can_append_offset(offset):
            raise InvalidOffsetError(
                f"offset {offset} does not fit a relative offset of index {self._path} "
                f"(base offset {self.base_offset})"
            )
        return offset - self.base_offset

    def _refuse_when_full(self) -> None:
        """Raises InvalidOffsetError when ``is_full``: no room for an ordinary append."""
        if self.is_full():
            raise InvalidOffsetError(
                f"attempt to append to the full index {self._path} ({self._entries} entries)"
            )

    def _write_next(self, layout: struct.Struct, *fields: int) -> None:
        """Add the entry after the last one and count it (the caller holds the lock and
        checked that a slot is free); it reaches the file with the next ``_write_pending``."""
        if not self._pending:
            self._pending_from = self._entries
        self._pending += layout.pack(*fields)
        self._entries += 1
        if len(self._pending) >= PENDING_BYTES:
            self._write_pending()

    def _write_pending(self) -> None:
        """Write the entries kept in memory to the file (lock held)."""
        if not self._pending:
            self._pending_from = self._entries
            return
        fd = os.open(self._path, os.O_WRONLY)
        try:
            with memoryview(self._pending) as pending:
                data, position = pending, self._pending_from * self.ENTRY_SIZE
                while data:
                    written = os.pwrite(fd, data, position)
                    data, position = data[written:], position + written
                del data  # every view of the buffer released before it is cleared
        finally:
            os.close(fd)
        # Cleared in place: the compiled append (core/log/_active_segment.pyx) holds it.
        del self._pending[:]
        self._pending_from = self._entries

    # -- searching ----------------------------------------------------------------------

    def _largest_at_or_below(self, target: int, key: Callable[[int], int]) -> int:
        """The last slot whose strictly increasing ``key`` is <= ``target``, or -1.

        O(log n); tries Kafka's warm section (the last 8 KiB of entries) first.
        """
        n = self._entries
        if n == 0:
            return -1
        first_warm = max(0, n - 1 - _WARM_SECTION_BYTES // self.ENTRY_SIZE)
        if key(first_warm) < target:
            lo, hi = first_warm, n - 1
        elif key(0) > target:
            return -1
        else:
            lo, hi = 0, first_warm
        # Invariant: key(lo) <= target, and the answer lies in [lo, hi].
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if key(mid) > target:
                hi = mid - 1
            else:
                lo = mid
        return lo

    def _count_below(self, target: int, key: Callable[[int], int]) -> int:
        """The number of leading slots whose non-decreasing ``key`` is < ``target``."""
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) // 2
            if key(mid) < target:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _require_open(self) -> mmap.mmap | None:
        if self._closed:
            raise ValueError(f"index {self._path} is closed")
        return self._mmap

    def _require_writable(self) -> mmap.mmap | None:
        mm = self._require_open()
        if not self.writable:
            raise ValueError(f"index {self._path} was opened read-only")
        return mm

    @abstractmethod
    def _read(self, slot: int) -> E:
        """The entry in ``slot``."""

    @abstractmethod
    def _relative_at(self, slot: int) -> int:
        """The relative offset of the entry in ``slot``."""

    def entry(self, n: int) -> E:
        """The ``n``-th entry (0-based).

        Raises:
            IndexError: ``n`` is not in ``[0, entries)``.
            ValueError: the index is closed.
        """
        with self._lock:
            self._require_open()
            if not 0 <= n < self._entries:
                raise IndexError(
                    f"entry {n} requested from index {self._path}, which has {self._entries}"
                )
            return self._read(n)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; a larger offset changes nothing.

        Raises:
            ValueError: the index is closed or read-only.
        """
        with self._lock:
            self._require_writable()
            # Time-index offsets may repeat (only timestamps strictly increase), so count
            # the entries below the target instead of searching for an exact match.
            keep = self._count_below(offset - self.base_offset, self._relative_at)
            self._truncate_to_entries(keep)

    # -- mutation -----------------------------------------------------------------------

    def truncate(self) -> None:
        """Remove every entry; the file keeps its size.

        Raises:
            ValueError: the index is closed or read-only.
        """
        with self._lock:
            self._truncate_to_entries(0)
            self._open_problem = None  # what the file held when opened is gone

    def reset(self) -> None:
        """Remove every entry and grow the file back to ``max_index_size``."""
        with self._lock:
            self.truncate()
            self.resize(self.max_index_size)

    def _truncate_to_entries(self, n: int) -> None:
        mm = self._require_writable()
        if n < self._entries:
            self._write_pending()
            assert mm is not None  # a file holding entries is never zero-length
            # Zero the dropped slots so that a crash before the next trim cannot bring them
            # back through the prefix scan on open.
            start, end = n * self.ENTRY_SIZE, self._entries * self.ENTRY_SIZE
            mm[start:end] = bytes(end - start)
            self._entries = n
            self._entries_changed()

    def resize(self, new_size: int) -> bool:
        """Set the file size to ``new_size`` rounded down to whole entries and remap it.

        Returns:
            True when the size changed, False when it already was that size.

        Raises:
            ValueError: the new size cannot hold the current entries (truncate first), or the
                index is closed or read-only.
        """
        with self._lock:
            self._require_writable()
            rounded = self._rounded(max(new_size, 0))
            if rounded < self._entries * self.ENTRY_SIZE:
                raise ValueError(
                    f"cannot resize index {self._path} to {rounded} bytes: it holds "
                    f"{self._entries} entries of {self.ENTRY_SIZE} bytes"
                )
            if rounded == self._length:
                return False
            self._write_pending()
            self._unmap()
            fd = os.open(self._path, os.O_RDWR)
            try:
                os.ftruncate(fd, rounded)
                if rounded:
                    self._mmap = mmap.mmap(fd, rounded, access=mmap.ACCESS_WRITE)
            finally:
                os.close(fd)
            self._length = rounded
            self._max_entries = rounded // self.ENTRY_SIZE
            return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its entries (on roll and close). No-op when read-only."""
        with self._lock:
            if self.writable and not self._closed:
                self._write_pending()
                self.resize(self._entries * self.ENTRY_SIZE)

    def flush(self) -> None:
        """msync the mapping and fsync the file, so entries and the file size are durable."""
        with self._lock:
            mm = self._require_open()
            if not self.writable:
                return
            self._write_pending()
            if mm is not None:
                mm.flush()
            fd = os.open(self._path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    # -- checks -------------------------------------------------------------------------

    def sanity_check(self) -> None:
        """Detect a corrupt file; Kafka's loader then rebuilds the index from the log.

        Raises:
            CorruptIndexError: the file size was not a multiple of ``ENTRY_SIZE``, non-zero
                bytes followed the valid entries, or an entry lies below the base offset. The
                message names the file.
        """
        with self._lock:
            if self._open_problem is not None:
                raise CorruptIndexError(self._open_problem)
            self._check_entries()

    @abstractmethod
    def _check_entries(self) -> None:
        """Subclass checks of the entries themselves (Kafka's per-index sanity rules)."""

    def _check_last_offset(self, last_offset: int) -> None:
        """The check both of Kafka's indexes make: no entry lies below the base offset."""
        if self._entries and last_offset < self.base_offset:
            raise CorruptIndexError(
                f"index file {self._path} is corrupt: its last offset {last_offset} is "
                f"below the base offset {self.base_offset}"
            )

    # -- lifecycle ----------------------------------------------------------------------

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def close(self) -> None:
        """Trim the file to its entries and unmap it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.trim_to_valid_size()
            self._unmap()
            self._closed = True

    def delete_if_exists(self) -> bool:
        """Unmap (without trimming) and delete the file.

        Returns:
            True if this call deleted the file, False if it did not exist.
        """
        with self._lock:
            del self._pending[:]
            self._unmap()
            self._closed = True
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def rename_to(self, new_path: Path) -> None:
        """Atomically rename the file (``.deleted``/``.cleaned`` suffixes); the mapping stays.

        Raises:
            OSError: the rename failed; the index keeps its old path.
        """
        with self._lock:
            new_path = Path(new_path)
            os.replace(self._path, new_path)
            self._path = new_path

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self.base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries})"
        )
