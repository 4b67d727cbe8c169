"""PartitionLog: appends, reads, rolls, recovery, truncation, retention, idempotence."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from core.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedVersionError,
)
from core.log.config import LogConfig
from core.log.partition_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    PartitionLog,
)
from core.records.batch import RecordBatchHeader, iter_batches
from core.records.record import decode_records
from core.scheduler import Scheduler


def open_log(path: Path, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog(path, "t", 0, config or LogConfig(), **kw)


def read_all(plog: PartitionLog, start: int = 0) -> list[tuple[int, bytes | None]]:
    """Every record from ``start`` to the log end, through the read path."""
    out: list[tuple[int, bytes | None]] = []
    offset = start
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20)
        assert info.records is not None
        data = info.records.read_bytes()
        for header in iter_batches(data):
            for record in decode_records(header):
                if record.offset >= offset:
                    out.append((record.offset, record.value))
            offset = header.next_offset
    return out


def test_append_assigns_offsets_and_epoch_and_reads_back(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    info = plog.append_as_leader(batch([b"a", b"b", b"c"]), leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 2, 3)
    info = plog.append_as_leader(batch([b"d"]), leader_epoch=7)
    assert (info.first_offset, info.last_offset) == (3, 3)
    assert plog.log_end_offset == 4
    data = plog.read(0, 1 << 20).records.read_bytes()
    headers = list(iter_batches(data))
    assert [h.base_offset for h in headers] == [0, 3]
    assert all(h.partition_leader_epoch == 7 for h in headers)
    assert read_all(plog) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert plog.leader_epoch_cache.latest_epoch == 7


def test_read_from_the_middle_of_a_batch_starts_at_that_batch(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    plog.append_as_leader(batch([b"a", b"b", b"c"]), 0)
    plog.append_as_leader(batch([b"d"]), 0)
    data = plog.read(1, 1 << 20).records.read_bytes()
    assert RecordBatchHeader(data).base_offset == 0
    assert read_all(plog, 1) == [(1, b"b"), (2, b"c"), (3, b"d")]


def test_read_respects_max_offset_and_min_one_message(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    for i in range(5):
        plog.append_as_leader(batch([bytes([65 + i]) * 100]), 0)
    info = plog.read(0, 1 << 20, max_offset=2)
    headers = list(iter_batches(info.records.read_bytes()))
    assert [h.base_offset for h in headers] == [0, 1]
    assert plog.read(2, 1 << 20, max_offset=2).records is None
    one = plog.read(0, 10, min_one_message=True)
    assert one.records.size == RecordBatchHeader(one.records.read_bytes()).size_in_bytes
    assert plog.read(0, 10, min_one_message=False).records.size == 10  # partial, as Kafka


def test_read_out_of_range_raises(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    plog.append_as_leader(batch([b"a"]), 0)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(2, 100)
    assert plog.read(1, 100).records is None  # at the log end: empty, not an error


def test_segments_roll_on_size_and_reads_cross_them(tmp_path, batch):
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=128)
    plog = open_log(tmp_path / "t-0", cfg)
    expected = []
    for i in range(60):
        value = f"value-{i:04d}".encode() * 5
        plog.append_as_leader(batch([value]), 0)
        expected.append((i, value))
    segments = plog.segments()
    assert len(segments) > 5
    assert all(s.size <= 1024 for s in segments)
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    assert names == [f"{s.base_offset:020d}.log" for s in segments]
    assert read_all(plog) == expected
    # Rolled segments got trimmed indexes with entries every ~128 bytes.
    first = segments[0]
    assert first.offset_index.path.stat().st_size == first.offset_index.entries * 8
    assert first.offset_index.entries >= 2


def test_roll_on_segment_ms_uses_record_timestamps(tmp_path, batch):
    cfg = LogConfig(segment_ms=1000)
    plog = open_log(tmp_path / "t-0", cfg)
    plog.append_as_leader(batch([b"a"], timestamp=10_000), 0)
    plog.append_as_leader(batch([b"b"], timestamp=10_500), 0)
    assert len(plog.segments()) == 1
    plog.append_as_leader(batch([b"c"], timestamp=11_001), 0)
    assert [s.base_offset for s in plog.segments()] == [0, 2]


def test_clean_reopen_keeps_everything(tmp_path, batch):
    cfg = LogConfig(segment_bytes=600)
    plog = open_log(tmp_path / "t-0", cfg)
    for i in range(30):
        plog.append_as_leader(batch([f"v{i}".encode() * 10]), 3)
    before = read_all(plog)
    plog.close()
    again = open_log(
        tmp_path / "t-0", cfg, had_clean_shutdown=True, recovery_point=plog.recovery_point
    )
    assert again.log_end_offset == 30
    assert read_all(again) == before
    assert again.leader_epoch_cache.latest_epoch == 3


def test_unclean_reopen_truncates_a_torn_tail(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    for i in range(10):
        plog.append_as_leader(batch([f"v{i}".encode()]), 0)
    before = read_all(plog)
    log_file = plog.active_segment.log.path
    plog.close()
    size = log_file.stat().st_size
    with open(log_file, "ab") as f:  # half of an eleventh batch
        f.write(bytes(batch([b"torn"]))[:30])
    assert log_file.stat().st_size == size + 30
    again = open_log(tmp_path / "t-0", had_clean_shutdown=False, recovery_point=0)
    assert again.log_end_offset == 10
    assert log_file.stat().st_size == size
    assert read_all(again) == before
    again.append_as_leader(batch([b"after"]), 0)
    assert read_all(again)[-1] == (10, b"after")


def test_unclean_reopen_truncates_at_a_corrupt_batch_and_drops_later_segments(tmp_path, batch):
    cfg = LogConfig(segment_bytes=500)
    plog = open_log(tmp_path / "t-0", cfg)
    for i in range(40):
        plog.append_as_leader(batch([f"value-{i}".encode() * 4]), 0)
    segments = plog.segments()
    victim = segments[1]
    good = [r for r in read_all(plog) if r[0] < victim.base_offset + 2]
    positions = [p for p, _ in victim.log.batch_headers()]
    plog.close()
    with open(victim.log.path, "r+b") as f:  # flip a byte inside the third batch's records
        f.seek(positions[2] + 70)
        byte = f.read(1)
        f.seek(positions[2] + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = open_log(tmp_path / "t-0", cfg, had_clean_shutdown=False, recovery_point=0)
    assert again.log_end_offset == victim.base_offset + 2
    assert [s.base_offset for s in again.segments()] == [s.base_offset for s in segments[:2]]
    assert read_all(again) == good


def test_unclean_reopen_keeps_the_leader_epoch_lineage(tmp_path, batch):
    # Recovery rescans segments that hold batches of epochs the checkpoint already knows.
    # Re-assigning them would move each epoch's start to the rescanned segment's first batch
    # of that epoch, which is the lineage remote segments are checked against.
    cfg = LogConfig(segment_bytes=400)
    plog = open_log(tmp_path / "t-0", cfg)
    for i in range(60):
        plog.append_as_leader(batch([f"value-{i}".encode() * 3]), i // 20)
    lineage = plog.leader_epoch_cache.entries()
    assert [(e.epoch, e.start_offset) for e in lineage] == [(0, 0), (1, 20), (2, 40)]
    middle = next(s for s in plog.segments() if s.base_offset > 20 and s.base_offset < 40)
    plog.close()
    again = open_log(
        tmp_path / "t-0", cfg, had_clean_shutdown=False, recovery_point=middle.base_offset
    )
    assert again.log_end_offset == 60
    assert again.leader_epoch_cache.entries() == lineage


def test_missing_index_is_rebuilt(tmp_path, batch):
    cfg = LogConfig(segment_bytes=400, index_interval_bytes=50)
    plog = open_log(tmp_path / "t-0", cfg)
    for i in range(20):
        plog.append_as_leader(batch([f"value-{i}".encode() * 3]), 0)
    first = plog.segments()[0]
    entries = [first.offset_index.entry(i) for i in range(first.offset_index.entries)]
    plog.close()
    first.offset_index.path.unlink()
    again = open_log(tmp_path / "t-0", cfg, had_clean_shutdown=True)
    rebuilt = again.segments()[0].offset_index
    assert [rebuilt.entry(i) for i in range(rebuilt.entries)] == entries
    assert len(read_all(again)) == 20


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda b: b[:-5], CorruptRecordError),  # truncated batch
        (lambda b: b[:17] + bytes([b[17] ^ 1]) + b[18:], CorruptRecordError),  # wrong CRC
        (lambda b: b[:16] + b"\x01" + b[17:], UnsupportedVersionError),  # wrong magic
        (lambda b: b[:8] + struct.pack(">i", 2_000_000_000) + b[12:], CorruptRecordError),
        (lambda b: b[:8] + struct.pack(">i", -5) + b[12:], CorruptRecordError),
        (lambda b: b[:20], CorruptRecordError),  # shorter than a header
    ],
    ids=["truncated", "crc", "magic", "absurd-length", "negative-length", "short"],
)
def test_bad_batches_are_rejected_and_nothing_is_appended(tmp_path, batch, mutate, error):
    plog = open_log(tmp_path / "t-0")
    plog.append_as_leader(batch([b"ok"]), 0)
    size_before = plog.active_segment.log.path.stat().st_size
    good = bytes(batch([b"x", b"y"]))
    # A good batch first: a bad one anywhere in the request rejects the whole request.
    with pytest.raises(error):
        plog.append_as_leader(bytearray(good + mutate(good)), 0)
    assert plog.log_end_offset == 1
    assert plog.active_segment.log.path.stat().st_size == size_before
    assert read_all(plog) == [(0, b"ok")]


def test_inconsistent_count_and_control_batches_are_invalid(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    b = batch([b"a", b"b"])
    bad_count = bytearray(b)
    struct.pack_into(">i", bad_count, 57, 3)  # record count 3 with last offset delta 1
    header = RecordBatchHeader(bad_count)
    struct.pack_into(">I", bad_count, 17, header.compute_crc())
    with pytest.raises(InvalidRecordError, match="inconsistent with record count 3"):
        plog.append_as_leader(bad_count, 0)
    control = bytearray(b)
    struct.pack_into(">h", control, 21, 0x20)
    struct.pack_into(">I", control, 17, RecordBatchHeader(control).compute_crc())
    with pytest.raises(InvalidRecordError, match="control"):
        plog.append_as_leader(control, 0)
    assert plog.log_end_offset == 0


def test_batch_above_max_message_bytes_is_too_large(tmp_path, batch):
    plog = open_log(tmp_path / "t-0", LogConfig(max_message_bytes=200))
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes=200"):
        plog.append_as_leader(batch([b"x" * 300]), 0)
    assert plog.log_end_offset == 0


def test_append_larger_than_segment_bytes_is_refused(tmp_path, batch):
    # Kafka's rule: the records of one append (all its batches) must fit in a segment.
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=1000))
    plog.append_as_leader(batch([b"a"]), 0)
    with pytest.raises(RecordBatchTooLargeError, match=r"segment size of 1000"):
        plog.append_as_leader(batch([b"x" * 600]) + batch([b"y" * 600]), 0)
    assert plog.log_end_offset == 1
    assert len(plog.segments()) == 1
    plog.append_as_leader(batch([b"x" * 600]), 0)
    assert [v for _, v in read_all(plog)] == [b"a", b"x" * 600]


def test_idempotent_retry_returns_original_offsets(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    first = batch([b"a", b"b"], producer_id=1000, producer_epoch=0, base_sequence=0)
    info = plog.append_as_leader(bytearray(first), 0)
    plog.append_as_leader(batch([b"c"], producer_id=1000, producer_epoch=0, base_sequence=2), 0)
    retry = plog.append_as_leader(
        batch([b"a", b"b"], producer_id=1000, producer_epoch=0, base_sequence=0), 0
    )
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (info.first_offset, info.last_offset)
    assert plog.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        plog.append_as_leader(
            batch([b"gap"], producer_id=1000, producer_epoch=0, base_sequence=7), 0
        )
    assert plog.log_end_offset == 3


def test_producer_state_survives_restart(tmp_path, batch):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300))
    for seq in range(10):
        plog.append_as_leader(
            batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=seq), 0
        )
    plog.close()
    again = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300), had_clean_shutdown=False)
    dup = again.append_as_leader(
        batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=9), 0
    )
    assert dup.duplicate and dup.first_offset == 9
    nxt = again.append_as_leader(
        batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=10), 0
    )
    assert nxt.first_offset == 10


class RecordingScheduler:
    """Keeps the tasks a log schedules, for the test to run when it chooses."""

    def __init__(self) -> None:
        self.tasks: list = []

    def schedule_once(self, name, fn, delay_ms=0):
        self.tasks.append(fn)

    def schedule(self, name, fn, delay_ms=0, period_ms=None):
        self.tasks.append(fn)


def test_a_roll_defers_the_producer_snapshot_fsync_to_its_flush(tmp_path, batch, monkeypatch):
    """As Kafka's roll: the snapshot at the new segment is written on the append path and
    synced by the scheduled flush, before that flush moves the recovery point."""
    scheduler = RecordingScheduler()
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300), scheduler=scheduler)
    plog.append_as_leader(batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=0), 0)
    plog.append_as_leader(batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=1), 0)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    rolling = plog.append_as_leader(
        batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=2), 0
    )
    assert len(plog.segments()) == 2, "the third batch rolled a new segment"
    assert (tmp_path / "t-0" / f"{rolling.first_offset:020d}.snapshot").exists()
    assert synced == [], "the roll fsynced on the append path"
    assert plog.recovery_point == 0
    for task in scheduler.tasks:
        task()
    assert len(synced) >= 2  # the snapshot, its directory, the rolled segment's files
    assert plog.recovery_point == rolling.first_offset


def test_a_snapshot_torn_by_a_crash_before_its_flush_is_replayed_over(tmp_path, batch):
    scheduler = RecordingScheduler()  # its flush never runs: the crash came first
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300), scheduler=scheduler)
    for seq in range(5):
        plog.append_as_leader(
            batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=seq), 0
        )
    torn = sorted((tmp_path / "t-0").glob("*.snapshot"))
    assert torn
    for path in torn:
        path.write_bytes(b"")  # renamed into place, its data never reached the disk
    again = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300), had_clean_shutdown=False)
    dup = again.append_as_leader(
        batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=4), 0
    )
    assert dup.duplicate and dup.first_offset == 4
    assert (
        again.append_as_leader(
            batch([b"v" * 40], producer_id=5, producer_epoch=1, base_sequence=5), 0
        ).first_offset
        == 5
    )


def test_log_append_time_topic_rewrites_timestamps(tmp_path, batch):
    plog = open_log(
        tmp_path / "t-0",
        LogConfig(message_timestamp_type="LogAppendTime"),
        clock=lambda: 1_800_000_000_000,
    )
    info = plog.append_as_leader(batch([b"a", b"b"], timestamp=5), 0)
    assert info.log_append_time == 1_800_000_000_000
    header = RecordBatchHeader(plog.read(0, 1000).records.read_bytes())
    header.validate()  # CRC recomputed
    assert [r.timestamp for r in decode_records(header)] == [1_800_000_000_000] * 2


def test_truncate_to_removes_later_offsets_and_epochs(tmp_path, batch):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300))
    for i in range(20):
        plog.append_as_leader(batch([f"value-{i}".encode() * 3]), 1 if i < 10 else 2)
    assert plog.truncate_to(8)
    assert plog.log_end_offset == 8
    assert [e.epoch for e in plog.leader_epoch_cache.entries()] == [1]
    assert [o for o, _ in read_all(plog)] == list(range(8))
    plog.append_as_leader(batch([b"new"]), 3)
    assert read_all(plog)[-1] == (8, b"new")


def test_truncate_fully_and_start_at(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    plog.append_as_leader(batch([b"a", b"b"]), 0)
    plog.truncate_fully_and_start_at(100)
    assert (plog.log_start_offset, plog.log_end_offset) == (100, 100)
    plog.append_as_leader(batch([b"c"]), 0)
    assert read_all(plog, 100) == [(100, b"c")]
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == ["00000000000000000100.log"]


def test_restore_from_remote_restarts_the_log_with_the_remote_segments_state(tmp_path, batch):
    """A tiered follower below its leader's local log start (KIP-405): the log restarts
    empty at the offset after the remote segment, with the leader's log start, the remote
    segment's epochs and its producer snapshot; nothing below is on disk."""
    from core.log.leader_epoch import EpochEntry
    from core.log.producer_state import ProducerSnapshotEntry, encode_snapshot

    cfg = LogConfig(remote_storage_enable=True, file_delete_delay_ms=0)
    plog = open_log(tmp_path / "t-0", cfg, clock=lambda: 1_700_000_001_000)
    plog.append_as_leader(batch([b"stale"]), 0)  # a stale local log, dropped
    producer = ProducerSnapshotEntry(
        producer_id=7,
        producer_epoch=0,
        last_sequence=41,
        last_offset=8,
        offset_delta=0,
        timestamp=1_700_000_000_000,
        coordinator_epoch=-1,
        current_txn_first_offset=-1,
    )
    snapshot = encode_snapshot([producer])
    plog.restore_from_remote(9, 0, [EpochEntry(0, 0), EpochEntry(1, 3), EpochEntry(3, 7)], snapshot)
    assert (plog.log_start_offset, plog.local_log_start_offset, plog.log_end_offset) == (0, 9, 9)
    assert [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()] == [
        (0, 0),
        (1, 3),
        (3, 7),
    ]
    assert plog.latest_epoch == 3
    assert plog.producer_state.last_entry(7) is not None
    assert plog.producer_state.last_entry(7).last_seq == 41
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == [f"{9:020d}.log"]
    plog.append_as_leader(batch([b"next"]), 4)
    assert read_all(plog, 9) == [(9, b"next")]


def test_a_tiered_log_truncated_below_its_local_start_keeps_its_lineage(tmp_path, batch):
    """A tiered follower whose divergence is below its local log start: the local log
    restarts at the truncation point but keeps the log start and the epochs below it."""
    cfg = LogConfig(
        segment_bytes=300,
        remote_storage_enable=True,
        local_retention_bytes=0,
        retention_bytes=-1,
        file_delete_delay_ms=0,
    )
    plog = open_log(tmp_path / "t-0", cfg)
    for i in range(20):
        plog.append_as_leader(batch([b"x" * 60]), 0 if i < 5 else 2)
    plog.update_high_watermark(plog.log_end_offset)
    plog.highest_offset_in_remote_storage = plog.segments()[-2].base_offset - 1
    assert plog.delete_old_segments() > 0
    local_start = plog.local_log_start_offset
    assert local_start > 6
    assert plog.truncate_to(6)
    assert (plog.log_start_offset, plog.local_log_start_offset, plog.log_end_offset) == (0, 6, 6)
    assert [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()] == [
        (0, 0),
        (2, 5),
    ]


def test_retention_by_size_deletes_oldest_segments_never_the_active(tmp_path, batch):
    cfg = LogConfig(segment_bytes=500, retention_bytes=1200, file_delete_delay_ms=0)
    plog = open_log(tmp_path / "t-0", cfg)
    for i in range(40):
        plog.append_as_leader(batch([f"value-{i}".encode() * 4]), 0)
    n_before = len(plog.segments())
    assert plog.delete_old_segments() == 0  # nothing above the high watermark goes
    plog.update_high_watermark(plog.log_end_offset)
    deleted = plog.delete_old_segments()
    assert deleted > 0
    assert len(plog.segments()) == n_before - deleted
    assert plog.size <= 1200 + 500
    assert plog.log_start_offset == plog.segments()[0].base_offset
    assert plog.log_start_offset > 0
    remaining = {p.name for p in (tmp_path / "t-0").glob("*.log")}
    assert remaining == {f"{s.base_offset:020d}.log" for s in plog.segments()}
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100)
    # The active segment stays even when retention would remove everything.
    plog.update_config(LogConfig(segment_bytes=500, retention_bytes=0, file_delete_delay_ms=0))
    plog.delete_old_segments()
    assert len(plog.segments()) == 1


def test_retention_by_time_uses_the_largest_record_timestamp(tmp_path, batch):
    now = 1_700_000_100_000
    cfg = LogConfig(segment_bytes=300, retention_ms=50_000, file_delete_delay_ms=0)
    plog = open_log(tmp_path / "t-0", cfg, clock=lambda: now)
    for i in range(10):  # old records
        plog.append_as_leader(batch([b"o" * 60], timestamp=now - 100_000 + i), 0)
    plog.roll()
    for i in range(10):  # fresh records
        plog.append_as_leader(batch([b"n" * 60], timestamp=now - 10 + i), 0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.delete_old_segments()
    assert plog.log_start_offset == 10
    assert [o for o, _ in read_all(plog, 10)] == list(range(10, 20))


def test_tiered_local_retention_waits_for_remote_copy(tmp_path, batch):
    cfg = LogConfig(
        segment_bytes=300,
        remote_storage_enable=True,
        local_retention_bytes=0,
        retention_bytes=-1,
        file_delete_delay_ms=0,
    )
    plog = open_log(tmp_path / "t-0", cfg)
    for _ in range(20):
        plog.append_as_leader(batch([b"x" * 60]), 0)
    segments = plog.segments()
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.delete_old_segments() == 0  # nothing is in remote storage yet
    plog.highest_offset_in_remote_storage = segments[2].base_offset - 1
    assert plog.delete_old_segments() == 2
    assert plog.local_log_start_offset == segments[2].base_offset
    assert plog.log_start_offset == 0  # the remote tier still holds offsets from 0


def test_delete_records_moves_log_start_offset(tmp_path, batch):
    plog = open_log(
        tmp_path / "t-0", LogConfig(segment_bytes=300, retention_ms=-1, file_delete_delay_ms=0)
    )
    for _ in range(20):
        plog.append_as_leader(batch([b"x" * 60]), 0)
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.maybe_increment_log_start_offset(12, "DeleteRecords")
    plog.delete_old_segments()
    assert plog.log_start_offset == 12
    assert plog.local_log_start_offset <= 12
    with pytest.raises(OffsetOutOfRangeError):
        plog.maybe_increment_log_start_offset(25, "DeleteRecords")


def test_list_offsets_specials_and_timestamps(tmp_path, batch):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300))
    for i in range(10):
        plog.append_as_leader(batch([b"v" * 50], timestamp=1000 + 10 * i), 4)
    assert plog.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == 10
    assert plog.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert plog.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP).offset == 0
    top = plog.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert (top.timestamp, top.offset) == (1090, 9)
    found = plog.fetch_offset_by_timestamp(1041)
    assert (found.timestamp, found.offset, found.leader_epoch) == (1050, 5, 4)
    assert plog.fetch_offset_by_timestamp(5000) is None


def test_deleted_partition_directory_is_gone(tmp_path, batch):
    plog = open_log(tmp_path / "t-0")
    plog.append_as_leader(batch([b"a"]), 0)
    plog.delete()
    assert not any(p.name.startswith("t-0") for p in tmp_path.iterdir())


def test_flush_moves_recovery_point(tmp_path, batch):
    plog = open_log(tmp_path / "t-0", LogConfig(flush_messages=3))
    plog.append_as_leader(batch([b"a"]), 0)
    assert plog.recovery_point == 0
    plog.append_as_leader(batch([b"b", b"c"]), 0)
    assert plog.recovery_point == 3  # flush.messages reached


def test_file_names_are_twenty_digit_offsets(tmp_path, batch):
    plog = open_log(tmp_path / "t-0", LogConfig(segment_bytes=200))
    for _ in range(5):
        plog.append_as_leader(batch([b"x" * 100]), 0)
    plog.close()
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert "00000000000000000000.log" in names
    assert "00000000000000000000.index" in names
    assert "00000000000000000000.timeindex" in names
    assert "leader-epoch-checkpoint" in names
    assert any(n.endswith(".snapshot") for n in names)


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_a_writable_view_is_patched_and_written_in_place(tmp_path, batch, timestamp_type):
    # The network layer hands a produce request's records as a view into the request frame.
    config = LogConfig(message_timestamp_type=timestamp_type)
    by_view = open_log(tmp_path / "view-0", config, clock=lambda: 1_800_000_000_000)
    by_copy = open_log(tmp_path / "copy-0", config, clock=lambda: 1_800_000_000_000)
    for values in ([b"a", b"b"], [b"c"]):
        records = bytes(batch(values, timestamp=5))
        frame = bytearray(b"HEAD" + records + b"TAIL")
        view = memoryview(frame)[4 : 4 + len(records)]
        by_view.append_as_leader(view, 3)
        by_copy.append_as_leader(bytearray(records), 3)
        assert frame[:4] == b"HEAD" and frame[-4:] == b"TAIL"
        assert bytes(view) != records  # patched where it arrived: no copy was made
    written = by_view.read(0, 1 << 20).records.read_bytes()
    assert written == by_copy.read(0, 1 << 20).records.read_bytes()
    for header in iter_batches(written):
        header.validate()
    assert read_all(by_view) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_retention_running_into_shutdown_deletes_its_segments_at_once(tmp_path, batch):
    """Retention that removes segments after the scheduler stopped (the broker is shutting
    down) deletes their files itself instead of failing half-way with "scheduler stopped"."""
    scheduler = Scheduler()
    plog = open_log(
        tmp_path / "t-0",
        LogConfig(segment_bytes=300, retention_bytes=300, file_delete_delay_ms=60_000),
        scheduler=scheduler,
    )
    for _ in range(10):
        plog.append_as_leader(batch([b"x" * 60]), 0)
    plog.update_high_watermark(plog.log_end_offset)
    scheduler.shutdown()
    assert plog.delete_old_segments() > 0
    assert list((tmp_path / "t-0").glob("*.deleted")) == []
    assert plog.log_start_offset > 0
    plog.close()


def test_appends_do_not_wait_for_retention_to_unlink_producer_snapshots(
    tmp_path, batch, monkeypatch
):
    """Retention deletes the producer snapshots of the segments it removes. An unlink waits
    for the file system's journal (milliseconds on a busy disk), and retention may run on the
    tiering copier's thread while producers append: the unlinks happen after the log's lock
    is released, so an append goes on while one is stuck."""
    import threading

    plog = open_log(
        tmp_path / "t-0", LogConfig(segment_bytes=300, retention_bytes=300, file_delete_delay_ms=0)
    )
    for _ in range(10):
        plog.append_as_leader(batch([b"x" * 60]), 0)
    plog.update_high_watermark(plog.log_end_offset)
    assert list((tmp_path / "t-0").glob("*.snapshot")), "no producer snapshot to delete"
    stuck, release = threading.Event(), threading.Event()
    unlink = Path.unlink

    def slow_unlink(path: Path, missing_ok: bool = False) -> None:
        if path.suffix == ".snapshot":
            stuck.set()
            release.wait(10)
        unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", slow_unlink)
    retention = threading.Thread(target=plog.delete_old_segments)
    retention.start()
    try:
        assert stuck.wait(10), "retention deleted no producer snapshot"
        appended = threading.Event()
        appender = threading.Thread(
            target=lambda: (plog.append_as_leader(batch([b"y"]), 0), appended.set())
        )
        appender.start()
        assert appended.wait(5), "the append waited for retention's unlink"
    finally:
        release.set()
        retention.join(10)
    appender.join(10)
    assert plog.log_start_offset > 0
    plog.close()
