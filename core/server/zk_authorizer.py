"""The ACLs of a cluster, in ZooKeeper (Kafka's AclAuthorizer in ZooKeeper mode).

Every broker holds all ACLs in memory and decides from them (``Authorizer``). CreateAcls and
DeleteAcls, on any broker, change the resource's znode (``core.server.zookeeper.acl_data``)
with a conditional write on the version read (read, merge, write; a BADVERSION or NODEEXISTS
from a concurrent writer starts again), delete it when no ACL is left, then create a change
notification naming the resource. Every broker watches both notification parents; for each
notification newer than the last it handled it reads that resource's znode again and
replaces the resource's ACLs in memory, so a grant on one broker is enforced by all of them
(the writer updates its own copy at once). A broker starting loads every ACL first.
Notifications older than 15 minutes are deleted, as Kafka's listener deletes them.

If ZooKeeper is away, decisions go on from the ACLs in memory and CreateAcls / DeleteAcls
wait for it (the ZooKeeper client retries until connected), as in Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from core.clock import now_ms
from core.server.authorizer import (
    AclBinding,
    AclFilter,
    AclStoreError,
    Authorizer,
    InvalidAclError,
    PatternType,
)
from core.server.zookeeper import paths
from core.server.zookeeper.acl_data import (
    CHANGE_PATHS,
    CHANGE_PREFIX,
    STORE_ROOTS,
    AclEntry,
    AclResource,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
    resource_type_of_folder,
    type_folder,
)
from core.server.zookeeper.client import ZooKeeperClient
from core.server.zookeeper.errors import (
    ZkBadVersionError,
    ZkDataError,
    ZkError,
    ZkNodeExistsError,
    ZkNoNodeError,
)
from core.server.zookeeper.watch import ZkWatch

log = logging.getLogger(__name__)

# Kafka's ZkNodeChangeNotificationListener.changeExpirationMs.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


def _sequence(name: str) -> str:
    return paths.sequence_number(name, CHANGE_PREFIX)


class ZkAclAuthorizer(Authorizer):
    """ACLs shared by the brokers of a cluster through ZooKeeper.

    Call ``start()`` before the first decision (it loads every ACL and starts following
    the change notifications) and ``stop()`` at shutdown.
    """

    def __init__(
        self,
        zookeeper: ZooKeeperClient,
        super_users: Iterable[str] = (),
        *,
        allow_if_no_acl: bool = False,
    ) -> None:
        super().__init__(super_users, allow_if_no_acl=allow_if_no_acl)
        self._zk = zookeeper
        self._last: dict[PatternType, str] = {}
        self._watches: list[ZkWatch] = []
        self._notes_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        for path in (*STORE_ROOTS.values(), *CHANGE_PATHS.values()):
            await self._zk.ensure_path(path)
        # The newest notification before the load: anything after it is read again (a
        # reload of a resource is idempotent), nothing is missed.
        for pattern, parent in CHANGE_PATHS.items():
            names = await self._notification_names(parent)
            self._last[pattern] = max((_sequence(n) for n in names), default="")
        await self.load_all()
        for pattern, parent in CHANGE_PATHS.items():
            self._watches.append(await self._zk.watch_children(parent, self._on_changes(pattern)))

    def stop(self) -> None:
        for watch in self._watches:
            watch.cancel()
        self._watches.clear()

    async def load_all(self) -> None:
        """Replace the ACLs in memory by every ACL ZooKeeper holds."""
        acls: list[AclBinding] = []
        for pattern, root in STORE_ROOTS.items():
            for folder in await self._children(root):
                resource_type = resource_type_of_folder(folder)
                if resource_type is None:
                    log.warning("ACLs of an unknown resource type %s/%s ignored", root, folder)
                    continue
                names = await self._children(type_folder(pattern, resource_type))
                for name in names:
                    resource = AclResource(resource_type, name, pattern)
                    try:
                        entries, _ = await self._read(resource)
                    except ZkDataError as e:
                        # Kafka's reader fails on it too; one bad znode must not stop a broker.
                        log.error("unreadable ACLs ignored: %s", e)
                        continue
                    acls.extend(e.binding(resource) for e in entries)
        with self._lock:
            self._acls = acls

    # -- the ACL APIs ----------------------------------------------------------------------
    def check_storable(self, acl: AclBinding) -> None:
        """Raises InvalidAclError: the name cannot be one znode name."""
        if "/" in acl.resource_name or acl.resource_name in (".", ".."):
            raise InvalidAclError(
                f"resource name {acl.resource_name!r} cannot be stored in ZooKeeper"
            )

    async def create_acls(self, acls: Iterable[AclBinding]) -> None:
        grouped: dict[AclResource, set[AclEntry]] = {}
        for acl in acls:
            self.check_storable(acl)
            grouped.setdefault(AclResource.of(acl), set()).add(AclEntry.of(acl))
        async with self._write_lock:
            for resource, added in grouped.items():
                await self._update(resource, lambda current, a=added: current | a)

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        filters = list(filters)
        out: list[list[AclBinding]] = [[] for _ in filters]
        async with self._write_lock:
            # The resources any filter may touch, from the ACLs in memory (Kafka's way too).
            with self._lock:
                resources = {
                    AclResource.of(a) for a in self._acls if any(f.matches(a) for f in filters)
                }
            for resource in resources:
                removed: dict[int, list[AclBinding]] = {}

                def without(
                    current: frozenset[AclEntry],
                    resource: AclResource = resource,
                    removed: dict[int, list[AclBinding]] = removed,
                ) -> frozenset[AclEntry]:
                    removed.clear()
                    keep = set(current)
                    for index, acl_filter in enumerate(filters):
                        for entry in current:
                            binding = entry.binding(resource)
                            if acl_filter.matches(binding):
                                removed.setdefault(index, []).append(binding)
                                keep.discard(entry)
                    return frozenset(keep)

                await self._update(resource, without)
                for index, bindings in removed.items():
                    out[index].extend(bindings)
        return out

    async def _update(self, resource: AclResource, change) -> None:  # type: ignore[no-untyped-def]
        """Read, change, conditionally write ``resource``'s znode until no writer raced;
        then announce the change and apply it here."""
        try:
            while True:
                current, version = await self._read(resource)
                wanted = frozenset(change(current))
                if wanted == current:
                    self._replace(resource, current)
                    return
                try:
                    if not wanted:
                        await self._zk.delete(resource.path, version)
                    elif version < 0:
                        await self._zk.create_recursive(resource.path, encode_acls(wanted))
                    else:
                        await self._zk.set(resource.path, encode_acls(wanted), version)
                except (ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError):
                    log.debug("concurrent ACL change of %s; reading it again", resource.path)
                    continue
                break
            await self._announce(resource)
        except ZkError as e:
            raise AclStoreError(f"cannot store the ACLs of {resource.path}: {e}") from e
        self._replace(resource, wanted)

    async def _announce(self, resource: AclResource) -> None:
        parent = resource.change_path
        path = f"{parent}/{CHANGE_PREFIX}"
        data = encode_change(resource)
        try:
            await self._zk.create(path, data, sequential=True)
        except ZkNoNodeError:
            await self._zk.ensure_path(parent)
            await self._zk.create(path, data, sequential=True)

    # -- notifications ---------------------------------------------------------------------
    def _on_changes(self, pattern: PatternType):  # type: ignore[no-untyped-def]
        async def on_children(children: list[str]) -> None:
            await self.process_notifications(pattern, children)

        return on_children

    async def process_notifications(
        self, pattern: PatternType, children: list[str] | None = None
    ) -> None:
        """Reload the resources named by the notifications newer than the last handled."""
        parent = CHANGE_PATHS[pattern]
        async with self._notes_lock:
            if children is None:
                children = await self._notification_names(parent)
            fresh = sorted((n for n in children if n.startswith(CHANGE_PREFIX)), key=_sequence)
            for name in fresh:
                if _sequence(name) <= self._last.get(pattern, ""):
                    continue
                try:
                    node = await self._zk.get(f"{parent}/{name}")
                except ZkNoNodeError:
                    continue
                self._last[pattern] = _sequence(name)
                if now_ms() - node.stat.ctime_ms > CHANGE_EXPIRATION_MS:
                    with contextlib.suppress(ZkError):
                        await self._zk.delete(f"{parent}/{name}")
                try:
                    resource = decode_change(pattern, node.data)
                    entries, _ = await self._read(resource)
                except ZkError as e:
                    log.warning("ACL change notification %s/%s not applied: %s", parent, name, e)
                    continue
                self._replace(resource, entries)

    # -- helpers ---------------------------------------------------------------------------
    async def _notification_names(self, parent: str) -> list[str]:
        return [n for n in await self._children(parent) if n.startswith(CHANGE_PREFIX)]

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._zk.get_children(path)
        except ZkNoNodeError:
            return []

    async def _read(self, resource: AclResource) -> tuple[frozenset[AclEntry], int]:
        """The resource's ACLs and znode version (-1: no znode)."""
        try:
            node = await self._zk.get(resource.path)
        except ZkNoNodeError:
            return frozenset(), -1
        return decode_acls(node.data, resource.path), node.stat.version

    def _replace(self, resource: AclResource, entries: Iterable[AclEntry]) -> None:
        bindings = [e.binding(resource) for e in entries]
        with self._lock:
            self._acls = [a for a in self._acls if AclResource.of(a) != resource] + bindings
