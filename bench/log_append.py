"""Append throughput: ``PartitionLog.append_as_leader`` vs. ``write`` of the same bytes.

Both sides write the same 16 KiB batches, one call per batch (one batch per produce
request), to a new file in the same directory, without fsync (tierlog's flush policy is
left at its default, no flush; no segment roll happens below 1 GiB). The batches are built
once before timing from ``os.urandom`` values (build cost is the producer's, not the log's)
and cycled through; tierlog patches base offset and leader epoch in place, as it does with a
produce request's buffer. The baseline is an unbuffered ``open(path, "wb", buffering=0)``:
one ``write`` system call per batch, as tierlog does one ``pwrite``.

    python -m bench.log_append [--mb 256] [--rounds 3] [--dir bench-data]
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from bench._common import (
    BATCH_BYTES,
    LEADER_EPOCH,
    RECORDS_PER_BATCH,
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

TARGET = 0.7
POOL_BATCHES = 64  # 1 MiB of distinct batches, cycled


def _sequence(total_bytes: int) -> list[bytearray]:
    pool = build_pool(POOL_BATCHES)
    count = total_bytes // BATCH_BYTES
    return [pool[i % len(pool)] for i in range(count)]


def time_baseline(directory: Path, batches: list[bytearray]) -> float:
    """Seconds to write every batch with one unbuffered ``write`` each."""
    path = directory / "baseline.log"
    with open(path, "wb", buffering=0) as f:
        write = f.write
        start = time.perf_counter()
        for batch in batches:
            write(batch)
        elapsed = time.perf_counter() - start
    expected = len(batches) * BATCH_BYTES
    if path.stat().st_size != expected:
        raise RuntimeError(f"baseline wrote {path.stat().st_size} bytes, expected {expected}")
    path.unlink()
    return elapsed


def time_tierlog(directory: Path, batches: list[bytearray]) -> float:
    """Seconds to append every batch through ``PartitionLog.append_as_leader``."""
    log_dir = directory / "bench-0"
    log = PartitionLog(log_dir, "bench", 0, LogConfig())
    append = log.append_as_leader
    start = time.perf_counter()
    for batch in batches:
        append(batch, LEADER_EPOCH)
    elapsed = time.perf_counter() - start
    if log.log_end_offset != len(batches) * RECORDS_PER_BATCH or len(log.segments()) != 1:
        raise RuntimeError(f"unexpected log state after the run: {log!r}")
    log.delete()  # no close(): close() fsyncs, and the baseline does not
    return elapsed


def run(mb: int, rounds: int, base: Path) -> Result:
    if mb * MiB >= LogConfig().segment_bytes:
        raise SystemExit("--mb must stay below segment.bytes (1 GiB) so that no roll happens")
    total = mb * MiB
    directory = scratch_dir(base, "log_append", 2 * total)
    try:
        batches = _sequence(total)
        nbytes = len(batches) * BATCH_BYTES
        # One untimed warm-up of each side (imports, allocator, first file creation).
        warm = batches[: min(len(batches), 256)]
        time_baseline(directory, warm)
        time_tierlog(directory, warm)
        base_s: list[float] = []
        tier_s: list[float] = []
        for i in range(rounds):
            if i % 2 == 0:
                base_s.append(time_baseline(directory, batches))
                tier_s.append(time_tierlog(directory, batches))
            else:
                tier_s.append(time_tierlog(directory, batches))
                base_s.append(time_baseline(directory, batches))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return Result(
        f"append 16 KiB batches, {mb} MiB",
        "unbuffered file.write",
        median_mb_s(nbytes, base_s),
        median_mb_s(nbytes, tier_s),
        TARGET,
    )


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0], default_mb=256, default_rounds=3)
    args = parser.parse_args(argv)
    print(describe_machine(args.dir))
    result = run(args.mb, args.rounds, args.dir)
    print_table([result])
    return 0


if __name__ == "__main__":
    sys.exit(main())
