"""The topic registry: names, stable topic ids, partition counts, config overrides, epochs.

A single broker keeps what a KRaft controller would: one JSON document,
``tierlog-metadata.json`` in the first log dir, replaced atomically on every change. Each
partition directory also gets Kafka's ``partition.metadata`` file (``version: 0`` and
``topic_id: <base64 uuid>``), so the topic id survives with the data and a registry can be
rebuilt from the log dirs alone.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.errors import CoreError, InvalidConfigError
from core.fs import atomic_write
from core.kafka_uuid import uuid_from_base64, uuid_to_base64
from core.log.config import LogConfig
from core.log.files import PARTITION_METADATA
from core.topic_name import InvalidTopicError, is_legal_topic_name, validate_topic_name

log = logging.getLogger(__name__)

REGISTRY_FILE = "tierlog-metadata.json"
# Kafka's Topic.INTERNAL_TOPICS, reported as internal in Metadata. __remote_log_metadata is
# not among them in Kafka (its metadata manager writes it with an ordinary producer); who may
# write all three here is core/server/internal_topics.py's business.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
PRODUCER_ID_BLOCK = 1000


class TopicExistsError(CoreError):
    """TOPIC_ALREADY_EXISTS."""

    error_code = 36


class UnknownTopicError(CoreError):
    """UNKNOWN_TOPIC_OR_PARTITION."""

    error_code = 3


class InvalidPartitionsError(CoreError):
    """INVALID_PARTITIONS."""

    error_code = 37


class InvalidReplicationFactorError(CoreError):
    """INVALID_REPLICATION_FACTOR."""

    error_code = 38


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)  # topic-level overrides
    leader_epochs: tuple[int, ...] = ()

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicRegistry:
    """Thread-safe registry of topics, persisted in ``<dir>/tierlog-metadata.json``.

    In a cluster (``zookeeper.connect``) ZooKeeper holds the topics: the broker keeps an
    in-memory registry (``in_memory``) that mirrors what it has learnt of them (names,
    ids, partition counts, config overrides; ``put`` and ``remove``), so that the parts
    that look topics up by name or id work the same in both modes.
    """

    def __init__(self, directory: Path | None, broker_defaults: Mapping[str, str]) -> None:
        self.path = directory / REGISTRY_FILE if directory is not None else None
        self.broker_defaults = dict(broker_defaults)
        self._lock = threading.RLock()
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._next_producer_id = 0
        self._producer_id_limit = 0
        self._load()

    @classmethod
    def in_memory(cls, broker_defaults: Mapping[str, str]) -> TopicRegistry:
        """A registry that is never written to disk (a cluster broker's mirror)."""
        return cls(None, broker_defaults)

    # -- persistence -----------------------------------------------------------------------
    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            doc = json.loads(self.path.read_text("utf-8"))
            for name, t in doc.get("topics", {}).items():
                if not is_legal_topic_name(name):
                    # Only a registry written before names were checked whole (a name
                    # ending in "\n" passed) can hold one. Serving it would recreate its
                    # directory and break every offset checkpoint, so it is dropped; its
                    # directory, if any, is left on disk and reported by the LogManager.
                    log.warning(
                        "%s: topic %r has an illegal name and is not served; "
                        "it is removed from the registry",
                        self.path,
                        name,
                    )
                    continue
                info = TopicInfo(
                    name=name,
                    topic_id=uuid.UUID(t["id"]),
                    partitions=int(t["partitions"]),
                    configs=dict(t.get("configs", {})),
                    leader_epochs=tuple(int(e) for e in t.get("leader_epochs", ())),
                )
                self._topics[name] = info
                self._by_id[info.topic_id] = name
            self._producer_id_limit = int(doc.get("producer_id_limit", 0))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CoreError(f"cannot read the topic registry {self.path}: {e}") from e
        # Ids below the persisted limit may have been handed out before a crash.
        self._next_producer_id = self._producer_id_limit

    def _save(self) -> None:
        if self.path is None:
            return
        doc = {
            "version": 1,
            "producer_id_limit": self._producer_id_limit,
            "topics": {
                name: {
                    "id": str(t.topic_id),
                    "partitions": t.partitions,
                    "configs": dict(t.configs),
                    "leader_epochs": list(t.leader_epochs),
                }
                for name, t in sorted(self._topics.items())
            },
        }
        atomic_write(self.path, json.dumps(doc, indent=1).encode("utf-8"))

    # -- queries ---------------------------------------------------------------------------
    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        name = self._by_id.get(topic_id)
        return self._topics.get(name) if name is not None else None

    def all(self) -> list[TopicInfo]:
        with self._lock:
            return sorted(self._topics.values(), key=lambda t: t.name)

    def log_config(self, name: str) -> LogConfig:
        """The effective LogConfig of a topic: its overrides over the broker's defaults."""
        info = self._topics.get(name)
        overrides = info.configs if info is not None else {}
        return LogConfig.from_props(overrides, defaults=self.broker_defaults)

    def effective_config(self, info: TopicInfo) -> LogConfig:
        return LogConfig.from_props(info.configs, defaults=self.broker_defaults)

    # -- changes ---------------------------------------------------------------------------
    def create(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
        topic_id: uuid.UUID | None = None,
        leader_epochs: tuple[int, ...] | None = None,
    ) -> TopicInfo:
        """Register a topic.

        ``leader_epochs`` (one per partition, default 0) are the partitions' current leader
        epochs: a topic restored from remote storage continues the epochs of its data.

        Raises:
            InvalidTopicError, TopicExistsError, InvalidPartitionsError,
            InvalidConfigError: as Kafka's CreateTopics answers them.
            ValueError: ``leader_epochs`` does not hold one epoch >= 0 per partition.
        """
        validate_topic_name(name)
        if partitions <= 0:
            raise InvalidPartitionsError(
                f"Number of partitions must be larger than 0, got {partitions}"
            )
        if leader_epochs is not None and (
            len(leader_epochs) != partitions or min(leader_epochs) < 0
        ):
            raise ValueError(f"{name}: leader epochs {leader_epochs} for {partitions} partitions")
        LogConfig.from_props(dict(configs), defaults=self.broker_defaults)  # validates
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            collision = _collision(name, self._topics)
            if collision is not None:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {collision}")
            info = TopicInfo(
                name=name,
                topic_id=topic_id or uuid.uuid4(),
                partitions=partitions,
                configs=dict(configs),
                leader_epochs=tuple(leader_epochs) if leader_epochs else (0,) * partitions,
            )
            if validate_only:
                return info
            self._topics[name] = info
            self._by_id[info.topic_id] = name
            self._save()
            return info

    def delete(self, name: str) -> TopicInfo:
        with self._lock:
            info = self._topics.pop(name, None)
            if info is None:
                raise UnknownTopicError(f"This server does not host this topic: {name}")
            self._by_id.pop(info.topic_id, None)
            self._save()
            return info

    def set_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        """Replace the topic's overrides (validated first).

        Raises:
            UnknownTopicError, InvalidConfigError.
        """
        LogConfig.from_props(dict(configs), defaults=self.broker_defaults)
        with self._lock:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(f"This server does not host this topic: {name}")
            info = replace(info, configs=dict(configs))
            self._topics[name] = info
            self._save()
            return info

    def add_partitions(
        self, name: str, count: int, *, validate_only: bool = False
    ) -> tuple[TopicInfo, TopicInfo]:
        """Raise a topic's partition count to ``count`` (CreatePartitions); the new
        partitions start at leader epoch 0. Returns the topic before and after.

        Raises:
            UnknownTopicError: no such topic.
            InvalidPartitionsError: ``count`` is not larger than the current count.
        """
        with self._lock:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(f"The topic '{name}' does not exist.")
            if count < info.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {info.partitions} partitions, which is higher than "
                    f"the requested {count}."
                )
            if count == info.partitions:
                raise InvalidPartitionsError(f"Topic already has {info.partitions} partitions.")
            epochs = list(info.leader_epochs) + [0] * (info.partitions - len(info.leader_epochs))
            grown = replace(
                info, partitions=count, leader_epochs=tuple(epochs) + (0,) * (count - len(epochs))
            )
            if validate_only:
                return info, grown
            self._topics[name] = grown
            self._save()
            return info, grown

    def bump_leader_epochs(self) -> None:
        """A new leadership term for every partition (the broker became leader again)."""
        with self._lock:
            for name, info in self._topics.items():
                epochs = list(info.leader_epochs) + [0] * (
                    info.partitions - len(info.leader_epochs)
                )
                self._topics[name] = replace(info, leader_epochs=tuple(e + 1 for e in epochs))
            if self._topics:
                self._save()

    def put(self, info: TopicInfo) -> None:
        """Add or replace a topic as it is (a mirror learning of a topic or a change)."""
        with self._lock:
            previous = self._topics.get(info.name)
            if previous is not None and previous.topic_id != info.topic_id:
                self._by_id.pop(previous.topic_id, None)
            self._topics[info.name] = info
            self._by_id[info.topic_id] = info.name
            self._save()

    def remove(self, name: str) -> TopicInfo | None:
        """Forget a topic if known (a mirror learning of a deletion); returns it."""
        with self._lock:
            info = self._topics.pop(name, None)
            if info is not None:
                self._by_id.pop(info.topic_id, None)
                self._save()
            return info

    def adopt(self, name: str, topic_id: uuid.UUID, partitions: int) -> TopicInfo:
        """Register a topic found in the log dirs but missing from the registry."""
        with self._lock:
            info = TopicInfo(name, topic_id, partitions, {}, (0,) * partitions)
            self._topics[name] = info
            self._by_id[topic_id] = name
            self._save()
            log.warning(
                "adopted topic %s (id %s, %d partitions) from the log dirs",
                name,
                topic_id,
                partitions,
            )
            return info

    def reserve_producer_ids_through(self, producer_id: int) -> None:
        """Never hand out ``producer_id`` or any id below it from now on (persisted): the
        producer state of restored data names them."""
        with self._lock:
            if self._producer_id_limit <= producer_id:
                self._producer_id_limit = producer_id + 1
                self._next_producer_id = max(self._next_producer_id, producer_id + 1)
                self._save()
            else:
                self._next_producer_id = max(self._next_producer_id, producer_id + 1)

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before, across restarts (persisted in blocks)."""
        with self._lock:
            if self._next_producer_id >= self._producer_id_limit:
                self._producer_id_limit = self._next_producer_id + PRODUCER_ID_BLOCK
                self._save()
            pid = self._next_producer_id
            self._next_producer_id += 1
            return pid


def _collision(name: str, topics: Mapping[str, TopicInfo]) -> str | None:
    # Kafka refuses names that differ only by '.' versus '_' (they clash in metric names).
    key = name.replace(".", "_")
    for other in topics:
        if other.replace(".", "_") == key:
            return other
    return None


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    atomic_write(
        directory / PARTITION_METADATA,
        f"version: 0\ntopic_id: {uuid_to_base64(topic_id)}\n".encode(),
    )


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id in a partition dir's ``partition.metadata``, or None if absent."""
    path = directory / PARTITION_METADATA
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        if fields.get("version", "").strip() != "0":
            raise ValueError(f"unsupported version {fields.get('version')!r}")
        return uuid_from_base64(fields["topic_id"].strip())
    except (KeyError, ValueError) as e:
        raise InvalidConfigError(f"{path} is malformed: {e}") from e
