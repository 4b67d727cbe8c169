"""RemotePartitionRemover: the partition deletion lifecycle, resumable after a failure."""

from __future__ import annotations

import threading
import time
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


# -- the resume rule: the leader of the metadata partition finishes every deletion ----------
def test_a_broker_leading_the_metadata_partition_finishes_a_deletion_after_a_restart(tp):
    """The broker that ran a deletion died after DELETE_PARTITION_STARTED and one segment.
    A manager started afresh (the restarted broker, or the metadata partition's next
    leader) hosts no replica of the deleted topic: following the metadata partition it
    leads, it loads the unfinished deletion, wakes its remover and the deletion finishes."""
    store = MemoryStore(failures=0)
    topic = MemoryTopic()
    first = manager(topic)
    ready(first, tp)
    segments = []
    for i in range(3):
        md = segment(tp, i * 10, i * 10 + 9)
        first.add_remote_log_segment_metadata(md).result(10)
        first.update_remote_log_segment_metadata(finish(md)).result(10)
        store.copy_log_segment_data(md, None)
        segments.append(md)
    dead = RemotePartitionRemover(first, store, broker_id=1)
    dead.mark(tp)
    dead._publish_partition(tp, RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
    store.delete_log_segment_data(segments[0])
    first.close()  # the crash: two segments left

    woken = threading.Event()
    second = manager(topic)
    second.deletion_listener = woken.set
    remover = RemotePartitionRemover(second, store, broker_id=2)
    second.follow_metadata_partitions({second.metadata_partition_of(tp)})
    assert woken.wait(10), "the unfinished deletion was not loaded"
    assert second.is_ready(tp)  # woken once caught up: a run now finds it
    assert remover.marked_partitions() == [tp]
    assert remover.run_once() == 1
    assert store.objects == set()
    assert second.unfinished_deletions() == set()
    assert not second.is_ready(tp)  # released once finished

    # A third manager following the partition finds the deletion finished: nothing loads.
    third = manager(topic)
    third.follow_metadata_partitions({third.metadata_partition_of(tp)})
    until_read = time.monotonic() + 10
    while third.unfinished_deletions() or not _scanned_to_end(third, topic, tp):
        assert time.monotonic() < until_read, "the metadata partition was not read"
        time.sleep(0.01)
    assert not third.is_ready(tp)
    assert RemotePartitionRemover(third, store, broker_id=3).run_once() == 0
    for m in (second, third):
        m.close()


def _scanned_to_end(m, topic: MemoryTopic, tp: TopicIdPartition) -> bool:
    mp = m.metadata_partition_of(tp)
    return m._scanned.get(mp, -1) == topic.end_offset(mp) - 1


def test_a_broker_not_leading_the_metadata_partition_leaves_the_deletion_alone(tp):
    """Exactly one broker runs a deletion: a manager that stops following the metadata
    partition (its leadership moved) releases the deletions it loaded, and its remover
    deletes nothing."""
    store = MemoryStore()
    topic = MemoryTopic()
    writer = manager(topic)
    ready(writer, tp)
    md = segment(tp, 0, 9)
    writer.add_remote_log_segment_metadata(md).result(10)
    store.copy_log_segment_data(md, None)
    RemotePartitionRemover(writer, store, broker_id=1).mark(tp)
    writer.on_stop_partitions({tp})  # the replica is deleted; the writer leads nothing

    mp = writer.metadata_partition_of(tp)
    leader = manager(topic)
    leader.follow_metadata_partitions({mp})
    assert leader.wait_ready(tp, 10)
    assert leader.unfinished_deletions() == {tp}
    leader.follow_metadata_partitions(set())  # the leadership moved
    assert leader.unfinished_deletions() == set()
    assert not leader.is_ready(tp)
    assert RemotePartitionRemover(leader, store, broker_id=2).run_once() == 0
    assert store.objects == {md.segment_id}
    for m in (writer, leader):
        m.close()


def test_a_mark_repeated_after_the_deletion_finished_is_harmless(tp):
    """A new controller marks the partitions of a topic deletion in progress again: a mark
    after DELETE_PARTITION_FINISHED runs an empty deletion that finishes."""
    store = MemoryStore()
    m = tiered_partition(tp, store, 2)
    remover = RemotePartitionRemover(m, store, broker_id=1)
    remover.mark(tp)
    assert remover.run_once() == 1
    ready(m, tp)  # still loaded, as on the metadata partition's leader
    remover.mark(tp)
    assert remover.run_once() == 1
    assert m.store.partition_delete_state(tp) is None
    assert store.objects == set()
    m.close()
