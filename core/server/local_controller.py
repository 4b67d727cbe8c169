"""LocalController: the controller of an embedded broker (no ``zookeeper.connect``).

An embedded broker is the whole cluster: its topic registry (``TopicRegistry``,
``tierlog-metadata.json``) is the metadata, every partition has replicas = ISR = [this
broker], and this broker leads it. The LocalController tells the broker so through the calls
a ZooKeeper controller's requests become, so that the broker has one code path in both
modes:

- ``startup``: every registered topic, leader = self at the leader epoch the registry gives
  (bumped at every start, as a controller would after the broker's restart), through
  ``ReplicaManager.become_leader_or_follower``, then ``MetadataCache.update`` (Kafka's
  controller sends LeaderAndIsr before UpdateMetadata for new partitions too);
- ``topic_created`` / ``partitions_added``: the same for new partitions;
- ``topic_deleted``: ``ReplicaManager.stop_replicas`` with deletion, then the partitions
  leave the metadata cache.

The controller id is this broker's id and the controller epoch is fixed
(``CONTROLLER_EPOCH``): there is never another controller to fence.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from core.server.cluster_types import (
    EPOCH_DURING_DELETE,
    BrokerInfo,
    LeaderAndIsr,
    PartitionState,
    StopReplicaPartition,
)
from core.server.metadata_cache import MetadataCache
from core.server.replica_manager import ReplicaManager
from core.server.topics import TopicInfo, TopicRegistry

log = logging.getLogger(__name__)

CONTROLLER_EPOCH = 1


class LocalController:
    """Drives one broker's ReplicaManager and MetadataCache from its topic registry.

    Args:
        broker: this broker's registration (its listeners; refreshed by
            ``set_broker_info`` once the listeners are bound).
    """

    def __init__(
        self,
        topics: TopicRegistry,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        broker: BrokerInfo,
    ) -> None:
        self.topics = topics
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.broker = broker

    @property
    def broker_id(self) -> int:
        return self.broker.broker_id

    def partition_states(
        self, info: TopicInfo, indexes: Iterable[int] | None = None, *, is_new: bool = False
    ) -> list[PartitionState]:
        """The states of a topic's partitions (all, or ``indexes``) with this broker as the
        only replica."""
        me = self.broker_id
        epochs = info.leader_epochs
        return [
            PartitionState(
                topic=info.name,
                topic_id=info.topic_id,
                partition=index,
                controller_epoch=CONTROLLER_EPOCH,
                leader_and_isr=LeaderAndIsr(
                    leader=me,
                    leader_epoch=epochs[index] if index < len(epochs) else 0,
                    isr=(me,),
                ),
                replicas=(me,),
                is_new=is_new,
            )
            for index in (range(info.partitions) if indexes is None else indexes)
        ]

    async def startup(self) -> None:
        """Lead every registered topic's partitions (opening their logs)."""
        states = [s for info in self.topics.all() for s in self.partition_states(info)]
        await self._lead(states)

    async def topic_created(self, info: TopicInfo) -> bool:
        """Lead a new topic's partitions (creating their logs a step at a time).

        Returns:
            False if some partition is not served: the broker began stopping first (the
            next start opens the rest), or its log could not be opened (logged).
        """
        return await self._lead(self.partition_states(info, is_new=True))

    async def partitions_added(self, info: TopicInfo, first_new: int) -> bool:
        """Lead the partitions ``first_new`` .. ``info.partitions - 1`` of a grown topic.

        Returns:
            As ``topic_created``.
        """
        states = self.partition_states(info, range(first_new, info.partitions), is_new=True)
        return await self._lead(states)

    async def topic_deleted(self, info: TopicInfo) -> None:
        """Stop serving a deleted topic and delete its logs (also those of partitions never
        opened, such as the rest of a creation cut short)."""
        tps = [(info.name, index) for index in range(info.partitions)]
        await self.replica_manager.stop_replicas(
            self.broker_id,
            CONTROLLER_EPOCH,
            [StopReplicaPartition(tp, EPOCH_DURING_DELETE, True) for tp in tps],
        )
        self.metadata_cache.update(
            self.broker_id, CONTROLLER_EPOCH, [self.broker], (), deleted_partitions=tps
        )

    def set_broker_info(self, broker: BrokerInfo) -> None:
        """This broker's registration once its listeners are bound (the real ports)."""
        self.broker = broker
        self.metadata_cache.update(self.broker_id, CONTROLLER_EPOCH, [broker], ())

    async def _lead(self, states: list[PartitionState]) -> bool:
        errors = await self.replica_manager.become_leader_or_follower(
            self.broker_id, CONTROLLER_EPOCH, states
        )
        served = [s for s in states if errors.get(s.tp, 0) == 0]
        failed = len(states) - len(served)
        if failed and not self.replica_manager.stopping:
            log.error("%d partitions could not be opened (see above)", failed)
        self.metadata_cache.update(self.broker_id, CONTROLLER_EPOCH, [self.broker], served)
        return failed == 0
