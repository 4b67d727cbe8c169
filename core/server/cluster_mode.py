"""A broker's membership of a ZooKeeper-mode cluster (``zookeeper.connect`` set).

What Kafka's KafkaServer does around ZooKeeper, in start-up order:

1. ``connect``: open the session (creating the chroot), create the persistent paths, and
   agree on the cluster id: ``/cluster/id`` (created by the first broker, from its log dirs'
   ``meta.properties`` id if it has one) must equal the id in every log dir's
   ``meta.properties``, or start-up stops naming both (Kafka's InconsistentClusterIdException).
2. ``register``: once the listeners are bound, create the ephemeral ``/brokers/ids/<id>``
   with the advertised endpoints (real ports) and rack; its czxid is the broker epoch that
   the controller's requests must carry.
3. ``start_controller``: campaign for ``/controller`` (``core.server.controller``).

Session loss: when ZooKeeper expires the session, the registration is gone and the
controller elects other leaders; ``on_session_expired`` lets the broker stop leading at
once (its partitions answer NOT_LEADER_OR_FOLLOWER) instead of accepting writes that can no
longer be replicated safely. When the client has a new session it registers again with a
new epoch, and the controller sends it LeaderAndIsr for its partitions, as for a broker
that restarted.

Stopping: ``controlled_shutdown`` asks the controller (ControlledShutdown v3 on the
inter-broker listener) to move this broker's leaderships away, retried
``controlled.shutdown.max.retries`` times every ``controlled.shutdown.retry.backoff.ms``
while partitions remain or the controller cannot be reached; then ``close`` ends the
session (ZooKeeper deletes the registration at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from core.errors import CoreError
from core.log import meta_properties
from core.log.files import META_PROPERTIES
from core.server.api_keys import INTER_BROKER_VERSIONS, ApiKey
from core.server.broker_connection import BrokerClientError
from core.server.config import BrokerConfig
from core.server.controller.controller import ZkController
from core.server.controller.topic_deletion import DeletionStarted
from core.server.interbroker_schema import ControlledShutdownRequest
from core.server.metadata_cache import MetadataCache
from core.server.node_client import BrokerEndpoint as NodeEndpoint
from core.server.node_client import NodeClient
from core.server.zookeeper.client import ZkConnectionState
from core.server.zookeeper.data import BrokerRegistration, EndPoint
from core.server.zookeeper.errors import ZkError
from core.server.zookeeper.kafka_zk import KafkaZkClient

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_PURPOSE = "controlled-shutdown"


class InconsistentClusterIdError(CoreError):
    """The log dirs belong to another cluster than ZooKeeper's (Kafka's
    InconsistentClusterIdException): the broker does not start."""


class ClusterStartError(CoreError):
    """Cluster mode cannot start with this configuration; the message names the key."""


def stored_cluster_id(log_dirs: Iterable[Path]) -> str | None:
    """The cluster id in the log dirs' ``meta.properties`` (the first found), if any."""
    for directory in log_dirs:
        mp = meta_properties.read(Path(directory) / META_PROPERTIES)
        if mp is not None and mp.cluster_id:
            return mp.cluster_id
    return None


class ClusterMode:
    """This broker's session, registration and controller in a ZooKeeper-mode cluster."""

    def __init__(self, config: BrokerConfig, metadata_cache: MetadataCache) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.metadata_cache = metadata_cache
        self.zk: KafkaZkClient | None = None
        self.controller: ZkController | None = None
        self.broker_epoch = -1
        self._registration: BrokerRegistration | None = None
        self._reregistering: asyncio.Task[None] | None = None
        self._session_listeners: list[Callable[[ZkConnectionState], None]] = []
        self._closed = False

    @property
    def connected_zk(self) -> KafkaZkClient:
        assert self.zk is not None, "cluster mode is not connected"
        return self.zk

    # -- start-up ------------------------------------------------------------------------------
    async def connect(self) -> str:
        """Open the ZooKeeper session and agree on the cluster id; returns it.

        Raises:
            ClusterStartError: a bad zookeeper.connect.
            ZkConnectionTimeoutError: no session within zookeeper.connection.timeout.ms.
            InconsistentClusterIdError: the log dirs belong to another cluster.
        """
        config = self.config
        session_ms = config.get("zookeeper.session.timeout.ms")
        try:
            self.zk = await KafkaZkClient.connect(
                config.get("zookeeper.connect"),
                session_timeout_ms=session_ms,
                connection_timeout_ms=config.get("zookeeper.connection.timeout.ms") or session_ms,
                max_in_flight_requests=config.get("zookeeper.max.in.flight.requests"),
            )
        except ValueError as e:
            raise ClusterStartError(f"zookeeper.connect: {e}") from e
        self.zk.add_state_listener(self._on_state)
        await self.zk.ensure_persistent_paths()
        stored = await asyncio.to_thread(stored_cluster_id, config.log_dirs)
        cluster_id = await self.zk.get_or_create_cluster_id(stored)
        if stored is not None and stored != cluster_id:
            raise InconsistentClusterIdError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored} in "
                f"meta.properties ({', '.join(str(d) for d in config.log_dirs)}). The broker "
                "is trying to join the wrong cluster. Configured zookeeper.connect may be "
                "wrong."
            )
        log.info("cluster id %s (ZooKeeper %s)", cluster_id, config.get("zookeeper.connect"))
        return cluster_id

    async def register(self, endpoints: Iterable[EndPoint]) -> int:
        """Create ``/brokers/ids/<id>``; returns the broker epoch.

        Raises:
            ZkBrokerIdInUseError: another live broker has this id.
        """
        self._registration = BrokerRegistration(
            broker_id=self.broker_id,
            endpoints=tuple(endpoints),
            rack=self.config.broker_rack,
        )
        self.broker_epoch = await self.connected_zk.register_broker(self._registration)
        log.info(
            "registered broker %d at /brokers/ids/%d (epoch %d): %s",
            self.broker_id,
            self.broker_id,
            self.broker_epoch,
            ", ".join(e.connection_string() for e in self._registration.endpoints),
        )
        return self.broker_epoch

    async def start_controller(
        self, deletion_started: DeletionStarted | None = None
    ) -> ZkController:
        self.controller = ZkController(
            self.connected_zk, self.broker_id, self.config, deletion_started=deletion_started
        )
        await self.controller.start()
        return self.controller

    # -- the session -----------------------------------------------------------------------------
    def add_session_listener(self, listener: Callable[[ZkConnectionState], None]) -> None:
        """Called on the loop with every session state change (after the registration's own
        handling)."""
        self._session_listeners.append(listener)

    def _on_state(self, state: ZkConnectionState) -> None:
        if self._closed:
            return
        if state is ZkConnectionState.EXPIRED:
            log.warning(
                "broker %d lost its ZooKeeper session: its registration is gone; it stops "
                "leading until the controller tells it again",
                self.broker_id,
            )
            self.broker_epoch = -1
        elif state is ZkConnectionState.NEW_SESSION and self._registration is not None:
            self._reregistering = asyncio.ensure_future(self._register_again())
        for listener in list(self._session_listeners):
            try:
                listener(state)
            except Exception:
                log.exception("session listener %r failed on %s", listener, state.value)

    async def _register_again(self) -> None:
        assert self._registration is not None
        while not self._closed:
            try:
                await self.register(self._registration.endpoints)
                return
            except ZkError as e:
                log.warning("registering broker %d again failed (%s); retrying", self.broker_id, e)
                await asyncio.sleep(1.0)

    # -- stopping ------------------------------------------------------------------------------
    async def controlled_shutdown(self, client: NodeClient) -> bool:
        """Ask the controller to move this broker's leaderships away (Kafka's
        KafkaServer.controlledShutdown); True once it answered with nothing left to move.

        Each attempt finds the controller (the MetadataCache, else ``/controller``) and
        sends ControlledShutdown on the inter-broker listener; an error, an unreachable
        controller or partitions still led make it try again after the backoff.
        """
        config = self.config
        attempts = config.get("controlled.shutdown.max.retries") + 1
        backoff_s = config.get("controlled.shutdown.retry.backoff.ms") / 1000
        timeout_ms = config.get("request.timeout.ms")
        for attempt in range(1, attempts + 1):
            try:
                node = await self._controller_endpoint()
                if node is None:
                    log.info("controlled shutdown: no controller known yet")
                else:
                    response = await client.send(
                        node,
                        CONTROLLED_SHUTDOWN_PURPOSE,
                        ApiKey.CONTROLLED_SHUTDOWN,
                        self._shutdown_request,
                        versions=INTER_BROKER_VERSIONS[ApiKey.CONTROLLED_SHUTDOWN],
                        timeout_ms=timeout_ms,
                    )
                    error = int(response.error_code)
                    remaining = sorted(
                        (p.topic_name, p.partition_index) for p in response.remaining_partitions
                    )
                    if error == 0 and not remaining:
                        log.info("controlled shutdown of broker %d succeeded", self.broker_id)
                        return True
                    log.info(
                        "controlled shutdown attempt %d: error %d, partitions still led: %s",
                        attempt,
                        error,
                        remaining,
                    )
            except (BrokerClientError, OSError, ZkError) as e:
                log.info("controlled shutdown attempt %d failed: %s", attempt, e)
            if attempt < attempts:
                await asyncio.sleep(backoff_s)
        log.warning(
            "proceeding with an uncontrolled shutdown: the %d controlled shutdown attempts "
            "failed (controlled.shutdown.max.retries)",
            attempts,
        )
        return False

    def _shutdown_request(self, _version: int) -> Any:
        return ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch)

    async def _controller_endpoint(self) -> NodeEndpoint | None:
        listener = self.config.inter_broker_listener_name
        controller_id = self.metadata_cache.controller_id
        if controller_id is None:
            registration = await self.connected_zk.get_controller()
            if registration is None:
                return None
            controller_id = registration.broker_id
        info = self.metadata_cache.broker(controller_id)
        endpoint = info.endpoint(listener) if info is not None else None
        if endpoint is not None:
            return NodeEndpoint(controller_id, endpoint.host, endpoint.port)
        registered = await self.connected_zk.get_broker(controller_id)
        found = registered.endpoint(listener) if registered is not None else None
        if found is None:
            return None
        return NodeEndpoint(controller_id, found.host or "", found.port)

    async def stop_controller(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None

    async def close(self) -> None:
        """End the session: ZooKeeper deletes the registration (and ``/controller`` if this
        broker held it) at once."""
        self._closed = True
        if self._reregistering is not None:
            self._reregistering.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reregistering
        await self.stop_controller()
        if self.zk is not None:
            await self.zk.close()
            self.zk = None
