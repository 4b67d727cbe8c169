"""rlmm.metadata_cache over rlmm.segment_store: Kafka's RemoteLogMetadataCache semantics,
against a naive model, and paging."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmm import epoch_map, metadata_cache, segment_store
from rlmm.metadata_cache import RemoteLogMetadataCache, decode_cursor, encode_cursor
from rlmm.partition_store import RemotePartitionMetadataStore
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

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID(int=7), "orders", 3)
OTHER = TopicIdPartition(uuid.UUID(int=8), "other", 0)


def seg(
    start: int,
    end: int,
    epochs: dict[int, int] | None = None,
    *,
    sid: int | None = None,
    size: int = 100,
    tp: TopicIdPartition = TP,
    custom: bytes | None = None,
) -> RemoteLogSegmentMetadata:
    seg_id = uuid.UUID(int=sid) if sid is not None else uuid.uuid4()
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, seg_id),
        start,
        end,
        max_timestamp_ms=1_700_000_000_000 + end,
        broker_id=1,
        event_timestamp_ms=1_700_000_000_500 + end,
        segment_size_in_bytes=size,
        segment_leader_epochs=epochs if epochs is not None else {0: start},
        custom_metadata=custom,
    )


def upd(md: RemoteLogSegmentMetadata, state: S, *, ts: int = 1, broker: int = 2):
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, ts, None, state, broker)


def finish(c: RemoteLogMetadataCache, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    c.add_copy_in_progress_segment(md)
    c.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    return c.describe(md.segment_id)  # type: ignore[return-value]


def ids(items: list[RemoteLogSegmentMetadata]) -> list[uuid.UUID]:
    return [m.segment_id for m in items]


# -- Kafka's semantics ------------------------------------------------------------------------


def test_lookup_per_epoch_across_multi_epoch_segments() -> None:
    c = RemoteLogMetadataCache(TP)
    a = finish(c, seg(0, 99, {0: 0, 1: 40, 3: 80}))
    b = finish(c, seg(100, 199, {3: 100, 4: 150}))
    assert c.remote_log_segment_metadata(0, 0) == a
    assert c.remote_log_segment_metadata(0, 39) == a
    assert c.remote_log_segment_metadata(0, 40) is None  # past epoch 0's end in a
    assert c.remote_log_segment_metadata(1, 40) == a
    assert c.remote_log_segment_metadata(1, 79) == a
    assert c.remote_log_segment_metadata(2, 60) is None  # no epoch 2 anywhere
    assert c.remote_log_segment_metadata(3, 99) == a
    assert c.remote_log_segment_metadata(3, 100) == b
    assert c.remote_log_segment_metadata(3, 149) == b
    assert c.remote_log_segment_metadata(3, 150) is None
    assert c.remote_log_segment_metadata(4, 199) == b
    assert c.remote_log_segment_metadata(4, 200) is None
    assert c.remote_log_segment_metadata(4, 149) is None  # below epoch 4's first offset
    assert c.highest_offset_for_epoch(0) == 39
    assert c.highest_offset_for_epoch(3) == 149
    assert c.highest_offset_for_epoch(4) == 199
    assert c.highest_offset_for_epoch(2) is None
    assert ids(c.list_remote_log_segments(3)) == [a.segment_id, b.segment_id]
    assert ids(c.list_remote_log_segments(1)) == [a.segment_id]


def test_copy_started_is_listed_but_not_served() -> None:
    c = RemoteLogMetadataCache(TP)
    md = seg(0, 9)
    c.add_copy_in_progress_segment(md)
    assert c.remote_log_segment_metadata(0, 5) is None
    assert c.highest_offset_for_epoch(0) is None
    assert c.list_remote_log_segments() == [md]
    assert c.list_remote_log_segments(0) == [md]
    assert c.remote_log_size(0) == 0


def test_delete_states_are_not_served_and_finished_forgets() -> None:
    c = RemoteLogMetadataCache(TP)
    md = finish(c, seg(0, 9, size=70))
    assert c.remote_log_size(0) == 70
    c.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
    assert c.remote_log_segment_metadata(0, 5) is None
    assert [m.state for m in c.list_remote_log_segments(0)] == [S.DELETE_SEGMENT_STARTED]
    assert c.remote_log_size(0) == 0
    c.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))
    assert c.list_remote_log_segments() == []
    assert c.list_remote_log_segments(0) == []
    assert len(c) == 0
    assert c.highest_offset_for_epoch(0) == 9  # kept, as in Kafka
    with pytest.raises(RemoteResourceNotFoundError):
        c.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))


def test_invalid_transitions_raise_naming_segment_and_states() -> None:
    c = RemoteLogMetadataCache(TP)
    md = seg(0, 9)
    c.add_copy_in_progress_segment(md)
    c.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
    with pytest.raises(InvalidStateTransitionError) as e:
        c.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    assert str(md.segment_id) in str(e.value)
    assert "DELETE_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED" in str(e.value)
    with pytest.raises(InvalidStateTransitionError, match="COPY_SEGMENT_STARTED"):
        c.add_copy_in_progress_segment(md)
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        c.add_copy_in_progress_segment(c.describe(md.segment_id))  # type: ignore[arg-type]
    with pytest.raises(RemoteResourceNotFoundError):
        c.update_remote_log_segment_metadata(upd(seg(0, 1), S.COPY_SEGMENT_FINISHED))
    with pytest.raises(ValueError, match="other"):
        c.add_copy_in_progress_segment(seg(0, 1, tp=OTHER))


def test_repeats_are_idempotent() -> None:
    c = RemoteLogMetadataCache(TP)
    md = seg(0, 9)
    c.add_copy_in_progress_segment(md)
    c.add_copy_in_progress_segment(md)
    assert c.list_remote_log_segments() == [md]
    c.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED, ts=5))
    c.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED, ts=6, broker=9))
    got = c.remote_log_segment_metadata(0, 3)
    assert got is not None
    assert (got.event_timestamp_ms, got.broker_id, got.state) == (6, 9, S.COPY_SEGMENT_FINISHED)
    assert len(c.list_remote_log_segments(0)) == 1


def test_superseded_segments_become_unreferenced() -> None:
    c = RemoteLogMetadataCache(TP)
    # case 1 (Kafka's comment): L0 uploaded 0-100, L1 uploads 0-200 in the same epoch.
    s0 = finish(c, seg(0, 100))
    s1 = finish(c, seg(0, 200))
    assert c.remote_log_segment_metadata(0, 50) == s1
    assert set(ids(c.list_remote_log_segments(0))) == {s0.segment_id, s1.segment_id}
    assert len(c.list_remote_log_segments()) == 2
    # case 2: overlapping 10-290 then 5-300: the later one wins for 295 and 20.
    s2 = finish(c, seg(201, 290))
    s3 = finish(c, seg(150, 300))
    assert c.remote_log_segment_metadata(0, 295) == s3
    assert c.remote_log_segment_metadata(0, 160) == s3
    assert c.remote_log_segment_metadata(0, 100) == s1
    assert s2.segment_id in ids(c.list_remote_log_segments(0))
    assert c.highest_offset_for_epoch(0) == 300
    # An older leader's short segment does not supersede a longer mapped one.
    s4 = finish(c, seg(250, 260))
    assert c.remote_log_segment_metadata(0, 255) == s4
    assert c.remote_log_segment_metadata(0, 280) is None  # floor is s4, which ends at 260
    assert c.remote_log_size(0) == 5 * 100  # every FINISHED one, referenced or not
    # Deleting the unreferenced ones works and keeps the mapped ones served.
    for old in (s0, s2):
        c.update_remote_log_segment_metadata(upd(old, S.DELETE_SEGMENT_STARTED))
        c.update_remote_log_segment_metadata(upd(old, S.DELETE_SEGMENT_FINISHED))
    assert c.remote_log_segment_metadata(0, 50) == s1


def test_deleting_a_superseding_copy_serves_the_superseded_one_again() -> None:
    # KIP-405's scenario 5: A copied 0-3 in LE-0; B, elected uncleanly, copied 0-3 with LE-0
    # from 0 and LE-1 from 2, which supersedes A's at LE-0's start. A, elected uncleanly
    # again, deletes B's (LE-1 is off its lineage): A's own copy serves LE-0 again.
    c = RemoteLogMetadataCache(TP)
    a = finish(c, seg(0, 3, {0: 0}))
    b = finish(c, seg(0, 3, {0: 0, 1: 2}))
    assert c.remote_log_segment_metadata(0, 2) is None  # B's holds LE-0 up to 1 only
    c.update_remote_log_segment_metadata(upd(b, S.DELETE_SEGMENT_STARTED))
    assert c.remote_log_segment_metadata(0, 2) == a
    assert c.remote_log_segment_metadata(1, 2) is None
    c.update_remote_log_segment_metadata(upd(b, S.DELETE_SEGMENT_FINISHED))
    assert c.remote_log_segment_metadata(0, 3) == a


def test_listing_is_sorted_by_start_offset() -> None:
    c = RemoteLogMetadataCache(TP)
    made = [seg(s, s + 9) for s in (50, 10, 30, 0, 20, 40)]
    for md in made:
        c.add_copy_in_progress_segment(md)
    assert [m.start_offset for m in c.list_remote_log_segments()] == [0, 10, 20, 30, 40, 50]
    assert [m.start_offset for m in c.list_remote_log_segments(0)] == [0, 10, 20, 30, 40, 50]


def test_custom_metadata_and_fields_round_trip() -> None:
    c = RemoteLogMetadataCache(TP)
    md = seg(2**40, 2**40 + 5, {7: 2**40 + 1}, custom=b"rsm", size=2**31 + 5)
    c.add_copy_in_progress_segment(md)
    assert c.list_remote_log_segments() == [md]
    rebuilt = RemoteLogMetadataCache.from_entries(TP, c.entries())
    assert rebuilt.list_remote_log_segments() == [md]


def test_from_entries_rebuilds_the_same_answers() -> None:
    c = RemoteLogMetadataCache(TP)
    for i in range(50):
        md = finish(c, seg(i * 10, i * 10 + 9, {i // 10: i * 10}))
        if i % 10 == 3:  # never an epoch's last: a snapshot keeps no highest offset of deleted ones
            c.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
    c.add_copy_in_progress_segment(seg(500, 509, {4: 500}))
    rebuilt = RemoteLogMetadataCache.from_entries(TP, list(c.entries()))
    assert rebuilt.list_remote_log_segments() == c.list_remote_log_segments()
    for epoch in range(6):
        assert rebuilt.highest_offset_for_epoch(epoch) == c.highest_offset_for_epoch(epoch)
        assert rebuilt.list_remote_log_segments(epoch) == c.list_remote_log_segments(epoch)
        for off in range(0, 520, 3):
            a = rebuilt.remote_log_segment_metadata(epoch, off)
            assert a == c.remote_log_segment_metadata(epoch, off)


def test_store_partition_delete_lifecycle() -> None:
    store = RemotePartitionMetadataStore()
    md = seg(0, 9)
    store.add_copy_in_progress_segment(md)
    store.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))
    with pytest.raises(RemoteResourceNotFoundError):
        store.remote_log_segment_metadata(OTHER, 0, 1)

    def step(state: RemotePartitionDeleteState) -> None:
        store.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(TP, state, 1, 0))

    with pytest.raises(InvalidStateTransitionError, match="none -> DELETE_PARTITION_STARTED"):
        step(RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
    step(RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
    step(RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
    assert store.partition_delete_state(TP) == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    assert store.remote_log_segment_metadata(TP, 0, 1) is not None  # still served
    step(RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
    step(RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
    assert store.partition_delete_state(TP) is None
    with pytest.raises(RemoteResourceNotFoundError):
        store.remote_log_segment_metadata(TP, 0, 1)
    with pytest.raises(RemoteResourceNotFoundError):
        store.list_remote_log_segments(TP)


def test_cursor_errors() -> None:
    c = RemoteLogMetadataCache(TP)
    assert decode_cursor(encode_cursor(5, b"x" * 16)) == (5, b"x" * 16)
    for bad in ("nope", "c1.!!!", "c1.AAAA"):
        with pytest.raises(ValueError, match="invalid cursor"):
            c.list_page(bad, 10)
    with pytest.raises(ValueError, match="count"):
        c.list_page(None, 0)


# -- a naive model: Kafka's algorithm over dicts ----------------------------------------------


class Model:
    def __init__(self) -> None:
        self.md: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        self.maps: dict[int, dict[int, uuid.UUID]] = {}
        self.unref: dict[int, set[uuid.UUID]] = {}
        self.highest: dict[int, int] = {}

    def _e(self, e: int) -> tuple[dict[int, uuid.UUID], set[uuid.UUID]]:
        return self.maps.setdefault(e, {}), self.unref.setdefault(e, set())

    @staticmethod
    def _end(md: RemoteLogSegmentMetadata, e: int) -> int:
        later = [s for x, s in md.segment_leader_epochs.items() if x > e]
        return later[0] - 1 if later else md.end_offset

    def _forget(self, sid: uuid.UUID) -> None:
        old = self.md.pop(sid)
        for e, s in old.segment_leader_epochs.items():
            m, u = self._e(e)
            u.discard(sid)
            if m.get(s) == sid:
                del m[s]
                self._map_superseded(e, s)

    def _map_superseded(self, e: int, s: int) -> None:
        """tierlog's deviation: a superseded finished copy at the same epoch start serves
        again when the copy mapped there is deleted (furthest epoch end, then greatest
        (start offset, id))."""
        m, u = self._e(e)
        candidates = [
            self.md[x]
            for x in u
            if self.md[x].state == S.COPY_SEGMENT_FINISHED
            and self.md[x].segment_leader_epochs.get(e) == s
        ]
        if candidates:
            best = max(
                candidates,
                key=lambda md: (self._end(md, e), (md.start_offset, md.segment_id.bytes)),
            )
            m[s] = best.segment_id
            u.discard(best.segment_id)

    def add(self, md: RemoteLogSegmentMetadata) -> None:
        cur = self.md.get(md.segment_id)
        if cur is not None:
            if cur.state != S.COPY_SEGMENT_STARTED:
                raise InvalidStateTransitionError
            self._forget(md.segment_id)
        self.md[md.segment_id] = md
        for e in md.segment_leader_epochs:
            self._e(e)[1].add(md.segment_id)

    def update(self, u: RemoteLogSegmentMetadataUpdate) -> None:
        sid = u.remote_log_segment_id.id
        if sid not in self.md:
            raise RemoteResourceNotFoundError
        cur = self.md[sid]
        if not S.is_valid_transition(cur.state, u.state):
            raise InvalidStateTransitionError
        if u.state == S.DELETE_SEGMENT_FINISHED:
            self._forget(sid)
            return
        new = cur.create_with_update(u)
        self.md[sid] = new
        if u.state == cur.state:
            return
        for e, s in new.segment_leader_epochs.items():
            m, un = self._e(e)
            if u.state == S.COPY_SEGMENT_FINISHED:
                end = self._end(new, e)
                while m and max(m) >= s and self.highest[e] <= end:
                    un.add(m.pop(max(m)))
                if s in m and m[s] != sid:
                    un.add(m[s])
                m[s] = sid
                un.discard(sid)
                self.highest[e] = max(self.highest.get(e, end), end)
            else:
                un.add(sid)
                if m.get(s) == sid:
                    del m[s]
                    self._map_superseded(e, s)

    def lookup(self, e: int, off: int) -> RemoteLogSegmentMetadata | None:
        m = self.maps.get(e, {})
        keys = [k for k in m if k <= off]
        if not keys:
            return None
        md = self.md[m[max(keys)]]
        return md if off <= self._end(md, e) else None

    @staticmethod
    def _sorted(items: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        return sorted(items, key=lambda m: (m.start_offset, m.segment_id.bytes))

    def listing(self, e: int | None) -> list[RemoteLogSegmentMetadata]:
        if e is None:
            return self._sorted(list(self.md.values()))
        sids = set(self.maps.get(e, {}).values()) | self.unref.get(e, set())
        return self._sorted([self.md[s] for s in sids])

    def size(self, e: int) -> int:
        return sum(
            m.segment_size_in_bytes for m in self.listing(e) if m.state == S.COPY_SEGMENT_FINISHED
        )


@pytest.fixture(params=[False, True], ids=["blocks1024", "blocks4"])
def tiny_blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """With 4-row blocks, front freeing and compaction happen in small tests (and restoring
    appends runs of 3, not 1024)."""
    if request.param:
        monkeypatch.setattr(segment_store, "_BITS", 2)
        monkeypatch.setattr(segment_store, "_BLOCK", 4)
        monkeypatch.setattr(segment_store, "_POS", 3)
        monkeypatch.setattr(epoch_map, "_TRIM", 4)
        monkeypatch.setattr(metadata_cache, "_RUN", 3)
    yield


def random_segment(rnd: random.Random, pool: list[uuid.UUID]) -> RemoteLogSegmentMetadata:
    start = rnd.randrange(0, 60)
    end = start + rnd.randrange(0, 25)
    first = rnd.randrange(0, 4)
    epochs = {first: start}
    if rnd.random() < 0.3 and end > start:
        epochs[first + rnd.randrange(1, 3)] = rnd.randrange(start + 1, end + 1)
    if rnd.random() < 0.1:  # first epoch begins before the segment (kept as given)
        epochs = {first: max(0, start - 3)} | {k: v for k, v in epochs.items() if k != first}
    md = seg(start, end, epochs, size=rnd.randrange(1, 1000))
    sid = rnd.choice(pool) if rnd.random() < 0.2 and pool else md.segment_id
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP, sid), start, end, md.max_timestamp_ms, 1,
        md.event_timestamp_ms, md.segment_size_in_bytes, md.segment_leader_epochs,
    )  # fmt: skip


def check_equal(c: RemoteLogMetadataCache, m: Model) -> None:
    assert c.list_remote_log_segments() == m.listing(None)
    for e in range(7):
        assert c.list_remote_log_segments(e) == m.listing(e), e
        assert c.highest_offset_for_epoch(e) == m.highest.get(e)
        assert c.remote_log_size(e) == m.size(e)
        for off in range(0, 90, 2):
            assert c.remote_log_segment_metadata(e, off) == m.lookup(e, off), (e, off)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 120))
def test_against_naive_model(tiny_blocks: None, seed: int, steps: int) -> None:
    rnd = random.Random(seed)
    c, m = RemoteLogMetadataCache(TP), Model()
    pool: list[uuid.UUID] = []
    for step in range(steps):
        if rnd.random() < 0.4 or not m.md:
            md = random_segment(rnd, pool)
            pool.append(md.segment_id)
            outcomes = []
            for target in (m.add, c.add_copy_in_progress_segment):
                try:
                    target(md)
                    outcomes.append(None)
                except InvalidStateTransitionError as e:
                    outcomes.append(type(e))
        else:
            sid = rnd.choice(list(m.md) if rnd.random() < 0.9 else pool)
            state = rnd.choice(
                [S.COPY_SEGMENT_FINISHED] * 3 + [*S][2:] + [S.DELETE_SEGMENT_STARTED]
            )
            u = RemoteLogSegmentMetadataUpdate(
                RemoteLogSegmentId(TP, sid), rnd.randrange(10**6), None, state, rnd.randrange(3)
            )
            outcomes = []
            for target in (m.update, c.update_remote_log_segment_metadata):
                try:
                    target(u)
                    outcomes.append(None)
                except (InvalidStateTransitionError, RemoteResourceNotFoundError) as e:
                    outcomes.append(type(e))
        assert outcomes[0] == outcomes[1], step
        if step % 10 == 0 or step == steps - 1:
            check_equal(c, m)
    entries = list(c.entries())
    rebuilt = RemoteLogMetadataCache.from_entries(TP, entries)
    assert rebuilt.list_remote_log_segments() == c.list_remote_log_segments()
    # The bulk loader answers as the one-by-one path does.
    slow = RemoteLogMetadataCache(TP)
    for md in entries:
        slow._restore_one(md)
    for e in range(7):
        assert rebuilt.list_remote_log_segments(e) == slow.list_remote_log_segments(e)
        assert rebuilt.highest_offset_for_epoch(e) == slow.highest_offset_for_epoch(e)
        for off in range(0, 90, 3):
            assert rebuilt.remote_log_segment_metadata(e, off) == slow.remote_log_segment_metadata(
                e, off
            )


# -- paging ---------------------------------------------------------------------------------


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 40))
def test_scan_returns_every_segment_present_throughout(
    tiny_blocks: None, seed: int, count: int
) -> None:
    rnd = random.Random(seed)
    c = RemoteLogMetadataCache(TP)
    live: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}

    def add() -> None:
        start = rnd.randrange(0, 10_000)
        md = seg(start, start + rnd.randrange(0, 50))
        c.add_copy_in_progress_segment(md)
        live[md.segment_id] = md

    def delete() -> None:
        sid = rnd.choice(list(live))
        md = live.pop(sid)
        c.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
        c.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_FINISHED))

    for _ in range(rnd.randrange(0, 300)):
        add()
    for _ in range(rnd.randrange(0, 100)):
        if live:
            delete()
    present = set(live)
    seen: list[uuid.UUID] = []
    cursor: str | None = None
    while True:
        page, cursor = c.list_page(cursor, count)
        assert len(page) <= count
        seen.extend(m.segment_id for m in page)
        if cursor is None:
            break
        for _ in range(rnd.randrange(0, 6)):  # segments come and go between pages
            if rnd.random() < 0.5 or not live:
                add()
            else:
                delete()
                present &= set(live)
    assert present <= set(seen)
    assert len(seen) == len(set(seen))  # keys are immutable: never twice


def test_scan_of_a_static_partition_is_the_listing() -> None:
    c = RemoteLogMetadataCache(TP)
    for i in range(3000):
        finish(c, seg(i * 10, i * 10 + 9))
    out: list[RemoteLogSegmentMetadata] = []
    cursor: str | None = None
    pages = 0
    while True:
        page, cursor = c.list_page(cursor, 1000, budget_s=None)  # pages by count only
        out += page
        pages += 1
        if cursor is None:
            break
    assert out == c.list_remote_log_segments()
    assert pages in {3, 4}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60))
def test_bulk_load_of_in_order_entries_matches_one_by_one(
    tiny_blocks: None, seed: int, n: int
) -> None:
    """Mostly contiguous FINISHED segments (the bulk path), with gaps, overlaps, other states,
    multi-epoch segments and repeated ids mixed in."""
    rnd = random.Random(seed)
    entries: list[RemoteLogSegmentMetadata] = []
    start, epoch = rnd.randrange(0, 5), 0
    for _ in range(n):
        start += rnd.choice([0, 0, 0, 0, 1, 3, -2])  # mostly contiguous
        start = max(0, start)
        end = start + rnd.randrange(0, 6)
        epochs = {epoch: start}
        if rnd.random() < 0.15 and end > start:
            epoch += 1
            epochs[epoch] = rnd.randrange(start + 1, end + 1)
        md = seg(start, end, epochs, size=rnd.randrange(1, 50))
        state = rnd.choice([S.COPY_SEGMENT_FINISHED] * 6 + [*S][:3])
        sid = md.segment_id if rnd.random() < 0.9 or not entries else entries[-1].segment_id
        entries.append(
            RemoteLogSegmentMetadata(
                RemoteLogSegmentId(TP, sid),
                start,
                end,
                md.max_timestamp_ms,
                rnd.randrange(2),
                md.event_timestamp_ms,
                md.segment_size_in_bytes,
                epochs,
                state=state,
            )
        )
        start = end + 1
    bulk = RemoteLogMetadataCache.from_entries(TP, entries)
    slow = RemoteLogMetadataCache(TP)
    for md in entries:
        slow._restore_one(md)
    assert bulk.list_remote_log_segments() == slow.list_remote_log_segments()
    for e in range(epoch + 2):
        assert bulk.list_remote_log_segments(e) == slow.list_remote_log_segments(e)
        assert bulk.highest_offset_for_epoch(e) == slow.highest_offset_for_epoch(e)
        for off in range(0, start + 2):
            assert bulk.remote_log_segment_metadata(e, off) == slow.remote_log_segment_metadata(
                e, off
            )
