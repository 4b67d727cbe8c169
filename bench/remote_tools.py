"""Operator tools over the bucket (issue 18): ``tierlog restore`` and ``tierlog metadata
verify`` against listing the same bucket with boto3 alone, in the same run.

    python -m bench.remote_tools [--segments 1000] [--partitions 4] [--rounds 3] [--quick]
                                 [--profile-verify] [--verify-threads 4,16]

Setup (untimed): moto's S3 server in a child process (``moto-process``: no GIL shared with
the tools), one bucket holding a tiered topic of ``--segments`` remote segments over
``--partitions`` partitions, copied by ``S3RemoteStorageManager`` (six objects each: log,
offset and time indexes, producer snapshot, leader-epoch checkpoint, manifest) with the
topic manifest a broker writes; then one restore into a broker log dir, which gives
``verify`` its ``__remote_log_metadata`` (read offline, ``--log-dirs``).

Timed, in this process, each side in turn (the order rotating each round), median of the
rounds:

* baseline: a boto3 client (from a warm session) listing every object of the bucket with
  ``list_objects_v2`` pages;
* floor (no target): the same listing, then a GET of every segment manifest on 8 threads,
  the requests both tools cannot do without (restore needs each segment's metadata, verify
  each manifest's object sizes);
* restore: ``tierlog restore --config F --topic T`` into an empty log dir (the dir is
  recreated, untimed, before each round);
* verify: ``tierlog metadata verify --log-dirs D --rsm-config F`` (without ``--deep``).

Targets (per 1,000 segments, as ratios to the listing): restore <= 3x, verify <= 2x.
Prints a table; never asserts. ``--profile-verify`` runs verify once more under cProfile
after the rounds and prints where its time goes (the functions with the most cumulative
time, across all threads' waits as seen from the main thread). ``--verify-threads`` adds a
verify row per thread count given (``--threads``; the default row uses 8).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from bench._common import DEFAULT_DIR, build_pool, describe_machine
from core.log.config import LogConfig
from core.log.leader_epoch import EpochEntry, LeaderEpochCheckpointFile
from core.log.partition_log import PartitionLog
from core.log.producer_state import encode_snapshot
from rsm_plugins.layout import TopicManifest
from tiered.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from tierlog.cli import main as tierlog_main
from tierlog.remote_storage_config import open_object_store_rsm

REPO = Path(__file__).resolve().parents[1]
TOPIC = "bench-restore"
BUCKET = "tierlog-bench-tools"
RESTORE_TARGET = 3.0
VERIFY_TARGET = 2.0
OFFSETS_PER_SEGMENT = 100
READ_THREADS = 8  # the tools' default --threads


def _launcher() -> ModuleType:
    path = REPO / "localstack" / "launcher.py"
    spec = importlib.util.spec_from_file_location("tierlog_bench_tools_launcher", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _segment_files(directory: Path) -> tuple[LogSegmentData, int]:
    """One real rolled segment (written by core's PartitionLog), reused for every copy."""
    log = PartitionLog(directory / "src-0", "src", 0, LogConfig(segment_bytes=1 << 30))
    for batch in build_pool(4):
        log.append_as_leader(batch, 0)
    segment = log.segments()[0]
    log.roll()
    log.flush()
    snapshot = directory / "snapshot"
    snapshot.write_bytes(encode_snapshot([]))
    data = LogSegmentData(
        log_segment=segment.log.path,
        offset_index=segment.offset_index.path,
        time_index=segment.time_index.path,
        transaction_index=None,
        producer_snapshot_index=snapshot,
        leader_epoch_index=LeaderEpochCheckpointFile.encode([EpochEntry(0, 0)]),
    )
    return data, segment.size


def fill_bucket(props: dict[str, str], scratch: Path, segments: int, partitions: int) -> None:
    rsm = open_object_store_rsm(props)
    data, size = _segment_files(scratch)
    topic_id = uuid.uuid4()

    def copy(i: int) -> None:
        partition, n = i % partitions, i // partitions
        tp = TopicIdPartition(topic_id, TOPIC, partition)
        start = n * OFFSETS_PER_SEGMENT
        md = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tp, uuid.uuid4()), start, start + OFFSETS_PER_SEGMENT - 1,
            max_timestamp_ms=1_700_000_000_000 + start, broker_id=1,
            event_timestamp_ms=1_700_000_000_000 + start, segment_size_in_bytes=size,
            segment_leader_epochs={0: start}, txn_index_empty=True,
        )  # fmt: skip
        rsm.copy_log_segment_data(md, data)

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(copy, range(segments)))
        rsm.write_topic_manifest(
            TopicManifest(topic_id, TOPIC, partitions, {"remote.storage.enable": "true",
                                                        "retention.ms": "-1"}, 1, 1)
        )  # fmt: skip
    finally:
        rsm.close()


def run_tool(argv: list[str]) -> None:
    """The ``tierlog`` command in process, its output swallowed; it must succeed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = tierlog_main(argv)
    if code != 0:
        raise SystemExit(f"tierlog {' '.join(argv)} exited {code}:\n{err.getvalue()[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200 segments, 2 rounds")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--profile-verify", action="store_true")
    parser.add_argument(
        "--verify-threads",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[],
        metavar="N,N",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.segments, args.rounds = 200, 2
    print(describe_machine(args.dir))
    scratch = args.dir / "remote-tools"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    endpoint = _launcher().start_s3_endpoint("moto-process")
    try:
        endpoint.create_bucket(BUCKET)
        props = {
            "remote.log.storage.manager.class.name": "rsm_plugins.s3.S3RemoteStorageManager",
            **{f"rsm.config.{k}": v for k, v in endpoint.rsm_configs(BUCKET).items() if v},
        }
        began = time.perf_counter()
        fill_bucket(props, scratch, args.segments, args.partitions)
        print(f"setup: {args.segments} segments copied in {time.perf_counter() - began:.1f} s")
        broker = {
            **props,
            "node.id": "1",
            "remote.log.storage.system.enable": "true",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "10",
        }
        restored_dir = scratch / "restored"
        config = scratch / "server.properties"
        config.write_text(
            "".join(f"{k}={v}\n" for k, v in {**broker, "log.dirs": restored_dir}.items())
        )
        verify_dir = scratch / "verify-broker"
        verify_config = scratch / "verify.properties"
        verify_config.write_text(
            "".join(f"{k}={v}\n" for k, v in {**broker, "log.dirs": verify_dir}.items())
        )
        run_tool(["restore", "--config", str(verify_config), "--topic", TOPIC])

        client = endpoint.client()  # the session warm, as the plugin's is

        def listing() -> None:
            c = endpoint.client()
            pages = c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
            n = sum(len(p.get("Contents", [])) for p in pages)
            assert n >= 6 * args.segments, n
            c.close()

        def listing_and_manifests() -> None:
            # The floor of both tools: the listing, plus a GET of every segment manifest on
            # as many threads as the tools use (reported, no target).
            c = endpoint.client()
            pages = c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
            keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
            manifests = [k for k in keys if k.endswith(".manifest.json")]
            assert len(manifests) == args.segments, len(manifests)

            def get(key: str) -> bytes:
                return c.get_object(Bucket=BUCKET, Key=key)["Body"].read()

            with ThreadPoolExecutor(READ_THREADS) as pool:
                assert all(pool.map(get, manifests))
            c.close()

        def restore() -> None:
            run_tool(["restore", "--config", str(config), "--topic", TOPIC])

        def verify() -> None:
            run_tool(["metadata", "verify", "--log-dirs", str(verify_dir),
                      "--rsm-config", str(config)])  # fmt: skip

        def verify_on(threads: int) -> Callable[[], None]:
            argv = ["metadata", "verify", "--log-dirs", str(verify_dir)]
            return lambda: run_tool([*argv, "--rsm-config", str(config), "--threads", str(threads)])

        sides: list[tuple[str, Callable[[], None], Callable[[], None] | None]] = [
            ("list", listing, None),
            ("list+get", listing_and_manifests, None),
            ("restore", restore, lambda: shutil.rmtree(restored_dir, ignore_errors=True)),
            ("verify", verify, None),
            *((f"verify --threads {n}", verify_on(n), None) for n in args.verify_threads),
        ]
        times: dict[str, list[float]] = {name: [] for name, _, _ in sides}
        for r in range(args.rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for name, fn, prepare in order:
                if prepare is not None:
                    prepare()
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        if args.profile_verify:
            profile(verify)
        client.close()
    finally:
        endpoint.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    report(times, args.segments)
    return 0


def profile(fn: Callable[[], None]) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(fn)
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(25)


def report(times: dict[str, list[float]], segments: int) -> None:
    per_k = 1000 / segments
    base = statistics.median(times["list"])
    print()
    print("| operation | seconds per 1,000 segments | vs boto3 listing | target | result |")
    print("|---|---:|---:|---:|---|")
    print(f"| boto3 list_objects_v2 (baseline) | {base * per_k:.2f} | 1.00 | - | - |")
    floor = statistics.median(times["list+get"])
    print(
        f"| boto3 listing + GET of every segment manifest ({READ_THREADS} threads; no target) "
        f"| {floor * per_k:.2f} | {floor / base:.2f} | - | - |"
    )
    for name, label, target in (
        ("restore", "tierlog restore", RESTORE_TARGET),
        ("verify", "tierlog metadata verify (no --deep)", VERIFY_TARGET),
    ):
        seconds = statistics.median(times[name])
        ratio = seconds / base
        verdict = "PASS" if ratio <= target else "MISS"
        print(f"| {label} | {seconds * per_k:.2f} | {ratio:.2f} | <= {target:.0f}x | {verdict} |")
    for name in sorted(k for k in times if k.startswith("verify --threads")):
        seconds = statistics.median(times[name])
        print(f"| tierlog metadata {name} | {seconds * per_k:.2f} | {seconds / base:.2f} | - | - |")
    rounds: dict[str, Any] = {k: [round(t, 2) for t in v] for k, v in times.items()}
    print(f"rounds (s): {rounds}")


if __name__ == "__main__":
    sys.exit(main())
