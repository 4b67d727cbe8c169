"""Remote reads beyond the basics: read-ahead for sequential consumers, and the aborted
transactions READ_COMMITTED fetches get from remote transaction indexes."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future

import pytest

from core.errors import OffsetOutOfRangeError
from core.log.txn_index import AbortedTxn
from core.records.batch import HEADER_SIZE, RecordBatchHeader, peek_batch_size
from tests.support.waiting import wait_until
from tiered.api import RemoteStorageError, TopicIdPartition
from tiered.read_ahead import READ_AHEAD_DEPTH, READ_AHEAD_MAX_ENTRIES, ReadAhead
from tiered.remote_batches import CorruptRemoteDataError
from tiered.remote_reader import EVENT_LOOP_TXN_SEARCH_SEGMENTS

from .harness import T0, Env, MemoryRSM, local_dir_rsm, produce, tiered_config


class FreezableRSM(MemoryRSM):
    """A MemoryRSM whose log reads fail while ``frozen``: what is served then was in hand.
    ``reads`` lists the (segment id, start) of every log read."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = False
        self.reads: list[tuple[uuid.UUID, int]] = []

    def fetch_log_segment(self, metadata, start_position, end_position=None):
        self.reads.append((metadata.segment_id, start_position))
        if self.frozen:
            raise RemoteStorageError("frozen: no remote read may happen now")
        return super().fetch_log_segment(metadata, start_position, end_position)


def archive_all(env: Env) -> bytes:
    """40 records produced, every rolled segment copied to the remote tier and deleted
    locally; returns those segments' bytes (what a consumer from offset 0 reads remotely)."""
    produce(env.plog, 40, ts=T0)
    archived = b"".join(seg.log.path.read_bytes() for seg in env.plog.segments()[:-1])
    env.copy()
    env.plog.delete_old_segments()
    return archived


def next_offset_after(data: bytes) -> int:
    """The offset after the last whole batch of ``data`` (the consumer's next fetch)."""
    at, offset = 0, None
    while (size := peek_batch_size(data, at)) is not None and at + size <= len(data):
        offset = RecordBatchHeader(data, at).next_offset
        at += size
    assert offset is not None, "no whole batch"
    return offset


def whole_batches(data: bytes) -> bytes:
    """``data`` without a partial last batch (what a client keeps)."""
    at = 0
    while (size := peek_batch_size(data, at)) is not None and at + size <= len(data):
        at += size
    return data[:at]


def in_hand(reader, env: Env, offset: int) -> bool:
    """The read-ahead range for a fetch at ``offset`` has arrived."""
    md = reader._segment_for(env.tp, env.plog, offset)
    held = reader.read_ahead.held((md.segment_id, offset)) if md is not None else None
    return held is not None and held[1].done()


def test_sequential_reads_are_served_from_read_ahead_and_stay_identical(env, memory_rsm):
    expected = archive_all(env)
    reader = env.rlm.reader
    # A consumer walking the remote tier with small fetches, as librdkafka does with
    # fetch.max.bytes below a segment: each fetch starts where the last whole batch ended.
    got = bytearray()
    offset = 0
    while offset < env.plog.local_log_start_offset:
        data = reader.fetch(env.tp, env.plog, offset, 300).records
        at = 0
        while (size := peek_batch_size(data, at)) is not None and at + size <= len(data):
            header = RecordBatchHeader(data, at)
            if header.last_offset >= offset:
                got += data[at : at + size]
                offset = header.next_offset
            at += size
        assert at > 0, f"no whole batch at offset {offset}"
    assert bytes(got) == expected
    assert reader.read_ahead.hits > 0


def test_a_consumer_from_offset_0_walks_remote_segments_without_their_indexes(
    env, memory_rsm, monkeypatch
):
    """Fetches that start a segment need no index: the first from byte 0, the following
    ones from a read-ahead of the next segment's start, answered at once from memory.
    Each cold index costs four remote requests (manifest and three indexes); with small
    segments that set the pace of a consumer reading the remote tier from offset 0."""
    produce(env.plog, 40, ts=T0)
    segments = env.plog.segments()[:-1]
    expected = b"".join(seg.log.path.read_bytes() for seg in segments)
    env.copy()
    env.plog.delete_old_segments()
    reader = env.rlm.reader
    reads: list[tuple[uuid.UUID, int]] = []
    fetch_log_segment = memory_rsm.fetch_log_segment

    def recording(metadata, start_position, end_position=None):
        reads.append((metadata.segment_id, start_position))
        return fetch_log_segment(metadata, start_position, end_position)

    monkeypatch.setattr(memory_rsm, "fetch_log_segment", recording)
    got = bytearray()
    offset = 0
    ahead = False  # whether the next range is in hand (read ahead and arrived)
    while offset < env.plog.local_log_start_offset:
        answer = reader.submit_fetch(env.tp, env.plog, offset, 64 * 1024)
        if ahead:
            # In memory already: answered in this thread, not queued for the pool.
            assert answer.done(), "a fetch of a range in hand waited for a pool thread"
        data = answer.result(10).records
        assert data, f"nothing at offset {offset}"
        got += data
        at = 0
        while (size := peek_batch_size(data, at)) is not None and at + size <= len(data):
            offset = RecordBatchHeader(data, at).next_offset
            at += size
        if offset < env.plog.local_log_start_offset:
            md = reader._segment_for(env.tp, env.plog, offset)
            # The start of the next segment is read ahead (this thread is not a pool
            # thread, so the pool is idle): wait until it is in hand.
            wait_until(lambda md=md, o=offset: (md.segment_id, o) in reader.read_ahead, 10)
            wait_until(lambda: reader._pending == 0, 10, what="the read-ahead done")
            ahead = True
    assert bytes(got) == expected
    assert len(reads) == len(set(reads)), "a range was fetched again"
    assert memory_rsm.index_fetches == 0
    assert reader.read_ahead.hits >= len(segments) - 1


def add_abort(env: Env, segment_index: int, txn: AbortedTxn) -> None:
    env.plog.segments()[segment_index].append_aborted_txn(txn)


def test_read_committed_remote_fetch_returns_the_aborted_transactions_it_overlaps(env):
    produce(env.plog, 40, ts=T0)
    segments = env.plog.segments()
    assert len(segments) >= 4
    s1, s2 = segments[1].base_offset, segments[2].base_offset
    # A transaction aborted in segment 1, and one that starts in segment 1 but is aborted
    # (its marker) in segment 2: a fetch in segment 1 must learn of both.
    early = AbortedTxn(7, s1, s1 + 3, s1 + 4)
    late = AbortedTxn(8, s1 + 2, s2 + 1, s2 + 2)
    add_abort(env, 1, early)
    add_abort(env, 2, late)
    # One in the local active segment: seen once the remote segments run out.
    active = env.plog.active_segment.base_offset
    local_txn = AbortedTxn(9, active - 1, active, active + 1)
    env.plog.active_segment.append_aborted_txn(local_txn)
    env.copy()
    env.plog.delete_old_segments()
    assert env.plog.local_log_start_offset == active
    reader = env.rlm.reader

    result = reader.fetch(env.tp, env.plog, s1, 1 << 20, read_committed=True)
    assert result.aborted_txns is not None
    assert {pid for pid, _ in result.aborted_txns} >= {7, 8}
    assert (7, s1) in result.aborted_txns and (8, s1 + 2) in result.aborted_txns
    # READ_UNCOMMITTED fetches carry no list at all.
    assert reader.fetch(env.tp, env.plog, s1, 1 << 20).aborted_txns is None
    # Segment 0 ends before any abort, and the search stops there when the index says so;
    # a range that reaches the local log picks up its aborts as well.
    assert reader.collect_aborted_txns(env.tp, env.plog, 0, s1) == []
    everything = reader.collect_aborted_txns(env.tp, env.plog, 0, active + 1)
    assert [t.producer_id for t in everything] == [7, 8, 9]
    # Segments without aborts are known from their metadata: their indexes are not fetched.
    without = [md for md in env.segments() if md.txn_index_empty]
    assert without and all(md.segment_id not in reader.index_cache for md in without)


def test_read_ahead_stays_bounded_and_evicting_a_pending_range_cancels_it():
    ahead = ReadAhead()
    pending = [Future() for _ in range(READ_AHEAD_MAX_ENTRIES + 6)]
    sid = uuid.uuid4()

    def fill() -> None:
        for i, future in enumerate(pending):
            ahead.put((sid, i), 0, future)

    # Run where a deadlock (a cancellation calling back into the cache under its lock)
    # shows as a thread that does not finish, not as a hung test run.
    worker = threading.Thread(target=fill, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "putting ranges into a full read-ahead cache deadlocked"
    assert all(f.cancelled() for f in pending[:6])
    assert not any(f.cancelled() for f in pending[6:])
    pending[-1].set_result(b"range")
    assert ahead.take((sid, len(pending) - 1)) == (0, b"range")
    assert ahead.take((sid, len(pending) - 1)) is None  # handed out once
    assert ahead.take((sid, 0)) is None  # evicted


def test_a_batch_corrupted_in_the_remote_tier_is_never_served(env, memory_rsm):
    archive_all(env)
    md = sorted(env.segments(), key=lambda m: m.start_offset)[1]
    key = (md.segment_id, "log")
    data = bytearray(memory_rsm.objects[key])
    data[HEADER_SIZE + 10] ^= 0xFF  # inside the first batch's records
    memory_rsm.objects[key] = bytes(data)
    with pytest.raises(CorruptRemoteDataError, match="fails its CRC32C"):
        env.rlm.reader.fetch(env.tp, env.plog, md.start_offset, 1 << 20)
    # Other segments are still served.
    assert env.rlm.reader.fetch(env.tp, env.plog, 0, 1 << 20).records


def test_event_lines_are_one_line_of_key_value_fields():
    from tiered.events import event_line

    tp = TopicIdPartition(uuid.UUID(int=1), "orders", 3)
    line = event_line("remote_delete", tp, start_offset=0, end_offset=9, reason="retention.ms")
    assert line == (
        "event=remote_delete topic=orders partition=3 start_offset=0 end_offset=9 "
        "reason=retention.ms"
    )
    assert 'error="OSError: disk full"' in event_line("x", tp, error="OSError: disk full")


def test_a_sequential_consumer_finds_several_ranges_read_ahead(tmp_path):
    """The read-ahead is a pipeline: after one fetch, more than the next fetch is in hand
    (READ_AHEAD_DEPTH ranges; a consumer that asks again at once no longer waits for the
    one range read since its last fetch), and the ranges hold the segments' bytes."""
    rsm = FreezableRSM()
    env = Env(tmp_path, rsm, tiered_config())
    try:
        expected = archive_all(env)
        reader = env.rlm.reader
        max_bytes = 600  # two batches a fetch: several fetches per segment
        first = reader.fetch(env.tp, env.plog, 0, max_bytes).records
        offset = next_offset_after(first)
        got = bytearray(whole_batches(first))
        # Two ranges in hand at once: with one (the read-ahead before the pipeline) the
        # second fetch below found nothing and went to the remote tier.
        assert READ_AHEAD_DEPTH >= 2
        wait_until(lambda: reader.read_ahead.arrived() >= 2, 10)
        rsm.frozen = True
        for _ in range(2):
            answer = reader.submit_fetch(env.tp, env.plog, offset, max_bytes)
            assert answer.done(), "a fetch of a range read ahead was not answered at once"
            data = answer.result().records
            got += whole_batches(data)
            offset = next_offset_after(data)
        assert bytes(got) == expected[: len(got)]
    finally:
        env.close()


def test_read_committed_fetches_are_served_from_read_ahead_with_their_aborts(env):
    """librdkafka consumes READ_COMMITTED by default: such fetches are answered from the
    read-ahead too, with the aborted transactions the pool's read gives, also for segments
    whose transaction index has left the index cache (read again by the pool)."""
    produce(env.plog, 40, ts=T0)
    segments = env.plog.segments()
    s1, s2 = segments[1].base_offset, segments[2].base_offset
    add_abort(env, 1, AbortedTxn(7, s1, s1 + 3, s1 + 4))
    add_abort(env, 2, AbortedTxn(8, s1 + 2, s2 + 1, s2 + 2))
    env.copy()
    env.plog.delete_old_segments()
    reader = env.rlm.reader
    md2 = reader._segment_for(env.tp, env.plog, s2)
    answers = []
    offset, from_memory = 0, 0
    while offset < env.plog.local_log_start_offset:
        if offset == s2:
            reader.index_cache.remove(md2.segment_id)  # not in memory: the pool reads it
        elif offset > 0:
            wait_until(lambda o=offset: in_hand(reader, env, o), 10)
        answer = reader.submit_fetch(env.tp, env.plog, offset, 600, read_committed=True)
        from_memory += answer.done()
        result = answer.result(10)
        answers.append((offset, result))
        offset = next_offset_after(result.records)
    assert from_memory >= len(answers) // 2
    for offset, result in answers:
        expected = reader.fetch(env.tp, env.plog, offset, 600, read_committed=True)
        assert result.records[: len(expected.records)] == expected.records[: len(result.records)]
        assert result.aborted_txns == expected.aborted_txns, offset
    assert any((8, s1 + 2) in r.aborted_txns for _, r in answers)


def test_a_corrupt_batch_read_ahead_is_never_served(tmp_path):
    """A read-ahead range is checked when it arrives: one holding a batch that fails its
    CRC32C is dropped, never in hand, and the fetch that wants it fails as without
    read-ahead."""
    rsm = FreezableRSM()
    env = Env(tmp_path, rsm, tiered_config())
    try:
        archive_all(env)
        reader = env.rlm.reader
        md = sorted(env.segments(), key=lambda m: m.start_offset)[1]
        key = (md.segment_id, "log")
        data = bytearray(rsm.objects[key])
        data[HEADER_SIZE + 10] ^= 0xFF  # inside the segment's first batch
        rsm.objects[key] = bytes(data)
        offset = 0
        while offset < md.start_offset:
            answer = reader.submit_fetch(env.tp, env.plog, offset, 600)
            offset = next_offset_after(answer.result(10).records)
        assert offset == md.start_offset
        # Serving the end of segment 0 read the start of segment 1 ahead; it failed.
        wait_until(lambda: (md.segment_id, 0) in rsm.reads, 10, what="the read-ahead")
        wait_until(lambda: reader.read_ahead.held((md.segment_id, offset)) is None, 10)
        answer = reader.submit_fetch(env.tp, env.plog, offset, 600)
        with pytest.raises(CorruptRemoteDataError, match="fails its CRC32C"):
            answer.result(10)
    finally:
        env.close()


def test_a_range_read_ahead_of_a_deleted_segment_is_not_served(env, memory_rsm):
    """Retention deletes remote segments a consumer had ranges read ahead of: a fetch of
    them is out of range, as without read-ahead, not answered with the deleted bytes."""
    archive_all(env)
    reader = env.rlm.reader
    remote = sorted(env.segments(), key=lambda m: m.start_offset)
    # A consumer at the end of segment 0: the start of segment 1 is read ahead.
    first = reader.fetch(env.tp, env.plog, 0, remote[0].segment_size_in_bytes).records
    assert next_offset_after(first) == remote[1].start_offset
    wait_until(lambda: in_hand(reader, env, remote[1].start_offset), 10)
    env.retain_only(remote[2:])
    assert env.expire() == 2
    assert env.plog.log_start_offset == remote[2].start_offset
    answer = reader.submit_fetch(env.tp, env.plog, remote[1].start_offset, 600)
    with pytest.raises(OffsetOutOfRangeError):
        answer.result(10)


def test_a_smaller_fetch_keeps_the_rest_of_a_range_in_hand(tmp_path):
    """A fetch with a smaller ``max_bytes`` than the range read ahead for it (the response's
    budget shrank) is answered from the range, and the rest of the range answers the next
    fetch, also from memory: the same bytes as the segment, no read."""
    rsm = FreezableRSM()
    env = Env(tmp_path, rsm, tiered_config(segment_bytes=8192))
    try:
        expected = archive_all(env)
        reader = env.rlm.reader
        first = reader.fetch(env.tp, env.plog, 0, 2000).records
        got = bytearray(whole_batches(first))
        offset = next_offset_after(first)
        wait_until(lambda: in_hand(reader, env, offset), 10)
        rsm.frozen = True
        for max_bytes in (700, 700):
            answer = reader.submit_fetch(env.tp, env.plog, offset, max_bytes)
            assert answer.done(), "the rest of the range was not in hand"
            data = answer.result().records
            assert len(whole_batches(data)) <= max_bytes
            got += whole_batches(data)
            offset = next_offset_after(data)
        assert bytes(got) == expected[: len(got)]
    finally:
        env.close()


def test_a_read_committed_fetch_far_from_the_local_log_still_gets_a_late_abort(env):
    """A transaction that starts in the first segment and is aborted many segments later:
    a READ_COMMITTED fetch of the first segment learns of it whether it is answered from
    the read-ahead or (with more segments to search than the event loop takes on) by the
    reader pool."""
    while len(env.plog.segments()) <= EVENT_LOOP_TXN_SEARCH_SEGMENTS + 4:
        produce(env.plog, 20, ts=T0)
    segments = env.plog.segments()
    first = segments[0].base_offset
    late = segments[-3]
    add_abort(env, len(segments) - 3, AbortedTxn(9, first + 2, late.base_offset, late.base_offset))
    env.copy()
    env.plog.delete_old_segments()
    reader = env.rlm.reader
    offset = 0
    for _ in range(3):
        if offset > 0:
            wait_until(lambda o=offset: in_hand(reader, env, o), 10)
        result = reader.submit_fetch(env.tp, env.plog, offset, 300, read_committed=True)
        answer = result.result(10)
        assert (9, first + 2) in answer.aborted_txns, offset
        offset = next_offset_after(answer.records)


class GatedRSM(FreezableRSM):
    """A FreezableRSM whose log reads wait for ``gate`` once ``gated``: a read that is
    running while its waiter gives up."""

    def __init__(self) -> None:
        super().__init__()
        self.gated = False
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def fetch_log_segment(self, metadata, start_position, end_position=None):
        if self.gated:
            self.waiting.set()
            assert self.gate.wait(10), "the test never opened the gate"
        return super().fetch_log_segment(metadata, start_position, end_position)


def test_a_fetch_its_waiter_gave_up_on_reads_nothing_ahead(tmp_path):
    """A remote read that misses remote.fetch.max.wait.ms is cancelled by the broker while
    it runs, and the client asks for the offset again. The abandoned read, when it ends,
    must not read ahead: by then the client's second fetch may have read ahead and the
    consumer passed those ranges, and a range read again from here would be a remote read
    nobody asked for, kept in memory (and served to a later consumer of that offset from
    before any change to the object)."""
    rsm = GatedRSM()
    env = Env(tmp_path, rsm, tiered_config())
    try:
        archive_all(env)
        reader = env.rlm.reader
        rsm.gated = True
        answer = reader.submit_fetch(env.tp, env.plog, 0, 600)
        assert rsm.waiting.wait(10), "the read never started"
        assert not answer.cancel(), "a running read cannot be cancelled"
        rsm.gated = False
        rsm.gate.set()
        wait_until(lambda: reader._pending == 0, 10, what="the abandoned read done")
        assert len(rsm.reads) == 1, "the abandoned read read ahead"
        assert reader.read_ahead.arrived() == 0
        # The client's next fetch of the same offset reads ahead as usual.
        data = reader.submit_fetch(env.tp, env.plog, 0, 600).result(10).records
        wait_until(lambda: in_hand(reader, env, next_offset_after(data)), 10)
    finally:
        rsm.gate.set()
        env.close()


def test_a_range_read_ahead_is_never_read_again_after_the_consumer_took_it(tmp_path):
    """The read-ahead pipeline extends itself when a range arrives (a callback in the
    thread that read it). If a fetch took that range first, the fetch extended the
    pipeline from it; a late extension from the same range must read nothing, or it reads
    ranges the consumer has already passed again and keeps them."""
    rsm = FreezableRSM()
    env = Env(tmp_path, rsm, tiered_config())
    try:
        archive_all(env)
        reader = env.rlm.reader
        first = reader.fetch(env.tp, env.plog, 0, 600).records
        offset = next_offset_after(first)
        wait_until(lambda: in_hand(reader, env, offset), 10)
        wait_until(lambda: reader._pending == 0, 10, what="the pipeline settled")
        md = reader._segment_for(env.tp, env.plog, offset)
        key = (md.segment_id, offset)
        position, taken = reader.read_ahead.held(key)
        # The consumer takes that range and the ranges after it (the fetches extend the
        # pipeline from each).
        for _ in range(READ_AHEAD_DEPTH):
            data = reader.submit_fetch(env.tp, env.plog, offset, 600).result(10).records
            offset = next_offset_after(data)
            wait_until(lambda: reader._pending == 0, 10, what="the pipeline settled")
        reads = list(rsm.reads)
        held = reader.read_ahead.arrived()
        # The first range's own extension, late.
        reader._read_ahead_after(
            env.tp, env.plog, md, key, position, taken, 600, READ_AHEAD_DEPTH - 1
        )
        wait_until(lambda: reader._pending == 0, 10, what="the late extension done")
        assert rsm.reads == reads, "ranges the consumer had passed were read again"
        assert reader.read_ahead.arrived() == held
    finally:
        env.close()


def test_a_fetch_whose_range_is_on_the_way_is_answered_when_it_arrives(tmp_path):
    """A consumer asks for its next fetch while that range is still being read (on S3,
    the usual case): the fetch is answered when the range arrives, with its bytes, and no
    pool thread waits for it. A fetch given up meanwhile takes nothing: the range stays in
    hand for the consumer's next try, which is answered from it (not read again)."""
    rsm = GatedRSM()
    env = Env(tmp_path, rsm, tiered_config())
    try:
        produce(env.plog, 40, ts=T0)
        expected = b"".join(seg.log.path.read_bytes() for seg in env.plog.segments()[:-1])
        env.copy()
        env.plog.delete_old_segments()
        reader = env.rlm.reader
        first = reader.fetch(env.tp, env.plog, 0, 600).records
        offset = next_offset_after(first)
        wait_until(lambda: reader._pending == 0, 10, what="the pipeline settled")
        rsm.gated = True  # ranges read ahead from now on wait for the gate
        got = bytearray(whole_batches(first))
        while True:
            md = reader._segment_for(env.tp, env.plog, offset)
            held = reader.read_ahead.held((md.segment_id, offset))
            assert held is not None, f"nothing read ahead for offset {offset}"
            if not held[1].done():
                break
            data = reader.submit_fetch(env.tp, env.plog, offset, 600).result(10).records
            got += whole_batches(data)
            offset = next_offset_after(data)
        assert rsm.waiting.wait(10), "the range was never asked for"
        pending = reader._pending  # the ranges on the way, no fetch among them
        given_up = reader.submit_fetch(env.tp, env.plog, offset, 600)
        assert not given_up.done() and reader._pending == pending
        assert given_up.cancel()
        answer = reader.submit_fetch(env.tp, env.plog, offset, 600)
        assert not answer.done() and reader._pending == pending
        rsm.gated = False
        rsm.gate.set()
        data = answer.result(10).records
        got += whole_batches(data)
        assert bytes(got) == expected[: len(got)]
        wait_until(lambda: reader._pending == 0, 10, what="the pipeline settled")
        assert rsm.reads.count((md.segment_id, held[0])) == 1, "the range was read again"
    finally:
        rsm.gate.set()
        env.close()


@pytest.mark.parametrize("rsm_kind", ["memory", "local-dir"])
def test_an_abort_tiered_after_a_search_found_none_is_still_found(tmp_path, rsm_kind):
    """A READ_COMMITTED fetch that found no abort from its segment to the local log is
    remembered; segments tiered later are still searched: a transaction that started in
    that segment and was aborted after the first fetch reaches the next fetch's answer."""
    rsm = MemoryRSM() if rsm_kind == "memory" else local_dir_rsm(tmp_path / "bucket")
    env = Env(tmp_path, rsm, tiered_config())
    try:
        produce(env.plog, 40, ts=T0)
        env.copy()
        env.plog.delete_old_segments()
        reader = env.rlm.reader
        s1 = env.segments()[0].end_offset + 1
        for _ in range(2):  # the second search starts from what the first remembered
            answer = reader.submit_fetch(env.tp, env.plog, s1, 1 << 20, read_committed=True)
            assert answer.result(10).aborted_txns == ()
        # A transaction open since segment 1 is aborted in a segment tiered now.
        reached = env.plog.local_log_start_offset
        produce(env.plog, 40, ts=T0)
        late = next(s for s in env.plog.segments() if s.base_offset > reached)
        late.append_aborted_txn(AbortedTxn(9, s1 + 1, late.base_offset, late.base_offset))
        env.copy()
        env.plog.delete_old_segments()
        assert env.plog.local_log_start_offset > late.base_offset
        answer = reader.submit_fetch(env.tp, env.plog, s1, 1 << 20, read_committed=True)
        assert answer.result(10).aborted_txns == ((9, s1 + 1),)
        assert reader.fetch(env.tp, env.plog, s1, 1 << 20, read_committed=True).aborted_txns == (
            (9, s1 + 1),
        )
    finally:
        env.close()
