"""Replica fetchers: how a follower copies its leader's log (Kafka's ReplicaFetcherManager and
ReplicaFetcherThread over AbstractFetcherThread).

A follower's partitions are spread, per leader, over ``num.replica.fetchers`` fetchers by
Kafka's hash (``fetcher_id``); each fetcher is one asyncio task with one connection
(``replica-fetcher-<id>``) to its leader, fetching all its partitions in one request at a
time. A partition is in one of two states:

- **truncating**: before fetching, the follower finds where its log leaves the leader's
  lineage (KIP-101 / KIP-279): an OffsetsForLeaderEpoch request for its latest epoch, then
  ``PartitionLog.truncation_state_for`` and a truncation; when the leader answers an older
  epoch than the one asked, it asks again for its new latest epoch. A log without epochs
  truncates to its high watermark (Kafka's fallback).
- **fetching**: Fetch at the log end offset. From Fetch v12 the request carries the epoch of
  the last batch (``last_fetched_epoch``) and the leader answers a ``diverging_epoch`` instead
  of records when the follower's log is off its lineage; the follower truncates and goes on
  fetching (Kafka 2.7+: a partition whose log has epochs starts fetching at once and finds
  its divergence this way, without an OffsetsForLeaderEpoch round trip).

Fetched batches are appended as the leader wrote them (``append_as_follower``); the high
watermark and log start offset follow the leader's. Errors (Kafka's handling):
OFFSET_OUT_OF_RANGE -> the leader's log end (ListOffsets) below ours: truncate to it;
else its log start above ours: empty the log and start there. FENCED_LEADER_EPOCH -> the
partition waits for the controller's next LeaderAndIsr (it is marked failed here and added
again then). Other partition errors and lost connections -> the partition (or the whole
fetcher) pauses ``replica.fetch.backoff.ms``. An unexpected failure marks the partition
failed, leaving the others running.

Concurrency: each fetcher holds its lock while it processes a response (appends,
truncations). ``remove_partitions`` takes the same lock, so once it returns no fetcher
touches those logs any more: the ReplicaManager calls it before making a partition leader
or deleting it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from core.errors import CoreError, KafkaStorageError
from core.log.divergence import EpochEndOffset
from core.log.partition_log import LogAppendInfo
from core.server.api_keys import ApiKey
from core.server.cluster_types import ZERO_UUID, TopicPartition
from core.server.kio_build import make, nested, nested_optional
from core.server.node_client import BrokerEndpoint
from core.server.partition import Partition, monotonic_ms
from core.server.protocol import load_request_schema
from core.server.replication_quota import ReplicationQuota, is_throttled
from core.server.replication_settings import ReplicationSettings

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the leader's local log start, for tiered followers

# Fetch v9 adds current_leader_epoch, v12 last_fetched_epoch and diverging_epoch, v13 topic
# ids, v15 ReplicaState instead of replica_id. v16 is the highest tierlog serves.
FETCH_MIN_VERSION = 9
TRUNCATION_ON_FETCH_VERSION = 12
TOPIC_ID_VERSION = 13
FETCH_MAX_VERSION = 16
OFFSET_FOR_LEADER_EPOCH_VERSIONS = (3, 4)  # v3 carries the follower's replica id
LIST_OFFSETS_VERSIONS = (4, 11)


class FetchState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """Where a follower starts fetching a partition.

    Attributes:
        leader_id: the broker to fetch from.
        leader_epoch: the partition's leader epoch, sent as the current leader epoch.
        fetch_offset: the follower's log end offset (its high watermark when its log has
            no epochs: truncation starts there).
        last_fetched_epoch: the epoch of the follower's last batch (its latest epoch), None
            when its log has none.
    """

    topic_id: uuid.UUID
    leader_id: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int | None


@dataclass(slots=True)
class PartitionFetchState:
    """A fetcher's state of one partition (Kafka's PartitionFetchState).

    Attributes:
        delayed_until: the event loop's time before which the partition is not fetched
            (after an error).
        failed: the partition stopped fetching until it is added again (a new LeaderAndIsr).
        lag: the leader's high watermark minus the fetch offset after the last answer
            without error for the partition (None before one); 0 is caught up (Kafka's
            isReplicaInSync), which exempts the partition from the follower throttle.
    """

    topic_id: uuid.UUID
    fetch_offset: int
    leader_epoch: int
    state: FetchState
    last_fetched_epoch: int | None
    delayed_until: float = 0.0
    failed: bool = False
    lag: int | None = None

    @property
    def in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0

    def ready(self, now: float) -> bool:
        return not self.failed and self.delayed_until <= now


class FollowerTarget(Protocol):
    """What fetchers need from the broker (the ReplicaManager)."""

    @property
    def broker_id(self) -> int: ...

    def follower(self, tp: TopicPartition, leader_epoch: int) -> Partition | None:
        """The partition if this broker still follows it at ``leader_epoch``."""
        ...

    def leader_endpoint(self, leader_id: int) -> BrokerEndpoint | None:
        """Where to reach ``leader_id`` on the inter-broker listener; None if unknown."""
        ...

    async def truncate_to(self, partition: Partition, offset: int) -> None: ...

    async def truncate_fully_and_start_at(self, partition: Partition, offset: int) -> None: ...

    async def append_as_follower(self, partition: Partition, records: bytes) -> LogAppendInfo: ...

    async def update_log_start_offset(self, partition: Partition, leader_log_start: int) -> None:
        """Follow the leader's log start offset (retention, DeleteRecords on the leader)."""
        ...

    async def build_remote_log_aux_state(
        self, partition: Partition, epoch: int, offset: int, leader_log_start: int
    ) -> int:
        """Restart the log after the remote segment holding ``offset`` in ``epoch``, with
        its epochs and producer state; returns the offset to fetch from.

        Raises:
            CoreError: the remote tier cannot tell yet, or the log could not be restored.
        """
        ...


class RequestSender(Protocol):
    """How fetchers reach leaders (``core.server.node_client.NodeClient``)."""

    async def send(
        self,
        node: BrokerEndpoint,
        purpose: str,
        api_key: int,
        build: Any,
        *,
        versions: tuple[int, int],
        timeout_ms: int | None = None,
    ) -> Any: ...

    async def disconnect(self, node_id: int, purpose: str) -> None: ...


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's AbstractFetcherManager.getFetcherId: ``abs(31 * topic.hashCode + partition)
    % num.replica.fetchers``, in Java's 32-bit arithmetic (``Utils.abs`` maps MIN_VALUE to
    0)."""
    value = (31 * java_string_hash(tp[0]) + tp[1]) & 0xFFFFFFFF
    if value >= 1 << 31:
        value -= 1 << 32
    value = 0 if value == -(1 << 31) else abs(value)
    return value % num_fetchers


def _code(value: Any) -> int:
    return int(value)


def _answer_for(response: Any, tp: TopicPartition, api: str) -> Any | None:
    """The partition ``tp`` in a ListOffsets or OffsetsForLeaderEpoch response, or None if
    the response lacks it or answered an error (logged). The two APIs name the same
    fields differently (``name``/``partition_index`` vs ``topic``/``partition``)."""
    if response is None:
        return None
    for topic in response.topics:
        name = getattr(topic, "name", None) or getattr(topic, "topic", None)
        if name != tp[0]:
            continue
        for p in topic.partitions:
            index = getattr(p, "partition_index", None)
            if (p.partition if index is None else index) != tp[1]:
                continue
            code = _code(p.error_code)
            if code != ErrorCode.none:
                log.info("%s-%d: %s answered error %d", *tp, api, code)
                return None
            return p
    return None


class ReplicaFetcherManager:
    """The fetchers of this broker, one per (leader, fetcher id).

    Args:
        target: the partitions and logs (the ReplicaManager).
        sender: the inter-broker client.
        settings: replica.* settings.
        max_fetch_version: the highest Fetch version to send. Below 12 a follower truncates
            with OffsetsForLeaderEpoch only, as Kafka with an inter-broker protocol before
            2.7 does.
        quota: the follower replication throttle (core/server/replication_quota.py).
    """

    def __init__(
        self,
        target: FollowerTarget,
        sender: RequestSender,
        settings: ReplicationSettings,
        *,
        max_fetch_version: int = FETCH_MAX_VERSION,
        quota: ReplicationQuota | None = None,
    ) -> None:
        self.target = target
        self.quota = quota if quota is not None else settings.follower_quota()
        self.sender = sender
        self.settings = settings
        self.max_fetch_version = max_fetch_version
        self.truncate_on_fetch = max_fetch_version >= TRUNCATION_ON_FETCH_VERSION
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._closed = False

    def _fetcher_of(self, tp: TopicPartition) -> ReplicaFetcher | None:
        for fetcher in self.fetchers.values():
            if tp in fetcher.partitions:
                return fetcher
        return None

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        fetcher = self._fetcher_of(tp)
        return None if fetcher is None else fetcher.partitions[tp]

    def failed_partitions(self) -> set[TopicPartition]:
        return {tp for f in self.fetchers.values() for tp, s in f.partitions.items() if s.failed}

    async def add_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Fetch these partitions from their leaders (replacing any state they had)."""
        if self._closed:
            return
        await self.remove_partitions(initial)
        by_fetcher: dict[tuple[int, int], dict[TopicPartition, InitialFetchState]] = {}
        for tp, state in initial.items():
            key = (state.leader_id, fetcher_id(tp, self.settings.num_replica_fetchers))
            by_fetcher.setdefault(key, {})[tp] = state
        for key, states in by_fetcher.items():
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                fetcher = ReplicaFetcher(self, *key)
                self.fetchers[key] = fetcher
                fetcher.start()
            await fetcher.add(states)

    async def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching these partitions; once this returns no fetcher touches their logs.
        Fetchers left without partitions stop."""
        wanted = set(tps)
        if not wanted:
            return
        for key, fetcher in list(self.fetchers.items()):
            if wanted & fetcher.partitions.keys():
                await fetcher.remove(wanted)
            if not fetcher.partitions and self.fetchers.get(key) is fetcher:
                del self.fetchers[key]
                await fetcher.stop()

    async def shutdown(self) -> None:
        self._closed = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        await asyncio.gather(*(f.stop() for f in fetchers))


@dataclass(slots=True)
class _Sent:
    """A partition as it was put in a request."""

    tp: TopicPartition
    state: PartitionFetchState
    fetch_offset: int
    leader_epoch: int
    extra: dict[str, Any] = field(default_factory=dict)


class ReplicaFetcher:
    """One fetcher: an asyncio task fetching a set of partitions from one leader."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.purpose = f"replica-fetcher-{fetcher_id}"
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self.lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._warned = False  # a connection failure was logged: log the next one at debug
        self._throttled = False  # the last fetch left partitions out for the follower throttle

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.leader_id}, id={self.fetcher_id})"

    @property
    def settings(self) -> ReplicationSettings:
        return self.manager.settings

    @property
    def target(self) -> FollowerTarget:
        return self.manager.target

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop after the response being processed, if any (never in the middle of an
        append or a truncation); closes the fetcher's connection."""
        self._stopping = True
        async with self.lock:
            if self._task is not None:
                self._task.cancel()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(CoreError):
            await self.manager.sender.disconnect(self.leader_id, self.purpose)

    async def add(self, states: Mapping[TopicPartition, InitialFetchState]) -> None:
        async with self.lock:
            for tp, initial in states.items():
                fetching = self.manager.truncate_on_fetch and initial.last_fetched_epoch is not None
                self.partitions[tp] = PartitionFetchState(
                    topic_id=initial.topic_id,
                    fetch_offset=initial.fetch_offset,
                    leader_epoch=initial.leader_epoch,
                    state=FetchState.FETCHING if fetching else FetchState.TRUNCATING,
                    last_fetched_epoch=initial.last_fetched_epoch if fetching else None,
                )
        self._changed.set()

    async def remove(self, tps: set[TopicPartition]) -> None:
        async with self.lock:
            for tp in tps:
                self.partitions.pop(tp, None)
        self._changed.set()

    # -- the loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopping:
            try:
                self._changed.clear()
                if await self._truncate():
                    continue
                if not await self._fetch():
                    await self._idle()
                self._throttled = False
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug: keep the fetcher alive for the other partitions, slowly.
                log.exception("%r failed; retrying after replica.fetch.backoff.ms", self)
                await asyncio.sleep(self.settings.replica_fetch_backoff_ms / 1000)

    async def _idle(self) -> None:
        """Wait for partitions to become ready, or to change."""
        now = asyncio.get_running_loop().time()
        waits = [s.delayed_until - now for s in self.partitions.values() if not s.failed]
        timeout = max(min(waits), 0.0) if waits else None
        if self._throttled:
            # Kafka's fetcher waits replica.fetch.backoff.ms when the throttle left it
            # nothing to fetch.
            backoff = self.settings.replica_fetch_backoff_ms / 1000
            timeout = backoff if timeout is None else max(timeout, backoff)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    def _ready(self, state: FetchState) -> list[tuple[TopicPartition, PartitionFetchState]]:
        now = asyncio.get_running_loop().time()
        return [(tp, s) for tp, s in self.partitions.items() if s.state is state and s.ready(now)]

    def _delay(self, tps: Iterable[TopicPartition], sent: Mapping[TopicPartition, _Sent]) -> None:
        """Pause these partitions for replica.fetch.backoff.ms (if their state is the one
        sent)."""
        until = asyncio.get_running_loop().time() + self.settings.replica_fetch_backoff_ms / 1000
        for tp in tps:
            current = self.partitions.get(tp)
            if current is not None and current is sent[tp].state:
                current.delayed_until = until

    def _pause(self, state: PartitionFetchState) -> None:
        # At least a moment, so that a zero backoff never spins the loop.
        pause = max(self.settings.replica_fetch_backoff_ms, 10) / 1000
        state.delayed_until = asyncio.get_running_loop().time() + pause

    def _mark_failed(self, tp: TopicPartition, why: str) -> None:
        state = self.partitions.get(tp)
        if state is not None:
            state.failed = True
        log.warning("%s-%d: fetching stopped until the next LeaderAndIsr: %s", tp[0], tp[1], why)

    def _endpoint(self) -> BrokerEndpoint | None:
        endpoint = self.target.leader_endpoint(self.leader_id)
        if endpoint is None:
            log.warning("no endpoint known for leader broker %d; %r waits", self.leader_id, self)
        return endpoint

    def _current(self, sent: _Sent) -> Partition | None:
        """The partition if nothing changed since the request was built."""
        state = self.partitions.get(sent.tp)
        if state is not sent.state or state.failed:
            return None
        if state.fetch_offset != sent.fetch_offset or state.leader_epoch != sent.leader_epoch:
            return None
        return self.target.follower(sent.tp, state.leader_epoch)

    async def _call(self, api_key: int, build: Any, versions: tuple[int, int]) -> Any | None:
        """Send a request to the leader; None (after logging) if it could not be done."""
        endpoint = self._endpoint()
        if endpoint is None:
            return None
        try:
            response = await self.manager.sender.send(
                endpoint,
                self.purpose,
                api_key,
                build,
                versions=versions,
                timeout_ms=self.settings.replica_socket_timeout_ms,
            )
        except CoreError as e:
            level = logging.DEBUG if self._warned else logging.WARNING
            log.log(level, "%r: request to broker %d failed: %s", self, self.leader_id, e)
            self._warned = True
            return None
        self._warned = False
        return response

    # -- truncation ----------------------------------------------------------------------------
    async def _truncate(self) -> bool:
        """One truncation round for the partitions in TRUNCATING; True if any was handled."""
        ready = self._ready(FetchState.TRUNCATING)
        if not ready:
            return False
        without_epochs: list[tuple[TopicPartition, PartitionFetchState]] = []
        asks: dict[TopicPartition, _Sent] = {}
        for tp, state in ready:
            partition = self.target.follower(tp, state.leader_epoch)
            if partition is None:
                self._pause(state)  # its role is changing: the ReplicaManager re-adds it
                continue
            latest = partition.log.latest_epoch
            if latest is None:
                without_epochs.append((tp, state))
            else:
                asks[tp] = _Sent(
                    tp, state, state.fetch_offset, state.leader_epoch, {"epoch": latest}
                )
        if not without_epochs and not asks:
            return False
        if without_epochs:
            async with self.lock:
                for tp, state in without_epochs:
                    await self._truncate_to_high_watermark(tp, state)
        if asks:
            response = await self._call(
                ApiKey.OFFSET_FOR_LEADER_EPOCH,
                lambda version: self._offset_for_leader_epoch_request(version, asks),
                OFFSET_FOR_LEADER_EPOCH_VERSIONS,
            )
            async with self.lock:
                if response is None:
                    self._delay(asks, asks)
                else:
                    await self._on_epoch_end_offsets(response, asks)
        return True

    async def _truncate_to_high_watermark(
        self, tp: TopicPartition, state: PartitionFetchState
    ) -> None:
        if self.partitions.get(tp) is not state:
            return
        partition = self.target.follower(tp, state.leader_epoch)
        if partition is None:
            return
        hw = partition.log.high_watermark
        await self.target.truncate_to(partition, hw)
        self._fetch_from_log_end(state, partition)

    def _fetch_from_log_end(self, state: PartitionFetchState, partition: Partition) -> None:
        state.fetch_offset = partition.log.log_end_offset
        state.state = FetchState.FETCHING
        state.last_fetched_epoch = (
            partition.log.latest_epoch if self.manager.truncate_on_fetch else None
        )

    def _offset_for_leader_epoch_request(
        self, version: int, asks: Mapping[TopicPartition, _Sent]
    ) -> Any:
        request_cls = load_request_schema(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
        topic_cls = nested(request_cls, "OffsetForLeaderTopic")
        partition_cls = nested(request_cls, "OffsetForLeaderPartition")
        topics: dict[str, list[Any]] = {}
        for (topic, index), sent in asks.items():
            topics.setdefault(topic, []).append(
                make(
                    partition_cls,
                    partition=index,
                    current_leader_epoch=sent.leader_epoch,
                    leader_epoch=sent.extra["epoch"],
                )
            )
        return make(
            request_cls,
            replica_id=self.target.broker_id,
            topics=tuple(
                make(topic_cls, topic=name, partitions=tuple(parts))
                for name, parts in topics.items()
            ),
        )

    async def _on_epoch_end_offsets(
        self, response: Any, asks: Mapping[TopicPartition, _Sent]
    ) -> None:
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for p in topic.partitions:
                tp = (topic.topic, p.partition)
                sent = asks.get(tp)
                if sent is None:
                    continue
                answered.add(tp)
                partition = self._current(sent)
                if partition is None:
                    continue
                code = _code(p.error_code)
                if code == ErrorCode.none:
                    leader = EpochEndOffset(int(p.leader_epoch), int(p.end_offset))
                    await self._truncate_by_epoch(tp, sent.state, partition, leader)
                elif code == ErrorCode.fenced_leader_epoch:
                    self._mark_failed(
                        tp, f"leader {self.leader_id} fenced epoch {sent.leader_epoch}"
                    )
                else:
                    log.info("%s-%d: OffsetsForLeaderEpoch answered error %d", *tp, code)
                    self._delay([tp], asks)
        self._delay(set(asks) - answered, asks)

    async def _truncate_by_epoch(
        self,
        tp: TopicPartition,
        state: PartitionFetchState,
        partition: Partition,
        leader: EpochEndOffset,
    ) -> None:
        """Truncate to where the log leaves the leader's lineage; fetch if that is final."""
        truncation = partition.log.truncation_state_for(leader)
        end = partition.log.log_end_offset
        if truncation.offset < end:
            # Counted as Kafka's follower reports a truncation: what this replica loses. A
            # truncation below the high watermark means an unclean election took records.
            log.log(
                logging.WARNING if truncation.offset < partition.high_watermark else logging.INFO,
                "%s-%d: truncating to %d, removing %d offsets (%d-%d) not on the leader's log "
                "(leader %d answered epoch %d ending at %d; high watermark %d)",
                *tp,
                truncation.offset,
                end - truncation.offset,
                truncation.offset,
                end - 1,
                self.leader_id,
                leader.epoch,
                leader.end_offset,
                partition.high_watermark,
            )
        await self.target.truncate_to(partition, truncation.offset)
        if truncation.truncation_completed or self.manager.truncate_on_fetch:
            # With Fetch v12+ an unfinished KIP-279 walk goes on through the leader's
            # diverging-epoch checks of the next fetches.
            self._fetch_from_log_end(state, partition)
        else:
            state.fetch_offset = partition.log.log_end_offset  # ask again for the new epoch

    # -- fetch -----------------------------------------------------------------------------------
    def _fetch_versions(self, sent: Mapping[TopicPartition, _Sent]) -> tuple[int, int]:
        high = self.manager.max_fetch_version
        if any(s.state.topic_id in (None, ZERO_UUID) for s in sent.values()):
            high = min(high, TOPIC_ID_VERSION - 1)  # partitions without an id go by name
        low = TRUNCATION_ON_FETCH_VERSION if self.manager.truncate_on_fetch else FETCH_MIN_VERSION
        return min(low, high), high

    async def _fetch(self) -> bool:
        """One fetch; False if no partition was ready to fetch."""
        sent: dict[TopicPartition, _Sent] = {}
        for tp, state in self._ready(FetchState.FETCHING):
            partition = self.target.follower(tp, state.leader_epoch)
            if partition is None:
                self._pause(state)  # its role is changing: the ReplicaManager re-adds it
                continue
            if self._follower_throttled(tp, state, partition):
                self._throttled = True
                continue
            sent[tp] = _Sent(
                tp,
                state,
                state.fetch_offset,
                state.leader_epoch,
                {"log_start_offset": partition.log.log_start_offset},
            )
        if not sent:
            return False
        response = await self._call(
            ApiKey.FETCH,
            lambda version: self._fetch_request(version, sent),
            self._fetch_versions(sent),
        )
        async with self.lock:
            if response is None:
                self._delay(sent, sent)
                return True
            if _code(response.error_code) != ErrorCode.none:
                log.info("%r: fetch answered error %d", self, _code(response.error_code))
                self._delay(sent, sent)
                return True
            await self._on_fetch_response(response, sent)
        return True

    def _throttled_partition(self, tp: TopicPartition, partition: Partition) -> bool:
        entries = partition.log.config.follower_replication_throttled_replicas
        return is_throttled(entries, tp[1], self.target.broker_id)

    def _follower_throttled(
        self, tp: TopicPartition, state: PartitionFetchState, partition: Partition
    ) -> bool:
        """Kafka's shouldFollowerThrottle: not caught up, follower-throttled on this broker,
        and the follower quota exceeded."""
        quota = self.manager.quota
        if not quota.enabled:
            return False
        return quota.should_throttle(
            self._throttled_partition(tp, partition), state.in_sync, monotonic_ms()
        )

    def _fetch_request(self, version: int, sent: Mapping[TopicPartition, _Sent]) -> Any:
        settings = self.settings
        request_cls = load_request_schema(ApiKey.FETCH, version)
        topic_cls = nested(request_cls, "FetchTopic")
        partition_cls = nested(request_cls, "FetchPartition")
        replica_state_cls = nested_optional(request_cls, "ReplicaState")
        topics: dict[str, list[Any]] = {}
        ids: dict[str, uuid.UUID] = {}
        for (topic, index), s in sent.items():
            ids[topic] = s.state.topic_id
            last = s.state.last_fetched_epoch
            topics.setdefault(topic, []).append(
                make(
                    partition_cls,
                    partition=index,
                    current_leader_epoch=s.leader_epoch,
                    fetch_offset=s.fetch_offset,
                    last_fetched_epoch=-1 if last is None else last,
                    log_start_offset=s.extra["log_start_offset"],
                    partition_max_bytes=settings.replica_fetch_max_bytes,
                )
            )
        replica_id = self.target.broker_id
        return make(
            request_cls,
            replica_id=replica_id,
            replica_state=(
                replica_state_cls(replica_id=replica_id, replica_epoch=-1)
                if replica_state_cls is not None
                else None
            ),
            max_wait=datetime.timedelta(milliseconds=settings.replica_fetch_wait_max_ms),
            min_bytes=settings.replica_fetch_min_bytes,
            max_bytes=settings.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,  # a full fetch, no session (KIP-227's FINAL_EPOCH)
            topics=tuple(
                make(topic_cls, topic=name, topic_id=ids[name], partitions=tuple(parts))
                for name, parts in topics.items()
            ),
            forgotten_topics_data=(),
            rack_id="",
        )

    async def _on_fetch_response(self, response: Any, sent: Mapping[TopicPartition, _Sent]) -> None:
        names = {s.state.topic_id: tp[0] for tp, s in sent.items()}
        answered: set[TopicPartition] = set()
        with_data: list[TopicPartition] = []
        for topic in response.responses:
            name = getattr(topic, "topic", None) or names.get(getattr(topic, "topic_id", None))
            if name is None:
                continue
            for data in topic.partitions:
                tp = (name, int(data.partition_index))
                s = sent.get(tp)
                if s is None:
                    continue
                answered.add(tp)
                partition = self._current(s)
                if partition is None:
                    continue
                try:
                    if await self._on_partition_data(tp, s, partition, data):
                        with_data.append(tp)
                except KafkaStorageError as e:
                    self._mark_failed(tp, f"storage error: {e}")
                except CoreError as e:
                    # A corrupt or misplaced batch: Kafka retries after the backoff.
                    log.warning("%s-%d: fetched data refused: %s", *tp, e)
                    self._delay([tp], sent)
                except Exception:
                    log.exception("%s-%d: unexpected error handling fetched data", *tp)
                    self._mark_failed(tp, "unexpected error (logged)")
        self._delay(set(sent) - answered, sent)
        # Partitions that got data go last, so that the others are first next time (the
        # leader guarantees a whole batch only to the first partition with data).
        for tp in with_data:
            state = self.partitions.pop(tp, None)
            if state is not None:
                self.partitions[tp] = state

    async def _on_partition_data(
        self, tp: TopicPartition, sent: _Sent, partition: Partition, data: Any
    ) -> bool:
        """Handle one partition of a fetch response; True if records were appended."""
        state = sent.state
        code = _code(data.error_code)
        if code == ErrorCode.none:
            diverging = getattr(data, "diverging_epoch", None)
            if diverging is not None and (
                int(diverging.epoch) >= 0 or int(diverging.end_offset) >= 0
            ):
                leader = EpochEndOffset(int(diverging.epoch), int(diverging.end_offset))
                log.info(
                    "%s-%d: leader %d says the log diverges after epoch %d (ending at %d)",
                    *tp,
                    self.leader_id,
                    leader.epoch,
                    leader.end_offset,
                )
                await self._truncate_by_epoch(tp, state, partition, leader)
                return False
            appended = False
            records = data.records
            if records:
                info = await self.target.append_as_follower(partition, bytes(records))
                quota = self.manager.quota
                if quota.enabled and self._throttled_partition(tp, partition):
                    quota.record(len(records), monotonic_ms())
                if info.valid_bytes > 0:
                    appended = True
                    state.fetch_offset = info.last_offset + 1
                    if self.manager.truncate_on_fetch:
                        state.last_fetched_epoch = info.last_leader_epoch
            partition.update_follower_high_watermark(int(data.high_watermark))
            state.lag = max(0, int(data.high_watermark) - state.fetch_offset)
            leader_start = int(data.log_start_offset)
            if leader_start > partition.log.log_start_offset:
                await self.target.update_log_start_offset(partition, leader_start)
            return appended
        if code == ErrorCode.offset_out_of_range:
            await self._on_out_of_range(tp, sent, partition)
        elif code == ErrorCode.offset_moved_to_tiered_storage:
            await self._on_moved_to_tiered_storage(tp, sent, partition)
        elif code == ErrorCode.fenced_leader_epoch:
            self._mark_failed(tp, f"leader {self.leader_id} fenced epoch {sent.leader_epoch}")
        else:
            # NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, ...:
            # the leader has not heard of the change yet, or this broker has not.
            log.debug("%s-%d: fetch answered error %d; retrying after backoff", *tp, code)
            self._delay([tp], {tp: sent})
        return False

    async def _on_out_of_range(self, tp: TopicPartition, sent: _Sent, partition: Partition) -> None:
        """Kafka's fetchOffsetAndTruncate: compare with the leader's log end and start."""
        state = sent.state
        leader_end = await self._leader_offset(tp, sent, LATEST_TIMESTAMP)
        if leader_end is None:
            self._delay([tp], {tp: sent})
            return
        local_end = partition.log.log_end_offset
        if leader_end < local_end:
            log.warning(
                "%s-%d: truncating to the leader's log end offset %d from %d (the leader "
                "lost offsets it had: an unclean election)",
                *tp,
                leader_end,
                local_end,
            )
            await self.target.truncate_to(partition, leader_end)
        else:
            leader_start = await self._leader_offset(tp, sent, EARLIEST_TIMESTAMP)
            if leader_start is None:
                self._delay([tp], {tp: sent})
                return
            if leader_start > local_end:
                log.info(
                    "%s-%d: the leader's log starts at %d, above this log's end %d: "
                    "restarting the log there",
                    *tp,
                    leader_start,
                    local_end,
                )
                await self.target.truncate_fully_and_start_at(partition, leader_start)
        self._fetch_from_log_end(state, partition)

    async def _on_moved_to_tiered_storage(
        self, tp: TopicPartition, sent: _Sent, partition: Partition
    ) -> None:
        """The leader keeps the fetch offset only in the remote tier (Kafka's
        TierStateMachine, BuildingRemoteLogAux): ask the leader for its earliest local offset
        and that offset's epoch, find the epoch of the offset just below it (an
        OffsetsForLeaderEpoch for the previous epoch: epochs without records are skipped
        that way), restore the epochs and producer state of the remote segment holding it,
        and fetch from the leader's local log on. The remote history is never copied here.
        """
        state = sent.state
        earliest_local = await self._leader_offset_and_epoch(tp, sent, EARLIEST_LOCAL_TIMESTAMP)
        leader_start = await self._leader_offset(tp, sent, EARLIEST_TIMESTAMP)
        if earliest_local is None or leader_start is None:
            self._delay([tp], {tp: sent})
            return
        local_start, epoch = earliest_local
        previous = local_start - 1
        if epoch is None or previous < 0:
            log.info(
                "%s-%d: the leader's earliest local offset %d has no leader epoch; retrying",
                *tp,
                local_start,
            )
            self._delay([tp], {tp: sent})
            return
        target_epoch = epoch
        if epoch > 0:
            earlier = await self._epoch_end_offset(tp, sent, epoch - 1)
            if earlier is None:
                self._delay([tp], {tp: sent})
                return
            # The end offset is exclusive: the offset before the local start is in the
            # earlier epoch the leader answered (the latest one with records before it).
            if earlier.end_offset > previous and earlier.epoch >= 0:
                target_epoch = earlier.epoch
        if self._current(sent) is not partition:
            return  # the partition changed while the leader answered
        try:
            next_offset = await self.target.build_remote_log_aux_state(
                partition, target_epoch, previous, leader_start
            )
        except CoreError as e:
            log.warning(
                "%s-%d: cannot build the state below the leader's local log start %d from the "
                "remote tier yet (retrying after replica.fetch.backoff.ms): %s",
                *tp,
                local_start,
                e,
            )
            self._delay([tp], {tp: sent})
            return
        log.info(
            "%s-%d: offsets below %d are in the remote tier; fetching from %d (epoch %s)",
            *tp,
            local_start,
            next_offset,
            partition.log.latest_epoch,
        )
        self._fetch_from_log_end(state, partition)

    async def _epoch_end_offset(
        self, tp: TopicPartition, sent: _Sent, epoch: int
    ) -> EpochEndOffset | None:
        """The leader's answer to OffsetsForLeaderEpoch for ``epoch`` (None on an error)."""
        ask = _Sent(tp, sent.state, sent.fetch_offset, sent.leader_epoch, {"epoch": epoch})
        response = await self._call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            lambda version: self._offset_for_leader_epoch_request(version, {tp: ask}),
            OFFSET_FOR_LEADER_EPOCH_VERSIONS,
        )
        p = _answer_for(response, tp, "OffsetsForLeaderEpoch")
        return None if p is None else EpochEndOffset(int(p.leader_epoch), int(p.end_offset))

    async def _leader_offset(self, tp: TopicPartition, sent: _Sent, timestamp: int) -> int | None:
        found = await self._leader_offset_and_epoch(tp, sent, timestamp)
        return None if found is None else found[0]

    async def _leader_offset_and_epoch(
        self, tp: TopicPartition, sent: _Sent, timestamp: int
    ) -> tuple[int, int | None] | None:
        """The leader's ListOffsets answer (as a replica: no isolation bound) and its leader
        epoch (None when unknown); None on an error."""

        def build(version: int) -> Any:
            request_cls = load_request_schema(ApiKey.LIST_OFFSETS, version)
            topic_cls = nested(request_cls, "ListOffsetsTopic")
            partition_cls = nested(request_cls, "ListOffsetsPartition")
            return make(
                request_cls,
                replica_id=self.target.broker_id,
                isolation_level=0,
                topics=(
                    make(
                        topic_cls,
                        name=tp[0],
                        partitions=(
                            make(
                                partition_cls,
                                partition_index=tp[1],
                                current_leader_epoch=sent.leader_epoch,
                                timestamp=timestamp,
                            ),
                        ),
                    ),
                ),
                timeout=datetime.timedelta(milliseconds=self.settings.replica_socket_timeout_ms),
            )

        response = await self._call(ApiKey.LIST_OFFSETS, build, LIST_OFFSETS_VERSIONS)
        p = _answer_for(response, tp, "ListOffsets")
        if p is None:
            return None
        epoch = int(getattr(p, "leader_epoch", -1))
        return int(p.offset), epoch if epoch >= 0 else None
