"""Partition reassignment: moving a partition's replicas to other brokers (Kafka's
onPartitionReassignment in ZooKeeper mode, KIP-455).

A reassignment of a partition from its replicas ORS to the target TRS goes in two phases:

1. The assignment in ``/brokers/topics/<topic>`` becomes RS = TRS + (ORS - TRS), with
   ``adding_replicas`` TRS - ORS and ``removing_replicas`` ORS - TRS; the leader epoch is
   bumped and LeaderAndIsr goes to every replica of RS, so the new ones create the log and
   fetch from the leader, which adds them to the ISR when they have caught up.
2. Once every replica of TRS is in the ISR (the controller learns of ISR changes through
   ``/isr_change_notification``): the assignment becomes TRS, the leader stays if it is in
   TRS and otherwise is the first live TRS member of the ISR, the removed replicas leave the
   ISR (one write, new leader epoch), and they get StopReplica(delete=true).

Records keep flowing throughout: the ISR never loses a member that has them before the new
ones have caught up. A new reassignment of a partition being reassigned replaces the target
(the original replicas stay ORS); a cancellation (no target) reassigns it to its original
replicas, as Kafka reverts it. The adding / removing replicas in the topic znode are the
record of a reassignment in progress: a new controller resumes them at failover.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from kio.schema.errors import ErrorCode

from core.server.cluster_types import LeaderAndIsr, TopicPartition
from core.server.controller.channel import ControllerBrokerRequestBatch
from core.server.controller.context import ControllerContext
from core.server.controller.partition_changes import ChangeFailed, Outcome, PartitionChanges
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.topic_data import ReplicaAssignment, TopicAssignment

log = logging.getLogger(__name__)

# Kafka's error codes for AlterPartitionReassignments answers.

ReassignmentResults = dict[TopicPartition, tuple[int, str | None]]


class PartitionReassignments:
    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        batch: ControllerBrokerRequestBatch,
        changes: PartitionChanges,
    ) -> None:
        self._zk = zk
        self._context = context
        self._batch = batch
        self._changes = changes
        self._targets: dict[TopicPartition, tuple[int, ...]] = {}

    # -- requests ----------------------------------------------------------------------------
    def ongoing(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the reassignments in progress (of ``partitions``)."""
        asked = set(self._targets) if partitions is None else set(partitions)
        return {
            tp: assignment
            for tp in sorted(asked & set(self._targets))
            if (assignment := self._context.assignment(tp)) is not None
        }

    async def alter(
        self, requested: Mapping[TopicPartition, tuple[int, ...] | None]
    ) -> ReassignmentResults:
        """AlterPartitionReassignments: start, replace or (None) cancel reassignments."""
        context = self._context
        results: ReassignmentResults = {}
        for tp, target in sorted(requested.items()):
            assignment = context.assignment(tp)
            if assignment is None or context.is_queued_for_deletion(tp[0]):
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    "The partition does not exist.",
                )
                continue
            if target is None and tp not in self._targets:
                results[tp] = (
                    ErrorCode.no_reassignment_in_progress,
                    "No reassignment in progress.",
                )
                continue
            wanted = _original(assignment) if target is None else tuple(target)
            problem = self._invalid(wanted)
            if problem is not None:
                results[tp] = (ErrorCode.invalid_replica_assignment, problem)
                continue
            await self._start(tp, wanted)
            results[tp] = (ErrorCode.none, None)
        return results

    def _invalid(self, target: tuple[int, ...]) -> str | None:
        if not target:
            return "The replica list is empty."
        if len(set(target)) != len(target):
            return f"The replica list {list(target)} has duplicates."
        dead = [r for r in target if r not in self._context.live_brokers]
        if dead:
            return f"Replicas {dead} are not on live brokers."
        return None

    # -- the phases --------------------------------------------------------------------------
    async def resume(self) -> None:
        """At failover: the reassignments the topic znodes record as in progress."""
        for tp in self._context.all_partitions():
            assignment = self._context.assignment(tp)
            if assignment is None or not (
                assignment.adding_replicas or assignment.removing_replicas
            ):
                continue
            target = tuple(r for r in assignment.replicas if r not in assignment.removing_replicas)
            log.info("resuming the reassignment of %s-%d to %s", tp[0], tp[1], list(target))
            self._targets[tp] = target
            await self._advance(tp)

    async def on_isr_changed(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            if tp in self._targets:
                await self._advance(tp)

    async def _start(self, tp: TopicPartition, target: tuple[int, ...]) -> None:
        context = self._context
        assignment = context.assignment(tp)
        assert assignment is not None
        original = _original(assignment)
        if target == original and tp not in self._targets:
            return  # already there (Kafka answers NONE)
        replicas = target + tuple(r for r in original if r not in target)
        adding = tuple(r for r in target if r not in original)
        removing = tuple(r for r in original if r not in target)
        log.info("reassignment of %s-%d: %s -> %s (adding %s, removing %s)", tp[0], tp[1],
                 list(original), list(target), list(adding), list(removing))  # fmt: skip
        await self._write_assignment(tp, ReplicaAssignment(replicas, adding, removing))
        self._targets[tp] = target
        if tp in context.leadership:

            async def bump(_tp: TopicPartition, current: LeaderAndIsr) -> Outcome:
                return current.new_leader_and_isr(current.leader, current.isr)

            await self._changes.apply([tp], bump, self._online, "reassignment (new replicas)")
        self._batch.send()
        await self._advance(tp)

    async def _advance(self, tp: TopicPartition) -> None:
        """Finish the reassignment if every target replica is in the ISR."""
        context = self._context
        target = self._targets[tp]
        found = context.leadership.get(tp)
        if found is None or not set(target) <= set(found.leader_and_isr.isr):
            return
        if _leader_for(found.leader_and_isr, target, context) is None:
            return  # no live target replica to lead yet: wait for the next change
        assignment = context.assignment(tp)
        assert assignment is not None
        removed = [r for r in assignment.replicas if r not in target]
        await self._write_assignment(tp, ReplicaAssignment(target))

        async def finish(_tp: TopicPartition, current: LeaderAndIsr) -> Outcome:
            leader = _leader_for(current, target, context)
            if leader is None:
                return ChangeFailed(f"no live replica of {list(target)} in the ISR")
            return current.new_leader_and_isr(leader, [r for r in current.isr if r in target])

        outcome = (await self._changes.apply([tp], finish, self._online, "reassignment"))[tp]
        if isinstance(outcome, ChangeFailed):
            log.warning("reassignment of %s-%d: %s", tp[0], tp[1], outcome.reason)
        online = [r for r in removed if context.is_replica_online(r, include_shutting_down=True)]
        self._batch.add_stop_replica(online, tp, delete=True)
        self._batch.add_update_metadata(context.live_or_shutting_down_ids(), [tp])
        self._batch.send()
        del self._targets[tp]
        log.info("reassignment of %s-%d done: replicas %s", tp[0], tp[1], list(target))

    # -- helpers -----------------------------------------------------------------------------
    def _online(self, tp: TopicPartition) -> list[int]:
        return [
            r
            for r in self._context.replicas(tp)
            if self._context.is_replica_online(r, include_shutting_down=True)
        ]

    async def _write_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """The topic's znode with this partition's new assignment, fenced on the
        controller epoch; then the context."""
        context = self._context
        topic = tp[0]
        partitions = {p: context.assignment((topic, p)) for _, p in context.partitions_of(topic)}
        partitions[tp[1]] = assignment
        await self._zk.set_topic_assignment(
            topic,
            TopicAssignment(
                context.topic_ids.get(topic),
                {p: a for p, a in partitions.items() if a is not None},
            ),
            controller_epoch_zk_version=context.epoch_zk_version,
        )
        context.set_assignment(tp, assignment)


def _original(assignment: ReplicaAssignment) -> tuple[int, ...]:
    """The replicas before the reassignment in progress (all of them without one)."""
    return tuple(r for r in assignment.replicas if r not in assignment.adding_replicas)


def _leader_for(
    current: LeaderAndIsr, target: tuple[int, ...], context: ControllerContext
) -> int | None:
    """The current leader if it is a live target replica, else the first live target
    replica in the ISR (Kafka's reassignPartitionLeaderElection)."""
    if current.leader in target and context.is_replica_online(current.leader):
        return current.leader
    return next(
        (r for r in target if r in current.isr and context.is_replica_online(r)),
        None,
    )
