"""A broker with a super user: only brokers and ``super.users`` may write the internal topics
(``__remote_log_metadata`` among them), so tests that write those over the protocol
authenticate as ``admin`` (SASL/PLAIN) on a second listener. The PLAINTEXT listener stays
first, so ``BrokerProcess.bootstrap`` is an ordinary, anonymous client's."""

from __future__ import annotations

from typing import Any

from tests.support.broker_process import BrokerProcess

USERS = {"admin": "admin-pw", "alice": "alice-pw"}
SUPER_USER = "admin"
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)


def settings(**extra: str) -> dict[str, str]:
    """Broker settings: PLAINTEXT and SASL_PLAINTEXT listeners, ``User:admin`` a super user."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,
        "super.users": f"User:{SUPER_USER}",
        **extra,
    }


def client_config(user: str = SUPER_USER) -> dict[str, Any]:
    """librdkafka properties authenticating as ``user`` (the SASL listener's)."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def sasl_bootstrap(broker: BrokerProcess) -> str:
    return broker.endpoints["SASL_PLAINTEXT"]
