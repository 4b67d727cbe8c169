"""SASL mechanisms: PLAIN and SCRAM checked against RFC test vectors and wrong inputs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

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


def test_scram_refuses_a_wrong_proof_and_channel_binding(monkeypatch):
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


def scram_client_final(
    mechanism: str, password: str, client_first_bare: str, server_first: str
) -> bytes:
    """The client-final message a SCRAM client sends for ``password`` (RFC 5802 3)."""
    hash_name = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}[mechanism]
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        hash_name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def scram_attempt(creds: SaslCredentials, mechanism: str, user: str, password: str):
    """One exchange: the server-first message and the final answer (or the error)."""
    server = creds.server(mechanism)
    bare = f"n={user},r=clientnonce"
    server_first = server.evaluate(f"n,,{bare}".encode()).decode()
    try:
        final: bytes | SaslAuthenticationError = server.evaluate(
            scram_client_final(mechanism, password, bare, server_first)
        )
    except SaslAuthenticationError as e:
        final = e
    return server_first, final, server


SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required user_alice="pw";'
SERVER_FIRST = re.compile(r"r=clientnonce[A-Za-z0-9_-]{32},s=(?P<salt>[A-Za-z0-9+/=]+),i=4096")


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_answers_an_unknown_user_like_a_wrong_password(mechanism):
    creds = SaslCredentials.from_jaas({mechanism: SCRAM_JAAS})

    ok_first, ok_final, ok_server = scram_attempt(creds, mechanism, "alice", "pw")
    assert isinstance(ok_final, bytes) and ok_final.startswith(b"v=")
    assert ok_server.complete and ok_server.user == "alice"

    wrong_first, wrong, _ = scram_attempt(creds, mechanism, "alice", "not-pw")
    unknown_first, unknown, unknown_server = scram_attempt(creds, mechanism, "mallory", "pw")
    again_first, _, _ = scram_attempt(creds, mechanism, "mallory", "other")
    other_first, _, _ = scram_attempt(creds, mechanism, "trudy", "pw")

    # The challenge has a real one's shape: 32-byte salt, Kafka's 4096 iterations.
    for first in (ok_first, wrong_first, unknown_first, again_first, other_first):
        match = SERVER_FIRST.fullmatch(first)
        assert match is not None, first
        assert len(base64.b64decode(match["salt"])) == 32
    salt = {
        first: SERVER_FIRST.fullmatch(first)["salt"]
        for first in (ok_first, wrong_first, unknown_first, again_first, other_first)
    }
    # Stable per name, as a real user's salt is, and different between names.
    assert salt[ok_first] == salt[wrong_first]
    assert salt[unknown_first] == salt[again_first]
    assert len({salt[ok_first], salt[unknown_first], salt[other_first]}) == 3

    # Both fail at the final message with the same error: Kafka's SCRAM failure message.
    assert isinstance(wrong, SaslAuthenticationError)
    assert isinstance(unknown, SaslAuthenticationError)
    assert (
        (wrong.error_code, str(wrong))
        == (unknown.error_code, str(unknown))
        == (
            58,
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}",
        )
    )
    assert not unknown_server.complete


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_the_broker_log_tells_the_operator_which_failure_it_was(mechanism, caplog):
    """The client hears the same answer for both; the operator reads the reason at DEBUG,
    and never the password."""
    creds = SaslCredentials.from_jaas({mechanism: SCRAM_JAAS})
    with caplog.at_level("DEBUG", logger="core.server.sasl"):
        scram_attempt(creds, mechanism, "alice", "not-pw")
        scram_attempt(creds, mechanism, "mallory", "pw")
        for token in (b"\0alice\0not-pw", b"\0bob\0pw"):
            with pytest.raises(SaslAuthenticationError):
                PlainSaslServer({"alice": "pw"}).evaluate(token)
    messages = [r.getMessage() for r in caplog.records if r.name == "core.server.sasl"]
    assert messages == [
        f"{mechanism}: wrong password",
        f"{mechanism}: unknown user",
        "PLAIN: wrong password",
        "PLAIN: unknown user",
    ]
    assert not any("pw" in m for m in messages)


def test_scram_fake_salts_depend_on_a_secret_of_the_broker():
    one = SaslCredentials.from_jaas({SCRAM_SHA_256: SCRAM_JAAS})
    two = SaslCredentials.from_jaas({SCRAM_SHA_256: SCRAM_JAAS})
    first_one, _, _ = scram_attempt(one, SCRAM_SHA_256, "mallory", "pw")
    first_two, _, _ = scram_attempt(two, SCRAM_SHA_256, "mallory", "pw")
    salt_one = SERVER_FIRST.fullmatch(first_one)["salt"]
    assert salt_one != SERVER_FIRST.fullmatch(first_two)["salt"]
    # Neither the name alone nor the name under a well-known key gives it.
    for guess in (
        hashlib.sha256(b"mallory").digest(),
        hmac.digest(b"", b"mallory", "sha256"),
    ):
        assert base64.b64encode(guess).decode() != salt_one
    assert repr(one.unknown_user_secret) not in repr(one)


def test_a_proof_for_an_unknown_user_never_completes(monkeypatch):
    creds = SaslCredentials.from_jaas({SCRAM_SHA_256: SCRAM_JAAS})
    server = creds.server(SCRAM_SHA_256)
    first = server.evaluate(b"n,,n=mallory,r=nonce").decode()
    nonce = dict(item.split("=", 1) for item in first.split(","))["r"]
    # As if a client had found a proof matching the fake stored key (a hash preimage): the
    # exchange is still refused, the user does not exist.
    monkeypatch.setattr(sasl.hmac, "compare_digest", lambda a, b: True)
    proof = base64.b64encode(b"k" * 32).decode()
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(f"c=biws,r={nonce},p={proof}".encode())
    assert not server.complete
