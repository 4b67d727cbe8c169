"""The in-memory remote log metadata of one user partition (Kafka's RemoteLogMetadataCache).

Semantics are Kafka's (RemoteLogMetadataCache, RemoteLogLeaderEpochState), per user
partition:

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

Storage: this module holds the rules only and refers to segments by row number. The rows
are a ``SegmentRows`` store (``rlmm.segment_rows``), by default ``rlmm.segment_store``'s,
which keeps 2.6 M segments in ~100 MB; each epoch's map is an ``rlmm.epoch_map.EpochMap``.

Threading: every public method takes the cache's lock; none calls out while holding it.
"""

from __future__ import annotations

import base64
import binascii
import struct
import threading
import time
import uuid
from array import array
from collections.abc import Iterable, Iterator

from rlmm.epoch_map import EpochMap
from rlmm.segment_rows import Renumbering, SegmentLike, SegmentRows
from rlmm.segment_store import SegmentStore
from rlmm.snapshot import SnapshotRow, SnapshotRun
from tiered.api import (
    InvalidStateTransitionError,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
)

_S = RemoteLogSegmentState

_CURSOR = struct.Struct(">q16s")  # start offset, segment id
_CURSOR_PREFIX = "c1."

# Restoring appends the usual segments this many at a time: a call per row would cost more
# than the rows, a longer run would hold more input objects alive at once.
_RUN = 1024


class _LeaderEpochState:
    """Kafka's RemoteLogLeaderEpochState: one leader epoch's segments, as rows."""

    __slots__ = ("epoch", "highest", "map", "store", "unreferenced")

    def __init__(self, rows: SegmentRows, epoch: int) -> None:
        self.epoch = epoch
        self.store = rows
        self.map = EpochMap(rows)  # epoch start offset -> COPY_SEGMENT_FINISHED row
        self.unreferenced: set[int] = set()  # listed, never served
        self.highest: int | None = None  # the highest epoch end offset ever mapped

    def rows(self) -> list[int]:
        """Every row of the epoch, mapped or unreferenced."""
        return [*self.map.rows(), *self.unreferenced]

    def copy_started(self, row: int) -> None:
        self.unreferenced.add(row)

    def copy_finished(self, start: int, row: int, end: int) -> None:
        """Map ``row``, whose part in this epoch is ``start`` to ``end``.

        After a leader change the new leader may copy again what the old one had copied
        (its own segments are cut elsewhere): the mapped segments starting at or after
        ``start`` are superseded, if ``row`` reaches as far as anything mapped so far, and
        so is one mapped at ``start`` itself. Superseded segments become unreferenced.
        """
        last, old = self.map.last()
        if last < start:  # the usual case: after every mapped segment
            self.map.put_last(start, row)
        else:
            while old >= 0 and last >= start and self.highest <= end:  # type: ignore[operator]
                self.map.remove(last, old)
                self.unreferenced.add(old)
                last, old = self.map.last()
            old = self.map.put(start, row)
            if old >= 0:
                self.unreferenced.add(old)
        self.unreferenced.discard(row)
        if self.highest is None or end > self.highest:
            self.highest = end

    def delete_started(self, start: int, row: int) -> None:
        mapped = self.map.get(start) == row
        self.map.remove(start, row)
        self.unreferenced.add(row)
        if mapped:
            self._map_superseded(start)

    def delete_finished(self, start: int, row: int) -> None:
        mapped = self.map.get(start) == row
        self.map.remove(start, row)
        self.unreferenced.discard(row)
        if mapped:
            self._map_superseded(start)

    def _map_superseded(self, start: int) -> None:
        """The copy mapped at ``start`` is being deleted: a COPY_SEGMENT_FINISHED copy it
        had superseded at the same epoch start serves again (the one reaching furthest).

        A deviation from Kafka, which leaves the offsets unserved: after two unclean
        elections the leader deletes the copy of a truncated branch that had superseded
        its own copy of the same epoch start (KIP-405's scenario 5), and its own is the one
        its lineage needs.
        """
        rows = self.store
        best, best_rank = -1, None
        for r in self.unreferenced:
            if rows.state(r) != _S.COPY_SEGMENT_FINISHED:
                continue
            if dict(rows.epochs(r)).get(self.epoch) != start:
                continue
            # The furthest epoch end, then the greatest (start offset, id): deterministic.
            rank = (rows.epoch_end(r, self.epoch), rows.key(r))
            if best_rank is None or rank > best_rank:
                best, best_rank = r, rank
        if best >= 0 and self.map.get(start) < 0:
            self.map.put(start, best)
            self.unreferenced.discard(best)

    def renumber(self, remap: Renumbering) -> None:
        self.map.renumber(remap)
        self.unreferenced = {remap[r] for r in self.unreferenced}


class RemoteLogMetadataCache:
    """The remote segments of one user partition; see the module docstring.

    Args:
        topic_id_partition: the partition; every event must be for it (``ValueError``).
        rows: the store of its segments (a new ``SegmentStore`` by default).
    """

    def __init__(
        self, topic_id_partition: TopicIdPartition, *, rows: SegmentRows | None = None
    ) -> None:
        self._tp = topic_id_partition
        self._lock = threading.Lock()
        self._rows: SegmentRows = SegmentStore(topic_id_partition) if rows is None else rows
        self._epochs: dict[int, _LeaderEpochState] = {}

    # -- construction from a snapshot ------------------------------------------------------

    @classmethod
    def from_entries(
        cls,
        topic_id_partition: TopicIdPartition,
        entries: Iterable[SegmentLike | SnapshotRow | SnapshotRun],
        *,
        count: int | None = None,
    ) -> RemoteLogMetadataCache:
        """A cache holding ``entries`` (as returned by ``entries()``, or a snapshot file's
        ``rlmm.snapshot.decode_snapshot_rows`` or ``open_snapshot_stream``), in their order.

        Each entry is applied as Kafka restores a snapshot: a COPY_SEGMENT_STARTED or
        DELETE_SEGMENT_STARTED segment is unreferenced, a COPY_SEGMENT_FINISHED one goes
        through the epoch maps in turn; DELETE_SEGMENT_FINISHED entries are skipped. A
        repeated segment id replaces the earlier entry. As in Kafka, what a snapshot does
        not carry is recomputed: ``highest_offset_for_epoch`` from the FINISHED entries.

        Args:
            count: how many segments ``entries`` holds, if known (a snapshot's header):
                the id table is sized for it and ``entries`` is consumed as it comes;
                without it an iterator is listed first to count it.

        Raises:
            ValueError: an entry with invalid values.
        """
        if count is None:
            entries = list(entries) if not isinstance(entries, list | tuple) else entries
            count = len(entries)
        rows = SegmentStore(topic_id_partition, id_slots=max(16, 2 * count))
        cache = cls(topic_id_partition, rows=rows)
        cache._restore(entries)
        return cache

    def _restore(self, entries: Iterable[SegmentLike | SnapshotRow | SnapshotRun]) -> None:
        """``_restore_one`` each entry. Runs of the usual ones (COPY_SEGMENT_FINISHED, one
        epoch starting at the start offset, no custom metadata, a new id, after every key
        mapped in their epoch and every row's key) go to the store in one call: same
        result, a fraction of the time. A snapshot file's ``SnapshotRun`` is such a run
        already decoded to columns (``_restore_run``)."""
        finished = _S.COPY_SEGMENT_FINISHED
        rows = self._rows
        run: list[tuple[SegmentLike, bytes, int]] = []
        tail: dict[int, int] = {}  # epoch -> greatest mapped key, counting the run
        run_ids: set[bytes] = set()
        last_key = rows.last_key

        def flush() -> None:
            if run:
                self._restore_run(_columns(run), checked=True)
                run.clear()
            tail.clear()
            run_ids.clear()

        for entry in entries:
            md = entry
            if type(entry) is SnapshotRun:
                flush()
                if not self._restore_run(entry):
                    self._restore(entry.records())
                last_key = rows.last_key
                continue
            if type(entry) is SnapshotRow:  # a snapshot file's usual entry: one epoch
                usual = entry.state == finished
                if usual:
                    epoch, s, idb = entry.epoch, entry.epoch_start, entry.idb
                else:
                    md = entry.to_snapshot()
            else:
                epochs = md.segment_leader_epochs
                usual = md.state == finished and len(epochs) == 1 and md.custom_metadata is None
                if usual:
                    ((epoch, s),) = epochs.items()
                    idb = md.segment_id.bytes
            start = md.start_offset
            if usual:
                key = (start, idb)
                if s == start and (last_key is None or key > last_key):
                    top = tail.get(epoch)
                    if top is None:
                        st = self._epochs.get(epoch)
                        top = -1 if st is None else st.map.last()[0]
                    if top < start and idb not in run_ids and rows.find(idb) < 0:
                        run_ids.add(idb)
                        tail[epoch] = start
                        last_key = key
                        run.append((md, idb, epoch))
                        if len(run) == _RUN:
                            flush()
                        continue
            flush()
            self._restore_one(md.to_snapshot() if type(md) is SnapshotRow else md)
            last_key = rows.last_key
        flush()

    def _restore_run(self, run: SnapshotRun, *, checked: bool = False) -> bool:
        """Append a run of usual segments to the store and map them, one stretch of equal
        epochs at a time; False (nothing done) unless every id is new, the first key
        follows every row's and each stretch follows its epoch's mapped keys (the run's own
        order is ``SnapshotRun``'s). ``checked``: the caller has checked all of that."""
        rows = self._rows
        ids, starts, epochs = run.ids, run.start_offset, run.epoch
        count = len(ids)
        stretches: list[tuple[int, int, int]] = []  # epoch, first, stop
        if epochs.count(epochs[0]) == count:
            stretches.append((epochs[0], 0, count))
        else:
            i = 0
            while i < count:
                epoch = epochs[i]
                j = i + 1
                while j < count and epochs[j] == epoch:
                    j += 1
                stretches.append((epoch, i, j))
                i = j
        if not checked:
            last = rows.last_key
            if last is not None and (starts[0], ids[0]) <= last:
                return False
            tops: dict[int, int] = {}
            for epoch, i, j in stretches:
                top = tops.get(epoch)
                if top is None:
                    st = self._epochs.get(epoch)
                    top = -1 if st is None else st.map.last()[0]
                if top >= starts[i]:
                    return False
                tops[epoch] = starts[j - 1]
            if len(set(ids)) != count or not rows.ids_absent(ids):
                return False
        added = rows.insert_sorted(run)
        ends = run.end_offset
        for epoch, i, j in stretches:
            st = self._epoch(epoch)
            st.map.extend(added[i], added[j - 1] + 1)
            end = max(ends[i:j])
            if st.highest is None or end > st.highest:
                st.highest = end
        return True

    def _restore_one(self, md: SegmentLike) -> None:
        state = md.state
        if state == _S.DELETE_SEGMENT_FINISHED:
            return
        start = md.start_offset
        if not isinstance(md, RemoteLogSegmentMetadata) and (
            md.end_offset < start or start < 0 or not md.segment_leader_epochs
        ):  # a RemoteLogSegmentMetadata was checked on construction
            raise ValueError(f"invalid segment {md.segment_id}: offsets or epochs")
        idb = md.segment_id.bytes
        old = self._rows.find(idb)
        if old >= 0:
            self._forget(old)
        r = self._rows.insert(md, idb)
        if state == _S.COPY_SEGMENT_FINISHED:
            self._finished(r)
        else:  # COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED: listed, never served
            for e, _ in self._rows.epochs(r):
                self._epoch(e).unreferenced.add(r)

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self._tp

    def __len__(self) -> int:
        """Segments held, in any state."""
        return len(self._rows)

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
            rows = self._rows
            old = rows.find(idb)
            if old >= 0:
                current = rows.state(old)
                if current != _S.COPY_SEGMENT_STARTED:
                    raise InvalidStateTransitionError(
                        f"segment {metadata.segment_id} of {self._tp}: invalid transition "
                        f"{current.name} -> COPY_SEGMENT_STARTED"
                    )
                self._forget(old)
            r = rows.insert(metadata, idb)
            for e, _ in rows.epochs(r):
                self._epoch(e).copy_started(r)

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
            rows = self._rows
            r = rows.find(seg.id.bytes)
            if r < 0:
                raise RemoteResourceNotFoundError(f"no remote log segment metadata for {seg}")
            current = rows.state(r)
            target = update.state
            if not RemoteLogSegmentState.is_valid_transition(current, target):
                raise InvalidStateTransitionError(
                    f"segment {seg.id} of {self._tp}: invalid transition "
                    f"{current.name} -> {target.name}"
                )
            if target == _S.DELETE_SEGMENT_FINISHED:
                self._forget(r)
                return
            rows.update(
                r, target, update.event_timestamp_ms, update.broker_id, update.custom_metadata
            )
            if target == current:
                return
            if target == _S.COPY_SEGMENT_FINISHED:
                self._finished(r)
            else:  # DELETE_SEGMENT_STARTED
                for e, s in rows.epochs(r):
                    self._epoch(e).delete_started(s, r)

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
            r = st.map.floor(offset)
            if r < 0 or offset > self._rows.epoch_end(r, leader_epoch):
                return None
            return self._rows.segment(r)

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
            rows = st.rows()
            rows.sort(key=self._rows.key)
            return [self._rows.segment(r) for r in rows]

    def remote_log_size(self, leader_epoch: int) -> int:
        """Bytes of the COPY_SEGMENT_FINISHED segments with offsets in ``leader_epoch``
        (mapped or superseded; tiered.api's contract. Kafka sums every listed state)."""
        with self._lock:
            st = self._epochs.get(leader_epoch)
            if st is None:
                return 0
            size, state = self._rows.size, self._rows.state
            total = sum(size(r) for r in st.map.rows())
            return total + sum(
                size(r) for r in st.unreferenced if state(r) == _S.COPY_SEGMENT_FINISHED
            )

    def describe(self, segment_id: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        """The segment with this id in any state, or None."""
        with self._lock:
            r = self._rows.find(segment_id.bytes)
            return None if r < 0 else self._rows.segment(r)

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
            rows = self._rows
            seq, i = rows.rows_after(after)
            out: list[RemoteLogSegmentMetadata] = []
            limit = min(len(seq), i + 4 * count)
            deadline = None if budget_s is None else time.perf_counter() + budget_s
            last = -1
            while i < limit and len(out) < count:
                r = seq[i]
                i += 1
                last = r
                if rows.is_live(r):  # the sequence keeps deleted rows until a compaction
                    out.append(rows.segment(r))
                if deadline is not None and i & 0xFF == 0 and time.perf_counter() > deadline:
                    break
            if i >= len(seq):
                return out, None
            return out, encode_cursor(*rows.key(last))

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

    # -- internals -------------------------------------------------------------------------

    def _check_partition(self, tp: TopicIdPartition) -> None:
        if tp != self._tp:
            raise ValueError(f"event for {tp} given to the cache of {self._tp}")

    def _epoch(self, epoch: int) -> _LeaderEpochState:
        st = self._epochs.get(epoch)
        if st is None:
            st = self._epochs[epoch] = _LeaderEpochState(self._rows, epoch)
        return st

    def _finished(self, r: int) -> None:
        """Kafka's handleSegmentWithCopySegmentFinishedState, for every epoch of ``r``."""
        rows = self._rows
        for e, s in rows.epochs(r):
            self._epoch(e).copy_finished(s, r, rows.epoch_end(r, e))

    def _forget(self, r: int) -> None:
        """Take row ``r`` out of every epoch, then out of the store."""
        for e, s in self._rows.epochs(r):
            st = self._epochs.get(e)
            if st is not None:
                st.delete_finished(s, r)
        remap = self._rows.delete(r)
        if remap is not None:  # the store compacted: its row numbers changed
            for st in self._epochs.values():
                st.renumber(remap)


def _columns(run: list[tuple[SegmentLike, bytes, int]]) -> SnapshotRun:
    """A run of ``_restore``'s usual entries as columns."""
    mds = [md for md, _, _ in run]
    return SnapshotRun(
        [idb for _, idb, _ in run],
        array("q", [md.start_offset for md in mds]),
        array("q", [md.end_offset for md in mds]),
        array("q", [md.broker_id for md in mds]),
        array("q", [md.max_timestamp_ms for md in mds]),
        array("q", [md.event_timestamp_ms for md in mds]),
        array("q", [md.segment_size_in_bytes for md in mds]),
        bytes([1 if md.txn_index_empty else 0 for md in mds]),
        array("q", [epoch for _, _, epoch in run]),
    )


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
