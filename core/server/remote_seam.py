"""The seam through which the broker reaches a remote tier (KIP-405), without knowing it.

core never imports ``tiered``: the composition root implements this Protocol
(``tierlog.remote_tier.RemoteStorageSystem``, reading through tiered's RemoteLogManager)
and plugs it into the ReplicaManager when ``remote.log.storage.system.enable=true``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncio

    from core.log.file_records import FileSlice
    from core.log.partition_log import PartitionLog, TimestampAndOffset
    from core.server.topics import TopicInfo

# ListOffsets special timestamp answered by the remote tier (KIP-1023).
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


@dataclass(frozen=True, slots=True)
class RemoteFetchResult:
    """What one remote read returns for one partition.

    ``records`` start at the batch holding the fetch offset and may end inside a batch
    (clients drop a partial tail): bytes read into memory, or a slice of a file the remote
    tier keeps on this machine (sent with ``sendfile`` as a local segment's slice is).
    ``aborted_txns`` are the (producer id, first offset) of the aborted transactions
    overlapping the records, for READ_COMMITTED fetches; None for READ_UNCOMMITTED ones.
    """

    records: bytes | FileSlice
    aborted_txns: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoteLogAuxState:
    """What a follower of a tiered partition takes from the remote tier instead of the
    records its leader keeps only there (Kafka's BuildingRemoteLogAux): the state after the
    remote segment holding the offset just below the leader's local log start.

    Attributes:
        next_offset: the offset after that segment (its end offset + 1), where the
            follower's log restarts and fetching resumes.
        leader_epochs: the segment's leader-epoch checkpoint, (epoch, start offset) pairs
            of every epoch up to ``next_offset``.
        producer_snapshot: the segment's producer snapshot (the state at ``next_offset``),
            in the snapshot file format.
    """

    next_offset: int
    leader_epochs: tuple[tuple[int, int], ...]
    producer_snapshot: bytes


@dataclass(frozen=True, slots=True)
class RemoteLogStart:
    """Where a leader whose local log is empty starts a tiered partition that already has
    remote segments (a topic restored from the bucket into a cluster, or every replica's
    disk lost): after the newest remote segment of the newest leader epoch.

    Attributes:
        log_start_offset: the first offset the remote tier holds (the log start offset;
            the remote tier serves [log_start_offset, state.next_offset)).
        state: that newest segment's end + 1, leader epochs and producer state.
    """

    log_start_offset: int
    state: RemoteLogAuxState


class RemoteTier(Protocol):
    """What the broker asks of the remote tier."""

    @property
    def fetch_max_wait_ms(self) -> int:
        """``remote.fetch.max.wait.ms``: how long a fetch waits for its remote reads."""

    def start_read(
        self,
        topic_id: object,
        topic: str,
        partition: int,
        log: PartitionLog,
        fetch_offset: int,
        max_bytes: int,
        *,
        read_committed: bool,
    ) -> asyncio.Future[RemoteFetchResult]:
        """Start reading from the remote copy at the batch holding ``fetch_offset``.

        For ``log.log_start_offset <= fetch_offset < log.local_log_start_offset``. Returns at
        once (the read runs on the remote tier's reader pool); the future completes on the
        event loop that called this. At least one whole batch is read even when larger than
        ``max_bytes``. Cancelling the future abandons the read (Kafka cancels the remote
        fetch task of an expired DelayedRemoteFetch the same way).

        Raises:
            CoreError: at once, when the read cannot be queued (KAFKA_STORAGE_ERROR).

        The future fails with:
            OffsetOutOfRangeError: no remote segment holds the offset.
            CoreError: a failure with its Kafka error code.
            Exception: any other failure of the remote tier (KAFKA_STORAGE_ERROR).
        """

    async def offset_for_timestamp(
        self, topic_id: object, topic: str, partition: int, log: PartitionLog, timestamp: int
    ) -> TimestampAndOffset | None:
        """ListOffsets over the remote segments: the first record at or after ``timestamp``,
        or for EARLIEST_PENDING_UPLOAD_TIMESTAMP the first offset not yet copied; None when
        the remote tier has no answer (the local log is asked next). For MAX_TIMESTAMP (-3)
        the first remote record carrying the largest remote timestamp, or None when the
        local log's own maximum already wins; the caller compares it with the local log's
        answer (the larger timestamp, the earlier record on ties)."""

    def on_topic_created(self, topic: TopicInfo) -> None:
        """A topic was created or had its configs changed (tiering may begin)."""

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        """A topic was deleted: its remote data goes (KIP-405's partition deletion)."""

    async def remote_log_aux_state(
        self, topic_id: object, topic: str, partition: int, epoch: int, offset: int
    ) -> RemoteLogAuxState:
        """The state a follower restores from the remote segment that holds ``offset`` in
        leader epoch ``epoch`` (an RLMM lookup, then the segment's leader-epoch checkpoint
        and producer snapshot from the remote storage manager).

        Raises:
            CoreError: no remote segment holds the offset (yet: the leader's metadata may
                not have reached this broker), or the remote tier failed
                (KAFKA_STORAGE_ERROR); the follower retries after its backoff.
        """

    async def remote_log_start(
        self, topic_id: object, topic: str, partition: int, timeout_s: float
    ) -> RemoteLogStart | None:
        """Where a leader with an empty local log must start the partition: after the
        newest COPY_SEGMENT_FINISHED segment of the newest leader epoch, or None when the
        remote tier holds no finished segment of it (a new topic). Waits up to
        ``timeout_s`` for this broker's metadata of the partition to have caught up.

        Raises:
            CoreError: the metadata did not catch up in time, or the remote tier failed
                (KAFKA_STORAGE_ERROR); the caller asks again.
        """
