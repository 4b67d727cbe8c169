"""Follower catch-up over tiered storage (KIP-405's follower protocol), a ratio in one run.

Two brokers in one process (``tests/tiered/tiered_cluster.py``: real brokers, real
replica fetchers over 127.0.0.1, the local-directory RSM, the benchmark as controller).
Broker 1 leads two topics alone and receives N MiB in each:

- ``tiered``: ``remote.storage.enable=true``, 8 MiB segments, ``local.retention.bytes`` of
  two segments: once tiered, all but the last ~16 MiB are in the remote tier only;
- ``local``: the same data on local disk only.

Then broker 2 becomes a follower of each, one after the other, and the time from its
LeaderAndIsr to its entry in the ISR is measured: for ``tiered`` it restores the epochs and
producer state of one remote segment and fetches the local tail (it depends on the local
retention, not on N); for ``local`` it replicates all N MiB from offset 0. Target: tiered /
local <= 0.1.

    PYTHONPATH=. python -m bench.follower_catchup [--mb N] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench._common import DEFAULT_DIR, MiB, describe_machine
from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from core.server.kio_build import make, nested
from core.server.protocol import load_request_schema
from tests.tiered.tiered_cluster import TieredCluster

SEGMENT = 8 * MiB
RECORD = 4096
RECORDS_PER_BATCH = 64  # 256 KiB batches
TARGET = 0.1


def batch(seed: int) -> bytes:
    builder = RecordBatchBuilder()
    payload = (f"{seed:016d}".encode() * (RECORD // 16))[:RECORD]
    for _ in range(RECORDS_PER_BATCH):
        builder.append(payload, key=payload[:8])
    return bytes(builder.build())


async def produce(cluster: TieredCluster, topic: str, mb: int) -> None:
    records = batch(0)
    count = mb * MiB // len(records)
    for _ in range(count):

        def build(v: int) -> object:
            request_cls = load_request_schema(ApiKey.PRODUCE, v)
            return make(
                request_cls,
                transactional_id=None,
                acks=1,
                timeout=datetime.timedelta(seconds=30),
                topic_data=(
                    make(
                        nested(request_cls, "TopicProduceData"),
                        name=topic,
                        partition_data=(
                            make(
                                nested(request_cls, "PartitionProduceData"),
                                index=0,
                                records=records,
                            ),
                        ),
                    ),
                ),
            )

        response = await cluster.client.send(
            cluster.nodes[1].endpoint, "bench-producer", ApiKey.PRODUCE, build, versions=(9, 9)
        )
        assert response.responses[0].partition_responses[0].error_code == 0


async def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.02)


async def run(base: Path, mb: int) -> tuple[float, float, int]:
    topics = {
        "tiered": {
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT),
            "local.retention.bytes": str(2 * SEGMENT),
            "retention.ms": "-1",
        },
        "local": {"segment.bytes": str(SEGMENT), "retention.ms": "-1"},
    }
    cluster = TieredCluster(base, 2, topics, {"remote.log.manager.task.interval.ms": "200"})
    ids = {name: uuid.uuid4() for name in topics}
    try:
        await cluster.start()
        for name in topics:
            await cluster.elect(
                name, ids[name], 1, leader=1, isr=[1], leader_epoch=0, replicas=[1, 2], to=[1]
            )
            await produce(cluster, name, mb)
        leader = cluster.node(1)
        tiered = leader.plog(("tiered", 0))
        # Everything rolled is copied, and deleted locally down to the local retention.
        rolled_end = tiered.segments()[-1].base_offset - 1
        await wait_for(
            lambda: (
                tiered.highest_offset_in_remote_storage >= rolled_end and tiered.size <= 3 * SEGMENT
            ),
            600,
            "tiering",
        )
        local_bytes = tiered.size
        times = {}
        for name in ("tiered", "local"):
            tp = (name, 0)
            began = time.monotonic()
            await cluster.elect(
                name, ids[name], 1, leader=1, isr=[1], leader_epoch=0, replicas=[1, 2], to=[2]
            )
            partition = cluster.nodes[1].partition(tp)
            assert partition is not None
            await wait_for(lambda p=partition: 2 in p.isr, 1200, f"broker 2 in the ISR of {name}")
            times[name] = time.monotonic() - began
        return times["tiered"], times["local"], local_bytes
    finally:
        await cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="MiB of history per topic")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    base = args.dir / "follower-catchup"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    try:
        tiered, local, tail = asyncio.run(run(base, args.mb))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ratio = tiered / local
    print(describe_machine(args.dir))
    print(f"history per topic: {args.mb} MiB; tiered leader's local tail: {tail / MiB:.1f} MiB")
    print(f"follower into the ISR, tiered (remote aux state + local tail): {tiered:8.2f} s")
    print(f"follower into the ISR, local (replicates from offset 0):      {local:8.2f} s")
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(f"ratio tiered / local: {ratio:.3f} (target <= {TARGET}) {verdict}")


if __name__ == "__main__":
    main()
