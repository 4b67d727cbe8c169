"""RemotePartitionRemover: the partition deletion lifecycle, resumable after a failure."""

from __future__ import annotations

import uuid

import pytest

from rlmm.remover import RemotePartitionRemover
from tests.support.memory_metadata import MemoryTopic, finish, manager, ready, segment
from tiered.api import (
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)


class MemoryStore(RemoteStorageManager):
    """Remote segments as a set of ids; fails the first ``failures`` deletes."""

    def __init__(self, failures: int = 0) -> None:
        self.objects: set[uuid.UUID] = set()
        self.failures = failures

    def copy_log_segment_data(self, metadata, segment_data):
        self.objects.add(metadata.segment_id)

    def fetch_log_segment(self, metadata, start_position, end_position=None):
        raise NotImplementedError

    def fetch_index(self, metadata, index_type):
        raise NotImplementedError

    def delete_log_segment_data(self, metadata) -> None:
        if self.failures:
            self.failures -= 1
            raise RemoteStorageError("store down")
        self.objects.discard(metadata.segment_id)


@pytest.fixture
def tp() -> TopicIdPartition:
    return TopicIdPartition(uuid.UUID(int=9), "gone", 0)


def tiered_partition(tp: TopicIdPartition, store: MemoryStore, count: int):
    m = manager(MemoryTopic())
    ready(m, tp)
    for i in range(count):
        md = segment(tp, i * 10, i * 10 + 9)
        m.add_remote_log_segment_metadata(md).result(10)
        store.copy_log_segment_data(md, None)
        if i < count - 1:  # the last copy never finished: it must go too
            m.update_remote_log_segment_metadata(finish(md)).result(10)
    return m


def test_marked_partition_is_deleted_segment_by_segment(tp):
    store = MemoryStore()
    m = tiered_partition(tp, store, 4)
    remover = RemotePartitionRemover(m, store, broker_id=1)
    assert remover.run_once() == 0  # nothing marked
    remover.mark(tp)
    assert m.store.partition_delete_state(tp) == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    assert remover.run_once() == 1
    assert store.objects == set()
    assert m.store.partition_delete_state(tp) is None  # FINISHED drops the partition
    with pytest.raises(RemoteResourceNotFoundError):
        m.store.cache(tp)
    assert not m.is_ready(tp)  # the deleted partition's metadata is released
    m.close()


def test_a_failed_run_resumes_from_started(tp):
    store = MemoryStore(failures=1)
    m = tiered_partition(tp, store, 3)
    remover = RemotePartitionRemover(m, store, broker_id=1)
    remover.mark(tp)
    assert remover.run_once() == 0
    assert m.store.partition_delete_state(tp) == RemotePartitionDeleteState.DELETE_PARTITION_STARTED
    assert len(store.objects) == 3
    assert remover.run_once() == 1
    assert store.objects == set()
    m.close()


def test_a_mark_for_a_topic_that_still_exists_deletes_nothing(tp, caplog):
    """Topic ids are never reused: a mark for a live topic was not written by its deletion
    (a forged or stray event), and the remote data stays."""
    store = MemoryStore()
    m = tiered_partition(tp, store, 3)
    topics = {tp.topic_id}
    remover = RemotePartitionRemover(
        m, store, broker_id=1, topic_exists=lambda topic_id: topic_id in topics
    )
    remover.mark(tp)
    assert remover.run_once() == 0
    assert remover.run_once() == 0
    assert len(store.objects) == 3
    assert m.store.partition_delete_state(tp) == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    assert sum("its topic exists" in r.getMessage() for r in caplog.records) == 1
    topics.clear()  # the topic is deleted after all
    assert remover.run_once() == 1
    assert store.objects == set()
    m.close()
