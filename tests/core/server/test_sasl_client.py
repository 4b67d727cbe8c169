"""The client side of SASL: RFC 7677's SCRAM-SHA-256 example byte for byte, exchanges with
tierlog's own servers, and the server answers a client must refuse."""

from __future__ import annotations

import pytest

from core.server.sasl import (
    PlainSaslServer,
    SaslAuthenticationError,
    ScramCredential,
    ScramSaslServer,
)
from core.server.sasl_client import SaslClientCredentials, ScramSaslClient

# RFC 7677 section 3: user "user", password "pencil".
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_client() -> ScramSaslClient:
    return ScramSaslClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)


def test_scram_sha_256_matches_rfc_7677s_example():
    client = rfc_client()
    assert client.initial() == b"n,,n=user,r=" + RFC_NONCE.encode()
    assert client.evaluate(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.complete
    assert client.evaluate(RFC_SERVER_FINAL) is None
    assert client.complete


@pytest.mark.parametrize(
    ("server_first", "server_final", "match"),
    [
        # the server does not know the password: its signature differs
        (RFC_SERVER_FIRST, b"v=" + b"A" * 44, "signature does not match"),
        # the server's nonce does not extend the client's
        (RFC_SERVER_FIRST.replace(b"rOpr", b"xOpr"), None, "nonce"),
        # fewer iterations than Kafka's minimum
        (RFC_SERVER_FIRST.replace(b"i=4096", b"i=1000"), None, "1000 iterations"),
        # an error attribute instead of a signature
        (RFC_SERVER_FIRST, b"e=invalid-proof", "invalid-proof"),
    ],
    ids=["wrong-signature", "foreign-nonce", "few-iterations", "server-error"],
)
def test_a_server_that_cannot_prove_itself_is_refused(server_first, server_final, match):
    client = rfc_client()
    client.initial()
    with pytest.raises(SaslAuthenticationError, match=match):
        client.evaluate(server_first)
        client.evaluate(server_final)
    assert not client.complete


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["broker", "a,b=c"])  # RFC 5802 escapes ',' and '='
def test_scram_client_and_tierlogs_server_agree(mechanism, user):
    server = ScramSaslServer(mechanism, {user: ScramCredential.from_password(mechanism, "pw")})
    client = SaslClientCredentials(mechanism, user, "pw").client()
    token = client.initial()
    while token is not None:
        token = client.evaluate(server.evaluate(token))
    assert client.complete and server.complete and server.user == user


def test_a_wrong_scram_password_is_refused_by_the_server():
    server = ScramSaslServer(
        "SCRAM-SHA-512", {"broker": ScramCredential.from_password("SCRAM-SHA-512", "pw")}
    )
    client = SaslClientCredentials("SCRAM-SHA-512", "broker", "other").client()
    final = client.evaluate(server.evaluate(client.initial()))
    assert final is not None
    refused = "invalid credentials with SASL mechanism SCRAM-SHA-512"
    with pytest.raises(SaslAuthenticationError, match=refused):
        server.evaluate(final)


def test_plain_sends_one_message_the_server_accepts():
    server = PlainSaslServer({"broker": "pw"})
    client = SaslClientCredentials("PLAIN", "broker", "pw").client()
    assert client.initial() == b"\0broker\0pw"
    assert client.evaluate(server.evaluate(client.initial())) is None
    assert client.complete and server.user == "broker"


def test_credentials_never_show_the_password():
    assert "pw-secret" not in repr(SaslClientCredentials("PLAIN", "broker", "pw-secret"))
