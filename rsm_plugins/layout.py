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
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import crc32c

from core.kafka_uuid import uuid_from_base64, uuid_to_base64
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


def partition_prefix(key_prefix: str, tp: TopicIdPartition) -> str:
    """``<key.prefix><topic>-<topicId>/<partition>/``: the folder of a partition's objects."""
    return f"{key_prefix}{tp.topic}-{uuid_to_base64(tp.topic_id)}/{tp.partition}/"


def object_name(metadata: RemoteLogSegmentMetadata, suffix: ObjectSuffix) -> str:
    """``<startOffset:020d>-<segmentId>.<suffix>``, the name inside the partition folder."""
    return f"{metadata.start_offset:020d}-{uuid_to_base64(metadata.segment_id)}.{suffix.value}"


def object_key(key_prefix: str, metadata: RemoteLogSegmentMetadata, suffix: ObjectSuffix) -> str:
    """The full key of one object of a segment copy."""
    return partition_prefix(key_prefix, metadata.topic_id_partition) + object_name(metadata, suffix)


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
