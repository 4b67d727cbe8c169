"""What the active controller knows (Kafka's ControllerContext): live brokers and their epochs,
topics with ids and replica assignments, each partition's leader and ISR, topics being
deleted. Only the controller's event task reads and changes it.

Broker sets, as Kafka's: *live* brokers exclude those in a controlled shutdown (they may not
become leaders or join new ISRs); requests go to the *live or shutting down* ones.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from core.server.cluster_types import (
    ZERO_UUID,
    BrokerInfo,
    LeaderAndIsr,
    PartitionState,
    TopicPartition,
)
from core.server.zookeeper.topic_data import ReplicaAssignment


@dataclass(frozen=True, slots=True)
class Leadership:
    """A partition's leader and ISR, and the epoch of the controller that wrote them
    (Kafka's LeaderIsrAndControllerEpoch)."""

    leader_and_isr: LeaderAndIsr
    controller_epoch: int


class ReplicaDeletionState(enum.Enum):
    """Where a replica of a topic being deleted is (Kafka's ReplicaDeletion* states)."""

    STARTED = "started"  # StopReplica(delete) sent, no answer yet
    SUCCESSFUL = "successful"
    INELIGIBLE = "ineligible"  # its broker is down or answered an error: retried later


class ControllerContext:
    def __init__(self, epoch: int = 0, epoch_zk_version: int = -1) -> None:
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.live_brokers: dict[int, BrokerInfo] = {}  # live or shutting down
        self.shutting_down: set[int] = set()
        self.all_topics: set[str] = set()
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.assignments: dict[str, dict[int, ReplicaAssignment]] = {}
        self.leadership: dict[TopicPartition, Leadership] = {}
        # Topic deletion (driven by TopicDeletionManager).
        self.topics_to_delete: set[str] = set()
        self.topics_deletion_started: set[str] = set()
        self.topics_ineligible_for_deletion: set[str] = set()
        self.replica_deletion: dict[tuple[TopicPartition, int], ReplicaDeletionState] = {}

    # -- brokers -----------------------------------------------------------------------------
    def live_broker_ids(self) -> set[int]:
        return set(self.live_brokers) - self.shutting_down

    def live_or_shutting_down_ids(self) -> set[int]:
        return set(self.live_brokers)

    def is_replica_online(self, broker_id: int, *, include_shutting_down: bool = False) -> bool:
        if broker_id not in self.live_brokers:
            return False
        return include_shutting_down or broker_id not in self.shutting_down

    def broker_epoch(self, broker_id: int) -> int:
        broker = self.live_brokers.get(broker_id)
        return -1 if broker is None else broker.epoch

    def add_live_broker(self, broker: BrokerInfo) -> None:
        self.live_brokers[broker.broker_id] = broker

    def remove_live_broker(self, broker_id: int) -> None:
        self.live_brokers.pop(broker_id, None)
        self.shutting_down.discard(broker_id)

    # -- topics and assignments --------------------------------------------------------------
    def set_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.assignments.setdefault(tp[0], {})[tp[1]] = assignment

    def assignment(self, tp: TopicPartition) -> ReplicaAssignment | None:
        return self.assignments.get(tp[0], {}).get(tp[1])

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        assignment = self.assignment(tp)
        return () if assignment is None else assignment.replicas

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def all_partitions(self) -> list[TopicPartition]:
        return [tp for topic in sorted(self.assignments) for tp in self.partitions_of(topic)]

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            self.leadership.pop(tp, None)
            for broker_id in self.replicas(tp):
                self.replica_deletion.pop((tp, broker_id), None)
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.all_topics.discard(topic)
        self.topics_to_delete.discard(topic)
        self.topics_deletion_started.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)

    def is_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_delete

    # -- leadership --------------------------------------------------------------------------
    def set_leadership(
        self, tp: TopicPartition, state: LeaderAndIsr, controller_epoch: int
    ) -> None:
        self.leadership[tp] = Leadership(state, controller_epoch)

    def leader(self, tp: TopicPartition) -> int | None:
        found = self.leadership.get(tp)
        return None if found is None else found.leader_and_isr.leader

    def new_partitions(self) -> list[TopicPartition]:
        """Partitions without a leader and ISR yet (no live replica when they were created),
        topics being deleted left out."""
        return [
            tp
            for tp in self.all_partitions()
            if tp not in self.leadership and not self.is_queued_for_deletion(tp[0])
        ]

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        """Partitions whose leader is none, dead or shutting down (Kafka's
        partitionsWithOfflineLeader), topics being deleted left out."""
        return [
            tp
            for tp, found in sorted(self.leadership.items())
            if not self.is_replica_online(found.leader_and_isr.leader)
            and not self.is_queued_for_deletion(tp[0])
        ]

    def partitions_led_by(self, broker_id: int) -> set[TopicPartition]:
        return {
            tp for tp, found in self.leadership.items() if found.leader_and_isr.leader == broker_id
        }

    def partition_state(self, tp: TopicPartition, *, is_new: bool = False) -> PartitionState:
        """The state to send for ``tp``, which must have a leadership. Replicas on brokers
        that are not live (or are shutting down) are offline, as Kafka reports them."""
        found = self.leadership[tp]
        assignment = self.assignment(tp) or ReplicaAssignment(())
        return PartitionState(
            topic=tp[0],
            topic_id=self.topic_ids.get(tp[0], ZERO_UUID),
            partition=tp[1],
            controller_epoch=found.controller_epoch,
            leader_and_isr=found.leader_and_isr,
            replicas=assignment.replicas,
            adding_replicas=assignment.adding_replicas,
            removing_replicas=assignment.removing_replicas,
            offline_replicas=tuple(r for r in assignment.replicas if not self.is_replica_online(r)),
            is_new=is_new,
        )
