"""The ``.txnindex`` file: the aborted transactions whose abort marker is in the segment.

Layout (Kafka's ``TransactionIndex`` / ``AbortedTxn``), a sequence of 34-byte big-endian
entries, appended in the order of their markers, so last offsets strictly increase::

    offset  size  field
         0     2  version           int16  0
         2     8  producerId        int64
        10     8  firstOffset       int64  first offset of the transaction (maybe in an
                                           earlier segment)
        18     8  lastOffset        int64  offset of the abort marker
        26     8  lastStableOffset  int64  the partition's LSO once this transaction ended

READ_COMMITTED fetches ask which aborted transactions overlap the fetched range. Unlike the
offset and time indexes the file is not preallocated: it is created by the first append and
only ever holds whole entries (a torn trailing entry from a crash is ignored by reads, as in
Kafka, and cut off before the next append).

The file is read once, on first use, and then served from memory: entries are few (one per
aborted transaction) and immutable, and re-reading the file on every fetch is exactly what a
broker must not do. Every method takes one re-entrant lock.
"""

from __future__ import annotations

import bisect
import itertools
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from core.errors import CorruptIndexError, InvalidOffsetError

_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
ENTRY_SIZE = _ENTRY.size
assert ENTRY_SIZE == 34
CURRENT_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction. Offsets are inclusive: ``[first_offset, last_offset]``.

    Raises:
        ValueError: ``first_offset`` is above ``last_offset``.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def __post_init__(self) -> None:
        if self.first_offset > self.last_offset:
            raise ValueError(
                f"aborted transaction of producer {self.producer_id} has first offset "
                f"{self.first_offset} above its last offset {self.last_offset}"
            )

    def to_bytes(self) -> bytes:
        """The 34-byte entry, version 0."""
        return _ENTRY.pack(
            CURRENT_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


class TransactionIndex:
    """Kafka's transaction index for the segment starting at ``start_offset``.

    Args:
        path: the ``.txnindex`` file; it need not exist (it is created by the first append).
        start_offset: the segment's base offset; ``sanity_check`` rejects entries that end
            before it.
    """

    def __init__(self, path: Path, start_offset: int) -> None:
        self._path = Path(path)
        self.start_offset = start_offset
        self._lock = threading.RLock()
        self._fd: int | None = None
        self._dirty = False
        # Loaded lazily from the file; None until first needed.
        self._txns: list[AbortedTxn] | None = None
        self._torn_bytes = 0  # bytes of a partial trailing entry
        self._problem: str | None = None  # why the entries cannot be served
        self._ordered = True  # last offsets strictly increase, so bisect is valid
        self._lso_running_max: list[int] = []

    @property
    def path(self) -> Path:
        """The current file name (changes with ``rename_to``)."""
        return self._path

    # -- loading ------------------------------------------------------------------------

    def _loaded(self) -> list[AbortedTxn]:
        if self._txns is None:
            try:
                data = self._path.read_bytes()
            except FileNotFoundError:
                data = b""
            self._torn_bytes = len(data) % ENTRY_SIZE
            txns: list[AbortedTxn] = []
            self._problem = None
            for slot, fields in enumerate(_ENTRY.iter_unpack(data[: len(data) - self._torn_bytes])):
                version, producer_id, first, last, lso = fields
                if version != CURRENT_VERSION:
                    self._problem = (
                        f"transaction index {self._path} is corrupt: entry {slot} has "
                        f"version {version}, expected {CURRENT_VERSION}"
                    )
                    break
                try:
                    txns.append(AbortedTxn(producer_id, first, last, lso))
                except ValueError as e:
                    self._problem = f"transaction index {self._path} is corrupt: {e}"
                    break
            self._set(txns)
        return self._txns  # type: ignore[return-value]  # set by _set

    def _set(self, txns: list[AbortedTxn]) -> None:
        self._txns = txns
        self._ordered = all(a.last_offset < b.last_offset for a, b in itertools.pairwise(txns))
        self._lso_running_max = []
        top = -(2**63)
        for txn in txns:
            top = max(top, txn.last_stable_offset)
            self._lso_running_max.append(top)

    def _readable(self) -> list[AbortedTxn]:
        txns = self._loaded()
        if self._problem is not None:
            raise CorruptIndexError(self._problem)
        return txns

    # -- writing ------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Append an aborted transaction, creating the file on first use.

        Raises:
            InvalidOffsetError: ``txn.last_offset`` is not above the last entry's (Kafka
                refuses equal ones too: each marker has its own offset).
            CorruptIndexError: the existing file cannot be read.
            OSError: the write failed.
        """
        with self._lock:
            txns = self._readable()
            if txns and txn.last_offset <= txns[-1].last_offset:
                raise InvalidOffsetError(
                    f"aborted transaction ending at {txn.last_offset} appended to "
                    f"transaction index {self._path} after one ending at {txns[-1].last_offset}"
                )
            if self._fd is None:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            if self._torn_bytes:
                # A crash tore the last append; writing after it would misalign every entry.
                os.ftruncate(self._fd, len(txns) * ENTRY_SIZE)
                self._torn_bytes = 0
            data = txn.to_bytes()
            written = 0
            while written < len(data):  # os.write may write less than asked
                written += os.write(self._fd, data[written:])
            self._dirty = True
            self._set([*txns, txn])

    def flush(self) -> None:
        """fsync the file if anything was written, truncated or reset since the last flush."""
        with self._lock:
            if not self._dirty:
                return
            if self._fd is not None:
                os.fsync(self._fd)
            elif self._path.exists():
                fd = os.open(self._path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._dirty = False

    def truncate_to(self, offset: int) -> None:
        """Remove the first entry whose last offset is >= ``offset`` and all that follow.

        Raises:
            CorruptIndexError: the existing file cannot be read.
        """
        with self._lock:
            txns = self._readable()
            keep = next((i for i, t in enumerate(txns) if t.last_offset >= offset), None)
            if keep is None:
                return
            os.truncate(self._path, keep * ENTRY_SIZE)
            self._torn_bytes = 0
            self._dirty = True
            self._set(txns[:keep])

    def reset(self) -> None:
        """Remove every entry (the file, if any, becomes empty). Also clears corruption."""
        with self._lock:
            if self._path.exists():
                os.truncate(self._path, 0)
                self._dirty = True
            self._torn_bytes = 0
            self._problem = None
            self._set([])

    # -- reading ------------------------------------------------------------------------

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry, in file order.

        Raises:
            CorruptIndexError: the file holds an entry that is not version 0 or is invalid.
        """
        with self._lock:
            return list(self._readable())

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        Kafka's ``collectAbortedTxns``: entries are visited in order, an entry is kept when
        ``last_offset >= fetch_offset and first_offset < upper_bound_offset``, and the visit
        stops at the first entry whose ``last_stable_offset >= upper_bound_offset``: no later
        segment can hold an abort overlapping the range.

        Returns:
            The overlapping transactions, and True when the search is complete (such a stop
            entry was seen), False when the next segment must be searched too.

        Raises:
            CorruptIndexError: the file cannot be read.
        """
        with self._lock:
            txns = self._readable()
            # The stop entry is the first whose running maximum LSO reaches the bound.
            stop = bisect.bisect_left(self._lso_running_max, upper_bound_offset)
            complete = stop < len(txns)
            end = stop + 1 if complete else len(txns)
            # Entries before ``start`` end before the fetch; skip them when ordered.
            start = (
                bisect.bisect_left(txns, fetch_offset, hi=end, key=lambda t: t.last_offset)
                if self._ordered
                else 0
            )
            found = [
                t
                for t in txns[start:end]
                if t.last_offset >= fetch_offset and t.first_offset < upper_bound_offset
            ]
            return found, complete

    def is_empty(self) -> bool:
        """True when the index holds no whole entry (or its file does not exist)."""
        with self._lock:
            return not self._loaded()

    def sanity_check(self) -> None:
        """Detect a corrupt file; the segment's indexes are then rebuilt from the log.

        Raises:
            CorruptIndexError: the file size is not a multiple of 34, an entry is not version
                0 or ends before ``first_offset``, last offsets do not strictly increase, or
                an entry ends before the segment's start offset (Kafka's check). The message
                names the file.
        """
        with self._lock:
            txns = self._readable()
            if self._torn_bytes:
                raise CorruptIndexError(
                    f"transaction index {self._path} is corrupt: its size is not a multiple "
                    f"of {ENTRY_SIZE} ({self._torn_bytes} trailing bytes)"
                )
            if not self._ordered:
                raise CorruptIndexError(
                    f"transaction index {self._path} is corrupt: last offsets of its entries "
                    "do not strictly increase"
                )
            for txn in txns:
                if txn.last_offset < self.start_offset:
                    raise CorruptIndexError(
                        f"transaction index {self._path} is corrupt: {txn} ends before the "
                        f"start offset {self.start_offset}"
                    )

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the file. Idempotent; a later append reopens it, as Kafka's does."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def delete_if_exists(self) -> bool:
        """Close and delete the file.

        Returns:
            True if this call deleted the file, False if it did not exist.
        """
        with self._lock:
            self.close()
            self._torn_bytes = 0
            self._problem = None
            self._set([])
            self._dirty = False
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def rename_to(self, new_path: Path) -> None:
        """Rename the file if it exists (it may not yet); later writes go to ``new_path``.

        Raises:
            OSError: the rename failed; the index keeps its old path. (Kafka switches to the
                new name even then, which would leave an open descriptor on the old file.)
        """
        with self._lock:
            new_path = Path(new_path)
            if self._path.exists():
                os.replace(self._path, new_path)
            self._path = new_path

    def __repr__(self) -> str:
        return f"TransactionIndex(path={str(self._path)!r}, start_offset={self.start_offset})"
