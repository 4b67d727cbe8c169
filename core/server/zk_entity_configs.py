"""User, client and ip configs in ZooKeeper (Kafka's AdminZkClient for ``/config/users``,
``/config/clients``, ``/config/ips``): what the cluster's SCRAM credential store and client
quota store share.

A user's znode holds both its SCRAM credentials and its quotas
(``{"version":1,"config":{"SCRAM-SHA-256":"salt=...","producer_byte_rate":"1024"}}``), so
each writer changes only its own keys: ``update`` reads the znode, applies the change to its
entries and writes them back on the version read (BADVERSION or NODEEXISTS from a concurrent
writer: read again), then creates a ``/config/changes/config_change_<seq>`` notification
naming the entity path (``users/alice``, ``users/alice/clients/c1``, ``clients/<default>``),
which every broker's ``ConfigChangeSync`` (``core.server.config_sync``) hands on. An entity
whose config empties keeps an empty znode, as Kafka's AdminZkClient leaves it.

Every method is a coroutine on the broker's event loop; ``call`` runs one from an executor
thread (the stores' interfaces are blocking, called off the loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from core.server.zookeeper import paths
from core.server.zookeeper.errors import (
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
)
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.topic_data import decode_config, encode_config

T = TypeVar("T")
# How long a blocking caller waits for ZooKeeper (the client retries while disconnected).
CALL_TIMEOUT_S = 60.0


class ZkEntityConfigs:
    """Reads and conditional writes of ``/config/<entity path>`` znodes."""

    def __init__(self, zk: KafkaZkClient, loop: asyncio.AbstractEventLoop) -> None:
        self.zk = zk
        self.loop = loop

    def call(self, coro_fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``coro_fn()`` on the loop from another thread and wait for its result.

        Raises:
            whatever the coroutine raises; TimeoutError after CALL_TIMEOUT_S.
        """

        async def run() -> T:
            return await coro_fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(CALL_TIMEOUT_S)

    async def read(self, entity_path: str) -> tuple[dict[str, str], int]:
        """The entity's entries and znode version (-1: no znode).

        Raises:
            ZkDataError: the znode is not Kafka's config JSON.
        """
        path = f"{paths.CONFIG}/{entity_path}"
        try:
            node = await self.zk.zookeeper.get(path)
        except ZkNoNodeError:
            return {}, -1
        return decode_config(node.data, path), node.stat.version

    async def update(
        self, entity_path: str, change: Callable[[dict[str, str]], Mapping[str, str]]
    ) -> dict[str, str]:
        """Apply ``change`` to the entity's entries with a conditional write, then notify
        every broker; returns the entries written.

        Raises:
            ZkError: ZooKeeper refused the write (nothing was announced).
        """
        path = f"{paths.CONFIG}/{entity_path}"
        while True:
            current, version = await self.read(entity_path)
            wanted = dict(change(dict(current)))
            if wanted == current and version >= 0:
                return wanted
            data = encode_config(wanted)
            try:
                if version < 0:
                    await self.zk.zookeeper.create_recursive(path, data)
                else:
                    await self.zk.zookeeper.set(path, data, version)
            except (ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError):
                continue  # a concurrent writer: read again
            break
        await self.zk.create_config_change_notification(entity_path)
        return wanted

    async def entity_paths(self, entity_type: str) -> list[str]:
        """Every entity of ``users``, ``clients`` or ``ips`` with a znode; for users, their
        ``users/<u>/clients/<c>`` children too."""
        found = []
        for name in await self._children(f"{paths.CONFIG}/{entity_type}"):
            found.append(f"{entity_type}/{name}")
            if entity_type == paths.CONFIG_USERS:
                clients = await self._children(
                    f"{paths.CONFIG}/{entity_type}/{name}/{paths.CONFIG_CLIENTS}"
                )
                found.extend(f"{entity_type}/{name}/{paths.CONFIG_CLIENTS}/{c}" for c in clients)
        return found

    async def _children(self, path: str) -> list[str]:
        try:
            return sorted(await self.zk.zookeeper.get_children(path))
        except ZkNoNodeError:
            return []
