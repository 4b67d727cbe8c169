"""Sequential notification znodes of ``KafkaZkClient``: config changes and ISR changes.

A writer creates ``<parent>/<prefix><10-digit sequence>``; the reader (every broker for config
changes, the controller for ISR changes) lists the children, reads them in sequence order and
deletes the ones it has handled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from core.server.zookeeper import paths
from core.server.zookeeper.errors import ZkNoNodeError
from core.server.zookeeper.paths import MATCH_ANY_VERSION
from core.server.zookeeper.store import ZnodeStore
from core.server.zookeeper.topic_data import (
    TopicPartition,
    decode_config_change,
    decode_isr_change,
    encode_config_change,
    encode_isr_change,
)


class NotificationZnodes(ZnodeStore):
    async def _create_sequential(self, parent: str, prefix: str, data: bytes) -> str:
        try:
            created, _ = await self.zookeeper.create(f"{parent}/{prefix}", data, sequential=True)
        except ZkNoNodeError:
            await self.zookeeper.ensure_path(parent)
            created, _ = await self.zookeeper.create(f"{parent}/{prefix}", data, sequential=True)
        return created.rsplit("/", 1)[1]

    async def _sequential_children(self, parent: str, prefix: str) -> list[str]:
        names = [c for c in await self._children_or_empty(parent) if c.startswith(prefix)]
        return sorted(names, key=lambda name: paths.sequence_number(name, prefix))

    # -- /config/changes -------------------------------------------------------------------
    async def create_config_change_notification(self, entity_path: str) -> str:
        """Tell every broker that ``<type>/<name>``'s config changed; returns the znode name."""
        data = encode_config_change(entity_path)
        return await self._create_sequential(paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX, data)

    async def get_config_changes(self) -> dict[str, str]:
        """Pending notifications in sequence order: znode name -> entity path."""
        names = await self._sequential_children(paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX)
        nodes = await asyncio.gather(
            *(self._get_or_none(f"{paths.CONFIG_CHANGES}/{name}") for name in names)
        )
        return {
            name: decode_config_change(node.data)
            for name, node in zip(names, nodes, strict=True)
            if node is not None
        }

    async def delete_config_changes(self, names: Iterable[str]) -> None:
        await self._delete_children(paths.CONFIG_CHANGES, list(names), MATCH_ANY_VERSION)

    # -- /isr_change_notification ----------------------------------------------------------
    async def create_isr_change_notification(self, partitions: Iterable[TopicPartition]) -> str:
        """Tell the controller these partitions' ISRs changed; returns the znode name."""
        data = encode_isr_change(partitions)
        parent, prefix = paths.ISR_CHANGE_NOTIFICATION, paths.ISR_CHANGE_PREFIX
        return await self._create_sequential(parent, prefix, data)

    async def get_isr_change_notifications(self) -> list[str]:
        """The names of the pending notifications, in sequence order."""
        return await self._sequential_children(
            paths.ISR_CHANGE_NOTIFICATION, paths.ISR_CHANGE_PREFIX
        )

    async def get_isr_changes(self, names: Iterable[str]) -> set[TopicPartition]:
        """The partitions the named notifications report (deleted ones report none)."""
        nodes = await asyncio.gather(
            *(self._get_or_none(f"{paths.ISR_CHANGE_NOTIFICATION}/{name}") for name in names)
        )
        return {tp for node in nodes if node is not None for tp in decode_isr_change(node.data)}

    async def delete_isr_change_notifications(
        self, names: Iterable[str], *, controller_epoch_zk_version: int = MATCH_ANY_VERSION
    ) -> None:
        await self._delete_children(
            paths.ISR_CHANGE_NOTIFICATION, list(names), controller_epoch_zk_version
        )
