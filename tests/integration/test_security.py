"""TLS and SASL listeners with real clients (confluent-kafka, kcat, KafkaJS) on one broker
process.

The broker serves four listeners: PLAINTEXT; SSL requiring a client certificate signed by
the test CA; SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
accounts from Kafka's JAAS settings. Each authenticated path produces and consumes; wrong
passwords, missing certificates and unauthenticated requests are refused; a SCRAM client
cannot tell an unknown user from a wrong password; no password appears in the broker's log.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from core.server.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.kafka_clients import (
    Rec,
    consume_confluent,
    consume_kcat,
    produce_confluent,
    produce_kcat,
)
from tests.support.kafka_wire import Connection
from tests.support.pki import Pki, make_pki

from .kafkajs_driver import client_config as kafkajs_config
from .kafkajs_driver import consume_kafkajs, produce_kafkajs

PASSWORD = "alice-secret-7f3a"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def jaas(mechanism: str) -> str:
    return f'{MODULES[mechanism]} required user_alice="{PASSWORD}" user_bob="bob-pw-19";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    settings = {
        "listeners": (
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
            "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
        ),
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        # Tiering on, so that the CLI has remote metadata to read over SASL.
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.root": str(tmp_path_factory.mktemp("bucket")),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "2",
        # KafkaJS reads through a consumer group: no join delay.
        "group.initial.rebalance.delay.ms": "0",
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        for mechanism in MECHANISMS:
            key = f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"
            settings[key] = jaas(mechanism)
    b = start_broker(tmp_path_factory.mktemp("secure"), settings)
    yield b
    b.stop()


def client_config(pki: Pki, protocol: str, mechanism: str | None = None, **over) -> dict:
    config: dict[str, Any] = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        config["ssl.ca.location"] = str(pki.ca)
    if protocol == "SSL":
        config["ssl.certificate.location"] = str(pki.client_cert)
        config["ssl.key.location"] = str(pki.client_key)
    if mechanism is not None:
        config.update(
            {"sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": PASSWORD}
        )
    config.update(over)
    return config


def records(tag: str, n: int = 20) -> list[Rec]:
    return [Rec(f"k{i}".encode(), f"{tag}-{i}".encode()) for i in range(n)]


CASES = [("SSL", None)] + [
    (protocol, mechanism) for protocol in ("SASL_PLAINTEXT", "SASL_SSL") for mechanism in MECHANISMS
]


@pytest.mark.parametrize(("protocol", "mechanism"), CASES)
def test_confluent_kafka_produces_and_consumes_on_each_secured_listener(
    broker: BrokerProcess, pki: Pki, protocol: str, mechanism: str | None
) -> None:
    topic = f"secure-{protocol.lower()}-{(mechanism or 'cert').lower()}"
    bootstrap = broker.endpoints[protocol]
    config = client_config(pki, protocol, mechanism)
    sent = records(topic)
    offsets = produce_confluent(bootstrap, topic, sent, config)
    assert offsets == list(range(len(sent)))
    got = consume_confluent(bootstrap, topic, 0, config)
    assert [(g.key, g.value) for g in got] == [(r.key, r.value) for r in sent]


@pytest.mark.parametrize(("protocol", "mechanism"), [("SSL", None), ("SASL_SSL", "SCRAM-SHA-256")])
def test_kcat_produces_and_consumes_over_tls_and_sasl(
    broker: BrokerProcess, pki: Pki, tmp_path: Path, protocol: str, mechanism: str | None
) -> None:
    topic = f"kcat-{protocol.lower()}"
    bootstrap = broker.endpoints[protocol]
    extra: list[str] = []
    for key, value in client_config(pki, protocol, mechanism).items():
        name = "sasl.mechanisms" if key == "sasl.mechanism" else key  # kcat's spelling
        extra += ["-X", f"{name}={value}"]
    sent = records(topic, 10)
    produce_kcat(bootstrap, topic, sent, tmp_path, [], extra)
    got = consume_kcat(bootstrap, topic, 0, extra)
    assert [(g.key, g.value) for g in got] == [(r.key, r.value) for r in sent]


@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [
        ("SSL", None),
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_SSL", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
    ],
)
def test_kafkajs_produces_and_consumes_over_tls_and_sasl(
    broker: BrokerProcess, pki: Pki, protocol: str, mechanism: str | None
) -> None:
    topic = f"kafkajs-{protocol.lower()}-{(mechanism or 'cert').lower()}"
    bootstrap = broker.endpoints[protocol]
    ssl = None
    if protocol in ("SSL", "SASL_SSL"):
        ssl = {"ca": [pki.ca.read_text()]}
        if protocol == "SSL":
            ssl |= {"cert": pki.client_cert.read_text(), "key": pki.client_key.read_text()}
    sasl = None
    if mechanism is not None:
        sasl = {"mechanism": mechanism.lower(), "username": "alice", "password": PASSWORD}
    client = kafkajs_config(bootstrap, ssl, sasl)
    sent = records(topic, 10)
    assert produce_kafkajs(bootstrap, topic, sent, client=client) == list(range(len(sent)))
    got = consume_kafkajs(bootstrap, topic, client=client)
    assert [(g.key, g.value) for g in got] == [(r.key, r.value) for r in sent]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_refused_and_nothing_is_written(
    broker: BrokerProcess, pki: Pki, mechanism: str
) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []
    config = client_config(
        pki, "SASL_PLAINTEXT", mechanism, **{"sasl.password": "not-the-password"}
    )
    producer = Producer(
        {
            "bootstrap.servers": broker.endpoints["SASL_PLAINTEXT"],
            "error_cb": errors.append,
            "message.timeout.ms": 5000,
            **config,
        }
    )
    delivered: list[Any] = []
    producer.produce("refused", b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert delivered and delivered[0] is not None  # not delivered
    # The topic was never created: nobody authenticated asked for it.
    plain = client_config(pki, "SASL_PLAINTEXT", "PLAIN")
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.endpoints["SASL_PLAINTEXT"], **plain})
    assert "refused" not in admin.list_topics(timeout=15).topics


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def authentication_error(broker: BrokerProcess, mechanism: str, user: str, password: str) -> str:
    """The SASL error a confluent-kafka client reports, without its timing and address."""
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.endpoints["SASL_PLAINTEXT"],
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "error_cb": errors.append,
        }
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        failed = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if failed:
            # "<listener>://<host:port>/bootstrap: SASL authentication error: <broker's
            # message> (after 4ms in state AUTH_REQ)"
            text = failed[0].str().split(": ", 1)[1]
            return re.sub(r" \(after \d+ms in state (\w+)\)", r" (in state \1)", text)
        producer.poll(0.1)
    raise AssertionError(f"no authentication error for {user}: {errors}")


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_a_scram_client_cannot_tell_an_unknown_user_from_a_wrong_password(
    broker: BrokerProcess, mechanism: str
) -> None:
    wrong_password = authentication_error(broker, mechanism, "alice", "not-the-password")
    unknown_user = authentication_error(broker, mechanism, "mallory", PASSWORD)
    assert (
        wrong_password
        == unknown_user
        == (
            "SASL authentication error: Authentication failed during authentication due to "
            f"invalid credentials with SASL mechanism {mechanism} (in state AUTH_REQ)"
        )
    )


def scram_exchange(broker: BrokerProcess, mechanism: str, user: str, password: str) -> tuple:
    """A SCRAM exchange over SaslHandshake v1 / SaslAuthenticate v2 on a raw socket: the
    server-first message, and the final answer's error code, message and bytes."""
    hash_name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    with Connection(broker.endpoints["SASL_PLAINTEXT"]) as conn:
        handshake = conn.request(
            ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism)
        )
        assert handshake.error_code.value == 0
        bare = f"n={user},r=fyko+d2lbbFgONRv9qkxdawL"
        first = conn.request(
            ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=f"n,,{bare}".encode())
        )
        assert (first.error_code.value, first.error_message) == (0, None)
        server_first = first.auth_bytes.decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        salted = hashlib.pbkdf2_hmac(
            hash_name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
        )
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(
            hashlib.new(hash_name, client_key).digest(), auth_message, hash_name
        )
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
        final = conn.request(
            ApiKey.SASL_AUTHENTICATE,
            2,
            SaslAuthenticateRequest(auth_bytes=f"{without_proof},p={proof.decode()}".encode()),
        )
        assert conn.sock.recv(1) == b""  # closed after the answer
    return server_first, (final.error_code.value, final.error_message, final.auth_bytes)


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_challenges_an_unknown_user_and_refuses_it_like_a_wrong_password(
    broker: BrokerProcess, mechanism: str
) -> None:
    real_first, wrong_password = scram_exchange(broker, mechanism, "alice", "not-the-password")
    fake_first, unknown_user = scram_exchange(broker, mechanism, "mallory", PASSWORD)
    fake_again, _ = scram_exchange(broker, mechanism, "mallory", "other")
    shape = re.compile(
        r"r=fyko\+d2lbbFgONRv9qkxdawL[A-Za-z0-9_-]{32},s=([A-Za-z0-9+/]{43}=),i=4096"
    )
    real, fake, again = (shape.fullmatch(f) for f in (real_first, fake_first, fake_again))
    assert real and fake and again, (real_first, fake_first, fake_again)
    assert fake[1] == again[1] != real[1]  # stable per user name, as a real salt is
    assert (
        wrong_password
        == unknown_user
        == (
            58,
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}",
            b"",
        )
    )


def test_requests_before_authentication_close_the_connection(broker: BrokerProcess) -> None:
    host, port = broker.endpoints["SASL_PLAINTEXT"].rsplit(":", 1)
    # Metadata v0 for every topic: a request a SASL listener must not answer unauthenticated.
    body = struct.pack(">hhih", 3, 0, 9, 4) + b"test" + struct.pack(">i", 0)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(4) == b""  # closed without an answer


def test_tls_listener_refuses_a_client_without_a_certificate(
    broker: BrokerProcess, pki: Pki
) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.endpoints["SSL"],
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "error_cb": errors.append,
            "message.timeout.ms": 5000,
        }
    )
    delivered: list[Any] = []
    producer.produce("no-cert", b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(15)
    assert delivered and delivered[0] is not None
    assert errors and all(
        e.code() in (KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN)
        for e in errors
    ), errors


def test_the_cli_reads_remote_metadata_over_sasl_with_a_command_config(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker.endpoints["SASL_PLAINTEXT"]
    args = [sys.executable, "-m", "tierlog", "metadata", "list", "--json", "--timeout", "15"]
    args += ["--bootstrap-server", bootstrap]
    # Kafka's tools spell SASL credentials as a JAAS entry: that form is accepted.
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{PASSWORD}";\n'
    )
    done = subprocess.run(
        [*args, "--command-config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["segments"] == []
    unauthenticated = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert unauthenticated.returncode != 0
    assert PASSWORD not in done.stderr + unauthenticated.stderr + unauthenticated.stdout


def test_no_password_reaches_the_broker_log(broker: BrokerProcess) -> None:
    # Runs after the tests above (module order): the log has start-up, successful and failed
    # authentications.
    text = broker.log_file.read_text(errors="replace")
    assert "authenticated as User:alice" in text
    for secret in (PASSWORD, "bob-pw-19", "not-the-password"):
        assert secret not in text
