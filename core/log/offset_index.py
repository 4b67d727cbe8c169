"""The ``.index`` file: a sparse map from offsets to byte positions in the segment's ``.log``.

Layout (Kafka's ``OffsetIndex``), a sequence of 8-byte big-endian entries and nothing else::

    offset  size  field
         0     4  relativeOffset  int32  offset - base offset of the segment
         4     4  position        int32  byte position of the batch in the .log file

Relative offsets strictly increase. An entry (offset, position) says that the batch at
``position`` holds ``offset``, so a read of any offset >= it may start scanning the log there.
The file is preallocated while the segment is active and trimmed on roll and close; see
``abstract_index`` for the lifecycle, crash tolerance and locking.
"""

from __future__ import annotations

import array
import bisect
import operator
import struct
from dataclasses import dataclass
from pathlib import Path

from core.errors import InvalidOffsetError
from core.log.abstract_index import AbstractIndex, first_break, int32_columns

_ENTRY = struct.Struct(">ii")  # relativeOffset, position
_RELATIVE = struct.Struct(">i")  # the first field alone, for binary search

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An offset and the byte position in the ``.log`` of the batch that holds it."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex[OffsetPosition]):
    """Kafka's offset index. See ``AbstractIndex`` for the constructor and lifecycle."""

    ENTRY_SIZE = _ENTRY.size
    assert ENTRY_SIZE == 8

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int = 10 * 1024 * 1024,
        writable: bool = True,
        *,
        grow: bool = True,
    ) -> None:
        self._last_offset = base_offset
        # In-memory copies of the entries: every fetch looks an offset up, and bisect over
        # an int array runs in C where a search through the mmap costs ~15 struct reads.
        self._relatives = array.array("i")
        self._positions = array.array("i")
        super().__init__(path, base_offset, max_index_size, writable, grow=grow)

    # -- subclass hooks -----------------------------------------------------------------

    def _valid_prefix(self, data: memoryview, slots: int) -> int:
        relative, positions = int32_columns(data, 2, "i")
        if relative[0] < 0 or positions[0] < 0:
            return 0
        # Entries name successive batches: offsets and positions both strictly increase, so
        # a negative or backward position ends the valid part as a backward offset does.
        valid = slots
        for column in (relative, positions):
            broken = first_break(operator.lt, column)
            if broken is not None:
                valid = min(valid, broken + 1)
        return valid

    def _entries_changed(self) -> None:
        n = self._entries
        if len(self._relatives) > n:
            del self._relatives[n:]
            del self._positions[n:]
        elif len(self._relatives) < n:
            assert self._mmap is not None
            relatives, positions = int32_columns(self._mmap[: n * self.ENTRY_SIZE], 2, "i")
            # In place: the compiled append keeps references to both arrays.
            self._relatives[:], self._positions[:] = relatives, positions
        self._last_offset = self.base_offset + self._relatives[-1] if n else self.base_offset

    def _check_entries(self) -> None:
        self._check_last_offset(self._last_offset)

    def _read(self, slot: int) -> OffsetPosition:
        relative, position = self._unpack(_ENTRY, slot)
        return OffsetPosition(self.base_offset + relative, position)

    def _relative_at(self, slot: int) -> int:
        return self._unpack(_RELATIVE, slot)[0]

    # -- API ----------------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or ``base_offset`` when the index is empty."""
        return self._last_offset

    def append(self, offset: int, position: int) -> None:
        """Add an entry after the last one.

        Args:
            offset: absolute offset; must exceed the last entry's and fit ``base_offset +
                [0, 2**31 - 1]``.
            position: byte position in the ``.log``, ``[0, 2**31 - 1]``.

        Raises:
            InvalidOffsetError: the index is full, ``offset`` is not above the last entry's,
                or its relative offset does not fit an int32.
            ValueError: ``position`` is out of range, or the index is closed or read-only.
        """
        with self._lock:
            # The checks inline on the common path (one entry per append): the helpers
            # only run to raise.
            if self._closed or not self.writable:
                self._require_writable()
            if self._entries >= self._max_entries:
                self._refuse_when_full()
            if self._entries and offset <= self._last_offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to index {self._path} at slot "
                    f"{self._entries}, not above its last offset {self._last_offset}"
                )
            relative = offset - self.base_offset
            if not 0 <= relative <= _INT32_MAX:
                self._relative_offset(offset)
            if not 0 <= position <= _INT32_MAX:
                raise ValueError(f"position {position} out of range for index {self._path}")
            self._write_next(_ENTRY, relative, position)
            self._last_offset = offset
            self._relatives.append(relative)
            self._positions.append(position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target_offset``; O(log n).

        Returns:
            That entry, or ``OffsetPosition(base_offset, 0)`` when every entry is above the
            target (the segment's first batch starts at position 0).

        Raises:
            ValueError: the index is closed.
        """
        with self._lock:
            self._require_open()
            slot = bisect.bisect_right(self._relatives, target_offset - self.base_offset) - 1
            if slot < 0:
                return OffsetPosition(self.base_offset, 0)
            return OffsetPosition(self.base_offset + self._relatives[slot], self._positions[slot])
