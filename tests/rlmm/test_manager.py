"""TopicBasedRemoteLogMetadataManager over an in-memory metadata topic."""

from __future__ import annotations

import uuid

import pytest

from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.topic_client import MetadataTopicError
from tests.support.memory_metadata import MemoryTopic, finish, manager, ready, segment
from tiered.api import (
    InvalidStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
)

S = RemoteLogSegmentState


@pytest.fixture
def tp() -> TopicIdPartition:
    return TopicIdPartition(uuid.UUID(int=7), "orders", 0)


def test_add_and_finish_become_visible_when_the_future_completes(tp):
    m = manager(MemoryTopic())
    ready(m, tp)
    md = segment(tp, 0, 99)
    m.add_remote_log_segment_metadata(md).result(10)
    assert [s.state for s in m.list_remote_log_segments(tp)] == [S.COPY_SEGMENT_STARTED]
    assert m.remote_log_segment_metadata(tp, 0, 50) is None  # not served until finished
    m.update_remote_log_segment_metadata(finish(md)).result(10)
    found = m.remote_log_segment_metadata(tp, 0, 50)
    assert found is not None and found.remote_log_segment_id == md.remote_log_segment_id
    assert m.highest_offset_for_epoch(tp, 0) == 99
    assert m.remote_log_size(tp, 0) == 100
    m.close()


def test_invalid_updates_fail_the_future(tp):
    m = manager(MemoryTopic())
    ready(m, tp)
    md = segment(tp, 0, 9)
    m.add_remote_log_segment_metadata(md).result(10)
    with pytest.raises(
        InvalidStateTransitionError, match="COPY_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED"
    ):
        m.update_remote_log_segment_metadata(finish(md, S.DELETE_SEGMENT_FINISHED)).result(10)
    with pytest.raises(RemoteResourceNotFoundError):
        m.update_remote_log_segment_metadata(finish(segment(tp, 10, 19))).result(10)
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        m.add_remote_log_segment_metadata(
            RemoteLogSegmentMetadata(
                RemoteLogSegmentId.generate_new(tp),
                0,
                1,
                0,
                1,
                1,
                1,
                {0: 0},
                state=S.COPY_SEGMENT_FINISHED,
            )
        )
    m.close()


def test_restart_loads_snapshots_and_replays_only_what_follows(tp, tmp_path):
    topic = MemoryTopic()
    m = manager(topic, tmp_path)
    ready(m, tp)
    segments = [segment(tp, i * 10, i * 10 + 9) for i in range(50)]
    for md in segments:
        m.add_remote_log_segment_metadata(md).result(10)
        m.update_remote_log_segment_metadata(finish(md)).result(10)
    m.close()  # writes the snapshot
    later = segment(tp, 500, 509)
    writer = manager(topic)  # another writer adds one more event after the snapshot
    writer.add_remote_log_segment_metadata(later).result(10)
    writer.close()

    topic.records_read = 0
    again = manager(topic, tmp_path)
    ready(again, tp)
    assert topic.records_read == 1, "only the event after the snapshot is replayed"
    listed = list(again.list_remote_log_segments(tp))
    assert [s.start_offset for s in listed] == [s.start_offset for s in segments] + [500]
    assert again.remote_log_segment_metadata(tp, 0, 255).start_offset == 250
    assert (tmp_path / "__remote_log_metadata_snapshots" / "_rlmm_committed_offsets").exists()
    again.close()


def test_a_damaged_snapshot_is_discarded_and_the_topic_replayed(tp, tmp_path):
    topic = MemoryTopic()
    m = manager(topic, tmp_path)
    ready(m, tp)
    for i in range(5):
        md = segment(tp, i * 10, i * 10 + 9)
        m.add_remote_log_segment_metadata(md).result(10)
        m.update_remote_log_segment_metadata(finish(md)).result(10)
    m.close()
    snap = next((tmp_path / "__remote_log_metadata_snapshots").glob("*/remote_log_snapshot"))
    data = bytearray(snap.read_bytes())
    snap.write_bytes(bytes(data[: len(data) // 2]))  # torn
    topic.records_read = 0
    again = manager(topic, tmp_path)
    ready(again, tp)
    assert topic.records_read == 10  # everything replayed
    assert again.highest_offset_for_epoch(tp, 0) == 49
    again.close()


def test_partitions_sharing_a_metadata_partition_stay_consistent(tp):
    topic = MemoryTopic(partitions=1)
    m = TopicBasedRemoteLogMetadataManager(topic)
    m.configure({"remote.log.metadata.topic.num.partitions": "1"})
    other = TopicIdPartition(uuid.UUID(int=8), "payments", 3)
    ready(m, tp)
    a = segment(tp, 0, 9)
    m.add_remote_log_segment_metadata(a).result(10)
    m.update_remote_log_segment_metadata(finish(a)).result(10)
    b = segment(other, 0, 4)
    m.add_remote_log_segment_metadata(b).result(10)  # not hosted yet: durable only
    ready(m, other)  # re-reads the shared partition from 0
    m.update_remote_log_segment_metadata(finish(b)).result(10)
    assert [s.state for s in m.list_remote_log_segments(tp)] == [S.COPY_SEGMENT_FINISHED]
    assert m.remote_log_segment_metadata(other, 0, 3) is not None
    m.close()


def test_a_partition_count_mismatch_fails_loudly():
    topic = MemoryTopic()
    manager(topic).close()
    m = TopicBasedRemoteLogMetadataManager(topic)
    with pytest.raises(MetadataTopicError, match="partitions"):
        m.configure({"remote.log.metadata.topic.num.partitions": "7"})


def test_reads_before_the_partition_is_loaded_raise(tp):
    m = manager(MemoryTopic())
    with pytest.raises(Exception, match="not loaded"):
        m.remote_log_segment_metadata(tp, 0, 0)
    m.close()
