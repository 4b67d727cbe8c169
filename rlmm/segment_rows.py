"""Segments as numbered rows: what the metadata cache's rules need of their storage.

``rlmm.metadata_cache`` keeps Kafka's rules (states, leader epoch maps, paging) and refers
to segments by *row number*; ``rlmm.segment_store`` stores the rows compactly. This module
is the contract between the two.

A row is one segment in any state but DELETE_SEGMENT_FINISHED (deleting a row forgets the
segment). Its *key* is ``(start offset, segment id bytes)``, the total order of every
listing. A row keeps its number until a delete returns a ``Renumbering``: the store then
compacted, and every row number held elsewhere must be mapped through it.
"""

from __future__ import annotations

import uuid
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState

RowKey = tuple[int, bytes]  # (start offset, segment id bytes)


class SegmentLike(Protocol):
    """A segment as the store takes it: RemoteLogSegmentMetadata, or the snapshot record
    of rlmm.serde (which has no partition)."""

    @property
    def segment_id(self) -> uuid.UUID: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def max_timestamp_ms(self) -> int: ...
    @property
    def broker_id(self) -> int: ...
    @property
    def event_timestamp_ms(self) -> int: ...
    @property
    def segment_size_in_bytes(self) -> int: ...
    @property
    def segment_leader_epochs(self) -> Mapping[int, int]: ...
    @property
    def custom_metadata(self) -> bytes | None: ...
    @property
    def state(self) -> RemoteLogSegmentState: ...
    @property
    def txn_index_empty(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Renumbering:
    """Old row number -> new one, after a compaction (deleted rows have none)."""

    first: int  # the lowest old row number that existed
    new: array[int]  # new[old - first], -1 for a row that was deleted

    def __getitem__(self, row: int) -> int:
        return self.new[row - self.first]


class SegmentRows(Protocol):
    """The rows of one partition's segments. Not thread-safe: the cache locks around it."""

    # True while row numbers ascend with keys (segments arrive in offset order as a rule):
    # then ``last_row_at_or_before`` answers, and rows sorted by start offset are also
    # sorted by number.
    in_key_order: bool

    def __len__(self) -> int:
        """Rows held."""
        ...

    @property
    def last_key(self) -> RowKey | None:
        """The greatest key inserted since the last compaction, so at least every row's
        (None if none)."""
        ...

    # -- writes

    def insert(self, md: SegmentLike, segment_id: bytes) -> int:
        """Add a row for a segment whose id (``md.segment_id.bytes``, which the caller has
        at hand) is not held; returns its number."""
        ...

    def insert_sorted(self, run: Sequence[tuple[SegmentLike, bytes, int]]) -> range:
        """Add rows in one go, faster: ``(segment, id bytes, its only leader epoch)``, the
        epoch starting at the start offset, no custom metadata, ids not held, keys ascending
        and greater than ``last_key``. Returns their numbers (consecutive, in order)."""
        ...

    def delete(self, row: int) -> Renumbering | None:
        """Forget a row; a Renumbering if the store compacted (see the module docstring)."""
        ...

    def update(
        self,
        row: int,
        state: RemoteLogSegmentState,
        event_timestamp_ms: int,
        broker_id: int,
        custom_metadata: bytes | None,
    ) -> None:
        """Apply an update event's values (not DELETE_SEGMENT_FINISHED: delete the row
        instead; custom metadata None keeps the row's)."""
        ...

    # -- reads

    def find(self, segment_id: bytes) -> int:
        """The row of a segment id, or -1."""
        ...

    def is_live(self, row: int) -> bool:
        """False for a deleted row still present in ``rows_after``'s sequence."""
        ...

    def state(self, row: int) -> RemoteLogSegmentState: ...

    def start(self, row: int) -> int:
        """The start offset."""
        ...

    def size(self, row: int) -> int:
        """The segment's size in bytes."""
        ...

    def key(self, row: int) -> RowKey: ...

    def epochs(self, row: int) -> Sequence[tuple[int, int]]:
        """The segment's leader epochs, ``(epoch, start offset)`` by epoch."""
        ...

    def epoch_end(self, row: int, epoch: int) -> int:
        """The last offset of ``epoch`` in the segment: the next epoch's start offset - 1,
        or the segment's end offset."""
        ...

    def segment(self, row: int) -> RemoteLogSegmentMetadata:
        """The row as metadata (a new object each call)."""
        ...

    def rows_after(self, key: RowKey | None) -> tuple[Sequence[int], int]:
        """``(rows, i)``: ``rows[i:]`` are the rows with a key greater than ``key`` (every
        row for None) in key order, deleted ones included (see ``is_live``)."""
        ...

    def last_row_at_or_before(self, offset: int) -> int:
        """The greatest number of a row (deleted ones included) starting at or before
        ``offset``, or -1; only while ``in_key_order``."""
        ...
