"""Transaction markers: the coordinator's COMMIT and ABORT records in the partitions of a
transaction (Kafka's TransactionMarkerChannelManager).

Partitions this broker leads get their markers in-process (``write_local_markers``, the
same function that serves WriteTxnMarkers); partitions led elsewhere get a WriteTxnMarkers
request over the inter-broker client, one per leader. A marker is retried, with a backoff,
until every partition answered NONE, or an error that means the marker is no longer needed
(the topic or partition is gone; an older producer epoch or coordinator epoch: a newer
marker was written). Retriable errors (no leader yet, not the leader, a closed connection)
wait and try again, as Kafka's channel does, for as long as this coordinator stays in
charge of the transaction (``still_needed``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from core.errors import CoreError
from core.records.builder import build_control_batch
from core.records.record import ControlRecordType
from core.server.api_keys import ApiKey
from core.server.broker_connection import BrokerClientError
from core.server.kio_build import make, nested
from core.server.protocol import load_request_schema

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
WRITE_TXN_MARKERS_VERSIONS = (1, 1)
RETRY_BACKOFF_S = 0.1

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
INVALID_PRODUCER_EPOCH = 47
TRANSACTION_COORDINATOR_FENCED = 52
# Answers after which the marker is not sent again (Kafka's TransactionMarkerRequest
# CompletionHandler drops the partition for these).
FINAL_ERRORS = frozenset({UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH,
                          TRANSACTION_COORDINATOR_FENCED})  # fmt: skip


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One transaction's end, for a set of partitions."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


class MarkerPartitions(Protocol):
    """What writing markers in-process needs of the broker."""

    def append_marker(self, topic: str, index: int, batch: bytearray) -> int:
        """Append a marker batch to a partition this broker leads; returns the log end
        offset after it.

        Raises:
            LookupError: this broker does not lead the partition (or it does not exist).
            CoreError: the log refused the batch (its Kafka error code says why).
        """
        ...

    async def wait_marker_replicated(self, topic: str, index: int, end: int) -> int:
        """Wait until the partition's in-sync replicas have its log up to ``end``; the
        error code (0: replicated)."""
        ...


async def write_replicated_markers(
    partitions: MarkerPartitions,
    marker: TxnMarker,
    *,
    on_written: Callable[[TopicPartition, TxnMarker], None] | None = None,
    exists: Callable[[str, int], bool] | None = None,
) -> dict[TopicPartition, int]:
    """``write_local_markers``, then wait for the markers' replication (Kafka appends them
    with acks=all and answers WriteTxnMarkers after): a marker that only the leader has
    could be lost with it, and the transaction would stay open. Error code per partition."""
    ends: dict[TopicPartition, int] = {}
    results = write_local_markers(
        partitions, marker, on_written=on_written, exists=exists, ends=ends
    )
    if ends:
        waited = await asyncio.gather(
            *(partitions.wait_marker_replicated(t, i, end) for (t, i), end in ends.items())
        )
        for tp, code in zip(ends, waited, strict=True):
            if code:
                results[tp] = code
    return results


def write_local_markers(
    partitions: MarkerPartitions,
    marker: TxnMarker,
    *,
    on_written: Callable[[TopicPartition, TxnMarker], None] | None = None,
    exists: Callable[[str, int], bool] | None = None,
    ends: dict[TopicPartition, int] | None = None,
) -> dict[TopicPartition, int]:
    """Append ``marker`` to each of its partitions here; the error code per partition
    (``ends`` is given the log end offset after each marker appended).

    ``on_written`` is told of each marker appended (the group coordinator completes the
    transactional offset commits of ``__consumer_offsets`` partitions with it).
    ``exists`` tells a partition led elsewhere (NOT_LEADER_OR_FOLLOWER) from one that
    does not exist (UNKNOWN_TOPIC_OR_PARTITION).
    """
    control = ControlRecordType.COMMIT if marker.commit else ControlRecordType.ABORT
    results: dict[TopicPartition, int] = {}
    for tp in sorted(marker.partitions):
        batch = build_control_batch(
            control,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
        )
        try:
            end = partitions.append_marker(tp[0], tp[1], batch)
        except LookupError:
            known = exists is not None and exists(*tp)
            results[tp] = NOT_LEADER_OR_FOLLOWER if known else UNKNOWN_TOPIC_OR_PARTITION
            continue
        except CoreError as e:
            log.debug("marker for producer %d in %s-%d refused: %s", marker.producer_id, *tp, e)
            results[tp] = e.error_code
            continue
        results[tp] = NONE
        if ends is not None:
            ends[tp] = end
        if on_written is not None:
            on_written(tp, marker)
    return results


class MarkerChannel:
    """Sends a transaction's markers until they are written (or no longer needed).

    Args:
        local: writes markers in partitions this broker leads.
        leader_of: the endpoint of a partition's leader when another broker leads it;
            None when this broker does (or nobody is known to: the local write says which).
        node_client: the inter-broker client (None on a broker without peers).
        on_written, exists: passed to ``write_local_markers``.
    """

    def __init__(
        self,
        local: MarkerPartitions,
        *,
        leader_of: Callable[[TopicPartition], Any | None] = lambda tp: None,
        node_client: Any | None = None,
        on_written: Callable[[TopicPartition, TxnMarker], None] | None = None,
        exists: Callable[[str, int], bool] | None = None,
    ) -> None:
        self._local = local
        self._leader_of = leader_of
        self._node_client = node_client
        self._on_written = on_written
        self._exists = exists

    def set_node_client(self, node_client: Any) -> None:
        """The inter-broker client, once the broker joins a cluster."""
        self._node_client = node_client

    async def send(self, marker: TxnMarker, still_needed: Callable[[], bool]) -> bool:
        """Write ``marker`` everywhere; True once done, False if ``still_needed`` turned
        false first (the coordinator lost the transaction's partition)."""
        remaining = set(marker.partitions)
        while remaining:
            if not still_needed():
                return False
            by_leader: dict[Any, set[TopicPartition]] = {}
            for tp in remaining:
                by_leader.setdefault(self._leader_of(tp), set()).add(tp)
            for leader, tps in by_leader.items():
                part = TxnMarker(
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.coordinator_epoch,
                    marker.commit,
                    frozenset(tps),
                )
                if leader is None:
                    results = await write_replicated_markers(
                        self._local, part, on_written=self._on_written, exists=self._exists
                    )
                else:
                    results = await self._send_remote(leader, part)
                for tp, code in results.items():
                    if code == NONE or code in FINAL_ERRORS:
                        if code != NONE:
                            log.info(
                                "marker for producer %d not written in %s-%d (error %d); "
                                "not needed any more",
                                marker.producer_id,
                                *tp,
                                code,
                            )
                        remaining.discard(tp)
            if remaining:
                await asyncio.sleep(RETRY_BACKOFF_S)
        return True

    async def _send_remote(self, leader: Any, marker: TxnMarker) -> dict[TopicPartition, int]:
        if self._node_client is None:
            return dict.fromkeys(marker.partitions, NOT_LEADER_OR_FOLLOWER)

        def build(version: int) -> Any:
            request_type = load_request_schema(ApiKey.WRITE_TXN_MARKERS, version)
            marker_cls = nested(request_type, "WritableTxnMarker")
            topic_cls = nested(request_type, "WritableTxnMarkerTopic")
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(marker.partitions):
                by_topic.setdefault(topic, []).append(index)
            return make(
                request_type,
                markers=(
                    make(
                        marker_cls,
                        producer_id=marker.producer_id,
                        producer_epoch=marker.producer_epoch,
                        transaction_result=marker.commit,
                        coordinator_epoch=marker.coordinator_epoch,
                        topics=tuple(
                            make(topic_cls, name=t, partition_indexes=tuple(p))
                            for t, p in by_topic.items()
                        ),
                    ),
                ),
            )

        try:
            response = await self._node_client.send(
                leader,
                "txn-markers",
                ApiKey.WRITE_TXN_MARKERS,
                build,
                versions=WRITE_TXN_MARKERS_VERSIONS,
            )
        except (BrokerClientError, OSError) as e:  # retried after the backoff
            log.info("WriteTxnMarkers to broker %s failed: %s", getattr(leader, "id", leader), e)
            return dict.fromkeys(marker.partitions, NOT_LEADER_OR_FOLLOWER)
        return dict(_marker_results(response))


def _marker_results(response: Any) -> Iterable[tuple[TopicPartition, int]]:
    for result in response.markers:
        for topic in result.topics:
            for p in topic.partitions:
                yield (topic.name, p.partition_index), int(p.error_code)
