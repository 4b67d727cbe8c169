"""Remote reads beyond the basics: read-ahead for sequential consumers, and the aborted
transactions READ_COMMITTED fetches get from remote transaction indexes."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future

import pytest

from core.log.txn_index import AbortedTxn
from core.records.batch import HEADER_SIZE, RecordBatchHeader, peek_batch_size
from tests.support.waiting import wait_until
from tiered.api import TopicIdPartition
from tiered.remote_reader import READ_AHEAD_MAX_ENTRIES, CorruptRemoteDataError, _ReadAhead

from .harness import T0, Env, produce


def test_sequential_reads_are_served_from_read_ahead_and_stay_identical(env, memory_rsm):
    produce(env.plog, 40, ts=T0)
    expected = b"".join(seg.log.path.read_bytes() for seg in env.plog.segments()[:-1])
    env.copy()
    env.plog.delete_old_segments()
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


def test_a_consumer_from_offset_0_walks_remote_segments_without_their_indexes(env, memory_rsm):
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
    got = bytearray()
    offset = 0
    ahead = None  # the remote requests made so far, when the next range is in hand
    while offset < env.plog.local_log_start_offset:
        answer = reader.submit_fetch(env.tp, env.plog, offset, 64 * 1024)
        if ahead is not None:
            # In memory already: answered in this thread, not queued for the pool.
            assert answer.done(), "a fetch of a range in hand waited for a pool thread"
        data = answer.result(10).records
        assert data, f"nothing at offset {offset}"
        if ahead is not None:
            assert memory_rsm.fetches == ahead, "a read-ahead range was fetched again"
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
            ahead = memory_rsm.fetches
    assert bytes(got) == expected
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
    ahead = _ReadAhead()
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
    produce(env.plog, 40, ts=T0)
    env.copy()
    env.plog.delete_old_segments()
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
