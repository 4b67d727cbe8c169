"""SCRAM users managed at run time: confluent-kafka's AdminClient creates, describes and
deletes credentials (AlterUserScramCredentials / DescribeUserScramCredentials), and clients
authenticate with them on a SASL_PLAINTEXT listener at once, and after a restart."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from tests.support.broker_process import BrokerProcess, restart
from tests.support.kafka_clients import Rec

from .kafkajs_driver import KafkaJSError, produce_kafkajs
from .kafkajs_driver import client_config as kafkajs_config

TIMEOUT_S = 30.0
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def settings() -> dict[str, str]:
    """A PLAINTEXT listener (the admin's) and a SASL_PLAINTEXT one whose SCRAM accounts
    all come from AlterUserScramCredentials: its JAAS entry lists none."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": SCRAM_JAAS,
    }


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def alter(broker: BrokerProcess, *alterations: Any) -> dict[str, str | None]:
    """Each user's outcome: None, or the error's name."""
    client = admin(broker)
    futures = client.alter_user_scram_credentials(list(alterations))
    out: dict[str, str | None] = {}
    for user, future in futures.items():
        try:
            future.result(TIMEOUT_S)
            out[user] = None
        except KafkaException as e:
            out[user] = e.args[0].name()
    return out


def described(broker: BrokerProcess) -> dict[str, list[tuple[str, int]]]:
    client = admin(broker)
    found = client.describe_user_scram_credentials().result(TIMEOUT_S)
    return {
        user: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
        for user, d in found.items()
    }


def upsert(user: str, password: str, mechanism=ScramMechanism.SCRAM_SHA_256, iterations=8192):
    info = ScramCredentialInfo(mechanism, iterations)
    return UserScramCredentialUpsertion(user, info, password.encode())


def authenticates(broker: BrokerProcess, mechanism: str, user: str, password: str) -> bool:
    """Whether a producer authenticating as ``user`` writes a record on the SASL listener."""
    errors: list[KafkaError] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.endpoints["SASL_PLAINTEXT"],
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "message.timeout.ms": 5000,
            "error_cb": errors.append,
        }
    )
    delivered: list[Any] = []
    producer.produce("scram-writes", b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    # (A KafkaError compared with None by ``==`` leaves a pending TypeError in confluent-kafka.)
    ok = len(delivered) == 1 and delivered[0] is None
    assert ok or any(e.code() == KafkaError._AUTHENTICATION for e in errors), (errors, delivered)
    return ok


def test_credentials_are_created_used_deleted_and_kept_across_a_restart(broker_factory) -> None:
    broker = broker_factory(settings())
    assert not authenticates(broker, "SCRAM-SHA-256", "alice", "alice-pw")
    assert alter(
        broker,
        upsert("alice", "alice-pw"),
        upsert("bob", "bob-pw", ScramMechanism.SCRAM_SHA_512, 4096),
    ) == {"alice": None, "bob": None}
    assert described(broker) == {
        "alice": [("SCRAM_SHA_256", 8192)],
        "bob": [("SCRAM_SHA_512", 4096)],
    }
    # Used at once, by the mechanism they were made for only.
    assert authenticates(broker, "SCRAM-SHA-256", "alice", "alice-pw")
    assert not authenticates(broker, "SCRAM-SHA-256", "alice", "wrong")
    assert not authenticates(broker, "SCRAM-SHA-512", "alice", "alice-pw")
    assert authenticates(broker, "SCRAM-SHA-512", "bob", "bob-pw")

    # Deleted: no longer authenticates.
    deletion = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)
    assert alter(broker, deletion) == {"bob": None}
    assert not authenticates(broker, "SCRAM-SHA-512", "bob", "bob-pw")
    assert alter(broker, deletion) == {"bob": "RESOURCE_NOT_FOUND"}
    assert alter(broker, upsert("carol", "pw", iterations=1024)) == {
        "carol": "UNACCEPTABLE_CREDENTIAL"
    }

    # Kept across a restart.
    assert broker.stop() == 0, broker.log_tail()
    again = restart(broker)
    try:
        assert described(again) == {"alice": [("SCRAM_SHA_256", 8192)]}
        assert authenticates(again, "SCRAM-SHA-256", "alice", "alice-pw")
        assert not authenticates(again, "SCRAM-SHA-512", "bob", "bob-pw")
    finally:
        assert again.stop() == 0, again.log_tail()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafkajs_authenticates_with_a_runtime_credential(broker_factory, mechanism) -> None:
    broker = broker_factory(settings())
    confluent_mechanism = ScramMechanism[mechanism.replace("-", "_")]
    assert alter(broker, upsert("dora", "dora-pw", confluent_mechanism)) == {"dora": None}
    sasl = {"mechanism": mechanism.lower(), "username": "dora", "password": "dora-pw"}
    bootstrap = broker.endpoints["SASL_PLAINTEXT"]
    client = kafkajs_config(bootstrap, sasl=sasl)
    assert produce_kafkajs(bootstrap, "kafkajs-scram", [Rec(b"k", b"v")], client=client) == [0]
    wrong = kafkajs_config(bootstrap, sasl={**sasl, "password": "not-dora-pw"})
    with pytest.raises(KafkaJSError, match="SASL"):
        produce_kafkajs(bootstrap, "kafkajs-scram", [Rec(b"k", b"v")], client=wrong)
