"""Run every log benchmark and print one table (``make bench``).

Defaults take about 20 s on a 2-core VM and write at most ~1.1 GiB to ``bench-data/``
(deleted afterwards); ``--quick`` shrinks every size for a smoke run of a few seconds.

    python -m bench.run_all [--quick] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import log_append, log_read, log_recovery
from bench._common import DEFAULT_DIR, Result, describe_machine, print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer rounds")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="scratch directory")
    args = parser.parse_args(argv)
    if args.quick:
        append_mb, read_mb, recovery_mb, rounds = 64, 64, 256, 3
    else:
        append_mb, read_mb, recovery_mb, rounds = 256, 256, 1024, 5
    log_recovery.quiet_recovery_warnings()
    print(describe_machine(args.dir))
    start = time.perf_counter()
    results: list[Result] = []
    print(f"append: {append_mb} MiB x {rounds} rounds per side ...", flush=True)
    results.append(log_append.run(append_mb, rounds, args.dir))
    print(f"read: {read_mb} MiB x {3 * rounds} rounds per side ...", flush=True)
    results.append(log_read.run(read_mb, 3 * rounds, args.dir))
    print(f"recovery: {recovery_mb} MiB x 3 rounds ...", flush=True)
    results.extend(log_recovery.run(recovery_mb, 3, args.dir))
    print_table(results, [("elapsed", f"{time.perf_counter() - start:.0f} s")])
    # A miss is a finding to report, not a failure: benchmarks never gate the build.
    return 0


if __name__ == "__main__":
    sys.exit(main())
