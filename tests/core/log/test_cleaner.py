"""Log compaction: latest record per key, tombstones and delete horizons, crash-safe swaps."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from core.log.cleaner import CLEANER_OFFSET_CHECKPOINT, CleanerConfig, LogCleaner, Throttler
from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.log.segment import LogSegment
from core.records.batch import RecordBatchHeader
from core.records.record import decode_records

from .conftest import client_batch

NOW = 1_700_000_000_000
DAY = 86_400_000


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def compact_config(**overrides: object) -> LogConfig:
    props: dict[str, object] = {
        "cleanup.policy": "compact",
        "segment.bytes": 1024,
        "min.cleanable.dirty.ratio": 0.01,
        **overrides,
    }
    return LogConfig.from_props(props)


def open_log(path: Path, config: LogConfig, clock: Clock, **kw: object) -> PartitionLog:
    return PartitionLog(path / "t-0", "t", 0, config, clock=clock, **kw)


def put(plog: PartitionLog, pairs: list[tuple[bytes, bytes | None]]) -> None:
    keys = [k for k, _ in pairs]
    values = [v for _, v in pairs]
    plog.append_as_leader(client_batch(values, keys=keys, timestamp=NOW), 0)
    plog.update_high_watermark(plog.log_end_offset)


def records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, segment by segment, in offset order."""
    out = []
    for segment in plog.segments():
        for _, header in segment.log.scan_batches(0):
            for r in decode_records(RecordBatchHeader(segment.log.read(_, header.size_in_bytes))):
                out.append((r.offset, r.key, r.value))
    return out


def latest_by_key(rows: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for _, key, value in rows:
        assert key is not None
        out[key] = value
    return out


@pytest.fixture
def clock() -> Clock:
    return Clock()


def cleaner_for(plog: PartitionLog, clock: Clock, **kw: object) -> LogCleaner:
    return LogCleaner(CleanerConfig(**kw), lambda: [plog], clock)


def fill(plog: PartitionLog, rounds: int, keys: int = 10) -> None:
    for r in range(rounds):
        put(plog, [(b"k%d" % k, b"v%d-%d" % (k, r)) for k in range(keys)])


def test_cleaning_keeps_the_latest_record_of_each_key_and_its_offset(tmp_path, clock):
    plog = open_log(tmp_path, compact_config(), clock)
    fill(plog, 30)
    before = records(plog)
    active_base = plog.active_segment.base_offset
    active_before = [r for r in before if r[0] >= active_base]

    stats = cleaner_for(plog, clock).clean_once()

    assert stats is not None and stats.segments_cleaned > 1
    after = records(plog)
    # Same answer for every key, offsets unchanged, far fewer records.
    assert latest_by_key(after) == latest_by_key(before)
    assert set(after) <= set(before)
    assert len(after) < len(before) / 2
    # The active segment is never touched: it still holds every record it had.
    assert [r for r in after if r[0] >= active_base] == active_before
    # In the cleaned part, every key appears at most once.
    cleaned = [key for offset, key, _ in after if offset < active_base]
    assert len(cleaned) == len(set(cleaned))
    # Log end and start offsets are unchanged, and reads still work from offset 0.
    assert plog.log_end_offset == 300
    assert plog.log_start_offset == 0
    info = plog.read(0, 1 << 20)
    assert info.records is not None


def test_cleaned_log_survives_reopening_and_is_not_cleaned_twice(tmp_path, clock):
    plog = open_log(tmp_path, compact_config(), clock)
    fill(plog, 30)
    cleaner = cleaner_for(plog, clock)
    assert cleaner.clean_once() is not None
    after = records(plog)
    plog.close()

    plog = open_log(tmp_path, compact_config(), clock, had_clean_shutdown=True)
    assert records(plog) == after
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).exists()
    # Nothing new is dirty: the checkpoint moved to the end of the cleaned range.
    assert cleaner_for(plog, clock).clean_once() is None


def test_dirty_ratio_below_the_threshold_waits(tmp_path, clock):
    plog = open_log(tmp_path, compact_config(**{"min.cleanable.dirty.ratio": 0.9}), clock)
    fill(plog, 30)
    cleaner = cleaner_for(plog, clock)
    assert cleaner.clean_once() is not None  # all dirty at first: ratio 1.0
    put(plog, [(b"k1", b"new")])
    plog.roll()
    assert cleaner.clean_once() is None  # one small dirty segment against a cleaned log


def test_tombstones_are_kept_until_the_delete_horizon_then_dropped(tmp_path, clock):
    plog = open_log(tmp_path, compact_config(**{"delete.retention.ms": DAY}), clock)
    fill(plog, 10)
    put(plog, [(b"k3", None)])
    fill(plog, 10, keys=2)  # k0, k1 only: k3's tombstone stays its latest record
    plog.roll()
    cleaner = cleaner_for(plog, clock)

    assert cleaner.clean_once() is not None
    after = records(plog)
    assert latest_by_key(after)[b"k3"] is None  # consumers can still see the delete
    tombstone_batches = [
        RecordBatchHeader(s.log.read(p, h.size_in_bytes))
        for s in plog.segments()
        for p, h in s.log.scan_batches(0)
        if any(r.value is None for r in decode_records(h))
    ]
    assert [b.delete_horizon_ms for b in tombstone_batches] == [NOW + DAY]

    clock.now += DAY - 1
    assert cleaner.clean_once() is None or b"k3" in latest_by_key(records(plog))
    clock.now += 2
    stats = cleaner.clean_once()
    assert stats is not None and stats.tombstones_dropped == 1
    assert b"k3" not in latest_by_key(records(plog))


def test_a_tombstone_with_no_delete_retention_goes_at_the_next_cleaning(tmp_path, clock):
    """delete.retention.ms=0: the cleaning that keeps the tombstone stamps its horizon at that
    very moment; the cleaner must come back for it once the clock moves on, with nothing new
    written (nothing dirty) to prompt it."""
    plog = open_log(tmp_path, compact_config(**{"delete.retention.ms": 0}), clock)
    fill(plog, 10)
    put(plog, [(b"k3", None)])
    fill(plog, 10, keys=2)
    plog.roll()
    cleaner = cleaner_for(plog, clock)

    assert cleaner.clean_once() is not None
    assert latest_by_key(records(plog))[b"k3"] is None

    clock.now += 1
    stats = cleaner.clean_once()
    assert stats is not None and stats.tombstones_dropped == 1
    assert b"k3" not in latest_by_key(records(plog))


def test_records_without_a_key_are_dropped(tmp_path, clock):
    # Kafka's cleaner drops them (a compacted topic refuses them at produce; they can only
    # come from a topic that was switched from delete to compact).
    plog = open_log(tmp_path, compact_config(**{"cleanup.policy": "delete"}), clock)
    put(plog, [(b"a", b"keyed")])
    plog.append_as_leader(client_batch([b"no key"], timestamp=NOW), 0)
    plog.update_high_watermark(plog.log_end_offset)
    plog.roll()
    plog.update_config(compact_config())

    assert cleaner_for(plog, clock).clean_once() is not None
    assert [(k, v) for _, k, v in records(plog)] == [(b"a", b"keyed")]


def test_a_producers_last_batch_is_kept_empty_so_its_sequence_survives(tmp_path, clock):
    plog = open_log(tmp_path, compact_config(), clock)
    idem = client_batch([b"old"], keys=[b"x"], producer_id=5, producer_epoch=0, base_sequence=0)
    plog.append_as_leader(idem, 0)
    put(plog, [(b"x", b"new")])
    plog.roll()

    assert cleaner_for(plog, clock).clean_once() is not None
    headers = [h for s in plog.segments() for _, h in s.log.scan_batches(0)]
    kept = [h for h in headers if h.producer_id == 5]
    assert len(kept) == 1 and kept[0].records_count == 0
    assert (kept[0].base_offset, kept[0].last_offset, kept[0].base_sequence) == (0, 0, 0)
    plog.close()
    reopened = open_log(tmp_path, compact_config(), clock)  # replays producer state
    assert reopened.producer_state.last_entry(5).last_seq == 0


def test_a_crash_in_the_middle_of_the_swap_is_completed_at_restart(tmp_path, clock, monkeypatch):
    plog = open_log(tmp_path, compact_config(), clock)
    fill(plog, 30)
    expected = latest_by_key(records(plog))
    original = LogSegment.change_file_suffixes

    def crash_on_old(self, old_suffix, new_suffix):
        if new_suffix == ".deleted":
            raise SystemExit("crash")  # the cleaned files are .swap now; old ones intact
        original(self, old_suffix, new_suffix)

    monkeypatch.setattr(LogSegment, "change_file_suffixes", crash_on_old)
    with pytest.raises(SystemExit):
        cleaner_for(plog, clock).clean_once()
    monkeypatch.undo()
    assert list(plog.dir.glob("*.log.swap"))

    reopened = open_log(tmp_path, compact_config(), clock)  # unclean: recovery runs too
    rows = records(reopened)
    assert latest_by_key(rows) == expected
    assert not list(reopened.dir.glob("*.swap"))
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets))  # no duplicated range from old + cleaned files


def test_leftover_cleaned_files_are_removed_at_restart(tmp_path, clock):
    plog = open_log(tmp_path, compact_config(), clock)
    fill(plog, 5)
    before = records(plog)
    plog.close()
    (plog.dir / "00000000000000000000.log.cleaned").write_bytes(b"junk")
    reopened = open_log(tmp_path, compact_config(), clock, had_clean_shutdown=True)
    assert records(reopened) == before
    assert not list(reopened.dir.glob("*.cleaned"))


def test_tiered_and_delete_only_logs_are_never_cleaned(tmp_path, clock):
    plog = open_log(tmp_path, LogConfig.from_props({"segment.bytes": 1024}), clock)
    fill(plog, 30)
    assert cleaner_for(plog, clock).clean_once() is None


def test_compact_only_logs_have_no_time_retention(tmp_path, clock):
    plog = open_log(tmp_path, compact_config(**{"retention.ms": 1}), clock)
    fill(plog, 30)
    clock.now += DAY
    assert plog.deletable_segments() == []


def test_pausing_waits_for_and_blocks_cleaning(tmp_path, clock):
    plog = open_log(tmp_path, compact_config(), clock)
    fill(plog, 30)
    cleaner = cleaner_for(plog, clock)
    with cleaner.paused("t", 0):
        assert cleaner.clean_once() is None
    assert cleaner.clean_once() is not None


def test_throttler_waits_in_proportion_to_the_excess():
    waits: list[float] = []

    class Recorder(threading.Event):
        def wait(self, timeout=None):
            waits.append(timeout)
            return False

    throttler = Throttler(1000.0, Recorder())
    throttler.maybe_throttle(5000)
    assert waits and 3.5 < waits[0] <= 5.0


def test_a_compacted_log_refuses_records_without_a_key(tmp_path, clock):
    from core.errors import InvalidRecordError

    plog = open_log(tmp_path, compact_config(), clock)
    with pytest.raises(InvalidRecordError, match="without key"):
        plog.append_as_leader(client_batch([b"a", b"b"], keys=[b"k", None]), 0)
    assert plog.log_end_offset == 0  # nothing of the batch was appended


def test_max_compaction_lag_forces_a_cleaning_below_the_dirty_ratio(tmp_path, clock):
    config = compact_config(**{"min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": DAY})
    plog = open_log(tmp_path, config, clock)
    fill(plog, 30)
    cleaner = cleaner_for(plog, clock)
    assert cleaner.clean_once() is not None  # all dirty at first
    put(plog, [(b"k1", b"late")])
    plog.roll()
    assert cleaner.clean_once() is None  # one small dirty segment: ratio far below 0.99
    clock.now = NOW + DAY + 100  # the dirty section is now max.compaction.lag.ms old
    assert cleaner.clean_once() is not None
    assert latest_by_key(records(plog))[b"k1"] == b"late"
