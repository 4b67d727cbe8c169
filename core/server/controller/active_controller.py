"""One term of an elected controller: what Kafka's KafkaController does while active.

``ActiveController.failover`` is Kafka's onControllerFailover: register the watches, load
the context from ZooKeeper, send every live broker the full metadata and every live replica
its partition's state, elect leaders where there are none, resume topic deletions. The
``on_*`` methods handle the events of the term (``ZkController`` calls them one at a time).
``close`` ends the term: watches cancelled, channels closed; nothing is written.

Every ZooKeeper write is fenced on the controller epoch version of the term; a
``ZkControllerMovedError`` from any of them ends the term (``ZkController`` resigns).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace

from kio.schema.errors import ErrorCode

from core.server.cluster_types import TopicPartition, broker_info_from_zk, leader_and_isr_from_zk
from core.server.config import BrokerConfig
from core.server.controller import elections, events
from core.server.controller.channel import (
    ControllerBrokerRequestBatch,
    ControllerChannelManager,
    NodeSender,
)
from core.server.controller.context import ControllerContext
from core.server.controller.elections import ElectionType
from core.server.controller.errors import (
    BrokerNotAvailableError,
    StaleBrokerEpochError,
)
from core.server.controller.partition_changes import (
    ChangeFailed,
    ElectionStrategy,
    PartitionChanges,
)
from core.server.controller.reassignment import PartitionReassignments, ReassignmentResults
from core.server.controller.topic_deletion import DeletionStarted, TopicDeletionManager
from core.server.zookeeper import paths
from core.server.zookeeper.kafka_zk import ControllerEpoch, KafkaZkClient
from core.server.zookeeper.topic_data import ReplicaAssignment, TopicAssignment
from core.server.zookeeper.watch import ZkWatch

log = logging.getLogger(__name__)

# Kafka's error codes for ElectLeaders answers.

ElectionResults = dict[TopicPartition, tuple[int, str | None]]


class ActiveController:
    def __init__(
        self,
        zk: KafkaZkClient,
        broker_id: int,
        config: BrokerConfig,
        epoch: ControllerEpoch,
        client: NodeSender,
        put: Callable[[events.Event], None],
        deletion_started: DeletionStarted | None = None,
    ) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self._config = config
        self._put = put
        listener = config.inter_broker_listener_name
        self.context = ControllerContext(epoch.epoch, epoch.zk_version)
        self.channel = ControllerChannelManager(client, listener)
        self.batch = ControllerBrokerRequestBatch(broker_id, self.context, self.channel, listener)
        self.changes = PartitionChanges(zk, self.context, self.batch, self._unclean_allowed)
        self.deletion = TopicDeletionManager(
            zk,
            self.context,
            self.batch,
            enabled=config.get("delete.topic.enable"),
            on_stop_replica_response=lambda b, errors: put(events.StopReplicaAnswered(b, errors)),
            on_topic_deleted=self._unwatch_topic,
            on_deletion_started=deletion_started,
        )
        self.reassignments = PartitionReassignments(zk, self.context, self.batch, self.changes)
        self._watches: list[ZkWatch] = []
        self._topic_watches: dict[str, ZkWatch] = {}
        self._last_config_change = ""

    @property
    def epoch_zk_version(self) -> int:
        return self.context.epoch_zk_version

    # -- the term ----------------------------------------------------------------------------
    async def failover(self) -> None:
        zk, context, batch = self._zk, self.context, self.batch
        for path, event in (
            (paths.BROKER_IDS, events.BrokerChange),
            (paths.BROKER_TOPICS, events.TopicChange),
            (paths.DELETE_TOPICS, events.TopicDeletion),
            (paths.ISR_CHANGE_NOTIFICATION, events.IsrChangeNotification),
            (paths.CONFIG_CHANGES, events.ConfigChangeNotification),
        ):
            self._watches.append(await self._watch_children(path, event))
        # The states read below include what pending ISR notifications report (Kafka).
        pending = await zk.get_isr_change_notifications()
        await zk.delete_isr_change_notifications(
            pending, controller_epoch_zk_version=context.epoch_zk_version
        )
        changes = await zk.get_config_changes()
        self._last_config_change = max(changes, default="", key=_sequence)
        for registration in (await zk.get_live_brokers()).values():
            broker = broker_info_from_zk(registration)
            context.add_live_broker(broker)
            self.channel.add_broker(broker)
        topics = await zk.get_all_topics()
        await self._add_topics(await zk.get_topic_assignments(topics))
        for tp, state in (await zk.get_partition_states(context.all_partitions())).items():
            context.set_leadership(tp, leader_and_isr_from_zk(state), state.controller_epoch)
        await self.deletion.init(await zk.get_topics_marked_for_deletion())
        log.info("controller %d (epoch %d): %d live brokers, %d topics, %d partitions",
                 self.broker_id, context.epoch, len(context.live_brokers),
                 len(context.all_topics), len(context.all_partitions()))  # fmt: skip
        live = context.live_or_shutting_down_ids()
        batch.add_update_metadata(live, context.all_partitions())
        batch.send()
        for tp in sorted(context.leadership):
            if not context.is_queued_for_deletion(tp[0]):
                batch.add_leader_and_isr([r for r in context.replicas(tp) if r in live], tp)
        batch.send()
        await self._elect_new_and_offline()
        replica_brokers = {r for tp in context.all_partitions() for r in context.replicas(tp)}
        await self._remove_from_isrs(replica_brokers - live)
        self.batch.send()
        await self.deletion.resume()
        await self.reassignments.resume()

    async def close(self) -> None:
        for watch in [*self._watches, *self._topic_watches.values()]:
            watch.cancel()
        self._watches.clear()
        self._topic_watches.clear()
        await self.channel.close()

    # -- brokers -----------------------------------------------------------------------------
    async def on_broker_change(self) -> None:
        context = self.context
        current = {
            b.broker_id: b
            for b in map(broker_info_from_zk, (await self._zk.get_live_brokers()).values())
        }
        known = context.live_brokers
        new = sorted(set(current) - set(known))
        dead = sorted(set(known) - set(current))
        bounced = sorted(b for b in set(current) & set(known) if current[b].epoch > known[b].epoch)
        if not (new or dead or bounced):
            return
        log.info("brokers: new %s, dead %s, bounced %s", new, dead, bounced)
        for broker_id in new:
            self.channel.add_broker(current[broker_id])
        for broker_id in [*bounced, *dead]:
            await self.channel.remove_broker(broker_id)
        for broker_id in bounced:
            self.channel.add_broker(current[broker_id])
        if new:
            for broker_id in new:
                context.add_live_broker(current[broker_id])
            await self._on_broker_startup(new)
        if bounced:
            for broker_id in bounced:
                context.remove_live_broker(broker_id)
            await self._on_broker_failure(bounced)
            for broker_id in bounced:
                context.add_live_broker(current[broker_id])
            await self._on_broker_startup(bounced)
        if dead:
            for broker_id in dead:
                context.remove_live_broker(broker_id)
            await self._on_broker_failure(dead)

    async def _on_broker_startup(self, new: list[int]) -> None:
        context, batch = self.context, self.batch
        # Existing brokers learn of the new ones; new ones get every partition's state.
        batch.add_update_metadata(context.live_or_shutting_down_ids() - set(new))
        batch.send()
        batch.add_update_metadata(new, sorted(context.leadership))
        batch.send()
        deleting: set[str] = set()
        for broker_id in new:
            for tp in context.partitions_on_broker(broker_id):
                if context.is_queued_for_deletion(tp[0]):
                    deleting.add(tp[0])
                elif tp in context.leadership:
                    batch.add_leader_and_isr([broker_id], tp)
        batch.send()
        await self._elect_new_and_offline()
        if deleting:
            await self.deletion.resume_for_topics(deleting)

    async def _on_broker_failure(self, dead: list[int]) -> None:
        context = self.context
        dead_set = set(dead)
        for_deletion = [
            (tp, b)
            for b in dead
            for tp in context.partitions_on_broker(b)
            if context.is_queued_for_deletion(tp[0])
        ]
        changed = await self._elect_new_and_offline()
        changed |= await self._remove_from_isrs(dead_set)
        self.batch.send()
        await self.deletion.replicas_failed(for_deletion)
        if not changed:
            # No partition changed: tell the brokers who is gone all the same.
            self.batch.add_update_metadata(context.live_or_shutting_down_ids())
            self.batch.send()

    async def _elect_new_and_offline(self, topic: str | None = None) -> bool:
        """Kafka's triggerOnlinePartitionStateChange: first leaders for new partitions, new
        leaders for partitions whose leader is gone; True if any partition changed."""
        context = self.context
        new = [tp for tp in context.new_partitions() if topic in (None, tp[0])]
        offline = [tp for tp in context.partitions_with_offline_leader() if topic in (None, tp[0])]
        done = await self.changes.initialize(new)
        results = await self.changes.elect(offline, ElectionStrategy.OFFLINE)
        self.batch.send()
        return bool(done) or any(not isinstance(r, ChangeFailed) for r in results.values())

    async def _remove_from_isrs(self, brokers: Iterable[int]) -> bool:
        context = self.context
        changed = False
        for broker_id in sorted(brokers):
            partitions = [
                tp
                for tp in context.partitions_on_broker(broker_id)
                if tp in context.leadership and not context.is_queued_for_deletion(tp[0])
            ]
            results = await self.changes.remove_replica_from_isr(broker_id, partitions)
            changed |= any(not isinstance(r, ChangeFailed) for r in results.values())
        return changed

    # -- topics ------------------------------------------------------------------------------
    async def on_topic_change(self) -> None:
        context = self.context
        topics = await self._zk.get_all_topics()
        for topic in sorted(context.all_topics - topics):
            self._unwatch_topic(topic)
            context.remove_topic(topic)
        new = topics - context.all_topics
        if new:
            added = await self._add_topics(await self._zk.get_topic_assignments(new))
            await self._on_new_partitions(added)

    async def on_partition_modifications(self, topic: str) -> None:
        context = self.context
        if topic not in context.all_topics:
            return
        assignment = await self._zk.get_topic_assignment(topic)
        if assignment is None:
            return
        existing = set(context.partitions_of(topic))
        added = {p: a for p, a in assignment.partitions.items() if (topic, p) not in existing}
        if not added:
            return
        if context.is_queued_for_deletion(topic):
            log.warning("topic %s is being deleted: partitions %s not added", topic, sorted(added))
            return
        log.info("topic %s: new partitions %s", topic, sorted(added))
        for partition, replicas in added.items():
            context.set_assignment((topic, partition), replicas)
        await self._on_new_partitions([(topic, p) for p in sorted(added)])

    async def _add_topics(self, assignments: dict[str, TopicAssignment]) -> list[TopicPartition]:
        """Record new topics, giving an id to those without one (Kafka's processTopicIds)."""
        context = self.context
        added = []
        for topic, read in sorted(assignments.items()):
            topic_id = read.topic_id
            if topic_id is None:
                topic_id = uuid.uuid4()
                await self._zk.set_topic_assignment(
                    topic,
                    replace(read, topic_id=topic_id),
                    controller_epoch_zk_version=context.epoch_zk_version,
                )
            context.all_topics.add(topic)
            context.topic_ids[topic] = topic_id
            for partition, replicas in sorted(read.partitions.items()):
                context.set_assignment((topic, partition), replicas)
                added.append((topic, partition))
            self._topic_watches[topic] = await self._watch(
                self._zk.zookeeper.watch_data,
                paths.topic(topic),
                lambda topic=topic: events.PartitionModifications(topic),
            )
        return added

    async def _on_new_partitions(self, partitions: list[TopicPartition]) -> None:
        await self.changes.initialize(partitions)
        self.batch.send()

    def _unwatch_topic(self, topic: str) -> None:
        watch = self._topic_watches.pop(topic, None)
        if watch is not None:
            watch.cancel()

    async def on_topic_deletion(self) -> None:
        await self.deletion.enqueue(await self._zk.get_topics_marked_for_deletion())

    async def on_stop_replica_answered(self, event: events.StopReplicaAnswered) -> None:
        await self.deletion.stop_replica_answered(event.broker_id, event.errors)

    # -- ISR and config notifications --------------------------------------------------------
    async def on_isr_change_notification(self) -> None:
        """Leaders changed ISRs: read the partitions' states and tell every broker."""
        zk, context = self._zk, self.context
        names = await zk.get_isr_change_notifications()
        if not names:
            return
        try:
            reported = await zk.get_isr_changes(names)
            known = [tp for tp in sorted(reported) if context.assignment(tp) is not None]
            for tp, state in (await zk.get_partition_states(known)).items():
                context.set_leadership(tp, leader_and_isr_from_zk(state), state.controller_epoch)
            self.batch.add_update_metadata(context.live_or_shutting_down_ids(), known)
            self.batch.send()
            await self.reassignments.on_isr_changed(known)
        finally:
            await zk.delete_isr_change_notifications(
                names, controller_epoch_zk_version=context.epoch_zk_version
            )

    async def on_config_change_notification(self) -> None:
        """A topic config changed: if it now allows unclean elections, its leaderless
        partitions may get a leader (Kafka's TopicUncleanLeaderElectionEnable)."""
        changes = await self._zk.get_config_changes()
        fresh = sorted((n for n in changes if _sequence(n) > _sequence(self._last_config_change)),
                       key=_sequence)  # fmt: skip
        if not fresh:
            return
        self._last_config_change = fresh[-1]
        topics = {changes[n].split("/", 1)[1] for n in fresh if changes[n].startswith("topics/")}
        for topic in sorted(topics & self.context.all_topics):
            if not self.context.is_queued_for_deletion(topic):
                await self._elect_new_and_offline(topic)

    async def _unclean_allowed(self, topic: str) -> bool:
        value = (await self._zk.get_topic_config(topic)).get("unclean.leader.election.enable")
        if value is None:
            return bool(self._config.get("unclean.leader.election.enable"))
        return value.strip().lower() == "true"

    # -- requests from brokers ---------------------------------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        """Move leadership off a broker about to stop and take it out of the ISRs; returns the
        partitions it still leads (Kafka's doControlledShutdown)."""
        context, batch = self.context, self.batch
        if broker_id not in context.live_brokers:
            raise BrokerNotAvailableError(f"broker {broker_id} is not live")
        current_epoch = context.broker_epoch(broker_id)
        if broker_epoch != -1 and broker_epoch < current_epoch:
            raise StaleBrokerEpochError(
                f"controlled shutdown of broker {broker_id} with broker epoch {broker_epoch}: "
                f"the current epoch is {current_epoch}"
            )
        context.shutting_down.add(broker_id)
        to_act = [
            tp
            for tp in context.partitions_on_broker(broker_id)
            if len(context.replicas(tp)) > 1
            and tp in context.leadership
            and not context.is_queued_for_deletion(tp[0])
        ]
        led = [tp for tp in to_act if context.leader(tp) == broker_id]
        followed = [tp for tp in to_act if context.leader(tp) != broker_id]
        await self.changes.elect(led, ElectionStrategy.CONTROLLED_SHUTDOWN)
        batch.send()
        for tp in followed:
            batch.add_stop_replica([broker_id], tp, delete=False)
        await self.changes.remove_replica_from_isr(broker_id, followed)
        batch.send()
        remaining = context.partitions_led_by(broker_id)
        log.info(
            "controlled shutdown of broker %d: it still leads %s", broker_id, sorted(remaining)
        )
        return remaining

    async def elect_leaders(
        self, election_type: ElectionType, partitions: frozenset[TopicPartition] | None
    ) -> ElectionResults:
        """ElectLeaders (Kafka's processReplicaLeaderElection); with ``partitions`` None every
        partition is considered and, as Kafka answers, those needing no election are left
        out of the results."""
        context = self.context
        asked = set(context.all_partitions()) if partitions is None else set(partitions)
        results: ElectionResults = {}
        electable = []
        for tp in sorted(asked):
            if context.assignment(tp) is None:
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    "The partition does not exist.",
                )
            elif context.is_queued_for_deletion(tp[0]):
                results[tp] = (ErrorCode.invalid_topic_exception, "The topic is being deleted")
            elif election_type is ElectionType.PREFERRED:
                leader = context.leader(tp)
                if leader is not None and leader != context.replicas(tp)[0]:
                    electable.append(tp)
                else:
                    results[tp] = (ErrorCode.election_not_needed, None)
            elif (leader := context.leader(tp)) is not None and context.is_replica_online(leader):
                results[tp] = (ErrorCode.election_not_needed, None)
            else:
                electable.append(tp)
        if election_type is ElectionType.PREFERRED:
            strategy, failure = ElectionStrategy.PREFERRED, ErrorCode.preferred_leader_not_available
        else:
            strategy, failure = (
                ElectionStrategy.OFFLINE_UNCLEAN,
                ErrorCode.eligible_leaders_not_available,
            )
        outcomes = await self.changes.elect(electable, strategy)
        self.batch.send()
        for tp, outcome in outcomes.items():
            results[tp] = (
                (failure, outcome.reason)
                if isinstance(outcome, ChangeFailed)
                else (ErrorCode.none, None)
            )
        if partitions is None:
            results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.election_not_needed}
        return results

    async def alter_reassignments(
        self, requested: dict[TopicPartition, tuple[int, ...] | None]
    ) -> ReassignmentResults:
        """AlterPartitionReassignments (``core.server.controller.reassignment``)."""
        return await self.reassignments.alter(requested)

    def list_reassignments(
        self, partitions: frozenset[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the reassignments in progress."""
        return self.reassignments.ongoing(partitions)

    async def auto_rebalance(self, imbalance_percentage: int) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: preferred elections for brokers whose
        preferred partitions are too often led by others."""
        context = self.context
        partitions = [
            tp for tp in context.all_partitions() if not context.is_queued_for_deletion(tp[0])
        ]
        imbalance = elections.preferred_leader_imbalance(
            {tp: context.replicas(tp) for tp in partitions},
            {tp: leader for tp in partitions if (leader := context.leader(tp)) is not None},
            imbalance_percentage,
        )
        candidates = []
        for broker_id, tps in imbalance.items():
            for tp in tps:
                isr = context.leadership[tp].leader_and_isr.isr
                live = [r for r in context.replicas(tp) if context.is_replica_online(r)]
                if elections.preferred_replica_leader(context.replicas(tp), isr, live) == broker_id:
                    candidates.append(tp)
        if candidates:
            log.info("auto leader rebalance: preferred elections for %s", candidates)
            await self.changes.elect(candidates, ElectionStrategy.PREFERRED)
            self.batch.send()

    # -- watches -----------------------------------------------------------------------------
    async def _watch_children(self, path: str, event: type) -> ZkWatch:
        return await self._watch(self._zk.zookeeper.watch_children, path, event)

    async def _watch(
        self, watch: Callable, path: str, make_event: Callable[[], events.Event]
    ) -> ZkWatch:
        """A standing watch whose changes become events. The first delivery (the state at
        registration, which the caller reads itself) is not an event."""
        first = True

        def on_change(_state: object) -> None:
            nonlocal first
            if first:
                first = False
                return
            self._put(make_event())

        return await watch(path, on_change)


def _sequence(name: str) -> str:
    """The zero-padded sequence number of a notification znode (sorts as text)."""
    return paths.sequence_number(name, paths.CONFIG_CHANGE_PREFIX) if name else ""
