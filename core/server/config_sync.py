"""Topic config changes reach every broker of a cluster (Kafka's DynamicConfigManager over
``ZkNodeChangeNotificationListener``, for topics).

Whoever changes a topic's overrides writes ``/config/topics/<topic>`` and then a sequential
``/config/changes/config_change_<seq>`` naming ``topics/<topic>``. Every broker watches
``/config/changes``; for each notification newer than the last it processed it reads the
topic's overrides and hands them to ``apply`` (the broker updates its topic registry and
the open logs). At start the last processed is the newest existing notification: the
broker reads the configs of the topics it learns of from ZooKeeper anyway. Notifications
older than 15 minutes are deleted, as Kafka's listeners delete them.

Notifications for other entity types (clients, users, brokers, ips) are read and skipped:
tierlog keeps no dynamic client, user or broker configs in ZooKeeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from core.clock import now_ms
from core.server.zookeeper import paths
from core.server.zookeeper.errors import ZkError, ZkNoNodeError
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.topic_data import decode_config_change
from core.server.zookeeper.watch import ZkWatch

log = logging.getLogger(__name__)

# Kafka's ZkNodeChangeNotificationListener.changeExpirationMs.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000

ApplyTopicConfig = Callable[[str, dict[str, str]], Awaitable[None] | None]


def _sequence(name: str) -> str:
    return paths.sequence_number(name, paths.CONFIG_CHANGE_PREFIX)


class TopicConfigSync:
    """Applies the topic config change notifications of ZooKeeper on this broker."""

    def __init__(self, zk: KafkaZkClient, apply: ApplyTopicConfig) -> None:
        self._zk = zk
        self._apply = apply
        self._last = ""
        self._watch: ZkWatch | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        names = await self._zk.zookeeper.get_children(paths.CONFIG_CHANGES)
        notes = [n for n in names if n.startswith(paths.CONFIG_CHANGE_PREFIX)]
        self._last = max((_sequence(n) for n in notes), default="")
        first = True

        async def on_children(children: list[str]) -> None:
            nonlocal first
            if first:  # the state at registration: already covered by _last
                first = False
                return
            await self.process(children)

        self._watch = await self._zk.zookeeper.watch_children(paths.CONFIG_CHANGES, on_children)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def process(self, children: list[str] | None = None) -> None:
        """Apply the notifications newer than the last processed (in sequence order)."""
        async with self._lock:
            if children is None:
                children = await self._zk.zookeeper.get_children(paths.CONFIG_CHANGES)
            fresh = sorted(
                (n for n in children if n.startswith(paths.CONFIG_CHANGE_PREFIX)),
                key=_sequence,
            )
            topics: list[str] = []
            for name in fresh:
                if _sequence(name) <= self._last:
                    continue
                try:
                    node = await self._zk.zookeeper.get(f"{paths.CONFIG_CHANGES}/{name}")
                except ZkNoNodeError:
                    continue
                self._last = _sequence(name)
                await self._maybe_purge(name, node.stat.ctime_ms)
                entity = _entity_path(node.data)
                if entity is not None and entity.startswith(f"{paths.CONFIG_TOPICS}/"):
                    topics.append(entity.split("/", 1)[1])
            for topic in dict.fromkeys(topics):
                try:
                    configs = await self._zk.get_topic_config(topic)
                except ZkError as e:
                    log.warning("cannot read the configs of topic %s: %s", topic, e)
                    continue
                result = self._apply(topic, configs)
                if result is not None:
                    await result

    async def _maybe_purge(self, name: str, created_ms: int) -> None:
        if now_ms() - created_ms > CHANGE_EXPIRATION_MS:
            with contextlib.suppress(ZkError):
                await self._zk.delete_config_changes([name])


def _entity_path(data: bytes | None) -> str | None:
    try:
        return decode_config_change(data)
    except ZkError as e:
        log.warning("unreadable config change notification: %s", e)
        return None
