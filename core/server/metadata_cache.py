"""What this broker knows of the cluster: Kafka's ZkMetadataCache.

The controller's UpdateMetadata requests (or, with no ZooKeeper, the in-process controller)
are the only writers, through ``update``. Each update replaces the live brokers whole, and
adds, replaces or removes the partitions it names; the others stay as they were. A
partition whose leader is ``LEADER_DURING_DELETE`` (-2) is removed, as Kafka's brokers do
with the partitions of a topic being deleted; a topic goes when its last partition goes.

Handlers (Metadata, FindCoordinator, KIP-951 leader hints, ...) read the cache on the event
loop while an update may come from anywhere: every update builds a new immutable snapshot
and swaps it in whole, so a reader sees one update entirely or not at all. Read the
``snapshot()`` once when several answers must agree with each other.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from core.errors import CoreError
from core.server.cluster_types import (
    LEADER_DURING_DELETE,
    ZERO_UUID,
    BrokerEndpoint,
    BrokerInfo,
    PartitionState,
    TopicPartition,
)


class StaleControllerEpochError(CoreError):
    """An update from a controller older than the one the cache last heard from
    (STALE_CONTROLLER_EPOCH)."""

    error_code = 11


_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """One consistent view of the cluster; never changed once built."""

    controller_id: int | None = None
    controller_epoch: int = -1
    brokers: Mapping[int, BrokerInfo] = field(default_factory=lambda: _EMPTY)
    partitions: Mapping[str, Mapping[int, PartitionState]] = field(default_factory=lambda: _EMPTY)
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=lambda: _EMPTY)
    topic_names: Mapping[uuid.UUID, str] = field(default_factory=lambda: _EMPTY)

    # -- brokers ---------------------------------------------------------------------------
    def alive_brokers(self) -> list[BrokerInfo]:
        return [self.brokers[b] for b in sorted(self.brokers)]

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self.brokers.get(broker_id)

    def is_alive(self, broker_id: int) -> bool:
        return broker_id in self.brokers

    def endpoint(self, broker_id: int, listener: str) -> BrokerEndpoint | None:
        broker = self.brokers.get(broker_id)
        return None if broker is None else broker.endpoint(listener)

    # -- topics and partitions -------------------------------------------------------------
    def topic_names_set(self) -> set[str]:
        return set(self.partitions)

    def contains_topic(self, topic: str) -> bool:
        return topic in self.partitions

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self.topic_ids.get(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.topic_names.get(topic_id)

    def partitions_of(self, topic: str) -> list[PartitionState]:
        """The topic's partitions in index order; empty for an unknown topic."""
        parts = self.partitions.get(topic, _EMPTY)
        return [parts[p] for p in sorted(parts)]

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        return self.partitions.get(tp[0], _EMPTY).get(tp[1])

    def leader(self, tp: TopicPartition) -> int | None:
        """The leader's id (-1 while the partition has none); None for an unknown partition."""
        state = self.partition(tp)
        return None if state is None else state.leader

    def leader_endpoint(self, tp: TopicPartition, listener: str) -> BrokerEndpoint | None:
        """The leader's endpoint on ``listener``; None for an unknown partition, no leader,
        a leader that is not alive, or one without that listener."""
        leader = self.leader(tp)
        return None if leader is None or leader < 0 else self.endpoint(leader, listener)

    def offline_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        state = self.partition(tp)
        return () if state is None else state.offline_replicas


class MetadataCache:
    """The broker's metadata cache; queries answer from the current snapshot."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self._snapshot = MetadataSnapshot()
        self._write_lock = threading.Lock()

    def snapshot(self) -> MetadataSnapshot:
        return self._snapshot

    def update(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: Iterable[BrokerInfo],
        partition_states: Iterable[PartitionState],
        deleted_partitions: Iterable[TopicPartition] = (),
    ) -> set[TopicPartition]:
        """Apply one UpdateMetadata; returns the partitions it removed.

        Args:
            controller_id: the sender; a negative id means none is known.
            brokers: every live broker (the previous set is replaced).
            partition_states: partitions to add or replace; those with leader
                LEADER_DURING_DELETE are removed instead.
            deleted_partitions: partitions to remove.

        Raises:
            StaleControllerEpochError: ``controller_epoch`` is older than the epoch of the
                last update applied (nothing is changed).
        """
        states = list(partition_states)
        with self._write_lock:
            old = self._snapshot
            if controller_epoch < old.controller_epoch:
                raise StaleControllerEpochError(
                    f"UpdateMetadata from controller {controller_id} with epoch "
                    f"{controller_epoch}: the latest known controller epoch is "
                    f"{old.controller_epoch}"
                )
            # Copy on write, per topic: an update costs what it names, not the cluster size.
            partitions: dict[str, Mapping[int, PartitionState]] = dict(old.partitions)
            touched: dict[str, dict[int, PartitionState]] = {}
            topic_ids = dict(old.topic_ids)
            removed: set[TopicPartition] = set()

            def writable(topic: str) -> dict[int, PartitionState]:
                if topic not in touched:
                    touched[topic] = dict(partitions.get(topic, _EMPTY))
                return touched[topic]

            def remove(tp: TopicPartition) -> None:
                known = tp[0] in partitions or tp[0] in touched
                if known and writable(tp[0]).pop(tp[1], None) is not None:
                    removed.add(tp)

            for tp in deleted_partitions:
                remove(tp)
            for state in states:
                if state.leader == LEADER_DURING_DELETE:
                    remove(state.tp)
                    continue
                writable(state.topic)[state.partition] = state
                removed.discard(state.tp)
                if state.topic_id != ZERO_UUID:
                    topic_ids[state.topic] = state.topic_id
            for topic, parts in touched.items():
                if parts:
                    partitions[topic] = MappingProxyType(parts)
                else:  # the topic went with its last partition
                    partitions.pop(topic, None)
                    topic_ids.pop(topic, None)
            self._snapshot = MetadataSnapshot(
                controller_id=controller_id if controller_id >= 0 else None,
                controller_epoch=controller_epoch,
                brokers=MappingProxyType({b.broker_id: b for b in brokers}),
                partitions=MappingProxyType(partitions),
                topic_ids=MappingProxyType(topic_ids),
                topic_names=MappingProxyType({v: k for k, v in topic_ids.items()}),
            )
            return removed

    # -- queries (each on the current snapshot) --------------------------------------------
    @property
    def controller_id(self) -> int | None:
        return self._snapshot.controller_id

    @property
    def controller_epoch(self) -> int:
        return self._snapshot.controller_epoch

    def alive_brokers(self) -> list[BrokerInfo]:
        return self._snapshot.alive_brokers()

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._snapshot.broker(broker_id)

    def is_alive(self, broker_id: int) -> bool:
        return self._snapshot.is_alive(broker_id)

    def endpoint(self, broker_id: int, listener: str) -> BrokerEndpoint | None:
        return self._snapshot.endpoint(broker_id, listener)

    def topic_names(self) -> set[str]:
        return self._snapshot.topic_names_set()

    def contains_topic(self, topic: str) -> bool:
        return self._snapshot.contains_topic(topic)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self._snapshot.topic_id(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._snapshot.topic_name(topic_id)

    def partitions_of(self, topic: str) -> list[PartitionState]:
        return self._snapshot.partitions_of(topic)

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        return self._snapshot.partition(tp)

    def leader(self, tp: TopicPartition) -> int | None:
        return self._snapshot.leader(tp)

    def leader_endpoint(self, tp: TopicPartition, listener: str) -> BrokerEndpoint | None:
        return self._snapshot.leader_endpoint(tp, listener)

    def offline_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self._snapshot.offline_replicas(tp)
