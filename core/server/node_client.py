"""NodeClient: this broker's connections to the other brokers, one per (broker, purpose).

The controller's channel to each broker, each replica fetcher and the transaction marker
sender keep their own connection (``purpose``: ``controller``, ``fetcher-0``, ...), so a
long-poll fetch never queues a LeaderAndIsr behind it. The client id of a connection is
``broker-<local id>-<purpose>``, which the peer logs.

A connection that fails to open, or that was lost, is reopened after a backoff: Kafka's
ExponentialBackoff, ``reconnect.backoff.ms`` doubled per consecutive failure up to
``reconnect.backoff.max.ms``, times a random factor in [0.8, 1.2). A connection that opens
resets it. Requests are not retried here: the caller knows whether a request may be sent
twice (the controller re-sends its state, a fetcher fetches again).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.server.broker_connection import (
    DEFAULT_MAX_RESPONSE_BYTES,
    BrokerConnection,
    ConnectionClosedError,
)
from core.server.config import BrokerConfig
from core.server.security import ClientSecurity, inter_broker_client_settings

BACKOFF_MULTIPLIER = 2
BACKOFF_JITTER = 0.2


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """Where a broker's inter-broker listener is."""

    id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What every connection of a NodeClient shares; times in milliseconds."""

    local_id: int
    security: ClientSecurity
    request_timeout_ms: int = 30_000
    connect_timeout_ms: int = 10_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    @classmethod
    def from_config(
        cls, config: BrokerConfig, *, request_timeout_ms: int | None = None
    ) -> ClientSettings:
        """The broker's settings; ``request_timeout_ms`` overrides ``request.timeout.ms``
        (a replica fetcher passes ``replica.socket.timeout.ms``).

        Raises:
            InvalidConfigError: the inter-broker listener's TLS or SASL settings, naming
                the key.
        """
        return cls(
            local_id=config.node_id,
            security=inter_broker_client_settings(config),
            request_timeout_ms=(
                config.get("request.timeout.ms")
                if request_timeout_ms is None
                else request_timeout_ms
            ),
            connect_timeout_ms=config.get("socket.connection.setup.timeout.ms"),
            reconnect_backoff_ms=config.get("reconnect.backoff.ms"),
            reconnect_backoff_max_ms=config.get("reconnect.backoff.max.ms"),
        )


def reconnect_backoff_ms(failures: int, initial_ms: int, max_ms: int, rng: random.Random) -> float:
    """Kafka's ExponentialBackoff: the wait after ``failures`` earlier consecutive failures."""
    if max_ms <= initial_ms:
        return float(max_ms)
    exponent_max = math.log(max_ms / max(initial_ms, 1)) / math.log(BACKOFF_MULTIPLIER)
    term = initial_ms * BACKOFF_MULTIPLIER ** min(failures, exponent_max)
    factor = rng.uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER)
    return min(term * factor, float(max_ms))


@dataclass(slots=True)
class _Slot:
    """The connection of one (broker, purpose) and its reconnect state."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    connection: BrokerConnection | None = None
    endpoint: BrokerEndpoint | None = None
    failures: int = 0
    next_attempt: float = 0.0  # the event loop's clock


class NodeClient:
    """Connections from this broker to others, opened on demand, keyed by (id, purpose)."""

    def __init__(self, settings: ClientSettings, *, rng: random.Random | None = None) -> None:
        self.settings = settings
        self._rng = rng or random.Random()
        self._slots: dict[tuple[int, str], _Slot] = {}
        self._closed = False

    def client_id(self, purpose: str) -> str:
        return f"broker-{self.settings.local_id}-{purpose}"

    async def connection(self, node: BrokerEndpoint, purpose: str) -> BrokerConnection:
        """The open connection to ``node`` for ``purpose``, opening one if needed (after the
        reconnect backoff if the last one failed or was lost).

        Raises:
            ConnectFailedError, AuthenticationFailedError, ...: see BrokerConnection.open;
                the failure counts for the backoff.
            ConnectionClosedError: this client is closed.
        """
        slot = self._slots.setdefault((node.id, purpose), _Slot())
        async with slot.lock:
            self._check_open()
            current = slot.connection
            if current is not None:
                if not current.closed and slot.endpoint == node:
                    return current
                slot.connection = None
                if current.closed and current.close_cause is not None:
                    self._failed(slot, current.closed_at)
                else:
                    await current.close()  # the broker moved: no backoff
            loop = asyncio.get_running_loop()
            wait = slot.next_attempt - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                self._check_open()
            settings = self.settings
            try:
                connection = await BrokerConnection.open(
                    node.host,
                    node.port,
                    client_id=self.client_id(purpose),
                    security=settings.security,
                    connect_timeout_ms=settings.connect_timeout_ms,
                    request_timeout_ms=settings.request_timeout_ms,
                    max_response_bytes=settings.max_response_bytes,
                )
            except Exception:
                self._failed(slot, loop.time())
                raise
            if self._closed:
                await connection.close()
                self._check_open()
            slot.connection, slot.endpoint, slot.failures = connection, node, 0
            slot.next_attempt = 0.0
            return connection

    def _failed(self, slot: _Slot, at: float | None) -> None:
        settings = self.settings
        wait_ms = reconnect_backoff_ms(
            slot.failures,
            settings.reconnect_backoff_ms,
            settings.reconnect_backoff_max_ms,
            self._rng,
        )
        slot.failures += 1
        start = asyncio.get_running_loop().time() if at is None else at
        slot.next_attempt = start + wait_ms / 1000

    def backoff_remaining_ms(self, node_id: int, purpose: str) -> float:
        """How long before the next connection attempt to ``node_id`` for ``purpose``."""
        slot = self._slots.get((node_id, purpose))
        if slot is None:
            return 0.0
        return max(0.0, (slot.next_attempt - asyncio.get_running_loop().time()) * 1000)

    async def send(
        self,
        node: BrokerEndpoint,
        purpose: str,
        api_key: int,
        build: Callable[[int], Any],
        *,
        versions: tuple[int, int],
        timeout_ms: int | None = None,
    ) -> Any:
        """Send ``build(version)`` on the (node, purpose) connection at the highest version
        in ``versions`` the peer speaks, and return the response body.

        Raises:
            BrokerClientError: see ``connection`` and BrokerConnection.call.
        """
        connection = await self.connection(node, purpose)
        return await connection.call(api_key, build, versions=versions, timeout_ms=timeout_ms)

    async def disconnect(self, node_id: int, purpose: str) -> None:
        """Close the (node, purpose) connection, if any; the next use reconnects at once."""
        slot = self._slots.get((node_id, purpose))
        if slot is None:
            return
        async with slot.lock:  # after a connect in progress, so that it is closed too
            connection, slot.connection = slot.connection, None
            slot.failures, slot.next_attempt = 0, 0.0
        if connection is not None:
            await connection.close()

    async def close(self) -> None:
        """Close every connection; requests in flight fail with ConnectionClosedError."""
        self._closed = True
        slots, self._slots = self._slots, {}
        connections = [s.connection for s in slots.values() if s.connection is not None]
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionClosedError("the broker's inter-broker client is closed")
