"""RemoteLogManager: copy, local retention, remote reads, expiration, lineage."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid

import pytest

from core.errors import KafkaStorageError, OffsetOutOfRangeError
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.partition_log import PartitionLog
from core.records.builder import RecordBatchBuilder, build_control_batch
from core.records.record import ControlRecordType
from rlmm.serde import deserialize
from rlmm.topic_client import MetadataTopicError
from tests.support.memory_metadata import manager
from tests.support.waiting import wait_until
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageError,
    TopicIdPartition,
)
from tiered.lineage import filtered_leader_epochs, is_within_lineage
from tiered.metrics import REMOTE_COPY_ERRORS, REMOTE_COPY_REQUESTS, REMOTE_DELETE_REQUESTS
from tiered.rlm_tasks import ACTIVE_RECHECK_FRACTION, CopyTask, FollowerTask

from .harness import T0, Env, local_dir_rsm, produce, tiered_config

S = RemoteLogSegmentState


def local_reads(env: Env, upto: int, max_bytes: int) -> dict[int, bytes]:
    out = {}
    for offset in range(env.plog.log_start_offset, upto):
        info = env.plog.read(offset, max_bytes)
        assert info.records is not None
        out[offset] = info.records.read_bytes()
    return out


def test_copy_picks_rolled_segments_up_to_the_high_watermark(env):
    produce(env.plog, 40)
    segments = env.plog.segments()
    assert len(segments) >= 5
    # The high watermark inside the fourth segment: only the first two qualify (their next
    # segment starts at or below it); the third's next base is above it.
    hw = segments[3].base_offset - 1
    env.plog.update_high_watermark(hw)
    assert env.copy() == 2
    copied = sorted((md.start_offset, md.end_offset) for md in env.segments())
    assert copied == [
        (segments[0].base_offset, segments[1].base_offset - 1),
        (segments[1].base_offset, segments[2].base_offset - 1),
    ]
    assert env.plog.highest_offset_in_remote_storage == segments[2].base_offset - 1
    assert all(md.state == S.COPY_SEGMENT_FINISHED for md in env.segments())
    assert all(md.custom_metadata == b"custom" for md in env.segments())

    env.plog.update_high_watermark(env.plog.log_end_offset)
    copied_now = env.copy()
    assert copied_now == len(segments) - 1 - 2  # never the active segment
    ends = {md.end_offset for md in env.segments()}
    assert env.plog.active_segment.base_offset - 1 in ends
    assert all(md.end_offset < env.plog.active_segment.base_offset for md in env.segments())
    assert env.copy() == 0  # nothing new: idempotent runs
    assert env.rlm.metrics.get(REMOTE_COPY_REQUESTS) == len(segments) - 1


def produce_during_the_first_copy(env, memory_rsm) -> None:
    """The RSM's first copy produces 20 more records to the partition (which rolls)."""
    copy = memory_rsm.copy_log_segment_data
    produced = []

    def copy_while_producing(md, data):
        if not produced:
            produced.append(produce(env.plog, 20))
        return copy(md, data)

    memory_rsm.copy_log_segment_data = copy_while_producing


def test_a_copy_run_also_copies_segments_rolled_while_it_ran(env, memory_rsm):
    """A partition produced while its copy task runs: what rolled meanwhile is copied in
    the same run, not a task interval later (local bytes would grow by that interval)."""
    produce(env.plog, 20)
    rolled = len(env.plog.segments()) - 1
    produce_during_the_first_copy(env, memory_rsm)
    copied = env.copy()
    assert copied > rolled  # every rolled segment, old and new
    assert copied == len(env.segments(S.COPY_SEGMENT_FINISHED))
    assert env.plog.highest_offset_in_remote_storage == env.plog.active_segment.base_offset - 1


def test_a_copy_run_stopped_at_its_time_bound_is_followed_at_once(env, memory_rsm, monkeypatch):
    """A run copies further passes for at most one task interval; when it stops there with
    segments left (the partition is produced faster than one run copies), the next run is
    due at once, not a task interval later."""
    produce(env.plog, 20)
    task = env.task(CopyTask)
    produce_during_the_first_copy(env, memory_rsm)
    now = [0.0]

    def slow_clock() -> float:  # every look at the clock is 10 s later: each pass is late
        now[0] += 10.0
        return now[0]

    monkeypatch.setattr("tiered.rlm_tasks.time.monotonic", slow_clock)
    assert task.run() == 0.0
    assert 0 < env.plog.highest_offset_in_remote_storage < env.plog.active_segment.base_offset - 1
    interval = env.rlm.config.remote_log_manager_task_interval_ms
    # Caught up; it copied, so the partition is checked again soon ...
    assert task.run() == interval * ACTIVE_RECHECK_FRACTION
    assert env.plog.highest_offset_in_remote_storage == env.plog.active_segment.base_offset - 1
    assert task.run() == interval  # ... and a task interval after a run that copied nothing


def test_copies_of_different_partitions_overlap_on_the_copier_pool(env, memory_rsm, tmp_path):
    """Two partitions' copy tasks run on different copier threads at once: each RSM copy
    waits (with a deadline) until the other partition's copy is in progress too."""
    other_tp = TopicIdPartition(uuid.UUID(int=43), "u", 0)
    other = PartitionLog(tmp_path / "logs" / "u-0", "u", 0, tiered_config(), clock=env.clock)
    try:
        env.rlm.on_leadership([(other_tp, other)])
        assert env.rlmm.wait_ready(other_tp, 10)
        produce(env.plog, 20)
        produce(other, 20)
        both = threading.Barrier(2, timeout=20)
        met: set[str] = set()
        copy = memory_rsm.copy_log_segment_data

        def copy_when_both_copy(md, data):
            if md.topic_id_partition.topic not in met:
                both.wait()  # BrokenBarrierError (a failed copy) if the other never comes
                met.add(md.topic_id_partition.topic)
            return copy(md, data)

        memory_rsm.copy_log_segment_data = copy_when_both_copy
        env.rlm.start()
        for plog in (env.plog, other):
            target = plog.active_segment.base_offset - 1
            wait_until(
                lambda p=plog, t=target: p.highest_offset_in_remote_storage == t,
                what=f"{plog.topic} copied",
            )
        assert met == {"t", "u"}
        assert env.rlm.metrics.get(REMOTE_COPY_ERRORS) == 0
    finally:
        env.rlm.shutdown()
        other.close()


def test_a_failed_finish_in_a_batch_leaves_no_offset_uncopied(env, memory_rsm):
    """The FINISHED events of a batch go one after another in offset order: when the first
    one fails, no later segment of the batch is FINISHED (which would move the highest
    remote offset over the unfinished one, and the next run would never copy it)."""
    produce(env.plog, 40)
    assert len(env.plog.segments()) >= 4
    append = env.topic.append
    failed = []

    def fail_the_first_finish(partition: int, value: bytes, *, durable: bool = True) -> int:
        event = deserialize(value)
        finish = getattr(event, "state", None) == S.COPY_SEGMENT_FINISHED
        if finish and not failed:
            failed.append(event)
            raise MetadataTopicError("injected: the metadata write failed")
        return append(partition, value, durable=durable)

    env.topic.append = fail_the_first_finish
    with pytest.raises(RemoteStorageError):
        env.copy()
    assert failed
    assert env.plog.highest_offset_in_remote_storage == -1
    assert env.segments(S.COPY_SEGMENT_FINISHED) == []
    assert len(env.plog.segments()) >= 4  # nothing left the disk
    del env.topic.append
    env.copy()
    highest = env.plog.highest_offset_in_remote_storage
    assert highest == env.plog.active_segment.base_offset - 1
    for offset in range(env.plog.log_start_offset, highest + 1):
        epoch = env.plog.leader_epoch_cache.epoch_for_offset(offset)
        served = env.rlmm.remote_log_segment_metadata(env.tp, epoch, offset)
        assert served is not None and served.state == S.COPY_SEGMENT_FINISHED, offset


def test_copy_stops_at_the_last_stable_offset(env):
    """An open transaction bounds the copy (Kafka copies up to the LSO): a segment whose
    transaction is still undecided is not shipped with an incomplete transaction index."""
    produce(env.plog, 20)
    open_at = env.plog.log_end_offset
    txn = RecordBatchBuilder(
        producer_id=77, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    txn.append(b"x" * 40, timestamp=T0)
    env.plog.append_as_leader(txn.build(), 0)
    produce(env.plog, 40)
    assert env.plog.last_stable_offset == open_at
    assert env.copy() > 0
    assert all(md.end_offset < open_at for md in env.segments())
    abort = build_control_batch(ControlRecordType.ABORT, producer_id=77, producer_epoch=0)
    env.plog.append_as_coordinator(abort, 0)
    env.plog.update_high_watermark(env.plog.log_end_offset)
    assert env.copy() > 0
    assert max(md.end_offset for md in env.segments()) > open_at
    holding = [md for md in env.segments() if md.start_offset <= open_at <= md.end_offset]
    assert len(holding) == 1


def test_segment_metadata_and_files_shipped(env, memory_rsm):
    produce(env.plog, 12, epoch=0)
    produce(env.plog, 12, epoch=3)
    env.copy()
    cache = env.plog.leader_epoch_cache
    for md in env.segments():
        assert dict(md.segment_leader_epochs) == cache.entries_for_range(
            md.start_offset, md.end_offset
        )
        checkpoint = LeaderEpochCheckpointFile.decode(
            memory_rsm.objects[(md.segment_id, "leader-epoch-checkpoint")]
        )
        assert checkpoint == cache.epoch_entries_in_range(-1, md.end_offset + 1)
        assert md.txn_index_empty
        assert (md.segment_id, "txnindex") not in memory_rsm.objects
        assert (md.segment_id, "snapshot") in memory_rsm.objects
    straddling = [md for md in env.segments() if len(md.segment_leader_epochs) == 2]
    assert straddling, "one segment holds both epochs"


def test_local_retention_then_reads_below_local_start_come_from_remote(env, memory_rsm):
    produce(env.plog, 40)
    before = local_reads(env, env.plog.active_segment.base_offset, 700)
    env.copy()  # applies local retention (local.retention.bytes=1) once it copied
    assert len(env.plog.segments()) == 1
    assert env.plog.local_log_start_offset == env.plog.active_segment.base_offset
    assert env.plog.log_start_offset == 0
    for offset, expected in before.items():
        assert env.rlm.read_remote(env.tp, env.plog, offset, 700) == expected, offset
    # A max_bytes below the first batch still returns that whole batch.
    first = env.rlm.read_remote(env.tp, env.plog, 0, 1)
    assert first == before[0][: len(first)] and len(first) > 1
    # The async seam used by the broker.

    async def via_seam() -> bytes:
        result = await env.rlm.start_read(
            env.tp.topic_id, "t", 0, env.plog, 7, 700, read_committed=False
        )
        return result.records

    assert asyncio.run(via_seam()) == before[7]
    with pytest.raises(OffsetOutOfRangeError):
        env.rlm.read_remote(env.tp, env.plog, env.plog.log_end_offset + 5, 100)


def test_local_dir_rsm_end_to_end(tmp_path):
    env = Env(tmp_path, local_dir_rsm(tmp_path / "bucket"), tiered_config())
    try:
        produce(env.plog, 30)
        before = local_reads(env, env.plog.active_segment.base_offset, 1000)
        env.copy()
        env.plog.delete_old_segments()
        for offset, expected in before.items():
            assert env.rlm.read_remote(env.tp, env.plog, offset, 1000) == expected
        env.plog.update_config(tiered_config(retention_bytes=0, local_retention_bytes=0))
        env.expire()
        assert env.plog.log_start_offset == env.plog.local_log_start_offset
    finally:
        env.close()


def test_a_machine_crash_after_local_retention_loses_no_copied_offset(env, memory_rsm):
    """Local retention deletes a copied segment only once its COPY_SEGMENT_FINISHED is
    durable: a crash of the machine that loses the metadata topic's unsynced tail (the
    COPY_SEGMENT_STARTED events are not synced) right after local retention still finds
    every deleted offset in a finished remote segment."""
    produce(env.plog, 40)
    before = local_reads(env, env.plog.active_segment.base_offset, 700)
    env.copy()  # applies local retention once the batch's FINISHED events are durable
    local_start = env.plog.local_log_start_offset
    assert local_start > 0
    env.rlm.shutdown()
    env.rlmm.close()
    env.topic.crash()
    env.rlmm = manager(env.topic)
    env.rlm = env.new_rlm()
    finished = env.segments(S.COPY_SEGMENT_FINISHED)
    assert finished and finished[-1].end_offset >= local_start - 1
    for offset, expected in before.items():
        assert env.rlm.read_remote(env.tp, env.plog, offset, 700) == expected, offset


def test_a_machine_crash_between_a_copy_and_its_finish_leaves_nothing_served(env, memory_rsm):
    """A crash after the RSM copy, before COPY_SEGMENT_FINISHED: the copy's unsynced
    STARTED is lost with the crash, nothing refers to its objects, no local segment was
    deleted, and the next leader's run copies the segment again."""
    produce(env.plog, 20)
    task = env.task(CopyTask)
    copy = memory_rsm.copy_log_segment_data

    def copy_then_lose_leadership(md, data):
        result = copy(md, data)
        task.cancel()  # stops the run here, as the crash does
        return result

    memory_rsm.copy_log_segment_data = copy_then_lose_leadership
    assert task.run_once() == 0
    assert env.plog.highest_offset_in_remote_storage == -1
    assert env.plog.delete_old_segments() == 0
    env.rlm.shutdown()
    env.rlmm.close()
    env.topic.crash()
    env.rlmm = manager(env.topic)
    del memory_rsm.copy_log_segment_data
    env.rlm = env.new_rlm()
    assert env.segments() == []
    before = local_reads(env, env.plog.active_segment.base_offset, 700)
    rolled = len(env.plog.segments()) - 1
    assert env.copy() == rolled
    env.plog.delete_old_segments()
    for offset, expected in before.items():
        assert env.rlm.read_remote(env.tp, env.plog, offset, 700) == expected, offset


def test_a_machine_crash_after_remote_deletions_serves_no_deleted_segment(env, memory_rsm):
    """DELETE_SEGMENT_STARTED is durable before the remote objects go: after a crash of the
    machine that loses the unsynced tail of the metadata topic, no segment whose objects
    were deleted is FINISHED again."""
    produce(env.plog, 40)
    env.copy()
    env.plog.delete_old_segments()
    env.plog.update_config(tiered_config(retention_bytes=0, local_retention_bytes=0))
    assert env.expire() > 0
    env.rlm.shutdown()
    env.rlmm.close()
    env.topic.crash()
    env.rlmm = manager(env.topic)
    env.rlm = env.new_rlm()
    assert env.segments(S.COPY_SEGMENT_FINISHED) == []
    assert env.segments(S.DELETE_SEGMENT_STARTED) or env.segments() == []
    env.expire()  # the deletions a crash interrupted are resumed
    assert env.segments() == []
    assert memory_rsm.segment_ids() == set()


def test_failed_copy_is_cleaned_up_and_retried(env, memory_rsm):
    produce(env.plog, 20)
    memory_rsm.fail_copies = 1
    with pytest.raises(RemoteStorageError):
        env.copy()
    assert env.segments() == []  # DELETE_SEGMENT_FINISHED segments are forgotten
    assert memory_rsm.segment_ids() == set()  # the partial copy is gone
    assert env.plog.highest_offset_in_remote_storage == -1
    # The rolled segments are copied together: the failure fails each of them.
    rolled = len(env.plog.segments()) - 1
    assert env.rlm.metrics.get(REMOTE_COPY_ERRORS, env.tp) == rolled
    copied = env.copy()
    assert copied == rolled
    finished = env.segments(S.COPY_SEGMENT_FINISHED)
    assert finished[0].start_offset == 0
    assert memory_rsm.segment_ids() == {md.segment_id for md in finished}


def test_copy_left_started_by_a_crash_is_deleted_next_run(env, memory_rsm):
    produce(env.plog, 20)
    seg = env.plog.segments()[0]
    leftover = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(env.tp),
        0,
        env.plog.segments()[1].base_offset - 1,
        max_timestamp_ms=T0,
        broker_id=1,
        event_timestamp_ms=1,
        segment_size_in_bytes=seg.size,
        segment_leader_epochs={0: 0},
    )
    env.rlmm.add_remote_log_segment_metadata(leftover).result(10)
    memory_rsm.objects[(leftover.segment_id, "log")] = b"partial"
    env.copy()
    assert leftover.segment_id not in {md.segment_id for md in env.segments()}
    assert leftover.segment_id not in memory_rsm.segment_ids()
    assert env.plog.highest_offset_in_remote_storage == env.plog.active_segment.base_offset - 1


def test_copy_disabled_and_not_ready(env, memory_rsm):
    produce(env.plog, 20)
    env.plog.update_config(tiered_config(remote_log_copy_disable=True))
    assert env.copy() == 0
    assert memory_rsm.copies == 0
    env.rlmm.on_stop_partitions({env.tp})
    env.plog.update_config(tiered_config())
    assert env.copy() == 0  # metadata not loaded: wait


def tier_everything(env: Env, batches: int = 40) -> list[RemoteLogSegmentMetadata]:
    for i in range(batches // 10):
        produce(env.plog, 10, ts=T0 + i * 10_000)
    env.copy()
    env.plog.delete_old_segments()
    return sorted(env.segments(), key=lambda m: m.start_offset)


def test_expiration_by_time_moves_log_start_and_deletes_objects(env, memory_rsm):
    remote = tier_everything(env)
    cutoff = remote[1].max_timestamp_ms
    env.clock.now = cutoff + 60_000
    env.plog.update_config(tiered_config(retention_ms=60_000, local_retention_ms=1))
    deleted = env.expire()
    gone = [md for md in remote if md.max_timestamp_ms <= cutoff]
    assert deleted == len(gone) >= 2
    assert env.plog.log_start_offset == gone[-1].end_offset + 1
    assert not any(md.segment_id in memory_rsm.segment_ids() for md in gone)
    assert env.rlm.metrics.get(REMOTE_DELETE_REQUESTS) == len(gone)
    with pytest.raises(OffsetOutOfRangeError):
        env.rlm.read_remote(env.tp, env.plog, 0, 100)
    kept = remote[len(gone)]
    assert env.rlm.read_remote(env.tp, env.plog, kept.start_offset, 100)


def test_expiration_by_size_counts_remote_and_local_only_bytes(env, memory_rsm):
    remote = tier_everything(env)
    produce(env.plog, 6)  # local-only bytes, not yet copied
    env.retain_only(remote[-2:])
    env.expire()
    left = env.segments(S.COPY_SEGMENT_FINISHED)
    assert [md.segment_id for md in left] == [md.segment_id for md in remote[-2:]]
    assert env.plog.log_start_offset == remote[-3].end_offset + 1
    assert memory_rsm.segment_ids() == {md.segment_id for md in left}


def test_expiration_by_size_counts_a_just_finished_copy_once(env, memory_rsm, monkeypatch):
    """The copy task records a batch's COPY_SEGMENT_FINISHED events, then moves the log's
    highest offset in remote storage. The expiration task runs on another thread pool: here
    it runs exactly between the two steps of every batch, and must count the new segments
    once, not as remote and as local-only too (that made retention.bytes delete one segment
    too many)."""
    produce(env.plog, 40)
    assert len(env.plog.segments()) >= 5
    # retention.bytes is the log's whole size: no byte is past it, nothing may go.
    total = sum(s.size for s in env.plog.segments())
    env.plog.update_config(tiered_config(retention_bytes=total))
    update = env.rlmm.update_remote_log_segment_metadata_in_order
    # (highest remote offset seen, segments deleted, the batch's last end offset)
    in_window: list[tuple[int, int, int]] = []

    def finish_then_expire(events):
        future = update(events)
        if events[0].state == S.COPY_SEGMENT_FINISHED:
            future.result(10)  # applied: list_remote_log_segments shows them FINISHED
            seen = env.plog.highest_offset_in_remote_storage
            last = env.rlmm._current(env.tp, events[-1].remote_log_segment_id.id)
            in_window.append((seen, env.expire(), last.end_offset))
        return future

    monkeypatch.setattr(env.rlmm, "update_remote_log_segment_metadata_in_order", finish_then_expire)
    copied = env.copy()
    monkeypatch.undo()
    assert in_window and [deleted for _, deleted, _ in in_window] == [0] * len(in_window)
    remote = sorted(env.segments(), key=lambda m: m.start_offset)
    assert copied == len(remote) >= 4
    # The window is real: each expiration saw the batch FINISHED before highest moved
    # over it.
    assert all(seen < end for seen, _, end in in_window)
    assert all(md.state == S.COPY_SEGMENT_FINISHED for md in remote)
    assert env.plog.log_start_offset == 0
    # One byte over: the oldest segment is still not wholly past retention.bytes ...
    env.plog.update_config(tiered_config(retention_bytes=total - 1))
    assert env.expire() == 0
    # ... and once it is, it goes, and only it.
    env.plog.update_config(tiered_config(retention_bytes=total - remote[0].segment_size_in_bytes))
    assert env.expire() == 1
    assert env.plog.log_start_offset == remote[1].start_offset


def test_delete_records_below_remote_segments(env, memory_rsm):
    remote = tier_everything(env)
    target = remote[2].start_offset + 1  # inside the third segment
    env.plog.maybe_increment_log_start_offset(target, "DeleteRecords")
    env.expire()
    left = env.segments(S.COPY_SEGMENT_FINISHED)
    assert [md.segment_id for md in left] == [md.segment_id for md in remote[2:]]
    assert env.plog.log_start_offset == target
    # The straddling segment still serves the offsets at and above the log start.
    data = env.rlm.read_remote(env.tp, env.plog, target, 100)
    assert data


def test_delete_on_disable(env, memory_rsm):
    tier_everything(env, 20)
    env.plog.update_config(
        tiered_config(remote_storage_enable=False, remote_log_delete_on_disable=True)
    )
    env.expire()
    assert memory_rsm.segment_ids() == set()


def test_segments_outside_the_leader_epoch_lineage_are_deleted(env, memory_rsm):
    """KIP-405 scenario 5 by hand: a former leader copied a segment of epoch 1 that the
    current lineage (epoch 0 then epoch 2 from the same offset) does not contain."""
    produce(env.plog, 10, epoch=0)
    diverge = env.plog.log_end_offset
    produce(env.plog, 20, epoch=2)
    env.copy()
    valid = {md.segment_id for md in env.segments()}
    stray = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(env.tp),
        diverge,
        diverge + 9,
        max_timestamp_ms=T0,
        broker_id=9,
        event_timestamp_ms=1,
        segment_size_in_bytes=10,
        segment_leader_epochs={1: diverge},
    )
    env.rlmm.add_remote_log_segment_metadata(stray).result(10)
    env.rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            stray.remote_log_segment_id, 2, None, S.COPY_SEGMENT_FINISHED, 9
        )
    ).result(10)
    memory_rsm.objects[(stray.segment_id, "log")] = b"x" * 10
    start = env.plog.log_start_offset
    env.expire()
    assert {md.segment_id for md in env.segments(S.COPY_SEGMENT_FINISHED)} == valid
    assert stray.segment_id not in memory_rsm.segment_ids()
    assert env.plog.log_start_offset == start  # lineage deletions do not move it


def _md(start, end, epochs):
    sid = RemoteLogSegmentId.generate_new(TopicIdPartition(uuid.UUID(int=1), "t", 0))
    return RemoteLogSegmentMetadata(sid, start, end, 0, 0, 0, 1, epochs)


@pytest.mark.parametrize(
    ("start", "end", "epochs", "expected"),
    [
        (0, 9, {0: 0}, True),
        (10, 29, {0: 10, 1: 20}, True),  # inner boundary matches the lineage
        (10, 29, {0: 10, 1: 25}, False),  # inner boundary differs
        (30, 45, {1: 30}, False),  # epoch 1 ends at 39 in the lineage
        (40, 49, {3: 40}, False),  # epoch 3 is not in the lineage
        (40, 49, {2: 40}, True),
        (95, 105, {2: 95}, False),  # at or past the log end (100)
        (40, 49, {1: 40, 2: 40}, True),  # an empty epoch is filtered out
    ],
)
def test_is_within_lineage(start, end, epochs, expected):
    lineage = {0: 0, 1: 20, 2: 40}
    assert is_within_lineage(_md(start, end, epochs), 100, lineage) is expected


def test_filtered_leader_epochs():
    assert filtered_leader_epochs({0: 0, 1: 10, 2: 10, 3: 30}) == {0: 0, 2: 10, 3: 30}


def test_timestamp_lookups_across_tiers(env):
    remote = tier_everything(env)
    local_start = env.plog.local_log_start_offset
    # Each batch i of round r has timestamps ts = T0 + r*10000 + i .. + 4
    target = remote[1].max_timestamp_ms  # a timestamp inside the remote tier
    found = env.rlm.find_offset_by_timestamp(env.tp, env.plog, target)
    assert found is not None and found.timestamp >= target
    assert found.offset <= remote[1].end_offset
    # The same answer the local log gave before the data went remote: recompute from reads.
    data = env.rlm.read_remote(env.tp, env.plog, found.offset, 1 << 20)
    assert data
    assert env.rlm.find_offset_by_timestamp(env.tp, env.plog, T0).offset == 0
    # Beyond the remote tier: the remote answer is None, the local log answers.
    late = T0 + 10 * 10_000
    produce(env.plog, 3, ts=late)
    assert env.rlm.find_offset_by_timestamp(env.tp, env.plog, late) is None
    local = env.plog.fetch_offset_by_timestamp(late)
    assert local is not None and local.offset >= local_start
    # Through the async seam.
    seam = asyncio.run(env.rlm.offset_for_timestamp(env.tp.topic_id, "t", 0, env.plog, T0))
    assert seam is not None and seam.offset == 0


def test_earliest_pending_upload(env):
    produce(env.plog, 20)
    first = env.rlm.earliest_pending_upload(env.tp, env.plog)
    assert first is not None and first.offset == 0
    env.copy()
    pending = asyncio.run(env.rlm.offset_for_timestamp(env.tp.topic_id, "t", 0, env.plog, -6))
    assert pending is not None
    assert pending.offset == env.plog.highest_offset_in_remote_storage + 1


def test_scheduled_tasks_copy_and_retry_after_failure(env, memory_rsm):
    env.rlm.shutdown()
    env.rlm = env.new_rlm(
        **{
            "remote.log.manager.task.interval.ms": 50,
            "remote.log.manager.task.retry.backoff.ms": 10,
        }
    )
    produce(env.plog, 20)
    rolled = len(env.plog.segments()) - 1
    memory_rsm.fail_copies = 2
    env.rlm.start()
    deadline = time.monotonic() + 10
    target = env.plog.active_segment.base_offset - 1
    while env.plog.highest_offset_in_remote_storage < target and time.monotonic() < deadline:
        time.sleep(0.02)
    assert env.plog.highest_offset_in_remote_storage == target
    # Two failed runs, each of the rolled segments copied together.
    assert env.rlm.metrics.get(REMOTE_COPY_ERRORS) == 2 * rolled


def test_reader_rejects_beyond_pending_bound(env):
    tier_everything(env, 20)
    env.rlm.shutdown()
    env.rlm = env.new_rlm(
        **{"remote.log.reader.threads": 1, "remote.log.reader.max.pending.tasks": 1}
    )
    gate = threading.Event()
    blocker = env.rlm.reader._submit(gate.wait)
    with pytest.raises(RemoteStorageError):
        env.rlm.reader.submit_fetch(env.tp, env.plog, 0, 100)
    gate.set()
    blocker.result(5)
    assert env.rlm.reader.submit_fetch(env.tp, env.plog, 0, 100).result(5)


def test_a_cancelled_read_that_has_not_started_never_runs(env):
    # An expired DelayedRemoteFetch cancels its reads: a queued one must not cost a round
    # trip to the remote tier, and must give its place in the bounded queue back at once.
    tier_everything(env, 20)
    env.rlm.shutdown()
    env.rlm = env.new_rlm(
        **{"remote.log.reader.threads": 1, "remote.log.reader.max.pending.tasks": 2}
    )
    calls = []
    original = env.rlm.reader._read  # what every read from the remote tier goes through

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    env.rlm.reader._read = counted  # type: ignore[method-assign]
    gate = threading.Event()
    blocker = env.rlm.reader._submit(gate.wait)  # holds the only reader thread

    def start_read():
        return env.rlm.start_read(env.tp.topic_id, "t", 0, env.plog, 0, 100, read_committed=False)

    async def queue_then_cancel() -> None:
        future = start_read()
        with pytest.raises(KafkaStorageError):  # the queue is full: the blocker and the read
            start_read()
        future.cancel()
        # asyncio hands the cancellation to the pool's future in a callback it schedules
        # with call_soon: one turn of the loop runs it.
        await asyncio.sleep(0)

    try:
        asyncio.run(queue_then_cancel())
        # The cancelled read left the queue while the blocker still runs: a new read fits.
        after = env.rlm.reader.submit_fetch(env.tp, env.plog, 0, 100)
    finally:
        gate.set()  # whatever failed, free the reader thread so that the pool can stop
    blocker.result(5)
    assert after.result(5).records
    assert len(calls) == 1, "the cancelled read ran"


# -- DELETE_SEGMENT_STARTED read from the metadata: resumed only when a rule of this broker
# -- deletes the segment (a forged event replayed at start-up destroys nothing)


def start_deleting(env: Env, md: RemoteLogSegmentMetadata) -> None:
    """Put ``md`` in DELETE_SEGMENT_STARTED, as an event replayed at start-up would."""
    event = RemoteLogSegmentMetadataUpdate(
        md.remote_log_segment_id, 5, None, S.DELETE_SEGMENT_STARTED, 1
    )
    env.rlmm.update_remote_log_segment_metadata(event).result(10)


def test_a_deletion_no_rule_of_this_broker_decided_is_not_resumed(env, memory_rsm, caplog):
    caplog.set_level(logging.WARNING, "tiered.rlm_tasks")
    remote = tier_everything(env)
    victim = remote[1]
    start_deleting(env, victim)
    for _ in range(2):
        assert env.expire() == 0
    assert victim.segment_id in memory_rsm.segment_ids()
    assert memory_rsm.segment_ids() == {md.segment_id for md in remote}
    warnings = [r.getMessage() for r in caplog.records if "remote_delete_refused" in r.getMessage()]
    assert len(warnings) == 1 and str(victim.segment_id) in warnings[0]
    # Once retention does expire it, the deletion goes ahead with the older segment.
    env.clock.now = victim.max_timestamp_ms + 60_000
    env.plog.update_config(tiered_config(retention_ms=60_000, local_retention_ms=1))
    assert env.expire() >= 2
    assert victim.segment_id not in memory_rsm.segment_ids()
    assert env.plog.log_start_offset > victim.end_offset


def test_a_deletion_whose_offsets_are_in_finished_segments_is_resumed(env, memory_rsm):
    """A failed copy left DELETE_SEGMENT_STARTED, then copied again: nothing is lost."""
    remote = tier_everything(env)
    twin = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(env.tp),
        remote[0].start_offset,
        remote[1].end_offset,
        max_timestamp_ms=T0,
        broker_id=1,
        event_timestamp_ms=1,
        segment_size_in_bytes=10,
        segment_leader_epochs={0: remote[0].start_offset},
    )
    env.rlmm.add_remote_log_segment_metadata(twin).result(10)
    memory_rsm.objects[(twin.segment_id, "log")] = b"partial"
    start_deleting(env, twin)
    assert env.expire() == 1
    assert memory_rsm.segment_ids() == {md.segment_id for md in remote}
    assert [md.segment_id for md in env.segments()] == [md.segment_id for md in remote]


# -- leadership ----------------------------------------------------------------------------


def kinds(env: Env) -> list[str]:
    return [task.kind for task in env.rlm.tasks(env.tp)]


def test_a_follower_tracks_the_leaders_copies_and_copies_nothing(env, memory_rsm):
    produce(env.plog, 20)
    env.copy()  # as the leader
    copied_to = env.plog.highest_offset_in_remote_storage
    produce(env.plog, 10)  # more rolled segments, which a follower must not copy
    env.rlm.on_leadership_change({}, {env.tp: env.plog})
    assert kinds(env) == ["follower"]
    env.plog.highest_offset_in_remote_storage = -1  # a replica that has not caught up yet
    copies = memory_rsm.copies
    env.task(FollowerTask).run_once()
    assert env.plog.highest_offset_in_remote_storage == copied_to
    assert memory_rsm.copies == copies
    env.rlm.on_leadership_change({env.tp: env.plog}, {})
    assert kinds(env) == ["copy", "expiration"]
    assert env.copy() > 0


def test_leading_again_with_the_same_log_keeps_the_tasks(env):
    before = env.rlm.tasks(env.tp)
    env.rlm.on_leadership([(env.tp, env.plog)])
    assert env.rlm.tasks(env.tp) == before
    assert not any(task.cancelled for task in before)


def test_stopping_a_partition_cancels_its_tasks_and_releases_its_metadata(env, memory_rsm):
    produce(env.plog, 20)
    tasks = env.rlm.tasks(env.tp)
    env.rlm.on_stop_partitions({env.tp}, delete=False)
    assert env.rlm.tasks(env.tp) == ()
    assert all(task.cancelled for task in tasks)
    for task in tasks:  # a run the scheduler had already planned does nothing
        task.run()
    assert memory_rsm.copies == 0
    # Leader or follower, the metadata is released: a deletion is not this broker's job
    # unless it leads the metadata partition (rlmm.remover).
    assert not env.rlmm.is_ready(env.tp)
    env.rlm.on_leadership_change({}, {env.tp: env.plog})
    assert env.rlmm.wait_ready(env.tp, 10)
    env.rlm.on_stop_partitions({env.tp}, delete=False)
    assert not env.rlmm.is_ready(env.tp)


def test_a_topic_deletion_stopping_its_leader_twice_marks_nothing_and_deletes_nothing(
    env, memory_rsm
):
    """Kafka's TopicDeletionManager stops each replica without deletion, then with it; the
    controller's UpdateMetadata has removed the topic by then, so the remote tier finds the
    partition's topic id in its own record until the stop with deletion. Unlike Kafka 3.9,
    the leader deletes no remote data here: the controller marks the partition and the
    remover of the metadata partition's leader deletes it (KIP-405's MARKED event)."""
    produce(env.plog, 20)
    env.copy()
    copied = memory_rsm.segment_ids()
    assert copied
    assert env.rlm.hosted_partition(env.tp.topic, env.tp.partition) == env.tp
    env.rlm.on_stop_partitions({env.tp}, delete=False)
    assert env.rlm.hosted_partition(env.tp.topic, env.tp.partition) == env.tp
    env.rlm.on_stop_partitions({env.tp}, delete=True)
    assert env.rlm.hosted_partition(env.tp.topic, env.tp.partition) is None
    assert env.rlm.tasks(env.tp) == ()
    assert env.rlmm.store.partition_delete_state(env.tp) is None
    assert not env.rlmm.is_ready(env.tp)
    assert memory_rsm.segment_ids() == copied


def test_shutdown_cancels_every_task(env):
    tasks = env.rlm.tasks(env.tp)
    env.rlm.shutdown()
    assert tasks and all(task.cancelled for task in tasks)


def test_a_leader_deposed_during_a_copy_leaves_it_started_for_the_next_leader(env, memory_rsm):
    """Only the leader finishes copies: a copy task cancelled while the RSM copies (the
    broker became a follower) leaves the segment COPY_SEGMENT_STARTED; the next leader's
    copy task deletes that dangling copy and copies the segment itself."""
    produce(env.plog, 20)
    task = env.task(CopyTask)
    copy = memory_rsm.copy_log_segment_data

    def copy_then_lose_leadership(md, data):
        custom = copy(md, data)
        task.cancel()  # LeaderAndIsr made this broker a follower meanwhile
        return custom

    memory_rsm.copy_log_segment_data = copy_then_lose_leadership
    assert task.run_once() == 0
    dangling = env.segments(S.COPY_SEGMENT_STARTED)
    # The rolled segments were copied together: all of them are left started.
    assert len(dangling) == len(env.plog.segments()) - 1
    assert env.segments(S.COPY_SEGMENT_FINISHED) == []
    assert env.plog.highest_offset_in_remote_storage == -1  # nothing may leave the disk
    memory_rsm.copy_log_segment_data = copy
    next_leader = CopyTask(task.ctx, env.tp, env.plog)
    assert next_leader.run_once() == len(dangling)
    remaining = {md.segment_id for md in env.segments()} | memory_rsm.segment_ids()
    assert not remaining & {md.segment_id for md in dangling}
    assert env.segments(S.COPY_SEGMENT_STARTED) == []


def test_a_deposed_leaders_copy_past_its_epochs_end_is_kept_until_the_log_start_passes_it(
    env, memory_rsm
):
    """KIP-405 scenario 4/5: a copy whose epochs are all in the lineage but whose range
    disagrees with it (the deposed leader had records past its epoch's end) is kept: a
    later unclean election may need it. It goes once the log start offset passes it."""
    produce(env.plog, 10, epoch=0)
    diverge = env.plog.log_end_offset
    produce(env.plog, 20, epoch=2)
    env.copy()
    stray = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(env.tp),
        0,
        diverge + 4,  # epoch 0 past its end in the lineage
        max_timestamp_ms=T0,
        broker_id=9,
        event_timestamp_ms=1,
        segment_size_in_bytes=10,
        segment_leader_epochs={0: 0},
    )
    env.rlmm.add_remote_log_segment_metadata(stray).result(10)
    env.rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            stray.remote_log_segment_id, 2, None, S.COPY_SEGMENT_FINISHED, 9
        )
    ).result(10)
    memory_rsm.objects[(stray.segment_id, "log")] = b"x" * 10
    env.expire()
    assert stray.segment_id in {md.segment_id for md in env.segments(S.COPY_SEGMENT_FINISHED)}
    assert stray.segment_id in memory_rsm.segment_ids()
    env.plog.maybe_increment_log_start_offset(diverge + 5, "test")
    env.expire()
    assert stray.segment_id not in {md.segment_id for md in env.segments()}
    assert stray.segment_id not in memory_rsm.segment_ids()


def test_a_deposed_leaders_late_finish_of_a_dangling_copy_loses_no_offset(env, memory_rsm):
    """The race seen with three brokers: the new leader lists the deposed leader's copy as
    COPY_SEGMENT_STARTED (dangling), then the deposed leader's COPY_SEGMENT_FINISHED (it
    passed its last leadership check just before losing it) is applied, then the new
    leader's DELETE_SEGMENT_STARTED (a valid transition from FINISHED too). The segment's
    offsets must not be lost: the new leader copies them again from its local log, and its
    ``highest_offset_in_remote_storage`` (which lets local retention delete the local
    copy) never covers an offset no finished segment serves."""
    produce(env.plog, 20)
    deposed = env.task(CopyTask)
    copy = memory_rsm.copy_log_segment_data
    in_flight = []

    def copy_then_lose_leadership(md, data):
        custom = copy(md, data)
        in_flight.append((md, custom))
        deposed.cancel()
        return custom

    memory_rsm.copy_log_segment_data = copy_then_lose_leadership
    assert deposed.run_once() == 0
    memory_rsm.copy_log_segment_data = copy
    dangling, custom = in_flight[0]  # the others of its batch are left dangling too
    update = env.rlmm.update_remote_log_segment_metadata
    late = []

    def finish_late_then_update(u):
        ours = u.remote_log_segment_id.id == dangling.segment_id
        if ours and u.state == S.DELETE_SEGMENT_STARTED and not late:
            # The deposed leader's finish lands first in the metadata partition.
            late.append(u)
            update(
                RemoteLogSegmentMetadataUpdate(
                    dangling.remote_log_segment_id, 1, custom, S.COPY_SEGMENT_FINISHED, 1
                )
            ).result(10)
        return update(u)

    env.rlmm.update_remote_log_segment_metadata = finish_late_then_update
    next_leader = CopyTask(deposed.ctx, env.tp, env.plog)
    next_leader.run_once()
    assert late, "the dangling copy was not deleted: the race did not happen"
    assert dangling.segment_id not in {md.segment_id for md in env.segments()}
    highest = env.plog.highest_offset_in_remote_storage
    assert highest >= dangling.end_offset  # the offsets were copied again
    for offset in range(env.plog.log_start_offset, highest + 1):
        epoch = env.plog.leader_epoch_cache.epoch_for_offset(offset)
        served = env.rlmm.remote_log_segment_metadata(env.tp, epoch, offset)
        assert served is not None and served.state == S.COPY_SEGMENT_FINISHED, offset
