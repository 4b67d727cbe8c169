"""Listener security from the broker config: every bad setting names its key at start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InvalidConfigError
from core.server.config import BrokerConfig
from core.server.security import listener_security, principal_of_certificate

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


def config(**props: str) -> BrokerConfig:
    if "listeners" in props:  # Kafka wants the inter-broker listener to be one of them
        props.setdefault("inter.broker.listener.name", props["listeners"].split("://")[0])
    return BrokerConfig.from_props({"log.dirs": "/tmp/unused", **props})


def first_error(cfg: BrokerConfig) -> str:
    with pytest.raises(InvalidConfigError) as caught:
        for listener in cfg.broker_listeners:
            listener_security(cfg, listener)
    return str(caught.value)


def test_plaintext_listener_needs_nothing():
    cfg = config()
    (listener,) = cfg.broker_listeners
    security = listener_security(cfg, listener)
    assert security.ssl_context is None and security.sasl is None


def test_sasl_listener_with_accounts_serves_the_enabled_mechanisms():
    cfg = config(
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        **{
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        },
    )
    security = listener_security(cfg, cfg.broker_listeners[0])
    assert security.mechanisms == ("PLAIN",) and security.ssl_context is None


def test_the_pre_authentication_frame_cap_may_be_set_per_listener():
    cfg = config(
        listeners="SASL_PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
        **{
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,OTHER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": JAAS,
            "listener.name.other.sasl.server.max.receive.size": "4096",
        },
    )
    default, other = (listener_security(cfg, x) for x in cfg.broker_listeners)
    assert (default.sasl_max_receive_size, other.sasl_max_receive_size) == (524288, 4096)


def test_sasl_jaas_config_is_the_fallback_for_every_listener():
    cfg = config(
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        **{"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS},
    )
    assert listener_security(cfg, cfg.broker_listeners[0]).mechanisms == ("PLAIN",)


@pytest.mark.parametrize(
    ("props", "key", "secret_free"),
    [
        ({"listeners": "SSL://127.0.0.1:0"}, "ssl.keystore.location", True),
        (
            {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent/k.pem"},
            "ssl.keystore.location",
            True,
        ),
        (
            {
                "listeners": "SSL://127.0.0.1:0",
                "ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----\nAAAA\n",
                "ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nsecret-key-bytes\n",
            },
            "ssl.keystore.key",
            True,
        ),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "sasl.enabled.mechanisms", True),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"},
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            True,
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": 'Bad required user_alice="alice-secret"',
            },
            "sasl.jaas.config",
            True,
        ),
        (
            {"listener.name.plaintext.ssl.keystore.flavour": "x"},
            "listener.name.plaintext.ssl.keystore.flavour",
            True,
        ),
        (
            {"listener.name.elsewhere.ssl.client.auth": "required"},
            "listener.name.elsewhere.ssl.client.auth",
            True,
        ),
        (
            {"listener.name.plaintext.ssl.client.auth": "sometimes"},
            "ssl.client.auth",
            True,
        ),
    ],
)
def test_bad_security_settings_name_the_key_and_no_secret(props, key, secret_free):
    message = first_error(config(**props))
    assert key in message, message
    assert "alice-secret" not in message and "secret-key-bytes" not in message


def test_a_file_that_is_not_pem_is_refused_naming_the_key(tmp_path: Path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    cfg = config(
        listeners="SSL://127.0.0.1:0", **{"listener.name.ssl.ssl.keystore.location": str(junk)}
    )
    assert "listener.name.ssl.ssl.keystore.location" in first_error(cfg)


def test_client_auth_without_a_truststore_names_the_truststore(tmp_path: Path):
    cfg = config(
        listeners="SSL://127.0.0.1:0",
        **{"ssl.client.auth": "required", "ssl.keystore.location": str(_self_signed(tmp_path))},
    )
    assert "ssl.truststore.location" in first_error(cfg)


def test_certificate_subjects_become_kafka_principals():
    cert = {
        "subject": (
            (("countryName", "DE"),),
            (("organizationName", "Example, Inc."),),
            (("commonName", "alice"),),
        )
    }
    assert principal_of_certificate(cert) == "User:CN=alice,O=Example\\, Inc.,C=DE"
    assert principal_of_certificate(None) is None
    assert principal_of_certificate({}) is None


def _self_signed(directory: Path) -> Path:
    """A key and self-signed certificate in one PEM file."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    path = directory / "server.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + cert.public_bytes(serialization.Encoding.PEM)
    )
    return path
