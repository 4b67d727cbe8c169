"""A writer process SIGKILLed at random moments: every flushed offset must survive intact.

The child (crash_writer.py) appends deterministic batches through a LogManager with fast
checkpoints and a small segment size, so kills land during appends, rolls, producer
snapshots and checkpoint writes. After each kill the log is reopened (recovery), every
offset the child reported as flushed must read back byte-identical, and the indexes must
agree with a full scan of the segments.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.log.log_manager import LogManager, LogManagerConfig
from core.records.batch import iter_batches

from . import crash_writer

HERE = Path(__file__).parent

KILLS = 20


def run_writer_until_killed(log_dir: Path, rng: random.Random) -> tuple[int, int]:
    """Start the child, let it flush a random amount, SIGKILL it mid-flight.

    Returns:
        (the log end offset the child started from, the highest flushed offset reported).
    """
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "crash_writer.py"), str(log_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    start = flushed = -1
    want_flushes = rng.randint(1, 40)
    deadline = time.monotonic() + 60
    seen = 0
    try:
        for line in proc.stdout:
            kind, value = line.split()
            if kind == "start":
                start = flushed = int(value)
            else:
                flushed = int(value)
                seen += 1
            if seen >= want_flushes:
                break
            assert time.monotonic() < deadline, "writer made no progress"
        # Land the kill at an arbitrary point after the last report, not right at it.
        time.sleep(rng.random() * 0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # Reports written before the kill but not read yet still count as flushed.
    for line in proc.stdout:
        kind, value = line.split()
        if kind == "flushed":
            flushed = int(value)
    assert start >= 0, f"writer never started: {proc.stderr.read() if proc.stderr else ''}"
    return start, flushed


def verify(log_dir: Path, flushed: int) -> int:
    """Reopen (recovering), check data and indexes; returns the recovered log end offset."""
    manager = LogManager(
        LogManagerConfig(log_dirs=(log_dir,), default_log_config=crash_writer.CONFIG)
    )
    try:
        plog = manager.get_log("crash", 0)
        assert plog is not None
        end = plog.log_end_offset
        assert end >= flushed, f"flushed offset {flushed} lost: log ends at {end}"
        assert end % crash_writer.RECORDS_PER_BATCH == 0
        # Every batch, flushed or not, that survived recovery is exactly what was written.
        offset = 0
        while offset < end:
            info = plog.read(offset, 1 << 20)
            for header in iter_batches(info.records.read_bytes()):
                i = header.base_offset // crash_writer.RECORDS_PER_BATCH
                assert bytes(header.raw()) == crash_writer.stored_batch(i), f"batch {i}"
                offset = header.next_offset
        # Index entries point at the batch whose last offset they name.
        for segment in plog.segments():
            positions = {p: h for p, h in segment.log.batch_headers()}
            index = segment.offset_index
            for n in range(index.entries):
                entry = index.entry(n)
                assert entry.position in positions, f"{index.path}: entry {n} off a batch"
                assert positions[entry.position].last_offset == entry.offset
            previous = -1
            for n in range(segment.time_index.entries):
                ts = segment.time_index.entry(n)
                assert ts.timestamp > previous
                previous = ts.timestamp
                assert segment.base_offset <= ts.offset < plog.log_end_offset
        return end
    finally:
        # Close files but leave no clean-shutdown marker: the next writer recovers too.
        for plog in manager.all_logs():
            for segment in plog.segments():
                segment.close()
        manager.close_without_marker()


@pytest.mark.timeout(600)
def test_sigkill_at_random_moments_loses_no_flushed_offset(tmp_path):
    rng = random.Random(int(os.environ.get("TIERLOG_CRASH_SEED", "405")))
    log_dir = tmp_path / "logs"
    last_end = 0
    segments_seen = 0
    for _ in range(KILLS):
        start, flushed = run_writer_until_killed(log_dir, rng)
        assert start >= last_end - 0 or start >= 0
        last_end = verify(log_dir, flushed)
        segments_seen = len(list((log_dir / "crash-0").glob("*.log")))
    assert last_end > 0
    assert segments_seen > 3, "the run should span several segment rolls"
