"""SASL mechanisms: PLAIN and SCRAM checked against RFC test vectors and wrong inputs."""

from __future__ import annotations

import base64

import pytest

from core.server import sasl
from core.server.sasl import (
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    JaasConfigError,
    PlainSaslServer,
    SaslAuthenticationError,
    SaslCredentials,
    ScramCredential,
    ScramSaslServer,
    parse_jaas,
    users_from_jaas,
)

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
    '  username="admin" password="admin-secret"\n'
    '  user_admin="admin-secret" user_alice="ali\\"ce;=";'
)


def test_jaas_entries_parse_like_kafkas():
    module, options = parse_jaas(PLAIN_JAAS)
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert options["username"] == "admin" and options["user_alice"] == 'ali"ce;='
    assert users_from_jaas(PLAIN_JAAS, PLAIN) == {"admin": "admin-secret", "alice": 'ali"ce;='}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('PlainLoginModule required user_a="b"', "expected one entry"),  # no ';'
        ("org.apache.kafka.common.security.plain.PlainLoginModule maybe;", "expected one entry"),
        ("org.apache.kafka.common.security.plain.PlainLoginModule required;", "no account"),
        (
            'org.apache.kafka.common.security.scram.ScramLoginModule required user_a="b";',
            "does not serve PLAIN",
        ),
    ],
)
def test_bad_jaas_is_refused_without_echoing_it(text, reason):
    with pytest.raises(JaasConfigError, match=reason) as caught:
        users_from_jaas(text, PLAIN)
    assert '"b"' not in str(caught.value)


def test_plain_accepts_the_right_password_only():
    users = {"alice": "alice-secret"}
    server = PlainSaslServer(users)
    assert server.evaluate(b"\0alice\0alice-secret") == b""
    assert server.complete and server.user == "alice"
    for token in (b"\0alice\0wrong", b"\0bob\0alice-secret", b"alice\0alice-secret", b"\0\0x"):
        with pytest.raises(SaslAuthenticationError) as caught:
            PlainSaslServer(users).evaluate(token)
        assert "secret" not in str(caught.value)
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        PlainSaslServer(users).evaluate(b"bob\0alice\0alice-secret")


def test_scram_sha_256_matches_rfc_7677(monkeypatch):
    # RFC 7677 section 3: user "user", password "pencil".
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = ScramCredential.from_password(SCRAM_SHA_256, "pencil", salt=salt)
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server = ScramSaslServer(SCRAM_SHA_256, {"user": credential})
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.user == "user"


def test_scram_refuses_a_wrong_proof_an_unknown_user_and_channel_binding(monkeypatch):
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = ScramCredential.from_password(SCRAM_SHA_256, "not-pencil", salt=salt)
    monkeypatch.setattr(sasl.secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server = ScramSaslServer(SCRAM_SHA_256, {"user": credential})
    server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslAuthenticationError, match="Authentication failed"):
        server.evaluate(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        )
    assert not server.complete
    with pytest.raises(SaslAuthenticationError, match="Authentication failed"):
        ScramSaslServer(SCRAM_SHA_256, {"user": credential}).evaluate(b"n,,n=eve,r=abc")
    with pytest.raises(SaslAuthenticationError, match="channel binding"):
        ScramSaslServer(SCRAM_SHA_256, {"user": credential}).evaluate(b"p=tls-unique,,n=user,r=a")
    with pytest.raises(SaslAuthenticationError, match="delegation tokens"):
        ScramSaslServer(SCRAM_SHA_256, {"user": credential}).evaluate(
            b"n,,n=user,r=a,tokenauth=true"
        )


def test_credentials_serve_the_mechanisms_they_have_accounts_for():
    scram = PLAIN_JAAS.replace("plain.PlainLoginModule", "scram.ScramLoginModule")
    creds = SaslCredentials.from_jaas({PLAIN: PLAIN_JAAS, SCRAM_SHA_512: scram})
    assert creds.mechanisms == (PLAIN, SCRAM_SHA_512)
    assert isinstance(creds.server(SCRAM_SHA_512), ScramSaslServer)
    with pytest.raises(ValueError):
        creds.server(SCRAM_SHA_256)
    assert "admin-secret" not in repr(creds)
