"""Topic deletion (Kafka's TopicDeletionManager).

An admin asks by creating ``/admin/delete_topics/<topic>``. The controller then:

0. tells ``on_deletion_started`` (the topic's name, id, partition indexes and config
   overrides), once per topic and controller term: the controller's broker marks the
   partitions of a tiered topic for the deletion of their remote data (KIP-405's
   DELETE_PARTITION_MARKED); a repeated mark is harmless;
1. sends UpdateMetadata with the topic's partitions at leader -2, so brokers drop them from
   their metadata (clients see the topic gone);
2. sends every replica on a live broker StopReplica(delete=false) (stop fetching), then
   StopReplica(delete=true) (delete the log), and waits for the answers;
3. once every replica answered without error, deletes ``/brokers/topics/<topic>`` (with the
   partition states), ``/config/topics/<topic>`` and the deletion marker, and forgets the
   topic.

Replicas on dead (or shutting-down) brokers, and replicas whose broker answered an error,
are *ineligible*: the topic waits until one of its brokers comes back (or a new controller
takes over), then the failed replicas are tried again. A topic being deleted gets no
elections and no new partitions.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable

from core.server.cluster_types import TopicPartition
from core.server.controller.channel import ControllerBrokerRequestBatch, StopReplicaCallback
from core.server.controller.context import ControllerContext, ReplicaDeletionState
from core.server.zookeeper.kafka_zk import KafkaZkClient

log = logging.getLogger(__name__)

Replica = tuple[TopicPartition, int]
# (topic, topic id, partition indexes, topic config overrides)
DeletionStarted = Callable[[str, uuid.UUID, list[int], dict[str, str]], None]


class TopicDeletionManager:
    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        batch: ControllerBrokerRequestBatch,
        *,
        enabled: bool,
        on_stop_replica_response: StopReplicaCallback,
        on_topic_deleted: Callable[[str], None],
        on_deletion_started: DeletionStarted | None = None,
    ) -> None:
        self._on_deletion_started = on_deletion_started
        self._zk = zk
        self._context = context
        self._batch = batch
        self.enabled = enabled
        self._on_stop_replica_response = on_stop_replica_response
        self._on_topic_deleted = on_topic_deleted

    # -- requests ----------------------------------------------------------------------------
    async def init(self, marked: set[str]) -> None:
        """At failover: queue the topics marked for deletion; those with replicas on dead
        brokers start ineligible (Kafka's fetchTopicDeletionsInProgress)."""
        queued = await self._accept(marked)
        self._context.topics_ineligible_for_deletion |= {
            t for t in queued if any(not self._online(b) for _, b in self._replicas(t))
        }

    async def enqueue(self, marked: set[str]) -> None:
        """A change of ``/admin/delete_topics``: queue the new topics and go on (replicas on
        dead brokers are found when the deletion starts)."""
        await self._accept(marked - self._context.topics_to_delete)
        await self.resume()

    async def _accept(self, marked: set[str]) -> set[str]:
        """Queue the marked topics that exist; remove the markers of the others, and all of
        them without ``delete.topic.enable`` (Kafka)."""
        context = self._context
        refused = marked if not self.enabled else marked - context.all_topics
        if refused:
            if not self.enabled:
                log.info("delete.topic.enable is false: not deleting %s", sorted(refused))
            await self._zk.remove_topic_deletion_markers(
                refused, controller_epoch_zk_version=context.epoch_zk_version
            )
        queued = marked - refused
        context.topics_to_delete |= queued
        return queued

    async def resume_for_topics(self, topics: Iterable[str]) -> None:
        """A broker holding replicas of these topics came back: they are eligible again."""
        context = self._context
        context.topics_ineligible_for_deletion -= set(topics) & context.topics_to_delete
        await self.resume()

    async def replicas_failed(self, replicas: Iterable[Replica]) -> None:
        """Replicas whose broker died or answered an error: retried later."""
        if self._mark_failed(replicas):
            await self.resume()

    def _mark_failed(self, replicas: Iterable[Replica]) -> bool:
        failed = [r for r in replicas if self._context.is_queued_for_deletion(r[0][0])]
        for replica in failed:
            self._context.replica_deletion[replica] = ReplicaDeletionState.INELIGIBLE
        topics = sorted({tp[0] for tp, _ in failed})
        if failed:
            log.info("deletion of topics %s waits: replicas %s were not deleted", topics, failed)
        self._context.topics_ineligible_for_deletion.update(topics)
        return bool(failed)

    async def stop_replica_answered(
        self, broker_id: int, errors: dict[TopicPartition, int]
    ) -> None:
        """The answer of ``broker_id`` to StopReplica(delete=true)."""
        context = self._context
        relevant = {tp: c for tp, c in errors.items() if context.is_queued_for_deletion(tp[0])}
        for tp, code in relevant.items():
            if code == 0:
                context.replica_deletion[(tp, broker_id)] = ReplicaDeletionState.SUCCESSFUL
        self._mark_failed((tp, broker_id) for tp, code in relevant.items() if code != 0)
        await self.resume()

    # -- progress ----------------------------------------------------------------------------
    async def resume(self) -> None:
        """Complete, retry or start the deletion of each queued topic as its replicas allow."""
        context = self._context
        retry: list[str] = []
        start: list[str] = []
        for topic in sorted(context.topics_to_delete):
            states = [context.replica_deletion.get(r) for r in self._replicas(topic)]
            if all(s is ReplicaDeletionState.SUCCESSFUL for s in states):
                await self._complete(topic)
                continue
            in_progress = ReplicaDeletionState.STARTED in states
            if not in_progress and ReplicaDeletionState.INELIGIBLE in states:
                retry.append(topic)
            if not in_progress and topic not in context.topics_ineligible_for_deletion:
                start.append(topic)
        for topic in retry:
            for replica in self._replicas(topic):
                if context.replica_deletion.get(replica) is ReplicaDeletionState.INELIGIBLE:
                    del context.replica_deletion[replica]
        if start:
            await self._start(start)

    async def _start(self, topics: list[str]) -> None:
        context, batch = self._context, self._batch
        for topic in topics:
            if topic not in context.topics_deletion_started:
                log.info("deletion of topic %s started", topic)
                context.topics_deletion_started.add(topic)
                await self._deletion_started(topic)
        partitions = [tp for t in topics for tp in context.partitions_of(t)]
        batch.add_update_metadata(context.live_or_shutting_down_ids(), partitions)
        batch.send()
        to_delete: list[Replica] = []
        for topic in topics:
            for replica in self._replicas(topic):
                state = context.replica_deletion.get(replica)
                if state is ReplicaDeletionState.SUCCESSFUL:
                    continue
                if self._online(replica[1]):
                    to_delete.append(replica)
                else:
                    context.replica_deletion[replica] = ReplicaDeletionState.INELIGIBLE
                    context.topics_ineligible_for_deletion.add(topic)
        # First stop the replicas (followers stop fetching), then delete them.
        for tp, broker_id in to_delete:
            batch.add_stop_replica([broker_id], tp, delete=False)
        batch.send()
        for tp, broker_id in to_delete:
            batch.add_stop_replica([broker_id], tp, delete=True)
            context.replica_deletion[(tp, broker_id)] = ReplicaDeletionState.STARTED
        batch.send(on_stop_replica_response=self._on_stop_replica_response)

    async def _complete(self, topic: str) -> None:
        context = self._context
        self._batch.add_update_metadata(
            context.live_or_shutting_down_ids(), context.partitions_of(topic)
        )
        self._batch.send()
        self._on_topic_deleted(topic)
        await self._zk.delete_topic_znodes(
            topic, controller_epoch_zk_version=context.epoch_zk_version
        )
        context.remove_topic(topic)
        log.info("deletion of topic %s completed", topic)

    async def _deletion_started(self, topic: str) -> None:
        """Tell the broker (remote data to mark); its failure never stops the deletion."""
        listener = self._on_deletion_started
        topic_id = self._context.topic_ids.get(topic)
        if listener is None or topic_id is None:
            return
        try:
            overrides = await self._zk.get_topic_config(topic)
        except Exception:  # ZooKeeper trouble: the broker decides on defaults
            log.exception("topic %s: reading its config for the deletion failed", topic)
            overrides = {}
        indexes = sorted(tp[1] for tp in self._context.partitions_of(topic))
        try:
            listener(topic, topic_id, indexes, overrides)
        except Exception:  # a listener's bug must not wedge the controller
            log.exception("topic %s: the deletion listener failed", topic)

    # -- helpers -----------------------------------------------------------------------------
    def _replicas(self, topic: str) -> list[Replica]:
        context = self._context
        return [(tp, b) for tp in context.partitions_of(topic) for b in context.replicas(tp)]

    def _online(self, broker_id: int) -> bool:
        # Kafka counts a shutting-down broker as offline here: it is going away.
        return self._context.is_replica_online(broker_id)
