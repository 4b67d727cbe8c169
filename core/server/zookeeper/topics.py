"""Topic znodes of ``KafkaZkClient``: assignments, partition states, configs, deletions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from core.server.zookeeper import paths
from core.server.zookeeper.errors import (
    ZkBadVersionError,
    ZkControllerMovedError,
    ZkError,
    ZkNodeExistsError,
    ZkNoNodeError,
)
from core.server.zookeeper.ops import CreateOp, SetDataOp, ZnodeStat
from core.server.zookeeper.paths import MATCH_ANY_VERSION
from core.server.zookeeper.store import ZnodeStore
from core.server.zookeeper.topic_data import (
    PartitionState,
    TopicAssignment,
    TopicPartition,
    decode_config,
    decode_partition_state,
    decode_topic_assignment,
    encode_config,
    encode_partition_state,
    encode_topic_assignment,
)


@dataclass(frozen=True, slots=True)
class PartitionStateUpdateResult:
    """Per-partition outcome of ``update_partition_states`` (Kafka's UpdateLeaderAndIsrResult).

    Attributes:
        finished: the written state (with its new ``partition_epoch``), or the error.
        to_retry: partitions whose state znode was not at the expected version: someone else
            (the leader changing the ISR, say) wrote first. Read them again and decide again.
    """

    finished: dict[TopicPartition, PartitionState | ZkError] = field(default_factory=dict)
    to_retry: list[TopicPartition] = field(default_factory=list)


class TopicZnodes(ZnodeStore):
    # -- /brokers/topics/<topic> -----------------------------------------------------------
    async def get_all_topics(self) -> set[str]:
        return set(await self._children_or_empty(paths.BROKER_TOPICS))

    async def get_topic_assignment(self, topic: str) -> TopicAssignment | None:
        node = await self._get_or_none(paths.topic(topic))
        return None if node is None else decode_topic_assignment(topic, node.data)

    async def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """The assignments of those of ``topics`` that exist, read in parallel."""
        names = list(topics)
        found = await asyncio.gather(*(self.get_topic_assignment(t) for t in names))
        return {t: a for t, a in zip(names, found, strict=True) if a is not None}

    async def create_topic_assignment(self, topic: str, assignment: TopicAssignment) -> None:
        """Create ``/brokers/topics/<topic>``: how an admin creates a topic in ZooKeeper mode.

        Raises:
            ZkNodeExistsError: the topic exists.
        """
        data = encode_topic_assignment(assignment)
        await self.zookeeper.create_recursive(paths.topic(topic), data)

    async def create_topic_with_states(
        self, topic: str, assignment: TopicAssignment, states: Mapping[int, PartitionState]
    ) -> None:
        """Create ``/brokers/topics/<topic>`` together with its partitions' state znodes, in
        one transaction: for a topic whose partitions must start at given leader epochs
        (``tierlog restore``: above the restored log's). The controller, finding the states
        when it creates the partitions, adopts them.

        Raises:
            ZkNodeExistsError: the topic (or a leftover of it) exists; nothing was written.
        """
        ops: list[CreateOp] = [
            CreateOp(paths.topic(topic), encode_topic_assignment(assignment)),
            CreateOp(paths.topic_partitions(topic)),
        ]
        for partition, state in sorted(states.items()):
            ops.append(CreateOp(paths.partition(topic, partition)))
            ops.append(
                CreateOp(paths.partition_state(topic, partition), encode_partition_state(state))
            )
        await self.zookeeper.multi(ops)

    async def set_topic_assignment(
        self,
        topic: str,
        assignment: TopicAssignment,
        *,
        controller_epoch_zk_version: int = MATCH_ANY_VERSION,
    ) -> None:
        op = SetDataOp(paths.topic(topic), encode_topic_assignment(assignment))
        await self._write(op, controller_epoch_zk_version)

    async def delete_topic_znodes(self, topic: str, *, controller_epoch_zk_version: int) -> None:
        """The controller's last step of a topic deletion: the topic with its partition
        states, its config and its deletion marker, each delete fenced."""
        for path in (
            paths.topic(topic),
            paths.config_entity(paths.CONFIG_TOPICS, topic),
            paths.delete_topic(topic),
        ):
            await self._delete_recursive(path, controller_epoch_zk_version)

    # -- /brokers/topics/<topic>/partitions/<p>/state --------------------------------------
    async def get_partition_state(self, tp: TopicPartition) -> PartitionState | None:
        node = await self._get_or_none(paths.partition_state(*tp))
        if node is None:
            return None
        return decode_partition_state(tp, node.data, zk_version=node.stat.version)

    async def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionState]:
        """The states of many partitions, read in parallel (pipelined on the connection, at
        most ``max_in_flight_requests`` at a time); partitions without one are left out."""
        tps = list(partitions)
        found = await asyncio.gather(*(self.get_partition_state(tp) for tp in tps))
        return {tp: s for tp, s in zip(tps, found, strict=True) if s is not None}

    async def create_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], *, controller_epoch_zk_version: int
    ) -> dict[TopicPartition, PartitionState | ZkError]:
        """Create the state znodes (and their parents) of new partitions, fenced.

        Returns each partition's state with ``partition_epoch`` 0, or its error:
        ``ZkNodeExistsError`` if it has a state already, ``ZkNoNodeError`` if its topic has no
        ``/brokers/topics/<topic>`` znode.

        Raises:
            ZkControllerMovedError: another controller was elected.
        """
        parents = [paths.topic_partitions(t) for t in sorted({t for t, _ in states})]
        parents += [paths.partition(t, p) for t, p in sorted(states)]
        for parent in parents:
            # As Kafka, a parent that cannot be created shows as the state's own error.
            with contextlib.suppress(ZkNodeExistsError, ZkNoNodeError):
                await self._write(CreateOp(parent), controller_epoch_zk_version)

        async def create(tp: TopicPartition, state: PartitionState) -> PartitionState | ZkError:
            op = CreateOp(paths.partition_state(*tp), encode_partition_state(state))
            try:
                await self._write(op, controller_epoch_zk_version)
            except ZkControllerMovedError:
                raise
            except ZkError as e:
                return e
            return replace(state, partition_epoch=0)

        results = await asyncio.gather(*(create(tp, s) for tp, s in states.items()))
        return dict(zip(states, results, strict=True))

    async def update_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], *, controller_epoch_zk_version: int
    ) -> PartitionStateUpdateResult:
        """Write each new state if its znode is still at ``state.partition_epoch``, the version
        the old state was read at (Kafka's updateLeaderAndIsr). Written in parallel.

        Raises:
            ZkControllerMovedError: another controller was elected.
        """
        result = PartitionStateUpdateResult()

        async def update(tp: TopicPartition, state: PartitionState) -> None:
            data = encode_partition_state(state)
            op = SetDataOp(paths.partition_state(*tp), data, state.partition_epoch)
            try:
                stat = await self._write(op, controller_epoch_zk_version)
            except ZkBadVersionError:
                result.to_retry.append(tp)
                return
            except ZkControllerMovedError:
                raise
            except ZkError as e:
                result.finished[tp] = e
                return
            assert isinstance(stat, ZnodeStat)
            result.finished[tp] = replace(state, partition_epoch=stat.version)

        await asyncio.gather(*(update(tp, s) for tp, s in states.items()))
        return result

    # -- /config/<type>/<name> -------------------------------------------------------------
    async def get_entity_config(self, entity_type: str, sanitized_name: str) -> dict[str, str]:
        """The config overrides in ``/config/<type>/<name>``; none if it does not exist."""
        path = paths.config_entity(entity_type, sanitized_name)
        node = await self._get_or_none(path)
        return {} if node is None else decode_config(node.data, path)

    async def set_entity_config(
        self, entity_type: str, sanitized_name: str, config: Mapping[str, str]
    ) -> None:
        """Replace the overrides, creating the znode if needed (last writer wins, as Kafka).

        Kafka 3.x also checks that no KRaft controller took over (a migration); tierlog does
        not migrate, so there is nothing to check.
        """
        path = paths.config_entity(entity_type, sanitized_name)
        data = encode_config(config)
        try:
            await self.zookeeper.set(path, data)
        except ZkNoNodeError:
            try:
                await self.zookeeper.create_recursive(path, data)
            except ZkNodeExistsError:
                await self.zookeeper.set(path, data)

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        return await self.get_entity_config(paths.CONFIG_TOPICS, topic)

    # -- /admin/delete_topics --------------------------------------------------------------
    async def mark_topic_for_deletion(self, topic: str) -> None:
        """Create ``/admin/delete_topics/<topic>`` (no data): the request the controller acts on.

        Raises:
            ZkNodeExistsError: the topic is already marked for deletion.
        """
        await self.zookeeper.create_recursive(paths.delete_topic(topic))

    async def get_topics_marked_for_deletion(self) -> set[str]:
        return set(await self._children_or_empty(paths.DELETE_TOPICS))

    async def remove_topic_deletion_markers(
        self, topics: Iterable[str], *, controller_epoch_zk_version: int
    ) -> None:
        await self._delete_children(paths.DELETE_TOPICS, list(topics), controller_epoch_zk_version)
