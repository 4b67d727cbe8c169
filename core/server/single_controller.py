"""The controller of a broker running alone (no ``zookeeper.connect``).

The broker is its own controller (Metadata names it), so ElectLeaders is answered here: every
partition has one replica, which leads it, so no election is ever needed
(ELECTION_NOT_NEEDED, or UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist).
ControlledShutdown has nothing to move. AlterPartitionReassignments accepts only the broker
itself as a partition's replicas (nothing to do); no reassignment is ever in progress.
"""

from __future__ import annotations

from core.server.cluster_types import TopicPartition
from core.server.controller.elections import ElectionType
from core.server.metadata_cache import MetadataCache
from core.server.zookeeper.topic_data import ReplicaAssignment

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REPLICA_ASSIGNMENT = 39
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85


class SingleBrokerController:
    def __init__(self, metadata_cache: MetadataCache) -> None:
        self._cache = metadata_cache

    @property
    def is_active(self) -> bool:
        return True

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        return set()

    async def elect_leaders(
        self, election_type: ElectionType, partitions: set[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        if partitions is None:
            return {}  # as Kafka answers "all partitions": those needing none are left out
        return {
            tp: (
                (ELECTION_NOT_NEEDED, None)
                if self._cache.partition(tp) is not None
                else (UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            )
            for tp in partitions
        }

    async def alter_partition_reassignments(
        self, requested: dict[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        me = (self._cache.broker_id,)
        out: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp, target in requested.items():
            if self._cache.partition(tp) is None:
                out[tp] = (UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif target is None:
                out[tp] = (NO_REASSIGNMENT_IN_PROGRESS, "No reassignment in progress.")
            elif tuple(target) != me:
                out[tp] = (INVALID_REPLICA_ASSIGNMENT, f"the only broker is {me[0]}")
            else:
                out[tp] = (0, None)
        return out

    async def list_partition_reassignments(
        self, partitions: set[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        return {}
