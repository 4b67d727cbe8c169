"""The base of ``KafkaZkClient``: a ``ZooKeeperClient`` and Kafka's controller-fenced writes.

Kafka fences every controller write on the ``/controller_epoch`` znode version the
controller got when it was elected: the write goes in one transaction with a check of that
version, so a controller that lost an election it has not heard of yet cannot change
anything. ``MATCH_ANY_VERSION`` (-1) writes without the check (brokers and tools).
"""

from __future__ import annotations

import asyncio
import contextlib

from core.server.zookeeper import paths
from core.server.zookeeper.client import ZooKeeperClient
from core.server.zookeeper.errors import (
    ZkBadVersionError,
    ZkControllerMovedError,
    ZkError,
    ZkNoNodeError,
)
from core.server.zookeeper.ops import (
    CheckOp,
    CreateOp,
    DeleteOp,
    OpResult,
    SetDataOp,
    ZkOp,
    ZnodeData,
)
from core.server.zookeeper.paths import MATCH_ANY_VERSION


class ZnodeStore:
    """Reads and (fenced) writes shared by the parts of ``KafkaZkClient``."""

    def __init__(self, zookeeper: ZooKeeperClient):
        self.zookeeper = zookeeper

    async def _write(self, op: ZkOp, controller_epoch_zk_version: int) -> OpResult:
        """Apply one write, fenced on the controller epoch unless MATCH_ANY_VERSION.

        Returns the created path, the new stat, or None (delete).

        Raises:
            ZkControllerMovedError: the controller epoch znode is at another version.
        """
        zk = self.zookeeper
        if controller_epoch_zk_version == MATCH_ANY_VERSION:
            if isinstance(op, CreateOp):
                created = await zk.create(
                    op.path, op.data, ephemeral=op.ephemeral, sequential=op.sequential
                )
                return created[0]
            if isinstance(op, SetDataOp):
                return await zk.set(op.path, op.data, op.version)
            if isinstance(op, DeleteOp):
                await zk.delete(op.path, op.version)
                return None
            raise TypeError(f"not a write: {op!r}")
        if controller_epoch_zk_version < 0:
            raise ValueError(
                f"controller epoch zk version {controller_epoch_zk_version} is neither >= 0 nor -1"
            )
        try:
            results = await zk.multi(
                [CheckOp(paths.CONTROLLER_EPOCH, controller_epoch_zk_version), op]
            )
        except ZkError as e:
            if e.op_index == 0 and isinstance(e, ZkBadVersionError):
                raise ZkControllerMovedError(
                    f"{paths.CONTROLLER_EPOCH} is no longer at version "
                    f"{controller_epoch_zk_version}: another controller was elected",
                    path=op.path,
                ) from e
            raise
        return results[1]

    async def _get_or_none(self, path: str) -> ZnodeData | None:
        try:
            return await self.zookeeper.get(path)
        except ZkNoNodeError:
            return None

    async def _children_or_empty(self, path: str) -> list[str]:
        try:
            return await self.zookeeper.get_children(path)
        except ZkNoNodeError:
            return []

    async def _delete_recursive(self, path: str, controller_epoch_zk_version: int) -> bool:
        """Delete ``path`` and its subtree, each delete fenced; False if it did not exist."""
        try:
            children = await self.zookeeper.get_children(path)
        except ZkNoNodeError:
            return False
        for child in children:
            await self._delete_recursive(f"{path}/{child}", controller_epoch_zk_version)
        with contextlib.suppress(ZkNoNodeError):
            await self._write(DeleteOp(path), controller_epoch_zk_version)
        return True

    async def _delete_children(
        self, parent: str, names: list[str], controller_epoch_zk_version: int
    ) -> None:
        """Delete the named children of ``parent`` in parallel; missing ones are fine."""

        async def delete(name: str) -> None:
            with contextlib.suppress(ZkNoNodeError):
                await self._write(DeleteOp(f"{parent}/{name}"), controller_epoch_zk_version)

        await asyncio.gather(*(delete(name) for name in names))
