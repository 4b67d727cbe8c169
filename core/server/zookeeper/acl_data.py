"""ACLs in ZooKeeper as Kafka's ZooKeeper mode keeps them (Kafka's ZkAclStore, AclEntry,
ZkAclChangeStore).

One znode per resource pattern holds all of its ACLs:

==============================================  =========================================
``/kafka-acl/<Type>/<name>``                    the LITERAL patterns (``Type``: ``Topic``,
                                                ``Group``, ``Cluster``, ``TransactionalId``,
                                                ``DelegationToken``, ``User``)
``/kafka-acl-extended/prefixed/<Type>/<name>``  the PREFIXED patterns
==============================================  =========================================

with ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
"operation":"Read","host":"*"}, ...]}``. A change to a LITERAL pattern is announced by a
sequential ``/kafka-acl-changes/acl_changes_<seq>`` whose data is ``TOPIC:<name>`` (the
resource type's enum name, a colon, the name); a change to a PREFIXED one by
``/kafka-acl-extended-changes/acl_changes_<seq>`` with ``{"version":1,"resourceType":"TOPIC",
"name":"<name>","patternType":"PREFIXED"}``. Readers take type names in any case, as Kafka's
``fromString`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.server.authorizer import AclBinding, Operation, PatternType, Permission, ResourceType
from core.server.zookeeper import json_format
from core.server.zookeeper.errors import ZkDataError

LITERAL_ACLS = "/kafka-acl"
EXTENDED_ACLS = "/kafka-acl-extended"
PREFIXED_ACLS = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
ACL_VERSION = 1
STORE_ROOTS = {PatternType.LITERAL: LITERAL_ACLS, PatternType.PREFIXED: PREFIXED_ACLS}
CHANGE_PATHS = {PatternType.LITERAL: LITERAL_CHANGES, PatternType.PREFIXED: EXTENDED_CHANGES}

# Kafka's SecurityUtils names: CamelCase of the enum names.
_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
_TYPES_BY_FOLDED = {k.name.replace("_", "").lower(): k for k in _TYPE_NAMES}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _from_name(cls: type, text: str, what: str):  # type: ignore[no-untyped-def]
    """An enum member from Kafka's CamelCase or upper-case name (``ClusterAction``,
    ``CLUSTER_ACTION``), case-insensitively."""
    folded = text.replace("_", "").lower()
    for member in cls:
        if member.name.replace("_", "").lower() == folded:
            return member
    raise ZkDataError(f"{what}: unknown {cls.__name__} {text!r}")


@dataclass(frozen=True, slots=True)
class AclResource:
    """A resource pattern: what one ACL znode holds the ACLs of."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    @classmethod
    def of(cls, acl: AclBinding) -> AclResource:
        return cls(acl.resource_type, acl.resource_name, acl.pattern_type)

    @property
    def path(self) -> str:
        return f"{STORE_ROOTS[self.pattern_type]}/{_TYPE_NAMES[self.resource_type]}/{self.name}"

    @property
    def change_path(self) -> str:
        return CHANGE_PATHS[self.pattern_type]


def type_folder(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{STORE_ROOTS[pattern_type]}/{_TYPE_NAMES[resource_type]}"


def resource_type_of_folder(name: str) -> ResourceType | None:
    """The resource type a ``/kafka-acl`` child names (None for one Kafka does not know)."""
    return _TYPES_BY_FOLDED.get(name.lower())


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL of a resource (Kafka's AclEntry)."""

    principal: str
    permission: Permission
    host: str
    operation: Operation

    def binding(self, resource: AclResource) -> AclBinding:
        return AclBinding(
            resource.resource_type,
            resource.name,
            resource.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission,
        )

    @classmethod
    def of(cls, acl: AclBinding) -> AclEntry:
        return cls(acl.principal, acl.permission, acl.host, acl.operation)


def encode_acls(entries: Iterable[AclEntry]) -> bytes:
    ordered = sorted(entries, key=lambda e: (e.principal, e.permission, e.host, e.operation))
    return json_format.dumps(
        {
            "version": ACL_VERSION,
            "acls": [
                {
                    "principal": e.principal,
                    "permissionType": _camel(e.permission.name),
                    "operation": _camel(e.operation.name),
                    "host": e.host,
                }
                for e in ordered
            ],
        }
    )


def decode_acls(data: bytes | None, what: str) -> frozenset[AclEntry]:
    """Raises ZkDataError: not Kafka's ACL JSON (a null znode holds no ACL, as in Kafka)."""
    if not data:
        return frozenset()
    obj = json_format.loads_object(data, what)
    if json_format.field(obj, "version", int, what) != ACL_VERSION:
        raise ZkDataError(f"{what}: unsupported ACL version {obj['version']!r}")
    rows = obj.get("acls")
    if not isinstance(rows, list):
        raise ZkDataError(f"{what}: 'acls' is not a list")
    entries = set()
    for row in rows:
        if not isinstance(row, dict):
            raise ZkDataError(f"{what}: an ACL is not an object: {row!r}")
        entries.add(
            AclEntry(
                json_format.field(row, "principal", str, what),
                _from_name(Permission, json_format.field(row, "permissionType", str, what), what),
                json_format.field(row, "host", str, what),
                _from_name(Operation, json_format.field(row, "operation", str, what), what),
            )
        )
    return frozenset(entries)


def encode_change(resource: AclResource) -> bytes:
    if resource.pattern_type == PatternType.LITERAL:
        return f"{resource.resource_type.name}:{resource.name}".encode()
    return json_format.dumps(
        {
            "version": ACL_VERSION,
            "resourceType": resource.resource_type.name,
            "name": resource.name,
            "patternType": resource.pattern_type.name,
        }
    )


def decode_change(pattern_type: PatternType, data: bytes | None) -> AclResource:
    """The resource a notification of ``pattern_type``'s change path names.

    Raises:
        ZkDataError: not Kafka's notification format.
    """
    what = "ACL change notification"
    if pattern_type == PatternType.LITERAL:
        text = (data or b"").decode("utf-8", errors="replace")
        if ":" not in text:
            raise ZkDataError(f"{what}: expected ResourceType:name, found {text!r}")
        type_name, name = text.split(":", 1)
        return AclResource(_from_name(ResourceType, type_name, what), name, PatternType.LITERAL)
    obj = json_format.loads_object(data, what)
    if json_format.field(obj, "version", int, what) > ACL_VERSION:
        raise ZkDataError(f"{what}: unsupported version {obj['version']!r}")
    return AclResource(
        _from_name(ResourceType, json_format.field(obj, "resourceType", str, what), what),
        json_format.field(obj, "name", str, what),
        _from_name(PatternType, json_format.field(obj, "patternType", str, what), what),
    )
