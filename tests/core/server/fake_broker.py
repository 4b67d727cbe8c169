"""A ``BrokerServices`` for handler tests, and ``call``: a request handled as a client sees it.

``FakeBroker`` is the broker's real parts (log manager, topic registry, replica manager,
``__consumer_offsets`` with its offset store, group coordinator) without sockets, and without
the start-up the real ``Broker`` does; handlers run against it as against the real one.
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from core.log.config import LogConfig
from core.records.builder import RecordBatchBuilder
from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.authorizer import AclAuthorizer
from core.server.cluster_types import (
    BrokerEndpoint,
    BrokerInfo,
    LeaderAndIsr,
    PartitionState,
    StopReplicaPartition,
    TopicPartition,
)
from core.server.config import load_broker_config
from core.server.group_coordinator import GroupCoordinator
from core.server.handler_support import BrokerServices
from core.server.handlers import HANDLERS
from core.server.internal_topics import TRANSACTION_STATE_TOPIC, BrokerTrust
from core.server.protocol import ProtocolCodec
from core.server.quota_store import LocalQuotaStore
from core.server.quotas import ClientQuotas
from core.server.scram_credentials import LocalScramCredentialStore, ScramCredentialCache
from core.server.single_controller import SingleBrokerController
from core.server.timing_wheel import Timer
from core.server.topics import TopicInfo
from core.server.transaction_coordinator import CoordinatorSettings, TransactionCoordinator
from core.server.transaction_marker_channel import MarkerChannel, TxnMarker
from core.server.transaction_state_topic import (
    TransactionStateLog,
    ensure_transaction_state_topic,
)

from .offsets_storage import OffsetsStorage

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)
LISTENER = "PLAINTEXT"


class FakeBroker:
    """``BrokerServices`` over real storage in ``directory``.

    Args:
        settings: broker properties on top of ``node.id=1`` and ``log.dirs=directory``.
        endpoint: what ``advertised_endpoint`` answers.
    """

    def __init__(
        self,
        directory: Path,
        settings: Mapping[str, str] | None = None,
        *,
        endpoint: tuple[str, int] = ("127.0.0.1", 9092),
    ) -> None:
        self.directory = directory
        self.settings = dict(settings or {})
        self.endpoint = endpoint
        self.codec = CODEC
        self.config = load_broker_config(
            None, {"node.id": "1", "log.dirs": str(directory), **self.settings}
        )
        self.storage = OffsetsStorage(
            directory, partitions=2, broker_defaults=self.config.log_config_defaults()
        )
        self.topics = self.storage.topics
        self.log_manager = self.storage.log_manager
        self.replica_manager = self.storage.replica_manager
        self.group_offsets = self.storage.store()
        self.group_coordinator = GroupCoordinator(Timer())
        self.authorizer: AclAuthorizer | None = None
        self.broker_trust = BrokerTrust()
        # The replica manager's: its NOT_LEADER_OR_FOLLOWER answers read the same metadata.
        self.metadata_cache = self.replica_manager.metadata_cache
        self.broker_epoch = -1
        self.controller = SingleBrokerController(self.metadata_cache)
        self._publish()
        self.scram_cache = ScramCredentialCache()
        self.scram_credentials = LocalScramCredentialStore(directory, self.scram_cache)
        self.quotas = ClientQuotas.open(LocalQuotaStore(directory))
        self.transaction_coordinator = self._transaction_coordinator()
        # A member added to the Protocol and not here fails every handler test at once.
        assert isinstance(self, BrokerServices)

    def _transaction_coordinator(self) -> TransactionCoordinator:
        """Over a two-partition ``__transaction_state``, every partition loaded."""
        info = ensure_transaction_state_topic(self.topics, 2, 1 << 20, 1, 1)
        self.replica_manager.open_topic(info)
        rm = self.replica_manager

        async def written(partition: Any, offset: int) -> None:
            await rm.wait_durable_always(partition)

        state_log = TransactionStateLog(lambda i: rm.partition(TRANSACTION_STATE_TOPIC, i), written)
        markers = MarkerChannel(rm, on_written=self.on_marker_written)
        coordinator = TransactionCoordinator(
            lambda: 2,
            state_log,
            markers,
            self.allocate_producer_id,
            CoordinatorSettings(max_timeout_ms=60_000),
        )
        for index in range(2):
            partition = rm.partition(TRANSACTION_STATE_TOPIC, index)
            assert partition is not None
            asyncio.run(coordinator.load(index, partition.leader_epoch))
        return coordinator

    def on_marker_written(self, tp: tuple[str, int], marker: TxnMarker) -> None:
        if tp[0] == "__consumer_offsets":
            self.group_offsets.complete_txn(marker.producer_id, tp[1], marker.commit)

    @property
    def cluster_id(self) -> str:
        return self.log_manager.cluster_id

    def advertised_endpoint(self, listener: str) -> tuple[str, int]:
        assert listener == LISTENER
        return self.endpoint

    def _publish(self) -> None:
        """The MetadataCache of a broker alone: itself, leading every partition."""
        node = self.config.node_id
        me = BrokerInfo(node, (BrokerEndpoint(LISTENER, *self.endpoint, "PLAINTEXT"),))
        states = [
            PartitionState(t.name, t.topic_id, p, 0, LeaderAndIsr(node, 0, (node,)), (node,))
            for t in self.topics.all()
            for p in range(t.partitions)
        ]
        cache = self.metadata_cache
        known = {s.tp for name in cache.topic_names() for s in cache.partitions_of(name)}
        cache.update(node, 0, [me], states, known - {s.tp for s in states})

    async def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int = 1,
        assignments: Mapping[int, Sequence[int]] | None = None,
        validate_only: bool = False,
        timeout_ms: int = 0,
    ) -> TopicInfo:
        return self.make_topic(name, partitions, configs, validate_only=validate_only)

    def make_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        """``create_topic`` at once, for a test's set-up."""
        info = self.topics.create(name, partitions, configs or {}, validate_only=validate_only)
        if not validate_only:
            self.replica_manager.open_topic(info)
            self._publish()
        return info

    async def delete_topic(self, name: str, *, timeout_ms: int = 0) -> TopicInfo:
        info = self.topics.delete(name)
        self.replica_manager.remove_topic(name)
        self._publish()
        return info

    async def create_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> tuple[TopicInfo, asyncio.Future[TopicInfo] | None]:
        _, after = self.topics.add_partitions(name, count, validate_only=validate_only)
        if validate_only:
            return after, None

        async def opening() -> TopicInfo:
            # As the broker's: the new partitions are served a step after registration.
            self.replica_manager.open_topic(after)
            self._publish()
            return after

        return after, asyncio.ensure_future(opening())

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> LogConfig:
        info = self.topics.set_configs(name, configs)
        config = self.topics.effective_config(info)
        self.log_manager.update_topic_config(name, config)
        return config

    async def allocate_producer_id(self) -> int:
        return self.topics.allocate_producer_id()

    async def ensure_offsets_topic(self) -> None:
        return None

    async def ensure_transaction_state_topic(self) -> None:
        return None

    async def become_leader_or_follower(
        self, controller_id: int, controller_epoch: int, states: list[PartitionState]
    ) -> dict[TopicPartition, int]:
        raise AssertionError("a broker running alone gets no LeaderAndIsr")

    async def update_metadata(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: list[BrokerInfo],
        states: list[PartitionState],
    ) -> None:
        self.metadata_cache.update(controller_id, controller_epoch, brokers, states)

    async def stop_replicas(
        self, controller_id: int, controller_epoch: int, partitions: list[StopReplicaPartition]
    ) -> dict[TopicPartition, int]:
        raise AssertionError("a broker running alone gets no StopReplica")

    # -- for the tests ---------------------------------------------------------------------
    def append(self, topic: str, partition: int, count: int) -> None:
        """``count`` records appended as a producer's batch."""
        builder = RecordBatchBuilder()
        for i in range(count):
            builder.append(b"v%d" % i, timestamp=1_700_000_000_000 + i)
        p = self.replica_manager.partition(topic, partition)
        assert p is not None
        self.replica_manager.append(p, builder.build())

    def close(self) -> None:
        self.group_coordinator.shutdown()
        self.storage.close()

    def restart(self) -> FakeBroker:
        """Close, then a new broker over the same directory and settings."""
        self.close()
        return FakeBroker(self.directory, self.settings, endpoint=self.endpoint)


def schema(api_key: ApiKey, version: int) -> Any:
    """The module of a request schema: its nested classes by name."""
    return sys.modules[load_request_schema(api_key, version).__module__]


def call(broker: BrokerServices, api_key: ApiKey, version: int, request: Any) -> Any:
    """Frame, decode, handle, encode and decode again: the response a client reads."""
    request_type = load_request_schema(api_key, version)
    header_type = request_type.__header_schema__
    out = io.BytesIO()
    entity_writer(header_type)(
        out,
        header_type(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(7),
            client_id="test",
        ),
    )
    entity_writer(request_type)(out, request)
    ctx, decoded = CODEC.decode_request(out.getvalue(), LISTENER, "127.0.0.1:1")
    response = asyncio.run(HANDLERS[api_key](broker, ctx, decoded))
    frame = CODEC.encode_response(ctx, response)
    response_type = CODEC.response_type(api_key, version)
    _, used = entity_reader(response_type.__header_schema__)(frame, 4)
    body, _ = entity_reader(response_type)(frame, 4 + used)
    return body
