"""The broker's topic manifests: each tiered topic's ``topic-manifest.json`` kept in step.

A bucket holds a topic's segments, but not its partition count or configs; ``tierlog
restore`` needs both to recreate the topic from the bucket alone. The broker writes them
(``rsm_plugins.layout.TopicManifest``) through the RSM plugin:

- at start-up, for every tiered topic (in the background: start-up does not wait on the
  bucket);
- when a topic is created tiered, or its configs change (turning tiering on included);
- a deleted topic's manifest is deleted, before its segments (the partition remover deletes
  them later): a bucket without it no longer offers the topic for restore.

Each write reads the topic's current state from the registry, so events handled out of
order (they run on executor threads) still leave the bucket matching the registry. A
manifest is rewritten only when the partition count or configs differ from what this
broker last wrote. A failed write or delete is logged and retried in the background every
``retry_ms``. Only object-store plugins (``ObjectStoreRemoteStorageManager``) hold topic
manifests; with another RSM plugin nothing is written.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.scheduler import Scheduler
from rsm_plugins.base import ObjectStoreRemoteStorageManager
from rsm_plugins.layout import TopicManifest
from tiered.api import RemoteStorageError

if TYPE_CHECKING:
    from core.server.topics import TopicInfo

log = logging.getLogger(__name__)

DEFAULT_RETRY_MS = 30_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class TopicManifestPublisher:
    """Writes and deletes the topic manifests of one broker.

    Args:
        rsm: the broker's (configured) object-store RSM plugin.
        lookup: the registry's current entry for a topic id (None once deleted).
        is_tiered: whether a topic's effective config has ``remote.storage.enable=true``.
        broker_id: recorded in each manifest.
    """

    def __init__(
        self,
        rsm: ObjectStoreRemoteStorageManager,
        lookup: Callable[[uuid.UUID], TopicInfo | None],
        is_tiered: Callable[[TopicInfo], bool],
        broker_id: int,
        *,
        retry_ms: float = DEFAULT_RETRY_MS,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.rsm = rsm
        self.lookup = lookup
        self.is_tiered = is_tiered
        self.broker_id = broker_id
        self.retry_ms = retry_ms
        self.clock = clock
        self._lock = threading.Lock()  # one write or delete at a time, in any order
        self._written: dict[uuid.UUID, TopicManifest] = {}
        self._retrying: set[uuid.UUID] = set()
        self._scheduler = Scheduler(1, "topic-manifests")
        self._closed = False

    def publish_all(self, topics: list[TopicInfo]) -> None:
        """Bring the manifests of ``topics`` up to date in the background."""
        for info in topics:
            with self._lock:
                self._retrying.add(info.topic_id)
            self._schedule(info.topic_id, info.name, 0)

    def topic_changed(self, info: TopicInfo) -> None:
        """A topic was created or reconfigured: write its manifest if it is tiered.
        Blocking (one PUT); a failure is retried in the background."""
        self._sync(info.topic_id, info.name)

    def topic_deleted(self, info: TopicInfo) -> None:
        """A topic was deleted: delete its manifest. Blocking; retried on failure."""
        self._sync(info.topic_id, info.name)

    def close(self) -> None:
        self._closed = True
        self._scheduler.shutdown()

    def _schedule(self, topic_id: uuid.UUID, name: str, delay_ms: float) -> None:
        if self._closed:
            return
        # Closed meanwhile (RuntimeError): the broker is stopping; its next start writes it.
        with contextlib.suppress(RuntimeError):
            self._scheduler.schedule_once(
                f"topic manifest {name}",
                lambda: self._sync(topic_id, name, retry=True),
                delay_ms,
            )

    def _sync(self, topic_id: uuid.UUID, name: str, *, retry: bool = False) -> None:
        if self._closed:
            return
        with self._lock:
            if retry:
                self._retrying.discard(topic_id)  # this is the scheduled run
            try:
                self._sync_locked(topic_id, name)
            except RemoteStorageError as e:
                log.warning(
                    "topic manifest of %s (%s): %s; retrying in %d ms",
                    name,
                    topic_id,
                    e,
                    self.retry_ms,
                )
                if topic_id not in self._retrying:
                    self._retrying.add(topic_id)
                    self._schedule(topic_id, name, self.retry_ms)
                return
            self._retrying.discard(topic_id)

    def _sync_locked(self, topic_id: uuid.UUID, name: str) -> None:
        info = self.lookup(topic_id)
        if info is None:  # deleted (topic ids are never reused)
            self.rsm.delete_topic_manifest(name, topic_id)
            self._written.pop(topic_id, None)
            log.info("deleted the topic manifest of %s (%s)", name, topic_id)
            return
        if not self.is_tiered(info):
            return  # a manifest written while it was tiered stays: its segments may too
        manifest = TopicManifest(
            info.topic_id, info.name, info.partitions, dict(info.configs), self.clock(),
            self.broker_id,
        )  # fmt: skip
        last = self._written.get(topic_id)
        if last is not None and last.same_topic_state(manifest):
            return
        self.rsm.write_topic_manifest(manifest)
        self._written[topic_id] = manifest
        log.info(
            "wrote the topic manifest of %s (%s): %d partitions, %d config overrides",
            info.name,
            topic_id,
            info.partitions,
            len(info.configs),
        )
