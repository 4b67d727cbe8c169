"""The events the controller processes one at a time (Kafka's ControllerEvent types).

ZooKeeper watches only say "this changed": the controller reads the current state when it
processes the event, so a burst of changes costs one read and events stay idempotent.
Requests from the broker side carry a future for their answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from core.server.cluster_types import TopicPartition
from core.server.controller.elections import ElectionType
from core.server.zookeeper.data import ControllerRegistration


@dataclass(frozen=True, slots=True)
class ControllerChange:
    """``/controller`` changed: ``registration`` None means there is no controller."""

    registration: ControllerRegistration | None


@dataclass(frozen=True, slots=True)
class Expire:
    """The ZooKeeper session expired: this broker's ``/controller`` is gone."""


@dataclass(frozen=True, slots=True)
class BrokerChange:
    """The children of ``/brokers/ids`` changed."""


@dataclass(frozen=True, slots=True)
class TopicChange:
    """The children of ``/brokers/topics`` changed."""


@dataclass(frozen=True, slots=True)
class PartitionModifications:
    """``/brokers/topics/<topic>`` changed (partitions may have been added)."""

    topic: str


@dataclass(frozen=True, slots=True)
class TopicDeletion:
    """The children of ``/admin/delete_topics`` changed."""


@dataclass(frozen=True, slots=True)
class IsrChangeNotification:
    """A leader reported ISR changes under ``/isr_change_notification``."""


@dataclass(frozen=True, slots=True)
class ConfigChangeNotification:
    """A config change notification appeared (topic configs: unclean leader election)."""


@dataclass(frozen=True, slots=True)
class StopReplicaAnswered:
    """A broker answered a StopReplica(delete=true) of a topic deletion."""

    broker_id: int
    errors: dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class ControlledShutdown:
    broker_id: int
    broker_epoch: int
    answer: asyncio.Future[Any] = field(compare=False)


@dataclass(frozen=True, slots=True)
class ReplicaLeaderElection:
    election_type: ElectionType
    partitions: frozenset[TopicPartition] | None
    answer: asyncio.Future[Any] = field(compare=False)


@dataclass(frozen=True, slots=True)
class AlterReassignments:
    """AlterPartitionReassignments: per partition the target replicas, None to cancel."""

    requested: dict[TopicPartition, tuple[int, ...] | None] = field(compare=False)
    answer: asyncio.Future[Any] = field(compare=False)


@dataclass(frozen=True, slots=True)
class ListReassignments:
    partitions: frozenset[TopicPartition] | None
    answer: asyncio.Future[Any] = field(compare=False)


@dataclass(frozen=True, slots=True)
class AutoPreferredReplicaLeaderElection:
    answer: asyncio.Future[Any] = field(compare=False)


Event = (
    ControllerChange
    | Expire
    | BrokerChange
    | TopicChange
    | PartitionModifications
    | TopicDeletion
    | IsrChangeNotification
    | ConfigChangeNotification
    | StopReplicaAnswered
    | ControlledShutdown
    | ReplicaLeaderElection
    | AlterReassignments
    | ListReassignments
    | AutoPreferredReplicaLeaderElection
)
