"""Log compaction throughput, vs. the least a Python cleaner must do with the same bytes.

A compacted log of ``--mb`` MiB is written: batches of 16 records with 100-byte values over
``--keys`` keys (so most records are superseded), 1 MiB segments. tierlog's side is one
``LogCleaner.clean_once()`` over a fresh copy of the log: the offset map over the dirty
range, the rewrite of every inactive segment, the swap and the checkpoint.

The baseline reads the same ``.log`` files, decodes every record (``decode_records``, the
same decoder) keeping a dict of key -> latest offset, then reads and decodes them again and
writes the surviving records' batches, unmodified, to a scratch file: the two passes and
the writes of a cleaner without any of the bookkeeping (no indexes, no swap, no rebuilt
batches). Throughput is the dirty log's size over the time; the ratio is tierlog / baseline.

    python -m bench.cleaner [--mb 64] [--keys 10000] [--rounds 3] [--dir bench-data]
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from bench._common import (
    LEADER_EPOCH,
    MiB,
    Result,
    base_parser,
    describe_machine,
    median_mb_s,
    print_table,
    scratch_dir,
)
from core.log.cleaner import CleanerConfig, LogCleaner
from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.records.batch import RecordBatchHeader
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records

RECORDS_PER_BATCH = 16
VALUE_BYTES = 100
CONFIG = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=MiB,
    min_cleanable_dirty_ratio=0.0,
)


def build_log(directory: Path, total_bytes: int, keys: int) -> int:
    """Write and close the compacted log; returns the number of records."""
    log = PartitionLog(directory, "bench", 0, CONFIG)
    written = n = 0
    while written < total_bytes:
        builder = RecordBatchBuilder()
        for _ in range(RECORDS_PER_BATCH):
            builder.append(os.urandom(VALUE_BYTES), key=b"key-%08d" % (n % keys), timestamp=n)
            n += 1
        batch = builder.build()
        log.append_as_leader(batch, LEADER_EPOCH)
        written += len(batch)
    log.update_high_watermark(log.log_end_offset)
    log.close()
    return n


def tierlog_clean(directory: Path) -> float:
    log = PartitionLog(directory, "bench", 0, CONFIG, had_clean_shutdown=True)
    cleaner = LogCleaner(CleanerConfig(), lambda: [log])
    start = time.perf_counter()
    stats = cleaner.clean_once()
    elapsed = time.perf_counter() - start
    assert stats is not None and stats.segments_cleaned > 0
    log.close()
    return elapsed


def baseline_clean(directory: Path, out: Path) -> float:
    start = time.perf_counter()
    files = sorted(directory.glob("*.log"))[:-1]  # never the active segment
    latest: dict[bytes, int] = {}
    for path in files:
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            header = RecordBatchHeader(data, pos)
            for r in decode_records(header, verify=False):
                latest[r.key or b""] = r.offset
            pos += header.size_in_bytes
    with open(out, "wb") as f:
        for path in files:
            data = path.read_bytes()
            pos = 0
            while pos < len(data):
                header = RecordBatchHeader(data, pos)
                size = header.size_in_bytes
                if any(latest[r.key or b""] == r.offset for r in decode_records(header)):
                    f.write(data[pos : pos + size])
                pos += size
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - start


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0], default_mb=64, default_rounds=3)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys (10000)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    total = args.mb * MiB
    root = scratch_dir(args.dir, "cleaner", 3 * total)
    source = root / "source" / "bench-0"
    records = build_log(source, total, args.keys)
    dirty = sum(p.stat().st_size for p in sorted(source.glob("*.log"))[:-1])
    print(describe_machine(root))
    print(f"{records:,} records over {args.keys:,} keys, {dirty / MiB:,.0f} MiB to clean")
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(args.rounds):
        sides = [("tierlog", ours), ("baseline", theirs)]
        for name, times in sides if i % 2 == 0 else reversed(sides):
            work = root / f"round-{i}-{name}" / "bench-0"
            shutil.copytree(source, work)
            if name == "tierlog":
                times.append(tierlog_clean(work))
            else:
                times.append(baseline_clean(work, work.parent / "cleaned.bin"))
            shutil.rmtree(work.parent)
    print_table(
        [
            Result(
                "compaction (offset map + rewrite + swap)",
                "read, decode twice, write kept batches",
                median_mb_s(dirty, theirs),
                median_mb_s(dirty, ours),
                None,
            )
        ]
    )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
