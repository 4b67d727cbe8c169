"""The rows of one partition's remote segments, in ~38 bytes a segment (``SegmentRows``).

2.6 M segments (30 days of one partition at a segment a second) take ~98 MB here, against
~2 GB as Python objects. Rows are numbered in insertion order; row ``r`` lives in block
``r >> 10`` at position ``r & 1023`` and keeps its number until a compaction. A block holds
1024 rows as columns, each delta-encoded against a block base in the narrowest array type
that fits (widened to 64 bits per block on overflow)::

    ids     bytearray   16 B   segment uuid
    start   array i     4 B    start offset - block's first start offset
    ts      array i     4 B    max timestamp - block's first max timestamp
    evt     array i     4 B    event timestamp - max timestamp
    size    array i     4 B    segment size in bytes
    flags   bytearray   1 B    state (2 bits) | dead | txn index empty | multi epoch | custom
                               (0 B in a full block whose rows all have the same flags:
                               one shared ``bytes`` object, copied before a write)
    end     none or array i    end - start; none while each row ends where the next begins
                               (Kafka's segments are contiguous), then only the last is kept
    broker  int or array i     one value per block until two rows differ
    epoch   int or array i     the segment's only leader epoch (same rule)

Rare shapes go to side dicts keyed by row: segments whose leader epochs are not exactly
``{epoch: start offset}``, and custom metadata. Segment id -> row is a hash table of rows
in 3-byte slots (``_IdTable``, ~5 B a segment) that reads the ids from the blocks. Rows
arrive in key order ``(start offset, id)`` as a rule, so that order is the row order
itself; an out-of-order insert creates an explicit sorted row array until the next
compaction. Deleted rows are tombstones: whole dead blocks at the front are freed at once,
and when dead rows outnumber live ones everything is compacted (renumbered in key order;
O(rows), amortised O(1) a delete). Metadata objects are built only for what a caller asks,
without re-running their validation, and (with the compiled module) kept out of the
garbage collector's lists.

The snapshot restore appends whole runs of rows given as columns (``insert_sorted``), with
the id table's probe and fill for a run in C (``rlmm._native``, pure-Python twins here).
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import chain, islice
from operator import sub

from rlmm import native
from rlmm.segment_rows import Renumbering, RowKey, SegmentLike
from rlmm.snapshot import SnapshotRun
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
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

# A full block's flags when every row has the same, by that value: shared by the blocks
# (replaced if the block size differs, as in tests).
_UNIFORM: dict[int, bytes] = {}
# A run's TxnIndexEmpty byte (0 or 1) -> the row's flags (bytes.translate's table).
_FINISHED_FLAGS = bytes([_S.COPY_SEGMENT_FINISHED, _S.COPY_SEGMENT_FINISHED | _TXN_EMPTY]) + bytes(
    254
)
_EMPTY = 0  # id table slot never used
_GONE = 1  # id table slot whose id was deleted
_HI8_VMAX = 0xFFFFFF  # the greatest slot value while _id_hi has 8 bits

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
        raise ImportError(f"rlmm.segment_store does not know every field of {_cls.__name__}")
if set(uuid.UUID.__slots__) - {"__weakref__"} != {"int", "is_safe"}:
    raise ImportError("rlmm.segment_store does not know uuid.UUID's slots")


def _push(arr: array[int], value: int) -> array[int]:
    """Append, widening a 32-bit array to 64 bits if ``value`` does not fit."""
    try:
        arr.append(value)
    except OverflowError:
        arr = array("q", arr)
        arr.append(value)
    return arr


def _extend(arr: array[int], values: Iterable[int]) -> array[int]:
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

    def extend(
        self, ids: bytes, start_c: Sequence[int], end_c: Sequence[int], broker_c: Sequence[int],
        ts_c: Sequence[int], evt_c: Sequence[int], size_c: Sequence[int], flags: bytes,
        epochs: Sequence[int],
    ) -> None:  # fmt: skip
        """Append rows given as columns (one leader epoch each, starting at the start offset,
        no custom metadata): each column a sequence, C loops over them."""
        s0, t0 = self.s0, self.t0
        count = len(start_c)
        if self.n == 0:
            self.broker_c, self.epoch_c = broker_c[0], epochs[0]
        self.ids += ids
        self.start = _extend(self.start, [x - s0 for x in start_c])
        if self.end is None:
            # Contiguous: each row starts right after the previous one ends (the block's
            # last row before these included).
            before = self.end_last if self.n else start_c[0] - 1
            gaps = list(map(sub, start_c, chain((before,), islice(end_c, count - 1))))
            if gaps.count(1) == count:
                self.end_last = end_c[-1]
            else:
                self.end = self._explicit_ends()
        if self.end is not None:
            self.end = _extend(self.end, list(map(sub, end_c, start_c)))
        self.ts = _extend(self.ts, [x - t0 for x in ts_c])
        self.evt = _extend(self.evt, list(map(sub, evt_c, ts_c)))
        self.size = _extend(self.size, size_c)
        self.flags += flags
        if self.broker is not None or broker_c.count(self.broker_c) != count:
            self.broker = _extend(self.broker or array("i", [self.broker_c]) * self.n, broker_c)
        if self.epoch is not None or epochs.count(self.epoch_c) != count:
            self.epoch = _extend(self.epoch or array("i", [self.epoch_c]) * self.n, epochs)
        self.n += count
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
        self.share_flags()

    def share_flags(self) -> None:
        """If every row of the full block has the same flags (nearly always), use the one
        shared immutable copy (1 B a segment less); ``set_flags`` copies it before a write."""
        f = self.flags
        if type(f) is bytearray and f.count(f[0]) == _BLOCK:
            shared = _UNIFORM.get(f[0])
            if shared is None or shared != f:
                shared = _UNIFORM[f[0]] = bytes(f)
            self.flags = shared

    def set_flags(self, pos: int, flags: int) -> None:
        if type(self.flags) is bytes:
            self.flags = bytearray(self.flags)
        self.flags[pos] = flags

    def set_broker(self, pos: int, broker: int) -> None:
        if self.broker is None:
            if broker == self.broker_c:
                return
            self.broker = array("i", [self.broker_c]) * self.n
        self.broker = _put(self.broker, pos, broker)


class _IdTable:
    """Segment id -> row, in ~5 bytes a segment: the hash table half of ``SegmentStore``
    (its base class, so that probes read the ids from the blocks without a call each).

    Open addressing (linear probing), its size a power of two, kept between 0.35 and 0.7
    full. A slot holds ``row - base + 2`` in 3 bytes (``_id_lo`` 16 bits, ``_id_hi`` 8 bits;
    0 is an empty slot, 1 a deleted id): ``base`` is the first live row when the table was
    last rebuilt, so the rows of a partition whose oldest segments are deleted as new ones
    come keep fitting; the table is rebuilt on a new base when they would not, and
    ``_id_hi`` widens to 16 bits only if the live rows span more than 16 M numbers. The
    ids are not stored here: a probe compares the id in the probed row's block. A deleted
    id leaves a tombstone, so that probes for the ids after it go on; tombstones count as
    used until the next rebuild drops them.
    """

    __slots__ = ("_id_base", "_id_count", "_id_hi", "_id_lo", "_id_used", "_id_vmax")

    _blocks: list[_Block]  # SegmentStore's
    _block0: int
    _next: int

    def _clear_ids(self, slots: int) -> None:
        self._id_lo: array[int] = array("H")
        self._id_hi: array[int] = array("B")
        self._id_base = 0
        self._id_vmax = 0  # the greatest slot value the table can hold
        self._id_count = 0  # ids held
        self._id_used = 0  # slots not empty
        self._resize_ids(slots, 0)

    def find(self, segment_id: bytes) -> int:
        """The row of a segment id, or -1."""
        lo, hi = self._id_lo, self._id_hi
        m = len(lo) - 1
        i = hash(segment_id) & m
        blocks, b0, base = self._blocks, self._block0, self._id_base - 2
        while True:
            v = lo[i] | hi[i] << 16
            if v == _EMPTY:
                return -1
            if v != _GONE:
                r = v + base
                p = (r & _POS) << 4
                if blocks[(r >> _BITS) - b0].ids[p : p + 16] == segment_id:
                    return r
            i = (i + 1) & m

    def _room(self, count: int, last_row: int) -> None:
        """Rebuild the table if ``count`` more ids would fill it past 0.7, or if
        ``last_row`` would not fit its slots."""
        if 10 * (self._id_used + count) > 7 * len(self._id_lo):
            self._resize_ids(2 * (self._id_count + count), last_row - count + 1)
        elif last_row - self._id_base + 2 > self._id_vmax:
            self._resize_ids(len(self._id_lo), last_row - count + 1)

    def _add_id(self, idb: bytes, row: int) -> None:
        """Map an id known to be absent."""
        self._room(1, row)
        lo, hi = self._id_lo, self._id_hi
        m = len(lo) - 1
        i = hash(idb) & m
        while lo[i] | hi[i] << 16 > _GONE:
            i = (i + 1) & m
        if lo[i] | hi[i] << 16 == _EMPTY:
            self._id_used += 1
        v = row - self._id_base + 2
        lo[i], hi[i] = v & 0xFFFF, v >> 16
        self._id_count += 1

    def ids_absent(self, ids: list[bytes]) -> bool:
        """True if no id of ``ids`` is held (``find`` of each is -1)."""
        impl = native.COMPILED
        if impl is not None:
            return bool(
                impl.ids_absent(
                    self._id_lo,
                    self._id_hi,
                    self._id_base,
                    self._blocks,
                    self._block0,
                    _BITS,
                    ids,
                )
            )
        return self._ids_absent_py(ids)

    def _ids_absent_py(self, ids: list[bytes]) -> bool:
        """``ids_absent`` in Python (the compiled one's twin)."""
        find = self.find
        return all(find(idb) < 0 for idb in ids)

    def _add_ids(self, ids: list[bytes], first_row: int) -> None:
        """Map absent ids to the consecutive rows from ``first_row``."""
        count = len(ids)
        self._room(count, first_row + count - 1)
        impl = native.COMPILED
        if impl is not None:
            used = impl.add_ids(self._id_lo, self._id_hi, ids, first_row - self._id_base + 2)
        else:
            used = self._add_ids_py(ids, first_row)
        self._id_used += used
        self._id_count += count

    def _add_ids_py(self, ids: list[bytes], first_row: int) -> int:
        """The table part of ``_add_ids`` in Python (the compiled one's twin): returns the
        empty slots it filled."""
        lo, hi = self._id_lo, self._id_hi
        m = len(lo) - 1
        used = 0
        for v, idb in enumerate(ids, first_row - self._id_base + 2):
            i = hash(idb) & m
            while lo[i] | hi[i] << 16 > _GONE:
                i = (i + 1) & m
            if lo[i] | hi[i] << 16 == _EMPTY:
                used += 1
            lo[i], hi[i] = v & 0xFFFF, v >> 16
        return used

    def _discard_id(self, idb: bytes) -> None:
        """Unmap an id (nothing if absent)."""
        lo, hi = self._id_lo, self._id_hi
        m = len(lo) - 1
        i = hash(idb) & m
        blocks, b0, base = self._blocks, self._block0, self._id_base - 2
        while True:
            v = lo[i] | hi[i] << 16
            if v == _EMPTY:
                return
            if v != _GONE:
                r = v + base
                p = (r & _POS) << 4
                if blocks[(r >> _BITS) - b0].ids[p : p + 16] == idb:
                    lo[i], hi[i] = _GONE, 0
                    self._id_count -= 1
                    return
            i = (i + 1) & m

    def _resize_ids(self, want: int, upto: int) -> None:
        """Rebuild into at least ``want`` slots (a power of two) on the first live row as
        the base, dropping tombstones: the live rows before ``upto`` (those mapped)."""
        size = 16
        while size < want:
            size *= 2
        base = self._block0 << _BITS
        vmax = self._next - base + 1  # the last row's value
        hi_type = "B" if vmax <= _HI8_VMAX else "H"
        lo, hi = array("H", bytes(2 * size)), array(hi_type, bytes(size * (hi_type == "B" or 2)))
        m = size - 1
        count = 0
        for bi, b in enumerate(self._blocks):
            flags, ids = b.flags, b.ids
            v = ((bi + self._block0) << _BITS) - base + 2
            for p in range(min(b.n, upto - ((bi + self._block0) << _BITS))):
                if not flags[p] & _DEAD:
                    i = hash(bytes(ids[p << 4 : (p << 4) + 16])) & m
                    while lo[i] | hi[i] << 16:
                        i = (i + 1) & m
                    lo[i], hi[i] = (v + p) & 0xFFFF, (v + p) >> 16
                    count += 1
        self._id_lo, self._id_hi, self._id_base = lo, hi, base
        self._id_vmax = _HI8_VMAX if hi_type == "B" else 0xFFFFFFFF
        self._id_count = self._id_used = count


class SegmentStore(_IdTable):
    """The segments of one partition as rows (``rlmm.segment_rows.SegmentRows``).

    Args:
        topic_id_partition: the partition, for the metadata objects built.
        id_slots: initial size of the id table (it grows once 0.7 full: to restore ``n``
            segments without growing, give ``2 * n``).
    """

    __slots__ = (
        "_block0",
        "_blocks",
        "_bstarts",
        "_custom",
        "_dead",
        "_last",
        "_live",
        "_multi",
        "_next",
        "_order",
        "_tp",
        "in_key_order",
    )

    def __init__(self, topic_id_partition: TopicIdPartition, id_slots: int = 16) -> None:
        self._tp = topic_id_partition
        self._clear(id_slots)

    def _clear(self, id_slots: int) -> None:
        self._blocks: list[_Block] = []
        self._bstarts: array[int] = array("q")  # each block's first start offset
        self._block0 = 0  # block number of _blocks[0]
        self._next = 0  # the next row number
        self._live = 0
        self._dead = 0
        self._clear_ids(id_slots)
        self._multi: dict[int, tuple[tuple[int, int], ...]] = {}
        self._custom: dict[int, bytes] = {}
        self._order: array[int] | None = None  # rows sorted by key, if not in row order
        self.in_key_order = True  # _order is None
        self._last: RowKey | None = None  # the greatest key added

    def __len__(self) -> int:
        return self._live

    @property
    def last_key(self) -> RowKey | None:
        return self._last

    # -- writes ----------------------------------------------------------------------------

    def insert(self, md: SegmentLike, segment_id: bytes) -> int:
        """Add a row; ``segment_id`` is ``md.segment_id.bytes``, known to be absent."""
        start = md.start_offset
        epochs = md.segment_leader_epochs
        flags = int(md.state) | (_TXN_EMPTY if md.txn_index_empty else 0)
        if len(epochs) == 1 and next(iter(epochs.values())) == start:
            first = next(iter(epochs))
        else:
            flags |= _MULTI
            first = 0
        if md.custom_metadata is not None:
            flags |= _CUSTOM
        r = self._next
        if r & _POS == 0:
            self._blocks.append(_Block(start, md.max_timestamp_ms))
            self._bstarts.append(start)
        self._blocks[-1].append(
            segment_id, start, md.end_offset, md.max_timestamp_ms, md.event_timestamp_ms,
            md.segment_size_in_bytes, flags, md.broker_id, first,
        )  # fmt: skip
        self._next = r + 1
        self._live += 1
        self._add_id(segment_id, r)
        if flags & _MULTI:
            self._multi[r] = tuple(epochs.items())
        if flags & _CUSTOM:
            self._custom[r] = md.custom_metadata  # type: ignore[assignment]
        key = (start, segment_id)
        if self._last is None or key > self._last:
            self._last = key
            if self._order is not None:
                self._order.append(r)
        else:  # out of order: keep an explicit sorted order until the next compaction
            if self._order is None:
                self._order = array("i", range(self._block0 << _BITS, r))
                self.in_key_order = False
            i = bisect_right(self._order, key, key=self.key)
            self._order.insert(i, r)
        return r

    def insert_sorted(self, run: SnapshotRun) -> range:
        """Add rows a block at a time: a run's columns (COPY_SEGMENT_FINISHED, each epoch
        starting at the start offset, no custom metadata), new ids, keys ascending and
        greater than ``last_key``."""
        first = self._next
        ids, starts = run.ids, run.start_offset
        count = len(ids)
        if not count:
            return range(first, first)
        flags = run.txn_index_empty.translate(_FINISHED_FLAGS)
        done = 0
        while done < count:
            r0 = self._next
            if r0 & _POS == 0:
                self._blocks.append(_Block(starts[done], run.max_timestamp_ms[done]))
                self._bstarts.append(starts[done])
            stop = min(count, done + _BLOCK - (r0 & _POS))
            self._blocks[-1].extend(
                b"".join(ids[done:stop]), starts[done:stop], run.end_offset[done:stop],
                run.broker_id[done:stop], run.max_timestamp_ms[done:stop],
                run.event_timestamp_ms[done:stop], run.segment_size_in_bytes[done:stop],
                flags[done:stop], run.epoch[done:stop],
            )  # fmt: skip
            self._next = r0 + stop - done
            done = stop
        self._live += count
        self._add_ids(ids, first)
        if self._order is not None:
            self._order.extend(range(first, self._next))
        self._last = (starts[-1], ids[-1])
        return range(first, self._next)

    def delete(self, row: int) -> Renumbering | None:
        b = self._blocks[(row >> _BITS) - self._block0]
        p = row & _POS
        f = b.flags[p]
        b.set_flags(p, f | _DEAD)
        b.dead += 1
        self._live -= 1
        self._dead += 1
        self._discard_id(bytes(b.ids[p << 4 : (p << 4) + 16]))
        if f & _MULTI:
            del self._multi[row]
        if f & _CUSTOM:
            del self._custom[row]
        if self._order is None:
            self._free_front_blocks()
        if self._dead > max(_BLOCK, self._live):
            return self._compact()
        return None

    def update(
        self, row: int, state: RemoteLogSegmentState, event_timestamp_ms: int, broker_id: int,
        custom_metadata: bytes | None,
    ) -> None:  # fmt: skip
        b = self._blocks[(row >> _BITS) - self._block0]
        p = row & _POS
        b.evt = _put(b.evt, p, event_timestamp_ms - (b.t0 + b.ts[p]))
        if b.broker is not None or broker_id != b.broker_c:
            b.set_broker(p, broker_id)
        flags = (b.flags[p] & ~_STATE) | state
        if custom_metadata is not None:
            self._custom[row] = custom_metadata
            flags |= _CUSTOM
        b.set_flags(p, flags)
        if p == _POS and b.n == _BLOCK:
            # The last row's copy finished after the block filled: its flags may now be
            # all alike (a block is sealed while its last row is still being copied).
            b.share_flags()

    def _free_front_blocks(self) -> None:
        """Free whole dead blocks at the front (retention deletes the oldest first)."""
        blocks = self._blocks
        drop = 0
        while drop < len(blocks) - 1 and blocks[drop].dead == _BLOCK:
            drop += 1
        if drop:
            del blocks[:drop]
            del self._bstarts[:drop]
            self._block0 += drop
            self._dead -= drop * _BLOCK

    def _compact(self) -> Renumbering:
        """Renumber the live rows in key order, dropping the dead ones: O(rows)."""
        seq, lo = self.rows_after(None)
        first = self._block0 << _BITS
        remap = array("i", [-1]) * (self._next - first)
        old = copy.copy(self)  # the rows as they are, read while self is refilled
        self._clear(2 * self._live)
        for i in range(lo, len(seq)):
            r = seq[i]
            if old.is_live(r):
                md = old.segment(r)
                remap[r - first] = self.insert(md, md.segment_id.bytes)
        return Renumbering(first, remap)

    # -- reads -----------------------------------------------------------------------------

    def is_live(self, row: int) -> bool:
        return not self._blocks[(row >> _BITS) - self._block0].flags[row & _POS] & _DEAD

    def state(self, row: int) -> RemoteLogSegmentState:
        return _STATES[self._blocks[(row >> _BITS) - self._block0].flags[row & _POS] & _STATE]

    def start(self, row: int) -> int:
        b = self._blocks[(row >> _BITS) - self._block0]
        return b.s0 + b.start[row & _POS]

    def size(self, row: int) -> int:
        return self._blocks[(row >> _BITS) - self._block0].size[row & _POS]

    def key(self, row: int) -> RowKey:
        b = self._blocks[(row >> _BITS) - self._block0]
        p = row & _POS
        return b.s0 + b.start[p], bytes(b.ids[p << 4 : (p << 4) + 16])

    def epochs(self, row: int) -> tuple[tuple[int, int], ...]:
        b = self._blocks[(row >> _BITS) - self._block0]
        p = row & _POS
        if b.flags[p] & _MULTI:
            return self._multi[row]
        epoch = b.epoch_c if b.epoch is None else b.epoch[p]
        return ((epoch, b.s0 + b.start[p]),)

    def epoch_end(self, row: int, epoch: int) -> int:
        b = self._blocks[(row >> _BITS) - self._block0]
        p = row & _POS
        if b.flags[p] & _MULTI:
            for e, s in self._multi[row]:
                if e > epoch:
                    return s - 1
        return b.end_of(p)

    def segment(self, row: int) -> RemoteLogSegmentMetadata:
        b = self._blocks[(row >> _BITS) - self._block0]
        p = row & _POS
        f = b.flags[p]
        start = b.s0 + b.start[p]
        ts = b.t0 + b.ts[p]
        if f & _MULTI:
            epochs = dict(self._multi[row])
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
        _set(md, "custom_metadata", self._custom[row] if f & _CUSTOM else None)
        _set(md, "state", _STATES[f & _STATE])
        _set(md, "txn_index_empty", bool(f & _TXN_EMPTY))
        impl = native.COMPILED
        if impl is not None:  # no cycles possible: keep them out of the collector's work
            impl.untrack(u, sid, md)
        return md

    def rows_after(self, key: RowKey | None) -> tuple[array[int] | range, int]:
        if self._order is not None:
            seq: array[int] | range = self._order
            lo = 0
        else:
            seq, lo = range(self._next), self._block0 << _BITS
        if key is None:
            return seq, lo
        return seq, bisect_right(seq, key, lo, len(seq), key=self.key)

    def last_row_at_or_before(self, offset: int) -> int:
        bi = bisect_right(self._bstarts, offset) - 1
        if bi < 0:
            return -1
        b = self._blocks[bi]
        return ((bi + self._block0) << _BITS) + bisect_right(b.start, offset - b.s0) - 1
