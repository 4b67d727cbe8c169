"""KIP-405 contracts: the metadata types, their states, and the plugin interfaces.

Python versions of Apache Kafka's ``org.apache.kafka.server.log.remote.storage`` API
(RemoteStorageManager, RemoteLogMetadataManager and their value types), with Kafka's
semantics. Standard library only: every other layer plugs into this one.

Conventions:
    * Segment offsets are inclusive at both ends, as in Kafka's RemoteLogSegmentMetadata.
    * Byte ranges are half-open ``[start, end)`` like every byte range in tierlog's Python
      APIs. Kafka's Java RemoteStorageManager takes an inclusive end position; the one
      conversion lives in ``kafka_end_position`` / ``from_kafka_end_position``.
    * Metadata objects are frozen and check themselves on construction (``ValueError``);
      updates return new instances.
"""

from __future__ import annotations

import enum
import importlib
import itertools
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar, runtime_checkable

# -- errors ---------------------------------------------------------------------------------


class RemoteStorageError(Exception):
    """Base of every error raised by RSM and RLMM implementations (RemoteStorageException)."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The requested remote object does not exist (RemoteResourceNotFoundException)."""


class RetriableRemoteStorageError(RemoteStorageError):
    """A transient failure; the same call may succeed later (RetriableRemoteStorageException)."""


class InvalidStateTransitionError(RemoteStorageError):
    """A metadata event whose state does not follow the current one."""


class PluginLoadError(RemoteStorageError):
    """A ``*.class.name`` that cannot be imported, or does not implement the contract."""


# -- identities ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition of a topic, identified by topic id as well as name (Kafka's TopicIdPartition)."""

    topic_id: uuid.UUID
    topic: str
    partition: int

    def __post_init__(self) -> None:
        if not self.topic:
            raise ValueError("topic name must not be empty")
        if self.partition < 0:
            raise ValueError(f"partition must not be negative, got {self.partition}")

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """A remote segment: its partition and a uuid unique to one copy attempt."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate_new(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(topic_id_partition, uuid.uuid4())

    def __str__(self) -> str:
        return f"RemoteLogSegmentId{{topicIdPartition={self.topic_id_partition}, id={self.id}}}"


# -- states --------------------------------------------------------------------------------


class RemoteLogSegmentState(enum.IntEnum):
    """The lifecycle of a remote segment, with Kafka's byte ids.

    ::

        COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED
                 |                                             |
                 +---------------> DELETE_SEGMENT_STARTED      v
                                                     DELETE_SEGMENT_FINISHED

    A failed copy goes straight to deletion. Every state may repeat itself, so that a
    retried event is harmless (idempotent).
    """

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @staticmethod
    def is_valid_transition(
        source: RemoteLogSegmentState | None, target: RemoteLogSegmentState
    ) -> bool:
        """Kafka's RemoteLogSegmentState.isValidTransition; ``None`` is "no state yet"."""
        if source is None:
            return target == RemoteLogSegmentState.COPY_SEGMENT_STARTED
        return target in _SEGMENT_TRANSITIONS[source]


_S = RemoteLogSegmentState
_SEGMENT_TRANSITIONS: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    _S.COPY_SEGMENT_STARTED: frozenset(
        {_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}
    ),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
}


class RemotePartitionDeleteState(enum.IntEnum):
    """The lifecycle of deleting a partition's remote data, with Kafka's byte ids.

    ``DELETE_PARTITION_MARKED -> DELETE_PARTITION_STARTED -> DELETE_PARTITION_FINISHED``;
    each state may repeat itself.
    """

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    @staticmethod
    def is_valid_transition(
        source: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
    ) -> bool:
        if source is None:
            return target == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        return target >= source and target - source <= 1


class IndexType(enum.Enum):
    """The auxiliary files copied with a segment (Kafka's RemoteStorageManager.IndexType)."""

    OFFSET = "index"
    TIMESTAMP = "timeindex"
    PRODUCER_SNAPSHOT = "snapshot"
    TRANSACTION = "txnindex"
    LEADER_EPOCH = "leader-epoch-checkpoint"


# -- metadata ------------------------------------------------------------------------------


def _check_custom_metadata(custom: bytes | None) -> None:
    if custom is not None and not isinstance(custom, bytes):
        raise ValueError("custom metadata must be bytes or None")


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of a remote segment (never COPY_SEGMENT_STARTED: that is an add)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    def __post_init__(self) -> None:
        if self.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError("an update cannot have state COPY_SEGMENT_STARTED")
        _check_custom_metadata(self.custom_metadata)

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """What is known of one remote segment (Kafka's RemoteLogSegmentMetadata).

    Attributes:
        start_offset, end_offset: the segment's first and last offsets, both inclusive.
        max_timestamp_ms: the largest record timestamp in the segment.
        segment_leader_epochs: epoch -> start offset of every epoch with offsets in the
            segment, ascending by epoch (and so by offset); never empty.
        segment_size_in_bytes: the ``.log`` file's size.
        custom_metadata: bytes an RSM returned from ``copy_log_segment_data``, or None.
        txn_index_empty: True when the segment has no aborted transactions.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_index_empty: bool = False

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"start offset {self.start_offset} must not be negative")
        if self.end_offset < self.start_offset:
            raise ValueError(
                f"end offset {self.end_offset} must not be below start offset {self.start_offset}"
            )
        if self.segment_size_in_bytes < 0:
            raise ValueError(f"segment size {self.segment_size_in_bytes} must not be negative")
        if not self.segment_leader_epochs:
            raise ValueError("segment leader epochs must not be empty")
        epochs = list(self.segment_leader_epochs.items())
        if any(a >= b or oa > ob for (a, oa), (b, ob) in itertools.pairwise(epochs)):
            raise ValueError(f"segment leader epochs {dict(epochs)} are not ascending")
        _check_custom_metadata(self.custom_metadata)
        # A plain, ordered, private copy: callers may pass any mapping.
        object.__setattr__(self, "segment_leader_epochs", dict(epochs))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    @property
    def segment_id(self) -> uuid.UUID:
        return self.remote_log_segment_id.id

    def create_with_update(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """This metadata after ``update`` (a new instance).

        Raises:
            ValueError: the update is for another segment.
            InvalidStateTransitionError: the state does not follow the current one.
        """
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(
                f"update for {update.remote_log_segment_id} applied to {self.remote_log_segment_id}"
            )
        if not RemoteLogSegmentState.is_valid_transition(self.state, update.state):
            raise InvalidStateTransitionError(
                f"{self.remote_log_segment_id}: invalid transition {self.state.name} -> "
                f"{update.state.name}"
            )
        return replace(
            self,
            state=update.state,
            event_timestamp_ms=update.event_timestamp_ms,
            broker_id=update.broker_id,
            custom_metadata=(
                update.custom_metadata
                if update.custom_metadata is not None
                else self.custom_metadata
            ),
        )


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """A step of deleting a partition's remote data."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The local files of a segment handed to ``copy_log_segment_data``.

    ``transaction_index`` is None when the segment has no aborted transactions; the leader
    epochs are the checkpoint's bytes truncated to the segment (``leader-epoch-checkpoint``
    format), as Kafka passes a ByteBuffer.
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes = field(repr=False)


# -- byte ranges ---------------------------------------------------------------------------


def kafka_end_position(end_exclusive: int) -> int:
    """Our half-open ``[start, end)`` end as Kafka's inclusive end position (end - 1)."""
    return end_exclusive - 1


def from_kafka_end_position(end_inclusive: int) -> int:
    """Kafka's inclusive end position as our exclusive end (end + 1)."""
    return end_inclusive + 1


# -- plugin contracts ----------------------------------------------------------------------


class RemoteStorageManager(ABC):
    """Copies segments to a remote store and reads them back (Kafka's RemoteStorageManager).

    Implementations are loaded by dotted path from ``remote.log.storage.manager.class.name``
    and configured with the broker's ``rsm.config.*`` properties, prefix stripped. They must
    be safe to call from several threads at once.
    """

    def configure(self, configs: Mapping[str, str]) -> None:  # noqa: B027 - optional hook
        """Receive the plugin's settings before any other call.

        Raises:
            RemoteStorageError: a missing or invalid setting, or an unreachable store,
                naming the setting; the broker does not start.
        """

    @abstractmethod
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        """Copy a segment's log, indexes, producer snapshot and leader epochs.

        Idempotent: copying the same ``metadata`` again overwrites or keeps the same objects.
        Objects are identified by ``metadata.remote_log_segment_id``; a partial copy left by
        a failure is cleaned up by ``delete_log_segment_data``.

        Returns:
            Custom metadata to keep with the segment (bytes), or None.

        Raises:
            RetriableRemoteStorageError: a transient failure; the copy may be retried.
            RemoteStorageError: any other failure.
        """

    def copy_log_segments_data(
        self, segments: Sequence[tuple[RemoteLogSegmentMetadata, LogSegmentData]]
    ) -> list[bytes | None]:
        """Copy several segments (``copy_log_segment_data`` of each); returns each one's
        custom metadata, in order. Not part of Kafka's interface: the copy task calls it
        with the segments it copies together, so that a plugin may make them durable
        together (one round of syncs for the lot instead of one per segment). The default
        copies them one by one.

        Raises:
            RemoteStorageError: a copy failed; any of the segments may be partly copied
                (the caller deletes them all).
        """
        return [self.copy_log_segment_data(md, data) for md, data in segments]

    @abstractmethod
    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """A stream over the segment's ``.log`` bytes ``[start_position, end_position)``.

        Args:
            start_position: the first byte, inclusive (0-based).
            end_position: the end, exclusive; None reads to the end of the segment. Kafka's
                Java API takes an inclusive end: see ``kafka_end_position``.

        Returns:
            A readable binary stream the caller closes. Fewer bytes than asked are returned
            only at the end of the segment.

        Raises:
            RemoteResourceNotFoundError: the segment's log object does not exist.
            ValueError: a negative start, or an end below the start.
            RemoteStorageError: any other failure.
        """

    @abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        """A stream over one auxiliary file of the segment.

        Raises:
            RemoteResourceNotFoundError: the index does not exist; always so for a
                TRANSACTION index of a segment copied without one, never None.
            RemoteStorageError: any other failure.
        """

    @abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment.

        Idempotent: deleting a segment that is partly or wholly gone succeeds.

        Raises:
            RetriableRemoteStorageError: a transient failure; the delete may be retried.
            RemoteStorageError: any other failure.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and threads; no call follows."""


@runtime_checkable
class LogSegmentFiles(Protocol):
    """An optional capability of a RemoteStorageManager whose ``.log`` objects are files on
    this machine (the local-directory plugin): the broker may send a fetch's bytes straight
    from the object's file (``sendfile``) instead of reading them into memory. Not part of
    Kafka's interface; the broker probes for it (``isinstance``) and reads through
    ``fetch_log_segment`` when a plugin lacks it or answers None.
    """

    def open_log_segment_file(
        self, metadata: RemoteLogSegmentMetadata, *, only_if_verified: bool = False
    ) -> int | None:
        """A new read-only descriptor of the segment's whole ``.log`` object, owned by the
        caller, whose bytes match the copy's size and checksum: the plugin checks the file
        when it first opens it and again whenever the file changed since (a copy finished
        is immutable, so a sequential reader pays one check per segment). A corrupt object
        is never handed out.

        Args:
            only_if_verified: answer None instead of checking a file not checked yet (and
                instead of fetching a manifest not in memory): a caller that must not
                block on a whole-file read (the event loop) asks this way first.

        Returns:
            The descriptor, or None when this plugin cannot hand out the object's file
            (client-side encryption: the file is not the log's bytes) or, with
            ``only_if_verified``, when that would need a check or a manifest read.

        Raises:
            RemoteResourceNotFoundError: the object (or its manifest) does not exist.
            RemoteStorageError: the object does not match its manifest, or another failure.
        """


class RemoteLogMetadataManager(ABC):
    """The strongly consistent record of remote segments (Kafka's RemoteLogMetadataManager).

    Loaded from ``remote.log.metadata.manager.class.name`` and configured with the
    ``rlmm.config.*`` properties, prefix stripped. Writes return futures that complete once
    the event is durable and, for a partition whose metadata is loaded here, visible to this
    manager's own reads. ``tests/rlmm/rlmm_contract.py`` checks every implementation against
    these docstrings.
    """

    def configure(self, configs: Mapping[str, str]) -> None:  # noqa: B027 - optional hook
        """Receive the plugin's settings before any other call.

        Raises:
            RemoteStorageError: a missing or invalid setting.
        """

    @abstractmethod
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> Future[None]:
        """Record a new segment copy; ``metadata.state`` must be COPY_SEGMENT_STARTED.

        Adding a segment id again is idempotent while it is COPY_SEGMENT_STARTED (the new
        metadata replaces the old); a segment already in a later state stays as it is.

        Raises:
            ValueError: any other state (raised at once, not through the future).

        The future fails with:
            RemoteStorageError: the event could not be stored.
        """

    @abstractmethod
    def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> Future[None]:
        """Record a state change of a known segment (``RemoteLogSegmentState``'s
        transitions). A repeated state is idempotent: it succeeds again.

        The future fails with:
            RemoteResourceNotFoundError: no such segment (never added, or already
                DELETE_SEGMENT_FINISHED), or its partition's metadata is not loaded here.
            InvalidStateTransitionError: the state does not follow the current one.
            RemoteStorageError: the event could not be stored.
        """

    def update_remote_log_segment_metadata_in_order(
        self, updates: Sequence[RemoteLogSegmentMetadataUpdate]
    ) -> Future[None]:
        """Record several state changes of one partition's segments, stored in the order
        given: a crash never keeps a later one and loses an earlier one. The future
        completes once all are durable and visible (as ``update_remote_log_segment_metadata``)
        and fails with the first failure; the updates before it may be stored.

        Not part of Kafka's interface (the copy task records a batch's
        COPY_SEGMENT_FINISHED events with it). This default stores them one after another,
        in the calling thread, each once the previous one's future completed; a manager may
        store them together (the topic-based one appends them in order and syncs once)."""
        done: Future[None] = Future()
        try:
            for update in updates:
                self.update_remote_log_segment_metadata(update).result()
        except RemoteStorageError as e:  # the future carries it, as the single one does
            done.set_exception(e)
        else:
            done.set_result(None)
        return done

    @abstractmethod
    def remote_log_segment_metadata(
        self, topic_id_partition: TopicIdPartition, epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` in leader epoch ``epoch``.

        Segments in any other state are never returned. None when no such segment exists.

        Raises:
            RemoteResourceNotFoundError: the partition's remote data was deleted
                (DELETE_PARTITION_FINISHED).
            RemoteStorageError: the partition's metadata is not loaded (not ``is_ready``).
        """

    @abstractmethod
    def highest_offset_for_epoch(
        self, topic_id_partition: TopicIdPartition, epoch: int
    ) -> int | None:
        """The highest offset in remote storage (COPY_SEGMENT_FINISHED) for ``epoch``, or None.

        Raises:
            RemoteResourceNotFoundError: the partition's remote data was deleted.
            RemoteStorageError: the partition's metadata is not loaded (not ``is_ready``).
        """

    @abstractmethod
    def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> Future[None]:
        """Record a step of deleting a partition's remote data: DELETE_PARTITION_MARKED ->
        STARTED -> FINISHED, each repeatable. FINISHED drops the partition's metadata. A step
        that does not follow the current one is stored but not applied (the state stays).

        The future fails with:
            RemoteStorageError: the event could not be stored.
        """

    @abstractmethod
    def list_remote_log_segments(
        self, topic_id_partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """Every known segment of the partition in any state, sorted by start offset (then by
        segment id, a stable order that paging cursors rely on); with ``leader_epoch``, only
        the segments holding offsets of that epoch.

        Raises:
            RemoteResourceNotFoundError: the partition's remote data was deleted.
            RemoteStorageError: the partition's metadata is not loaded (not ``is_ready``).
        """

    @abstractmethod
    def on_partition_leadership_changes(
        self, leader_partitions: set[TopicIdPartition], follower_partitions: set[TopicIdPartition]
    ) -> None:
        """This broker now leads or follows these partitions: load their metadata (``is_ready``
        turns true once loaded). Partitions already loaded are left as they are.

        Raises:
            RemoteStorageError: the metadata could not be reached.
        """

    @abstractmethod
    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        """This broker no longer hosts these partitions: drop their metadata (``is_ready``
        turns false). Unknown partitions are ignored. Raises nothing."""

    @abstractmethod
    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        """Total bytes of the COPY_SEGMENT_FINISHED segments holding offsets of the epoch.

        Raises:
            RemoteResourceNotFoundError: the partition's remote data was deleted.
            RemoteStorageError: the partition's metadata is not loaded (not ``is_ready``).
        """

    @abstractmethod
    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """True once the partition's metadata has caught up with what was stored, until it is
        stopped. Raises nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; no call follows."""


# -- plugin loading ------------------------------------------------------------------------

P = TypeVar("P")

RSM_CLASS_NAME = "remote.log.storage.manager.class.name"
RLMM_CLASS_NAME = "remote.log.metadata.manager.class.name"
RSM_CONFIG_PREFIX = "rsm.config."
RLMM_CONFIG_PREFIX = "rlmm.config."


def prefixed_configs(props: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The properties starting with ``prefix``, with the prefix stripped (Kafka's rule)."""
    return {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}


def load_plugin(class_name: str, base: type[P], *, key: str) -> P:
    """Import ``module.Class`` and instantiate it with no arguments.

    Args:
        class_name: the dotted path from the config.
        base: the contract the class must implement.
        key: the config key that named it, for the error message.

    Raises:
        PluginLoadError: the module or class cannot be found, an import inside the module
            failed (with the import's own message, which names the pip extra to install when
            the plugin needs one), or the class does not implement ``base``.
    """
    module_name, _, attr = class_name.rpartition(".")
    if not module_name:
        raise PluginLoadError(f"{key}={class_name!r} is not a dotted path module.Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise PluginLoadError(f"{key}={class_name}: cannot import {module_name}: {e}") from e
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise PluginLoadError(f"{key}={class_name}: {module_name} has no class {attr}")
    if not issubclass(cls, base):
        raise PluginLoadError(f"{key}={class_name} does not implement {base.__name__}")
    return cls()
