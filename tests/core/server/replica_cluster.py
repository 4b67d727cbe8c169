"""Real brokers in one process, replicating over 127.0.0.1, with the test as their controller.

Each ``Node`` is a real ``Broker`` (socket server, handlers, replica manager, log dirs) whose
replica fetchers reach the other nodes through a real ``NodeClient``. No ZooKeeper: the test
plays the controller, sending what a controller's UpdateMetadata and LeaderAndIsr carry
(``Cluster.elect``) and StopReplica (``Cluster.stop_replica``). ISR changes go to a
``RecordingIsrWriter``, which accepts them and keeps them for the test to look at.

The replicated topics are not in any broker's topic registry: the brokers' own (embedded)
controllers never touch them.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from core.server.broker import Broker
from core.server.cluster_types import (
    BrokerInfo,
    LeaderAndIsr,
    PartitionState,
    StopReplicaPartition,
    TopicPartition,
)
from core.server.config import load_broker_config
from core.server.kio_build import make, nested
from core.server.node_client import BrokerEndpoint, ClientSettings, NodeClient
from core.server.partition import Partition
from core.server.protocol import load_request_schema
from core.server.security import ClientSecurity
from tests.support.waiting import until

CONTROLLER_ID = 100
LISTENER = "PLAINTEXT"


@dataclass
class RecordingIsrWriter:
    """Accepts every ISR change (the next partition epoch) and records it."""

    writes: list[tuple[TopicPartition, LeaderAndIsr]] = field(default_factory=list)

    async def submit(
        self, tp: TopicPartition, proposed: LeaderAndIsr, controller_epoch: int
    ) -> LeaderAndIsr | None:
        committed = replace(proposed, partition_epoch=proposed.partition_epoch + 1)
        self.writes.append((tp, committed))
        return committed

    def isrs(self, tp: TopicPartition) -> list[tuple[int, ...]]:
        return [lai.isr for written, lai in self.writes if written == tp]


class Node:
    """One broker of the cluster; ``start`` again after ``stop`` reuses its log dir unless
    given another."""

    def __init__(
        self, node_id: int, directory: Path, settings: Mapping[str, str], writer: RecordingIsrWriter
    ) -> None:
        self.node_id = node_id
        self.directory = directory
        self.settings = dict(settings)
        self.writer = writer
        self.broker: Broker | None = None
        self.client: NodeClient | None = None
        self.requests: dict[int, int] = {}  # api key -> requests served

    async def start(self, *, max_fetch_version: int | None = None) -> None:
        config = load_broker_config(
            None,
            {
                "node.id": str(self.node_id),
                "log.dirs": str(self.directory),
                "listeners": f"{LISTENER}://127.0.0.1:0",
                "offsets.topic.num.partitions": "1",
                # Without ZooKeeper a broker trusts no peer on a PLAINTEXT listener: the
                # nodes (and the test) connect anonymously, so that is the brokers' principal.
                "super.users": "User:ANONYMOUS",
                **self.settings,
            },
        )
        broker = Broker(config)
        handlers = dict(broker.handlers)

        def counted(api_key: int, handler: Any) -> Any:
            async def handle(b: Any, ctx: Any, request: Any) -> Any:
                self.requests[api_key] = self.requests.get(api_key, 0) + 1
                return await handler(b, ctx, request)

            return handle

        broker.handlers = {key: counted(key, h) for key, h in handlers.items()}
        await broker.start()
        manager = broker.replica_manager
        if max_fetch_version is not None:
            manager.max_fetch_version = max_fetch_version
        self.client = NodeClient(ClientSettings.from_config(config))
        manager.set_node_client(self.client, LISTENER)
        manager.set_isr_writer(self.writer)
        self.broker = broker

    async def stop(self) -> None:
        assert self.broker is not None and self.client is not None
        await self.broker.stop()
        await self.client.close()
        self.broker = None

    @property
    def running(self) -> bool:
        return self.broker is not None

    @property
    def info(self) -> BrokerInfo:
        assert self.broker is not None
        info = self.broker.metadata_cache.broker(self.node_id)
        assert info is not None
        return info

    @property
    def endpoint(self) -> BrokerEndpoint:
        endpoint = self.info.endpoint(LISTENER)
        assert endpoint is not None
        return BrokerEndpoint(self.node_id, endpoint.host, endpoint.port)

    def partition(self, tp: TopicPartition) -> Partition | None:
        assert self.broker is not None
        return self.broker.replica_manager.partition(*tp)

    def log_bytes(self, tp: TopicPartition) -> bytes:
        """The partition's log: every segment's bytes, in offset order."""
        partition = self.partition(tp)
        assert partition is not None
        partition.log.flush()
        return b"".join(s.log.path.read_bytes() for s in partition.log.segments())


class Cluster:
    """Nodes 1..n and the test as their controller."""

    def __init__(self, directory: Path, size: int, settings: Mapping[str, str] | None = None):
        self.directory = directory
        self.writer = RecordingIsrWriter()
        self.nodes = {
            i: Node(i, directory / f"broker-{i}", settings or {}, self.writer)
            for i in range(1, size + 1)
        }
        self.controller_epoch = 10
        self.states: dict[TopicPartition, PartitionState] = {}
        self.client = NodeClient(ClientSettings(local_id=-1, security=ClientSecurity(LISTENER)))

    async def start(self, **options: Any) -> None:
        for node in self.nodes.values():
            await node.start(**options)

    async def close(self) -> None:
        for node in self.nodes.values():
            if node.running:
                await node.stop()
        await self.client.close()

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.running]

    def publish(self) -> None:
        """UpdateMetadata to every live node: live brokers and every partition state."""
        brokers = [n.info for n in self.live()]
        for node in self.live():
            assert node.broker is not None
            node.broker.metadata_cache.update(
                CONTROLLER_ID, self.controller_epoch, brokers, list(self.states.values())
            )

    async def elect(
        self,
        topic: str,
        topic_id: uuid.UUID,
        partitions: int,
        *,
        leader: int,
        isr: Sequence[int],
        leader_epoch: int,
        replicas: Sequence[int],
        to: Sequence[int] | None = None,
    ) -> dict[int, dict[TopicPartition, int]]:
        """Publish the state of ``topic``'s partitions, then send LeaderAndIsr to the live
        replicas (or to ``to``); returns each node's answer."""
        for index in range(partitions):
            self.states[(topic, index)] = PartitionState(
                topic=topic,
                topic_id=topic_id,
                partition=index,
                controller_epoch=self.controller_epoch,
                leader_and_isr=LeaderAndIsr(leader, leader_epoch, tuple(isr)),
                replicas=tuple(replicas),
            )
        self.publish()
        states = [self.states[(topic, i)] for i in range(partitions)]
        answers = {}
        for node_id in to if to is not None else replicas:
            node = self.nodes[node_id]
            if not node.running:
                continue
            assert node.broker is not None
            answers[node_id] = await node.broker.replica_manager.become_leader_or_follower(
                CONTROLLER_ID, self.controller_epoch, states
            )
        return answers

    async def stop_replica(self, node_id: int, tps: Sequence[TopicPartition]) -> None:
        """StopReplica without deletion: the node stops fetching (and serving) them."""
        broker = self.nodes[node_id].broker
        assert broker is not None
        await broker.replica_manager.stop_replicas(
            CONTROLLER_ID,
            self.controller_epoch,
            [StopReplicaPartition(tp, self.states[tp].leader_epoch, False) for tp in tps],
        )

    async def produce(
        self,
        node_id: int,
        tp: TopicPartition,
        values: Sequence[bytes],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        version: int = 11,
    ) -> Any:
        """One Produce request (one batch) to ``node_id``; returns the partition's answer and
        the response."""
        builder = RecordBatchBuilder()
        for value in values:
            builder.append(value, key=value[:4])
        records = bytes(builder.build())

        def build(v: int) -> Any:
            request_cls = load_request_schema(ApiKey.PRODUCE, v)
            topic_cls = nested(request_cls, "TopicProduceData")
            partition_cls = nested(request_cls, "PartitionProduceData")
            return make(
                request_cls,
                transactional_id=None,
                acks=acks,
                timeout=datetime.timedelta(milliseconds=timeout_ms),
                topic_data=(
                    make(
                        topic_cls,
                        name=tp[0],
                        partition_data=(make(partition_cls, index=tp[1], records=records),),
                    ),
                ),
            )

        response = await self.client.send(
            self.nodes[node_id].endpoint,
            "test-producer",
            ApiKey.PRODUCE,
            build,
            versions=(version, version),
        )
        return response.responses[0].partition_responses[0], response

    async def fetch(
        self, node_id: int, tp: TopicPartition, offset: int, *, version: int = 16
    ) -> Any:
        """A consumer's Fetch of one partition (no waiting); returns the partition's data
        and the response."""
        topic_id = self.states[tp].topic_id

        def build(v: int) -> Any:
            request_cls = load_request_schema(ApiKey.FETCH, v)
            topic_cls = nested(request_cls, "FetchTopic")
            partition_cls = nested(request_cls, "FetchPartition")
            return make(
                request_cls,
                replica_id=-1,
                max_wait=datetime.timedelta(0),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    make(
                        topic_cls,
                        topic=tp[0],
                        topic_id=topic_id,
                        partitions=(
                            make(
                                partition_cls,
                                partition=tp[1],
                                fetch_offset=offset,
                                partition_max_bytes=1 << 20,
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            )

        response = await self.client.send(
            self.nodes[node_id].endpoint,
            "test-consumer",
            ApiKey.FETCH,
            build,
            versions=(version, version),
        )
        return response.responses[0].partitions[0], response

    async def caught_up(self, tp: TopicPartition, leader: int, followers: Sequence[int]) -> None:
        """Wait until every follower has the leader's log and high watermark."""

        def done() -> bool:
            lead = self.nodes[leader].partition(tp)
            assert lead is not None
            end, hw = lead.log.log_end_offset, lead.log.high_watermark
            for f in followers:
                p = self.nodes[f].partition(tp)
                if p is None or p.log.log_end_offset != end or p.log.high_watermark != hw:
                    return False
            return hw == end

        await until(done, timeout=30, what=f"followers {list(followers)} catching up on {tp}")


async def run_with_timeout(coro: Any, seconds: float = 120) -> Any:
    return await asyncio.wait_for(coro, seconds)
