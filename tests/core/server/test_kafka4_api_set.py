"""tierlog removes only what Kafka 4 removed: each API's lowest served version is Kafka 4's.

Kafka 4.0 dropped the versions older than Kafka 2.1's where its clients allowed (KIP-896);
tierlog serves from the same floors, so a client that works with Kafka 4 finds every version
it may send. An API added to the handler tables needs its Kafka 4 floor here.
"""

from __future__ import annotations

from core.server.api_keys import INTER_BROKER_VERSIONS
from core.server.handlers import ADVERTISED_VERSIONS

# The lowest version Kafka 4's brokers serve, by api name (KIP-896; the message specs say
# "Version(s) ... removed in Apache Kafka 4.0").
KAFKA_4_LOWEST = {
    "PRODUCE": 3,
    "FETCH": 4,
    "LIST_OFFSETS": 1,
    "METADATA": 0,
    "OFFSET_COMMIT": 2,
    "OFFSET_FETCH": 1,
    "FIND_COORDINATOR": 0,
    "JOIN_GROUP": 0,
    "HEARTBEAT": 0,
    "LEAVE_GROUP": 0,
    "SYNC_GROUP": 0,
    "DESCRIBE_GROUPS": 0,
    "LIST_GROUPS": 0,
    "SASL_HANDSHAKE": 0,
    "API_VERSIONS": 0,
    "CREATE_TOPICS": 2,
    "DELETE_TOPICS": 1,
    "DELETE_RECORDS": 0,
    "INIT_PRODUCER_ID": 0,
    "OFFSET_FOR_LEADER_EPOCH": 2,
    "ADD_PARTITIONS_TO_TXN": 0,
    "ADD_OFFSETS_TO_TXN": 0,
    "END_TXN": 0,
    "WRITE_TXN_MARKERS": 1,
    "TXN_OFFSET_COMMIT": 0,
    "DESCRIBE_ACLS": 1,
    "CREATE_ACLS": 1,
    "DELETE_ACLS": 1,
    "DESCRIBE_CONFIGS": 1,
    "ALTER_CONFIGS": 0,
    "ALTER_REPLICA_LOG_DIRS": 1,
    "DESCRIBE_LOG_DIRS": 1,
    "SASL_AUTHENTICATE": 0,
    "CREATE_PARTITIONS": 0,
    "DELETE_GROUPS": 0,
    "ELECT_LEADERS": 0,
    "INCREMENTAL_ALTER_CONFIGS": 0,
    "ALTER_PARTITION_REASSIGNMENTS": 0,
    "LIST_PARTITION_REASSIGNMENTS": 0,
    "OFFSET_DELETE": 0,
    "DESCRIBE_CLIENT_QUOTAS": 0,
    "ALTER_CLIENT_QUOTAS": 0,
    "DESCRIBE_USER_SCRAM_CREDENTIALS": 0,
    "ALTER_USER_SCRAM_CREDENTIALS": 0,
    "DESCRIBE_CLUSTER": 0,
    "DESCRIBE_PRODUCERS": 0,
    "DESCRIBE_TRANSACTIONS": 0,
    "LIST_TRANSACTIONS": 0,
}


def test_every_client_api_starts_at_kafka_4s_lowest_version():
    served = {
        api.name: low
        for api, (low, _) in ADVERTISED_VERSIONS.items()
        if api not in INTER_BROKER_VERSIONS
    }
    missing = sorted(set(served) - set(KAFKA_4_LOWEST))
    assert not missing, f"add Kafka 4's lowest version of {missing} to KAFKA_4_LOWEST"
    assert {name: KAFKA_4_LOWEST[name] for name in served} == served
