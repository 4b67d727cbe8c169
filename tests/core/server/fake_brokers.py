"""Fake brokers for the controller's tests: small asyncio servers that speak the Kafka protocol
(tierlog's ProtocolCodec) and serve only ApiVersions and the controller's requests, each
registered in ZooKeeper by a KafkaZkClient of its own (a real ephemeral registration, so
closing a fake broker's session is a broker failure the controller sees).

Every LeaderAndIsr, UpdateMetadata and StopReplica is recorded; UpdateMetadata is also
applied to a real MetadataCache (what the broker would know). Answers are NONE unless a test
sets an error for an api, or for a partition of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import struct
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from core.server.api_keys import INTER_BROKER_VERSIONS, ApiKey
from core.server.cluster_types import (
    PartitionState,
    TopicPartition,
    leader_and_isr_request_states,
    leader_and_isr_response,
    stop_replica_request_partitions,
    stop_replica_response,
    update_metadata_request_brokers,
    update_metadata_request_states,
)
from core.server.config import BrokerConfig
from core.server.controller.controller import ZkController
from core.server.controller.topic_deletion import DeletionStarted
from core.server.interbroker_schema import UpdateMetadataResponse
from core.server.kio_build import make, nested
from core.server.metadata_cache import MetadataCache, StaleControllerEpochError
from core.server.protocol import ProtocolCodec
from core.server.zookeeper import paths as zk_paths
from core.server.zookeeper.data import BrokerRegistration, EndPoint, encode_broker_registration
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.ops import CreateOp, DeleteOp
from core.server.zookeeper.topic_data import ReplicaAssignment, TopicAssignment
from tests.support.waiting import until

SIZE = struct.Struct(">i")
WAIT_S = 30.0
TEST_TIMEOUT_S = 120.0
SERVED = {ApiKey.API_VERSIONS: (0, 4)}
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, TEST_TIMEOUT_S))


async def eventually(condition: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Wait until ``condition`` holds, with the controller tests' deadline."""
    await until(condition, WAIT_S, interval=0.02, what=what)


async def connect_zk(connect_string: str) -> KafkaZkClient:
    zk = await KafkaZkClient.connect(connect_string, session_timeout_ms=20_000)
    await zk.ensure_persistent_paths()
    return zk


@dataclass(frozen=True, slots=True)
class Received:
    api_key: ApiKey
    request: Any

    @property
    def controller_epoch(self) -> int:
        return self.request.controller_epoch

    @property
    def broker_epoch(self) -> int:
        return self.request.broker_epoch


class FakeBroker:
    def __init__(self, broker_id: int, connect_string: str) -> None:
        self.broker_id = broker_id
        self.connect_string = connect_string
        self.codec = ProtocolCodec(SERVED, INTER_BROKER_VERSIONS)
        self.received: list[Received] = []
        self.cache = MetadataCache(broker_id)
        self.api_errors: dict[ApiKey, int] = {}
        self.partition_errors: dict[ApiKey, dict[TopicPartition, int]] = {}
        self.zk: KafkaZkClient | None = None
        self.epoch = -1
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> FakeBroker:
        """Listen on a new port and register (a new broker epoch)."""
        self.zk = await connect_zk(self.connect_string)
        self.epoch = await self.zk.register_broker(await self._listen())
        return self

    async def _listen(self) -> BrokerRegistration:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        endpoint = EndPoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT")
        return BrokerRegistration(self.broker_id, (endpoint,))

    async def bounce(self) -> None:
        """Restart so fast that ``/brokers/ids`` never lacks the broker: a new session
        replaces the registration in one transaction. The controller sees the same id with
        a new epoch, as when it reads the brokers after a restart it had no time to see."""
        old_zk = self.zk
        await self.kill_server()
        registration = await self._listen()
        self.zk = await connect_zk(self.connect_string)
        path = zk_paths.broker(self.broker_id)
        data = encode_broker_registration(registration)
        await self.zk.zookeeper.multi([DeleteOp(path), CreateOp(path, data, ephemeral=True)])
        found = await self.zk.get_broker(self.broker_id)
        assert found is not None
        self.epoch = found.epoch
        if old_zk is not None:
            await old_zk.close()

    async def kill(self) -> None:
        """A crash: the session ends (ZooKeeper drops the registration), connections close."""
        if self.zk is not None:
            await self.zk.close()
            self.zk = None
        await self.kill_server()

    async def kill_server(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._connections):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    # -- what it was told --------------------------------------------------------------------
    def requests(self, api_key: ApiKey) -> list[Any]:
        return [r.request for r in self.received if r.api_key == api_key]

    def leader_and_isr_states(self) -> list[PartitionState]:
        """Every partition state received in LeaderAndIsr requests, in order."""
        return [
            s
            for r in self.requests(ApiKey.LEADER_AND_ISR)
            for s in leader_and_isr_request_states(r)
        ]

    def latest_state(self, tp: TopicPartition) -> PartitionState | None:
        """The partition's state in the last LeaderAndIsr that named it."""
        found = [s for s in self.leader_and_isr_states() if s.tp == tp]
        return found[-1] if found else None

    def stop_replicas(self) -> list[tuple[TopicPartition, int, bool]]:
        return [
            (p.tp, p.leader_epoch, p.delete)
            for r in self.requests(ApiKey.STOP_REPLICA)
            for p in stop_replica_request_partitions(r)
        ]

    # -- serving -----------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                (size,) = SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                context, request = self.codec.decode_request(frame, "PLAINTEXT", "controller")
                response = self._answer(ApiKey(context.api_key), context.api_version, request)
                writer.write(self.codec.encode_response(context, response))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._connections.discard(writer)
            writer.close()

    def _answer(self, api_key: ApiKey, version: int, request: Any) -> Any:
        if api_key == ApiKey.API_VERSIONS:
            return self._api_versions(version)
        self.received.append(Received(api_key, request))
        top = self.api_errors.get(api_key, 0)
        errors = self.partition_errors.get(api_key, {})
        if api_key == ApiKey.LEADER_AND_ISR:
            states = leader_and_isr_request_states(request)
            return leader_and_isr_response(
                {s.tp: errors.get(s.tp, 0) for s in states},
                {s.topic: s.topic_id for s in states},
                top,
            )
        if api_key == ApiKey.STOP_REPLICA:
            partitions = stop_replica_request_partitions(request)
            return stop_replica_response({p.tp: errors.get(p.tp, 0) for p in partitions}, top)
        assert api_key == ApiKey.UPDATE_METADATA
        if top == 0:
            try:
                self.cache.update(
                    request.controller_id,
                    request.controller_epoch,
                    update_metadata_request_brokers(request),
                    update_metadata_request_states(request),
                )
            except StaleControllerEpochError as e:
                top = e.error_code
        return UpdateMetadataResponse(error_code=ErrorCode(top))

    def _api_versions(self, version: int) -> Any:
        response_type = self.codec.response_type(ApiKey.API_VERSIONS, version)
        entry = nested(response_type, "ApiVersion")
        ranges = {**SERVED, **INTER_BROKER_VERSIONS}
        return make(
            response_type,
            error_code=ErrorCode.none,
            api_keys=tuple(
                make(entry, api_key=int(k), min_version=lo, max_version=hi)
                for k, (lo, hi) in ranges.items()
            ),
            throttle_time=datetime.timedelta(0),
        )


class Cluster:
    """Fake brokers, controllers and an admin ZooKeeper client on one chroot."""

    def __init__(self, connect_string: str, tmp_path: Any) -> None:
        self.connect_string = connect_string
        self.tmp_path = tmp_path
        self.brokers: dict[int, FakeBroker] = {}
        self.controllers: list[tuple[ZkController, KafkaZkClient]] = []
        self.admin: KafkaZkClient | None = None

    async def __aenter__(self) -> Cluster:
        self.admin = await connect_zk(self.connect_string)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for controller, zk in self.controllers:
            await controller.stop()
            await zk.close()
        for broker in self.brokers.values():
            await broker.kill()
        if self.admin is not None:
            await self.admin.close()

    async def start_brokers(self, *broker_ids: int) -> list[FakeBroker]:
        started = []
        for broker_id in broker_ids:
            broker = await FakeBroker(broker_id, self.connect_string).start()
            self.brokers[broker_id] = broker
            started.append(broker)
        return started

    async def restart(self, broker_id: int) -> FakeBroker:
        """The broker comes back (new session, new epoch, new port; records kept)."""
        old = self.brokers[broker_id]
        await old.kill()
        await old.start()
        return old

    def config(self, broker_id: int, props: dict[str, str] | None = None) -> BrokerConfig:
        values = {
            "node.id": str(broker_id),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(self.tmp_path / f"controller-{broker_id}"),
            **(props or {}),
        }
        return BrokerConfig.from_props(values)

    async def start_controller(
        self,
        broker_id: int,
        props: dict[str, str] | None = None,
        deletion_started: DeletionStarted | None = None,
    ) -> ZkController:
        """A controller with its own ZooKeeper session (as the broker ``broker_id`` has).
        Automatic leader rebalancing is off unless ``props`` turn it on: tests that elect
        leaders themselves must not race with it."""
        zk = await connect_zk(self.connect_string)
        props = {"auto.leader.rebalance.enable": "false", **(props or {})}
        controller = ZkController(
            zk, broker_id, self.config(broker_id, props), deletion_started=deletion_started
        )
        self.controllers.append((controller, zk))
        await controller.start()
        return controller

    def controller_zk(self, controller: ZkController) -> KafkaZkClient:
        return next(zk for c, zk in self.controllers if c is controller)

    async def create_topic(self, topic: str, assignment: dict[int, tuple[int, ...]]) -> None:
        """What an admin does in ZooKeeper mode: write ``/brokers/topics/<topic>``."""
        assert self.admin is not None
        partitions = {p: ReplicaAssignment(r) for p, r in assignment.items()}
        await self.admin.create_topic_assignment(topic, TopicAssignment(None, partitions))

    async def state(self, tp: TopicPartition) -> Any:
        assert self.admin is not None
        return await self.admin.get_partition_state(tp)

    async def wait_state(
        self, tp: TopicPartition, predicate: Callable[[Any], bool], what: str
    ) -> Any:
        """Wait until the partition's state znode satisfies ``predicate``; returns it."""
        found: list[Any] = []

        async def check() -> bool:
            state = await self.state(tp)
            found[:] = [state]
            return state is not None and predicate(state)

        with contextlib.suppress(AssertionError):
            await eventually(check, what)
            return found[0]
        raise AssertionError(f"{what}: the state of {tp} is {found[0] if found else None}")
