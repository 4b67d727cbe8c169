"""One partition's fetch from the remote tier, as the reader handles it: what it asks
(``RemoteFetchRequest``, passed whole from step to step) and the future that answers it
when the reader pool serves it (``FetchFuture``).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.server.remote_seam import RemoteFetchResult
from tiered.api import TopicIdPartition

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog


@dataclass(frozen=True, slots=True)
class RemoteFetchRequest:
    """What a fetch asks of the remote tier for one partition (Kafka hands its remote reads
    a ``RemoteStorageFetchInfo`` of the same kind).

    Attributes:
        tp: the partition.
        plog: its log, for the leader-epoch lineage and the local log start offset.
        fetch_offset: the first offset asked for; the answer starts at the batch holding it.
        max_bytes: how many bytes the answer holds at most (at least one whole batch).
        read_committed: a READ_COMMITTED fetch, answered with the aborted transactions
            overlapping its records.
    """

    tp: TopicIdPartition
    plog: PartitionLog
    fetch_offset: int
    max_bytes: int
    read_committed: bool = False


class FetchFuture(Future[RemoteFetchResult]):
    """A fetch on the reader pool. ``cancel`` by its waiter (the broker cancels a read
    that misses ``remote.fetch.max.wait.ms``, or whose client has gone) cancels the queued
    task; a read already running cannot be stopped, but it is marked abandoned, so that it
    reads nothing ahead."""

    def __init__(self) -> None:
        super().__init__()
        self.task: Future[None] | None = None
        self._abandoned = False

    def cancel(self) -> bool:
        self._abandoned = True
        if self.task is not None:
            self.task.cancel()
        return super().cancel()

    def is_abandoned(self) -> bool:
        return self._abandoned

    def fail(self, error: BaseException) -> None:
        """Fail the fetch unless its waiter cancelled it first."""
        if self.set_running_or_notify_cancel():
            self.set_exception(error)
