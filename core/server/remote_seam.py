"""The seam through which the broker reaches a remote tier (KIP-405), without knowing it.

core never imports ``tiered``: the RemoteLogManager implements this Protocol and the
composition root (``tierlog``) plugs it into the ReplicaManager when
``remote.log.storage.system.enable=true``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog, TimestampAndOffset
    from core.server.topics import TopicInfo

# ListOffsets special timestamp answered by the remote tier (KIP-1023).
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


class RemoteTier(Protocol):
    """What the broker asks of the remote tier."""

    async def read(
        self,
        topic_id: object,
        topic: str,
        partition: int,
        log: PartitionLog,
        fetch_offset: int,
        max_bytes: int,
    ) -> bytes:
        """Batches from the remote copy, starting at the batch holding ``fetch_offset``.

        For ``log.log_start_offset <= fetch_offset < log.local_log_start_offset``. At least
        one whole batch is returned; the bytes may end inside a batch (clients drop it).

        Raises:
            OffsetOutOfRangeError: no remote segment holds the offset.
            TimeoutError: the remote tier did not answer within remote.fetch.max.wait.ms.
            CoreError: any other failure, with its Kafka error code.
        """

    async def offset_for_timestamp(
        self, topic_id: object, topic: str, partition: int, log: PartitionLog, timestamp: int
    ) -> TimestampAndOffset | None:
        """ListOffsets over the remote segments: the first record at or after ``timestamp``,
        or for EARLIEST_PENDING_UPLOAD_TIMESTAMP the first offset not yet copied; None when
        the remote tier has no answer (the local log is asked next)."""

    def on_topic_created(self, topic: TopicInfo) -> None:
        """A topic was created or had its configs changed (tiering may begin)."""

    def on_topic_deleted(self, topic: TopicInfo) -> None:
        """A topic was deleted: its remote data goes (KIP-405's partition deletion)."""
