"""AclAuthorizer: Kafka's decision rules, persistence, and the DescribeAcls/DeleteAcls filters."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.server.authorizer import (
    AclAuthorizer,
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def acl(name, principal, op, perm=ALLOW, *, rtype=TOPIC, pattern=LIT, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


@pytest.fixture
def authz(tmp_path: Path) -> AclAuthorizer:
    return AclAuthorizer(tmp_path, ["User:admin"])


def test_no_acl_on_a_resource_denies_unless_configured(tmp_path: Path, authz):
    assert not authz.authorize(ALICE, "10.0.0.1", Operation.READ, TOPIC, "orders")
    lenient = AclAuthorizer(tmp_path / "x", allow_if_no_acl=True)
    assert lenient.authorize(ALICE, "10.0.0.1", Operation.READ, TOPIC, "orders")
    assert authz.authorize("User:admin", "10.0.0.1", Operation.DELETE, TOPIC, "orders")


def test_allow_deny_implied_describe_prefixes_and_wildcards(authz):
    authz.create(
        [
            acl("orders", ALICE, Operation.WRITE),
            acl("orders", "User:*", Operation.READ),
            acl("orders", BOB, Operation.READ, DENY),
            acl("logs-", ALICE, Operation.ALL, pattern=PRE),
            acl("cfg", ALICE, Operation.ALTER_CONFIGS),
            acl("pinned", ALICE, Operation.READ, host="10.0.0.9"),
        ]
    )
    ok = authz.authorize
    assert ok(ALICE, "h", Operation.WRITE, TOPIC, "orders")
    assert ok(ALICE, "h", Operation.DESCRIBE, TOPIC, "orders")  # implied by WRITE/READ
    assert ok(ALICE, "h", Operation.READ, TOPIC, "orders")  # User:*
    assert not ok(BOB, "h", Operation.READ, TOPIC, "orders")  # DENY wins over User:*
    assert not ok(BOB, "h", Operation.WRITE, TOPIC, "orders")
    assert ok(BOB, "h", Operation.DESCRIBE, TOPIC, "orders")  # from READ for User:*
    assert ok(ALICE, "h", Operation.DELETE, TOPIC, "logs-app")  # PREFIXED, ALL
    assert not ok(ALICE, "h", Operation.DELETE, TOPIC, "log")
    assert ok(ALICE, "h", Operation.DESCRIBE_CONFIGS, TOPIC, "cfg")  # implied by ALTER_CONFIGS
    assert not ok(ALICE, "h", Operation.DESCRIBE, TOPIC, "cfg")
    assert ok(ALICE, "10.0.0.9", Operation.READ, TOPIC, "pinned")
    assert not ok(ALICE, "10.0.0.8", Operation.READ, TOPIC, "pinned")
    assert not ok(ALICE, "h", Operation.READ, GROUP, "orders")  # another resource type


def test_acls_survive_a_restart_and_filters_select_them(tmp_path: Path, authz):
    authz.create([acl("orders", ALICE, Operation.WRITE), acl("orders", BOB, Operation.READ)])
    authz.create([acl("orders", ALICE, Operation.WRITE)])  # created twice, kept once
    again = AclAuthorizer(tmp_path)
    everything = AclFilter(
        ResourceType.ANY, None, PatternType.ANY, None, None, Operation.ANY, Permission.ANY
    )
    assert len(again.describe(everything)) == 2
    only_bob = AclFilter(TOPIC, "orders", LIT, BOB, None, Operation.ANY, Permission.ANY)
    assert [a.principal for a in again.describe(only_bob)] == [BOB]
    match = AclFilter(TOPIC, "logs-x", PatternType.MATCH, None, None, Operation.ANY, Permission.ANY)
    again.create([acl("logs-", ALICE, Operation.READ, pattern=PRE)])
    assert [a.resource_name for a in again.describe(match)] == ["logs-"]
    (removed,) = again.delete([only_bob])
    assert [a.principal for a in removed] == [BOB]
    assert not AclAuthorizer(tmp_path).authorize(BOB, "h", Operation.READ, TOPIC, "orders")


@pytest.mark.parametrize(
    "fields",
    [
        (ResourceType.ANY, "t", LIT, ALICE, "*", Operation.READ, ALLOW),
        (TOPIC, "t", PatternType.MATCH, ALICE, "*", Operation.READ, ALLOW),
        (TOPIC, "t", LIT, ALICE, "*", Operation.ANY, ALLOW),
        (TOPIC, "t", LIT, ALICE, "*", Operation.READ, Permission.ANY),
        (TOPIC, "t", LIT, "alice", "*", Operation.READ, ALLOW),
        (CLUSTER, "mine", LIT, ALICE, "*", Operation.ALTER, ALLOW),
    ],
)
def test_filter_values_are_not_bindings(fields):
    with pytest.raises(InvalidAclError):
        AclBinding(*fields)
