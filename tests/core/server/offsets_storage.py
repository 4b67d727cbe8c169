"""Real storage for offset-store tests: a log manager, the registry and __consumer_offsets."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from core.log.log_manager import LogManager, LogManagerConfig
from core.server.group_offsets import GroupOffsetStore
from core.server.metadata_cache import MetadataCache
from core.server.offsets_topic import OFFSETS_TOPIC, OffsetsTopic, ensure_offsets_topic
from core.server.replica_manager import ReplicaManager
from core.server.timing_wheel import Timer
from core.server.topics import TopicRegistry


class OffsetsStorage:
    """What the broker opens for its group offsets, over ``directory``; reopenable."""

    def __init__(
        self,
        directory: Path,
        partitions: int = 3,
        broker_defaults: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.topics = TopicRegistry(directory, broker_defaults or {})
        ensure_offsets_topic(self.topics, partitions, 1 << 20)
        self.log_manager = LogManager(
            LogManagerConfig(log_dirs=(directory,)), topic_config=self.topics.log_config
        )
        self.replica_manager = ReplicaManager(self.log_manager, Timer(), MetadataCache(1))
        for info in self.topics.all():
            self.replica_manager.open_topic(info)
        info = self.topics.get(OFFSETS_TOPIC)
        assert info is not None
        self.journal = OffsetsTopic(
            lambda i: self.replica_manager.partition(OFFSETS_TOPIC, i), info.partitions
        )

    def store(self, *, legacy: bool = False) -> GroupOffsetStore:
        return GroupOffsetStore(self.journal, legacy_dir=self.directory if legacy else None)

    def close(self) -> None:
        self.log_manager.shutdown()

    def reopen(self) -> OffsetsStorage:
        self.close()
        return OffsetsStorage(self.directory)
