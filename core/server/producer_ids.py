"""Producer ids for InitProducerId, never handed out twice in the cluster.

A broker running alone takes them from its topic registry (persisted in blocks). In a
cluster every broker claims blocks of ``PRODUCER_ID_BLOCK_SIZE`` (1000) ids from
``/latest_producer_id_block`` with a conditional write and hands them out in order, as
Kafka's ZkProducerIdManager does; a broker that restarts claims a new block (the rest of
its old one is never used).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from core.server.topics import TopicRegistry
from core.server.zookeeper.data import ProducerIdBlock
from core.server.zookeeper.kafka_zk import KafkaZkClient

log = logging.getLogger(__name__)


class ProducerIdSource(Protocol):
    async def allocate(self) -> int:
        """A producer id no one had before."""
        ...


class RegistryProducerIds:
    """A broker running alone: ids from its registry."""

    def __init__(self, registry: TopicRegistry) -> None:
        self._registry = registry

    async def allocate(self) -> int:
        # A block's persistence is a small file write; the rest is counting.
        return await asyncio.to_thread(self._registry.allocate_producer_id)


class ZkProducerIds:
    """A cluster broker: ids from blocks claimed in ZooKeeper."""

    def __init__(self, zk: KafkaZkClient, broker_id: int) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._block: ProducerIdBlock | None = None
        self._next = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        """Raises ZkProducerIdsExhaustedError, ZkError."""
        async with self._lock:
            block = self._block
            if block is None or self._next > block.last_producer_id:
                block = self._block = await self._zk.allocate_producer_id_block(self._broker_id)
                self._next = block.first_producer_id
                log.info(
                    "claimed producer ids %d-%d", block.first_producer_id, block.last_producer_id
                )
            pid = self._next
            self._next += 1
            return pid
