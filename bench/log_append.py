"""Append throughput: ``PartitionLog.append_as_leader`` vs. ``write`` of the same bytes.

Both sides write the same 16 KiB batches, one call per batch (one batch per produce
request), to a new file in the same directory, without fsync (tierlog's flush policy is
left at its default, no flush; no segment roll happens below 1 GiB). The batches are built
once before timing from ``os.urandom`` values (build cost is the producer's, not the log's)
and cycled through; tierlog patches base offset and leader epoch in place, as it does with a
produce request's buffer. The baseline is an unbuffered ``open(path, "wb", buffering=0)``:
one ``write`` system call per batch, as tierlog does one ``pwrite``. tierlog's first append,
which writes the leader-epoch checkpoint (once per leadership, with an fsync), is untimed.

    python -m bench.log_append [--mb 256] [--rounds 3] [--dir bench-data]

``--roll-partitions N`` measures rolls instead: N partition logs with 1 MiB segments
(``--segment-kib``), appended to in turn, so that one append in 64 rolls its segment (the
many-partition load of the soak, where the event loop appends). A scheduler thread runs the
flush each roll schedules, as in the broker. It prints the appends' latency (median, p99,
max, and the mean of the appends that rolled) and the ratio to ``write`` of the same batches
to N files in turn (no roll, reported without a target).

    python -m bench.log_append --roll-partitions 20 [--mb 64] [--segment-kib 1024]
"""

from __future__ import annotations

import contextlib
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
from core.scheduler import Scheduler

TARGET = 0.7
# CPU seconds of each timed loop, by side: with other work on the machine, wall time moves
# more than CPU time, so the result is given both ways.
CPU_SECONDS: dict[str, list[float]] = {"baseline": [], "tierlog": []}
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
        cpu = time.process_time()
        start = time.perf_counter()
        for batch in batches:
            write(batch)
        elapsed = time.perf_counter() - start
        CPU_SECONDS["baseline"].append(time.process_time() - cpu)
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
    # Untimed, as in the roll measurement: the first append of a leader epoch writes the
    # leader-epoch checkpoint with an fsync (3-7 ms here), once per leadership, not per
    # batch, and the baseline has no counterpart to it.
    append(bytearray(batches[0]), LEADER_EPOCH)
    cpu = time.process_time()
    start = time.perf_counter()
    for batch in batches:
        append(batch, LEADER_EPOCH)
    elapsed = time.perf_counter() - start
    CPU_SECONDS["tierlog"].append(time.process_time() - cpu)
    if log.log_end_offset != (len(batches) + 1) * RECORDS_PER_BATCH or len(log.segments()) != 1:
        raise RuntimeError(f"unexpected log state after the run: {log!r}")
    log.delete()  # no close(): close() fsyncs, and the baseline does not
    return elapsed


def run(mb: int, rounds: int, base: Path) -> list[Result]:
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
        for seconds in CPU_SECONDS.values():
            seconds.clear()
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
    name = f"append 16 KiB batches, {mb} MiB"
    return [
        Result(name, "unbuffered file.write", median_mb_s(nbytes, base_s),
               median_mb_s(nbytes, tier_s), TARGET),
        Result(f"{name}, CPU time", "unbuffered file.write, CPU time",
               median_mb_s(nbytes, CPU_SECONDS["baseline"]),
               median_mb_s(nbytes, CPU_SECONDS["tierlog"]), TARGET),
    ]  # fmt: skip


def time_rolling(
    directory: Path, batches: list[bytearray], partitions: int, segment_bytes: int
) -> tuple[float, list[float], list[float]]:
    """Append ``batches`` to ``partitions`` logs in turn; the seconds in total, the
    latency of each append that did not roll and of each that did."""
    config = LogConfig(segment_bytes=segment_bytes)
    scheduler = Scheduler(threads=1, name="bench-flush")
    logs = [
        PartitionLog(directory / f"roll-{i}", "roll", i, config, scheduler=scheduler)
        for i in range(partitions)
    ]
    plain: list[float] = []
    rolled: list[float] = []
    clock = time.perf_counter
    try:
        for log in logs:  # untimed: the first append writes the leader-epoch checkpoint
            log.append_as_leader(bytearray(batches[0]), LEADER_EPOCH)
        start = clock()
        for i, batch in enumerate(batches):
            log = logs[i % partitions]
            segment = log.active_segment
            t0 = clock()
            log.append_as_leader(batch, LEADER_EPOCH)
            t1 = clock()
            (plain if log.active_segment is segment else rolled).append(t1 - t0)
        elapsed = clock() - start
    finally:
        scheduler.shutdown()
        for log in logs:
            log.delete()
    return elapsed, plain, rolled


def time_baseline_files(directory: Path, batches: list[bytearray], files: int) -> float:
    """Seconds to ``write`` the batches to ``files`` unbuffered files in turn."""
    paths = [directory / f"plain-{i}.log" for i in range(files)]
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(p, "wb", buffering=0)) for p in paths]
        start = time.perf_counter()
        for i, batch in enumerate(batches):
            handles[i % files].write(batch)
        elapsed = time.perf_counter() - start
    for path in paths:
        path.unlink()
    return elapsed


def run_rolling(mb: int, rounds: int, base: Path, partitions: int, segment_kib: int) -> None:
    total = mb * MiB
    directory = scratch_dir(base, "log_append_roll", 2 * total)
    results: list[Result] = []
    try:
        batches = _sequence(total)
        nbytes = len(batches) * BATCH_BYTES
        base_s: list[float] = []
        tier_s: list[float] = []
        plain: list[float] = []
        rolled: list[float] = []
        for i in range(rounds):
            sides = [0, 1] if i % 2 == 0 else [1, 0]
            for side in sides:
                if side == 0:
                    base_s.append(time_baseline_files(directory, batches, partitions))
                else:
                    elapsed, p, r = time_rolling(directory, batches, partitions, segment_kib * 1024)
                    tier_s.append(elapsed)
                    plain += p
                    rolled += r
        results.append(
            Result(
                f"append with rolls, {partitions} partitions, {segment_kib} KiB segments",
                "unbuffered file.write, no roll",
                median_mb_s(nbytes, base_s),
                median_mb_s(nbytes, tier_s),
                None,
            )
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print_table(results)
    plain.sort()
    every = sorted(plain + rolled)
    us = 1e6
    print(
        f"append latency over {len(every)} appends: median {every[len(every) // 2] * us:.0f} us, "
        f"p99 {every[int(len(every) * 0.99)] * us:.0f} us, max {every[-1] * us:.0f} us"
    )
    if rolled:
        print(
            f"{len(rolled)} appends rolled: mean {sum(rolled) / len(rolled) * us:.0f} us, "
            f"max {max(rolled) * us:.0f} us; the others: mean "
            f"{sum(plain) / len(plain) * us:.1f} us"
        )


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0], default_mb=256, default_rounds=3)
    parser.add_argument(
        "--roll-partitions",
        type=int,
        default=0,
        help="measure rolls: append to this many logs with small segments",
    )
    parser.add_argument("--segment-kib", type=int, default=1024, help="segment.bytes in KiB")
    args = parser.parse_args(argv)
    print(describe_machine(args.dir))
    if args.roll_partitions > 0:
        run_rolling(args.mb, args.rounds, args.dir, args.roll_partitions, args.segment_kib)
        return 0
    print_table(run(args.mb, args.rounds, args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
