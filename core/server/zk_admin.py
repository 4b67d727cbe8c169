"""Topic administration in a cluster: CreateTopics, DeleteTopics, config changes and
CreatePartitions written to ZooKeeper, as Kafka's ZooKeeper-mode brokers do it
(``AdminZkClient`` and ``ZkAdminManager``).

A broker never creates or deletes partitions itself in a cluster: it writes the request to
ZooKeeper, the controller acts on it, and the broker answers once its MetadataCache shows
the outcome (Kafka's DelayedCreatePartitions / DelayedDeleteTopics), or with
REQUEST_TIMED_OUT after the request's timeout (the change still happens):

- create: validate (name, collisions, partitions, replication factor or explicit
  assignment, configs), write ``/config/topics/<t>`` then ``/brokers/topics/<t>`` with a new
  topic id; answered when every partition has a leader;
- delete: create ``/admin/delete_topics/<t>``; answered when the topic has left the cache;
- configs: write ``/config/topics/<t>`` and a ``/config/changes`` notification, which every
  broker applies (``core.server.config_sync``);
- partitions: extend ``/brokers/topics/<t>`` (keeping its id), continuing the topic's
  placement pattern; answered when the new partitions have leaders.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from core.errors import CoreError
from core.log.config import LogConfig
from core.server.metadata_cache import MetadataCache, MetadataSnapshot
from core.server.replica_assignment import assign_replicas, validate_assignment
from core.server.topics import (
    InvalidPartitionsError,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
)
from core.server.zookeeper.errors import ZkNodeExistsError
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.topic_data import PartitionState, ReplicaAssignment, TopicAssignment
from core.topic_name import InvalidTopicError, validate_topic_name

log = logging.getLogger(__name__)


class RequestTimedOutError(CoreError):
    """REQUEST_TIMED_OUT: the change was written but not seen done within the timeout."""

    error_code = 7


class MetadataWaiters:
    """Coroutines waiting for the MetadataCache to show something; ``changed`` wakes them
    (called after every update of the cache)."""

    def __init__(self, cache: MetadataCache) -> None:
        self.cache = cache
        self._waiters: set[asyncio.Future[None]] = set()

    def changed(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for(
        self, predicate: Callable[[MetadataSnapshot], bool], timeout_ms: int
    ) -> bool:
        """True once ``predicate(snapshot)`` holds, False after ``timeout_ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while not predicate(self.cache.snapshot()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter = loop.create_future()
            self._waiters.add(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), remaining)
            except TimeoutError:
                self._waiters.discard(waiter)
        return True


def _has_leaders(topic: str, partitions: Sequence[int]) -> Callable[[MetadataSnapshot], bool]:
    def check(snapshot: MetadataSnapshot) -> bool:
        for p in partitions:
            state = snapshot.partition((topic, p))
            if state is None or state.leader < 0:
                return False
        return True

    return check


class ZkClusterAdmin:
    """Topic changes of a cluster broker (see the module docstring)."""

    def __init__(
        self,
        zk: KafkaZkClient,
        waiters: MetadataWaiters,
        broker_defaults: Mapping[str, str],
    ) -> None:
        self._zk = zk
        self._waiters = waiters
        self._cache = waiters.cache
        self._broker_defaults = dict(broker_defaults)

    async def live_broker_ids(self) -> list[int]:
        """The brokers registered at ``/brokers/ids``, as Kafka's AdminZkClient reads them
        to place replicas. Not the MetadataCache's live brokers: they come with the
        controller's UpdateMetadata, which may not yet name a broker that has registered
        (under load, or right after a start), and a topic with a replication factor the
        cluster has would be refused with INVALID_REPLICATION_FACTOR."""
        return await self._zk.get_broker_ids()

    # -- CreateTopics ----------------------------------------------------------------------
    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        *,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]] | None = None,
        validate_only: bool = False,
        timeout_ms: int = 0,
        topic_id: uuid.UUID | None = None,
        brokers: Sequence[int] | None = None,
        first_leader_epochs: Mapping[int, int] | None = None,
    ) -> TopicInfo:
        """Create a topic in ZooKeeper (Kafka's AdminZkClient.createTopic).

        Args:
            topic_id: the id to register (``tierlog restore`` keeps a topic's own); a new
                one by default.
            brokers: the live broker ids to place replicas on; by default those
                registered at ``/brokers/ids`` (``live_broker_ids``).
            first_leader_epochs: per partition, the leader epoch it starts at (a restored
                log's next one) instead of 0: its state znode (first replica leading, every
                replica in the ISR) is written with the assignment, in one transaction, and
                the controller adopts it.

        Raises:
            InvalidTopicError, TopicExistsError, InvalidPartitionsError,
            InvalidReplicationFactorError, InvalidReplicaAssignmentError,
            InvalidConfigError; RequestTimedOutError once created but not yet led by the
            timeout.
        """
        validate_topic_name(name)
        live = await self.live_broker_ids() if brokers is None else list(brokers)
        if assignments:
            assignment = validate_assignment(assignments, live)
        else:
            assignment = assign_replicas(partitions, replication_factor, live)
        LogConfig.from_props(dict(configs), defaults=self._broker_defaults)  # validates
        await self._check_new_name(name)
        info = TopicInfo(name, topic_id or uuid.uuid4(), len(assignment), dict(configs))
        if validate_only:
            return info
        await self._zk.set_topic_config(name, configs, notify=False)
        topic = TopicAssignment(
            info.topic_id, {p: ReplicaAssignment(r) for p, r in assignment.items()}
        )
        try:
            if first_leader_epochs is None:
                await self._zk.create_topic_assignment(name, topic)
            else:
                controller = await self._zk.get_controller_epoch()
                epoch = 0 if controller is None else controller.epoch
                states = {
                    p: PartitionState(replicas[0], first_leader_epochs.get(p, 0), replicas, epoch)
                    for p, replicas in assignment.items()
                }
                await self._zk.create_topic_with_states(name, topic, states)
        except ZkNodeExistsError:
            raise TopicExistsError(f"Topic '{name}' already exists.") from None
        log.info("created topic %s in ZooKeeper: %s", name, dict(assignment))
        await self._wait(_has_leaders(name, list(assignment)), timeout_ms, f"creation of {name}")
        return info

    async def _check_new_name(self, name: str) -> None:
        """Kafka's validateTopicCreate: not marked for deletion, not existing, no collision."""
        if name in await self._zk.get_topics_marked_for_deletion():
            raise TopicExistsError(f"Topic '{name}' is marked for deletion.")
        existing = await self._zk.get_all_topics()
        if name in existing:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        key = name.replace(".", "_")
        clash = sorted(t for t in existing if t.replace(".", "_") == key)
        if clash:
            raise InvalidTopicError(
                f"Topic '{name}' collides with existing topics: {', '.join(clash)}"
            )

    async def _wait(
        self, predicate: Callable[[MetadataSnapshot], bool], timeout_ms: int, what: str
    ) -> None:
        if timeout_ms <= 0:
            return  # Kafka answers at once for a zero timeout
        if not await self._waiters.wait_for(predicate, timeout_ms):
            raise RequestTimedOutError(
                f"the {what} was written to ZooKeeper but not completed within {timeout_ms} ms"
            )

    # -- DeleteTopics ----------------------------------------------------------------------
    async def delete_topic(self, name: str, *, timeout_ms: int = 0) -> TopicInfo:
        """Mark a topic for deletion (Kafka's AdminZkClient.deleteTopic); answered when it
        has left this broker's metadata.

        Raises:
            UnknownTopicError; RequestTimedOutError.
        """
        assignment = await self._zk.get_topic_assignment(name)
        if assignment is None:
            raise UnknownTopicError(f"Topic {name} does not exist.")
        # Already marked: this request waits for the same deletion (Kafka).
        with contextlib.suppress(ZkNodeExistsError):
            await self._zk.mark_topic_for_deletion(name)
        log.info("topic %s marked for deletion", name)
        await self._wait(
            lambda snapshot: not snapshot.contains_topic(name), timeout_ms, f"deletion of {name}"
        )
        return TopicInfo(name, assignment.topic_id or uuid.UUID(int=0), len(assignment.partitions))

    # -- configs ---------------------------------------------------------------------------
    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a topic's overrides and notify every broker (Kafka's
        AdminZkClient.changeTopicConfig).

        Raises:
            UnknownTopicError: the topic does not exist.
        """
        if await self._zk.get_topic_assignment(name) is None:
            raise UnknownTopicError(f"Topic {name} does not exist.")
        await self._zk.set_topic_config(name, configs, notify=True)

    # -- CreatePartitions ------------------------------------------------------------------
    async def create_partitions(
        self,
        name: str,
        total: int,
        assignments: Sequence[Sequence[int]] | None = None,
        *,
        validate_only: bool = False,
        timeout_ms: int = 0,
    ) -> dict[int, tuple[int, ...]]:
        """Grow a topic to ``total`` partitions (Kafka's AdminZkClient.addPartitions);
        returns the new partitions' replicas.

        Args:
            assignments: the replicas of each new partition, in order (CreatePartitions'
                ``assignments``); None places them as topic creation does, continuing
                the topic's pattern.

        Raises:
            UnknownTopicError, InvalidPartitionsError, InvalidReplicaAssignmentError,
            InvalidReplicationFactorError; RequestTimedOutError.
        """
        current = await self._zk.get_topic_assignment(name)
        if current is None or name in await self._zk.get_topics_marked_for_deletion():
            raise UnknownTopicError(f"The topic '{name}' does not exist.")
        existing = len(current.partitions)
        if total <= existing:
            raise InvalidPartitionsError(
                f"Topic currently has {existing} partitions, {total} would not be an increase."
            )
        replication = len(current.partitions[0].replicas) if 0 in current.partitions else 1
        live = await self.live_broker_ids()
        added = total - existing
        if assignments is not None:
            if len(assignments) != added:
                raise InvalidPartitionsError(
                    f"Increasing the number of partitions by {added} but {len(assignments)} "
                    "assignments provided."
                )
            new = validate_assignment(
                {existing + i: list(a) for i, a in enumerate(assignments)},
                live,
                first_partition=existing,
                replication_factor=replication,
            )
        else:
            first = current.partitions[0].replicas[0] if 0 in current.partitions else 0
            ordered = sorted(live)
            start = next((i for i, b in enumerate(ordered) if b >= first), 0)
            new = assign_replicas(
                added, replication, ordered, start_index=start, first_partition=existing
            )
        if validate_only:
            return new
        partitions = dict(current.partitions)
        partitions.update({p: ReplicaAssignment(r) for p, r in new.items()})
        await self._zk.set_topic_assignment(name, replace(current, partitions=partitions))
        log.info("topic %s: partitions %s added: %s", name, sorted(new), new)
        await self._wait(_has_leaders(name, list(new)), timeout_ms, f"new partitions of {name}")
        return new
