"""The ``.timeindex`` file: a sparse map from timestamps to offsets of the segment.

Layout (Kafka's ``TimeIndex``), a sequence of 12-byte big-endian entries and nothing else::

    offset  size  field
         0     8  timestamp       int64  largest timestamp seen up to the batch below
         8     4  relativeOffset  int32  offset - base offset of the segment

Timestamps strictly increase and offsets never decrease. An entry (timestamp, offset) says
that every record with a larger timestamp comes after ``offset``. One slot is kept free while
the segment is active for the entry written at roll. See ``abstract_index`` for the
lifecycle, crash tolerance and locking.
"""

from __future__ import annotations

import itertools
import operator
import struct
from dataclasses import dataclass

from core.errors import CorruptIndexError, InvalidOffsetError
from core.log.abstract_index import AbstractIndex, first_break, int32_columns

_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset
_TIMESTAMP = struct.Struct(">q")  # the first field alone, for binary search by time
_RELATIVE = struct.Struct(">8xi")  # the second field alone, for truncation by offset

NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A timestamp and the offset after which every larger timestamp lies."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex[TimestampOffset]):
    """Kafka's time index. See ``AbstractIndex`` for the constructor and lifecycle."""

    ENTRY_SIZE = _ENTRY.size
    assert ENTRY_SIZE == 12

    # -- subclass hooks -----------------------------------------------------------------

    def _valid_prefix(self, data: memoryview, slots: int) -> int:
        high, _, relative = int32_columns(data, 3, "i")
        _, low, _ = int32_columns(data, 3, "I")
        # Rebuild the int64 timestamps from their signed high and unsigned low words.
        timestamps = list(map(operator.or_, map(operator.lshift, high, itertools.repeat(32)), low))
        # maybe_append never stores a timestamp below 0 (it must beat NO_TIMESTAMP).
        if timestamps[0] < 0 or relative[0] < 0:
            return 0
        # A torn 12-byte entry straddling two pages shows up as a break in either order.
        breaks = [
            b + 1
            for b in (first_break(operator.lt, timestamps), first_break(operator.le, relative))
            if b is not None
        ]
        return min(breaks, default=slots)

    def _entries_changed(self) -> None:
        last = (
            self._read(self._entries - 1)
            if self._entries
            else TimestampOffset(NO_TIMESTAMP, self.base_offset)
        )
        # The last entry as two ints: the compiled append (core/log/_active_segment.pyx)
        # reads and writes them without building a TimestampOffset.
        self._last_timestamp, self._last_entry_offset = last.timestamp, last.offset

    def _check_entries(self) -> None:
        if not self._entries:
            return
        first = self._read(0)
        if self._last_timestamp < first.timestamp:
            raise CorruptIndexError(
                f"time index file {self._path} is corrupt: its last timestamp "
                f"{self._last_timestamp} is below its first {first.timestamp}"
            )
        self._check_last_offset(self._last_entry_offset)

    def _read(self, slot: int) -> TimestampOffset:
        timestamp, relative = self._unpack(_ENTRY, slot)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def _timestamp_at(self, slot: int) -> int:
        return self._unpack(_TIMESTAMP, slot)[0]

    def _relative_at(self, slot: int) -> int:
        return self._unpack(_RELATIVE, slot)[0]

    # -- API ----------------------------------------------------------------------------

    def is_full(self) -> bool:
        """True when only the slot reserved for the entry written at roll is left (Kafka)."""
        return self._entries >= self._max_entries - 1

    @property
    def last_timestamp(self) -> int:
        """The last entry's timestamp, -1 (NO_TIMESTAMP) when the index is empty."""
        return self._last_timestamp

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``TimestampOffset(-1, base_offset)`` when the index is empty."""
        with self._lock:  # both halves of one entry (appends set them under the lock)
            return TimestampOffset(self._last_timestamp, self._last_entry_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add an entry if ``timestamp`` is above the last entry's; otherwise do nothing.

        An equal timestamp is ignored rather than refused: the segment re-offers its last
        entry when it rolls or closes. While empty, the "last" timestamp is -1, so an entry
        needs a timestamp >= 0.

        Args:
            timestamp: the largest timestamp so far in the segment.
            offset: the offset of the record that carries it.
            skip_full_check: use the slot kept free for the entry written at roll or close.

        Raises:
            InvalidOffsetError: the index is full (the reserved slot too, with
                ``skip_full_check``), ``offset`` is below the last entry's, ``timestamp`` is
                below the last entry's, or the relative offset does not fit an int32.
            ValueError: the index is closed or read-only.
        """
        with self._lock:
            self._require_writable()
            if not skip_full_check:
                self._refuse_when_full()
            last = self.last_entry
            if self._entries and offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to time index {self._path} at slot "
                    f"{self._entries}, below its last offset {last.offset}"
                )
            # Kafka raises IllegalStateException here: the segment only ever offers its
            # running maximum, so a smaller timestamp is a bug, not a skippable entry.
            if self._entries and timestamp < last.timestamp:
                raise InvalidOffsetError(
                    f"attempt to append timestamp {timestamp} to time index {self._path} at "
                    f"slot {self._entries}, below its last timestamp {last.timestamp}"
                )
            if timestamp <= last.timestamp:
                return
            relative = self._relative_offset(offset)
            if self._entries >= self._max_entries:
                raise InvalidOffsetError(
                    f"no slot left in time index {self._path} ({self._entries} entries)"
                )
            self._write_next(_ENTRY, timestamp, relative)
            self._last_timestamp, self._last_entry_offset = timestamp, offset

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_timestamp``; O(log n).

        Returns:
            That entry, or ``TimestampOffset(-1, base_offset)`` when every entry is later.

        Raises:
            ValueError: the index is closed.
        """
        with self._lock:
            self._require_open()
            slot = self._largest_at_or_below(target_timestamp, self._timestamp_at)
            if slot < 0:
                return TimestampOffset(NO_TIMESTAMP, self.base_offset)
            return self._read(slot)
