"""TopicBasedRemoteLogMetadataManager over an in-memory metadata topic."""

from __future__ import annotations

import threading
import uuid

import pytest

from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.serde import deserialize, serialize
from rlmm.topic_client import MetadataRecord, MetadataTopicError
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


class HeldTopic(MemoryTopic):
    """A one-partition metadata topic that, once ``hold`` is called, stops every read the
    manager's consumer makes before it reads, until ``pass_one`` or ``open``."""

    def __init__(self) -> None:
        super().__init__(partitions=1)
        self._cond = threading.Condition()
        self._holding = False
        self._passes = 0
        self.held: list[int] = []  # the start offset of each read held

    def read(self, partition: int, start_offset: int, max_records: int) -> list[MetadataRecord]:
        with self._cond:
            if self._holding:
                self.held.append(start_offset)
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._passes > 0 or not self._holding, 30)
                if self._passes > 0:
                    self._passes -= 1
        return super().read(partition, start_offset, max_records)

    def hold(self) -> None:
        with self._cond:
            self._holding = True

    def wait_held(self, count: int) -> int:
        """The start offset of the ``count``-th held read, once it is held."""
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.held) >= count, 10), "no read held"
            return self.held[count - 1]

    def pass_one(self) -> None:
        with self._cond:
            self._passes += 1
            self._cond.notify_all()

    def open(self) -> None:
        with self._cond:
            self._holding = False
            self._cond.notify_all()


@pytest.mark.parametrize("stale_read_finds", ["nothing", "another partition's event"])
def test_a_partition_loaded_again_is_ready_only_after_its_events_are_read_again(
    tp, stale_read_finds
):
    """The consumer was reading the metadata partition at its end when the user partition
    was stopped and loaded again (which moves the position back to 0). What that read
    returns, nothing or a newer event, must neither mark the partition ready nor move the
    position past the events it has to read again."""
    topic = HeldTopic()
    m = TopicBasedRemoteLogMetadataManager(topic)
    m.configure({"remote.log.metadata.topic.num.partitions": "1"})
    try:
        ready(m, tp)
        md = segment(tp, 0, 19)
        m.add_remote_log_segment_metadata(md).result(10)
        m.update_remote_log_segment_metadata(finish(md)).result(10)

        topic.hold()
        assert topic.wait_held(1) == 2  # the consumer, at the end, is inside a read
        m.on_stop_partitions({tp})
        m.on_partition_leadership_changes({tp}, set())
        if stale_read_finds != "nothing":
            other = TopicIdPartition(uuid.UUID(int=8), "payments", 3)
            topic.append(0, serialize(segment(other, 0, 4)))  # another broker's write
        topic.pass_one()  # the read from the old position returns

        assert topic.wait_held(2) == 0, "the events of the loaded partition are not re-read"
        assert not m.is_ready(tp), "ready before its events were read again"
        topic.open()
        assert m.wait_ready(tp, 10)
        assert m.highest_offset_for_epoch(tp, 0) == 19
        assert [s.state for s in m.list_remote_log_segments(tp)] == [S.COPY_SEGMENT_FINISHED]
    finally:
        topic.open()
        m.close()


@pytest.mark.parametrize(("settings", "expected"), [({}, 3), ({"replicas": "2"}, 2)])
def test_the_metadata_topic_is_created_with_its_replication_factor(monkeypatch, settings, expected):
    import rlmm.kafka_client

    created = []

    class Client(MemoryTopic):
        def __init__(self, bootstrap: str, *, replication_factor: int, **config: str) -> None:
            super().__init__()
            created.append(replication_factor)

    monkeypatch.setattr(rlmm.kafka_client, "KafkaMetadataTopicClient", Client)
    configs = {"remote.log.metadata.common.client.bootstrap.servers": "127.0.0.1:1"}
    if "replicas" in settings:
        configs["remote.log.metadata.topic.replication.factor"] = settings["replicas"]
    rlmm = TopicBasedRemoteLogMetadataManager()
    rlmm.configure(configs)
    try:
        assert created == [expected]
    finally:
        rlmm.close()


def recording_appends(topic: MemoryTopic, fail_at: int | None = None) -> list[tuple[object, bool]]:
    """Record every event appended to ``topic`` with its durable flag; with ``fail_at``,
    the append of that index (counting from 0) fails instead."""
    append = topic.append
    seen: list[tuple[object, bool]] = []

    def recorded(partition: int, value: bytes, *, durable: bool = True) -> int:
        if fail_at is not None and len(seen) == fail_at:
            seen.append((None, durable))
            raise MetadataTopicError("injected: the append failed")
        seen.append((deserialize(value), durable))
        return append(partition, value, durable=durable)

    topic.append = recorded  # type: ignore[method-assign]
    return seen


def three_segments_started(topic: MemoryTopic, tp):
    """A ready manager over ``topic`` with three segments of ``tp`` added (STARTED)."""
    m = manager(topic)
    ready(m, tp)
    mds = [segment(tp, 0, 9), segment(tp, 10, 19), segment(tp, 20, 29)]
    for md in mds:
        m.add_remote_log_segment_metadata(md).result(10)
    return m, mds


def test_updates_in_order_are_appended_in_order_and_the_last_sync_covers_them(tp):
    """A batch's COPY_SEGMENT_FINISHED events: appended in the order given, only the last
    synced; a crash of the machine right after keeps every one of them."""
    topic = MemoryTopic()
    m, mds = three_segments_started(topic, tp)
    seen = recording_appends(topic)
    m.update_remote_log_segment_metadata_in_order([finish(md) for md in mds]).result(10)
    assert [e.remote_log_segment_id for e, _ in seen] == [md.remote_log_segment_id for md in mds]
    assert [durable for _, durable in seen] == [False, False, True]
    m.close()
    topic.crash()
    after = manager(topic)
    ready(after, tp)
    states = {md.segment_id: md.state for md in after.list_remote_log_segments(tp)}
    assert states == {md.segment_id: S.COPY_SEGMENT_FINISHED for md in mds}
    assert after.highest_offset_for_epoch(tp, 0) == 29
    after.close()


def test_updates_in_order_stop_at_a_failure_and_a_crash_keeps_a_prefix(tp):
    """The second FINISHED of three fails: the third is not appended, the future fails, and
    after a crash no later segment is FINISHED without the earlier ones (which would make
    the highest remote offset jump over an unfinished segment)."""
    topic = MemoryTopic()
    m, mds = three_segments_started(topic, tp)
    seen = recording_appends(topic, fail_at=1)
    with pytest.raises(MetadataTopicError):
        m.update_remote_log_segment_metadata_in_order([finish(md) for md in mds]).result(10)
    assert len(seen) == 2  # the first, then the failed second: never the third
    m.close()
    topic.crash()
    after = manager(topic)
    ready(after, tp)
    finished = [
        md.segment_id
        for md in after.list_remote_log_segments(tp)
        if md.state == S.COPY_SEGMENT_FINISHED
    ]
    assert finished == [md.segment_id for md in mds[: len(finished)]]
    after.close()


def test_updates_in_order_must_be_of_one_partition(tp):
    m = manager(MemoryTopic())
    other = TopicIdPartition(uuid.UUID(int=8), "other", 0)
    ready(m, tp)
    ready(m, other)
    a, b = segment(tp, 0, 9), segment(other, 0, 9)
    with pytest.raises(ValueError, match="several partitions"):
        m.update_remote_log_segment_metadata_in_order([finish(a), finish(b)])
    m.close()
