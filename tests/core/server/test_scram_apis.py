"""AlterUserScramCredentials and DescribeUserScramCredentials: Kafka's rules and errors, the
durable store, and the SCRAM server seeing a change at its next exchange."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from core.server.api_keys import ApiKey
from core.server.authorizer import AclAuthorizer
from core.server.broker import listeners_security
from core.server.config import load_broker_config
from core.server.sasl import SCRAM_SHA_256, SCRAM_SHA_512, SaslCredentials, ScramCredential
from core.server.scram_credentials import (
    CREDENTIALS_FILE,
    LocalScramCredentialStore,
    ScramCredentialCache,
    ScramCredentialStoreError,
)
from core.server.zookeeper.topic_data import decode_config, decode_scram_credential

from .fake_broker import FakeBroker, call, schema
from .test_sasl import scram_attempt

SHA_256, SHA_512 = 1, 2  # Kafka's ScramMechanism type bytes
JAAS_NO_ACCOUNTS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path)
    yield b
    b.close()


def upsertion(name: str, password: str, mechanism: int = SHA_256, iterations: int = 8192):
    """What a client sends: its own salt and Hi(password, salt, iterations)."""
    hash_name = "sha256" if mechanism != SHA_512 else "sha512"
    salt = secrets.token_bytes(24)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, max(iterations, 1))
    s = schema(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
    return s.ScramCredentialUpsertion(
        name=name,
        mechanism=i8(mechanism),
        iterations=i32(iterations),
        salt=salt,
        salted_password=salted,
    )


def deletion(name: str, mechanism: int = SHA_256):
    s = schema(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
    return s.ScramCredentialDeletion(name=name, mechanism=i8(mechanism))


def alter(broker: FakeBroker, *changes: Any) -> dict[str, tuple[ErrorCode, str | None]]:
    s = schema(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
    request = s.AlterUserScramCredentialsRequest(
        upsertions=tuple(c for c in changes if hasattr(c, "salt")),
        deletions=tuple(c for c in changes if not hasattr(c, "salt")),
    )
    response = call(broker, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request)
    answers = {r.user: (r.error_code, r.error_message) for r in response.results}
    assert len(answers) == len(response.results)  # one result per user
    return answers


def describe(broker: FakeBroker, *users: str, null: bool = False) -> Any:
    s = schema(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
    wanted = None if null else tuple(s.UserName(name=u) for u in users)
    request = s.DescribeUserScramCredentialsRequest(users=wanted)
    return call(broker, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, request)


def described(response: Any) -> dict[str, Any]:
    assert response.error_code == ErrorCode.none
    return {
        r.user: (
            r.error_code
            if r.error_code != ErrorCode.none
            else [(c.mechanism, c.iterations) for c in r.credential_infos]
        )
        for r in response.results
    }


def login(broker: FakeBroker, mechanism: str, user: str, password: str, jaas: str) -> bool:
    """A SCRAM exchange with a listener's server, as the broker builds it."""
    credentials = SaslCredentials.from_jaas({mechanism: jaas}, broker.scram_cache)
    _, final, server = scram_attempt(credentials, mechanism, user, password)
    return isinstance(final, bytes) and server.complete


def test_an_upserted_credential_is_described_and_authenticates_at_once(broker) -> None:
    assert alter(broker, upsertion("alice", "alice-pw"), upsertion("bob", "b", SHA_512, 4096)) == {
        "alice": (ErrorCode.none, None),
        "bob": (ErrorCode.none, None),
    }
    assert described(describe(broker, null=True)) == {
        "alice": [(SHA_256, 8192)],
        "bob": [(SHA_512, 4096)],
    }
    assert described(describe(broker)) == described(describe(broker, null=True))  # empty: all
    assert login(broker, SCRAM_SHA_256, "alice", "alice-pw", JAAS_NO_ACCOUNTS)
    assert not login(broker, SCRAM_SHA_256, "alice", "wrong", JAAS_NO_ACCOUNTS)
    assert not login(broker, SCRAM_SHA_512, "alice", "alice-pw", JAAS_NO_ACCOUNTS)
    assert login(broker, SCRAM_SHA_512, "bob", "b", JAAS_NO_ACCOUNTS)
    # A new password replaces the old one.
    assert alter(broker, upsertion("alice", "new-pw", iterations=4096))["alice"][0] == 0
    assert not login(broker, SCRAM_SHA_256, "alice", "alice-pw", JAAS_NO_ACCOUNTS)
    assert login(broker, SCRAM_SHA_256, "alice", "new-pw", JAAS_NO_ACCOUNTS)


def test_a_deleted_credential_no_longer_authenticates(broker) -> None:
    alter(broker, upsertion("alice", "pw"), upsertion("alice", "pw", SHA_512))
    assert alter(broker, deletion("alice")) == {"alice": (ErrorCode.none, None)}
    assert not login(broker, SCRAM_SHA_256, "alice", "pw", JAAS_NO_ACCOUNTS)
    assert login(broker, SCRAM_SHA_512, "alice", "pw", JAAS_NO_ACCOUNTS)
    assert described(describe(broker, "alice")) == {"alice": [(SHA_512, 8192)]}
    alter(broker, deletion("alice", SHA_512))
    assert described(describe(broker, "alice")) == {"alice": ErrorCode.resource_not_found}
    assert described(describe(broker, null=True)) == {}


def test_a_runtime_credential_wins_over_a_jaas_account_until_deleted(broker) -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required user_carol="jaas";'
    assert login(broker, SCRAM_SHA_256, "carol", "jaas", jaas)
    alter(broker, upsertion("carol", "runtime"))
    assert login(broker, SCRAM_SHA_256, "carol", "runtime", jaas)
    assert not login(broker, SCRAM_SHA_256, "carol", "jaas", jaas)
    alter(broker, deletion("carol"))
    assert login(broker, SCRAM_SHA_256, "carol", "jaas", jaas)
    # JAAS accounts are configuration: neither listed nor deletable here.
    assert described(describe(broker, "carol")) == {"carol": ErrorCode.resource_not_found}
    assert alter(broker, deletion("carol"))["carol"][0] == ErrorCode.resource_not_found


def test_malformed_alterations_fail_their_user_only(broker) -> None:
    answers = alter(
        broker,
        upsertion("", "pw"),
        upsertion("few", "pw", iterations=4095),
        upsertion("many", "pw", iterations=16385),
        upsertion("mech", "pw", mechanism=3),
        deletion("mech-del", mechanism=0),
        upsertion("dup", "pw"),
        deletion("dup"),
        deletion("absent"),
        upsertion("fine", "pw", iterations=16384),
    )
    assert answers == {
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "few": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "many": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "mech": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "mech-del": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "dup": (
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        ),
        "absent": (
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        ),
        "fine": (ErrorCode.none, None),
    }
    assert described(describe(broker, null=True)) == {"fine": [(SHA_256, 16384)]}


def test_an_empty_salt_or_salted_password_is_refused(broker) -> None:
    s = schema(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
    good = upsertion("x", "pw")
    no_salt = s.ScramCredentialUpsertion(
        name="nosalt", mechanism=i8(1), iterations=i32(4096), salt=b"", salted_password=b"k" * 32
    )
    no_key = s.ScramCredentialUpsertion(
        name="nokey", mechanism=i8(1), iterations=i32(4096), salt=good.salt, salted_password=b""
    )
    answers = alter(broker, no_salt, no_key)
    assert {u: e for u, (e, _) in answers.items()} == {
        "nosalt": ErrorCode.unacceptable_credential,
        "nokey": ErrorCode.unacceptable_credential,
    }


def test_describe_errors(broker) -> None:
    alter(broker, upsertion("alice", "pw"))
    response = describe(broker, "alice", "nobody", "twice", "twice", "")
    assert [r.user for r in response.results] == ["alice", "nobody", "twice", ""]
    assert described(response) == {
        "alice": [(SHA_256, 8192)],
        "nobody": ErrorCode.resource_not_found,
        "twice": ErrorCode.duplicate_resource,
        "": ErrorCode.resource_not_found,
    }


def test_credentials_survive_a_restart_in_kafkas_user_config_format(broker, tmp_path) -> None:
    alter(broker, upsertion("alice", "pw"), upsertion("bob/x y", "pw2", SHA_512))
    doc = json.loads((tmp_path / CREDENTIALS_FILE).read_text())
    # Each user's entry is /config/users/<sanitized user> of Kafka's ZooKeeper mode.
    assert sorted(doc["users"]) == ["alice", "bob%2Fx%20y"]
    config = decode_config(json.dumps(doc["users"]["alice"]).encode())
    assert set(config) == {"SCRAM-SHA-256"}
    assert decode_scram_credential(config["SCRAM-SHA-256"]).iterations == 8192
    restarted = broker.restart()
    try:
        assert described(describe(restarted, null=True)) == {
            "alice": [(SHA_256, 8192)],
            "bob/x y": [(SHA_512, 8192)],
        }
        assert login(restarted, SCRAM_SHA_512, "bob/x y", "pw2", JAAS_NO_ACCOUNTS)
    finally:
        restarted.close()


def test_a_damaged_credentials_file_stops_the_broker_naming_it(tmp_path: Path) -> None:
    (tmp_path / CREDENTIALS_FILE).write_text('{"version": 1, "users": {"a": {"config": 3}}}')
    with pytest.raises(ScramCredentialStoreError, match=CREDENTIALS_FILE):
        LocalScramCredentialStore(tmp_path, ScramCredentialCache())


def test_both_apis_need_the_cluster_permission(broker) -> None:
    alter(broker, upsertion("alice", "pw"))
    broker.authorizer = AclAuthorizer(broker.directory, frozenset())
    response = describe(broker, "alice")
    assert (response.error_code, response.results) == (ErrorCode.cluster_authorization_failed, ())
    answers = alter(broker, upsertion("zed", "pw"), deletion("alice"), deletion("alice", SHA_512))
    assert answers == {
        "alice": (ErrorCode.cluster_authorization_failed, None),
        "zed": (ErrorCode.cluster_authorization_failed, None),
    }
    broker.authorizer = None
    assert described(describe(broker, null=True)) == {"alice": [(SHA_256, 8192)]}


def test_runtime_credentials_do_not_open_the_listener_that_acts_as_a_broker(tmp_path) -> None:
    """A SCRAM user anyone with ALTER on the cluster can create must not act as a broker
    (write the internal topics) on the dedicated inter-broker listener: there only the
    listener's JAAS accounts authenticate."""
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required user_kafka="b";'
    config = load_broker_config(
        None,
        {
            "log.dirs": str(tmp_path),
            "listeners": "CLIENT://127.0.0.1:0,BROKER://127.0.0.1:0",
            "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,BROKER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "BROKER",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "sasl.jaas.config": jaas.replace(";", ' username="kafka" password="b";'),
        },
    )
    cache = ScramCredentialCache()
    store = LocalScramCredentialStore(tmp_path, cache)
    store.alter({"mallory": {SCRAM_SHA_256: ScramCredential.from_password(SCRAM_SHA_256, "m")}})
    security, trust = listeners_security(config, cache)
    assert trust.broker_listener == "BROKER"

    def logs_in(listener: str, user: str, password: str) -> bool:
        sasl = security[listener].sasl
        assert sasl is not None
        _, final, server = scram_attempt(sasl, SCRAM_SHA_256, user, password)
        return isinstance(final, bytes) and server.complete

    assert logs_in("CLIENT", "mallory", "m") and logs_in("CLIENT", "kafka", "b")
    assert not logs_in("BROKER", "mallory", "m")
    assert logs_in("BROKER", "kafka", "b")
