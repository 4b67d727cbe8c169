"""Fetches below the local log start: the DelayedRemoteFetch path of the ReplicaManager.

The remote tier is a fake of core's own seam (``RemoteTier``) whose reads the test completes
by hand, so that each outcome (data, failure, timeout, several partitions) is chosen, not
raced for. Everything else is real: logs on disk, the purgatory and the timing wheel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import OffsetOutOfRangeError
from core.log.log_manager import LogManager, LogManagerConfig
from core.records.builder import RecordBatchBuilder
from core.server.metadata_cache import MetadataCache
from core.server.remote_seam import RemoteFetchResult
from core.server.replica_manager import (
    KAFKA_STORAGE_ERROR,
    FetchParams,
    FetchRequestPartition,
    ReplicaManager,
)
from core.server.timing_wheel import Timer
from core.server.topics import TopicRegistry
from tests.support.waiting import until

TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": "300",
    "local.retention.bytes": "0",
    "file.delete.delay.ms": "0",
}


class FakeRemoteTier:
    """Records every read started; the test resolves the futures."""

    def __init__(self, fetch_max_wait_ms: int) -> None:
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.reads: list[tuple[str, int, int, int, bool, asyncio.Future[RemoteFetchResult]]] = []
        self.reject = False

    def start_read(
        self, topic_id, topic, partition, log, fetch_offset, max_bytes, *, read_committed
    ) -> asyncio.Future[RemoteFetchResult]:
        if self.reject:
            raise OffsetOutOfRangeError("rejected at once")
        future: asyncio.Future[RemoteFetchResult] = asyncio.get_running_loop().create_future()
        self.reads.append((topic, partition, fetch_offset, max_bytes, read_committed, future))
        return future

    async def offset_for_timestamp(self, *args):
        return None

    def on_topic_created(self, topic) -> None:
        pass

    def on_topic_deleted(self, topic) -> None:
        pass


class Node:
    def __init__(self, directory: Path) -> None:
        self.topics = TopicRegistry(directory, {})
        self.log_manager = LogManager(
            LogManagerConfig(log_dirs=(directory,)), topic_config=self.topics.log_config
        )
        self.manager = ReplicaManager(self.log_manager, Timer(), MetadataCache(1))
        self.remote = FakeRemoteTier(fetch_max_wait_ms=200)
        self.manager.remote = self.remote

    def tiered_topic(self, name: str, partitions: int) -> None:
        """A topic whose first segments are 'in the remote tier' and gone locally."""
        info = self.topics.create(name, partitions, TOPIC_CONFIGS)
        for p in self.manager.open_topic(info):
            for i in range(12):
                builder = RecordBatchBuilder()
                builder.append(b"value-%03d" % i * 4, timestamp=1_700_000_000_000 + i)
                self.manager.append(p, builder.build())
            plog = p.log
            plog.highest_offset_in_remote_storage = plog.active_segment.base_offset - 1
            plog.delete_old_segments()
            assert plog.log_start_offset == 0 < plog.local_log_start_offset


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.log_manager.shutdown()


def fetch_params(*parts: tuple[str, int, int], isolation: int = 0, max_bytes=1 << 20):
    return FetchParams(
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=isolation,
        partitions=[FetchRequestPartition(t, p, o, 1 << 16) for t, p, o in parts],
    )


def test_several_remote_partitions_are_read_in_parallel_in_one_fetch(node):
    node.tiered_topic("t", 2)
    local_start = node.manager.partition("t", 1).log.local_log_start_offset

    async def scenario():
        task = asyncio.create_task(
            node.manager.fetch(
                fetch_params(("t", 0, 0), ("t", 1, 1), ("t", 1, local_start), isolation=1)
            )
        )
        await until(lambda: len(node.remote.reads) >= 2)
        assert not task.done()
        for _, partition, offset, _, read_committed, future in node.remote.reads:
            assert read_committed
            future.set_result(RemoteFetchResult(b"remote-%d-%d" % (partition, offset), ((5, 0),)))
        return await asyncio.wait_for(task, 5)

    results = asyncio.run(scenario())
    assert [r.error for r in results] == [0, 0, 0]
    assert results[0].records == b"remote-0-0" and results[0].aborted == [(5, 0)]
    assert results[1].records == b"remote-1-1"
    assert results[2].records  # the local partition is served alongside
    assert results[0].log_start_offset == 0


def test_a_slow_remote_read_leaves_its_partition_empty_without_error(node):
    # Kafka's DelayedRemoteFetch answers an expired remote read with the local read result:
    # no records, no error; the client fetches again.
    node.tiered_topic("t", 2)

    async def scenario():
        task = asyncio.create_task(node.manager.fetch(fetch_params(("t", 0, 0), ("t", 1, 0))))
        await until(lambda: len(node.remote.reads) >= 2)
        fast, slow = node.remote.reads[0][-1], node.remote.reads[1][-1]
        fast.set_result(RemoteFetchResult(b"fast"))
        results = await asyncio.wait_for(task, 5)  # expires after fetch_max_wait_ms
        return results, slow

    results, slow = asyncio.run(scenario())
    assert results[0].error == 0 and results[0].records == b"fast"
    assert results[1].error == 0 and results[1].records is None
    assert slow.cancelled()  # the read is abandoned, as Kafka cancels its remote task


def test_remote_failures_get_their_error_codes(node):
    node.tiered_topic("t", 3)

    async def scenario():
        task = asyncio.create_task(
            node.manager.fetch(fetch_params(("t", 0, 0), ("t", 1, 0), ("t", 2, 0)))
        )
        await until(lambda: len(node.remote.reads) >= 3)
        node.remote.reads[0][-1].set_exception(OffsetOutOfRangeError("gone"))
        node.remote.reads[1][-1].set_exception(OSError("bucket unreachable"))
        node.remote.reads[2][-1].set_result(RemoteFetchResult(b"ok"))
        return await asyncio.wait_for(task, 5)

    results = asyncio.run(scenario())
    assert [r.error for r in results] == [
        OffsetOutOfRangeError.error_code,
        KAFKA_STORAGE_ERROR,
        0,
    ]
    assert results[2].records == b"ok"


def test_a_read_refused_at_once_errors_that_partition(node):
    node.tiered_topic("t", 1)
    node.remote.reject = True
    results = asyncio.run(node.manager.fetch(fetch_params(("t", 0, 0))))
    assert results[0].error == OffsetOutOfRangeError.error_code


def test_a_full_response_leaves_later_remote_partitions_empty(node):
    node.tiered_topic("t", 2)

    async def scenario():
        task = asyncio.create_task(
            node.manager.fetch(fetch_params(("t", 0, 0), ("t", 1, 0), max_bytes=100))
        )
        await until(lambda: len(node.remote.reads) >= 1)
        node.remote.reads[0][-1].set_result(RemoteFetchResult(b"x" * 100))
        return await asyncio.wait_for(task, 5)

    results = asyncio.run(scenario())
    assert len(node.remote.reads) == 1 and node.remote.reads[0][3] == 100
    assert results[0].records == b"x" * 100
    assert results[1].error == 0 and results[1].records is None


def test_a_completed_remote_fetch_keeps_no_data_in_the_purgatory(node):
    # A fetch of one remote and one local partition: once answered, nothing of it stays
    # watched (it was left under the local partition's key, which no remote read ever
    # checks, with its records, until a purge 1,000 completions later).
    node.tiered_topic("t", 2)
    local_start = node.manager.partition("t", 1).log.local_log_start_offset

    async def scenario():
        task = asyncio.create_task(
            node.manager.fetch(fetch_params(("t", 0, 0), ("t", 1, local_start)))
        )
        await until(lambda: len(node.remote.reads) >= 1)
        node.remote.reads[0][-1].set_result(RemoteFetchResult(b"r" * 1000))
        return await asyncio.wait_for(task, 5)

    results = asyncio.run(scenario())
    assert results[0].records == b"r" * 1000 and results[1].records
    purgatory = node.manager.remote_fetch_purgatory
    assert purgatory.watched() == 0 and purgatory.num_keys() == 0
