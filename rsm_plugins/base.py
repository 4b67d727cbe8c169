"""``ObjectStoreRemoteStorageManager``: the RSM contract over a small ``ObjectStore``.

Each plugin supplies its settings and a store; this class owns the object layout
(``layout``), the manifest, integrity checks and the contract's bounds and errors:

* copy: each file is streamed once into the store, which returns the size and CRC32C of what
  it stored; the manifest goes last, so its presence means the copy completed. A repeated copy
  of the same segment id rewrites the same objects (idempotent). Segments copied together
  (``copy_log_segments_data``, as the copy task does) share the store's syncs: every object
  of every segment in one ``put_objects``, then every manifest in another.
* fetch_log_segment: a ranged read of the ``.log`` object; a read of the whole object from
  position 0 is checked against the manifest's size and checksum as it streams.
* fetch_index: the object is read whole and checked against the manifest before it is
  served; a mismatch raises ``CorruptObjectError`` (a ``RemoteStorageError``).
* delete: the manifest first (the copy no longer counts as complete), then the rest; missing
  objects are fine (idempotent).
* ``rsm.config.encryption.enabled``: the store is wrapped in ``EncryptingStore`` (client-side
  AES-256-GCM, see ``rsm_plugins.encryption``); sizes and checksums stay the plaintext's.
  Manifests (segment and topic) stay plain JSON, so a bucket can be audited without the key.
* topic manifests (``write_topic_manifest``, ``read_topic_manifest``,
  ``delete_topic_manifest``): the broker's record of a tiered topic's partition count and
  configs in the bucket, which ``tierlog restore`` needs. Not part of Kafka's RSM contract:
  the broker writes them only through plugins of this class.
"""

from __future__ import annotations

import io
import threading
import uuid
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from core.config import ConfigDef, ConfigKey, ConfigType, at_least
from core.errors import InvalidConfigError
from rsm_plugins.encryption import EncryptingStore, load_key_file
from rsm_plugins.layout import (
    CHECKSUM_ALGORITHM,
    TOPIC_MANIFEST_NAME,
    CorruptObjectError,
    ObjectEntry,
    ObjectSuffix,
    SegmentManifest,
    TopicManifest,
    object_key,
    object_name,
    partition_prefix,
    topic_manifest_key,
)
from rsm_plugins.store import ObjectStore, VerifyingReader, buffered
from tiered.api import (
    RSM_CONFIG_PREFIX,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)

KEY_PREFIX = "key.prefix"
MANIFEST_CACHE_SIZE = "fetch.manifest.cache.size"
ENCRYPTION_ENABLED = "encryption.enabled"
ENCRYPTION_KEY_FILE = "encryption.key.file"
ENCRYPTION_KEY_ID = "encryption.key.id"

COMMON_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        RSM_CONFIG_PREFIX + KEY_PREFIX,
        ConfigType.STRING,
        "",
        "Prefix of every object key (a folder when it ends with '/').",
    ),
    ConfigKey(
        RSM_CONFIG_PREFIX + MANIFEST_CACHE_SIZE,
        ConfigType.INT,
        1000,
        "Segment manifests kept in memory for index fetches (0 disables the cache).",
        at_least(0),
    ),
    ConfigKey(
        RSM_CONFIG_PREFIX + ENCRYPTION_ENABLED,
        ConfigType.BOOLEAN,
        False,
        "Encrypt every object but the manifest client-side (AES-256-GCM, a data key per "
        "object wrapped with the key of encryption.key.file).",
    ),
    ConfigKey(
        RSM_CONFIG_PREFIX + ENCRYPTION_KEY_FILE,
        ConfigType.STRING,
        None,
        "File holding the key-encryption key: 32 random bytes, base64.",
    ),
    ConfigKey(
        RSM_CONFIG_PREFIX + ENCRYPTION_KEY_ID,
        ConfigType.STRING,
        "default",
        "Name of that key, stored in each object (objects of another key id are refused).",
    ),
)


def setting(name: str) -> str:
    """The broker property a plugin setting comes from (``rsm.config.`` + name)."""
    return RSM_CONFIG_PREFIX + name


def parse_settings(keys: Sequence[ConfigKey], configs: Mapping[str, str]) -> dict[str, Any]:
    """Parse prefix-stripped ``configs`` against ``keys`` (named with the ``rsm.config.`` prefix).

    Unknown settings are ignored, as Kafka's ConfigDef does (other plugins may share the
    prefix). Returns the values by stripped name.

    Raises:
        RemoteStorageError: an invalid value, naming the full ``rsm.config.*`` key.
    """
    try:
        values = ConfigDef(keys).parse(
            {setting(k): v for k, v in configs.items()}, ignore_unknown=True
        )
    except InvalidConfigError as e:
        raise RemoteStorageError(str(e)) from e
    return {k[len(RSM_CONFIG_PREFIX) :]: v for k, v in values.items()}


def require(values: Mapping[str, Any], name: str, what: str) -> Any:
    """``values[name]``, which must be set and not empty.

    Raises:
        RemoteStorageError: naming ``rsm.config.<name>`` and saying what it is.
    """
    value = values.get(name)
    if value is None or value == "":
        raise RemoteStorageError(f"Missing required configuration {setting(name)}: {what}")
    return value


class ObjectStoreRemoteStorageManager(RemoteStorageManager):
    """A RemoteStorageManager storing each segment as objects of ``layout``.

    Subclasses declare ``CONFIG_KEYS`` (named with the ``rsm.config.`` prefix) and build
    their store in ``create_store``. Thread-safe once configured.
    """

    CONFIG_KEYS: ClassVar[tuple[ConfigKey, ...]] = ()

    def __init__(self) -> None:
        self._store_: ObjectStore | None = None
        self._key_prefix = ""
        self._manifests: OrderedDict[Any, SegmentManifest] = OrderedDict()
        self._manifests_max = 0
        self._lock = threading.Lock()

    # -- plugin hooks -----------------------------------------------------------------------

    @abstractmethod
    def create_store(self, values: Mapping[str, Any]) -> ObjectStore:
        """Build (and check) the store from the parsed settings, keyed by stripped name.

        Raises:
            RemoteStorageError: a missing setting, a missing bucket or an unreachable
                endpoint, naming the setting.
        """

    # -- contract ---------------------------------------------------------------------------

    def configure(self, configs: Mapping[str, str]) -> None:
        values = parse_settings(COMMON_KEYS + self.CONFIG_KEYS, configs)
        self._key_prefix = values[KEY_PREFIX]
        self._manifests_max = values[MANIFEST_CACHE_SIZE]
        store = self.create_store(values)
        if values[ENCRYPTION_ENABLED]:
            path = require(values, ENCRYPTION_KEY_FILE, "the key file for encryption.enabled")
            key_id = require(values, ENCRYPTION_KEY_ID, "a name for the encryption key")
            store = EncryptingStore(
                store,
                load_key_file(Path(path), setting(ENCRYPTION_KEY_FILE)),
                key_id,
                encrypts=lambda key: not is_manifest_key(key),
            )
        self._store_ = store

    @property
    def store(self) -> ObjectStore:
        if self._store_ is None:
            raise RemoteStorageError(f"{type(self).__name__} is not configured")
        return self._store_

    @property
    def key_prefix(self) -> str:
        return self._key_prefix

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        return self.copy_log_segments_data([(metadata, segment_data)])[0]

    def copy_log_segments_data(
        self, segments: Sequence[tuple[RemoteLogSegmentMetadata, LogSegmentData]]
    ) -> list[bytes | None]:
        """Every object of every segment in one ``put_objects`` call, then their manifests
        in another: a store makes each call's objects durable together, and a manifest is
        stored only once all the objects it lists are."""
        store = self.store
        puts: list[tuple[str, Path | bytes]] = []
        per_segment: list[list[ObjectSuffix]] = []
        for metadata, segment_data in segments:
            files: list[tuple[ObjectSuffix, Path]] = [
                (ObjectSuffix.LOG, segment_data.log_segment),
                (ObjectSuffix.OFFSET_INDEX, segment_data.offset_index),
                (ObjectSuffix.TIME_INDEX, segment_data.time_index),
                (ObjectSuffix.PRODUCER_SNAPSHOT, segment_data.producer_snapshot_index),
            ]
            if segment_data.transaction_index is not None:
                files.append((ObjectSuffix.TRANSACTION_INDEX, segment_data.transaction_index))
            for _, path in files:
                if not path.is_file():
                    raise RemoteStorageError(
                        f"{metadata.remote_log_segment_id}: no local file {path}"
                    )
            items: list[tuple[ObjectSuffix, Path | bytes]] = [
                *files,
                (ObjectSuffix.LEADER_EPOCH, bytes(segment_data.leader_epoch_index)),
            ]
            per_segment.append([suffix for suffix, _ in items])
            puts.extend((self._key(metadata, suffix), src) for suffix, src in items)
        stored = iter(store.put_objects(puts))
        manifests = [
            SegmentManifest(
                metadata,
                {
                    suffix: ObjectEntry(object_name(metadata, suffix), *next(stored))
                    for suffix in suffixes
                },
            )
            for (metadata, _), suffixes in zip(segments, per_segment, strict=True)
        ]
        store.put_objects(
            [(self._key(m.metadata, ObjectSuffix.MANIFEST), m.to_json()) for m in manifests]
        )
        for manifest in manifests:
            self._remember(manifest.metadata, manifest)
        return [None] * len(segments)

    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        if start_position < 0:
            raise ValueError(f"start position {start_position} must not be negative")
        if end_position is not None and end_position < start_position:
            raise ValueError(f"end position {end_position} is below start {start_position}")
        key = self._key(metadata, ObjectSuffix.LOG)
        if start_position == 0 and end_position is None:
            entry = self.manifest(metadata).objects.get(ObjectSuffix.LOG)
            if entry is None:
                raise CorruptObjectError(f"{key}: the manifest has no log entry")
            raw = self.store.get_range(key, 0, None)
            return buffered(VerifyingReader(raw, entry.size, entry.checksum, _mismatch(key, entry)))
        return self.store.get_range(key, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        suffix = ObjectSuffix.of_index(index_type)
        manifest = self.manifest(metadata)
        entry = manifest.objects.get(suffix)
        if entry is None:
            raise RemoteResourceNotFoundError(
                f"{metadata.remote_log_segment_id}: no {index_type.name} index "
                f"(the segment was copied without one)"
            )
        key = partition_prefix(self._key_prefix, metadata.topic_id_partition) + entry.key
        data = self.store.get_bytes(key)
        entry.verify(data, key)
        return io.BytesIO(data)

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        with self._lock:
            self._manifests.pop(metadata.remote_log_segment_id, None)
        # The manifest first: from then on the copy no longer counts as complete.
        rest = [s for s in ObjectSuffix if s is not ObjectSuffix.MANIFEST]
        self.store.delete([self._key(metadata, s) for s in (ObjectSuffix.MANIFEST, *rest)])

    def close(self) -> None:
        if self._store_ is not None:
            self._store_.close()

    # -- topic manifests --------------------------------------------------------------------

    def write_topic_manifest(self, manifest: TopicManifest) -> None:
        """Store ``manifest`` as the topic's ``topic-manifest.json``, replacing any.

        Raises:
            RemoteStorageError: the store failed.
        """
        key = topic_manifest_key(self._key_prefix, manifest.topic, manifest.topic_id)
        self.store.put_bytes(key, manifest.to_json())

    def read_topic_manifest(self, topic: str, topic_id: uuid.UUID) -> TopicManifest | None:
        """The topic's manifest, or None when it has none.

        Raises:
            ManifestError: the object is not a valid topic manifest.
            RemoteStorageError: the store failed.
        """
        key = topic_manifest_key(self._key_prefix, topic, topic_id)
        try:
            data = self.store.get_bytes(key)
        except RemoteResourceNotFoundError:
            return None
        return TopicManifest.from_json(data, key)

    def delete_topic_manifest(self, topic: str, topic_id: uuid.UUID) -> None:
        """Delete the topic's manifest; a missing one is not an error.

        Raises:
            RemoteStorageError: the store failed.
        """
        self.store.delete([topic_manifest_key(self._key_prefix, topic, topic_id)])

    # -- manifests --------------------------------------------------------------------------

    def manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest:
        """The segment's manifest (cached).

        Raises:
            RemoteResourceNotFoundError: no manifest: the segment was never copied completely
                or was deleted.
            RemoteStorageError: the manifest is not valid (``ManifestError``).
        """
        segment_id = metadata.remote_log_segment_id
        with self._lock:
            cached = self._manifests.get(segment_id)
            if cached is not None:
                self._manifests.move_to_end(segment_id)
                return cached
        key = self._key(metadata, ObjectSuffix.MANIFEST)
        manifest = SegmentManifest.from_json(self.store.get_bytes(key), key)
        if manifest.metadata.remote_log_segment_id != segment_id:
            raise CorruptObjectError(
                f"{key}: holds segment {manifest.metadata.remote_log_segment_id}"
            )
        self._remember(metadata, manifest)
        return manifest

    def _remember(self, metadata: RemoteLogSegmentMetadata, manifest: SegmentManifest) -> None:
        if self._manifests_max <= 0:
            return
        with self._lock:
            self._manifests[metadata.remote_log_segment_id] = manifest
            self._manifests.move_to_end(metadata.remote_log_segment_id)
            while len(self._manifests) > self._manifests_max:
                self._manifests.popitem(last=False)

    def _key(self, metadata: RemoteLogSegmentMetadata, suffix: ObjectSuffix) -> str:
        return object_key(self._key_prefix, metadata, suffix)


def is_manifest_key(key: str) -> bool:
    """Whether ``key`` is a segment's or a topic's manifest (kept as plain JSON)."""
    return key.endswith(("." + ObjectSuffix.MANIFEST.value, "/" + TOPIC_MANIFEST_NAME))


def _mismatch(key: str, entry: ObjectEntry) -> Callable[[int, str], RemoteStorageError]:
    def error(size: int, crc: str) -> RemoteStorageError:
        return CorruptObjectError(
            f"{key}: read {size} bytes with {CHECKSUM_ALGORITHM} {crc}; the manifest says "
            f"{entry.size} bytes, {entry.checksum}"
        )

    return error
