"""ACLs: who may do what to which topic, group or the cluster (Kafka's AclAuthorizer rules).

Enabled with ``authorizer.class.name`` (Kafka's ``StandardAuthorizer`` name, or this class's
dotted path); without it every request is allowed, as in Kafka. ACL bindings are created,
listed and deleted with the CreateAcls / DescribeAcls / DeleteAcls APIs (``kafka-acls``,
AdminClient ``create_acls``). A broker running alone keeps them in
``<first log dir>/tierlog-acls.json``, written atomically (``AclAuthorizer``); the brokers of a
cluster keep them in ZooKeeper, as Kafka's ZooKeeper mode does
(``core.server.zk_authorizer.ZkAclAuthorizer``). Both decide from ACLs held in memory
(``Authorizer``), so a decision never waits for a disk or ZooKeeper.

A request by ``principal`` from ``host`` to perform ``operation`` on a resource is decided as
Kafka decides it:

1. a principal in ``super.users`` is allowed;
2. the ACLs *of the resource* are those whose pattern matches its name: LITERAL equal or
   ``*``, PREFIXED a prefix of it;
3. none at all: allowed only if ``allow.everyone.if.no.acl.found`` (default false);
4. a DENY ACL matching the principal (or ``User:*``), the host (or ``*``) and the operation
   (or ALL) denies;
5. an ALLOW ACL matching them allows, where READ, WRITE, DELETE and ALTER also allow
   DESCRIBE, and ALTER_CONFIGS allows DESCRIBE_CONFIGS; otherwise denied.

Enum values are Kafka's wire bytes (AclOperation, ResourceType, PatternType,
AclPermissionType).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from core.errors import CoreError
from core.fs import atomic_write

log = logging.getLogger(__name__)

ACL_FILE = "tierlog-acls.json"
KAFKA_AUTHORIZER_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "core.server.authorizer.AclAuthorizer",
)
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Operations that also grant DESCRIBE / DESCRIBE_CONFIGS (Kafka's implied operations).
_IMPLIES = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}


class TopicAuthorizationError(CoreError):
    """TOPIC_AUTHORIZATION_FAILED."""

    error_code = 29


class ClusterAuthorizationError(CoreError):
    """CLUSTER_AUTHORIZATION_FAILED."""

    error_code = 31


class InvalidAclError(CoreError):
    """INVALID_REQUEST: an ACL binding or filter that cannot be stored or used."""

    error_code = 42


class AclStoreError(CoreError):
    """UNKNOWN_SERVER_ERROR: the ACLs could not be stored (ZooKeeper refused the change)."""

    error_code = -1


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry.

    Raises:
        InvalidAclError: a filter-only value (ANY, MATCH, UNKNOWN) or a malformed field.
    """

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAclError(f"resource type {self.resource_type.name} is a filter value")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"pattern type {self.pattern_type.name} is a filter value")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise InvalidAclError(f"operation {self.operation.name} is a filter value")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAclError(f"permission {self.permission.name} is a filter value")
        if not self.resource_name:
            raise InvalidAclError("an ACL needs a resource name")
        if ":" not in self.principal:
            raise InvalidAclError(f"principal {self.principal!r} is not TYPE:NAME")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAclError(f"the cluster resource is named {CLUSTER_NAME}")

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter: None or ANY fields match everything."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation not in (Operation.ANY, acl.operation):
            return False
        return self.permission in (Permission.ANY, acl.permission)

    def _pattern_matches(self, acl: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            # MATCH: the ACLs that would apply to the named resource.
            return self.resource_name is None or acl.matches_resource(
                acl.resource_type, self.resource_name
            )
        if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
            return False
        return self.resource_name is None or acl.resource_name == self.resource_name


class Authorizer:
    """Kafka's decisions over the ACLs held in memory. Thread-safe.

    Subclasses keep the ACLs somewhere durable and implement ``create_acls`` and
    ``delete_acls``.

    Args:
        super_users: principals allowed everything (``super.users``).
        allow_if_no_acl: ``allow.everyone.if.no.acl.found``.
    """

    def __init__(self, super_users: Iterable[str] = (), *, allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._lock = threading.Lock()
        self._acls: list[AclBinding] = []

    # -- decisions ---------------------------------------------------------------------
    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Kafka's decision (see the module docstring)."""
        if principal in self.super_users:
            return True
        with self._lock:
            acls = [a for a in self._acls if a.matches_resource(resource_type, name)]
        if not acls:
            return self.allow_if_no_acl
        applying = [a for a in acls if _applies(a, principal, host)]
        if any(
            a.permission == Permission.DENY and a.operation in (operation, Operation.ALL)
            for a in applying
        ):
            return False
        granting = {operation, Operation.ALL} | _IMPLIES.get(operation, set())
        return any(a.permission == Permission.ALLOW and a.operation in granting for a in applying)

    def describe(self, acl_filter: AclFilter) -> list[AclBinding]:
        with self._lock:
            return [a for a in self._acls if acl_filter.matches(a)]

    # -- the ACL APIs --------------------------------------------------------------------
    def check_storable(self, acl: AclBinding) -> None:
        """Raises InvalidAclError: this store cannot keep ``acl`` (any binding fits a file)."""

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        """Add bindings (already present ones are kept once), durably before returning.

        Raises:
            AclStoreError: the store refused the change.
        """
        raise NotImplementedError

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding matching each filter; returns what each filter removed.

        Raises:
            AclStoreError: the store refused the change.
        """
        raise NotImplementedError


class AclAuthorizer(Authorizer):
    """The ACLs of a broker running alone, in ``<directory>/tierlog-acls.json``.

    Args:
        directory: where ``tierlog-acls.json`` lives.
        super_users: principals allowed everything (``super.users``).
        allow_if_no_acl: ``allow.everyone.if.no.acl.found``.
    """

    def __init__(
        self, directory: Path, super_users: Iterable[str] = (), *, allow_if_no_acl: bool = False
    ) -> None:
        super().__init__(super_users, allow_if_no_acl=allow_if_no_acl)
        self.path = Path(directory) / ACL_FILE
        self._acls = self._load()

    def _load(self) -> list[AclBinding]:
        try:
            rows = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        return [
            AclBinding(
                ResourceType[r["resource_type"]],
                r["resource_name"],
                PatternType[r["pattern_type"]],
                r["principal"],
                r["host"],
                Operation[r["operation"]],
                Permission[r["permission"]],
            )
            for r in rows
        ]

    def _save(self) -> None:
        rows = [
            {k: (v.name if isinstance(v, enum.Enum) else v) for k, v in asdict(acl).items()}
            for acl in self._acls
        ]
        atomic_write(self.path, json.dumps(rows, indent=1).encode())

    def create(self, acls: Iterable[AclBinding]) -> None:
        """Add bindings (already present ones are kept once); persisted before returning."""
        with self._lock:
            for acl in acls:
                if acl not in self._acls:
                    self._acls.append(acl)
            self._save()

    def delete(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding matching each filter; returns what each filter removed."""
        out = []
        with self._lock:
            for acl_filter in filters:
                gone = [a for a in self._acls if acl_filter.matches(a)]
                self._acls = [a for a in self._acls if a not in gone]
                out.append(gone)
            self._save()
        return out

    # The file write is blocking I/O: off the event loop.
    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.create, list(acls))

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        return await asyncio.get_running_loop().run_in_executor(None, self.delete, list(filters))


def _applies(acl: AclBinding, principal: str, host: str) -> bool:
    return acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD)
