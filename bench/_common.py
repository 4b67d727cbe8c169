"""Helpers shared by the benchmarks: batches, scratch directories, timing and the table.

Every benchmark times tierlog and a plain-Python baseline doing the same work on the same
bytes, in the same process, on the same file system, alternating which side goes first in
each round, and reports the median of the rounds. Ratios, not absolute numbers, are the
result: absolute MB/s depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.records.batch import NO_PARTITION_LEADER_EPOCH
from core.records.builder import RecordBatchBuilder

MiB = 1024 * 1024
KiB = 1024
BATCH_BYTES = 16 * KiB
RECORDS_PER_BATCH = 16
# The leader epoch every benchmark appends with; any non-negative epoch works.
LEADER_EPOCH = 0

# Scratch space: bench-data/ at the repository root (git-ignored, removed by `make clean`),
# unless --dir says otherwise. Baseline and tierlog files always share one directory, hence
# one file system.
DEFAULT_DIR = Path(__file__).resolve().parent.parent / "bench-data"


def build_batch(seed: int, size: int = BATCH_BYTES, records: int = RECORDS_PER_BATCH) -> bytearray:
    """One uncompressed RecordBatch v2 of exactly ``size`` bytes with random values.

    Values come from ``os.urandom`` so that nothing on either side (or the file system) can
    profit from compressible data. The last record's value is sized so the batch is exact.

    Raises:
        ValueError: ``size`` too small for ``records`` records.
    """
    timestamp = 1_700_000_000_000 + seed
    key = f"key-{seed}".encode()

    def encode(last_value_len: int, value_len: int) -> bytearray:
        builder = RecordBatchBuilder(partition_leader_epoch=NO_PARTITION_LEADER_EPOCH)
        for i in range(records - 1):
            builder.append(os.urandom(value_len), key=key, timestamp=timestamp + i)
        builder.append(os.urandom(last_value_len), key=key, timestamp=timestamp + records)
        return builder.build()

    value_len = max(1, size // records - 32)
    probe = encode(value_len, value_len)
    last = value_len + (size - len(probe))
    # A varint length prefix may change width by a byte; settle within a few steps.
    for _ in range(8):
        if last < 0:
            break
        batch = encode(last, value_len)
        if len(batch) == size:
            return batch
        last += size - len(batch)
    raise ValueError(f"cannot build a batch of exactly {size} bytes with {records} records")


def build_pool(count: int) -> list[bytearray]:
    """``count`` distinct batches, built once; benchmarks cycle through them."""
    return [build_batch(i) for i in range(count)]


@dataclass(frozen=True, slots=True)
class Result:
    """One benchmark line: the median MB/s of each side over the rounds."""

    name: str
    baseline_label: str
    baseline_mb_s: float
    tierlog_mb_s: float
    target: float | None  # the ratio to reach; None when only reported

    @property
    def ratio(self) -> float:
        return self.tierlog_mb_s / self.baseline_mb_s if self.baseline_mb_s else 0.0

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "-"
        return "PASS" if self.ratio >= self.target else "MISS"


def median_mb_s(nbytes: int, seconds: list[float]) -> float:
    return nbytes / MiB / statistics.median(seconds)


def print_table(results: list[Result], extra: list[tuple[str, str]] | None = None) -> None:
    """Print the results as a Markdown table (pasteable into docs/BENCHMARKS.md)."""
    print()
    print("| benchmark | baseline | baseline MB/s | tierlog MB/s | ratio | target | result |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in results:
        target = f">= {r.target:.2f}" if r.target is not None else "-"
        print(
            f"| {r.name} | {r.baseline_label} | {r.baseline_mb_s:,.0f} | {r.tierlog_mb_s:,.0f} "
            f"| {r.ratio:.2f} | {target} | {r.verdict} |"
        )
    for key, value in extra or []:
        print(f"{key}: {value}")
    sys.stdout.flush()


def timed(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def scratch_dir(base: Path, name: str, needed_bytes: int) -> Path:
    """A fresh directory ``base/name``, after checking the file system has room.

    Raises:
        SystemExit: less than twice ``needed_bytes`` free (the margin covers the two sides
            and the page cache's delayed frees).
    """
    base.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(base).free
    if free < 2 * needed_bytes:
        raise SystemExit(
            f"{base}: {free / MiB:,.0f} MiB free, {2 * needed_bytes / MiB:,.0f} MiB needed"
        )
    path = base / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    return path


def fs_type(path: Path) -> str:
    """The file system type holding ``path``, from /proc/mounts (Linux); '?' elsewhere."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "?"
    best, best_type = "", "?"
    resolved = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and resolved.startswith(parts[1]) and len(parts[1]) > len(best):
            best, best_type = parts[1], parts[2]
    return best_type


def describe_machine(path: Path) -> str:
    return (
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"data in {path} ({fs_type(path)})"
    )


def base_parser(description: str, default_mb: int, default_rounds: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--mb", type=int, default=default_mb, help=f"MiB per side (default {default_mb})"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=default_rounds,
        help=f"timed rounds per side; the median is reported (default {default_rounds})",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        help=f"scratch directory, same file system for both sides (default {DEFAULT_DIR})",
    )
    return parser
