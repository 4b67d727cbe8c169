"""Events of __remote_log_metadata that the metadata manager refuses, and logs.

Kafka's rules (an update of a segment never added, a transition the state machine forbids)
and authorship: on a partition this broker leads, an event it did not write, read after the
partition's metadata caught up, is refused (see rlmm/manager.py).
"""

from __future__ import annotations

import logging
import uuid

import pytest

from core.kafka_uuid import uuid_to_base64
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.partitioner import metadata_partition
from rlmm.serde import serialize
from tests.support.memory_metadata import MemoryTopic, finish, segment
from tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
PARTITIONS = 5
NODE = 1


@pytest.fixture
def tp() -> TopicIdPartition:
    return TopicIdPartition(uuid.UUID(int=7), "orders", 0)


def broker_manager(topic: MemoryTopic, broker_id: int | None = NODE):
    """The manager as a broker configures it (with ``broker.id``), or as a tool does."""
    m = TopicBasedRemoteLogMetadataManager(topic)
    configs = {"remote.log.metadata.topic.num.partitions": str(PARTITIONS)}
    if broker_id is not None:
        configs["broker.id"] = str(broker_id)
    m.configure(configs)
    return m


def lead(m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition) -> None:
    m.on_partition_leadership_changes({tp}, set())
    assert m.wait_ready(tp, 10)


def forge(topic: MemoryTopic, tp: TopicIdPartition, event: object) -> int:
    """Append an event straight to the topic, as a client producing to it would."""
    return topic.append(metadata_partition(tp, PARTITIONS), serialize(event))


def update(md: RemoteLogSegmentMetadata, state: S, broker: int = NODE):
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 3, None, state, broker)


def settle(m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition) -> None:
    """Write one event through the manager and wait until it is applied: every event
    appended before it in the same metadata partition has been applied or refused."""
    m.add_remote_log_segment_metadata(segment(tp, 10_000, 10_009)).result(10)


def finished_segment(m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition):
    md = segment(tp, 0, 99)
    m.add_remote_log_segment_metadata(md).result(10)
    m.update_remote_log_segment_metadata(finish(md)).result(10)
    return md


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "rlmm.manager" and r.levelno == logging.WARNING
    ]


def served(m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition, md) -> bool:
    found = m.remote_log_segment_metadata(tp, 0, md.start_offset)
    return found is not None and found.segment_id == md.segment_id


@pytest.mark.parametrize("broker_id", [None, NODE])
def test_an_update_of_a_segment_never_added_is_refused_and_logged(tp, caplog, broker_id):
    caplog.set_level(logging.WARNING, "rlmm.manager")
    topic = MemoryTopic(PARTITIONS)
    m = broker_manager(topic, broker_id)
    lead(m, tp)
    ghost = segment(tp, 0, 99)
    offset = forge(topic, tp, update(ghost, S.DELETE_SEGMENT_STARTED))
    settle(m, tp)
    assert ghost.segment_id not in {s.segment_id for s in m.list_remote_log_segments(tp)}
    (line,) = refusals(caplog)
    mp = metadata_partition(tp, PARTITIONS)
    assert f"__remote_log_metadata-{mp} offset {offset}" in line
    assert uuid_to_base64(ghost.segment_id) in line
    m.close()


def test_a_transition_the_state_machine_forbids_is_refused(tp, caplog):
    caplog.set_level(logging.WARNING, "rlmm.manager")
    topic = MemoryTopic(PARTITIONS)
    m = broker_manager(topic, None)  # Kafka's rules hold for tools too
    lead(m, tp)
    md = finished_segment(m, tp)
    forge(topic, tp, update(md, S.DELETE_SEGMENT_FINISHED))  # without DELETE_SEGMENT_STARTED
    settle(m, tp)
    assert served(m, tp, md)
    (line,) = refusals(caplog)
    assert "COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_FINISHED" in line
    m.close()


@pytest.mark.parametrize("broker", [NODE, 2])
def test_a_deletion_the_leader_did_not_start_is_refused(tp, caplog, broker):
    """In this broker's name or another's, a DELETE_SEGMENT_STARTED this broker did not
    write for a partition it leads changes nothing: the segment stays served."""
    caplog.set_level(logging.WARNING, "rlmm.manager")
    topic = MemoryTopic(PARTITIONS)
    m = broker_manager(topic)
    lead(m, tp)
    md = finished_segment(m, tp)
    offset = forge(topic, tp, update(md, S.DELETE_SEGMENT_STARTED, broker))
    settle(m, tp)
    assert served(m, tp, md)
    assert [s.state for s in m.list_remote_log_segments(tp) if s.segment_id == md.segment_id] == [
        S.COPY_SEGMENT_FINISHED
    ]
    (line,) = refusals(caplog)
    assert f"offset {offset}" in line and uuid_to_base64(md.segment_id) in line
    assert "did not write this event" in line
    # The leader's own deletion applies.
    m.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_STARTED)).result(10)
    assert not served(m, tp, md)
    m.close()


def test_a_forged_copy_or_partition_deletion_is_refused(tp, caplog):
    """A phantom segment would make the copy skip real data; a partition mark would make
    the remover delete everything."""
    caplog.set_level(logging.WARNING, "rlmm.manager")
    topic = MemoryTopic(PARTITIONS)
    m = broker_manager(topic)
    lead(m, tp)
    md = finished_segment(m, tp)
    phantom = segment(tp, 100, 10_000 - 1)
    forge(topic, tp, phantom)
    forge(topic, tp, update(phantom, S.COPY_SEGMENT_FINISHED))
    mark = RemotePartitionDeleteMetadata(
        tp, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 3, NODE
    )
    forge(topic, tp, mark)
    settle(m, tp)
    assert m.highest_offset_for_epoch(tp, 0) == md.end_offset
    assert m.store.partition_delete_state(tp) is None
    assert len(refusals(caplog)) == 3
    m.close()


def test_events_of_other_brokers_apply_in_a_cluster(tp):
    """A former leader finishing a deletion it started: its events still apply."""
    topic = MemoryTopic(PARTITIONS)
    m = broker_manager(topic)
    m.set_other_brokers({2, 3})
    lead(m, tp)
    md = finished_segment(m, tp)
    forge(topic, tp, update(md, S.DELETE_SEGMENT_STARTED, 2))
    settle(m, tp)
    assert not served(m, tp, md)
    m.close()


def test_events_read_while_catching_up_and_of_followed_partitions_apply(tp):
    """Written before a restart (or by the leader, for a follower): nothing tells them from
    forged ones, so Kafka's rules alone decide; the remote log manager and the partition
    remover re-check what they act on."""
    topic = MemoryTopic(PARTITIONS)
    first = broker_manager(topic)
    lead(first, tp)
    md = finished_segment(first, tp)
    first.close()
    forge(topic, tp, update(md, S.DELETE_SEGMENT_STARTED, 5))
    again = broker_manager(topic)
    lead(again, tp)
    assert not served(again, tp, md)
    again.close()

    other = TopicIdPartition(uuid.UUID(int=8), "payments", 1)
    follower = broker_manager(topic)
    follower.on_partition_leadership_changes(set(), {other})
    assert follower.wait_ready(other, 10)
    theirs = segment(other, 0, 9)
    forge(topic, other, theirs)
    forge(topic, other, update(theirs, S.COPY_SEGMENT_FINISHED, 2))
    follower.add_remote_log_segment_metadata(segment(other, 10, 19)).result(10)
    assert served(follower, other, theirs)
    follower.close()
