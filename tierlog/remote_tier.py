"""The remote tier around a broker: the plugins KIP-405 asks for, wired from the config.

With ``remote.log.storage.system.enable=true`` the broker gets a RemoteLogMetadataManager
(``remote.log.metadata.manager.class.name``, configured with the ``rlmm.config.*`` keys,
prefix stripped, plus ``log.dir``). The default, TopicBasedRemoteLogMetadataManager, is
given an in-process client of the broker's own ``__remote_log_metadata`` topic, which it
creates at start-up or checks (a partition-count mismatch stops the broker).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from rlmm.manager import TopicBasedRemoteLogMetadataManager
from tiered.api import (
    RLMM_CLASS_NAME,
    RLMM_CONFIG_PREFIX,
    RemoteLogMetadataManager,
    RemoteStorageError,
    TopicIdPartition,
    load_plugin,
    prefixed_configs,
)
from tierlog.metadata_topic import InProcessMetadataTopicClient

if TYPE_CHECKING:
    from core.server.broker import Broker

log = logging.getLogger(__name__)


class RemoteTierStartError(Exception):
    """The remote tier could not start; the message names the setting at fault."""


class RemoteTier:
    """Starts and stops the remote-tier plugins of one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.rlmm: RemoteLogMetadataManager | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.broker.config.remote_log_storage_system_enable)

    async def start(self) -> None:
        if not self.enabled:
            return
        config = self.broker.config
        loop = asyncio.get_running_loop()
        class_name = config.get(RLMM_CLASS_NAME)
        try:
            rlmm = load_plugin(class_name, RemoteLogMetadataManager, key=RLMM_CLASS_NAME)
        except RemoteStorageError as e:
            raise RemoteTierStartError(str(e)) from e
        if isinstance(rlmm, TopicBasedRemoteLogMetadataManager):
            rlmm.attach_client(InProcessMetadataTopicClient(self.broker, loop))
        settings = prefixed_configs(config.originals, RLMM_CONFIG_PREFIX)
        settings.setdefault("log.dir", str(config.log_dirs[0]))
        settings.setdefault("broker.id", str(config.node_id))
        try:
            await loop.run_in_executor(None, rlmm.configure, settings)
        except RemoteStorageError as e:
            raise RemoteTierStartError(f"{RLMM_CLASS_NAME}={class_name}: {e}") from e
        self.rlmm = rlmm
        tiered = self.tiered_partitions()
        if tiered:
            rlmm.on_partition_leadership_changes(tiered, set())
        log.info("remote tier started: %s, %d tiered partitions", class_name, len(tiered))

    def tiered_partitions(self) -> set[TopicIdPartition]:
        out = set()
        for info in self.broker.topics.all():
            if self.broker.topics.effective_config(info).remote_storage_enable:
                out.update(
                    TopicIdPartition(info.topic_id, info.name, p) for p in range(info.partitions)
                )
        return out

    async def stop(self) -> None:
        if self.rlmm is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.rlmm.close)
            self.rlmm = None


class TieredBroker:
    """A broker and its remote tier, started and stopped together."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.remote_tier = RemoteTier(broker)

    @property
    def config(self):
        return self.broker.config

    async def start(self):
        bound = await self.broker.start()
        try:
            await self.remote_tier.start()
        except BaseException:
            await self.broker.stop()
            raise
        return bound

    async def stop(self) -> None:
        await self.remote_tier.stop()
        await self.broker.stop()
