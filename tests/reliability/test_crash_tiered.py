"""SIGKILL at random moments of a tiered broker under an acks=all load.

The broker tiers to S3 (moto over HTTP) with small segments, so that at any moment it may
be appending, rolling a segment, copying one to S3, writing remote log metadata (and its
snapshots), or deleting local segments by local retention; a writer thread records every
acknowledged (offset, key). The broker is SIGKILLed after a random number of further
acknowledgements, KILLS times (5 in ``make test``, 50 in ``make soak``), and restarted on the
same data. Afterwards:

- every acknowledged record reads back identical from offset 0 (most from the remote tier);
- no remote segment is left in a STARTED state and no object in the bucket lacks a
  COPY_SEGMENT_FINISHED segment (after the RemoteLogManager's next runs);
- every local segment passes ``tierlog dump-log --deep-iteration`` (CRCs) and its indexes
  ``--verify-index-only``.

The figures (kills, acknowledged records, remote share, time) are printed for
docs/RELIABILITY.md.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_clients import consume_confluent
from tests.support.producer_load import Load
from tests.support.s3_harness import (
    Bucket,
    local_log_start,
    local_segment_bases,
    metadata_segments,
    orphan_report,
    tiering_settings,
)
from tests.support.waiting import wait_until

from .soak import SOAK

KILLS = 50 if SOAK else 5
TOPIC = "crash-tiered"
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "segment.bytes": str(64 * 1024),
    "local.retention.bytes": str(128 * 1024),
    "retention.ms": "-1",
}


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=TOPIC_CONFIG)]).values():
        future.result(30)


def settled(broker: BrokerProcess, bucket: Bucket) -> bool:
    """Tiering caught up (every inactive local segment copied), nothing left STARTED, and
    every object set complete. Catching up matters: after the last restart the broker may
    still be copying a backlog, and an object copied after the metadata was listed would
    look like an orphan."""
    segments = metadata_segments(broker.bootstrap, TOPIC)
    started = [s for s in segments if s["state"].endswith("STARTED")]
    copied_end = max(
        (s["end_offset"] for s in segments if s["state"] == "COPY_SEGMENT_FINISHED"), default=-1
    )
    bases = local_segment_bases(broker, TOPIC)
    caught_up = bool(bases) and copied_end + 1 >= bases[-1]
    return caught_up and not started and not bucket.incomplete_stems(TOPIC)


def verify_local_files(data_dir: Path) -> None:
    part = data_dir / f"{TOPIC}-0"
    logs = sorted(str(p) for p in part.glob("*.log"))
    indexes = sorted(str(p) for p in part.glob("*.index")) + sorted(
        str(p) for p in part.glob("*.timeindex")
    )
    base = [sys.executable, "-m", "tierlog", "dump-log"]
    for args in (["--deep-iteration", *logs], ["--verify-index-only", *indexes]):
        done = subprocess.run(base + args, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, f"dump-log {args[0]}: {done.stderr[-3000:]}"


def test_sigkill_at_random_moments_loses_nothing_and_leaves_no_debris(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess]
) -> None:
    rng = random.Random(405)
    settings = tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    settings["rlmm.config.remote.log.metadata.snapshot.interval.ms"] = "500"
    broker = start_broker(tmp_path / "b", settings)
    brokers.append(broker)
    create_topic(broker.bootstrap)
    # 16 KiB batches: several per 64 KiB segment, so kills fall between rolls and copies.
    load = Load(
        broker.bootstrap,
        TOPIC,
        {"enable.idempotence": False, "message.timeout.ms": 20_000, "batch.size": 16384},
    )
    writer = threading.Thread(target=load.run, daemon=True)
    began = time.monotonic()
    writer.start()
    try:
        for _ in range(KILLS):
            mark = load.acked_count()
            more = rng.randint(200, 3000)
            wait_until(
                lambda m=mark, n=more: load.acked_count() >= m + n,
                timeout=120,
                what=f"acks under load (broker log:\n{broker.log_tail()})",
            )
            broker.kill()
            broker = restart(broker)
            brokers.append(broker)
        mark = load.acked_count()
        wait_until(lambda: load.acked_count() > mark + 500, timeout=120, what="acks at the end")
    finally:
        load.stop.set()
        writer.join(120)
    assert not load.fatal, load.fatal

    try:
        wait_until(lambda: settled(broker, bucket), 120, 0.5, what="tiering settled")
    except AssertionError:
        started = [
            (s["segment_id"], s["state"])
            for s in metadata_segments(broker.bootstrap, TOPIC)
            if s["state"].endswith("STARTED")
        ]
        raise AssertionError(
            f"tiering not settled after 120 s: local segments "
            f"{local_segment_bases(broker, TOPIC)}; "
            f"segments in STARTED states {started}; "
            f"incomplete object sets {bucket.incomplete_stems(TOPIC)}; broker log:\n"
            f"{broker.log_tail()}"
        ) from None
    finished = {
        s["segment_id"] for s in metadata_segments(broker.bootstrap, TOPIC, "COPY_SEGMENT_FINISHED")
    }
    assert orphan_report(bucket, finished) == []

    # Mostly remote reads of small segments through moto: allow for the soak's volume.
    got = {
        g.offset: g.key
        for g in consume_confluent(
            broker.bootstrap, TOPIC, timeout_s=900 if SOAK else 120, retry_retriable=True
        )
    }
    with load.lock:
        acked = list(load.acked)
    lost = [(offset, key) for offset, key in acked if got.get(offset) != key]
    assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {lost[:5]}"
    local_start = local_log_start(broker, TOPIC)
    remote_share = sum(1 for offset, _ in acked if offset < local_start) / max(len(acked), 1)
    assert broker.stop() == 0
    verify_local_files(Path(broker.settings["log.dirs"]))
    print(
        f"\n{KILLS} SIGKILLs; {len(acked)} acknowledged records, all read back; "
        f"{remote_share:.0%} of them from the remote tier; {len(finished)} remote segments; "
        f"{time.monotonic() - began:.0f}s"
    )
