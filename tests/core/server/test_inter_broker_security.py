"""The client side of the inter-broker listener, from the broker config: what a broker uses
to reach its peers, and every bad setting named by its key (TLS and SASL that work against a
real broker are in tests/integration/test_broker_client.py)."""

from __future__ import annotations

import pytest

from core.errors import InvalidConfigError
from core.server.config import BrokerConfig
from core.server.security import inter_broker_client_settings

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
SECRET = "s3cret-9f2"


def config(listener: str = "PLAINTEXT", **props: str) -> BrokerConfig:
    return BrokerConfig.from_props(
        {
            "log.dirs": "/tmp/unused",
            "listeners": f"{listener}://127.0.0.1:0",
            "inter.broker.listener.name": listener,
            **props,
        }
    )


def sasl(mechanism: str = "PLAIN", jaas: str | None = None, **props: str) -> BrokerConfig:
    module = PLAIN if mechanism == "PLAIN" else SCRAM
    jaas = jaas or f'{module} required username="broker" password="{SECRET}" user_broker="x";'
    return config(
        "SASL_PLAINTEXT",
        **{
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": mechanism,
            f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config": jaas,
            **props,
        },
    )


def error_of(cfg: BrokerConfig) -> str:
    with pytest.raises(InvalidConfigError) as caught:
        inter_broker_client_settings(cfg)
    assert SECRET not in str(caught.value)
    return str(caught.value)


def test_a_plaintext_inter_broker_listener_needs_nothing():
    security = inter_broker_client_settings(config())
    assert (security.listener, security.protocol) == ("PLAINTEXT", "PLAINTEXT")
    assert security.ssl_context is None and security.sasl is None


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_logs_in_with_the_username_and_password_of_the_mechanisms_jaas_entry(mechanism):
    security = inter_broker_client_settings(sasl(mechanism))
    assert security.sasl is not None
    assert (security.sasl.mechanism, security.sasl.username) == (mechanism, "broker")
    assert security.sasl.password == SECRET
    assert SECRET not in repr(security)


def test_sasl_jaas_config_is_the_fallback():
    cfg = config(
        "SASL_PLAINTEXT",
        **{
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.jaas.config": f'{PLAIN} required username="b" password="{SECRET}" user_b="x";',
        },
    )
    security = inter_broker_client_settings(cfg)
    assert security.sasl is not None and security.sasl.username == "b"


def test_kafkas_default_mechanism_gssapi_is_refused_naming_the_key():
    cfg = config(
        "SASL_PLAINTEXT",
        **{
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": f'{PLAIN} required username="b" password="{SECRET}" user_b="x";',
        },
    )
    assert "sasl.mechanism.inter.broker.protocol" in error_of(cfg)
    assert "GSSAPI" in error_of(cfg)


def test_the_mechanism_must_be_enabled_on_the_listener():
    message = error_of(sasl("PLAIN", **{"sasl.enabled.mechanisms": "SCRAM-SHA-512"}))
    assert "sasl.mechanism.inter.broker.protocol" in message
    assert "sasl.enabled.mechanisms" in message


@pytest.mark.parametrize(
    "jaas",
    [
        f'{PLAIN} required user_broker="{SECRET}";',  # accounts only, no login of its own
        f'{PLAIN} required username="broker";',
        f'{SCRAM} required username="broker" password="{SECRET}";',  # wrong login module
        "not jaas at all",
    ],
)
def test_a_jaas_entry_without_a_login_is_refused_naming_its_key(jaas):
    message = error_of(sasl("PLAIN", jaas))
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in message


def test_an_unknown_endpoint_identification_algorithm_is_refused_naming_the_key():
    message = error_of(config("SSL", **{"ssl.endpoint.identification.algorithm": "ldaps"}))
    assert "ssl.endpoint.identification.algorithm" in message


def test_required_client_certificates_need_a_keystore():
    message = error_of(config("SSL", **{"ssl.client.auth": "required"}))
    assert "ssl.keystore.location" in message
