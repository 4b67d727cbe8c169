"""A stopped broker's storage, opened by a tool: its log dirs, topic registry and metadata topic.

``tierlog restore`` and ``tierlog metadata verify --repair --log-dirs`` change what a broker
will find at its next start. They open the log dirs as the broker does, with core's
``LogManager`` (which locks each log dir: a running broker, or another tool, makes the open
fail, naming the dir) and the topic registry of the first log dir, and append to
``__remote_log_metadata`` through ``LogDirMetadataTopicClient``: the RLMM's own client
interface over the local partition logs, so events are written by the RLMM's code, in its
format, to the partitions its partitioner picks. ``close`` shuts the logs down cleanly
(flush, offset checkpoints, the clean-shutdown marker), as a broker's shutdown does.

Appends are not fsynced one by one: the tool's work is repeatable (a run cut short is run
again), and ``close`` flushes everything before the tool reports success.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path

from core.errors import CoreError
from core.log import meta_properties
from core.log.config import LogConfig
from core.log.files import META_PROPERTIES
from core.log.log_manager import LogManager, LogManagerConfig
from core.log.partition_log import PartitionLog
from core.server.config import BrokerConfig
from core.server.topics import TopicInfo, TopicRegistry, write_partition_metadata
from rlmm.topic_client import METADATA_TOPIC, MetadataRecord, MetadataTopicError
from tierlog.metadata_topic import (
    METADATA_TOPIC_CONFIGS,
    metadata_batch,
    read_metadata_records,
)

log = logging.getLogger(__name__)


class OfflineStorageError(Exception):
    """The log dirs cannot be opened (locked by a running broker, not a broker's, unusable)."""


class OfflineBrokerStorage:
    """The log dirs and topic registry of a stopped broker, open for changes.

    Raises (constructor):
        OfflineStorageError: a log dir is locked (the broker runs) or unusable, or the
            registry cannot be read; the message names the dir or file.
    """

    def __init__(self, config: LogManagerConfig, broker_defaults: Mapping[str, str]) -> None:
        first = Path(config.log_dirs[0])
        try:
            first.mkdir(parents=True, exist_ok=True)
            self.registry = TopicRegistry(first, broker_defaults)
            self.log_manager = LogManager(config, topic_config=self.registry.log_config)
        except (CoreError, OSError) as e:
            raise OfflineStorageError(str(e)) from e
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def of_broker(cls, config: BrokerConfig) -> OfflineBrokerStorage:
        """The storage the broker configured by ``config`` uses."""
        return cls(config.log_manager_config(), config.log_config_defaults())

    @classmethod
    def of_log_dirs(cls, log_dirs: list[Path]) -> OfflineBrokerStorage:
        """The storage in ``log_dirs``, identified by their ``meta.properties`` (node and
        cluster id), with Kafka's default topic configs.

        Raises:
            OfflineStorageError: the first dir has no readable ``meta.properties``.
        """
        path = Path(log_dirs[0]) / META_PROPERTIES
        try:
            existing = meta_properties.read(path)
        except CoreError as e:
            raise OfflineStorageError(str(e)) from e
        if existing is None:
            raise OfflineStorageError(f"{path} does not exist: {log_dirs[0]} is not a log dir")
        config = LogManagerConfig(
            log_dirs=tuple(Path(d) for d in log_dirs),
            node_id=existing.node_id,
            cluster_id=existing.cluster_id or "",
        )
        return cls(config, {})

    @property
    def node_id(self) -> int:
        return self.log_manager.config.node_id

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> TopicInfo:
        """Register a topic and create its partition logs, as the broker's CreateTopics does.

        Raises:
            CoreError: as ``TopicRegistry.create`` (the topic exists, an invalid config...).
        """
        info = self.registry.create(name, partitions, configs)
        for index in range(partitions):
            self.partition_log(info, index)
        return info

    def partition_log(self, info: TopicInfo, index: int) -> PartitionLog:
        """A registered topic's partition log, created (with its ``partition.metadata``)
        where it is missing. Its high watermark is its log end, as when a single broker
        opens it (one replica: what was appended is committed)."""
        plog = self.log_manager.get_log(info.name, index)
        if plog is None:
            plog = self.log_manager.get_or_create_log(
                info.name, index, self.registry.log_config(info.name)
            )
            write_partition_metadata(plog.dir, info.topic_id)
        if plog.high_watermark < plog.log_end_offset:
            plog.update_high_watermark(plog.log_end_offset)
        return plog

    def log_config(self, configs: Mapping[str, str]) -> LogConfig:
        """The effective config of a topic with these overrides, over the broker's defaults."""
        return LogConfig.from_props(dict(configs), defaults=self.registry.broker_defaults)

    def metadata_client(self) -> LogDirMetadataTopicClient:
        return LogDirMetadataTopicClient(self)

    def close(self) -> None:
        """Flush every log and shut down cleanly (checkpoints, clean-shutdown marker)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.log_manager.shutdown()


class LogDirMetadataTopicClient:
    """``MetadataTopicClient`` over ``__remote_log_metadata`` in a stopped broker's log dirs."""

    def __init__(self, storage: OfflineBrokerStorage) -> None:
        self.storage = storage

    def _info(self) -> TopicInfo:
        info = self.storage.registry.get(METADATA_TOPIC)
        if info is None:
            raise MetadataTopicError(f"{METADATA_TOPIC} does not exist")
        return info

    def _log(self, partition: int) -> PartitionLog:
        info = self._info()
        if not 0 <= partition < info.partitions:
            raise MetadataTopicError(f"{METADATA_TOPIC}-{partition} does not exist")
        return self.storage.partition_log(info, partition)

    def ensure_topic(self, num_partitions: int) -> None:
        info = self.storage.registry.get(METADATA_TOPIC)
        if info is None:
            try:
                self.storage.create_topic(METADATA_TOPIC, num_partitions, METADATA_TOPIC_CONFIGS)
            except CoreError as e:
                raise MetadataTopicError(f"cannot create {METADATA_TOPIC}: {e}") from e
            return
        if info.partitions != num_partitions:
            raise MetadataTopicError(
                f"{METADATA_TOPIC} has {info.partitions} partitions but "
                f"remote.log.metadata.topic.num.partitions={num_partitions}"
            )

    def partition_count(self) -> int:
        return self._info().partitions

    def append(self, partition: int, value: bytes, *, durable: bool = True) -> int:
        # ``durable`` changes nothing here: the tool flushes every log before it reports
        # success (``close``).
        info = self._info()
        plog = self._log(partition)
        epoch = info.leader_epochs[partition] if partition < len(info.leader_epochs) else 0
        try:
            appended = plog.append_as_leader(metadata_batch(value), epoch)
        except CoreError as e:
            raise MetadataTopicError(f"append to {METADATA_TOPIC}-{partition} failed: {e}") from e
        plog.update_high_watermark(plog.log_end_offset)  # one replica: committed
        return appended.first_offset

    def read(self, partition: int, start_offset: int, max_records: int) -> list[MetadataRecord]:
        return read_metadata_records(self._log(partition), partition, start_offset, max_records)

    def end_offset(self, partition: int) -> int:
        return self._log(partition).high_watermark

    def close(self) -> None:
        return None  # the storage owns the logs
