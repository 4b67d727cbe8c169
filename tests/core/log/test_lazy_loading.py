"""Loading a log costs nothing per segment behind the recovery point (Kafka's lazy indexes).

Kafka's loader only checks that a segment's index files exist; it opens them on first use,
and recovers only the segments from the recovery point on. The recovery point moves at
each roll, once the background flush of the rolled segment is done; after a crash the
recovered segments are flushed and checkpointed right after start-up, so the next restart
does not validate them again.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.log.checkpoints import OffsetCheckpointFile
from core.log.config import LogConfig
from core.log.files import RECOVERY_POINT_CHECKPOINT
from core.log.log_manager import LogManager, LogManagerConfig
from core.log.partition_log import PartitionLog
from core.records.batch import iter_batches
from core.records.record import decode_records
from tests.support.waiting import wait_until

CFG = LogConfig(segment_bytes=600, index_interval_bytes=50, segment_index_bytes=4096)


def fill(plog: PartitionLog, batch, count: int) -> None:
    for i in range(count):
        plog.append_as_leader(batch([f"value-{i:04d}".encode() * 3]), 0)


def values(plog: PartitionLog, start: int = 0) -> list[tuple[int, bytes | None]]:
    out = []
    offset = start
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20)
        assert info.records is not None
        for header in iter_batches(info.records.read_bytes()):
            out.extend((r.offset, r.value) for r in decode_records(header) if r.offset >= offset)
            offset = header.next_offset
    return out


def crash(plog: PartitionLog) -> None:
    """Release the files as SIGKILL would: nothing trimmed, flushed or snapshotted."""
    for segment in plog.segments():
        segment.log.close()


def index_sizes(directory: Path) -> dict[str, int]:
    return {
        p.name: p.stat().st_size
        for p in sorted(directory.iterdir())
        if p.suffix in (".index", ".timeindex")
    }


def test_segments_behind_the_recovery_point_keep_their_index_files_untouched(tmp_path, batch):
    plog = PartitionLog(tmp_path / "t-0", "t", 0, CFG)
    fill(plog, batch, 60)
    expected = values(plog)
    active = plog.active_segment.base_offset
    plog.flush(active)
    crash(plog)
    before = index_sizes(tmp_path / "t-0")

    again = PartitionLog(
        tmp_path / "t-0", "t", 0, CFG, had_clean_shutdown=False, recovery_point=active
    )
    old = again.segments()[:-1]
    assert len(old) >= 3
    sizes = index_sizes(tmp_path / "t-0")
    # Old segments' index files are neither regrown to segment.index.bytes nor changed.
    for name, size in before.items():
        if int(name[:20]) < active:
            assert sizes[name] == size < CFG.segment_index_bytes
    assert not any(s.indexes_open for s in old)
    assert values(again) == expected
    assert all(s.indexes_open for s in old)  # opened by the reads, and still trimmed
    assert {n: s for n, s in index_sizes(tmp_path / "t-0").items() if int(n[:20]) < active} == {
        n: s for n, s in before.items() if int(n[:20]) < active
    }


def test_a_corrupt_index_behind_the_recovery_point_is_rebuilt_when_first_used(tmp_path, batch):
    plog = PartitionLog(tmp_path / "t-0", "t", 0, CFG)
    fill(plog, batch, 60)
    expected = values(plog)
    first = plog.segments()[0]
    entries = [first.offset_index.entry(i) for i in range(first.offset_index.entries)]
    assert len(entries) >= 2
    active = plog.active_segment.base_offset
    plog.close()
    # Entries out of order: the second one points before the first.
    path = first.offset_index.path
    data = bytearray(path.read_bytes())
    data[8:16] = data[0:8]
    path.write_bytes(bytes(data))

    again = PartitionLog(
        tmp_path / "t-0", "t", 0, CFG, had_clean_shutdown=False, recovery_point=active
    )
    segment = again.segments()[0]
    assert not segment.indexes_open
    assert values(again) == expected
    rebuilt = segment.offset_index
    assert [rebuilt.entry(i) for i in range(rebuilt.entries)] == entries
    segment.offset_index.sanity_check()


def test_the_active_segment_gets_room_to_grow_after_loading(tmp_path, batch):
    plog = PartitionLog(tmp_path / "t-0", "t", 0, CFG)
    fill(plog, batch, 3)
    plog.close()  # trims the active segment's indexes to their entries
    again = PartitionLog(tmp_path / "t-0", "t", 0, CFG, had_clean_shutdown=True)
    assert again.active_segment.offset_index.max_entries == CFG.segment_index_bytes // 8
    fill(again, batch, 3)
    assert len(again.segments()) == 1  # no roll for a full index


def _manager(log_dir: Path) -> LogManager:
    return LogManager(LogManagerConfig(log_dirs=(log_dir,), default_log_config=CFG))


def test_the_recovery_point_moves_at_each_roll_and_restarts_recover_only_after_it(tmp_path, batch):
    manager = _manager(tmp_path)
    manager.startup()
    plog = manager.get_or_create_log("t", 0)
    plog.inline_flush = False
    fill(plog, batch, 60)
    active = plog.active_segment.base_offset
    assert active > 0
    # The rolled segments are flushed in the background and the recovery point follows.
    wait_until(lambda: plog.recovery_point == active, 10, what="recovery point at the roll")
    manager.checkpoint_recovery_points()
    expected = values(plog)
    manager.close_without_marker()
    crash(plog)
    # A byte of record data in the first segment is damaged behind the recovery point:
    # recovery never reads that segment, so nothing is truncated.
    first = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[-3] ^= 0xFF
    first.write_bytes(bytes(data))

    again = _manager(tmp_path)
    reloaded = again.get_log("t", 0)
    assert reloaded is not None
    assert reloaded.log_end_offset == 60
    assert not any(s.indexes_open for s in reloaded.segments()[:-1])
    second = reloaded.segments()[1].base_offset
    assert values(reloaded, second) == [v for v in expected if v[0] >= second]
    again.close_without_marker()
    crash(reloaded)


def test_after_a_crash_the_recovered_segments_are_flushed_and_checkpointed(tmp_path, batch):
    manager = _manager(tmp_path)
    plog = manager.get_or_create_log("t", 0)
    fill(plog, batch, 60)
    manager.close_without_marker()  # never started: the checkpoint says 0
    crash(plog)
    checkpoint = tmp_path / RECOVERY_POINT_CHECKPOINT
    assert OffsetCheckpointFile(checkpoint).read().get(("t", 0), 0) == 0

    again = _manager(tmp_path)
    again.startup()
    wait_until(
        lambda: OffsetCheckpointFile(checkpoint).read().get(("t", 0)) == 60,
        10,
        what="recovery point checkpointed after recovery",
    )
    reloaded = again.get_log("t", 0)
    assert reloaded is not None
    again.close_without_marker()
    crash(reloaded)
    os.sync()

    third = _manager(tmp_path)
    log3 = third.get_log("t", 0)
    assert log3 is not None and log3.log_end_offset == 60
    # Nothing was recovered this time: no segment's indexes were opened but the active one.
    assert not any(s.indexes_open for s in log3.segments()[:-1])
    third.close_without_marker()
    crash(log3)
