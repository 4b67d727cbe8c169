"""The shared cluster types and their conversions: every request the controller builds reads
back, through the real wire encoding, as the states it was built from."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from core.server.cluster_types import (
    LEADER_DURING_DELETE,
    BrokerEndpoint,
    BrokerInfo,
    LeaderAndIsr,
    PartitionState,
    StopReplicaPartition,
    broker_info_from_zk,
    leader_and_isr_from_zk,
    leader_and_isr_request_live_leaders,
    leader_and_isr_request_states,
    leader_and_isr_request_topic_states,
    leader_and_isr_response,
    leader_and_isr_response_errors,
    leader_and_isr_to_zk,
    stop_replica_request_partitions,
    stop_replica_response,
    stop_replica_response_errors,
    stop_replica_topic_states,
    update_metadata_brokers,
    update_metadata_request_brokers,
    update_metadata_request_states,
    update_metadata_topic_states,
)
from core.server.interbroker_schema import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)
from core.server.zookeeper.data import BrokerRegistration, EndPoint
from core.server.zookeeper.topic_data import LeaderRecoveryState
from core.server.zookeeper.topic_data import PartitionState as ZkPartitionState

T1, T2 = uuid.uuid4(), uuid.uuid4()


def wire(message: Any) -> Any:
    """``message`` written with kio and read back."""
    out = io.BytesIO()
    entity_writer(type(message))(out, message)
    value, _ = entity_reader(type(message))(out.getvalue(), 0)
    return value


def states() -> list[PartitionState]:
    return [
        PartitionState(
            "a", T1, 0, 3, LeaderAndIsr(1, 5, (1, 2), 9), (1, 2, 3), adding_replicas=(3,),
            is_new=True,
        ),
        PartitionState("a", T1, 1, 2, LeaderAndIsr(-1, 2, (2,), 4, 1), (2, 1)),
        PartitionState("b", T2, 0, 3, LeaderAndIsr(3, 0, (3,), 0), (3,), removing_replicas=(3,)),
    ]  # fmt: skip


BROKERS = [
    BrokerInfo(
        1,
        (
            BrokerEndpoint("PLAINTEXT", "h1", 9092, "PLAINTEXT"),
            BrokerEndpoint("INTERNAL", "i1", 9093, "SASL_SSL"),
        ),
        "rack-a",
        epoch=77,
    ),
    BrokerInfo(2, (BrokerEndpoint("INTERNAL", "i2", 9093, "SSL"),), None, epoch=78),
]


def test_broker_endpoint_lookup_by_listener():
    assert BROKERS[0].endpoint("INTERNAL") == BrokerEndpoint("INTERNAL", "i1", 9093, "SASL_SSL")
    assert BROKERS[1].endpoint("PLAINTEXT") is None


def test_leader_and_isr_changes_bump_the_leader_epoch_only_for_the_controller():
    state = LeaderAndIsr(1, 4, (1, 2, 3), partition_epoch=10, leader_recovery_state=1)
    assert state.new_leader_and_isr(2, [2, 3]) == LeaderAndIsr(2, 5, (2, 3), 10, 1)
    assert state.new_isr([1, 2]) == LeaderAndIsr(1, 4, (1, 2), 10, 1)
    fresh = LeaderAndIsr(1, 4, (1,))
    assert fresh.new_recovering_leader_and_isr(3, [3]) == LeaderAndIsr(3, 5, (3,), 0, 1)


def test_zookeeper_registration_and_partition_state_conversions():
    registration = BrokerRegistration(
        4,
        (EndPoint("PLAINTEXT", None, 9092, "PLAINTEXT"), EndPoint("SSL", "h", 9093, "SSL")),
        rack="r",
        epoch=1234,
    )
    assert broker_info_from_zk(registration) == BrokerInfo(
        4,
        (
            BrokerEndpoint("PLAINTEXT", "", 9092, "PLAINTEXT"),
            BrokerEndpoint("SSL", "h", 9093, "SSL"),
        ),
        "r",
        1234,
    )
    zk_state = ZkPartitionState(2, 6, (2, 1), 3, LeaderRecoveryState.RECOVERING, partition_epoch=8)
    converted = leader_and_isr_from_zk(zk_state)
    assert converted == LeaderAndIsr(2, 6, (2, 1), 8, 1)
    assert leader_and_isr_to_zk(converted, 3) == zk_state


def test_leader_and_isr_request_round_trips_through_the_wire():
    request = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=3,
        broker_epoch=77,
        topic_states=leader_and_isr_request_topic_states(reversed(states())),
        live_leaders=leader_and_isr_request_live_leaders(BROKERS, "INTERNAL"),
    )
    decoded = wire(request)
    assert leader_and_isr_request_states(decoded) == states()
    assert [(x.broker_id, x.host_name, x.port) for x in decoded.live_leaders] == [
        (1, "i1", 9093),
        (2, "i2", 9093),
    ]
    # A broker without the inter-broker listener cannot be named as a live leader.
    assert leader_and_isr_request_live_leaders(BROKERS, "PLAINTEXT")[0].broker_id == 1
    assert len(leader_and_isr_request_live_leaders(BROKERS, "PLAINTEXT")) == 1


def test_leader_and_isr_response_maps_topic_ids_back_to_names():
    errors = {("a", 0): 0, ("a", 1): 6, ("b", 0): 3}
    response = wire(leader_and_isr_response(errors, {"a": T1, "b": T2}))
    assert isinstance(response, LeaderAndIsrResponse)
    assert leader_and_isr_response_errors(response, {T1: "a", T2: "b"}) == errors


def test_update_metadata_round_trips_with_offline_replicas_and_deletions():
    deleted = PartitionState("c", T2, 4, 3, LeaderAndIsr(LEADER_DURING_DELETE, 1, (1,)), (1,))
    with_offline = PartitionState(
        "a", T1, 0, 3, LeaderAndIsr(1, 5, (1,), 9), (1, 2), offline_replicas=(2,)
    )
    request = UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=3,
        broker_epoch=78,
        topic_states=update_metadata_topic_states([with_offline, deleted]),
        live_brokers=update_metadata_brokers(reversed(BROKERS)),
    )
    decoded = wire(request)
    assert update_metadata_request_states(decoded) == [with_offline, deleted]
    # Epochs are not on the wire.
    assert update_metadata_request_brokers(decoded) == [
        BrokerInfo(b.broker_id, b.endpoints, b.rack) for b in BROKERS
    ]
    assert [e.security_protocol for e in decoded.live_brokers[0].endpoints] == [0, 3]


def test_update_metadata_with_an_unknown_security_protocol_is_refused():
    request = UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=1,
        topic_states=(),
        live_brokers=update_metadata_brokers(BROKERS[1:]),
    )
    endpoint = request.live_brokers[0].endpoints[0]
    broken = type(endpoint)(port=1, host="h", listener="X", security_protocol=9)
    bad = type(request.live_brokers[0])(id=2, endpoints=(broken,), rack=None)
    with pytest.raises(ValueError, match="security protocol id 9"):
        update_metadata_request_brokers(
            UpdateMetadataRequest(
                controller_id=1, controller_epoch=1, topic_states=(), live_brokers=(bad,)
            )
        )


def test_stop_replica_round_trips_and_a_top_level_error_applies_to_every_partition():
    partitions = [
        StopReplicaPartition(("b", 0), -2, True),
        StopReplicaPartition(("a", 1), 4, False),
        StopReplicaPartition(("a", 0), -1, False),
    ]
    request = StopReplicaRequest(
        controller_id=1,
        controller_epoch=3,
        broker_epoch=5,
        topic_states=stop_replica_topic_states(partitions),
    )
    assert stop_replica_request_partitions(wire(request)) == sorted(partitions)
    tps = [p.tp for p in partitions]
    answered = wire(stop_replica_response({("a", 1): 0, ("b", 0): 56}))
    assert isinstance(answered, StopReplicaResponse)
    assert stop_replica_response_errors(answered, tps) == {("b", 0): 56, ("a", 1): 0, ("a", 0): 0}
    refused = wire(stop_replica_response({}, error_code=11))
    assert stop_replica_response_errors(refused, tps) == dict.fromkeys(tps, 11)
