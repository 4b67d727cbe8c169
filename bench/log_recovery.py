"""Recovery time of a log with a torn tail, vs. reading the files and checksumming them.

A log of ``--mb`` MiB (default 1 GiB) of 16 KiB batches is written with 256 MiB segments
(``segment.bytes=268435456``, so four segments at 1 GiB), closed, and then made to look like
a crash: the producer snapshot written by ``close()`` at the log end is removed (a crashed
broker never writes it) and the first half of a further batch is appended to the last
segment (a torn write). tierlog's side is the constructor with
``had_clean_shutdown=False, recovery_point=0``: every batch of every segment is validated
(framing, magic, CRC-32C, offsets), the indexes are rebuilt, the torn tail is truncated and
producer state is rebuilt. Each round tears the tail again.

Two baselines over the same ``.log`` files, both reading in 8 MiB chunks as recovery does:

- ``read + crc32c`` (the floor): read each file and CRC-32C every chunk whole. No format
  work at all; nothing can recover faster. The target (issue 19) is >= 0.5x of it.
- ``read + crc32c per batch``: the same reads, walking the batch length fields and
  CRC-32C-ing each batch's checked range, i.e. the least a Python validator must do.

By default the page cache is warm for both sides (the files were just written). With
``--cold`` each side starts after ``posix_fadvise(DONTNEED)`` on the log files, so the
reads come from the disk.

    python -m bench.log_recovery [--mb 1024] [--rounds 3] [--cold] [--dir bench-data]
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import crc32c

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
from core.log.files import SNAPSHOT_SUFFIX, filename_prefix
from core.log.partition_log import PartitionLog
from core.records.batch import ATTRIBUTES_POS, HEADER, LENGTH_POS, LOG_OVERHEAD

TARGET = 0.5  # of the read + crc32c floor
SEGMENT_BYTES = 256 * MiB
CHUNK_BYTES = 8 * MiB  # as core.log.file_records.SCAN_CHUNK_BYTES
POOL_BATCHES = 64
_LENGTH = struct.Struct(">i")


def build_log(directory: Path, total_bytes: int, config: LogConfig) -> tuple[int, bytearray]:
    """Write and close the log; returns its end offset and a batch to tear the tail with."""
    log = PartitionLog(directory, "bench", 0, config)
    pool = build_pool(POOL_BATCHES)
    for i in range(total_bytes // BATCH_BYTES):
        log.append_as_leader(pool[i % len(pool)], LEADER_EPOCH)
    end = log.log_end_offset
    log.close()
    torn = bytearray(pool[0])
    HEADER.pack_into(torn, 0, end, *HEADER.unpack_from(torn)[1:])  # a plausible next batch
    return end, torn


def simulate_crash(directory: Path, end_offset: int, torn_batch: bytearray) -> int:
    """Remove the clean-shutdown snapshot and append half a batch; returns the good size."""
    (directory / f"{filename_prefix(end_offset)}{SNAPSHOT_SUFFIX}").unlink(missing_ok=True)
    last = max(directory.glob("*.log"))
    good = last.stat().st_size
    with open(last, "ab") as f:
        f.write(torn_batch[: len(torn_batch) // 2])
    return good


def quiet_recovery_warnings() -> None:
    """Recovery logs a warning per torn tail; here the torn tail is the point."""
    logging.getLogger("core.log").setLevel(logging.ERROR)


def log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def evict(paths: list[Path]) -> None:
    """Drop the files' clean pages from the page cache (Linux; a no-op elsewhere)."""
    if not hasattr(os, "posix_fadvise"):
        return
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def time_floor(paths: list[Path]) -> tuple[float, int]:
    """Seconds to read every file in 8 MiB chunks into one buffer and CRC-32C each chunk."""
    nbytes = 0
    buf = bytearray(CHUNK_BYTES)
    view = memoryview(buf)
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                crc32c.crc32c(view[:n])
                nbytes += n
    return time.perf_counter() - start, nbytes


def time_per_batch(paths: list[Path]) -> tuple[float, int]:
    """Seconds to read in 8 MiB chunks and CRC-32C each whole batch's checked range.

    A batch cut by a chunk boundary is moved to the front of the buffer and completed by
    the next read. Stops at a torn tail as recovery does; returns the valid bytes seen.
    """
    nbytes = 0
    buf = bytearray(CHUNK_BYTES)
    view = memoryview(buf)
    unpack_length = _LENGTH.unpack_from
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            left = 0
            while n := f.readinto(view[left:]):
                end = left + n
                pos = 0
                while pos + LOG_OVERHEAD <= end:
                    size = unpack_length(buf, pos + LENGTH_POS)[0] + LOG_OVERHEAD
                    if pos + size > end:
                        break
                    crc32c.crc32c(view[pos + ATTRIBUTES_POS : pos + size])
                    pos += size
                nbytes += pos
                left = end - pos
                buf[:left] = view[pos:end]
    return time.perf_counter() - start, nbytes


def time_recovery(
    directory: Path, config: LogConfig, end_offset: int, good_size: int
) -> tuple[float, int]:
    """Seconds to open the log after a crash; bytes recovered. The log is closed after."""
    start = time.perf_counter()
    log = PartitionLog(directory, "bench", 0, config, had_clean_shutdown=False, recovery_point=0)
    elapsed = time.perf_counter() - start
    try:
        if log.log_end_offset != end_offset or log.active_segment.size != good_size:
            raise RuntimeError(
                f"recovery ended at {log.log_end_offset} with {log.active_segment.size} bytes "
                f"in the last segment; expected {end_offset} and {good_size}"
            )
        nbytes = log.size
    finally:
        log.close()
    return elapsed, nbytes


def run(mb: int, rounds: int, base: Path, cold: bool = False) -> list[Result]:
    total = mb * MiB
    config = LogConfig(segment_bytes=SEGMENT_BYTES)
    directory = scratch_dir(base, "log_recovery", total)
    log_dir = directory / "bench-0"
    floor_s: list[float] = []
    batch_s: list[float] = []
    recovery_s: list[float] = []
    # CPU seconds too: with other work on the machine, wall time moves more than CPU time.
    floor_cpu: list[float] = []
    recovery_cpu: list[float] = []
    try:
        end_offset, torn = build_log(log_dir, total, config)
        if end_offset != total // BATCH_BYTES * RECORDS_PER_BATCH:
            raise RuntimeError(f"log end offset {end_offset} after the build")
        nbytes = 0
        for i in range(rounds):
            good = simulate_crash(log_dir, end_offset, torn)
            paths = log_files(log_dir)
            # Rounds alternate which side goes first. A baseline after recovery reads the
            # files without the 8 KiB torn tail; the difference is below 0.001 %.
            for side in ("baselines", "recovery") if i % 2 == 0 else ("recovery", "baselines"):
                if side == "recovery":
                    if cold:
                        evict(paths)
                    cpu = time.process_time()
                    elapsed, nbytes = time_recovery(log_dir, config, end_offset, good)
                    recovery_cpu.append(time.process_time() - cpu)
                    recovery_s.append(elapsed)
                    continue
                for timer, out in ((time_floor, floor_s), (time_per_batch, batch_s)):
                    if cold:
                        evict(paths)
                    cpu = time.process_time()
                    out.append(timer(paths)[0])
                    if timer is time_floor:
                        floor_cpu.append(time.process_time() - cpu)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    seconds = sorted(recovery_s)[len(recovery_s) // 2]
    cache = "cold" if cold else "warm"
    name = f"recovery, {mb} MiB, 256 MiB segments, torn tail, {cache} cache ({seconds:.2f} s)"
    return [
        Result(name, "read + crc32c (floor)", median_mb_s(nbytes, floor_s),
               median_mb_s(nbytes, recovery_s), TARGET),
        Result(name, "read + crc32c per batch", median_mb_s(nbytes, batch_s),
               median_mb_s(nbytes, recovery_s), None),
        Result(f"{name}, CPU time", "read + crc32c (floor), CPU time",
               median_mb_s(nbytes, floor_cpu), median_mb_s(nbytes, recovery_cpu), TARGET),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0], default_mb=1024, default_rounds=3)
    parser.add_argument(
        "--cold", action="store_true", help="evict the log files from the page cache first"
    )
    args = parser.parse_args(argv)
    quiet_recovery_warnings()
    print(describe_machine(args.dir))
    print_table(run(args.mb, args.rounds, args.dir, args.cold))
    return 0


if __name__ == "__main__":
    sys.exit(main())
