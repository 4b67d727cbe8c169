"""The controller of a broker running alone (no ``zookeeper.connect``).

The broker is its own controller (Metadata names it), so ElectLeaders is answered here: every
partition has one replica, which leads it, so no election is ever needed
(ELECTION_NOT_NEEDED, or UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist).
ControlledShutdown has nothing to move.
"""

from __future__ import annotations

from core.server.cluster_types import TopicPartition
from core.server.controller.elections import ElectionType
from core.server.metadata_cache import MetadataCache

UNKNOWN_TOPIC_OR_PARTITION = 3
ELECTION_NOT_NEEDED = 84


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
