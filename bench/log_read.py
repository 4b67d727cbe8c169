"""Sequential read throughput: ``PartitionLog.read`` slices vs. reading the file directly.

A log of ``--mb`` MiB of 16 KiB batches is written first (untimed). tierlog's side then
reads it from offset 0 to the end as a consumer's fetches do: ``read(offset, 1 MiB,
max_offset=high watermark)`` followed by ``FileSlice.read_bytes()``, the next offset being
the one after the last whole batch in the slice (a slice may end inside a batch, as in
Kafka). The baseline reads exactly the same byte ranges of the same file with ``seek`` and
``read`` on an unbuffered ``open(path, "rb", buffering=0)``. The page cache is warm for both
sides (the file was just written and is read once before timing), so this measures CPU cost
per fetch, not the disk.

Finding the next offset uses the batch boundaries recorded while writing (a bisect, ~1 us
per 1 MiB fetch); a real consumer parses the headers instead, which is client work.

    python -m bench.log_read [--mb 256] [--rounds 5] [--fetch-kib 1024] [--dir bench-data]
"""

from __future__ import annotations

import bisect
import shutil
import sys
import time
from pathlib import Path

from bench._common import (
    BATCH_BYTES,
    LEADER_EPOCH,
    KiB,
    MiB,
    Result,
    base_parser,
    build_pool,
    describe_machine,
    median_mb_s,
    print_table,
    scratch_dir,
)
from core.log.config import LogConfig
from core.log.partition_log import PartitionLog

TARGET = 0.8
POOL_BATCHES = 64

# One fetched range: (position in the segment file, size).
Range = tuple[int, int]


def build_log(directory: Path, total_bytes: int) -> tuple[PartitionLog, list[int], list[int]]:
    """A one-segment log of ``total_bytes``; returns it, batch base offsets and batch ends."""
    log = PartitionLog(directory / "bench-0", "bench", 0, LogConfig())
    pool = build_pool(POOL_BATCHES)
    bases: list[int] = []
    ends: list[int] = []
    position = 0
    for i in range(total_bytes // BATCH_BYTES):
        info = log.append_as_leader(pool[i % len(pool)], LEADER_EPOCH)
        bases.append(info.first_offset)
        position += info.valid_bytes
        ends.append(position)
    log.update_high_watermark(log.log_end_offset)
    if len(log.segments()) != 1:
        raise RuntimeError("the read benchmark expects a one-segment log")
    return log, bases, ends


def time_tierlog(
    log: PartitionLog, fetch_bytes: int, bases: list[int], ends: list[int]
) -> tuple[float, list[Range], int]:
    """Seconds to fetch the whole log; also the ranges read and the bytes returned."""
    read = log.read
    hw = log.high_watermark
    end_offset = log.log_end_offset
    offset = 0
    ranges: list[Range] = []
    nbytes = 0
    start = time.perf_counter()
    while offset < hw:
        info = read(offset, fetch_bytes, max_offset=hw)
        records = info.records
        if records is None:
            break
        data = records.read_bytes()
        nbytes += len(data)
        ranges.append((records.position, records.size))
        whole = bisect.bisect_right(ends, records.position + len(data))
        offset = bases[whole] if whole < len(bases) else end_offset
    elapsed = time.perf_counter() - start
    if offset != end_offset:
        raise RuntimeError(f"tierlog read stopped at offset {offset}, log end {end_offset}")
    return elapsed, ranges, nbytes


def time_baseline(path: Path, ranges: list[Range]) -> tuple[float, int]:
    """Seconds to read the same ranges with seek + read; also the bytes read."""
    nbytes = 0
    with open(path, "rb", buffering=0) as f:
        seek, read = f.seek, f.read
        start = time.perf_counter()
        for position, size in ranges:
            seek(position)
            nbytes += len(read(size))
        elapsed = time.perf_counter() - start
    return elapsed, nbytes


def run(mb: int, rounds: int, base: Path, fetch_kib: int = 1024) -> Result:
    if mb * MiB >= LogConfig().segment_bytes:
        raise SystemExit("--mb must stay below segment.bytes (1 GiB): one segment is read")
    total = mb * MiB
    fetch_bytes = fetch_kib * KiB
    directory = scratch_dir(base, "log_read", total)
    log = None
    try:
        log, bases, ends = build_log(directory, total)
        segment_path = log.segments()[0].log.path
        # Warm-up, untimed: fills the page cache for both sides and records the ranges.
        _, ranges, nbytes = time_tierlog(log, fetch_bytes, bases, ends)
        time_baseline(segment_path, ranges)
        base_s: list[float] = []
        tier_s: list[float] = []
        for i in range(rounds):
            if i % 2 == 0:
                base_s.append(_checked_baseline(segment_path, ranges, nbytes))
                tier_s.append(time_tierlog(log, fetch_bytes, bases, ends)[0])
            else:
                tier_s.append(time_tierlog(log, fetch_bytes, bases, ends)[0])
                base_s.append(_checked_baseline(segment_path, ranges, nbytes))
    finally:
        if log is not None:
            log.delete()
        shutil.rmtree(directory, ignore_errors=True)
    return Result(
        f"sequential read, {fetch_kib} KiB fetches, {mb} MiB",
        "unbuffered seek+read",
        median_mb_s(nbytes, base_s),
        median_mb_s(nbytes, tier_s),
        TARGET,
    )


def _checked_baseline(path: Path, ranges: list[Range], expected: int) -> float:
    elapsed, nbytes = time_baseline(path, ranges)
    if nbytes != expected:
        raise RuntimeError(f"baseline read {nbytes} bytes, tierlog {expected}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0], default_mb=256, default_rounds=5)
    parser.add_argument(
        "--fetch-kib",
        type=int,
        default=1024,
        help="bytes per read call, like a consumer's fetch.max.bytes (default 1024 KiB)",
    )
    args = parser.parse_args(argv)
    print(describe_machine(args.dir))
    result = run(args.mb, args.rounds, args.dir, args.fetch_kib)
    print_table([result])
    return 0


if __name__ == "__main__":
    sys.exit(main())
