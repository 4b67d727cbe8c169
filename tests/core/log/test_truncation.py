"""Truncation keeps everything kept alongside the segments consistent with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.log.checkpoints import OffsetCheckpointFile
from core.log.cleaner import CLEANER_OFFSET_CHECKPOINT
from core.log.config import LogConfig
from core.log.files import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from core.log.log_manager import LogManager, LogManagerConfig
from core.log.partition_log import PartitionLog
from core.log.producer_state import list_snapshot_offsets
from core.log.txn_index import AbortedTxn
from core.records.record import ControlRecordType

from .replicas import append_marker, log_batches

TS = 1_700_000_000_000


def open_log(path: Path, **config) -> PartitionLog:
    return PartitionLog(path / "t-0", "t", 0, LogConfig(**config))


def entries(plog: PartitionLog) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()]


def test_truncating_at_the_log_end_drops_an_epoch_that_wrote_nothing(tmp_path, batch):
    """A replica that became leader (epoch 2 assigned at its log end) and lost leadership
    before appending must not keep epoch 2: the new leader would see a follower claiming an
    epoch it never had. Kafka truncates the cache even when no data goes."""
    plog = open_log(tmp_path)
    plog.append_as_leader(batch([b"a", b"b"]), 1)
    plog.leader_epoch_cache.assign(2, plog.log_end_offset)  # became leader
    assert not plog.truncate_to(plog.log_end_offset)
    assert entries(plog) == [(1, 0)]
    assert plog.latest_epoch == 1
    plog.append_as_leader(batch([b"c"]), 3)
    assert entries(plog) == [(1, 0), (3, 2)]


def test_a_segment_made_active_again_takes_appends_without_rolling(tmp_path, batch):
    """The rolled segment's indexes were trimmed to their entries; truncating back into it
    must give them room again, or every following append rolls a new segment."""
    plog = open_log(tmp_path, index_interval_bytes=1)
    for _ in range(4):
        plog.append_as_leader(batch([b"x" * 30]), 0)
    plog.roll()
    plog.append_as_leader(batch([b"y"]), 0)
    assert plog.truncate_to(4)
    assert [s.base_offset for s in plog.segments()] == [0]
    for _ in range(3):
        plog.append_as_leader(batch([b"z"]), 0)
    assert [s.base_offset for s in plog.segments()] == [0]
    assert plog.log_end_offset == 7
    assert [o for o, _ in log_batches(plog)] == list(range(7))


def test_completed_transactions_below_the_high_watermark_do_not_hold_the_lso(tmp_path, batch):
    plog = open_log(tmp_path)
    txn = batch([b"t"], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    plog.append_as_leader(txn, 0)  # 0
    append_marker(plog, ControlRecordType.ABORT, 5, 0, 0)  # 1
    plog.append_as_leader(batch([b"a"]), 0)  # 2
    plog.append_as_leader(batch([b"b"]), 0)  # 3
    plog.update_high_watermark(4)
    assert plog.producer_state.first_unstable_offset() is None
    assert plog.truncate_to(3)
    assert plog.high_watermark == 3
    assert plog.producer_state.first_unstable_offset() is None
    assert plog.collect_aborted_txns(0, 3) == [AbortedTxn(5, 0, 1, 2)]


def test_a_restart_with_a_high_watermark_frees_the_lso(tmp_path, batch):
    plog = open_log(tmp_path)
    txn = batch([b"t"], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    plog.append_as_leader(txn, 0)
    append_marker(plog, ControlRecordType.COMMIT, 5, 0, 0)
    for segment in plog.segments():  # a crash: no snapshot at the end, so replay from 0
        segment.log.close()
    reopened = PartitionLog(
        plog.dir, "t", 0, plog.config, high_watermark=2, had_clean_shutdown=False
    )
    assert reopened.producer_state.first_unstable_offset() is None


def test_a_target_inside_a_batch_removes_the_whole_batch(tmp_path, batch):
    plog = open_log(tmp_path)
    plog.append_as_leader(batch([b"a", b"b"]), 0)  # 0-1
    plog.append_as_leader(batch([b"c", b"d", b"e"]), 1)  # 2-4
    plog.update_high_watermark(5)
    assert plog.truncate_to(3)
    assert plog.log_end_offset == 2  # the batch holding 3 went whole
    assert plog.high_watermark == 2
    assert entries(plog) == [(0, 0)]
    assert [o for o, _ in log_batches(plog)] == [0]


def test_producer_state_goes_back_with_the_log_and_later_snapshots_go(tmp_path, batch):
    plog = open_log(tmp_path)
    for seq in range(0, 6, 2):  # offsets 0-1, 2-3, 4-5
        plog.append_as_leader(
            batch([b"p", b"q"], producer_id=9, producer_epoch=0, base_sequence=seq), 0
        )
        plog.roll()  # a snapshot at 2, 4, 6
    assert list_snapshot_offsets(plog.dir) == [2, 4, 6]
    assert plog.truncate_to(4)
    assert list_snapshot_offsets(plog.dir) == [2, 4]
    assert plog.producer_state.last_entry(9).last_seq == 3
    assert plog.producer_state.map_end_offset == 4
    # The producer's retry of the removed batch is now new, and is appended.
    info = plog.append_as_leader(
        batch([b"p", b"q"], producer_id=9, producer_epoch=0, base_sequence=4), 0
    )
    assert not info.duplicate and info.first_offset == 4
    assert plog.truncate_to(1)  # inside the first batch
    assert plog.log_end_offset == 0
    assert plog.producer_state.last_entry(9) is None
    assert list_snapshot_offsets(plog.dir) == []


def test_aborted_transactions_above_the_target_leave_the_index(tmp_path, batch):
    plog = open_log(tmp_path)
    for pid in (1, 2):
        txn = batch([b"t"], producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
        plog.append_as_leader(txn, 0)
        append_marker(plog, ControlRecordType.ABORT, pid, 0, 0)
    assert [t.producer_id for t in plog.collect_aborted_txns(0, 4)] == [1, 2]
    assert plog.truncate_to(3)
    assert plog.collect_aborted_txns(0, 4) == [AbortedTxn(1, 0, 1, 2)]
    assert plog.producer_state.last_entry(2).current_txn_first_offset == 2


def test_truncating_the_first_segment_to_its_base_empties_the_log_there(tmp_path, batch):
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig(), log_start_offset=0)
    plog.truncate_fully_and_start_at(10)
    plog.append_as_leader(batch([b"a", b"b"]), 0)
    plog.update_high_watermark(12)
    assert plog.truncate_to(10)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (10, 10, 10)
    assert [s.base_offset for s in plog.segments()] == [10]
    assert entries(plog) == []
    plog.append_as_leader(batch([b"c"]), 4)
    assert entries(plog) == [(4, 10)]


def test_a_target_below_the_first_segment_restarts_the_log(tmp_path, batch):
    plog = PartitionLog(tmp_path / "t-0", "t", 0, LogConfig())
    plog.truncate_fully_and_start_at(10)
    plog.append_as_leader(batch([b"a"], producer_id=3, producer_epoch=0, base_sequence=0), 2)
    assert plog.truncate_to(4)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (4, 4, 4)
    assert plog.recovery_point == 4
    assert [s.base_offset for s in plog.segments()] == [4]
    assert entries(plog) == []
    assert plog.producer_state.last_entry(3) is None


def test_negative_offsets_are_refused(tmp_path):
    plog = open_log(tmp_path)
    with pytest.raises(ValueError):
        plog.truncate_to(-1)
    with pytest.raises(ValueError):
        plog.truncate_fully_and_start_at(-1)


def test_checkpoints_after_a_truncation_never_pass_the_log_end(tmp_path, batch):
    """Truncating through the LogManager checkpoints recovery points and high watermarks at
    once (a crash right after must not find the old, higher offsets), and lowers the
    cleaner's checkpoint; checkpoints written later read the offsets under the log's lock."""
    logs = tmp_path / "logs"
    manager = LogManager(LogManagerConfig(log_dirs=(logs,)))
    try:
        plog = manager.get_or_create_log("t", 0, LogConfig(cleanup_policy=("compact",)))
        for i in range(5):
            plog.append_as_leader(batch([b"a", b"b"], keys=[b"k%d" % i, b"j"]), 0)
        plog.roll()
        plog.update_high_watermark(10)
        plog.flush()
        manager.checkpoint_recovery_points()
        manager.checkpoint_high_watermarks()
        manager.cleaner.maybe_truncate_checkpoint("t", 0, logs, 1 << 40)  # no-op: none yet
        OffsetCheckpointFile(logs / CLEANER_OFFSET_CHECKPOINT).write({("t", 0): 10})
        assert OffsetCheckpointFile(logs / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 10}

        assert manager.truncate_to("t", 0, 6)
        assert OffsetCheckpointFile(logs / REPLICATION_OFFSET_CHECKPOINT).read() == {("t", 0): 6}
        assert OffsetCheckpointFile(logs / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 6}
        assert OffsetCheckpointFile(logs / CLEANER_OFFSET_CHECKPOINT).read() == {("t", 0): 0}
        assert not manager.truncate_to("t", 0, 6)

        manager.truncate_fully_and_start_at("t", 0, 3)
        for name in (REPLICATION_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT):
            assert OffsetCheckpointFile(logs / name).read() == {("t", 0): 3}
        assert OffsetCheckpointFile(logs / LOG_START_OFFSET_CHECKPOINT).read() == {("t", 0): 3}
        with pytest.raises(KeyError):
            manager.truncate_to("other", 0, 0)
    finally:
        manager.shutdown()


def test_a_late_flush_does_not_move_the_recovery_point_past_a_truncation(tmp_path, batch):
    """A roll schedules a flush up to the new segment; if a truncation runs first, that
    flush must not set the recovery point to the old offset, above the new log end."""
    plog = open_log(tmp_path)
    for _ in range(3):
        plog.append_as_leader(batch([b"a"]), 0)
    plog.roll()  # with a scheduler this queues flush(3)
    plog.truncate_to(1)
    plog.flush(3)  # the queued flush, late
    assert plog.recovery_point <= plog.log_end_offset == 1


def test_a_truncation_below_the_log_start_checkpoints_the_lower_start(tmp_path, batch):
    logs = tmp_path / "logs"
    manager = LogManager(LogManagerConfig(log_dirs=(logs,)))
    try:
        plog = manager.get_or_create_log("t", 0)
        for _ in range(5):
            plog.append_as_leader(batch([b"a", b"b"]), 0)
        plog.update_high_watermark(10)
        plog.maybe_increment_log_start_offset(6, "DeleteRecords")
        manager.checkpoint_log_start_offsets()
        assert manager.truncate_to("t", 0, 4)
        assert plog.log_start_offset == 4
        assert OffsetCheckpointFile(logs / LOG_START_OFFSET_CHECKPOINT).read() == {("t", 0): 4}
    finally:
        manager.shutdown()
