"""ListOffsets -3 (MAX_TIMESTAMP) over the remote tier: the first record carrying the
largest timestamp, found from the RLMM metadata, reading only the batch that holds it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from core.log.partition_log import MAX_TIMESTAMP, TimestampAndOffset
from core.records.builder import RecordBatchBuilder

from .harness import T0, Env, produce


def append_at(env: Env, timestamps: Sequence[int], epoch: int = 0) -> int:
    """Append one batch whose records carry ``timestamps``; returns its base offset."""
    builder = RecordBatchBuilder()
    for ts in timestamps:
        builder.append(b"m" * 40, timestamp=ts)
    info = env.plog.append_as_leader(builder.build(), epoch)
    env.plog.update_high_watermark(env.plog.log_end_offset)
    return info.first_offset


def tier_and_drop_local(env: Env) -> None:
    env.copy()
    env.plog.delete_old_segments()
    assert env.plog.log_start_offset < env.plog.local_log_start_offset


def remote_max(env: Env) -> TimestampAndOffset | None:
    return env.rlm.find_offset_by_timestamp(env.tp, env.plog, MAX_TIMESTAMP)


def test_max_only_in_the_remote_tier_answers_its_record(env, memory_rsm):
    produce(env.plog, 8, ts=T0)
    base = append_at(env, [T0 + 5, T0 + 90_000, T0 + 7], epoch=2)
    produce(env.plog, 30, ts=T0 + 100, epoch=2)  # the max's segment rolls and goes remote
    tier_and_drop_local(env)
    assert env.plog.local_log_start_offset > base + 2  # the record is only remote now
    fetches = memory_rsm.fetches
    assert remote_max(env) == TimestampAndOffset(T0 + 90_000, base + 1, 2)
    assert memory_rsm.fetches - fetches == 1  # one ranged read, from the indexes' position
    seam = asyncio.run(
        env.rlm.offset_for_timestamp(env.tp.topic_id, "t", 0, env.plog, MAX_TIMESTAMP)
    )
    assert seam == TimestampAndOffset(T0 + 90_000, base + 1, 2)


def test_a_larger_local_max_leaves_the_answer_to_the_local_log(env, memory_rsm):
    produce(env.plog, 30, ts=T0)
    tier_and_drop_local(env)
    base = append_at(env, [T0 + 50_000, T0 + 60_000])
    fetches = memory_rsm.fetches
    assert remote_max(env) is None
    assert memory_rsm.fetches == fetches  # the metadata was enough: nothing read
    local = env.plog.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert local == TimestampAndOffset(T0 + 60_000, base + 1, 0)


def test_a_tie_with_the_local_log_answers_the_earlier_remote_record(env):
    produce(env.plog, 4, ts=T0)
    first = append_at(env, [T0 + 9_000, T0 + 1])
    produce(env.plog, 30, ts=T0 + 10)
    tier_and_drop_local(env)
    append_at(env, [T0 + 9_000])  # the same timestamp again, later, locally
    assert remote_max(env) == TimestampAndOffset(T0 + 9_000, first, 0)


def test_segments_below_the_log_start_offset_do_not_count(env):
    produce(env.plog, 2, ts=T0)
    append_at(env, [T0 + 80_000])
    produce(env.plog, 30, ts=T0 + 10)
    segments = env.plog.segments()
    second = segments[2].base_offset
    produce(env.plog, 30, ts=T0)
    tier_and_drop_local(env)
    assert remote_max(env) == TimestampAndOffset(T0 + 80_000, 10, 0)
    # DeleteRecords past the segment holding it: the next largest timestamp answers.
    env.plog.maybe_increment_log_start_offset(second, "DeleteRecords")
    found = remote_max(env)
    assert found is not None and found.offset >= second
    assert found.timestamp == T0 + 10 + 29 + 4
