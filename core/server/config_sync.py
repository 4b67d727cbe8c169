"""Config changes reach every broker of a cluster (Kafka's DynamicConfigManager over
``ZkNodeChangeNotificationListener``).

Whoever changes an entity's config writes ``/config/<entity path>`` and then a sequential
``/config/changes/config_change_<seq>`` naming the entity path (``topics/<topic>``,
``users/<user>``, ``users/<user>/clients/<client>``, ``clients/<client>``, ``ips/<ip>``).
Every broker watches ``/config/changes``; for each notification newer than the last it
processed, a topic's overrides go to ``apply`` (the broker updates its topic registry and
the open logs) and any other entity path to ``on_entity`` (SCRAM credentials and client
quotas, ``core.server.zk_scram_store`` and ``core.server.zk_quota_store``). The last
processed is the newest notification when ``mark()`` is called, before the broker loads the
configs at start: a change made while it loads is processed again once it watches, none is
lost. Notifications older than 15 minutes are deleted, as Kafka's listeners delete them.
Notifications of broker entities are skipped: tierlog keeps no dynamic broker configs.
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
# Called with the entity path of a user, client or ip config change.
ApplyEntityChange = Callable[[str], Awaitable[None]]


_ENTITY_TYPES = (paths.CONFIG_USERS, paths.CONFIG_CLIENTS, paths.CONFIG_IPS)


def _sequence(name: str) -> str:
    return paths.sequence_number(name, paths.CONFIG_CHANGE_PREFIX)


class ConfigChangeSync:
    """Applies the config change notifications of ZooKeeper on this broker."""

    def __init__(
        self,
        zk: KafkaZkClient,
        apply: ApplyTopicConfig,
        on_entity: ApplyEntityChange | None = None,
    ) -> None:
        self._zk = zk
        self._apply = apply
        self._on_entity = on_entity
        self._last: str | None = None
        self._watch: ZkWatch | None = None
        self._lock = asyncio.Lock()

    async def mark(self) -> None:
        """Remember the newest notification: ``start`` processes the ones after it."""
        names = await self._zk.zookeeper.get_children(paths.CONFIG_CHANGES)
        notes = [n for n in names if n.startswith(paths.CONFIG_CHANGE_PREFIX)]
        self._last = max((_sequence(n) for n in notes), default="")

    async def start(self) -> None:
        if self._last is None:
            await self.mark()

        async def on_children(children: list[str]) -> None:
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
            entities: list[str] = []
            for name in fresh:
                if _sequence(name) <= (self._last or ""):
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
                elif entity is not None and entity.split("/", 1)[0] in _ENTITY_TYPES:
                    entities.append(entity)
            for topic in dict.fromkeys(topics):
                try:
                    configs = await self._zk.get_topic_config(topic)
                except ZkError as e:
                    log.warning("cannot read the configs of topic %s: %s", topic, e)
                    continue
                result = self._apply(topic, configs)
                if result is not None:
                    await result
            if self._on_entity is not None:
                for entity in dict.fromkeys(entities):
                    try:
                        await self._on_entity(entity)
                    except ZkError as e:
                        log.warning("cannot apply the config change of %s: %s", entity, e)

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
