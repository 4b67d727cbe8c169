"""SCRAM credentials and client quotas in a three-broker cluster (kept in ZooKeeper, as in
Kafka's ZooKeeper mode): changed through one broker with real admin clients, in effect on
every broker, and on a broker that restarts.

Changes reach the other brokers through ZooKeeper's change notifications, a moment after
the admin client's answer (as in Kafka): the tests wait, with a deadline, for each broker
to show the change.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.static.primitive import i8

from core.server.api_keys import ApiKey
from tests.support.cluster import DEADLINE_S, Cluster
from tests.support.cluster_clients import create_topic
from tests.support.kafka_wire import call, load_request_schema
from tests.support.waiting import wait_until

SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    # No static account: every SCRAM user comes from AlterUserScramCredentials.
    "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
}


def wait(condition: Callable[[], bool], what: str) -> None:
    wait_until(condition, DEADLINE_S, 0.2, what)


def plaintext(cluster: Cluster, broker_id: int) -> str:
    return cluster.brokers[broker_id].endpoints["PLAINTEXT"]


def authenticates(cluster: Cluster, broker_id: int, user: str, password: str) -> bool:
    """Whether ``user`` authenticates with SCRAM-SHA-256 on that broker (a Metadata request
    on its SASL listener, the only broker the client knows)."""
    client = AdminClient(
        {
            "bootstrap.servers": cluster.brokers[broker_id].endpoints["SASL_PLAINTEXT"],
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": password,
        }
    )
    try:
        client.list_topics(timeout=5)
        return True
    except KafkaException:
        return False


def test_a_scram_user_created_on_one_broker_authenticates_on_every_broker(
    cluster_factory,
) -> None:
    cluster = cluster_factory(3, SETTINGS)
    assert not authenticates(cluster, 2, "alice", "alice-pw")
    admin = AdminClient({"bootstrap.servers": plaintext(cluster, 1)})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", info, b"alice-pw")]
    )
    for future in futures.values():
        future.result(DEADLINE_S)
    entry = cluster._json("/config/users/alice")
    assert entry is not None and entry["config"]["SCRAM-SHA-256"].endswith("iterations=8192")
    for broker_id in (1, 2, 3):
        wait(lambda b=broker_id: authenticates(cluster, b, "alice", "alice-pw"), f"{broker_id}")
        assert not authenticates(cluster, broker_id, "alice", "wrong")
    # Every broker describes the user.
    for broker_id in (1, 2, 3):
        described = AdminClient({"bootstrap.servers": plaintext(cluster, broker_id)})
        users = described.describe_user_scram_credentials().result(DEADLINE_S)
        assert set(users) == {"alice"}

    # A restarted broker loads the users from ZooKeeper.
    cluster.kill(3)
    # Its ZooKeeper session must end first (Kafka refuses a broker id still registered).
    cluster.wait(lambda: 3 not in cluster.registered(), "broker 3's registration gone")
    cluster.restart(3)
    cluster.wait_registered([1, 2, 3])
    assert authenticates(cluster, 3, "alice", "alice-pw")

    # Deleted through broker 2: no broker lets alice in any more.
    admin2 = AdminClient({"bootstrap.servers": plaintext(cluster, 2)})
    deletion = UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)
    for future in admin2.alter_user_scram_credentials([deletion]).values():
        future.result(DEADLINE_S)
    for broker_id in (1, 2, 3):
        wait(lambda b=broker_id: not authenticates(cluster, b, "alice", "alice-pw"), "refused")


# -- client quotas ------------------------------------------------------------------------------
def alter_quota(
    bootstrap: str, entity: list[tuple[str, str | None]], key: str, value: float
) -> None:
    a = load_request_schema(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    module = __import__(a.__module__, fromlist=["EntryData"])
    request = a(
        entries=(
            module.EntryData(
                entity=tuple(module.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                ops=(module.OpData(key=key, value=value, remove=False),),
            ),
        ),
        validate_only=False,
    )
    response = call(bootstrap, ApiKey.ALTER_CLIENT_QUOTAS, 1, request)
    assert [e.error_code for e in response.entries] == [0], response


def described_quotas(bootstrap: str) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    d = load_request_schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)
    module = __import__(d.__module__, fromlist=["ComponentData"])
    request = d(components=(module.ComponentData(entity_type="client-id", match_type=i8(2),
                                                 match=None),), strict=False)  # fmt: skip
    response = call(bootstrap, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)
    assert response.error_code == 0, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def throttles_seen(cluster: Cluster, topic: str, partition: int, client_id: str) -> list[float]:
    """Produce 128 KiB to one partition; the throttle times the producer was told."""
    throttles: list[float] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": 1,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    for _ in range(128):
        producer.produce(topic, b"x" * 1024, partition=partition)
        producer.poll(0)
    assert producer.flush(120) == 0
    producer.poll(0)
    return throttles


def test_a_client_quota_set_on_one_broker_is_applied_by_every_broker(cluster_factory) -> None:
    # A short quota window: the rate of a short burst is measured over it.
    cluster = cluster_factory(
        3, {**SETTINGS, "quota.window.num": "2", "quota.window.size.seconds": "1"}
    )
    create_topic(cluster, "quota-topic", 3)
    alter_quota(plaintext(cluster, 1), [("client-id", "slow")], "producer_byte_rate", 32768)
    expected = {(("client-id", "slow"),): {"producer_byte_rate": 32768.0}}
    for broker_id in (1, 2, 3):
        wait(lambda b=broker_id: described_quotas(plaintext(cluster, b)) == expected, "described")
    znode = cluster._json("/config/clients/slow")
    assert znode == {"version": 1, "config": {"producer_byte_rate": "32768"}}
    # A partition led by a broker other than the one altered throttles the client.
    partition = next(p for p in range(3) if cluster.leader("quota-topic", p) != 1)
    assert throttles_seen(cluster, "quota-topic", partition, "slow")
    # A client without a quota is not throttled.
    assert not throttles_seen(cluster, "quota-topic", partition, "fast")
