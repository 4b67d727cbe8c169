"""The object layout shared by every RSM plugin, and the per-segment manifest.

docs/ARCHITECTURE.md, "Remote storage object layout". Every segment copy is a set of objects
under one key stem::

    <key.prefix><topic>-<topicId>/<partition>/<startOffset:020d>-<segmentId>.<suffix>

``topicId`` and ``segmentId`` are Kafka's uuid text form (base64url of the 16 bytes, no
padding, 22 characters). The suffixes are those of the local files: ``log``, ``index``,
``timeindex``, ``txnindex`` (only when the segment has one), ``snapshot`` and
``leader-epoch-checkpoint``; then ``manifest.json`` is written last, so its presence means the
copy completed. A bucket alone is enough to audit, restore or read history.

``manifest.json`` (UTF-8 JSON, one object)::

    {
      "version": 1,
      "checksumAlgorithm": "crc32c",
      "segment": {                         # the RemoteLogSegmentMetadata given to the copy
        "topicId": "<base64>", "topic": "t", "partition": 0, "segmentId": "<base64>",
        "startOffset": 0, "endOffset": 99,              # both inclusive
        "maxTimestampMs": ..., "brokerId": ..., "eventTimestampMs": ...,
        "segmentSizeInBytes": ..., "segmentLeaderEpochs": {"0": 0, "3": 57},
        "customMetadata": "<base64>" | null, "state": "COPY_SEGMENT_STARTED",
        "txnIndexEmpty": true
      },
      "objects": {                         # one entry per object copied, by suffix
        "log": {"key": "<object name>", "size": 1048576, "crc32c": "1a2b3c4d"}, ...
      }
    }

The checksum is CRC32C (Castagnoli, as in Kafka's record batches), 8 lowercase hex digits.
``key`` is the object's name relative to the partition folder, so a bucket copied under
another prefix stays readable.

One object per topic sits beside the partition folders, ``<key.prefix><topic>-<topicId>/
topic-manifest.json``: what the bucket alone cannot say of a topic, written by the broker
when tiering starts for the topic and when its configs change, deleted when the topic is
deleted (before its segments)::

    {
      "version": 1,
      "topicId": "<base64>", "topic": "t",
      "partitions": 3,                     # the topic's partition count
      "configs": {"remote.storage.enable": "true", "retention.ms": "-1"},  # its overrides
      "updatedMs": 1700000000000,          # when this version was written
      "brokerId": 1                        # by which broker
    }
"""

from __future__ import annotations

import base64
import enum
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import crc32c

from core.kafka_uuid import uuid_from_base64, uuid_to_base64
from core.topic_name import is_legal_topic_name
from tiered.api import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
    TopicIdPartition,
)

MANIFEST_VERSION = 1
CHECKSUM_ALGORITHM = "crc32c"
TOPIC_MANIFEST_NAME = "topic-manifest.json"
TOPIC_MANIFEST_VERSION = 1
_UUID_CHARS = 22  # Kafka's uuid text: base64url of 16 bytes, no padding
_OFFSET_DIGITS = 20


class ObjectSuffix(enum.Enum):
    """The objects of one segment copy, by file suffix (the manifest last)."""

    LOG = "log"
    OFFSET_INDEX = "index"
    TIME_INDEX = "timeindex"
    TRANSACTION_INDEX = "txnindex"
    PRODUCER_SNAPSHOT = "snapshot"
    LEADER_EPOCH = "leader-epoch-checkpoint"
    MANIFEST = "manifest.json"

    @classmethod
    def of_index(cls, index_type: IndexType) -> ObjectSuffix:
        """The object holding ``index_type`` (IndexType values are the suffixes)."""
        return cls(index_type.value)


class ManifestError(RemoteStorageError):
    """A manifest that is not valid JSON of the layout above (a corrupted object)."""


class CorruptObjectError(RemoteStorageError):
    """An object whose size or checksum differs from its manifest entry; never served."""


# -- keys ---------------------------------------------------------------------------------


def topic_folder(key_prefix: str, topic: str, topic_id: uuid.UUID) -> str:
    """``<key.prefix><topic>-<topicId>/``: the folder of a topic's objects."""
    return f"{key_prefix}{topic}-{uuid_to_base64(topic_id)}/"


def topic_manifest_key(key_prefix: str, topic: str, topic_id: uuid.UUID) -> str:
    """The key of a topic's ``topic-manifest.json``."""
    return topic_folder(key_prefix, topic, topic_id) + TOPIC_MANIFEST_NAME


def partition_prefix(key_prefix: str, tp: TopicIdPartition) -> str:
    """``<key.prefix><topic>-<topicId>/<partition>/``: the folder of a partition's objects."""
    return f"{topic_folder(key_prefix, tp.topic, tp.topic_id)}{tp.partition}/"


def object_name(metadata: RemoteLogSegmentMetadata, suffix: ObjectSuffix) -> str:
    """``<startOffset:020d>-<segmentId>.<suffix>``, the name inside the partition folder."""
    return f"{metadata.start_offset:020d}-{uuid_to_base64(metadata.segment_id)}.{suffix.value}"


def object_key(key_prefix: str, metadata: RemoteLogSegmentMetadata, suffix: ObjectSuffix) -> str:
    """The full key of one object of a segment copy."""
    return partition_prefix(key_prefix, metadata.topic_id_partition) + object_name(metadata, suffix)


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """What an object key of the layout names.

    A segment object has a ``partition``, ``start_offset``, ``segment_id`` and ``suffix``
    (the text after the segment id's dot, a known ``ObjectSuffix`` value or not); a topic
    manifest has none of them (``is_topic_manifest``).
    """

    topic: str
    topic_id: uuid.UUID
    partition: int | None = None
    start_offset: int | None = None
    segment_id: uuid.UUID | None = None
    suffix: str | None = None

    @property
    def is_topic_manifest(self) -> bool:
        return self.partition is None

    @property
    def stem(self) -> tuple[int, uuid.UUID] | None:
        """``(start offset, segment id)`` of a segment object: one segment copy."""
        if self.start_offset is None or self.segment_id is None:
            return None
        return self.start_offset, self.segment_id


def _parse_uuid(text: str) -> uuid.UUID | None:
    try:
        value = uuid_from_base64(text)
    except ValueError:
        return None
    # 22 characters carry 132 bits for 128: only the canonical text names the uuid.
    return value if uuid_to_base64(value) == text else None


def parse_key(key_prefix: str, key: str) -> ParsedKey | None:
    """The topic, partition and segment a key of the layout names, or None for a key under
    ``key_prefix`` that the layout does not produce (the bucket may hold other things)."""
    if not key.startswith(key_prefix):
        return None
    parts = key[len(key_prefix) :].split("/")
    folder = parts[0]
    if len(folder) < _UUID_CHARS + 2 or folder[-_UUID_CHARS - 1] != "-":
        return None
    topic = folder[: -_UUID_CHARS - 1]
    topic_id = _parse_uuid(folder[-_UUID_CHARS:])
    if topic_id is None or not is_legal_topic_name(topic):
        return None
    if len(parts) == 2:
        return ParsedKey(topic, topic_id) if parts[1] == TOPIC_MANIFEST_NAME else None
    if len(parts) != 3 or not parts[1].isascii() or not parts[1].isdigit():
        return None
    if parts[1] != str(int(parts[1])):
        return None  # "007": not a partition folder this layout writes
    name = parts[2]
    head = _OFFSET_DIGITS + 1 + _UUID_CHARS  # <startOffset>-<segmentId>
    if len(name) <= head + 1 or name[_OFFSET_DIGITS] != "-" or name[head] != ".":
        return None
    digits = name[:_OFFSET_DIGITS]
    segment_id = _parse_uuid(name[_OFFSET_DIGITS + 1 : head])
    if not (digits.isascii() and digits.isdigit()) or segment_id is None:
        return None
    return ParsedKey(topic, topic_id, int(parts[1]), int(digits), segment_id, name[head + 1 :])


# -- checksums ----------------------------------------------------------------------------


def crc32c_hex(value: int) -> str:
    return f"{value:08x}"


def checksum_bytes(data: bytes | bytearray | memoryview) -> str:
    """CRC32C of ``data`` as 8 hex digits."""
    return crc32c_hex(crc32c.crc32c(data))


class RunningChecksum:
    """Size and CRC32C of bytes seen so far, in order."""

    __slots__ = ("_crc", "size")

    def __init__(self) -> None:
        self._crc = 0
        self.size = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._crc = crc32c.crc32c(data, value=self._crc)
        self.size += len(data)

    def result(self) -> tuple[int, str]:
        """``(size, crc32c hex)``."""
        return self.size, crc32c_hex(self._crc)


# -- manifest -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObjectEntry:
    """One object of a segment copy as the manifest records it."""

    key: str
    size: int
    checksum: str

    def verify(self, data: bytes, what: str) -> None:
        """Raise ``CorruptObjectError`` unless ``data`` has this entry's size and checksum."""
        if len(data) != self.size:
            raise CorruptObjectError(
                f"{what}: {len(data)} bytes where the manifest says {self.size}"
            )
        actual = checksum_bytes(data)
        if actual != self.checksum:
            raise CorruptObjectError(
                f"{what}: {CHECKSUM_ALGORITHM} {actual} where the manifest says {self.checksum}"
            )


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """The content of ``<stem>.manifest.json``."""

    metadata: RemoteLogSegmentMetadata
    objects: Mapping[ObjectSuffix, ObjectEntry]

    def to_json(self) -> bytes:
        md = self.metadata
        tp = md.topic_id_partition
        doc: dict[str, Any] = {
            "version": MANIFEST_VERSION,
            "checksumAlgorithm": CHECKSUM_ALGORITHM,
            "segment": {
                "topicId": uuid_to_base64(tp.topic_id),
                "topic": tp.topic,
                "partition": tp.partition,
                "segmentId": uuid_to_base64(md.segment_id),
                "startOffset": md.start_offset,
                "endOffset": md.end_offset,
                "maxTimestampMs": md.max_timestamp_ms,
                "brokerId": md.broker_id,
                "eventTimestampMs": md.event_timestamp_ms,
                "segmentSizeInBytes": md.segment_size_in_bytes,
                "segmentLeaderEpochs": {str(e): o for e, o in md.segment_leader_epochs.items()},
                "customMetadata": (
                    None
                    if md.custom_metadata is None
                    else base64.b64encode(md.custom_metadata).decode("ascii")
                ),
                "state": md.state.name,
                "txnIndexEmpty": md.txn_index_empty,
            },
            "objects": {
                s.value: {"key": e.key, "size": e.size, CHECKSUM_ALGORITHM: e.checksum}
                for s, e in self.objects.items()
            },
        }
        return json.dumps(doc, indent=2, sort_keys=False).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, source: str = "<manifest>") -> SegmentManifest:
        """Parse a manifest.

        Raises:
            ManifestError: not JSON, an unknown version, or a field missing or invalid.
        """
        try:
            doc = json.loads(data)
            if doc["version"] != MANIFEST_VERSION:
                raise ManifestError(f"{source}: unsupported manifest version {doc['version']!r}")
            if doc["checksumAlgorithm"] != CHECKSUM_ALGORITHM:
                raise ManifestError(
                    f"{source}: unsupported checksum algorithm {doc['checksumAlgorithm']!r}"
                )
            seg = doc["segment"]
            tp = TopicIdPartition(uuid_from_base64(seg["topicId"]), seg["topic"], seg["partition"])
            custom = seg["customMetadata"]
            metadata = RemoteLogSegmentMetadata(
                remote_log_segment_id=RemoteLogSegmentId(tp, uuid_from_base64(seg["segmentId"])),
                start_offset=seg["startOffset"],
                end_offset=seg["endOffset"],
                max_timestamp_ms=seg["maxTimestampMs"],
                broker_id=seg["brokerId"],
                event_timestamp_ms=seg["eventTimestampMs"],
                segment_size_in_bytes=seg["segmentSizeInBytes"],
                segment_leader_epochs={
                    int(e): int(o) for e, o in seg["segmentLeaderEpochs"].items()
                },
                custom_metadata=None if custom is None else base64.b64decode(custom),
                state=RemoteLogSegmentState[seg["state"]],
                txn_index_empty=bool(seg["txnIndexEmpty"]),
            )
            objects = {
                ObjectSuffix(s): ObjectEntry(e["key"], int(e["size"]), e[CHECKSUM_ALGORITHM])
                for s, e in doc["objects"].items()
            }
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
            raise ManifestError(f"{source}: not a valid segment manifest ({e!r})") from e
        return cls(metadata, objects)


# -- topic manifest -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicManifest:
    """The content of ``topic-manifest.json`` (see the module docstring)."""

    topic_id: uuid.UUID
    topic: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    updated_ms: int = 0
    broker_id: int = -1

    def __post_init__(self) -> None:
        if self.partitions <= 0:
            raise ValueError(f"partitions must be positive, got {self.partitions}")
        object.__setattr__(self, "configs", dict(sorted(self.configs.items())))

    def same_topic_state(self, other: TopicManifest) -> bool:
        """Whether ``other`` records the same topic, partition count and configs (when and
        by whom aside)."""
        return (self.topic_id, self.topic, self.partitions, dict(self.configs)) == (
            other.topic_id,
            other.topic,
            other.partitions,
            dict(other.configs),
        )

    def to_json(self) -> bytes:
        doc = {
            "version": TOPIC_MANIFEST_VERSION,
            "topicId": uuid_to_base64(self.topic_id),
            "topic": self.topic,
            "partitions": self.partitions,
            "configs": dict(self.configs),
            "updatedMs": self.updated_ms,
            "brokerId": self.broker_id,
        }
        return json.dumps(doc, indent=2).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, source: str = "<topic manifest>") -> TopicManifest:
        """Parse a topic manifest.

        Raises:
            ManifestError: not JSON, an unknown version, or a field missing or invalid.
        """
        try:
            doc = json.loads(data)
            if doc["version"] != TOPIC_MANIFEST_VERSION:
                raise ManifestError(
                    f"{source}: unsupported topic manifest version {doc['version']!r}"
                )
            configs = doc["configs"]
            if not isinstance(configs, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
            ):
                raise ManifestError(f"{source}: configs must map strings to strings")
            partitions = doc["partitions"]
            if not isinstance(partitions, int) or isinstance(partitions, bool):
                raise ManifestError(f"{source}: partitions must be an integer")
            return cls(
                topic_id=uuid_from_base64(doc["topicId"]),
                topic=str(doc["topic"]),
                partitions=partitions,
                configs=configs,
                updated_ms=int(doc["updatedMs"]),
                broker_id=int(doc["brokerId"]),
            )
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ManifestError(f"{source}: not a valid topic manifest ({e!r})") from e
