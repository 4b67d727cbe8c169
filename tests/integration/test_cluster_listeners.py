"""A cluster whose brokers talk on a dedicated, SASL-authenticated inter-broker listener
while clients use a PLAINTEXT one (the configuration Kafka operators are told to use).

Replication runs over the broker listener; a client on the clients' listener cannot act as
a broker: a StopReplica asking to delete a partition is refused with
CLUSTER_AUTHORIZATION_FAILED and the partition keeps its records. (The single PLAINTEXT
listener configuration is what tests/integration/test_cluster.py runs.)
"""

from __future__ import annotations

import io

from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from core.server.interbroker_schema import (
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    StopReplicaTopicState,
)
from tests.support.cluster_clients import (
    assert_read_exactly_once,
    consume_all,
    create_topic,
    produce,
    wait_replicas_identical,
)
from tests.support.kafka_wire import SIZE, Connection, _read_exactly

PASSWORD = "broker-secret"
CLUSTER_AUTHORIZATION_FAILED = 31
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,BROKER://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,BROKER:SASL_PLAINTEXT",
    "inter.broker.listener.name": "BROKER",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.broker.plain.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="broker" password="{PASSWORD}" user_broker="{PASSWORD}";'
    ),
}


def stop_replica(bootstrap: str, topic: str, partition: int) -> StopReplicaResponse:
    """StopReplica v4 (delete the replica) as a controller would send it."""
    request = StopReplicaRequest(
        controller_id=i32(1),
        controller_epoch=i32(1_000),
        broker_epoch=i64(-1),
        topic_states=(
            StopReplicaTopicState(
                topic_name=topic,
                partition_states=(
                    StopReplicaPartitionState(
                        partition_index=i32(partition), leader_epoch=i32(-2), delete_partition=True
                    ),
                ),
            ),
        ),
    )
    header_cls = StopReplicaRequest.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(
        out,
        header_cls(
            request_api_key=i16(5),
            request_api_version=i16(4),
            correlation_id=i32(1),
            client_id="not-a-broker",
        ),
    )
    entity_writer(StopReplicaRequest)(out, request)
    with Connection(bootstrap) as connection:
        body = out.getvalue()
        connection.sock.sendall(SIZE.pack(len(body)) + body)
        (size,) = SIZE.unpack(_read_exactly(connection.sock, 4))
        answer = _read_exactly(connection.sock, size)
    _, used = entity_reader(StopReplicaResponse.__header_schema__)(answer, 0)
    response, _ = entity_reader(StopReplicaResponse)(answer, used)
    return response


def test_brokers_replicate_over_their_own_listener_and_clients_cannot_act_as_one(
    cluster_factory,
) -> None:
    cluster = cluster_factory(settings=SETTINGS)
    # Clients bootstrap from the PLAINTEXT listener (each broker's first endpoint).
    create_topic(cluster, "guarded", 2, configs={"min.insync.replicas": "2"})
    acked = produce(cluster, "guarded", [f"g-{i}".encode() for i in range(200)])
    wait_replicas_identical(cluster, "guarded", 2, [1, 2, 3])

    leader = cluster.leader("guarded", 0)
    answer = stop_replica(cluster.brokers[leader].endpoints["PLAINTEXT"], "guarded", 0)
    assert answer.error_code == CLUSTER_AUTHORIZATION_FAILED
    assert cluster.leader("guarded", 0) == leader
    assert_read_exactly_once(acked, consume_all(cluster, "guarded", 2))

    # Failover works over the broker listener too.
    cluster.kill(leader)
    cluster.wait_leader("guarded", 0, among=[b for b in (1, 2, 3) if b != leader])
    acked += produce(cluster, "guarded", [f"h-{i}".encode() for i in range(100)])
    assert_read_exactly_once(acked, consume_all(cluster, "guarded", 2))
    log = cluster.brokers[leader].log_file.read_text()
    assert "does not authenticate" not in log  # SASL on the broker listener: no warning
