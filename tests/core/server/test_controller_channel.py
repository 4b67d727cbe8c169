"""The controller's channel and request batch (core/server/controller/channel.py) over a
scripted sender: order, one request in flight per broker, retries, epochs, merging."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.broker_connection import ConnectFailedError
from core.server.cluster_types import (
    EPOCH_DURING_DELETE,
    LEADER_DURING_DELETE,
    BrokerEndpoint,
    BrokerInfo,
    LeaderAndIsr,
    leader_and_isr_request_states,
    leader_and_isr_response,
    stop_replica_request_partitions,
    stop_replica_response,
    update_metadata_request_states,
)
from core.server.controller.channel import ControllerBrokerRequestBatch, ControllerChannelManager
from core.server.controller.context import ControllerContext
from core.server.interbroker_schema import UpdateMetadataResponse
from core.server.zookeeper.topic_data import ReplicaAssignment

from .fake_brokers import eventually, run

T_ID = uuid.uuid4()


def broker(broker_id: int, epoch: int) -> BrokerInfo:
    return BrokerInfo(
        broker_id, (BrokerEndpoint("PLAINTEXT", "h", 9000 + broker_id, "PLAINTEXT"),), None, epoch
    )


class ScriptedSender:
    """Answers like a broker; fails the first ``failures[broker]`` sends to a broker."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, ApiKey, Any]] = []
        self.failures: dict[int, int] = {}
        self.in_flight: dict[int, int] = {}
        self.attempts: dict[int, int] = {}
        self.max_in_flight = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.closed = False
        self.partition_errors: dict[Any, int] = {}

    async def send(self, node, purpose, api_key, build, *, versions, timeout_ms=None) -> Any:
        assert purpose == "controller"
        request = build(versions[1])
        self.attempts[node.id] = self.attempts.get(node.id, 0) + 1
        self.in_flight[node.id] = self.in_flight.get(node.id, 0) + 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight[node.id])
        try:
            await self.gate.wait()
            if self.failures.get(node.id, 0) > 0:
                self.failures[node.id] -= 1
                raise ConnectFailedError(f"connection to {node.host}:{node.port} refused")
            self.sent.append((node.id, ApiKey(api_key), request))
            return self.answer(ApiKey(api_key), request)
        finally:
            self.in_flight[node.id] -= 1

    def answer(self, api_key: ApiKey, request: Any) -> Any:
        if api_key == ApiKey.LEADER_AND_ISR:
            states = leader_and_isr_request_states(request)
            return leader_and_isr_response(
                {s.tp: self.partition_errors.get(s.tp, 0) for s in states},
                {s.topic: s.topic_id for s in states},
            )
        if api_key == ApiKey.STOP_REPLICA:
            partitions = stop_replica_request_partitions(request)
            return stop_replica_response(
                {p.tp: self.partition_errors.get(p.tp, 0) for p in partitions}
            )
        return UpdateMetadataResponse(error_code=ErrorCode.none)

    async def close(self) -> None:
        self.closed = True


def context_with(*brokers: BrokerInfo) -> ControllerContext:
    context = ControllerContext(epoch=4, epoch_zk_version=4)
    for b in brokers:
        context.add_live_broker(b)
    context.all_topics.add("t")
    context.topic_ids["t"] = T_ID
    for p in range(2):
        context.set_assignment(("t", p), ReplicaAssignment((1, 2)))
        context.set_leadership(("t", p), LeaderAndIsr(1 + p, 3, (1, 2), 7), 2)
    return context


def setup(*brokers: BrokerInfo):
    sender = ScriptedSender()
    context = context_with(*brokers)
    channel = ControllerChannelManager(sender, "PLAINTEXT", retry_backoff_s=0.01)
    for b in brokers:
        channel.add_broker(b)
    return sender, context, channel, ControllerBrokerRequestBatch(9, context, channel, "PLAINTEXT")


def test_a_batch_sends_leader_and_isr_then_metadata_then_stop_replica_with_both_epochs():
    async def scenario():
        sender, _context, channel, batch = setup(broker(1, 100), broker(2, 200))
        batch.add_leader_and_isr([1, 2], ("t", 0), is_new=True)
        batch.add_leader_and_isr([1], ("t", 0))  # merging keeps is_new
        batch.add_stop_replica([2], ("t", 1), delete=False)
        batch.send()
        await eventually(lambda: len(sender.sent) == 5, "5 requests")
        for broker_id, epoch in ((1, 100), (2, 200)):
            kinds = [k for b, k, _ in sender.sent if b == broker_id]
            expected = [ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA]
            assert kinds == expected + ([ApiKey.STOP_REPLICA] if broker_id == 2 else [])
            for b, _, request in sender.sent:
                if b == broker_id:
                    assert (request.controller_id, request.controller_epoch) == (9, 4)
                    assert request.broker_epoch == epoch
        (_, _, lai), *_ = sender.sent
        (state,) = leader_and_isr_request_states(lai)
        assert state.is_new and state.leader == 1 and state.controller_epoch == 2
        assert [x.broker_id for x in lai.live_leaders] == [1]
        stop = next(r for b, k, r in sender.sent if k == ApiKey.STOP_REPLICA)
        assert [
            (p.tp, p.leader_epoch, p.delete) for p in stop_replica_request_partitions(stop)
        ] == [(("t", 1), 3, False)]
        assert batch.empty
        await channel.close()
        assert sender.closed

    run(scenario())


def test_one_request_in_flight_per_broker_in_order_and_retried_until_answered():
    async def scenario():
        sender, _context, channel, batch = setup(broker(1, 100))
        sender.failures[1] = 3
        sender.gate.clear()
        for p in (0, 1, 0):
            batch.add_leader_and_isr([1], ("t", p))
            batch.send()
        await eventually(lambda: sender.in_flight.get(1) == 1, "the first request held")
        sender.gate.set()
        await eventually(lambda: len(sender.sent) == 6, "every request after the failures")
        assert sender.max_in_flight == 1
        order = [
            [s.partition for s in leader_and_isr_request_states(r)]
            for _, k, r in sender.sent
            if k == ApiKey.LEADER_AND_ISR
        ]
        assert order == [[0], [1], [0]]
        await channel.close()

    run(scenario())


def test_a_removed_broker_gets_nothing_more_and_unknown_brokers_are_skipped():
    async def scenario():
        sender, context, channel, batch = setup(broker(1, 100))
        sender.failures[1] = 10**9  # down for good
        batch.add_update_metadata([1])
        batch.send()
        await eventually(lambda: sender.attempts.get(1, 0) >= 3, "the request resent")
        await channel.remove_broker(1)  # returns once its sender has stopped
        context.remove_live_broker(1)
        attempts = sender.attempts[1]
        batch.add_update_metadata([1, 5])
        batch.send()
        await channel.close()
        assert sender.attempts[1] == attempts
        assert sender.sent == []

    run(scenario())


def test_update_metadata_marks_deleting_topics_and_offline_replicas_and_stop_replica_epochs():
    async def scenario():
        sender, context, channel, batch = setup(broker(1, 100))
        batch.add_update_metadata([1], [("t", 0)])
        context.topics_to_delete.add("t")
        batch.add_update_metadata([1], [("t", 1)])
        batch.add_stop_replica([1], ("t", 1), delete=True)
        batch.add_stop_replica([1], ("t", 1), delete=False)  # a delete stays a delete
        batch.send()
        await eventually(lambda: len(sender.sent) == 2, "UpdateMetadata and StopReplica")
        update = sender.sent[0][2]
        states = {s.tp: s for s in update_metadata_request_states(update)}
        assert states[("t", 0)].leader == 1 and states[("t", 0)].offline_replicas == (2,)
        assert states[("t", 1)].leader == LEADER_DURING_DELETE
        assert [b.id for b in update.live_brokers] == [1]
        stop = sender.sent[1][2]
        assert [(p.leader_epoch, p.delete) for p in stop_replica_request_partitions(stop)] == [
            (EPOCH_DURING_DELETE, True)
        ]
        await channel.close()

    run(scenario())


def test_answers_with_errors_are_logged_per_partition_and_stop_replica_answers_handed_on(caplog):
    async def scenario():
        sender, _context, channel, batch = setup(broker(1, 100))
        sender.partition_errors[("t", 1)] = 56
        answers: list[Any] = []
        batch.add_leader_and_isr([1], ("t", 1))
        batch.add_stop_replica([1], ("t", 0), delete=True)
        batch.add_stop_replica([1], ("t", 1), delete=True)
        batch.send(on_stop_replica_response=lambda b, errors: answers.append((b, errors)))
        await eventually(lambda: answers != [], "the StopReplica answer")
        assert answers == [(1, {("t", 0): 0, ("t", 1): 56})]
        await channel.close()

    with caplog.at_level(logging.WARNING, logger="core.server.controller.channel"):
        run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert "broker 1: LeaderAndIsr for t-1 failed with error 56" in messages
    assert "broker 1: StopReplica for t-1 failed with error 56" in messages


def test_a_broker_without_the_inter_broker_listener_gets_no_channel(caplog):
    async def scenario():
        sender = ScriptedSender()
        channel = ControllerChannelManager(sender, "INTERNAL")
        channel.add_broker(broker(1, 100))
        context = context_with(broker(1, 100))
        batch = ControllerBrokerRequestBatch(9, context, channel, "INTERNAL")
        batch.add_update_metadata([1])
        batch.send()
        await asyncio.sleep(0)
        assert sender.sent == []
        await channel.close()

    with caplog.at_level(logging.ERROR, logger="core.server.controller.channel"):
        run(scenario())
    assert any("no endpoint for the inter-broker listener INTERNAL" in r.getMessage()
               for r in caplog.records)  # fmt: skip
