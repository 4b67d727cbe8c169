"""Run every log benchmark and print one table (``make bench``).

Defaults take about 40 s on a 2-core VM and write at most ~1.1 GiB to ``bench-data/``
(deleted afterwards); ``--quick`` shrinks every size for a smoke run of a few seconds. They
include ``bench.tiering_local`` (tiering to the local-dir tier vs ``shutil.copyfile`` while
producing, 64 MiB x 3 rounds; 32 MiB x 2 with ``--quick``).

``--broker`` adds the broker benchmarks (tierlog and the null broker as child processes,
driven by confluent-kafka): throughput with 1,000,000 messages of 100 B and of 1 KiB per
server (about 1 minute, ~2 GiB of scratch space), acks=1 latency at 10 MB/s for 10 s
(about 25 s) and long-poll wake-up latency and idle cost (``bench.long_poll``, about 1
minute); with ``--quick``, 100,000 messages, 3 s and 20 records (about 45 s in all). They
are opt-in so that the default ``make bench`` stays short.

``--restart`` adds ``bench.restart`` (restart after a crash with 1,000 and 250 segments of
1 MiB behind the recovery point; about 1.5 minutes and 1.3 GiB of scratch space, most of it
building the logs, which is why it is not in the default run).

``--tiering`` adds the tiered-storage benchmarks of ``bench.tiering`` (copy to S3 vs boto3,
consumers from the remote tier vs local, produce latency with tiering on vs off) and
``bench.remote_read_s3`` (a consumer reading back from S3 through the broker vs raw boto3
ranged GETs); about 9 minutes, 4 with ``--quick``.

    python -m bench.run_all [--quick] [--broker] [--restart] [--tiering] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import (
    broker_latency,
    broker_throughput,
    log_append,
    log_read,
    log_recovery,
    long_poll,
    remote_read_s3,
    restart,
    tiering,
    tiering_local,
)
from bench._common import DEFAULT_DIR, Result, describe_machine, print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer rounds")
    parser.add_argument(
        "--broker",
        action="store_true",
        help="also run the broker throughput and latency benchmarks (about 1.5 min)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="also run the restart-after-a-crash benchmark (about 1.5 min)",
    )
    parser.add_argument(
        "--tiering",
        action="store_true",
        help="also run the tiered-storage benchmarks (about 8 min)",
    )
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
    results.extend(log_append.run(append_mb, rounds, args.dir))
    print(f"read: {read_mb} MiB x {3 * rounds} rounds per side ...", flush=True)
    results.append(log_read.run(read_mb, 3 * rounds, args.dir))
    print(f"recovery: {recovery_mb} MiB x 3 rounds ...", flush=True)
    results.extend(log_recovery.run(recovery_mb, 3, args.dir))
    tl_mb, tl_rounds = (32, 2) if args.quick else (64, 3)
    print(f"tiering to the local-dir tier: {tl_mb} MiB x {tl_rounds} rounds ...", flush=True)
    tiered_copy = tiering_local.summary(tiering_local.run(args.dir, tl_mb, tl_rounds, 20.0))
    print_table(results, [("elapsed", f"{time.perf_counter() - start:.0f} s")])
    print(tiered_copy, flush=True)
    if args.broker:
        run_broker(args.quick, args.dir)
    if args.restart:
        restart.main(["--dir", str(args.dir)] + (["--rounds", "2"] if args.quick else []))
    if args.tiering:
        tiering.main(["--dir", str(args.dir)] + (["--quick"] if args.quick else []))
        remote_read_s3.main(["--dir", str(args.dir)] + (["--quick"] if args.quick else []))
    # A miss is a finding to report, not a failure: benchmarks never gate the build.
    return 0


def run_broker(quick: bool, base: Path) -> None:
    messages = broker_throughput.QUICK_MESSAGES if quick else broker_throughput.FULL_MESSAGES
    seconds = 3.0 if quick else 10.0
    start = time.perf_counter()
    print(f"\nbroker throughput: {messages:,} messages per size and server ...", flush=True)
    floor = broker_throughput.page_cache_floor(base / "broker-floor", messages * 1024)
    phases = broker_throughput.run(messages, broker_throughput.SIZES, base)
    broker_throughput.print_table(broker_throughput.medians(phases), floor)
    print(f"\nbroker latency: acks=1, 1 KiB at 10 MB/s for {seconds:.0f} s per server ...")
    latencies = broker_latency.run(base, seconds=seconds)
    broker_latency.print_table(latencies, 1024, 10.0, 0)
    samples, idle = (20, 2.0) if quick else (50, 5.0)
    print(f"\nlong poll: {samples} records and {idle:g} s idle per server and client ...")
    polls = long_poll.run(base, samples=samples, idle=idle)
    long_poll.print_table(polls, idle)
    print(f"broker elapsed: {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
