"""Znode formats against the bytes Apache Kafka 3.x writes.

The golden strings are what ``zookeeper-shell get`` shows for znodes written by Kafka 3.x
brokers (written down by hand from Kafka's ZkData.scala and published shell sessions). Kafka
builds most of them from hash maps, so only parsing them is a compatibility requirement; the
encoders here also reproduce Kafka's key order, which makes the comparison byte for byte.
"""

from __future__ import annotations

import json
import uuid

import pytest

from core.kafka_uuid import uuid_from_base64
from core.server.sasl import ScramCredential
from core.server.zookeeper import paths as zk_paths
from core.server.zookeeper.data import (
    BrokerRegistration,
    ControllerRegistration,
    EndPoint,
    ProducerIdBlock,
    SupportedVersionRange,
    decode_broker_registration,
    decode_cluster_id,
    decode_controller,
    decode_controller_epoch,
    decode_producer_id_block,
    encode_broker_registration,
    encode_cluster_id,
    encode_controller,
    encode_controller_epoch,
    encode_producer_id_block,
)
from core.server.zookeeper.errors import ZkDataError
from core.server.zookeeper.topic_data import (
    LeaderRecoveryState,
    PartitionState,
    ReplicaAssignment,
    TopicAssignment,
    decode_config,
    decode_config_change,
    decode_isr_change,
    decode_partition_state,
    decode_preferred_replica_election,
    decode_reassign_partitions,
    decode_scram_credential,
    decode_topic_assignment,
    encode_config,
    encode_config_change,
    encode_isr_change,
    encode_partition_state,
    encode_preferred_replica_election,
    encode_reassign_partitions,
    encode_scram_credential,
    encode_topic_assignment,
)

PLAINTEXT = EndPoint("PLAINTEXT", "server1", 9092, "PLAINTEXT")

BROKER = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://server1:9092"],"jmx_port":-1,"port":9092,"host":"server1",'
    b'"version":5,"timestamp":"1704032948949"}'
)
BROKER_TWO_LISTENERS = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT",'
    b'"EXTERNAL":"PLAINTEXT"},"endpoints":["PLAINTEXT://kafka-1:29092",'
    b'"EXTERNAL://localhost:9092"],"jmx_port":-1,"port":29092,"host":"kafka-1","version":5,'
    b'"timestamp":"1625336133848"}'
)
CONTROLLER = b'{"version":2,"brokerid":1,"timestamp":"1704032949256","kraftControllerEpoch":-1}'
TOPIC = (
    b'{"partitions":{"0":[2,3,1],"1":[3,1,2],"2":[1,2,3]},"topic_id":"cMr3GpVESX2L3byPGf93lQ",'
    b'"adding_replicas":{},"removing_replicas":{},"version":3}'
)
PARTITION_STATE = b'{"controller_epoch":1,"leader":2,"version":1,"leader_epoch":0,"isr":[2,3,1]}'
CLUSTER_ID = b'{"version":"1","id":"eQzK4lYlQ9y8P21IScOl_g"}'
PRODUCER_ID_BLOCK = b'{"version":1,"broker":35,"block_start":"4000","block_end":"4999"}'


# -- /brokers/ids/<id> -------------------------------------------------------------------------
def test_broker_registration_is_written_as_kafka_writes_it():
    registration = BrokerRegistration(1, (PLAINTEXT,), timestamp_ms=1704032948949)
    assert encode_broker_registration(registration) == BROKER


def test_broker_registration_written_by_kafka_is_read():
    registration = decode_broker_registration(1, BROKER, czxid=4294967321)
    assert registration == BrokerRegistration(
        1, (PLAINTEXT,), timestamp_ms=1704032948949, epoch=4294967321
    )


def test_broker_registration_with_two_listeners_round_trips_byte_for_byte():
    registration = decode_broker_registration(1, BROKER_TWO_LISTENERS)
    assert registration.endpoints == (
        EndPoint("PLAINTEXT", "kafka-1", 29092, "PLAINTEXT"),
        EndPoint("EXTERNAL", "localhost", 9092, "PLAINTEXT"),
    )
    assert encode_broker_registration(registration) == BROKER_TWO_LISTENERS


def test_broker_registration_with_rack_features_tls_and_ipv6_round_trips():
    registration = BrokerRegistration(
        7,
        (
            EndPoint("INTERNAL", "::1", 9093, "SSL"),
            EndPoint("CLIENT", None, 9094, "SASL_SSL"),
        ),
        rack="eu-west-1a",
        features={"metadata.version": SupportedVersionRange(1, 19)},
        timestamp_ms=1,
    )
    data = encode_broker_registration(registration)
    obj = json.loads(data)
    # No PLAINTEXT listener: old clients get no host/port (Kafka writes null and -1).
    assert obj["host"] is None and obj["port"] == -1
    assert obj["endpoints"] == ["INTERNAL://[::1]:9093", "CLIENT://:9094"]
    assert obj["rack"] == "eu-west-1a"
    assert obj["features"] == {"metadata.version": {"min_version": 1, "max_version": 19}}
    assert decode_broker_registration(7, data) == registration


def test_older_broker_registration_versions_are_read():
    v4 = (
        b'{"version":4,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
        b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],'
        b'"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},'
        b'"rack":"dc1"}'
    )
    registration = decode_broker_registration(3, v4)
    assert registration.endpoints == (
        EndPoint("CLIENT", "host1", 9092, "SSL"),
        EndPoint("REPLICATION", "host1", 9093, "PLAINTEXT"),
    )
    assert (registration.rack, registration.jmx_port, registration.version) == ("dc1", 9999, 4)
    v1 = b'{"jmx_port":-1,"timestamp":"1445518677618","host":"1.2.3.4","version":1,"port":9092}'
    assert decode_broker_registration(3, v1).endpoints == (
        EndPoint("PLAINTEXT", "1.2.3.4", 9092, "PLAINTEXT"),
    )


@pytest.mark.parametrize(
    "data",
    [
        None,
        b"",
        b"not json",
        b"[]",
        b'{"version":5,"jmx_port":-1,"endpoints":["NOPE://h:1"]}',
        b'{"version":5,"jmx_port":-1,"endpoints":["no-scheme"]}',
        b'{"version":true,"jmx_port":-1,"endpoints":[]}',
    ],
)
def test_malformed_broker_registration_is_a_data_error(data):
    with pytest.raises(ZkDataError):
        decode_broker_registration(1, data)


# -- /controller, /controller_epoch, /cluster/id, /latest_producer_id_block ------------------
def test_controller_is_written_and_read_as_kafka_3_does():
    registration = ControllerRegistration(1, timestamp_ms=1704032949256)
    assert encode_controller(registration) == CONTROLLER
    assert decode_controller(CONTROLLER, zk_version=3) == ControllerRegistration(
        1, 1704032949256, -1, zk_version=3
    )
    # Kafka before 3.4 wrote version 1, without kraftControllerEpoch.
    v1 = decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1673382716473"}')
    assert (v1.broker_id, v1.kraft_controller_epoch) == (2, -1)


def test_controller_epoch_is_decimal_text():
    assert encode_controller_epoch(12) == b"12"
    assert decode_controller_epoch(b"1") == 1
    with pytest.raises(ZkDataError):
        decode_controller_epoch(b"one")


def test_cluster_id_has_a_string_version():
    assert encode_cluster_id("eQzK4lYlQ9y8P21IScOl_g") == CLUSTER_ID
    assert decode_cluster_id(CLUSTER_ID) == "eQzK4lYlQ9y8P21IScOl_g"


def test_producer_id_block_bounds_are_strings_and_inclusive():
    block = ProducerIdBlock(35, 4000, 1000)
    assert encode_producer_id_block(block) == PRODUCER_ID_BLOCK
    assert decode_producer_id_block(PRODUCER_ID_BLOCK) == block
    assert (block.last_producer_id, block.next_block_first_id) == (4999, 5000)
    too_big = b'{"version":1,"broker":1,"block_start":"0","block_end":"9223372036854775808"}'
    with pytest.raises(ZkDataError):
        decode_producer_id_block(too_big)


# -- topics and partitions ---------------------------------------------------------------------
def test_topic_assignment_is_written_as_kafka_writes_it():
    assignment = TopicAssignment(
        uuid_from_base64("cMr3GpVESX2L3byPGf93lQ"),
        {
            0: ReplicaAssignment((2, 3, 1)),
            1: ReplicaAssignment((3, 1, 2)),
            2: ReplicaAssignment((1, 2, 3)),
        },
    )
    assert encode_topic_assignment(assignment) == TOPIC
    assert decode_topic_assignment("demo", TOPIC) == assignment


def test_topic_assignment_with_a_reassignment_in_progress_round_trips():
    assignment = TopicAssignment(
        uuid.uuid4(),
        {0: ReplicaAssignment((1, 2, 3), adding_replicas=(3,), removing_replicas=(1,))},
    )
    data = encode_topic_assignment(assignment)
    assert json.loads(data)["adding_replicas"] == {"0": [3]}
    assert json.loads(data)["removing_replicas"] == {"0": [1]}
    assert decode_topic_assignment("t", data) == assignment


def test_topic_assignment_of_version_1_has_no_topic_id():
    old = decode_topic_assignment("ttt", b'{"version":1,"partitions":{"0":[0]}}')
    assert old == TopicAssignment(None, {0: ReplicaAssignment((0,))})


def test_partition_state_is_written_as_kafka_writes_it():
    state = PartitionState(leader=2, leader_epoch=0, isr=(2, 3, 1), controller_epoch=1)
    assert encode_partition_state(state) == PARTITION_STATE
    assert decode_partition_state(("demo", 0), PARTITION_STATE, zk_version=5) == PartitionState(
        2, 0, (2, 3, 1), 1, partition_epoch=5
    )


def test_partition_state_names_leader_recovery_only_while_recovering():
    recovering = PartitionState(2, 4, (2,), 3, LeaderRecoveryState.RECOVERING)
    data = encode_partition_state(recovering)
    assert json.loads(data)["leader_recovery_state"] == 1
    assert decode_partition_state(("t", 0), data) == recovering
    with pytest.raises(ZkDataError):
        decode_partition_state(("t", 0), data.replace(b'"isr":[2]', b'"isr":"2"'))


# -- configs and notifications -----------------------------------------------------------------
def test_config_is_version_1_with_string_values_in_utf8():
    data = encode_config({"cleanup.policy": "compact", "note": "café"})
    assert data == '{"version":1,"config":{"cleanup.policy":"compact","note":"café"}}'.encode()
    assert decode_config(data) == {"cleanup.policy": "compact", "note": "café"}
    assert decode_config(None) == {}
    with pytest.raises(ZkDataError):
        decode_config(b'{"version":1,"config":{"retention.ms":1000}}')


def test_config_change_notification_names_the_entity_path():
    assert encode_config_change("topics/test") == b'{"version":2,"entity_path":"topics/test"}'
    assert decode_config_change(b'{"version":2,"entity_path":"topics/test"}') == "topics/test"
    v1 = b'{"version":1,"entity_type":"topics","entity_name":"test"}'
    assert decode_config_change(v1) == "topics/test"


def test_partition_lists_of_notifications_and_admin_requests():
    isr = b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":1}]}'
    assert encode_isr_change([("t", 1), ("t", 0)]) == isr
    assert decode_isr_change(isr) == {("t", 0), ("t", 1)}
    election = b'{"version":1,"partitions":[{"topic":"foo","partition":1}]}'
    assert encode_preferred_replica_election([("foo", 1)]) == election
    assert decode_preferred_replica_election(election) == {("foo", 1)}
    reassign = b'{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2]}]}'
    assert encode_reassign_partitions({("foo", 0): [1, 2]}) == reassign
    assert decode_reassign_partitions(reassign) == {("foo", 0): (1, 2)}


def test_scram_credential_is_kafka_s_config_value():
    credential = ScramCredential(
        salt=b"salt", iterations=4096, stored_key=b"stored", server_key=b"server"
    )
    value = encode_scram_credential(credential)
    assert value == "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
    assert decode_scram_credential(value) == credential
    with pytest.raises(ZkDataError):
        decode_scram_credential("salt=c2FsdA==,iterations=4096")


def test_user_and_client_names_are_sanitized_as_kafka_does():
    assert zk_paths.sanitize_entity_name("alice") == "alice"
    assert zk_paths.sanitize_entity_name("User:CN=a b,O=x*~") == "User%3ACN%3Da%20b%2CO%3Dx%2A%7E"
    assert zk_paths.desanitize_entity_name("User%3ACN%3Da%20b%2CO%3Dx%2A%7E") == "User:CN=a b,O=x*~"
    assert zk_paths.config_entity("users", "alice") == "/config/users/alice"
