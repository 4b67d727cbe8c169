"""Restart time after a crash, and how it grows with the segments behind the recovery point.

A log dir holds one partition of ``--segments`` 1 MiB segments (``segment.bytes=1048576``,
16 KiB batches, 1 GiB at the default 1,000), all behind the recovery point, plus
``--tail-segments`` segments (default 32) written after it: the part a crash leaves
unflushed. The broker is then "killed": the log manager releases its files without a clean
shutdown (no clean-shutdown marker, no snapshot at the log end), and the recovery-point
checkpoint names the first tail segment.

Timed: ``LogManager(config)`` (what a broker runs at start-up before it serves the
partition) and then one read at the log end. Each round is another crash of the restarted
log (files released without closing anything, as SIGKILL leaves them) with the
recovery-point checkpoint written back, so rounds show whether restarts grow from one
crash to the next. The
same is done with a quarter of the segments behind the recovery point (``--segments`` / 4,
same tail), so that the ratio of the two times shows whether restarts grow with the
backlog.

Baseline, in the same run on the same files: what any restart must do at least, listing
the partition directory, opening each ``.log`` file and reading + CRC-32C-ing the tail
segments (the recovery of the unflushed part).

Targets (issue 19): restart with 1,000 segments (1 GiB) <= 10 s, and not growing with the
segments behind the recovery point (1,000 vs 250: ratio <= 1.25). The page cache is warm
(files just written) unless ``--cold`` (``posix_fadvise(DONTNEED)`` on every file first).

    python -m bench.restart [--segments 1000] [--tail-segments 32] [--rounds 3] [--cold]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import crc32c

from bench._common import (
    DEFAULT_DIR,
    LEADER_EPOCH,
    MiB,
    build_pool,
    describe_machine,
    scratch_dir,
)
from core.log.checkpoints import OffsetCheckpointFile
from core.log.config import LogConfig
from core.log.files import RECOVERY_POINT_CHECKPOINT
from core.log.log_manager import LogManager, LogManagerConfig

SEGMENT_BYTES = MiB
TOPIC = "restart"
TARGET_S = 10.0
TARGET_GROWTH = 1.25


def _config(log_dir: Path) -> LogManagerConfig:
    return LogManagerConfig(
        log_dirs=(log_dir,),
        default_log_config=LogConfig(segment_bytes=SEGMENT_BYTES),
    )


def build(log_dir: Path, behind: int, tail: int) -> int:
    """Write ``behind`` flushed segments and ``tail`` unflushed ones; crash; return the
    recovery point (the tail's first offset)."""
    pool = build_pool(64)
    manager = LogManager(_config(log_dir))
    plog = manager.get_or_create_log(TOPIC, 0)
    plog.inline_flush = False
    i = 0

    def fill(segments: int) -> None:
        nonlocal i
        target = len(plog.segments()) + segments
        while len(plog.segments()) < target:
            plog.append_as_leader(bytearray(pool[i % len(pool)]), LEADER_EPOCH)
            i += 1

    fill(behind)
    recovery_point = plog.active_segment.base_offset
    plog.flush(recovery_point)
    fill(tail)
    manager.scheduler.shutdown()  # no background flush may move the recovery point on
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write({(TOPIC, 0): recovery_point})
    manager.close_without_marker()
    for segment in plog.segments():
        segment.log.close()
    return recovery_point


def restart(log_dir: Path, recovery_point: int) -> float:
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write({(TOPIC, 0): recovery_point})
    start = time.perf_counter()
    manager = LogManager(_config(log_dir))
    plog = manager.get_log(TOPIC, 0)
    assert plog is not None
    plog.read(plog.log_end_offset - 1, 1 << 20)  # serve the tail: the partition is usable
    elapsed = time.perf_counter() - start
    manager.close_without_marker()
    # A crash again: nothing is trimmed or flushed; only the descriptors are released.
    for segment in plog.segments():
        segment.log.close()
    return elapsed


def floor(log_dir: Path, recovery_point: int) -> float:
    """List the partition, open each .log, read + CRC-32C the segments at or after the
    recovery point."""
    start = time.perf_counter()
    part = log_dir / f"{TOPIC}-0"
    logs = sorted(p for p in os.listdir(part) if p.endswith(".log"))
    for name in logs:
        fd = os.open(part / name, os.O_RDONLY)
        try:
            if int(name[:20]) >= recovery_point:
                while chunk := os.read(fd, 8 * MiB):
                    crc32c.crc32c(chunk)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def evict(log_dir: Path) -> None:
    for root, _dirs, files in os.walk(log_dir):
        for name in files:
            fd = os.open(Path(root) / name, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run(segments: int, tail: int, rounds: int, base: Path, cold: bool) -> list[str]:
    small = max(1, segments // 4)
    work = scratch_dir(base, "restart", (segments + small + 2 * tail) * SEGMENT_BYTES)
    try:
        cases = []
        for behind in (segments, small):
            log_dir = work / f"behind-{behind}"
            print(f"building {behind} + {tail} segments of 1 MiB ...", flush=True)
            cases.append((behind, log_dir, build(log_dir, behind, tail)))
        times: dict[int, list[float]] = {}
        floors: dict[int, list[float]] = {}
        for r in range(rounds):
            for behind, log_dir, rp in cases if r % 2 == 0 else reversed(cases):
                if cold:
                    evict(log_dir)
                floors.setdefault(behind, []).append(floor(log_dir, rp))
                if cold:
                    evict(log_dir)
                times.setdefault(behind, []).append(restart(log_dir, rp))
        lines = [
            "| segments behind the recovery point | tail segments | restart s "
            "(median) | floor s | floor / restart | target | result |",
            "|---:|---:|---:|---:|---:|---|---|",
        ]
        med = {b: statistics.median(t) for b, t in times.items()}
        for behind, _, _ in cases:
            f = statistics.median(floors[behind])
            verdict = "PASS" if med[behind] <= TARGET_S else "MISS"
            lines.append(
                f"| {behind} | {tail} | {med[behind]:.2f} | {f:.2f} | {f / med[behind]:.2f} | "
                f"<= {TARGET_S:.0f} s | {verdict} |"
            )
        growth = med[segments] / med[small]
        verdict = "PASS" if growth <= TARGET_GROWTH else "MISS"
        lines.append(
            f"growth {segments} vs {small} segments behind: {growth:.2f} "
            f"(target <= {TARGET_GROWTH}) {verdict}"
        )
        lines.append(f"all rounds: { {b: [round(x, 2) for x in t] for b, t in times.items()} }")
        return lines
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument("--tail-segments", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="evict the files before each side")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    logging.getLogger("core.log").setLevel(logging.ERROR)
    print(describe_machine(args.dir))
    for line in run(args.segments, args.tail_segments, args.rounds, args.dir, args.cold):
        print(line)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
