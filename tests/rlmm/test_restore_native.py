"""The snapshot restore path: runs of entries as columns, streamed from the file, compiled
(rlmm._native) and pure Python, compared result for result."""

from __future__ import annotations

import functools
import os
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.records.native import PURE_PYTHON_ENV
from rlmm import native, snapshot
from rlmm.metadata_cache import RemoteLogMetadataCache
from rlmm.segment_store import SegmentStore
from rlmm.serde import RemoteLogSegmentMetadataSnapshot
from rlmm.snapshot import (
    CorruptSnapshotError,
    Snapshot,
    SnapshotRun,
    decode_run_py,
    decode_snapshot,
    encode_snapshot,
    open_snapshot_stream,
)
from tiered.api import RemoteLogSegmentState, TopicIdPartition

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID(int=0x19), "orders", 0)
BUILT = native.load()
IMPLEMENTATIONS = ["pure-python"] if BUILT is None else ["compiled", "pure-python"]


def test_the_compiled_module_is_built_unless_pure_python_is_asked() -> None:
    # `make native` builds it; only TIERLOG_PURE_PYTHON=1 may run without it.
    assert BUILT is not None or os.environ.get(PURE_PYTHON_ENV) == "1"


@contextmanager
def using(implementation: str) -> Iterator[None]:
    saved = native.COMPILED
    native.COMPILED = BUILT if implementation == "compiled" else None
    try:
        yield
    finally:
        native.COMPILED = saved


def seg(n: int, **kw: object) -> RemoteLogSegmentMetadataSnapshot:
    fields: dict[str, object] = {
        "segment_id": uuid.UUID(int=n + 1),
        "start_offset": n * 100,
        "end_offset": n * 100 + 99,
        "max_timestamp_ms": 1_700_000_000_000 + n * 1000,
        "broker_id": 1,
        "event_timestamp_ms": 1_700_000_000_500 + n * 1000,
        "segment_size_in_bytes": 4096 + n,
        "segment_leader_epochs": {n // 700: n * 100},
        "custom_metadata": None,
        "state": S.COPY_SEGMENT_FINISHED,
        "txn_index_empty": n % 3 == 0,
    }
    fields.update(kw)
    return RemoteLogSegmentMetadataSnapshot(**fields)  # type: ignore[arg-type]


def mixed(n: int) -> list[RemoteLogSegmentMetadataSnapshot]:
    """Mostly usual entries, with every kind of entry that ends a run among them."""
    segs = [seg(i) for i in range(n)]
    odd = {
        2: seg(2, state=S.COPY_SEGMENT_STARTED),
        4: seg(4, segment_leader_epochs={0: 400, 1: 450}),
        6: seg(6, start_offset=500, end_offset=599, segment_leader_epochs={0: 500}),
        8: seg(1),  # a repeated id: the later entry replaces the earlier one
        10: seg(10, custom_metadata=b"rsm"),
        12: seg(12, state=S.DELETE_SEGMENT_STARTED),
        14: seg(14, broker_id=2**31 - 1, segment_size_in_bytes=-1, txn_index_empty=True),
    }
    for i, s in odd.items():
        if i < n:
            segs[i] = s
    return segs


def as_lists(out: tuple[object, ...]) -> list[object]:
    return [list(x) if not isinstance(x, int | bytes) else x for x in out]


def flat(items: list[object]) -> list[object]:
    """Stream items as the record objects decode_snapshot returns."""
    out: list[object] = []
    for item in items:
        if type(item) is SnapshotRun:
            out += item.records()
        elif type(item) is snapshot.SnapshotRow:
            out.append(item.to_snapshot())
        else:
            out.append(item)
    return out


# -- decode_run: compiled and pure Python agree ----------------------------------------------


def damaged_files() -> Iterator[bytes]:
    data = encode_snapshot(Snapshot(1, 2, mixed(16)))
    yield data
    for i in range(18, len(data)):
        for flip in (0x01, 0x80, 0xFF):
            d = bytearray(data)
            d[i] ^= flip
            yield bytes(d)
    for cut in range(18, len(data)):
        yield data[:cut]


def test_decode_run_reads_every_byte_string_as_the_python_twin_does() -> None:
    impl = snapshot.decode_run_py if BUILT is None else BUILT.decode_run
    for data in damaged_files():
        for pos in (18, 22, 18 + 80):
            for max_rows in (1, 2, 1024):
                want = decode_run_py(data, pos, max_rows)
                assert as_lists(impl(data, pos, max_rows)) == as_lists(want), (data, pos)


def test_decode_run_stops_at_the_first_entry_a_run_cannot_take() -> None:
    data = encode_snapshot(Snapshot(1, 2, mixed(8)))
    for impl in IMPLEMENTATIONS:
        with using(impl):
            end, run = snapshot.decode_run(data, 18, 1024)
            assert run is not None
            assert run.records() == mixed(8)[:2]  # entry 2 is COPY_SEGMENT_STARTED
            assert snapshot.decode_run(data, end, 1024) == (end, None)
            _, short = snapshot.decode_run(data, 18, 1)
            assert short is not None and short.records() == mixed(8)[:1]


# -- the streaming reader reads what decode_snapshot reads -----------------------------------


def stream(data: bytes, tmp: Path) -> list[object] | None:
    path = tmp / "remote_log_snapshot"
    path.write_bytes(data)
    try:
        s = open_snapshot_stream(path)
        assert s is not None
        return flat(list(s.entries))
    except CorruptSnapshotError:
        return None


def whole(data: bytes) -> list[object] | None:
    try:
        return list(decode_snapshot(data).segments)
    except CorruptSnapshotError:
        return None


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_stream_reads_every_damaged_file_as_the_whole_file_reader(
    impl: str, tmp_path: Path
) -> None:
    with using(impl):
        for data in damaged_files():
            assert stream(data, tmp_path) == whole(data)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_stream_with_entries_across_every_chunk_boundary(
    impl: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = encode_snapshot(Snapshot(1, 2, mixed(40)))
    with using(impl):
        for chunk in (1, 7, 50, 79, 80, 83, 200):
            monkeypatch.setattr(snapshot, "_CHUNK", chunk)
            monkeypatch.setattr(snapshot, "_REFILL", chunk // 2)
            assert stream(data, tmp_path) == mixed(40)
            assert stream(data[:-1], tmp_path) is None


def test_a_header_counting_more_entries_than_the_file_holds_is_refused(tmp_path: Path) -> None:
    data = bytearray(encode_snapshot(Snapshot(1, 2, mixed(2))))
    data[14:18] = (2**31 - 1).to_bytes(4, "big")  # the entry count
    path = tmp_path / "remote_log_snapshot"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="more than its"):
        open_snapshot_stream(path)


def test_missing_or_empty_file_is_no_stream(tmp_path: Path) -> None:
    path = tmp_path / "remote_log_snapshot"
    assert open_snapshot_stream(path) is None
    path.write_bytes(b"")
    assert open_snapshot_stream(path) is None


# -- restoring from the stream answers as restoring from the records -------------------------


def cache_answers(c: RemoteLogMetadataCache) -> list[object]:
    out: list[object] = [c.list_remote_log_segments()]
    for epoch in range(5):
        out += [c.highest_offset_for_epoch(epoch), c.list_remote_log_segments(epoch)]
        out += [c.remote_log_segment_metadata(epoch, off) for off in range(0, 300_000, 997)]
    return out


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_restore_from_the_stream_equals_restore_one_by_one(impl: str, tmp_path: Path) -> None:
    rnd = random.Random(19)
    segs = mixed(3000)
    # Segments out of order, repeated ids and repeated start offsets, across block borders.
    for _ in range(30):
        i = rnd.randrange(30, 3000)
        j, start = rnd.randrange(3000), rnd.randrange(3000) * 100
        segs[i] = seg(
            j, start_offset=start, end_offset=start + 99, segment_leader_epochs={j // 700: start}
        )
    segs[2048] = seg(2048, segment_leader_epochs={9: 204_800})
    path = tmp_path / "remote_log_snapshot"
    path.write_bytes(encode_snapshot(Snapshot(0, 5, segs)))
    slow = RemoteLogMetadataCache(TP)
    for md in segs:
        slow._restore_one(md)
    with using(impl):
        s = open_snapshot_stream(path)
        assert s is not None
        fast = RemoteLogMetadataCache.from_entries(TP, s.entries, count=s.count)
    assert len(fast) == len(slow)
    assert cache_answers(fast) == cache_answers(slow)


# -- the id table: compiled and pure Python agree --------------------------------------------


@functools.cache
def _id_runs() -> list[list[bytes]]:
    rnd = random.Random(405)
    return [[rnd.randbytes(16) for _ in range(700 + 300 * k)] for k in range(6)]


def _fill(impl: str) -> tuple[SegmentStore, list[bool]]:
    store = SegmentStore(TP)
    absent: list[bool] = []
    start = 0
    with using(impl):
        for ids in _id_runs():
            absent.append(store.ids_absent(ids))
            absent.append(store.ids_absent([ids[0], *_id_runs()[0][:3]]))
            run = SnapshotRun(
                ids, *[snapshot.array("q", range(start, start + len(ids)))] * 6,
                bytes(len(ids)), snapshot.array("q", [0] * len(ids)),
            )  # fmt: skip
            store.insert_sorted(run)
            start += len(ids)
        if store.find(_id_runs()[2][5]) >= 0:
            store.delete(store.find(_id_runs()[2][5]))  # a tombstone on the probe paths
        absent.append(store.ids_absent(_id_runs()[2]))
        absent.append(store.ids_absent([uuid.UUID(int=7).bytes]))
    return store, absent


def test_id_table_fills_and_probes_alike_in_both_implementations() -> None:
    results = [_fill(impl) for impl in IMPLEMENTATIONS]
    store, absent = results[0]
    assert absent[-1] is True and absent[-2] is False and absent[0] is True
    assert absent[1] is True and absent[3] is False  # the first run's ids, once held
    for ids in _id_runs():
        assert all(store.find(i) >= 0 for i in ids if i != _id_runs()[2][5])
    for other, other_absent in results[1:]:
        assert (other._id_lo, other._id_hi) == (store._id_lo, store._id_hi)
        assert (other._id_count, other._id_used) == (store._id_count, store._id_used)
        assert other_absent == absent


def test_a_state_change_in_a_full_block_changes_that_segment_only(tmp_path: Path) -> None:
    # Full blocks whose rows share their flags share one immutable copy of them.
    from tiered.api import RemoteLogSegmentId, RemoteLogSegmentMetadataUpdate

    path = tmp_path / "remote_log_snapshot"
    path.write_bytes(encode_snapshot(Snapshot(0, 5, [seg(i) for i in range(3000)])))
    s = open_snapshot_stream(path)
    assert s is not None
    c = RemoteLogMetadataCache.from_entries(TP, s.entries, count=s.count)
    sid = RemoteLogSegmentId(TP, uuid.UUID(int=11))
    c.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(sid, 1, None, S.DELETE_SEGMENT_STARTED, 1)
    )
    states = [md.state for md in c.list_remote_log_segments()]
    assert states[10] == S.DELETE_SEGMENT_STARTED
    assert states.count(S.COPY_SEGMENT_FINISHED) == 2999
    assert c.remote_log_segment_metadata(0, 1050) is None
    assert c.remote_log_segment_metadata(1, 1050 + 1024 * 100) is not None


def run_of(ids: list[bytes], start: int) -> SnapshotRun:
    offsets = snapshot.array("q", range(start, start + len(ids)))
    return SnapshotRun(
        ids, offsets, offsets, *[snapshot.array("q", [0] * len(ids))] * 4, bytes(len(ids)),
        snapshot.array("q", [0] * len(ids)),
    )  # fmt: skip


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_id_table_rebases_then_widens_as_old_rows_go_and_new_ones_come(
    impl: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows are numbered on: with the oldest deleted as new ones come (retention), the
    # numbers outgrow the table's 3-byte slots unless it rebuilds on a new base, and it
    # must widen once the live rows span more than they can hold.
    from rlmm import segment_store

    monkeypatch.setattr(segment_store, "_HI8_VMAX", 5000)
    rnd = random.Random(7)
    store = SegmentStore(TP)
    live: dict[bytes, int] = {}
    start = 0
    with using(impl):
        for _ in range(12):
            ids = [rnd.randbytes(16) for _ in range(1000)]
            assert store.ids_absent(ids)
            rows = store.insert_sorted(run_of(ids, start))
            start += 1000
            live.update(zip(ids, rows, strict=True))
            for idb in sorted(live, key=live.__getitem__)[:-1500]:  # the oldest go
                remap = store.delete(live.pop(idb))
                if remap is not None:
                    live = {k: remap[r] for k, r in live.items()}
            assert all(store.find(k) == r for k, r in live.items())
            assert not store.ids_absent([*live][:1])
        assert store._id_hi.typecode == "B"  # rebased: the live rows span < 5000
        assert store._id_base > 0
        for _ in range(3):  # no deletes: the live rows span more than 5000 numbers
            ids = [rnd.randbytes(16) for _ in range(2000)]
            live.update(zip(ids, store.insert_sorted(run_of(ids, start)), strict=True))
            start += 2000
        assert store._id_hi.typecode == "H"
        assert all(store.find(k) == r for k, r in live.items())
        assert store.ids_absent([rnd.randbytes(16) for _ in range(100)])


def test_built_metadata_is_the_same_and_kept_out_of_the_collector(tmp_path: Path) -> None:
    # A listing page builds 30,000 objects: with the compiled module they are untracked
    # (frozen, no cycles possible), so that they set off no full collection mid-page.
    import gc

    path = tmp_path / "remote_log_snapshot"
    path.write_bytes(encode_snapshot(Snapshot(0, 5, mixed(50))))
    s = open_snapshot_stream(path)
    assert s is not None
    c = RemoteLogMetadataCache.from_entries(TP, s.entries, count=s.count)
    pages = {}
    for impl in IMPLEMENTATIONS:
        with using(impl):
            pages[impl] = c.list_page(None, 100)[0] + [c.remote_log_segment_metadata(0, 4321)]
            tracked = {gc.is_tracked(o) for md in pages[impl] for o in (md, md.segment_id)}
            assert tracked == ({False} if impl == "compiled" else {True})
    assert all(page == pages["pure-python"] for page in pages.values())
    assert len(pages["pure-python"]) == 50
