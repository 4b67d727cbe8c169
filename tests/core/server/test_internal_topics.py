"""Who acts as a broker (and may write the internal topics): super.users, and the
inter-broker listener only when it is dedicated, named explicitly and authenticating."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from core.server.broker import Broker
from core.server.config import BrokerConfig, load_broker_config
from core.server.internal_topics import BrokerTrust, refused_for
from core.server.protocol import RequestContext
from core.server.sasl import SaslCredentials
from core.server.security import ANONYMOUS, ListenerSecurity

SASL = ListenerSecurity("SASL_PLAINTEXT", sasl=SaslCredentials({"broker": "pw"}, {}))
PLAIN = ListenerSecurity("PLAINTEXT")


def tls(client_auth: ssl.VerifyMode) -> ListenerSecurity:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.verify_mode = client_auth
    return ListenerSecurity("SSL", ssl_context=context)


def ctx(listener: str, principal: str = ANONYMOUS) -> RequestContext:
    return RequestContext(0, 9, 1, "c", listener, "127.0.0.1:5", principal)


def trust(settings: dict[str, str], security: dict[str, ListenerSecurity]) -> BrokerTrust:
    config = load_broker_config(None, {"node.id": "1", "log.dirs": "/tmp/unused", **settings})
    return BrokerTrust.from_config(config, security)


TWO = {
    "listeners": "CLIENT://127.0.0.1:9092,BROKER://127.0.0.1:9093",
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,BROKER:SASL_PLAINTEXT",
    "inter.broker.listener.name": "BROKER",
}


def test_by_default_nobody_acts_as_a_broker() -> None:
    t = trust({}, {"PLAINTEXT": PLAIN})
    assert t.broker_listener is None
    assert not t.admits(ctx("PLAINTEXT"))
    assert not t.admits(ctx("PLAINTEXT", "User:admin"))


def test_super_users_act_as_brokers_on_any_listener() -> None:
    t = trust({"super.users": "User:admin; User:ops"}, {"PLAINTEXT": PLAIN})
    assert t.admits(ctx("PLAINTEXT", "User:admin")) and t.admits(ctx("PLAINTEXT", "User:ops"))
    assert not t.admits(ctx("PLAINTEXT", "User:alice"))


def test_a_dedicated_authenticating_inter_broker_listener_is_trusted() -> None:
    t = trust(TWO, {"CLIENT": PLAIN, "BROKER": SASL})
    assert t.broker_listener == "BROKER"
    assert t.admits(ctx("BROKER", "User:broker"))
    assert not t.admits(ctx("CLIENT", "User:broker"))
    assert not t.admits(ctx("BROKER", ANONYMOUS))


@pytest.mark.parametrize(
    ("settings", "security"),
    [
        # The only listener is also the clients': the default setup.
        (
            {
                "listeners": "BROKER://127.0.0.1:9093",
                "listener.security.protocol.map": "BROKER:SASL_PLAINTEXT",
                "inter.broker.listener.name": "BROKER",
            },
            {"BROKER": SASL},
        ),
        # PLAINTEXT proves nothing about the caller.
        (
            {**TWO, "listener.security.protocol.map": "CLIENT:PLAINTEXT,BROKER:PLAINTEXT"},
            {"CLIENT": PLAIN, "BROKER": PLAIN},
        ),
        # TLS without a required client certificate neither.
        (
            {**TWO, "listener.security.protocol.map": "CLIENT:PLAINTEXT,BROKER:SSL"},
            {"CLIENT": PLAIN, "BROKER": tls(ssl.CERT_OPTIONAL)},
        ),
        # Not named explicitly: the default inter-broker listener is usually the clients' one
        # (here a listener named PLAINTEXT that happens to speak SASL).
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
                "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,EXTERNAL:PLAINTEXT",
            },
            {"PLAINTEXT": SASL, "EXTERNAL": PLAIN},
        ),
    ],
)
def test_an_inter_broker_listener_clients_may_share_is_not_trusted(settings, security) -> None:
    assert trust(settings, security).broker_listener is None


def test_tls_with_required_client_certificates_authenticates() -> None:
    settings = {**TWO, "listener.security.protocol.map": "CLIENT:PLAINTEXT,BROKER:SSL"}
    t = trust(settings, {"CLIENT": PLAIN, "BROKER": tls(ssl.CERT_REQUIRED)})
    assert t.admits(ctx("BROKER", "User:CN=broker-2"))


def test_only_the_internal_topics_are_protected() -> None:
    admins = BrokerTrust(frozenset({"User:admin"}))
    for topic in ("__consumer_offsets", "__transaction_state", "__remote_log_metadata"):
        assert refused_for(admins, ctx("PLAINTEXT"), topic)
        assert not refused_for(admins, ctx("PLAINTEXT", "User:admin"), topic)
    assert not refused_for(admins, ctx("PLAINTEXT"), "orders")
    assert not refused_for(admins, ctx("PLAINTEXT"), "__remote_log_metadata_x")
    assert refused_for(BrokerTrust(), ctx("PLAINTEXT", "User:admin"), "__consumer_offsets")


@pytest.mark.parametrize(
    ("super_users", "warned"),
    [("User:ANONYMOUS", True), ("User:admin;User:ANONYMOUS", True), ("User:admin", False)],
)
def test_start_up_warns_when_anonymous_clients_are_super_users(
    tmp_path, caplog, super_users: str, warned: bool
) -> None:
    """An operator who leaves ``super.users=User:ANONYMOUS`` on (a test set-up) reads at
    start-up that every unauthenticated client is allowed everything."""
    config = BrokerConfig.from_props(
        {
            "log.dirs": str(tmp_path / "data"),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "super.users": super_users,
        }
    )

    async def start_and_stop() -> None:
        broker = Broker(config)
        await broker.start()
        await broker.stop()

    with caplog.at_level("WARNING", logger="core.server.broker"):
        asyncio.run(start_and_stop())
    warnings = [r.getMessage() for r in caplog.records if "super.users names" in r.getMessage()]
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert "User:ANONYMOUS" in warnings[0] and "internal topics" in warnings[0]
