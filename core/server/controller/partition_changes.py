"""Leader and ISR changes decided by the controller, written to ZooKeeper and announced
(the ZooKeeper-writing half of Kafka's PartitionStateMachine and ReplicaStateMachine).

Every change is a conditional write of ``/brokers/topics/<t>/partitions/<p>/state`` on the
version read just before (the partition epoch), fenced on the controller epoch: a leader
that changed its ISR meanwhile makes the write fail with a bad version, and the partition
is read and decided again (Kafka's updateLeaderAndIsr retry loop); a newer controller makes
it fail with ``ZkControllerMovedError``, which ends this controller's term. Successful
changes update the context and are queued on the batch: LeaderAndIsr to the partition's
replicas, UpdateMetadata to every broker. The caller sends the batch.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from core.server.cluster_types import (
    LeaderAndIsr,
    TopicPartition,
    leader_and_isr_from_zk,
    leader_and_isr_to_zk,
)
from core.server.controller import elections
from core.server.controller.channel import ControllerBrokerRequestBatch
from core.server.controller.context import ControllerContext
from core.server.zookeeper.errors import ZkError, ZkNodeExistsError
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.topic_data import PartitionState as ZkPartitionState

log = logging.getLogger(__name__)


class ElectionStrategy(enum.Enum):
    """Kafka's PartitionLeaderElectionStrategy."""

    OFFLINE = "offline"  # unclean only if the topic allows it
    OFFLINE_UNCLEAN = "offline, unclean allowed"  # ElectLeaders(UNCLEAN)
    PREFERRED = "preferred replica"
    CONTROLLED_SHUTDOWN = "controlled shutdown"


@dataclass(frozen=True, slots=True)
class ChangeFailed:
    """Why a partition's leader or ISR was not changed."""

    reason: str


Outcome = LeaderAndIsr | ChangeFailed
UncleanAllowed = Callable[[str], Awaitable[bool]]


class PartitionChanges:
    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        batch: ControllerBrokerRequestBatch,
        unclean_allowed: UncleanAllowed,
    ) -> None:
        self._zk = zk
        self._context = context
        self._batch = batch
        self._unclean_allowed = unclean_allowed

    # -- new partitions ----------------------------------------------------------------------
    async def initialize(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Give new partitions their first leader and ISR (Kafka's
        initializeLeaderAndIsrForPartitions); returns those that got one. A partition
        without a live replica waits for a broker to come."""
        context = self._context
        live = context.live_broker_ids()
        proposed: dict[TopicPartition, ZkPartitionState] = {}
        for tp in partitions:
            state = elections.initial_leader_and_isr(context.replicas(tp), live)
            if state is None:
                log.warning("new partition %s-%d has no live replica among %s: no leader yet",
                            tp[0], tp[1], list(context.replicas(tp)))  # fmt: skip
                continue
            proposed[tp] = leader_and_isr_to_zk(state, context.epoch)
        if not proposed:
            return []
        created = await self._zk.create_partition_states(
            proposed, controller_epoch_zk_version=context.epoch_zk_version
        )
        done = []
        for tp, outcome in sorted(created.items()):
            result = outcome
            if isinstance(outcome, ZkNodeExistsError):
                # Written by an earlier controller whose term ended before it knew: adopt it.
                result = await self._zk.get_partition_state(tp)
                if result is None:
                    continue
            if isinstance(result, ZkError):
                log.error("could not create the state of %s-%d: %s", tp[0], tp[1], result)
                continue
            context.set_leadership(tp, leader_and_isr_from_zk(result), result.controller_epoch)
            live_replicas = [r for r in context.replicas(tp) if r in live]
            self._batch.add_leader_and_isr(live_replicas, tp, is_new=True)
            done.append(tp)
        return done

    # -- elections ---------------------------------------------------------------------------
    async def elect(
        self, partitions: Iterable[TopicPartition], strategy: ElectionStrategy
    ) -> dict[TopicPartition, Outcome]:
        """Elect leaders for ``partitions`` (each must have a state znode)."""
        context = self._context
        unclean_by_topic: dict[str, bool] = {}

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> Outcome:
            replicas = context.replicas(tp)
            live = {r for r in replicas if context.is_replica_online(r)}
            if strategy is ElectionStrategy.PREFERRED:
                new = elections.elect_preferred(current, replicas, live)
            elif strategy is ElectionStrategy.CONTROLLED_SHUTDOWN:
                live_or_sd = {
                    r for r in replicas if context.is_replica_online(r, include_shutting_down=True)
                }
                new = elections.elect_for_controlled_shutdown(
                    current, replicas, live_or_sd, context.shutting_down
                )
            else:
                new = elections.elect_offline(current, replicas, live, unclean_allowed=False)
                if new is None:
                    topic = tp[0]
                    if strategy is ElectionStrategy.OFFLINE_UNCLEAN:
                        unclean_by_topic[topic] = True
                    elif topic not in unclean_by_topic:
                        unclean_by_topic[topic] = await self._unclean_allowed(topic)
                    if unclean_by_topic[topic]:
                        new = elections.elect_offline(current, replicas, live, unclean_allowed=True)
            if new is None:
                return ChangeFailed(
                    f"no eligible leader ({strategy.value} election) among replicas "
                    f"{list(replicas)} with ISR {list(current.isr)} and live brokers "
                    f"{sorted(live)}"
                )
            return new

        def recipients(tp: TopicPartition) -> list[int]:
            include_sd = strategy is not ElectionStrategy.OFFLINE
            return [
                r
                for r in context.replicas(tp)
                if context.is_replica_online(r, include_shutting_down=include_sd)
            ]

        return await self._change(partitions, decide, recipients, f"{strategy.value} election")

    # -- ISR removal -------------------------------------------------------------------------
    async def remove_replica_from_isr(
        self, replica: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, Outcome]:
        """Take ``replica`` (dead or shutting down) out of the ISRs of ``partitions``
        (Kafka's OfflineReplica transition); partitions whose ISR lacks it are left alone."""
        context = self._context

        async def decide(tp: TopicPartition, current: LeaderAndIsr) -> Outcome:
            new = elections.remove_replica_from_isr(current, replica)
            return ChangeFailed(f"{replica} is not in the ISR") if new is None else new

        def recipients(tp: TopicPartition) -> list[int]:
            if context.is_queued_for_deletion(tp[0]):
                return []
            return [r for r in context.replicas(tp) if r != replica]

        return await self._change(partitions, decide, recipients, f"removal of {replica} from ISR")

    # -- any other decision (reassignments) --------------------------------------------------
    async def apply(
        self,
        partitions: Iterable[TopicPartition],
        decide: Callable[[TopicPartition, LeaderAndIsr], Awaitable[Outcome]],
        recipients: Callable[[TopicPartition], list[int]],
        what: str,
    ) -> dict[TopicPartition, Outcome]:
        """Write ``decide``'s leader and ISR of each partition, with the same conditional
        write loop; LeaderAndIsr goes to ``recipients``."""
        return await self._change(partitions, decide, recipients, what)

    # -- the write loop ----------------------------------------------------------------------
    async def _change(
        self,
        partitions: Iterable[TopicPartition],
        decide: Callable[[TopicPartition, LeaderAndIsr], Awaitable[Outcome]],
        recipients: Callable[[TopicPartition], list[int]],
        what: str,
    ) -> dict[TopicPartition, Outcome]:
        context = self._context
        results: dict[TopicPartition, Outcome] = {}
        remaining = sorted(set(partitions))
        while remaining:
            read = await self._zk.get_partition_states(remaining)
            proposed: dict[TopicPartition, ZkPartitionState] = {}
            for tp in remaining:
                found = read.get(tp)
                if found is None:
                    results[tp] = ChangeFailed("the partition has no state znode")
                    continue
                if found.controller_epoch > context.epoch:
                    # Kafka: this controller went through a soft failure; another one rules.
                    results[tp] = ChangeFailed(
                        f"the state was written by controller epoch {found.controller_epoch}, "
                        f"newer than ours ({context.epoch})"
                    )
                    continue
                outcome = await decide(tp, leader_and_isr_from_zk(found))
                if isinstance(outcome, ChangeFailed):
                    results[tp] = outcome
                else:
                    proposed[tp] = leader_and_isr_to_zk(outcome, context.epoch)
            if not proposed:
                break
            written = await self._zk.update_partition_states(
                proposed, controller_epoch_zk_version=context.epoch_zk_version
            )
            for tp, result in sorted(written.finished.items()):
                if isinstance(result, ZkError):
                    results[tp] = ChangeFailed(f"ZooKeeper: {result}")
                    continue
                state = leader_and_isr_from_zk(result)
                context.set_leadership(tp, state, context.epoch)
                results[tp] = state
                log.info("%s of %s-%d: leader %d, epoch %d, ISR %s", what, tp[0], tp[1],
                         state.leader, state.leader_epoch, list(state.isr))  # fmt: skip
                self._batch.add_leader_and_isr(recipients(tp), tp)
            remaining = sorted(written.to_retry)
        for tp, outcome in sorted(results.items()):
            if isinstance(outcome, ChangeFailed):
                log.debug("%s of %s-%d not done: %s", what, tp[0], tp[1], outcome.reason)
        return results
