"""Segment id -> row number, in ~6.5 bytes a segment.

An open-addressing hash table (linear probing) of row numbers in one ``array('i')``, its
size a power of two, kept between 0.35 and 0.7 full. The 16-byte ids are not stored here:
the rows hold them, and the table asks for a row's id (``id_of``) to compare or rehash.
A deleted id leaves a tombstone, so that probes for the ids after it go on; tombstones
count as used until the next resize drops them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence

_EMPTY = -1  # slot never used
_GONE = -2  # slot whose id was deleted


class UuidTable:
    """Segment id bytes -> row number.

    Args:
        id_of: the id bytes of a row in the table.
        slots: initial size (rounded up to a power of two, at least 16).
    """

    __slots__ = ("_count", "_id_of", "_slots", "_used")

    def __init__(self, id_of: Callable[[int], bytes], slots: int = 16) -> None:
        self._id_of = id_of
        self._slots: array[int] = array("i")
        self._count = 0  # ids held
        self._used = 0  # slots not _EMPTY
        self._resize(slots)

    def __len__(self) -> int:
        return self._count

    def find(self, idb: bytes) -> int:
        """The row of ``idb``, or -1."""
        t = self._slots
        m = len(t) - 1
        i = hash(idb) & m
        id_of = self._id_of
        while True:
            r = t[i]
            if r == _EMPTY:
                return -1
            if r >= 0 and id_of(r) == idb:
                return r
            i = (i + 1) & m

    def add(self, idb: bytes, row: int) -> None:
        """Map an id known to be absent."""
        if 10 * (self._used + 1) > 7 * len(self._slots):
            self._resize(2 * self._count)
        self._put(idb, row)

    def add_run(self, ids: Sequence[bytes], first_row: int) -> None:
        """Map absent ids to the consecutive rows from ``first_row``."""
        if 10 * (self._used + len(ids)) > 7 * len(self._slots):
            self._resize(2 * (self._count + len(ids)))
        put = self._put
        for i, idb in enumerate(ids):
            put(idb, first_row + i)

    def discard(self, idb: bytes) -> None:
        """Unmap an id (nothing if absent)."""
        t = self._slots
        m = len(t) - 1
        i = hash(idb) & m
        id_of = self._id_of
        while True:
            r = t[i]
            if r == _EMPTY:
                return
            if r >= 0 and id_of(r) == idb:
                t[i] = _GONE
                self._count -= 1
                return
            i = (i + 1) & m

    def _put(self, idb: bytes, row: int) -> None:
        t = self._slots
        m = len(t) - 1
        i = hash(idb) & m
        while t[i] >= 0:
            i = (i + 1) & m
        if t[i] == _EMPTY:
            self._used += 1
        t[i] = row
        self._count += 1

    def _resize(self, want: int) -> None:
        """Rehash into at least ``want`` slots (a power of two), dropping tombstones."""
        size = 16
        while size < want:
            size *= 2
        t = array("i", [_EMPTY]) * size
        m = size - 1
        count = 0
        id_of = self._id_of
        for r in self._slots:
            if r >= 0:
                i = hash(id_of(r)) & m
                while t[i] != _EMPTY:
                    i = (i + 1) & m
                t[i] = r
                count += 1
        self._slots = t
        self._count = self._used = count
