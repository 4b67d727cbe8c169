"""What a cluster looks like to its brokers and controller: brokers, leaders, ISRs, replicas.

These frozen dataclasses are what the controller, the MetadataCache and the ReplicaManager
work with. The wire classes of the controller's requests (``interbroker_schema``) and the
znode contents (``zookeeper.data``, ``zookeeper.topic_data``) are converted here and
nowhere else, one function per direction:

==========================================  =========================================
from                                        to
==========================================  =========================================
``/brokers/ids/<id>`` registration           ``broker_info_from_zk``
partition state znode                        ``leader_and_isr_from_zk`` / ``..._to_zk``
LeaderAndIsr v7 request / response           ``leader_and_isr_request_*``, ``..._response_*``
UpdateMetadata v8 request                    ``update_metadata_*``
StopReplica v4 request / response            ``stop_replica_*``
==========================================  =========================================

Sentinels are Kafka's (``kafka.api.LeaderAndIsr``): leader -1 is no leader, leader -2 marks a
partition of a topic being deleted in UpdateMetadata (brokers drop it from their cache), and
leader epoch -2 in StopReplica marks a deletion (the broker skips its epoch check).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from core.server.interbroker_schema import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicError,
    LeaderAndIsrTopicState,
    StopReplicaPartitionError,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    StopReplicaTopicState,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from core.server.zookeeper.data import BrokerRegistration
from core.server.zookeeper.topic_data import LeaderRecoveryState
from core.server.zookeeper.topic_data import PartitionState as ZkPartitionState

TopicPartition = tuple[str, int]

NO_LEADER = -1
LEADER_DURING_DELETE = -2
NO_EPOCH = -1
EPOCH_DURING_DELETE = -2
# Kafka's Uuid.ZERO_UUID: "no topic id" on the wire.
ZERO_UUID = uuid.UUID(int=0)
# Kafka's SecurityProtocol ids, as UpdateMetadata carries them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_SECURITY_PROTOCOL_NAMES = {v: k for k, v in SECURITY_PROTOCOL_IDS.items()}


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One listener of a broker, as other brokers and clients reach it."""

    listener: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker: its endpoints per listener, rack, and epoch (the czxid of its
    registration; -1 when unknown, as in UpdateMetadata which does not carry it)."""

    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    epoch: int = -1

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leader, leader epoch and ISR (Kafka's LeaderAndIsr).

    Attributes:
        partition_epoch: the version of the partition state znode this was read at or
            written as; conditional writes expect it.
        leader_recovery_state: 1 (RECOVERING) after an unclean election until the leader
            has recovered (KIP-704), else 0.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0
    leader_recovery_state: int = LeaderRecoveryState.RECOVERED

    def new_leader_and_isr(self, leader: int, isr: Iterable[int]) -> LeaderAndIsr:
        """A controller decision: a new leader epoch; the recovery state is kept (Kafka)."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr))

    def new_recovering_leader_and_isr(self, leader: int, isr: Iterable[int]) -> LeaderAndIsr:
        """An unclean election: a new leader epoch, and the partition RECOVERING."""
        return replace(
            self.new_leader_and_isr(leader, isr),
            leader_recovery_state=LeaderRecoveryState.RECOVERING,
        )

    def new_isr(self, isr: Iterable[int]) -> LeaderAndIsr:
        """A leader's ISR change: same leader epoch."""
        return replace(self, isr=tuple(isr))


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the controller tells brokers about one partition (LeaderAndIsr, UpdateMetadata).

    Attributes:
        controller_epoch: the epoch of the controller that last wrote the partition's
            leader and ISR.
        offline_replicas: replicas on brokers that are not live (UpdateMetadata only).
        is_new: the replica is being created with the partition (LeaderAndIsr only).
    """

    topic: str
    topic_id: uuid.UUID
    partition: int
    controller_epoch: int
    leader_and_isr: LeaderAndIsr
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    is_new: bool = False

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def leader(self) -> int:
        return self.leader_and_isr.leader

    @property
    def leader_epoch(self) -> int:
        return self.leader_and_isr.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return self.leader_and_isr.isr


class StopReplicaPartition(NamedTuple):
    """One partition of a StopReplica request."""

    tp: TopicPartition
    leader_epoch: int
    delete: bool


# -- ZooKeeper ---------------------------------------------------------------------------------
def broker_info_from_zk(registration: BrokerRegistration) -> BrokerInfo:
    endpoints = tuple(
        BrokerEndpoint(e.listener_name, e.host or "", e.port, e.security_protocol)
        for e in registration.endpoints
    )
    return BrokerInfo(registration.broker_id, endpoints, registration.rack, registration.epoch)


def leader_and_isr_from_zk(state: ZkPartitionState) -> LeaderAndIsr:
    return LeaderAndIsr(
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        partition_epoch=state.partition_epoch,
        leader_recovery_state=int(state.leader_recovery_state),
    )


def leader_and_isr_to_zk(state: LeaderAndIsr, controller_epoch: int) -> ZkPartitionState:
    """The znode content; ``partition_epoch`` is the version a conditional write expects."""
    return ZkPartitionState(
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        controller_epoch=controller_epoch,
        leader_recovery_state=LeaderRecoveryState(state.leader_recovery_state),
        partition_epoch=state.partition_epoch,
    )


# -- shared wire helpers -----------------------------------------------------------------------
def _by_topic(states: Iterable[PartitionState]) -> dict[str, list[PartitionState]]:
    topics: dict[str, list[PartitionState]] = {}
    for state in sorted(states, key=lambda s: s.tp):
        topics.setdefault(state.topic, []).append(state)
    return topics


def _wire_uuid(topic_id: uuid.UUID | None) -> uuid.UUID:
    return ZERO_UUID if topic_id is None else topic_id


# -- LeaderAndIsr v7 ---------------------------------------------------------------------------
def leader_and_isr_request_topic_states(
    states: Iterable[PartitionState],
) -> tuple[LeaderAndIsrTopicState, ...]:
    return tuple(
        LeaderAndIsrTopicState(
            topic_name=topic,
            topic_id=_wire_uuid(parts[0].topic_id),
            partition_states=tuple(
                LeaderAndIsrPartitionState(
                    partition_index=s.partition,
                    controller_epoch=s.controller_epoch,
                    leader=s.leader,
                    leader_epoch=s.leader_epoch,
                    isr=s.isr,
                    partition_epoch=s.leader_and_isr.partition_epoch,
                    replicas=s.replicas,
                    adding_replicas=s.adding_replicas,
                    removing_replicas=s.removing_replicas,
                    is_new=s.is_new,
                    leader_recovery_state=s.leader_and_isr.leader_recovery_state,
                )
                for s in parts
            ),
        )
        for topic, parts in _by_topic(states).items()
    )


def leader_and_isr_request_live_leaders(
    brokers: Iterable[BrokerInfo], listener: str
) -> tuple[LeaderAndIsrLiveLeader, ...]:
    """The leaders' endpoints on the inter-broker ``listener`` (brokers without it are left
    out, as Kafka's controller does)."""
    leaders = []
    for broker in sorted(brokers, key=lambda b: b.broker_id):
        endpoint = broker.endpoint(listener)
        if endpoint is not None:
            leaders.append(
                LeaderAndIsrLiveLeader(
                    broker_id=broker.broker_id, host_name=endpoint.host, port=endpoint.port
                )
            )
    return tuple(leaders)


def leader_and_isr_request_states(request: LeaderAndIsrRequest) -> list[PartitionState]:
    return [
        PartitionState(
            topic=topic.topic_name,
            topic_id=_wire_uuid(topic.topic_id),
            partition=p.partition_index,
            controller_epoch=p.controller_epoch,
            leader_and_isr=LeaderAndIsr(
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                isr=tuple(p.isr),
                partition_epoch=p.partition_epoch,
                leader_recovery_state=p.leader_recovery_state,
            ),
            replicas=tuple(p.replicas),
            adding_replicas=tuple(p.adding_replicas),
            removing_replicas=tuple(p.removing_replicas),
            is_new=p.is_new,
        )
        for topic in request.topic_states
        for p in topic.partition_states
    ]


def leader_and_isr_response(
    errors: Mapping[TopicPartition, int],
    topic_ids: Mapping[str, uuid.UUID],
    error_code: int = 0,
) -> LeaderAndIsrResponse:
    """The answer: per partition, its error code (0 for none), topics by id."""
    topics: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), code in sorted(errors.items()):
        topics.setdefault(topic, []).append((partition, code))
    return LeaderAndIsrResponse(
        error_code=ErrorCode(error_code),
        topics=tuple(
            LeaderAndIsrTopicError(
                topic_id=_wire_uuid(topic_ids.get(topic)),
                partition_errors=tuple(
                    LeaderAndIsrPartitionError(partition_index=p, error_code=ErrorCode(code))
                    for p, code in parts
                ),
            )
            for topic, parts in topics.items()
        ),
    )


def leader_and_isr_response_errors(
    response: LeaderAndIsrResponse, topic_names: Mapping[uuid.UUID, str]
) -> dict[TopicPartition, int]:
    """Per partition error codes; topics with an id not in ``topic_names`` show by id."""
    return {
        (topic_names.get(_wire_uuid(t.topic_id), str(t.topic_id)), p.partition_index): int(
            p.error_code
        )
        for t in response.topics
        for p in t.partition_errors
    }


# -- UpdateMetadata v8 -------------------------------------------------------------------------
def update_metadata_topic_states(
    states: Iterable[PartitionState],
) -> tuple[UpdateMetadataTopicState, ...]:
    return tuple(
        UpdateMetadataTopicState(
            topic_name=topic,
            topic_id=_wire_uuid(parts[0].topic_id),
            partition_states=tuple(
                UpdateMetadataPartitionState(
                    partition_index=s.partition,
                    controller_epoch=s.controller_epoch,
                    leader=s.leader,
                    leader_epoch=s.leader_epoch,
                    isr=s.isr,
                    zk_version=s.leader_and_isr.partition_epoch,
                    replicas=s.replicas,
                    offline_replicas=s.offline_replicas,
                )
                for s in parts
            ),
        )
        for topic, parts in _by_topic(states).items()
    )


def update_metadata_brokers(brokers: Iterable[BrokerInfo]) -> tuple[UpdateMetadataBroker, ...]:
    return tuple(
        UpdateMetadataBroker(
            id=b.broker_id,
            endpoints=tuple(
                UpdateMetadataEndpoint(
                    port=e.port,
                    host=e.host,
                    listener=e.listener,
                    security_protocol=SECURITY_PROTOCOL_IDS[e.security_protocol],
                )
                for e in b.endpoints
            ),
            rack=b.rack,
        )
        for b in sorted(brokers, key=lambda b: b.broker_id)
    )


def update_metadata_request_brokers(request: UpdateMetadataRequest) -> list[BrokerInfo]:
    """The live brokers an UpdateMetadata lists (their epochs are not on the wire: -1).

    Raises:
        ValueError: an endpoint with a security protocol id Kafka does not define.
    """
    brokers = []
    for b in request.live_brokers:
        endpoints = []
        for e in b.endpoints:
            protocol = _SECURITY_PROTOCOL_NAMES.get(e.security_protocol)
            if protocol is None:
                raise ValueError(
                    f"broker {b.id} listener {e.listener}: unknown security protocol id "
                    f"{e.security_protocol}"
                )
            endpoints.append(BrokerEndpoint(e.listener, e.host, e.port, protocol))
        brokers.append(BrokerInfo(b.id, tuple(endpoints), b.rack))
    return brokers


def update_metadata_request_states(request: UpdateMetadataRequest) -> list[PartitionState]:
    """The partition states, those with leader LEADER_DURING_DELETE included (the cache
    drops them)."""
    return [
        PartitionState(
            topic=topic.topic_name,
            topic_id=_wire_uuid(topic.topic_id),
            partition=p.partition_index,
            controller_epoch=p.controller_epoch,
            leader_and_isr=LeaderAndIsr(
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                isr=tuple(p.isr),
                partition_epoch=p.zk_version,
            ),
            replicas=tuple(p.replicas),
            offline_replicas=tuple(p.offline_replicas),
        )
        for topic in request.topic_states
        for p in topic.partition_states
    ]


# -- StopReplica v4 ----------------------------------------------------------------------------
def stop_replica_topic_states(
    partitions: Iterable[StopReplicaPartition],
) -> tuple[StopReplicaTopicState, ...]:
    topics: dict[str, list[StopReplicaPartition]] = {}
    for entry in sorted(partitions):
        topics.setdefault(entry.tp[0], []).append(entry)
    return tuple(
        StopReplicaTopicState(
            topic_name=topic,
            partition_states=tuple(
                StopReplicaPartitionState(
                    partition_index=e.tp[1], leader_epoch=e.leader_epoch, delete_partition=e.delete
                )
                for e in entries
            ),
        )
        for topic, entries in topics.items()
    )


def stop_replica_request_partitions(request: StopReplicaRequest) -> list[StopReplicaPartition]:
    return [
        StopReplicaPartition((t.topic_name, p.partition_index), p.leader_epoch, p.delete_partition)
        for t in request.topic_states
        for p in t.partition_states
    ]


def stop_replica_response(
    errors: Mapping[TopicPartition, int], error_code: int = 0
) -> StopReplicaResponse:
    return StopReplicaResponse(
        error_code=ErrorCode(error_code),
        partition_errors=tuple(
            StopReplicaPartitionError(topic_name=t, partition_index=p, error_code=ErrorCode(c))
            for (t, p), c in sorted(errors.items())
        ),
    )


def stop_replica_response_errors(
    response: StopReplicaResponse, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The error of each of ``partitions`` (those of the request): a top-level error applies
    to all of them (Kafka's StopReplicaResponse.partitionErrors); a partition the answer
    leaves out had none."""
    if int(response.error_code) != 0:
        return dict.fromkeys(partitions, int(response.error_code))
    errors = dict.fromkeys(partitions, 0)
    for p in response.partition_errors:
        errors[(p.topic_name, p.partition_index)] = int(p.error_code)
    return errors
