"""RLMM cache: the columnar RemoteLogMetadataCache against a naive dict-of-dataclasses cache.

    .venv/bin/python -m bench.rlmm_cache [--segments 2600000] [--naive-segments 500000]

Each side runs in a fresh child process (so that resident memory is the cache's alone) on
the same synthetic partition: contiguous segments of 1k-200k offsets, one a second, a leader
change every 50k segments (the boundary segment carries both epochs), each segment added as
COPY_SEGMENT_STARTED then updated to COPY_SEGMENT_FINISHED, as the broker does. Measured:

* memory: RSS delta (``/proc/self/statm``) across building, after ``gc.collect()``; the
  input objects are made one at a time and dropped, so only the cache stays resident;
* lookup: ``remote_log_segment_metadata(epoch, offset)`` at random offsets with their
  epoch, per-call ``perf_counter_ns``, p50 and p99;
* scan: the whole partition through ``list_page(cursor, count)``, the longest page;
* restart: rebuilding from the list of the partition's metadata (``from_entries``), and
  the real snapshot file: ``rlmm.snapshot`` write, then read + ``from_entries``.

The naive cache keeps Kafka's layout in Python objects: a dict of segment id ->
RemoteLogSegmentMetadata, and per epoch a dict start offset -> id with a sorted key list.
It is built at ``--naive-segments`` and its memory extrapolated linearly to ``--segments``
(said so in the table). Prints a table; never asserts.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from rlmm.metadata_cache import RemoteLogMetadataCache
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(uuid.UUID(int=0x7E1E), "bench", 0)
EPOCH_EVERY = 50_000
MiB = 1024 * 1024


def segments(n: int, seed: int = 405) -> Iterator[RemoteLogSegmentMetadata]:
    """The synthetic partition, as COPY_SEGMENT_STARTED metadata, in offset order."""
    rnd = random.Random(seed)
    start, ts, epoch = 0, 1_700_000_000_000, 0
    for i in range(n):
        count = rnd.randrange(1_000, 200_000)
        ts += rnd.randrange(900, 1_100)
        if i and i % EPOCH_EVERY == 0:
            epoch += 1
            epochs = {epoch - 1: start, epoch: start + count // 2}
        else:
            epochs = {epoch: start}
        yield RemoteLogSegmentMetadata(
            RemoteLogSegmentId(TP, uuid.UUID(bytes=rnd.randbytes(16))),
            start,
            start + count - 1,
            max_timestamp_ms=ts,
            broker_id=epoch % 3,
            event_timestamp_ms=ts + rnd.randrange(5_000, 120_000),
            segment_size_in_bytes=rnd.randrange(900 * MiB, 1024 * MiB),
            segment_leader_epochs=epochs,
            txn_index_empty=True,
        )
        start += count


def finished(md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        md.remote_log_segment_id,
        md.event_timestamp_ms + 1,
        None,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        md.broker_id,
    )


class NaiveCache:
    """Kafka's RemoteLogMetadataCache layout in plain Python objects (the baseline)."""

    def __init__(self) -> None:
        self.by_id: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self.maps: dict[int, dict[int, RemoteLogSegmentId]] = {}
        self.keys: dict[int, list[int]] = {}
        self.sorted_ids: list[RemoteLogSegmentId] | None = None

    def add_copy_in_progress_segment(self, md: RemoteLogSegmentMetadata) -> None:
        self.by_id[md.remote_log_segment_id] = md
        self.sorted_ids = None

    def update_remote_log_segment_metadata(self, u: RemoteLogSegmentMetadataUpdate) -> None:
        md = self.by_id[u.remote_log_segment_id].create_with_update(u)
        self.by_id[u.remote_log_segment_id] = md
        for e, s in md.segment_leader_epochs.items():
            keys = self.keys.setdefault(e, [])
            if not keys or keys[-1] < s:
                keys.append(s)
            self.maps.setdefault(e, {})[s] = md.remote_log_segment_id

    def remote_log_segment_metadata(
        self, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        keys = self.keys.get(epoch)
        if not keys:
            return None
        i = bisect_right(keys, offset) - 1
        if i < 0:
            return None
        md = self.by_id[self.maps[epoch][keys[i]]]
        later = [s for e, s in md.segment_leader_epochs.items() if e > epoch]
        return md if offset <= (later[0] - 1 if later else md.end_offset) else None

    def list_page(
        self, cursor: int | None, count: int
    ) -> tuple[list[RemoteLogSegmentMetadata], int | None]:
        if self.sorted_ids is None:
            self.sorted_ids = sorted(self.by_id, key=lambda k: self.by_id[k].start_offset)
        i = cursor or 0
        page = [self.by_id[k] for k in self.sorted_ids[i : i + count]]
        return page, (i + count if i + count < len(self.sorted_ids) else None)


# -- one side, in a child process ---------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _percentile(sorted_ns: list[int], q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(len(sorted_ns) * q))] / 1000


def run_side(side: str, n: int, lookups: int, page: int, snapshot_n: int) -> dict[str, float]:
    rnd = random.Random(7)
    every = max(1, n // lookups)
    # Probe space allocated before the baseline, so that it is not counted as the cache's.
    probe_epochs = array("q", bytes(8 * (n // every + 1)))
    probe_offsets = array("q", bytes(8 * (n // every + 1)))
    gc.collect()
    base = _rss()
    cache: RemoteLogMetadataCache | NaiveCache = (
        RemoteLogMetadataCache(TP) if side == "columnar" else NaiveCache()
    )
    t0 = time.perf_counter()
    for i, md in enumerate(segments(n)):
        cache.add_copy_in_progress_segment(md)
        cache.update_remote_log_segment_metadata(finished(md))
        if i % every == 0:
            (epoch, first), *rest = md.segment_leader_epochs.items()
            last = rest[0][1] - 1 if rest else md.end_offset
            probe_epochs[i // every] = epoch
            probe_offsets[i // every] = rnd.randrange(first, last + 1)
    build = time.perf_counter() - t0
    del md
    gc.collect()
    out: dict[str, float] = {"segments": n, "build_s": build, "rss_bytes": _rss() - base}
    probes = list(zip(probe_epochs, probe_offsets, strict=True))
    rnd.shuffle(probes)
    lat: list[int] = []
    clock = time.perf_counter_ns
    for epoch, offset in probes:
        a = clock()
        found = cache.remote_log_segment_metadata(epoch, offset)
        lat.append(clock() - a)
        if found is None:
            raise AssertionError(f"lookup ({epoch}, {offset}) found nothing")
    lat.sort()
    out |= {"lookup_p50_us": _percentile(lat, 0.5), "lookup_p99_us": _percentile(lat, 0.99)}
    # The page target is wall time; on this shared VM a page can lose the CPU for tens of
    # ms, so each page's CPU time (thread_time) is taken too, and collections are timed.
    gc_ms: list[float] = []
    gc_at = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_at[0] = time.perf_counter()
        else:
            gc_ms.append((time.perf_counter() - gc_at[0]) * 1000)

    gc.callbacks.append(on_gc)
    t0 = time.perf_counter()
    worst = worst_cpu = 0.0
    seen = pages = over = 0
    cursor: str | int | None = None
    while True:
        a, ca = time.perf_counter(), time.thread_time()
        items, cursor = cache.list_page(cursor, page)  # type: ignore[arg-type]
        took, took_cpu = time.perf_counter() - a, time.thread_time() - ca
        worst, worst_cpu = max(worst, took), max(worst_cpu, took_cpu)
        over += took > 0.05
        pages += 1
        seen += len(items)
        del items
        if cursor is None:
            break
    gc.callbacks.remove(on_gc)
    out |= {
        "scan_s": time.perf_counter() - t0, "scan_max_page_ms": worst * 1000,
        "scan_max_page_cpu_ms": worst_cpu * 1000, "scan_pages": pages,
        "scan_pages_over_50ms": over, "scan_gc_count": len(gc_ms),
        "scan_gc_max_ms": max(gc_ms, default=0.0),
    }  # fmt: skip
    if seen != n:
        raise AssertionError(f"scan returned {seen} of {n} segments")
    if snapshot_n and isinstance(cache, RemoteLogMetadataCache):
        out |= _restart(cache, n, min(n, snapshot_n))
    return out


def _restart(cache: RemoteLogMetadataCache, n: int, snapshot_n: int) -> dict[str, float]:
    from rlmm import native
    from rlmm.serde import RemoteLogSegmentMetadataSnapshot
    from rlmm.snapshot import Snapshot, open_snapshot_stream, write_snapshot

    entries = list(cache.entries())
    t0 = time.perf_counter()
    rebuilt = RemoteLogMetadataCache.from_entries(TP, entries)
    out = {"rebuild_list_s": time.perf_counter() - t0}
    if len(rebuilt) != n:
        raise AssertionError("rebuild lost segments")
    del rebuilt
    records = [RemoteLogSegmentMetadataSnapshot.from_metadata(md) for md in entries[:snapshot_n]]
    del entries
    n = out["snapshot_segments"] = snapshot_n
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "remote_log_snapshot"
        t0 = time.perf_counter()
        write_snapshot(path, Snapshot(0, n, records))
        out["snapshot_write_s"] = time.perf_counter() - t0
        out["snapshot_bytes"] = path.stat().st_size
        del records
        gc.collect()
        # What the broker does at start-up (TopicBasedRemoteLogMetadataManager._load_snapshot):
        # the file streamed into the cache, runs of usual entries decoded to columns.
        t0, c0 = time.perf_counter(), time.process_time()
        stream = open_snapshot_stream(path)
        assert stream is not None
        rebuilt = RemoteLogMetadataCache.from_entries(TP, stream.entries, count=stream.count)
        out["snapshot_load_s"] = time.perf_counter() - t0
        out["snapshot_load_cpu_s"] = time.process_time() - c0
        if len(rebuilt) != n:
            raise AssertionError("snapshot rebuild lost segments")
        out["restore_path"] = "compiled" if native.COMPILED is not None else "pure-python"
    return out


# -- the parent: both sides, a table ------------------------------------------------------


def _child(side: str, n: int, args: argparse.Namespace, snapshot_n: int) -> dict[str, float]:
    cmd = [
        sys.executable, "-m", "bench.rlmm_cache", "--child", side, "--segments", str(n),
        "--lookups", str(args.lookups), "--page", str(args.page),
        "--snapshot-segments", str(snapshot_n),
    ]  # fmt: skip
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--segments", type=int, default=2_600_000)
    p.add_argument("--naive-segments", type=int, default=500_000)
    p.add_argument("--lookups", type=int, default=100_000)
    p.add_argument("--page", type=int, default=10_000, help="count per list_page call")
    p.add_argument(
        "--snapshot-segments", type=int, default=500_000,
        help="segments in the snapshot-file measurement (0: skip restart); time extrapolated",
    )  # fmt: skip
    p.add_argument("--child", choices=["columnar", "naive"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        result = run_side(
            args.child, args.segments, args.lookups, args.page, args.snapshot_segments
        )
        print(json.dumps(result))
        return

    n, nn = args.segments, min(args.naive_segments, args.segments)
    col = _child("columnar", n, args, args.snapshot_segments)
    naive = _child("naive", nn, args, 0)
    scale = n / nn
    naive_rss = naive["rss_bytes"] * scale
    extrapolated = "" if nn == n else f", memory extrapolated x{scale:.2f}"
    python = sys.version.split()[0]
    print(
        f"RLMM cache, one partition, {n:,} segments "
        f"(naive side built at {nn:,}{extrapolated}); Python {python}"
    )
    rows = [
        ("resident memory (RSS delta)", f"{col['rss_bytes'] / MiB:.1f} MiB",
         f"{naive_rss / MiB:.1f} MiB", f"{naive_rss / col['rss_bytes']:.1f}x less", "<= 100 MB"),
        ("  bytes per segment", f"{col['rss_bytes'] / n:.1f}", f"{naive['rss_bytes'] / nn:.1f}",
         "", "~100 (KIP-405)"),
        ("build (add + finish), us/segment", f"{col['build_s'] / n * 1e6:.1f}",
         f"{naive['build_s'] / nn * 1e6:.1f}", "", ""),
        ("lookup p50", f"{col['lookup_p50_us']:.1f} us", f"{naive['lookup_p50_us']:.1f} us",
         "", ""),
        ("lookup p99", f"{col['lookup_p99_us']:.1f} us", f"{naive['lookup_p99_us']:.1f} us", "",
         "<= 20 us"),
        (f"scan, longest list_page({args.page})", f"{col['scan_max_page_ms']:.1f} ms",
         f"{naive['scan_max_page_ms']:.1f} ms", "", "<= 50 ms"),
        ("  its CPU time (longest)", f"{col['scan_max_page_cpu_ms']:.1f} ms",
         f"{naive['scan_max_page_cpu_ms']:.1f} ms", "", ""),
        ("  pages over 50 ms (wall)", f"{col['scan_pages_over_50ms']} of {col['scan_pages']}",
         "", "", ""),
        ("  collections during the scan, longest", f"{col['scan_gc_count']}, "
         f"{col['scan_gc_max_ms']:.1f} ms", "", "", ""),
        ("scan, whole partition", f"{col['scan_s']:.1f} s", f"{naive['scan_s'] * scale:.1f} s*",
         "", ""),
    ]  # fmt: skip
    if "rebuild_list_s" in col:
        sn = col["snapshot_segments"]
        k = n / sn
        note = "" if sn == n else f" (x{k:.1f} from {sn:,.0f})"
        rows += [
            ("restart: from_entries(list)", f"{col['rebuild_list_s']:.1f} s", "", "", ""),
            (f"restart from the file: stream + rebuild{note}",
             f"{col['snapshot_load_s'] * k:.1f} s", "", "", "<= 10 s"),
            ("  same, CPU time", f"{col['snapshot_load_cpu_s'] * k:.1f} s", "", "",
             f"{col['restore_path']}; {col['snapshot_bytes'] * k / MiB:.0f} MiB file"),
        ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    head = ("", "columnar", "naive", "ratio", "target")
    widths = [max(w, len(h)) for w, h in zip(widths, head, strict=True)]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if nn != n:
        print("* naive scan time extrapolated linearly as well")


if __name__ == "__main__":
    main()
