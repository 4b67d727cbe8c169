"""The controller's requests to the brokers (Kafka's ControllerChannelManager and
ControllerBrokerRequestBatch).

``ControllerChannelManager`` keeps, for every live (or shutting-down) broker, a queue and a
sender task on the broker's inter-broker listener (connection purpose ``controller``): one
request in flight per broker, sent in the order queued. A request that fails on the
connection (refused, lost, timed out after ``controller.socket.timeout.ms``) is sent again
after a backoff, until it is answered or the broker is removed (it died or bounced: its
queue goes with it, and a restarted broker gets what it needs from its startup handling).

``ControllerBrokerRequestBatch`` collects the LeaderAndIsr, UpdateMetadata and StopReplica
requests one controller decision needs and queues them together: per broker LeaderAndIsr
first, then UpdateMetadata, then StopReplica, as Kafka sends them. Every request carries
the controller's id and epoch and the destination's broker epoch, which brokers check
(STALE_CONTROLLER_EPOCH, STALE_BROKER_EPOCH). Errors in the answers are logged per
partition; StopReplica answers can be handed to a callback (topic deletion waits for them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from core.server.api_keys import INTER_BROKER_VERSIONS, ApiKey
from core.server.broker_connection import BrokerClientError
from core.server.cluster_types import (
    EPOCH_DURING_DELETE,
    LEADER_DURING_DELETE,
    NO_EPOCH,
    BrokerInfo,
    PartitionState,
    StopReplicaPartition,
    TopicPartition,
    leader_and_isr_request_live_leaders,
    leader_and_isr_request_topic_states,
    leader_and_isr_response_errors,
    stop_replica_response_errors,
    stop_replica_topic_states,
    update_metadata_brokers,
    update_metadata_topic_states,
)
from core.server.controller.context import ControllerContext
from core.server.interbroker_schema import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from core.server.node_client import BrokerEndpoint as NodeEndpoint

log = logging.getLogger(__name__)

PURPOSE = "controller"
# Kafka's RequestSendThread waits this long before sending a failed request again.
RETRY_BACKOFF_S = 0.1

StopReplicaCallback = Callable[[int, dict[TopicPartition, int]], None]


class NodeSender(Protocol):
    """What the channel needs of ``core.server.node_client.NodeClient``."""

    async def send(
        self,
        node: NodeEndpoint,
        purpose: str,
        api_key: int,
        build: Callable[[int], Any],
        *,
        versions: tuple[int, int],
        timeout_ms: int | None = None,
    ) -> Any: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ControllerRequest:
    api_key: ApiKey
    body: Any
    on_response: Callable[[Any], None] | None = None


@dataclass(slots=True)
class _BrokerChannel:
    node: NodeEndpoint
    queue: asyncio.Queue[ControllerRequest]
    task: asyncio.Task[None] | None = None


class ControllerChannelManager:
    def __init__(
        self, client: NodeSender, listener: str, *, retry_backoff_s: float = RETRY_BACKOFF_S
    ) -> None:
        self._client = client
        self._listener = listener
        self._retry_backoff_s = retry_backoff_s
        self._brokers: dict[int, _BrokerChannel] = {}

    def add_broker(self, broker: BrokerInfo) -> None:
        """Start the queue and sender of a broker that became live (a no-op if it has one)."""
        if broker.broker_id in self._brokers:
            return
        endpoint = broker.endpoint(self._listener)
        if endpoint is None:
            log.error("broker %d has no endpoint for the inter-broker listener %s: the "
                      "controller cannot reach it", broker.broker_id, self._listener)  # fmt: skip
            return
        node = NodeEndpoint(broker.broker_id, endpoint.host, endpoint.port)
        channel = _BrokerChannel(node, asyncio.Queue())
        channel.task = asyncio.create_task(
            self._run(channel), name=f"controller-channel-{broker.broker_id}"
        )
        self._brokers[broker.broker_id] = channel

    async def remove_broker(self, broker_id: int) -> None:
        """Stop sending to a broker that died or bounced; its queued requests are dropped."""
        channel = self._brokers.pop(broker_id, None)
        if channel is not None and channel.task is not None:
            channel.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await channel.task

    def send(self, broker_id: int, request: ControllerRequest) -> None:
        channel = self._brokers.get(broker_id)
        if channel is None:
            log.debug(
                "not sending %s to broker %d: it is not live", request.api_key.name, broker_id
            )
            return
        channel.queue.put_nowait(request)

    async def close(self) -> None:
        for broker_id in list(self._brokers):
            await self.remove_broker(broker_id)
        await self._client.close()

    async def _run(self, channel: _BrokerChannel) -> None:
        broker_id = channel.node.id
        while True:
            request = await channel.queue.get()
            response = await self._send_until_answered(channel.node, request)
            if request.on_response is not None:
                try:
                    request.on_response(response)
                except Exception:
                    log.exception("handling the answer of broker %d to %s failed",
                                  broker_id, request.api_key.name)  # fmt: skip

    async def _send_until_answered(self, node: NodeEndpoint, request: ControllerRequest) -> Any:
        failures = 0
        while True:
            try:
                return await self._client.send(
                    node,
                    PURPOSE,
                    request.api_key,
                    lambda _version: request.body,
                    versions=INTER_BROKER_VERSIONS[request.api_key],
                )
            except (BrokerClientError, OSError) as e:
                failures += 1
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(level, "sending %s to broker %d failed (%s); retrying",
                        request.api_key.name, node.id, e)  # fmt: skip
                await asyncio.sleep(self._retry_backoff_s)


class ControllerBrokerRequestBatch:
    """The requests of one controller decision, queued together by ``send``."""

    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        channel: ControllerChannelManager,
        listener: str,
    ) -> None:
        self._controller_id = controller_id
        self._context = context
        self._channel = channel
        self._listener = listener
        self._leader_and_isr: dict[int, dict[TopicPartition, PartitionState]] = {}
        self._stop_replica: dict[int, dict[TopicPartition, StopReplicaPartition]] = {}
        self._metadata_brokers: set[int] = set()
        self._metadata_partitions: dict[TopicPartition, PartitionState] = {}

    @property
    def empty(self) -> bool:
        return not (self._leader_and_isr or self._stop_replica or self._metadata_brokers)

    def add_leader_and_isr(
        self, broker_ids: Iterable[int], tp: TopicPartition, *, is_new: bool = False
    ) -> None:
        """Tell ``broker_ids`` the partition's current state (they are its replicas), and
        every broker its metadata."""
        state = self._context.partition_state(tp, is_new=is_new)
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            states = self._leader_and_isr.setdefault(broker_id, {})
            already_new = tp in states and states[tp].is_new
            states[tp] = replace(state, is_new=is_new or already_new)
        self.add_update_metadata(self._context.live_or_shutting_down_ids(), [tp])

    def add_stop_replica(
        self, broker_ids: Iterable[int], tp: TopicPartition, *, delete: bool
    ) -> None:
        context = self._context
        if context.is_queued_for_deletion(tp[0]):
            epoch = EPOCH_DURING_DELETE  # the broker deletes whatever its epoch
        else:
            found = context.leadership.get(tp)
            epoch = NO_EPOCH if found is None else found.leader_and_isr.leader_epoch
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            entries = self._stop_replica.setdefault(broker_id, {})
            already_delete = tp in entries and entries[tp].delete
            entries[tp] = StopReplicaPartition(tp, epoch, delete or already_delete)

    def add_update_metadata(
        self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition] = ()
    ) -> None:
        """UpdateMetadata to ``broker_ids`` with the live brokers and ``partitions`` (none:
        brokers only). Partitions of topics being deleted go with leader -2."""
        self._metadata_brokers.update(b for b in broker_ids if b >= 0)
        context = self._context
        for tp in partitions:
            if tp not in context.leadership:
                continue  # no leader and ISR yet: nothing to tell
            state = context.partition_state(tp)
            if context.is_queued_for_deletion(tp[0]):
                deleted = replace(state.leader_and_isr, leader=LEADER_DURING_DELETE)
                state = replace(state, leader_and_isr=deleted)
            self._metadata_partitions[tp] = state

    def send(self, *, on_stop_replica_response: StopReplicaCallback | None = None) -> None:
        """Queue the collected requests to the live brokers, and start a new batch."""
        context = self._context
        live = context.live_or_shutting_down_ids()
        for broker_id, states in sorted(self._leader_and_isr.items()):
            if broker_id not in live:
                continue
            leaders = {s.leader for s in states.values()}
            body = LeaderAndIsrRequest(
                controller_id=self._controller_id,
                controller_epoch=context.epoch,
                broker_epoch=context.broker_epoch(broker_id),
                topic_states=leader_and_isr_request_topic_states(states.values()),
                live_leaders=leader_and_isr_request_live_leaders(
                    (b for i, b in context.live_brokers.items() if i in leaders), self._listener
                ),
            )
            self._channel.send(
                broker_id,
                ControllerRequest(
                    ApiKey.LEADER_AND_ISR, body, _leader_and_isr_logger(broker_id, body)
                ),
            )
        if self._metadata_brokers:
            topic_states = update_metadata_topic_states(self._metadata_partitions.values())
            brokers = update_metadata_brokers(context.live_brokers.values())
            for broker_id in sorted(self._metadata_brokers & live):
                body = UpdateMetadataRequest(
                    controller_id=self._controller_id,
                    controller_epoch=context.epoch,
                    broker_epoch=context.broker_epoch(broker_id),
                    topic_states=topic_states,
                    live_brokers=brokers,
                )
                self._channel.send(
                    broker_id,
                    ControllerRequest(
                        ApiKey.UPDATE_METADATA, body, _update_metadata_logger(broker_id)
                    ),
                )
        for broker_id, entries in sorted(self._stop_replica.items()):
            if broker_id not in live:
                continue
            body = StopReplicaRequest(
                controller_id=self._controller_id,
                controller_epoch=context.epoch,
                broker_epoch=context.broker_epoch(broker_id),
                topic_states=stop_replica_topic_states(entries.values()),
            )
            on_response = _stop_replica_handler(broker_id, list(entries), on_stop_replica_response)
            self._channel.send(broker_id, ControllerRequest(ApiKey.STOP_REPLICA, body, on_response))
        self._leader_and_isr.clear()
        self._stop_replica.clear()
        self._metadata_brokers.clear()
        self._metadata_partitions.clear()


def _leader_and_isr_logger(broker_id: int, request: LeaderAndIsrRequest) -> Callable[[Any], None]:
    names = {t.topic_id: t.topic_name for t in request.topic_states}

    def on_response(response: Any) -> None:
        if int(response.error_code) != 0:
            log.warning("broker %d answered LeaderAndIsr with error %d",
                        broker_id, int(response.error_code))  # fmt: skip
        for tp, code in sorted(leader_and_isr_response_errors(response, names).items()):
            if code != 0:
                log.warning("broker %d: LeaderAndIsr for %s-%d failed with error %d",
                            broker_id, tp[0], tp[1], code)  # fmt: skip

    return on_response


def _update_metadata_logger(broker_id: int) -> Callable[[Any], None]:
    def on_response(response: Any) -> None:
        if int(response.error_code) != 0:
            log.warning("broker %d answered UpdateMetadata with error %d",
                        broker_id, int(response.error_code))  # fmt: skip

    return on_response


def _stop_replica_handler(
    broker_id: int, partitions: list[TopicPartition], callback: StopReplicaCallback | None
) -> Callable[[Any], None]:
    def on_response(response: Any) -> None:
        errors = stop_replica_response_errors(response, partitions)
        for tp, code in sorted(errors.items()):
            if code != 0:
                log.warning("broker %d: StopReplica for %s-%d failed with error %d",
                            broker_id, tp[0], tp[1], code)  # fmt: skip
        if callback is not None:
            callback(broker_id, errors)

    return on_response
