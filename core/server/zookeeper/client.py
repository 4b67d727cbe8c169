"""An asyncio ZooKeeper client over kazoo: every operation awaitable, errors as ``ZkError``.

kazoo runs its own threads (a connection thread and a callback thread). Nothing here blocks
the event loop: each operation starts kazoo's ``*_async`` call and awaits an asyncio future
that kazoo's completion is handed to with ``loop.call_soon_threadsafe``; connection state
changes and watch events reach the loop the same way, and kazoo's threads touch no asyncio
object directly.

Operations behave like Kafka's ``retryRequestsUntilConnected``: one that fails with a lost
connection waits until the client is connected again and is sent again, so a write whose
connection dropped may have been applied once before its retry (callers use conditional
writes and check after NODEEXISTS / BADVERSION, as Kafka does). At most
``max_in_flight_requests`` operations are sent at once (Kafka's
``zookeeper.max.in.flight.requests``); the rest wait their turn.

Connection states (``ZkConnectionState``) are delivered to listeners on the loop, in order:
CONNECTED once, then SUSPENDED when the connection drops, RECONNECTED when it is back with
the same session (ephemeral znodes kept), EXPIRED when ZooKeeper ended the session (its
ephemeral znodes are gone), NEW_SESSION when the client is connected again with a new
session (ephemeral znodes must be created again), and CLOSED after ``close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, RolledBackError
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat as KazooStat
from kazoo.retry import KazooRetry

from core.server.zookeeper.errors import (
    ZkClosedError,
    ZkConnectionLossError,
    ZkConnectionTimeoutError,
    ZkNodeExistsError,
    ZkNoNodeError,
)
from core.server.zookeeper.ops import (
    CheckOp,
    CreateOp,
    DeleteOp,
    OpResult,
    SetDataOp,
    ZkOp,
    ZnodeData,
    ZnodeStat,
    map_kazoo_error,
)
from core.server.zookeeper.watch import ZkWatch

log = logging.getLogger(__name__)
T = TypeVar("T")

# Kafka's zookeeper.session.timeout.ms and zookeeper.max.in.flight.requests defaults.
DEFAULT_SESSION_TIMEOUT_MS = 18_000
DEFAULT_MAX_IN_FLIGHT_REQUESTS = 10
# Reconnection backoff: ZooKeeper may be away for long, and must be found again promptly.
_RECONNECT_MAX_DELAY_S = 1.0


class ZkConnectionState(enum.Enum):
    """What a state listener is told (see the module docstring for the order)."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    RECONNECTED = "reconnected"
    EXPIRED = "expired"
    NEW_SESSION = "new_session"
    CLOSED = "closed"


StateListener = Callable[[ZkConnectionState], None]


class ZooKeeperClient:
    """One ZooKeeper session at a time (kazoo re-creates it after expiry), for asyncio callers.

    Create with ``await ZooKeeperClient.connect(...)``; end with ``await close()``. Paths are
    relative to the connect string's chroot.
    """

    def __init__(self, kazoo: KazooClient, loop: asyncio.AbstractEventLoop, max_in_flight: int):
        self._kazoo = kazoo
        self._loop = loop
        self._in_flight = asyncio.Semaphore(max_in_flight)
        # Set while connected, or once closed (waiters then see _closed): operations wait on it.
        self._ready = asyncio.Event()
        self._closing = False
        self._closed = False
        self._state: ZkConnectionState | None = None
        self._session_id: int | None = None
        self._listeners: list[StateListener] = []
        self._watches: set[ZkWatch] = set()

    @classmethod
    async def connect(
        cls,
        connect_string: str,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS,
    ) -> ZooKeeperClient:
        """Connect and wait for the first session.

        Args:
            connect_string: ``host:port[,host:port...][/chroot]``.
            connection_timeout_ms: how long to wait for the first session (Kafka's
                ``zookeeper.connection.timeout.ms``, which defaults to the session timeout).

        Raises:
            ZkConnectionTimeoutError: no server answered in time.
        """
        handler = SequentialThreadingHandler()
        retry = KazooRetry(
            max_tries=-1, delay=0.05, backoff=2, max_jitter=0.1,
            max_delay=_RECONNECT_MAX_DELAY_S, sleep_func=handler.sleep_func,
        )  # fmt: skip
        kazoo = KazooClient(
            hosts=connect_string,
            timeout=session_timeout_ms / 1000,
            handler=handler,
            connection_retry=retry,
        )
        client = cls(kazoo, asyncio.get_running_loop(), max_in_flight_requests)
        kazoo.add_listener(client._on_kazoo_state)
        timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        connected = await asyncio.to_thread(kazoo.start_async().wait, timeout_s)
        if not connected:
            client._closing = True
            await asyncio.to_thread(_stop_kazoo, kazoo)
            raise ZkConnectionTimeoutError(
                f"no ZooKeeper session with {connect_string} within {timeout_s:g} s"
            )
        # The CONNECTED event is on its way to the loop: let it land, so that the session id
        # and state are known when connect() returns.
        await client._ready.wait()
        return client

    # -- state -----------------------------------------------------------------------------
    @property
    def state(self) -> ZkConnectionState | None:
        return self._state

    @property
    def session_id(self) -> int | None:
        """The current session's id (ZooKeeper's ephemeral owner of the znodes it creates)."""
        return self._session_id

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """Session id and password: tests use them to end the session from another client."""
        return self._kazoo.client_id

    def add_state_listener(self, listener: StateListener) -> None:
        """Call ``listener`` on the loop with every connection state change, in order."""
        self._listeners.append(listener)

    def remove_state_listener(self, listener: StateListener) -> None:
        self._listeners.remove(listener)

    def _post(self, callback: Callable[..., Any], *args: Any) -> None:
        """From a kazoo thread: run ``callback`` on the loop (dropped once the loop is closed)."""
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            log.debug("event loop closed; dropped a ZooKeeper event")

    def _on_kazoo_state(self, state: KazooState) -> None:
        # kazoo's connection thread: read the session id now, it changes on reconnection.
        client_id = self._kazoo.client_id if state == KazooState.CONNECTED else None
        self._post(self._on_state, state, client_id[0] if client_id else None)

    def _on_state(self, state: KazooState, session_id: int | None) -> None:
        if self._closed or self._closing:
            return
        if state == KazooState.CONNECTED:
            if self._session_id is None:
                event = ZkConnectionState.CONNECTED
            elif session_id == self._session_id:
                event = ZkConnectionState.RECONNECTED
            else:
                event = ZkConnectionState.NEW_SESSION
            self._session_id = session_id
            self._ready.set()
        elif state == KazooState.SUSPENDED:
            event = ZkConnectionState.SUSPENDED
            self._ready.clear()
        else:
            event = ZkConnectionState.EXPIRED
            self._ready.clear()
        log.info("ZooKeeper connection %s (session 0x%x)", event.value, self._session_id or 0)
        self._emit(event)

    def _emit(self, event: ZkConnectionState) -> None:
        self._state = event
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("ZooKeeper state listener %r failed on %s", listener, event.value)

    async def close(self) -> None:
        """End the session (ZooKeeper deletes its ephemeral znodes at once) and free kazoo."""
        if self._closing or self._closed:
            return
        self._closing = True
        for watch in list(self._watches):
            watch.cancel()
        await asyncio.to_thread(_stop_kazoo, self._kazoo)
        self._closed = True
        self._ready.set()
        self._emit(ZkConnectionState.CLOSED)

    # -- the bridge --------------------------------------------------------------------------
    def _future(self, result: IAsyncResult, path: str | None) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self._loop.create_future()

        def settle(done: IAsyncResult) -> None:  # on the loop
            if future.cancelled():
                return
            if done.successful():
                future.set_result(done.value)
            else:
                future.set_exception(map_kazoo_error(done.exception, path))

        result.rawlink(lambda done: self._post(settle, done))
        return future

    async def _call(self, start: Callable[[], IAsyncResult], path: str | None) -> Any:
        while True:
            await self._ready.wait()
            if self._closed or self._closing:
                raise ZkClosedError(f"ZooKeeper client closed ({path})", path=path)
            async with self._in_flight:
                try:
                    return await self._future(start(), path)
                except ZkConnectionLossError:
                    log.debug("connection lost during an operation on %s; retrying", path)
                except KazooException as e:
                    raise map_kazoo_error(e, path) from e

    # -- operations ------------------------------------------------------------------------
    async def get(self, path: str) -> ZnodeData:
        """Raises ZkNoNodeError if the znode does not exist."""
        data, stat = await self._call(lambda: self._kazoo.get_async(path), path)
        return ZnodeData(data, ZnodeStat.of(stat))

    async def exists(self, path: str) -> ZnodeStat | None:
        stat = await self._call(lambda: self._kazoo.exists_async(path), path)
        return ZnodeStat.of(stat) if stat is not None else None

    async def get_children(self, path: str) -> list[str]:
        """Raises ZkNoNodeError if the znode does not exist."""
        return list(await self._call(lambda: self._kazoo.get_children_async(path), path))

    async def create(
        self,
        path: str,
        data: bytes | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> tuple[str, ZnodeStat]:
        """Create one znode (None data is ZooKeeper's null, as Kafka's parents have).

        Returns the created path (with the sequence number for a sequential znode) and its stat.
        """
        created, stat = await self._call(
            lambda: self._kazoo.create_async(
                path, data, ephemeral=ephemeral, sequence=sequential, include_data=True
            ),
            path,
        )
        return created, ZnodeStat.of(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        """Set the data if the znode's version is ``version`` (-1: any); returns the new stat."""
        stat = await self._call(lambda: self._kazoo.set_async(path, data, version), path)
        return ZnodeStat.of(stat)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(lambda: self._kazoo.delete_async(path, version), path)

    async def multi(self, ops: Sequence[ZkOp]) -> list[OpResult]:
        """Apply ``ops`` atomically (a ZooKeeper transaction).

        Raises:
            ZkError: the error of the first failing op, with ``op_index`` set; nothing applied.
        """

        def start() -> IAsyncResult:
            tx = self._kazoo.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    # kazoo's transactions take bytes only: null data becomes empty data.
                    tx.create(
                        op.path, op.data or b"", ephemeral=op.ephemeral, sequence=op.sequential
                    )
                elif isinstance(op, SetDataOp):
                    tx.set_data(op.path, op.data, op.version)
                elif isinstance(op, DeleteOp):
                    tx.delete(op.path, op.version)
                elif isinstance(op, CheckOp):
                    tx.check(op.path, op.version)
                else:
                    raise TypeError(f"not a ZooKeeper op: {op!r}")
            return tx.commit_async()

        results = await self._call(start, ops[0].path if ops else None)
        for index, result in enumerate(results):
            if isinstance(result, KazooException) and not isinstance(result, RolledBackError):
                raise map_kazoo_error(result, ops[index].path, index)
        return [
            ZnodeStat.of(r) if isinstance(r, KazooStat) else (r if isinstance(r, str) else None)
            for r in results
        ]

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents with null data (Kafka's createRecursive)."""
        with contextlib.suppress(ZkNodeExistsError):
            await self.create_recursive(path)

    async def create_recursive(self, path: str, data: bytes | None = None) -> ZnodeStat:
        """Create ``path`` with ``data``, creating missing parents with null data.

        Raises:
            ZkNodeExistsError: ``path`` exists.
        """
        try:
            return (await self.create(path, data))[1]
        except ZkNoNodeError:
            parent = path.rsplit("/", 1)[0]
            if parent:
                await self.ensure_path(parent)
            return (await self.create(path, data))[1]

    async def delete_recursive(self, path: str) -> bool:
        """Delete ``path`` and everything under it; False if it did not exist."""
        try:
            children = await self.get_children(path)
        except ZkNoNodeError:
            return False
        await asyncio.gather(*(self.delete_recursive(f"{path}/{child}") for child in children))
        with contextlib.suppress(ZkNoNodeError):
            await self.delete(path)
        return True

    # -- watches ---------------------------------------------------------------------------
    async def watch_data(
        self, path: str, callback: Callable[[ZnodeData | None], Awaitable[None] | None]
    ) -> ZkWatch:
        """Call ``callback`` with the znode's data (None while it does not exist) now and after
        every change. See ``core.server.zookeeper.watch`` for the delivery guarantees."""
        return await self._watch(ZkWatch(self._loop, path, self._read_data, callback))

    async def watch_children(
        self, path: str, callback: Callable[[list[str]], Awaitable[None] | None]
    ) -> ZkWatch:
        """Call ``callback`` with the znode's children (empty while it does not exist) now and
        after every change."""
        return await self._watch(ZkWatch(self._loop, path, self._read_children, callback))

    async def _watch(self, watch: ZkWatch) -> ZkWatch:
        if self._closed or self._closing:
            raise ZkClosedError(f"ZooKeeper client closed ({watch.path})", path=watch.path)
        self._watches.add(watch)
        watch.on_cancel(self._watches.discard)
        await watch.start()
        return watch

    async def _read_data(self, path: str, watcher: Callable[[Any], None]) -> ZnodeData | None:
        while True:
            try:
                data, stat = await self._call(lambda: self._kazoo.get_async(path, watcher), path)
                return ZnodeData(data, ZnodeStat.of(stat))
            except ZkNoNodeError:
                # An exists watch fires when the znode is created.
                if await self._call(lambda: self._kazoo.exists_async(path, watcher), path) is None:
                    return None

    async def _read_children(self, path: str, watcher: Callable[[Any], None]) -> list[str]:
        while True:
            try:
                start = lambda: self._kazoo.get_children_async(path, watcher)  # noqa: E731
                return sorted(await self._call(start, path))
            except ZkNoNodeError:
                if await self._call(lambda: self._kazoo.exists_async(path, watcher), path) is None:
                    return []


def _stop_kazoo(kazoo: KazooClient) -> None:
    """Blocking: close the session and join kazoo's threads (run off the loop)."""
    kazoo.stop()
    kazoo.close()
