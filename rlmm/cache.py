"""The in-memory remote log metadata of user partitions (Kafka's RemoteLogMetadataCache).

Semantics are Kafka's (RemoteLogMetadataCache, RemoteLogLeaderEpochState,
RemotePartitionMetadataStore), per user partition:

==================================  =======  ========  =============  ==============
method / segment state              STARTED  FINISHED  DELETE_STARTED DELETE_FINISHED
==================================  =======  ========  =============  ==============
remote_log_segment_metadata         no       yes (1)   no             no (gone)
list_remote_log_segments([epoch])   yes      yes       yes            no (gone)
==================================  =======  ========  =============  ==============

(1) only while the segment is *referenced* for the epoch. Per leader epoch the cache keeps
Kafka's map "epoch start offset -> segment" of COPY_SEGMENT_FINISHED segments, plus a set of
*unreferenced* segments: those still copying or being deleted, and those superseded after a
leader change (a newly finished segment whose epoch range starts at or below an older
segment's and reaches at least the epoch's highest offset drops the older one from the map;
so does one with the very same epoch start offset). Unreferenced segments are listed, so that
they can be deleted, but never served. ``highest_offset_for_epoch`` is the highest epoch end
offset ever mapped, kept (as in Kafka) after the segments go.

Deviations from Kafka, on purpose: an invalid transition raises
``InvalidStateTransitionError`` (Kafka logs and drops it); a repeated event in the same state
only refreshes the event timestamp, broker id and custom metadata (Kafka re-runs the epoch
handling, which can unreference segments on a retry); listings are ordered by
``(start offset, segment id bytes)``, a total order that the paged listing's cursor uses.

Memory layout (the point of this module: 2.6 M segments of one partition in ~100 MB).
Segments are *rows*, numbered in insertion order; row ``r`` lives in block ``r >> 10`` at
position ``r & 1023`` and keeps its number until a compaction. A block holds 1024 rows as
columns, each delta-encoded against a block base in the narrowest array type that fits
(widened to 64 bits per block on overflow)::

    ids     bytearray   16 B   segment uuid
    start   array i     4 B    start offset - block's first start offset
    ts      array i     4 B    max timestamp - block's first max timestamp
    evt     array i     4 B    event timestamp - max timestamp
    size    array i     4 B    segment size in bytes
    flags   bytearray   1 B    state (2 bits) | dead | txn index empty | multi epoch | custom
    end     none or array i    end - start; none while each row ends where the next begins
                               (Kafka's segments are contiguous), then only the last is kept
    broker  int or array i     one value per block until two rows differ
    epoch   int or array i     the segment's only leader epoch (same rule)

Rare shapes go to side dicts keyed by row: segments whose leader epochs are not exactly
``{epoch: start offset}``, and custom metadata. Segment id -> row is an open-addressing hash
table of rows (``array('i')``, load 0.35-0.7, tombstones) that compares the uuid bytes in the
blocks. Per epoch, the map is the rows sorted by the epoch's start offset: a ``range`` while
they are consecutive rows (0 B a segment), else an ``array('i')``; deletions at its front only
move a head index; lookups are three C-level bisects (block, row in block, member). Rows
arrive in ``(start offset, id)`` order as a rule, so that order is the row order itself; an
out-of-order add creates an explicit sorted row array until the next compaction. Deleted rows
are tombstones: whole dead blocks at the front are freed at once, and when dead rows outnumber
live ones everything is compacted (renumbered in sorted order; O(rows), amortised O(1)).
Objects are built only for what a method returns, without re-running their validation.

Threading: every public method takes the cache's lock; none calls out while holding it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import struct
import threading
import time
import uuid
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from tiered.api import (
    InvalidStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
)

_S = RemoteLogSegmentState
_STATES = (_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED)

_BITS = 10
_BLOCK = 1 << _BITS
_POS = _BLOCK - 1

# flags byte
_STATE = 0x03
_DEAD = 0x04
_TXN_EMPTY = 0x08
_MULTI = 0x10  # leader epochs in _multi, not (epoch column, start offset)
_CUSTOM = 0x20  # custom metadata in _custom

_EMPTY = -1  # id table slot never used
_GONE = -2  # id table slot whose row was deleted

_CURSOR = struct.Struct(">q16s")

# Building the returned objects without their validating constructors (5 us each, the bulk
# of a lookup). Fails at import if the classes gain fields this module does not set.
_new = object.__new__
_set = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown
_FIELDS = {
    RemoteLogSegmentId: {"topic_id_partition", "id"},
    RemoteLogSegmentMetadata: {
        "remote_log_segment_id", "start_offset", "end_offset", "max_timestamp_ms", "broker_id",
        "event_timestamp_ms", "segment_size_in_bytes", "segment_leader_epochs",
        "custom_metadata", "state", "txn_index_empty",
    },
}  # fmt: skip
for _cls, _names in _FIELDS.items():
    if {f.name for f in dataclasses.fields(_cls)} != _names:  # type: ignore[arg-type]
        raise ImportError(f"rlmm.cache does not know every field of {_cls.__name__}")
if set(uuid.UUID.__slots__) - {"__weakref__"} != {"int", "is_safe"}:
    raise ImportError("rlmm.cache does not know uuid.UUID's slots")  # start offset, segment id
_CURSOR_PREFIX = "c1."


class SegmentLike(Protocol):
    """What rebuilding needs of a segment: RemoteLogSegmentMetadata, or the snapshot
    record of rlmm.serde (which has no partition)."""

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


def _push(arr: array[int], value: int) -> array[int]:
    """Append, widening a 32-bit array to 64 bits if ``value`` does not fit."""
    try:
        arr.append(value)
    except OverflowError:
        arr = array("q", arr)
        arr.append(value)
    return arr


def _extend(arr: array[int], values: list[int]) -> array[int]:
    """Extend, widening a 32-bit array to 64 bits if a value does not fit."""
    try:
        more = array(arr.typecode, values)
    except OverflowError:
        arr, more = array("q", arr), array("q", values)
    arr.extend(more)
    return arr


def _put(arr: array[int], i: int, value: int) -> array[int]:
    try:
        arr[i] = value
    except OverflowError:
        arr = array("q", arr)
        arr[i] = value
    return arr


class _Block:
    """1024 rows as delta-encoded columns (see the module docstring)."""

    __slots__ = (
        "broker",
        "broker_c",
        "dead",
        "end",
        "end_last",
        "epoch",
        "epoch_c",
        "evt",
        "flags",
        "ids",
        "n",
        "s0",
        "size",
        "start",
        "t0",
        "ts",
    )

    def __init__(self, s0: int, t0: int) -> None:
        self.s0 = s0
        self.t0 = t0
        self.n = 0
        self.dead = 0
        self.ids = bytearray()
        self.start: array[int] = array("i")
        # end - start per row; None while every row ends where the next begins (then a
        # row's end is the next row's start - 1, and the last row's is end_last).
        self.end: array[int] | None = None
        self.end_last = -1
        self.ts: array[int] = array("i")
        self.evt: array[int] = array("i")
        self.size: array[int] = array("i")
        self.flags = bytearray()
        self.broker_c = 0
        self.broker: array[int] | None = None
        self.epoch_c = 0
        self.epoch: array[int] | None = None

    def append(
        self, idb: bytes, start: int, end: int, ts: int, evt: int, size: int, flags: int,
        broker: int, epoch: int,
    ) -> None:  # fmt: skip
        n = self.n
        self.ids += idb
        self.start = _push(self.start, start - self.s0)
        self._push_end(start, end)
        self.ts = _push(self.ts, ts - self.t0)
        self.evt = _push(self.evt, evt - ts)
        self.size = _push(self.size, size)
        self.flags.append(flags)
        if n == 0:
            self.broker_c = broker
            self.epoch_c = epoch
        if self.broker is not None:
            self.broker = _push(self.broker, broker)
        elif broker != self.broker_c:
            self.broker = _push(array("i", [self.broker_c]) * n, broker)
        if self.epoch is not None:
            self.epoch = _push(self.epoch, epoch)
        elif epoch != self.epoch_c:
            self.epoch = _push(array("i", [self.epoch_c]) * n, epoch)
        self.n = n + 1
        if self.n == _BLOCK:
            self.seal()

    def _push_end(self, start: int, end: int) -> None:
        if self.end is None:
            if self.n == 0 or start == self.end_last + 1:
                self.end_last = end
                return
            self.end = self._explicit_ends()
        self.end = _push(self.end, end - start)

    def _explicit_ends(self) -> array[int]:
        st = self.start
        ends = [st[k + 1] - st[k] - 1 for k in range(self.n - 1)]
        if self.n:
            ends.append(self.end_last - self.s0 - st[self.n - 1])
        return _extend(array("i"), ends)

    def end_of(self, p: int) -> int:
        """Row ``p``'s end offset."""
        if self.end is not None:
            return self.s0 + self.start[p] + self.end[p]
        if p == self.n - 1:
            return self.end_last
        return self.s0 + self.start[p + 1] - 1

    def seal(self) -> None:
        """The block is full: drop the arrays' growth slack."""
        for name in ("start", "end", "ts", "evt", "size", "broker", "epoch"):
            col = getattr(self, name)
            if col is not None:
                setattr(self, name, array(col.typecode, col))
        self.ids = bytearray(self.ids)
        self.flags = bytearray(self.flags)

    def set_broker(self, pos: int, broker: int) -> None:
        if self.broker is None:
            if broker == self.broker_c:
                return
            self.broker = array("i", [self.broker_c]) * self.n
        self.broker = _put(self.broker, pos, broker)


class _EpochState:
    """Kafka's RemoteLogLeaderEpochState, holding rows.

    The map "epoch start offset -> row" is split in two: ``rows[head:]``, the rows whose
    epoch start is their start offset (nearly all), sorted by it, and so also by row number
    while rows are in order; and ``odd``/``odd_keys``, the few others (a segment that began
    in an earlier epoch), keyed by their epoch start. Keys are unique across both.
    """

    __slots__ = ("head", "highest", "odd", "odd_keys", "rows", "unref")

    def __init__(self) -> None:
        # A range while the members are consecutive rows (0 bytes a segment), else an array.
        self.rows: array[int] | range = range(0)
        self.head = 0
        self.odd: dict[int, int] = {}  # epoch start -> row
        self.odd_keys: list[int] = []  # sorted keys of odd
        self.unref: set[int] = set()
        self.highest: int | None = None

    def members(self) -> list[int]:
        return [*self.rows[self.head :], *self.odd.values()]

    def _array(self) -> array[int]:
        rows = self.rows
        if isinstance(rows, range):
            rows = self.rows = array("i", rows)
        return rows

    def append(self, r: int) -> None:
        rows = self.rows
        if isinstance(rows, range):
            if self.head == len(rows):
                self.rows, self.head = range(r, r + 1), 0
                return
            if r == rows[-1] + 1:
                self.rows = range(rows.start, r + 1)
                return
        self._array().append(r)

    def extend(self, first: int, stop: int) -> None:
        """Append the consecutive rows ``first ... stop - 1``."""
        rows = self.rows
        if isinstance(rows, range) and (self.head == len(rows) or rows[-1] + 1 == first):
            begin = first if self.head == len(rows) else rows.start + self.head
            self.rows, self.head = range(begin, stop), 0
        else:
            self._array().extend(range(first, stop))

    def insert(self, i: int, r: int) -> None:
        self._array().insert(i, r)

    def delete(self, i: int) -> None:
        """Remove the member at index ``i`` (>= head)."""
        rows = self.rows
        if i == self.head:
            self.head += 1
            if isinstance(rows, range):
                self.rows, self.head = rows[self.head :], 0
            elif self.head >= _BLOCK and 2 * self.head >= len(rows):
                del rows[: self.head]
                self.head = 0
        elif i == len(rows) - 1:
            if isinstance(rows, range):
                self.rows = rows[:-1]
            else:
                rows.pop()
        else:
            del self._array()[i]


class RemoteLogMetadataCache:
    """The remote segments of one user partition; see the module docstring.

    Args:
        topic_id_partition: the partition; every event must be for it (``ValueError``).
    """

    def __init__(self, topic_id_partition: TopicIdPartition) -> None:
        self._tp = topic_id_partition
        self._lock = threading.Lock()
        self._initialized = False
        self._blocks: list[_Block] = []
        self._bstarts: array[int] = array("q")  # each block's first start offset
        self._block0 = 0  # block number of _blocks[0]
        self._next = 0  # the next row number
        self._live = 0
        self._dead = 0
        self._table: array[int] = array("i", [_EMPTY]) * 16
        self._used = 0  # slots not _EMPTY
        self._multi: dict[int, tuple[tuple[int, int], ...]] = {}
        self._custom: dict[int, bytes] = {}
        self._epochs: dict[int, _EpochState] = {}
        self._order: array[int] | None = None  # rows sorted by key, if not in row order
        self._last: tuple[int, bytes] | None = None  # the greatest key added

    # -- construction from a snapshot ------------------------------------------------------

    @classmethod
    def from_entries(
        cls, topic_id_partition: TopicIdPartition, entries: Iterable[SegmentLike]
    ) -> RemoteLogMetadataCache:
        """A cache holding ``entries`` (as returned by ``entries()``), in their order.

        Each entry is applied as Kafka restores a snapshot: a COPY_SEGMENT_STARTED or
        DELETE_SEGMENT_STARTED segment is unreferenced, a COPY_SEGMENT_FINISHED one goes
        through the epoch maps in turn; DELETE_SEGMENT_FINISHED entries are skipped. A
        repeated segment id replaces the earlier entry. As in Kafka, what a snapshot does
        not carry is recomputed: ``highest_offset_for_epoch`` from the FINISHED entries.

        Raises:
            ValueError: an entry with invalid values.
        """
        cache = cls(topic_id_partition)
        entries = list(entries) if not isinstance(entries, list | tuple) else entries
        cache._resize_table(max(16, 2 * len(entries)))
        cache._bulk_load(entries)
        return cache

    def _bulk_load(self, entries: Iterable[SegmentLike]) -> None:
        """``_load`` each entry; the common ones (COPY_SEGMENT_FINISHED, one epoch starting
        at the start offset, no custom metadata, after every row and every mapped segment of
        their epoch, new id) are gathered and written a block at a time."""
        finished = _S.COPY_SEGMENT_FINISHED
        batch: list[tuple[SegmentLike, bytes, int]] = []
        table_room = 7 * len(self._table) // 10
        tail: dict[int, int] = {}  # epoch -> greatest mapped key, valid while batching
        batch_ids: set[bytes] = set()
        last_key = self._last

        def flush() -> None:
            if batch:
                self._append_batch(batch)
                batch.clear()
            tail.clear()
            batch_ids.clear()

        for md in entries:
            epochs = md.segment_leader_epochs
            start = md.start_offset
            if md.state == finished and len(epochs) == 1 and md.custom_metadata is None:
                ((epoch, s),) = epochs.items()
                idb = md.segment_id.bytes
                key = (start, idb)
                if (
                    s == start
                    and (last_key is None or key > last_key)
                    and self._order is None
                    and self._used + len(batch) < table_room
                ):
                    top = tail.get(epoch)
                    if top is None:
                        st = self._epochs.get(epoch)
                        top = -1 if st is None else self._last_member(st)[0]
                    if top < start and idb not in batch_ids and self._find(idb) < 0:
                        batch_ids.add(idb)
                        tail[epoch] = start
                        last_key = key
                        batch.append((md, idb, epoch))
                        if (self._next + len(batch)) & _POS == 0:
                            flush()
                        continue
            flush()
            self._load(md)
            last_key = self._last
            table_room = 7 * len(self._table) // 10
        flush()

    def _append_batch(self, batch: list[tuple[SegmentLike, bytes, int]]) -> None:
        """Append FINISHED rows that all fit in the tail block, in key order (see above)."""
        r0 = self._next
        if r0 & _POS == 0:
            md = batch[0][0]
            self._blocks.append(_Block(md.start_offset, md.max_timestamp_ms))
            self._bstarts.append(md.start_offset)
        b = self._blocks[-1]
        s0, t0 = b.s0, b.t0
        t = self._table
        m = len(t) - 1
        starts, ends, tss, evts, sizes, flags, brokers, epochs = ([] for _ in range(8))
        ids = bytearray()
        for i, (md, idb, epoch) in enumerate(batch):
            r = r0 + i
            j = hash(idb) & m
            while t[j] >= 0:
                j = (j + 1) & m
            if t[j] == _EMPTY:
                self._used += 1
            t[j] = r
            start = md.start_offset
            ts = md.max_timestamp_ms
            ids += idb
            starts.append(start - s0)
            ends.append(md.end_offset - start)
            tss.append(ts - t0)
            evts.append(md.event_timestamp_ms - ts)
            sizes.append(md.segment_size_in_bytes)
            flags.append(_S.COPY_SEGMENT_FINISHED | (_TXN_EMPTY if md.txn_index_empty else 0))
            brokers.append(md.broker_id)
            epochs.append(epoch)
        # The epoch maps, one run of equal epochs at a time.
        i = 0
        while i < len(batch):
            epoch = epochs[i]
            j = i + 1
            while j < len(batch) and epochs[j] == epoch:
                j += 1
            st = self._epoch(epoch)
            st.extend(r0 + i, r0 + j)
            end = max(batch[k][0].end_offset for k in range(i, j))
            if st.highest is None or end > st.highest:
                st.highest = end
            i = j
        if b.n == 0:
            b.broker_c, b.epoch_c = brokers[0], epochs[0]
        b.ids += ids
        b.start = _extend(b.start, starts)
        if b.end is None:
            prev = b.end_last
            contiguous = True
            for (md, _, _), e in zip(batch, ends, strict=True):
                if b.n and md.start_offset != prev + 1:
                    contiguous = False
                    break
                prev = md.start_offset + e
            if contiguous and b.n == 0:
                contiguous = all(
                    batch[k + 1][0].start_offset == batch[k][0].end_offset + 1
                    for k in range(len(batch) - 1)
                )
            if contiguous:
                b.end_last = batch[-1][0].end_offset
            else:
                b.end = b._explicit_ends()
        if b.end is not None:
            b.end = _extend(b.end, ends)
        b.ts = _extend(b.ts, tss)
        b.evt = _extend(b.evt, evts)
        b.size = _extend(b.size, sizes)
        b.flags += bytes(flags)
        if b.broker is not None or brokers.count(b.broker_c) != len(brokers):
            b.broker = _extend(b.broker or array("i", [b.broker_c]) * b.n, brokers)
        if b.epoch is not None or epochs.count(b.epoch_c) != len(epochs):
            b.epoch = _extend(b.epoch or array("i", [b.epoch_c]) * b.n, epochs)
        b.n += len(batch)
        if b.n == _BLOCK:
            b.seal()
        self._next = r0 + len(batch)
        self._live += len(batch)
        md, idb, _ = batch[-1]
        self._last = (md.start_offset, idb)

    def _load(self, md: SegmentLike) -> None:
        state = md.state
        if state == _S.DELETE_SEGMENT_FINISHED:
            return
        idb = md.segment_id.bytes
        old = self._find(idb)
        if old >= 0:
            self._forget(old)
        r = self._append(md, idb)
        if state == _S.COPY_SEGMENT_FINISHED:
            self._finished(r)
        else:
            for e, _ in self._epochs_of(r):
                self._epoch(e).unref.add(r)

    def mark_initialized(self) -> None:
        """The cache has caught up with its metadata partition (Kafka's markInitialized)."""
        self._initialized = True

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self._tp

    def __len__(self) -> int:
        """Segments held, in any state."""
        return self._live

    # -- events ----------------------------------------------------------------------------

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Track a segment whose copy started; it is listed but never served.

        Idempotent: adding a segment id again while it is COPY_SEGMENT_STARTED replaces the
        earlier metadata.

        Raises:
            ValueError: ``metadata.state`` is not COPY_SEGMENT_STARTED, or the segment
                belongs to another partition.
            InvalidStateTransitionError: the segment id is known in a later state.
        """
        if metadata.state != _S.COPY_SEGMENT_STARTED:
            raise ValueError(
                f"{metadata.remote_log_segment_id}: a new segment must be COPY_SEGMENT_STARTED, "
                f"not {metadata.state.name}"
            )
        self._check_partition(metadata.topic_id_partition)
        idb = metadata.segment_id.bytes
        with self._lock:
            old = self._find(idb)
            if old >= 0:
                current = self._state(old)
                if current != _S.COPY_SEGMENT_STARTED:
                    raise InvalidStateTransitionError(
                        f"segment {metadata.segment_id} of {self._tp}: invalid transition "
                        f"{current.name} -> COPY_SEGMENT_STARTED"
                    )
                self._forget(old)
            r = self._append(metadata, idb)
            for e, _ in self._epochs_of(r):
                self._epoch(e).unref.add(r)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Apply a state change (Kafka's updateRemoteLogSegmentMetadata).

        COPY_SEGMENT_FINISHED maps the segment in each of its epochs (unreferencing the
        segments it supersedes); DELETE_SEGMENT_STARTED unmaps it (unreferenced, still
        listed); DELETE_SEGMENT_FINISHED forgets it. A repeated state is idempotent: it only
        refreshes the event timestamp, broker id and custom metadata.

        Raises:
            ValueError: the segment belongs to another partition.
            RemoteResourceNotFoundError: the segment id is not known.
            InvalidStateTransitionError: the state does not follow the current one.
        """
        seg = update.remote_log_segment_id
        self._check_partition(seg.topic_id_partition)
        with self._lock:
            r = self._find(seg.id.bytes)
            if r < 0:
                raise RemoteResourceNotFoundError(f"no remote log segment metadata for {seg}")
            current = self._state(r)
            target = update.state
            if not RemoteLogSegmentState.is_valid_transition(current, target):
                raise InvalidStateTransitionError(
                    f"segment {seg.id} of {self._tp}: invalid transition "
                    f"{current.name} -> {target.name}"
                )
            if target == _S.DELETE_SEGMENT_FINISHED:
                self._forget(r)
                return
            b = self._blocks[(r >> _BITS) - self._block0]
            p = r & _POS
            b.evt = _put(b.evt, p, update.event_timestamp_ms - (b.t0 + b.ts[p]))
            b.set_broker(p, update.broker_id)
            if update.custom_metadata is not None:
                self._custom[r] = update.custom_metadata
                b.flags[p] |= _CUSTOM
            if target == current:
                return
            b.flags[p] = (b.flags[p] & ~_STATE) | target
            if target == _S.COPY_SEGMENT_FINISHED:
                self._finished(r)
            else:  # DELETE_SEGMENT_STARTED
                for e, s in self._epochs_of(r):
                    st = self._epoch(e)
                    self._unmap(st, e, s, r)
                    st.unref.add(r)

    # -- reads -----------------------------------------------------------------------------

    def remote_log_segment_metadata(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment serving ``offset`` of ``leader_epoch``, or None.

        Kafka's rule: the epoch's mapped segment with the greatest epoch start offset
        <= ``offset``, if ``offset`` <= that epoch's end within the segment (the next
        epoch's start offset - 1, or the segment's end offset). Unreferenced segments and
        other states are never returned.
        """
        with self._lock:
            st = self._epochs.get(leader_epoch)
            if st is None:
                return None
            r = self._floor(st, offset)
            if r < 0 or offset > self._epoch_end(r, leader_epoch):
                return None
            return self._materialize(r)

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """The highest offset of ``leader_epoch`` ever mapped (COPY_SEGMENT_FINISHED), or None.

        As in Kafka, the value stays when those segments are later deleted.
        """
        with self._lock:
            st = self._epochs.get(leader_epoch)
            return None if st is None else st.highest

    def list_remote_log_segments(
        self, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments in any state, sorted by (start offset, segment id).

        Args:
            leader_epoch: None for every segment; else the segments of that epoch, mapped
                or unreferenced (COPY_SEGMENT_STARTED, DELETE_SEGMENT_STARTED, superseded).
        """
        if leader_epoch is None:
            return list(self.entries())
        with self._lock:
            st = self._epochs.get(leader_epoch)
            if st is None:
                return []
            rows = [*st.members(), *st.unref]
            rows.sort(key=self._key)
            return [self._materialize(r) for r in rows]

    def list_all(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment in any state, sorted by (start offset, segment id)."""
        return list(self.entries())

    def remote_log_size(self, leader_epoch: int) -> int:
        """Bytes of the COPY_SEGMENT_FINISHED segments with offsets in ``leader_epoch``
        (mapped or superseded; tiered.api's contract. Kafka sums every listed state)."""
        with self._lock:
            st = self._epochs.get(leader_epoch)
            if st is None:
                return 0
            size = self._size
            total = sum(size(r) for r in st.members())
            return total + sum(
                size(r) for r in st.unref if self._state(r) == _S.COPY_SEGMENT_FINISHED
            )

    def describe(self, segment_id: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        """The segment with this id in any state, or None."""
        with self._lock:
            r = self._find(segment_id.bytes)
            return None if r < 0 else self._materialize(r)

    # -- paged listing and snapshot hooks --------------------------------------------------

    def list_page(
        self, cursor: str | None, count: int, *, budget_s: float | None = 0.04
    ) -> tuple[list[RemoteLogSegmentMetadata], str | None]:
        """One page of the listing by (start offset, segment id), in the manner of Redis SCAN.

        Args:
            cursor: None to start, else the ``next_cursor`` of the previous page.
            count: how many segments to return at most (>= 1); also bounds the work: at
                most ``4 * count`` rows are examined, so a page may hold fewer.
            budget_s: a page also ends once it has taken this long (checked every 256
                rows; None for no limit), so that no call holds the lock or the caller's
                event loop much longer; the cursor stays exact.

        Returns:
            ``(segments, next_cursor)``; ``next_cursor`` is None when the scan is complete.
            The cursor encodes the key of the last row examined, so it stays valid while
            segments are added and removed: every segment present for the whole scan is
            returned exactly once (keys never change), others at most once per key.

        Raises:
            ValueError: ``count`` < 1 or a cursor that is not one of ours.
        """
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        after = None if cursor is None else decode_cursor(cursor)
        with self._lock:
            seq, lo = self._sorted_rows()
            i = lo if after is None else bisect_right(seq, after, lo, len(seq), key=self._key)
            out: list[RemoteLogSegmentMetadata] = []
            limit = min(len(seq), i + 4 * count)
            deadline = None if budget_s is None else time.perf_counter() + budget_s
            last = -1
            while i < limit and len(out) < count:
                r = seq[i]
                i += 1
                last = r
                if not self._dead_row(r):
                    out.append(self._materialize(r))
                if deadline is not None and i & 0xFF == 0 and time.perf_counter() > deadline:
                    break
            if i >= len(seq):
                return out, None
            return out, encode_cursor(*self._key(last))

    def entries(self, page: int = 4096) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment in any state, by (start offset, segment id), read a page at a time
        (the lock is taken per page; call from the thread that applies events for a
        consistent view, as the snapshot writer does)."""
        cursor: str | None = None
        while True:
            items, cursor = self.list_page(cursor, page)
            yield from items
            if cursor is None:
                return

    # -- internals: rows -------------------------------------------------------------------

    def _check_partition(self, tp: TopicIdPartition) -> None:
        if tp != self._tp:
            raise ValueError(f"event for {tp} given to the cache of {self._tp}")

    def _append(self, md: SegmentLike, idb: bytes) -> int:
        start = md.start_offset
        epochs = md.segment_leader_epochs
        if isinstance(md, RemoteLogSegmentMetadata):
            pass  # validated on construction
        elif md.end_offset < start or start < 0 or not epochs:
            raise ValueError(f"invalid segment {md.segment_id}: offsets or epochs")
        flags = int(md.state) | (_TXN_EMPTY if md.txn_index_empty else 0)
        if len(epochs) == 1 and next(iter(epochs.values())) == start:
            first = next(iter(epochs))
        else:
            flags |= _MULTI
            first = 0
        if md.custom_metadata is not None:
            flags |= _CUSTOM
        r = self._next
        self._insert_id(idb, r)  # first: a table rebuild must not see row r yet
        pos = r & _POS
        if pos == 0:
            self._blocks.append(_Block(start, md.max_timestamp_ms))
            self._bstarts.append(start)
        b = self._blocks[-1]
        ts = md.max_timestamp_ms
        b.append(
            idb, start, md.end_offset, ts, md.event_timestamp_ms, md.segment_size_in_bytes,
            flags, md.broker_id, first,
        )  # fmt: skip
        self._next = r + 1
        self._live += 1
        if flags & _MULTI:
            self._multi[r] = tuple(epochs.items())
        if flags & _CUSTOM:
            self._custom[r] = md.custom_metadata  # type: ignore[assignment]
        key = (start, idb)
        if self._last is None or key > self._last:
            self._last = key
            if self._order is not None:
                self._order.append(r)
        else:  # out of order: keep an explicit sorted order until the next compaction
            if self._order is None:
                self._order = array("i", range(self._block0 << _BITS, r))
            i = bisect_right(self._order, key, key=self._key)
            self._order.insert(i, r)
        return r

    def _forget(self, r: int) -> None:
        """Take row ``r`` out of every epoch structure, then kill it."""
        for e, s in self._epochs_of(r):
            st = self._epochs.get(e)
            if st is not None:
                self._unmap(st, e, s, r)
                st.unref.discard(r)
        self._kill(r)

    def _kill(self, r: int) -> None:
        """Forget row ``r`` (already out of every epoch structure)."""
        b = self._blocks[(r >> _BITS) - self._block0]
        p = r & _POS
        f = b.flags[p]
        b.flags[p] = f | _DEAD
        b.dead += 1
        self._live -= 1
        self._dead += 1
        self._delete_id(bytes(b.ids[p << 4 : (p << 4) + 16]))
        if f & _MULTI:
            del self._multi[r]
        if f & _CUSTOM:
            del self._custom[r]
        self._reclaim()

    def _reclaim(self) -> None:
        blocks = self._blocks
        if self._order is None:
            drop = 0  # whole dead blocks at the front (retention deletes oldest first)
            while drop < len(blocks) - 1 and blocks[drop].dead == _BLOCK:
                drop += 1
            if drop:
                del blocks[:drop]
                del self._bstarts[:drop]
                self._block0 += drop
                self._dead -= drop * _BLOCK
        if self._dead > max(_BLOCK, self._live):
            self._compact()

    def _dead_row(self, r: int) -> bool:
        return bool(self._blocks[(r >> _BITS) - self._block0].flags[r & _POS] & _DEAD)

    def _state(self, r: int) -> RemoteLogSegmentState:
        return _STATES[self._blocks[(r >> _BITS) - self._block0].flags[r & _POS] & _STATE]

    def _start(self, r: int) -> int:
        b = self._blocks[(r >> _BITS) - self._block0]
        return b.s0 + b.start[r & _POS]

    def _size(self, r: int) -> int:
        return self._blocks[(r >> _BITS) - self._block0].size[r & _POS]

    def _key(self, r: int) -> tuple[int, bytes]:
        b = self._blocks[(r >> _BITS) - self._block0]
        p = r & _POS
        return b.s0 + b.start[p], bytes(b.ids[p << 4 : (p << 4) + 16])

    def _sorted_rows(self) -> tuple[array[int] | range, int]:
        if self._order is not None:
            return self._order, 0
        return range(self._next), self._block0 << _BITS

    def _epochs_of(self, r: int) -> tuple[tuple[int, int], ...]:
        b = self._blocks[(r >> _BITS) - self._block0]
        p = r & _POS
        if b.flags[p] & _MULTI:
            return self._multi[r]
        epoch = b.epoch_c if b.epoch is None else b.epoch[p]
        return ((epoch, b.s0 + b.start[p]),)

    def _epoch_end(self, r: int, epoch: int) -> int:
        """The last offset of ``epoch`` in segment ``r``."""
        b = self._blocks[(r >> _BITS) - self._block0]
        p = r & _POS
        if b.flags[p] & _MULTI:
            for e, s in self._multi[r]:
                if e > epoch:
                    return s - 1
        return b.end_of(p)

    def _materialize(self, r: int) -> RemoteLogSegmentMetadata:
        b = self._blocks[(r >> _BITS) - self._block0]
        p = r & _POS
        f = b.flags[p]
        start = b.s0 + b.start[p]
        ts = b.t0 + b.ts[p]
        if f & _MULTI:
            epochs = dict(self._multi[r])
        else:
            epochs = {b.epoch_c if b.epoch is None else b.epoch[p]: start}
        # Trusted construction: the values were validated when the segment was added.
        u = _new(uuid.UUID)
        _set(u, "int", int.from_bytes(b.ids[p << 4 : (p << 4) + 16]))
        _set(u, "is_safe", _UNKNOWN)
        sid = _new(RemoteLogSegmentId)
        _set(sid, "topic_id_partition", self._tp)
        _set(sid, "id", u)
        md = _new(RemoteLogSegmentMetadata)
        _set(md, "remote_log_segment_id", sid)
        _set(md, "start_offset", start)
        _set(md, "end_offset", b.end_of(p))
        _set(md, "max_timestamp_ms", ts)
        _set(md, "broker_id", b.broker_c if b.broker is None else b.broker[p])
        _set(md, "event_timestamp_ms", ts + b.evt[p])
        _set(md, "segment_size_in_bytes", b.size[p])
        _set(md, "segment_leader_epochs", epochs)
        _set(md, "custom_metadata", self._custom[r] if f & _CUSTOM else None)
        _set(md, "state", _STATES[f & _STATE])
        _set(md, "txn_index_empty", bool(f & _TXN_EMPTY))
        return md

    # -- internals: epochs -----------------------------------------------------------------

    def _epoch(self, epoch: int) -> _EpochState:
        st = self._epochs.get(epoch)
        if st is None:
            st = self._epochs[epoch] = _EpochState()
        return st

    def _floor(self, st: _EpochState, offset: int) -> int:
        """The mapped row with the greatest epoch start <= ``offset``, or -1."""
        rows, head = st.rows, st.head
        r = -1
        if head < len(rows):
            if self._order is None:
                # Rows are in start order: find the last row of all starting at or before
                # offset (two C bisects), then the last member up to that row (a third).
                bi = bisect_right(self._bstarts, offset) - 1
                if bi >= 0:
                    b = self._blocks[bi]
                    p = bisect_right(b.start, offset - b.s0) - 1
                    i = bisect_right(rows, ((bi + self._block0) << _BITS) + p, head) - 1
                    if i >= head:
                        r = rows[i]
            else:
                i = bisect_right(rows, offset, head, len(rows), key=self._start) - 1
                if i >= head:
                    r = rows[i]
        if st.odd_keys:
            j = bisect_right(st.odd_keys, offset) - 1
            if j >= 0 and (r < 0 or st.odd_keys[j] > self._start(r)):
                r = st.odd[st.odd_keys[j]]
        return r

    def _last_member(self, st: _EpochState) -> tuple[int, int]:
        """(key, row) of the member with the greatest epoch start, or (-1, -1)."""
        key, r = -1, -1
        if st.head < len(st.rows):
            r = st.rows[-1]
            key = self._start(r)
        if st.odd_keys and st.odd_keys[-1] > key:
            key = st.odd_keys[-1]
            r = st.odd[key]
        return key, r

    def _member_at(self, st: _EpochState, s: int) -> int:
        """The row mapped at epoch start ``s``, or -1."""
        r = st.odd.get(s, -1)
        if r >= 0:
            return r
        rows = st.rows
        key = self._start
        i = bisect_left(rows, s, st.head, len(rows), key=key)
        if i < len(rows) and key(rows[i]) == s:
            return rows[i]
        return -1

    def _unmap(self, st: _EpochState, epoch: int, s: int, r: int) -> None:
        """Remove ``s -> r`` from the epoch's map if it is there (else nothing)."""
        if st.odd.get(s) == r:
            del st.odd[s]
            st.odd_keys.pop(bisect_left(st.odd_keys, s))
            return
        rows = st.rows
        i = bisect_left(rows, s, st.head, len(rows), key=self._start)
        if i < len(rows) and rows[i] == r:
            st.delete(i)

    def _map(self, st: _EpochState, s: int, r: int) -> None:
        """Put ``s -> r`` (no member has key ``s``)."""
        if s != self._start(r):
            st.odd[s] = r
            insort(st.odd_keys, s)
            return
        rows = st.rows
        if st.head == len(rows) or self._start(rows[-1]) < s:
            st.append(r)
        else:
            st.insert(bisect_left(rows, s, st.head, len(rows), key=self._start), r)

    def _finished(self, r: int) -> None:
        """Kafka's handleSegmentWithCopySegmentFinishedState, for every epoch of ``r``."""
        for e, s in self._epochs_of(r):
            end = self._epoch_end(r, e)
            st = self._epoch(e)
            last, old = self._last_member(st)
            if last < s:  # the usual case: after every mapped segment
                if s == self._start(r):
                    st.append(r)
                else:
                    self._map(st, s, r)
            else:
                # Supersede the mapped segments starting at or after s, if r reaches as far.
                while old >= 0 and last >= s and st.highest <= end:  # type: ignore[operator]
                    self._unmap(st, e, last, old)
                    st.unref.add(old)
                    last, old = self._last_member(st)
                old = self._member_at(st, s)
                if old != r:
                    if old >= 0:
                        self._unmap(st, e, s, old)
                        st.unref.add(old)
                    self._map(st, s, r)
            st.unref.discard(r)
            if st.highest is None or end > st.highest:
                st.highest = end

    # -- internals: segment id -> row ------------------------------------------------------

    def _find(self, idb: bytes) -> int:
        t = self._table
        m = len(t) - 1
        i = hash(idb) & m
        blocks = self._blocks
        b0 = self._block0
        while True:
            r = t[i]
            if r == _EMPTY:
                return -1
            if r >= 0:
                p = (r & _POS) << 4
                if blocks[(r >> _BITS) - b0].ids[p : p + 16] == idb:
                    return r
            i = (i + 1) & m

    def _insert_id(self, idb: bytes, r: int) -> None:
        """Add a segment id known to be absent."""
        if 10 * (self._used + 1) > 7 * len(self._table):
            self._resize_table(2 * self._live)
        t = self._table
        m = len(t) - 1
        i = hash(idb) & m
        while t[i] >= 0:
            i = (i + 1) & m
        if t[i] == _EMPTY:
            self._used += 1
        t[i] = r

    def _delete_id(self, idb: bytes) -> None:
        t = self._table
        m = len(t) - 1
        i = hash(idb) & m
        blocks = self._blocks
        while True:
            r = t[i]
            if r == _EMPTY:
                return
            if r >= 0:
                p = (r & _POS) << 4
                if blocks[(r >> _BITS) - self._block0].ids[p : p + 16] == idb:
                    t[i] = _GONE
                    return
            i = (i + 1) & m

    def _resize_table(self, want: int) -> None:
        """Rebuild the id table with at least ``want`` slots (a power of two)."""
        size = 16
        while size < want:
            size *= 2
        t = array("i", [_EMPTY]) * size
        m = size - 1
        used = 0
        for bn, b in enumerate(self._blocks):
            base = (bn + self._block0) << _BITS
            ids = b.ids
            flags = b.flags
            for p in range(b.n):
                if flags[p] & _DEAD:
                    continue
                i = hash(bytes(ids[p << 4 : (p << 4) + 16])) & m
                while t[i] != _EMPTY:
                    i = (i + 1) & m
                t[i] = base + p
                used += 1
        self._table = t
        self._used = used

    # -- internals: compaction -------------------------------------------------------------

    def _compact(self) -> None:
        """Renumber the live rows in sorted order, dropping the dead ones: O(rows)."""
        seq, lo = self._sorted_rows()
        old_blocks, old_b0 = self._blocks, self._block0
        first = old_b0 << _BITS
        remap = array("i", [-1]) * (self._next - first)
        self._blocks, self._block0, self._next = [], 0, 0
        self._bstarts = array("q")
        self._live = self._dead = 0
        multi, custom = self._multi, self._custom
        self._multi, self._custom = {}, {}
        self._order = None
        self._last = None
        self._table = array("i", [_EMPTY]) * 16
        self._used = 0
        view = _RowView(old_blocks, old_b0, multi, custom)
        for i in range(lo, len(seq)):
            r = seq[i]
            if view.dead(r):
                continue
            md = view.segment(r)
            remap[r - first] = self._append(md, md.segment_id.bytes)
        for st in self._epochs.values():
            members = [remap[r - first] for r in st.rows[st.head :]]
            st.rows, st.head = range(0), 0
            for r in members:
                st.append(r)
            st.odd = {k: remap[r - first] for k, r in st.odd.items()}
            st.unref = {remap[r - first] for r in st.unref}


class _RowSegment:
    """A row's values in the SegmentLike shape, for compaction."""

    __slots__ = (
        "broker_id",
        "custom_metadata",
        "end_offset",
        "event_timestamp_ms",
        "max_timestamp_ms",
        "segment_id",
        "segment_leader_epochs",
        "segment_size_in_bytes",
        "start_offset",
        "state",
        "txn_index_empty",
    )


class _RowView:
    def __init__(
        self,
        blocks: list[_Block],
        block0: int,
        multi: dict[int, tuple[tuple[int, int], ...]],
        custom: dict[int, bytes],
    ) -> None:
        self.blocks, self.block0, self.multi, self.custom = blocks, block0, multi, custom

    def dead(self, r: int) -> bool:
        return bool(self.blocks[(r >> _BITS) - self.block0].flags[r & _POS] & _DEAD)

    def segment(self, r: int) -> _RowSegment:
        b = self.blocks[(r >> _BITS) - self.block0]
        p = r & _POS
        f = b.flags[p]
        s = _RowSegment()
        s.segment_id = uuid.UUID(bytes=bytes(b.ids[p << 4 : (p << 4) + 16]))
        s.start_offset = b.s0 + b.start[p]
        s.end_offset = b.end_of(p)
        s.max_timestamp_ms = b.t0 + b.ts[p]
        s.event_timestamp_ms = s.max_timestamp_ms + b.evt[p]
        s.segment_size_in_bytes = b.size[p]
        s.broker_id = b.broker_c if b.broker is None else b.broker[p]
        s.segment_leader_epochs = (
            dict(self.multi[r])
            if f & _MULTI
            else {b.epoch_c if b.epoch is None else b.epoch[p]: s.start_offset}
        )
        s.custom_metadata = self.custom.get(r)
        s.state = _STATES[f & _STATE]
        s.txn_index_empty = bool(f & _TXN_EMPTY)
        return s


# -- cursors ---------------------------------------------------------------------------------


def encode_cursor(start_offset: int, segment_id: bytes) -> str:
    """The opaque cursor after the segment with this key."""
    raw = _CURSOR.pack(start_offset, segment_id)
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, bytes]:
    """The key a cursor encodes.

    Raises:
        ValueError: not a cursor returned by ``list_page``.
    """
    if not cursor.startswith(_CURSOR_PREFIX):
        raise ValueError(f"invalid cursor {cursor!r}: not returned by a listing")
    body = cursor[len(_CURSOR_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        start, idb = _CURSOR.unpack(raw)
    except (binascii.Error, struct.error, ValueError) as e:
        raise ValueError(f"invalid cursor {cursor!r}: {e}") from e
    return start, idb


# -- the partitions of a broker --------------------------------------------------------------


class RemotePartitionMetadataStore:
    """The caches of the user partitions this broker follows, and their deletion state
    (Kafka's RemotePartitionMetadataStore)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    def cache(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache:
        """The partition's cache.

        Raises:
            RemoteResourceNotFoundError: the partition is unknown, or its deletion finished.
        """
        cache = self._caches.get(topic_id_partition)
        if cache is None:
            raise RemoteResourceNotFoundError(f"no remote log metadata for {topic_id_partition}")
        return cache

    def get_or_create(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache:
        with self._lock:
            cache = self._caches.get(topic_id_partition)
            if cache is None:
                cache = self._caches[topic_id_partition] = RemoteLogMetadataCache(
                    topic_id_partition
                )
            return cache

    def install(self, cache: RemoteLogMetadataCache) -> None:
        """Put a cache rebuilt from a snapshot in place of the partition's."""
        with self._lock:
            self._caches[cache.topic_id_partition] = cache

    def remove(self, topic_id_partition: TopicIdPartition) -> None:
        """Drop the partition's state (it is no longer hosted here); idempotent."""
        with self._lock:
            self._caches.pop(topic_id_partition, None)
            self._deletes.pop(topic_id_partition, None)

    def partitions(self) -> list[TopicIdPartition]:
        return list(self._caches)

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """See ``RemoteLogMetadataCache.add_copy_in_progress_segment``; creates the cache."""
        self.get_or_create(metadata.topic_id_partition).add_copy_in_progress_segment(metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """See ``RemoteLogMetadataCache.update_remote_log_segment_metadata``.

        Raises:
            RemoteResourceNotFoundError: the partition or the segment is unknown.
        """
        self.cache(update.topic_id_partition).update_remote_log_segment_metadata(update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Record a step of deleting the partition's remote data.

        The cache keeps serving until DELETE_PARTITION_FINISHED, which drops the partition
        (later reads raise ``RemoteResourceNotFoundError``, as in Kafka). Repeats are
        idempotent.

        Raises:
            InvalidStateTransitionError: the state does not follow the current one.
        """
        tp = metadata.topic_id_partition
        with self._lock:
            current = self._deletes.get(tp)
            source = None if current is None else current.state
            if not RemotePartitionDeleteState.is_valid_transition(source, metadata.state):
                raise InvalidStateTransitionError(
                    f"partition {tp}: invalid delete transition "
                    f"{'none' if source is None else source.name} -> {metadata.state.name}"
                )
            if metadata.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self._deletes.pop(tp, None)
                self._caches.pop(tp, None)
            else:
                self._deletes[tp] = metadata

    def partition_delete_state(
        self, topic_id_partition: TopicIdPartition
    ) -> RemotePartitionDeleteState | None:
        """The partition's deletion step, or None when it is not being deleted."""
        current = self._deletes.get(topic_id_partition)
        return None if current is None else current.state

    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """Raises: RemoteResourceNotFoundError: the partition is unknown or deleted."""
        return self.cache(topic_id_partition).remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        """Raises: RemoteResourceNotFoundError: the partition is unknown or deleted."""
        return self.cache(topic_id_partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Raises: RemoteResourceNotFoundError: the partition is unknown or deleted."""
        return self.cache(topic_id_partition).list_remote_log_segments(leader_epoch)

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        """Raises: RemoteResourceNotFoundError: the partition is unknown or deleted."""
        return self.cache(topic_id_partition).remote_log_size(leader_epoch)
