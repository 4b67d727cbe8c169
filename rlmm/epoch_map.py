"""One leader epoch's map "epoch start offset -> segment", over rows, in ~0 bytes a segment.

Kafka's RemoteLogLeaderEpochState keeps a sorted map from each mapped segment's start
offset within the epoch to its id; ``EpochMap`` is that map with rows for ids, stored for
the usual case: a segment whose epoch starts at its start offset (nearly all) is a member
of ``rows[head:]``, sorted by start offset, and so also by row number while the store is in
key order; then ``rows`` is a ``range`` while the members are consecutive rows (0 bytes a
segment), else an ``array('i')``. Deleting the first member (retention deletes the oldest)
moves ``head``. The few others (a segment that began in an earlier epoch) are in ``odd``,
keyed by their epoch start. Keys are unique across both.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort

from rlmm.segment_rows import Renumbering, SegmentRows

# Deleted members at the front of an array are dropped once there are this many and they
# are at least half of it.
_TRIM = 1024


class EpochMap:
    """A sorted map epoch start offset -> row (Kafka's ``offsetToId``)."""

    __slots__ = ("_head", "_odd", "_odd_keys", "_rows", "_store")

    def __init__(self, store: SegmentRows) -> None:
        self._store = store
        self._rows: array[int] | range = range(0)
        self._head = 0
        self._odd: dict[int, int] = {}  # epoch start -> row
        self._odd_keys: list[int] = []  # sorted keys of _odd

    def rows(self) -> list[int]:
        """Every mapped row."""
        return [*self._rows[self._head :], *self._odd.values()]

    def floor(self, offset: int) -> int:
        """The row with the greatest epoch start <= ``offset``, or -1 (Kafka's floorEntry)."""
        rows, head = self._rows, self._head
        r = -1
        if head < len(rows):
            store = self._store
            if store.in_key_order:
                # Rows sorted by number are sorted by start: find the last row of all that
                # starts at or before offset, then the last member up to it (C bisects).
                i = bisect_right(rows, store.last_row_at_or_before(offset), head) - 1
            else:
                i = bisect_right(rows, offset, head, len(rows), key=store.start) - 1
            if i >= head:
                r = rows[i]
        odd_keys = self._odd_keys
        if odd_keys:
            j = bisect_right(odd_keys, offset) - 1
            if j >= 0 and (r < 0 or odd_keys[j] > self._store.start(r)):
                r = self._odd[odd_keys[j]]
        return r

    def last(self) -> tuple[int, int]:
        """``(epoch start, row)`` of the greatest key, or ``(-1, -1)`` (Kafka's lastEntry)."""
        key, r = -1, -1
        if self._head < len(self._rows):
            r = self._rows[-1]
            key = self._store.start(r)
        if self._odd_keys and self._odd_keys[-1] > key:
            key = self._odd_keys[-1]
            r = self._odd[key]
        return key, r

    def put(self, key: int, row: int) -> int:
        """Map ``key`` to ``row``; returns the row it mapped before, or -1 (Kafka's put)."""
        old = self.get(key)
        if old >= 0:
            self.remove(key, old)
        store = self._store
        rows = self._rows
        if key != store.start(row):
            self._odd[key] = row
            insort(self._odd_keys, key)
        elif self._head == len(rows) or store.start(rows[-1]) < key:
            self._append(row)
        else:
            rows = self._array()
            rows.insert(bisect_left(rows, key, self._head, len(rows), key=store.start), row)
        return old

    def put_last(self, key: int, row: int) -> None:
        """``put`` for a key greater than every key (``last()``'s)."""
        if key != self._store.start(row):
            self._odd[key] = row
            self._odd_keys.append(key)
        else:
            self._append(row)

    def extend(self, first: int, stop: int) -> None:
        """Map the rows ``first ... stop - 1`` at their start offsets, which ascend and are
        greater than every key."""
        rows = self._rows
        if isinstance(rows, range) and (self._head == len(rows) or rows[-1] + 1 == first):
            begin = first if self._head == len(rows) else rows.start + self._head
            self._rows, self._head = range(begin, stop), 0
        else:
            self._array().extend(range(first, stop))

    def get(self, key: int) -> int:
        """The row mapped at ``key``, or -1."""
        r = self._odd.get(key, -1)
        if r >= 0:
            return r
        rows = self._rows
        start = self._store.start
        i = bisect_left(rows, key, self._head, len(rows), key=start)
        if i < len(rows) and start(rows[i]) == key:
            return rows[i]
        return -1

    def remove(self, key: int, row: int) -> None:
        """Unmap ``key`` if it maps to ``row`` (Kafka's remove(key, value))."""
        if self._odd.get(key) == row:
            del self._odd[key]
            self._odd_keys.pop(bisect_left(self._odd_keys, key))
            return
        rows = self._rows
        i = bisect_left(rows, key, self._head, len(rows), key=self._store.start)
        if i < len(rows) and rows[i] == row:
            self._delete(i)

    def renumber(self, remap: Renumbering) -> None:
        """Map every row through a store's compaction."""
        members = [remap[r] for r in self._rows[self._head :]]
        self._rows, self._head = range(0), 0
        for r in members:
            self._append(r)
        self._odd = {k: remap[r] for k, r in self._odd.items()}

    def _array(self) -> array[int]:
        rows = self._rows
        if isinstance(rows, range):
            rows = self._rows = array("i", rows)
        return rows

    def _append(self, r: int) -> None:
        rows = self._rows
        if isinstance(rows, range):
            if self._head == len(rows):
                self._rows, self._head = range(r, r + 1), 0
                return
            if r == rows[-1] + 1:
                self._rows = range(rows.start, r + 1)
                return
        self._array().append(r)

    def _delete(self, i: int) -> None:
        """Remove the member at index ``i`` (>= head)."""
        rows = self._rows
        if i == self._head:
            self._head += 1
            if isinstance(rows, range):
                self._rows, self._head = rows[self._head :], 0
            elif self._head >= _TRIM and 2 * self._head >= len(rows):
                del rows[: self._head]
                self._head = 0
        elif i == len(rows) - 1:
            if isinstance(rows, range):
                self._rows = rows[:-1]
            else:
                rows.pop()
        else:
            del self._array()[i]
