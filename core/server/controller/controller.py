"""ZkController: the controller of a ZooKeeper-mode cluster (Kafka's KafkaController).

Every broker runs one; at most one is *active*. Election: a broker becomes the controller by
creating the ephemeral ``/controller`` and incrementing ``/controller_epoch`` in one
transaction; the others watch ``/controller`` and try again when it disappears. The active
controller's term (``ActiveController``) starts with Kafka's failover (load the cluster
from ZooKeeper, tell every broker) and ends when ``/controller`` names another broker, when
the ZooKeeper session expires, or when a fenced write finds a newer controller epoch
(``ZkControllerMovedError``): it then resigns, stopping its watches and channels without
writing anything.

Events (ZooKeeper watches, requests from the broker side, the auto-rebalance timer) go
through one asyncio queue and are processed one at a time by one task (Kafka's
ControllerEventManager), so decisions never interleave.

The broker side calls ``controlled_shutdown`` (ControlledShutdown requests) and
``elect_leaders`` (ElectLeaders); both raise ``NotControllerError`` when this broker is not
the active controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from core.server.cluster_types import TopicPartition
from core.server.config import BrokerConfig
from core.server.controller import events
from core.server.controller.active_controller import ActiveController, ElectionResults
from core.server.controller.channel import NodeSender
from core.server.controller.elections import ElectionType
from core.server.controller.errors import ControllerError, NotControllerError
from core.server.controller.reassignment import ReassignmentResults
from core.server.controller.topic_deletion import DeletionStarted
from core.server.node_client import ClientSettings, NodeClient
from core.server.zookeeper import paths
from core.server.zookeeper.client import ZkConnectionState
from core.server.zookeeper.errors import ZkControllerMovedError, ZkError, ZkNoNodeError
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.topic_data import ReplicaAssignment
from core.server.zookeeper.watch import ZkWatch

log = logging.getLogger(__name__)

# Kafka schedules the first automatic preferred leader election this long after failover.
AUTO_REBALANCE_FIRST_DELAY_S = 5.0
# An event slower than this is logged (Kafka's EventQueueTimeMs / event rate metrics).
SLOW_EVENT_S = 5.0

ChannelFactory = Callable[[], NodeSender]


def default_channel_factory(config: BrokerConfig) -> ChannelFactory:
    """Connections on the inter-broker listener, timing out after controller.socket.timeout.ms."""

    def create() -> NodeSender:
        timeout_ms = config.get("controller.socket.timeout.ms")
        return NodeClient(ClientSettings.from_config(config, request_timeout_ms=timeout_ms))

    return create


class ZkController:
    def __init__(
        self,
        zk: KafkaZkClient,
        broker_id: int,
        config: BrokerConfig,
        channel_factory: ChannelFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        deletion_started: DeletionStarted | None = None,
    ) -> None:
        """
        Args:
            deletion_started: told when this controller starts deleting a topic (the
                broker marks a tiered topic's remote partitions for deletion).
            channel_factory: makes the client of a term's channels (one per term, closed
                when it ends); default: a NodeClient on the inter-broker listener.
            clock: seconds, to time events.
        """
        self._zk = zk
        self.broker_id = broker_id
        self._config = config
        self._channel_factory = channel_factory or default_channel_factory(config)
        self._clock = clock
        self._deletion_started = deletion_started
        self._queue: asyncio.Queue[events.Event] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._current: events.Event | None = None  # the event being processed
        self._controller_watch: ZkWatch | None = None
        self._active: ActiveController | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._epoch = -1
        self._stopped = False

    # -- state -------------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        return self._active is not None

    @property
    def controller_epoch(self) -> int:
        """The epoch of this broker's latest term as controller (-1 if it never was)."""
        return self._epoch

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start processing events and campaign for ``/controller``."""
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.broker_id}")
        self._zk.add_state_listener(self._on_zk_state)
        self._controller_watch = await self._zk.watch_controller(
            lambda registration: self._put(events.ControllerChange(registration))
        )

    async def stop(self) -> None:
        """Stop processing and end the term, if any, without writing to ZooKeeper (closing
        the session then removes ``/controller``, as when a Kafka broker stops)."""
        self._stopped = True
        if self._controller_watch is not None:
            self._controller_watch.cancel()
        with contextlib.suppress(ValueError):
            self._zk.zookeeper.remove_state_listener(self._on_zk_state)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._resign()
        stopping = NotControllerError("the controller is stopping")
        if self._current is not None:
            _fail(self._current, stopping)
        while not self._queue.empty():
            _fail(self._queue.get_nowait(), stopping)

    # -- the broker side's requests ----------------------------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        """Move leaderships off ``broker_id`` and take it out of ISRs; returns the
        partitions it still leads (those with one replica, those without another ISR member).

        Raises:
            NotControllerError, BrokerNotAvailableError, StaleBrokerEpochError.
        """
        return await self._ask(
            lambda answer: events.ControlledShutdown(broker_id, broker_epoch, answer),
            only_active=False,
        )

    async def elect_leaders(
        self, election_type: ElectionType, partitions: set[TopicPartition] | None = None
    ) -> ElectionResults:
        """Preferred or unclean elections (ElectLeaders): per partition (error code, message).

        Raises:
            NotControllerError: this broker is not the active controller.
        """
        asked = None if partitions is None else frozenset(partitions)
        return await self._ask(
            lambda answer: events.ReplicaLeaderElection(ElectionType(election_type), asked, answer)
        )

    async def alter_partition_reassignments(
        self, requested: dict[TopicPartition, tuple[int, ...] | None]
    ) -> ReassignmentResults:
        """Start, replace or cancel reassignments: per partition (error code, message).

        Raises:
            NotControllerError: this broker is not the active controller.
        """
        return await self._ask(lambda answer: events.AlterReassignments(dict(requested), answer))

    async def list_partition_reassignments(
        self, partitions: set[TopicPartition] | None = None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """The reassignments in progress (of ``partitions``).

        Raises:
            NotControllerError: this broker is not the active controller.
        """
        asked = None if partitions is None else frozenset(partitions)
        return await self._ask(lambda answer: events.ListReassignments(asked, answer))

    async def _ask(
        self,
        event: Callable[[asyncio.Future[Any]], events.Event],
        *,
        only_active: bool = True,
    ) -> Any:
        """Queue the event ``event(answer)`` and wait for its answer; refused at once with
        NotControllerError when ``only_active`` and this broker is not the controller."""
        if only_active and not self.is_active:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._put(event(answer))
        return await answer

    # -- events ------------------------------------------------------------------------------
    def _put(self, event: events.Event) -> None:
        if self._stopped:
            _fail(event, NotControllerError("the controller is stopping"))
            return
        self._queue.put_nowait(event)

    def _on_zk_state(self, state: ZkConnectionState) -> None:
        if state is ZkConnectionState.EXPIRED:
            self._put(events.Expire())

    async def _run(self) -> None:
        while True:
            event = self._current = await self._queue.get()
            started = self._clock()
            try:
                await self._handle(event)
            except Exception:
                log.exception("controller %d: handling %s failed", self.broker_id, event)
            # Not on cancellation: stop() answers the event that was cut short.
            self._current = None
            elapsed = self._clock() - started
            if elapsed > SLOW_EVENT_S:
                log.warning("controller event %s took %.1f s", type(event).__name__, elapsed)

    async def _handle(self, event: events.Event) -> None:
        try:
            result = await self._process(event)
        except ZkControllerMovedError as e:
            log.info("controller %d: a newer controller was elected (%s); resigning",
                     self.broker_id, e)  # fmt: skip
            _fail(event, NotControllerError("the controller moved"))
            await self._resign_fenced()
        except ControllerError as e:
            log.info("controller %d: %s refused: %s", self.broker_id, type(event).__name__, e)
            _fail(event, e)
        except Exception as e:
            log.exception("controller %d: processing %s failed", self.broker_id, event)
            _fail(event, e)
        else:
            answer = getattr(event, "answer", None)
            if answer is not None and not answer.done():
                answer.set_result(result)

    async def _process(self, event: events.Event) -> Any:
        if isinstance(event, events.ControllerChange):
            await self._on_controller_change(event)
            return None
        if isinstance(event, events.Expire):
            await self._resign()
            return None
        active = self._active
        if active is None:
            if isinstance(
                event,
                events.ControlledShutdown
                | events.ReplicaLeaderElection
                | events.AlterReassignments
                | events.ListReassignments,
            ):
                raise NotControllerError(f"broker {self.broker_id} is not the controller")
            return None  # an event of an ended term
        match event:
            case events.BrokerChange():
                await active.on_broker_change()
            case events.TopicChange():
                await active.on_topic_change()
            case events.PartitionModifications(topic=topic):
                await active.on_partition_modifications(topic)
            case events.TopicDeletion():
                await active.on_topic_deletion()
            case events.IsrChangeNotification():
                await active.on_isr_change_notification()
            case events.ConfigChangeNotification():
                await active.on_config_change_notification()
            case events.StopReplicaAnswered():
                await active.on_stop_replica_answered(event)
            case events.ControlledShutdown(broker_id=broker_id, broker_epoch=broker_epoch):
                return await active.controlled_shutdown(broker_id, broker_epoch)
            case events.ReplicaLeaderElection(election_type=kind, partitions=partitions):
                return await active.elect_leaders(kind, partitions)
            case events.AlterReassignments(requested=requested):
                return await active.alter_reassignments(requested)
            case events.ListReassignments(partitions=partitions):
                return active.list_reassignments(partitions)
            case events.AutoPreferredReplicaLeaderElection():
                await active.auto_rebalance(
                    self._config.get("leader.imbalance.per.broker.percentage")
                )
        return None

    # -- election and resignation ------------------------------------------------------------
    async def _on_controller_change(self, event: events.ControllerChange) -> None:
        registration = event.registration
        if registration is None:
            await self._resign()
            await self._elect()
        elif registration.broker_id != self.broker_id:
            await self._resign()

    async def _elect(self) -> None:
        if await self._zk.get_controller() is not None:
            return  # someone else was quicker: its registration reaches us by the watch
        epoch = await self._zk.try_create_controller(self.broker_id)
        if epoch is None:
            return
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch.epoch)
        self._epoch = epoch.epoch
        self._active = ActiveController(
            self._zk,
            self.broker_id,
            self._config,
            epoch,
            self._channel_factory(),
            self._put,
            self._deletion_started,
        )
        try:
            await self._active.failover()
        except ZkControllerMovedError:
            raise
        except Exception:
            # Kafka's triggerControllerMove: give the role to whoever can hold it.
            log.exception("controller %d: failover failed; resigning", self.broker_id)
            version = self._active.epoch_zk_version
            await self._resign()
            with contextlib.suppress(ZkError):
                await self._zk.delete_controller(controller_epoch_zk_version=version)
            return
        if self._config.get("auto.leader.rebalance.enable"):
            self._rebalance_task = asyncio.create_task(self._auto_rebalance())

    async def _resign(self) -> None:
        active, self._active = self._active, None
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        if active is not None:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self._epoch)
            await active.close()

    async def _resign_fenced(self) -> None:
        """After a fenced write failed: resign; if ``/controller`` still names this session
        (the epoch moved without it, which a Kafka controller never does), delete it so that
        an election bumps the epoch properly."""
        await self._resign()
        zookeeper = self._zk.zookeeper
        try:
            node = await zookeeper.get(paths.CONTROLLER)
        except ZkNoNodeError:
            return
        if node.stat.ephemeral_owner == zookeeper.session_id:
            with contextlib.suppress(ZkError):
                await zookeeper.delete(paths.CONTROLLER, node.stat.version)

    async def _auto_rebalance(self) -> None:
        loop = asyncio.get_running_loop()
        delay = AUTO_REBALANCE_FIRST_DELAY_S
        while True:
            await asyncio.sleep(delay)
            answer: asyncio.Future[Any] = loop.create_future()
            self._put(events.AutoPreferredReplicaLeaderElection(answer))
            with contextlib.suppress(Exception):
                await answer
            delay = self._config.get("leader.imbalance.check.interval.seconds")


def _fail(event: events.Event, error: BaseException) -> None:
    answer = getattr(event, "answer", None)
    if answer is None or answer.done():
        return
    if isinstance(event, events.AutoPreferredReplicaLeaderElection):
        answer.set_result(None)  # the timer only waits for it; the failure is logged
    else:
        answer.set_exception(error)
