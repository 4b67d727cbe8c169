"""Client quotas in the request path: byte rates in produce and fetch, the request quota
around every handler, and the throttle of the answer (KIP-13, KIP-124, KIP-219).

Byte rates (Kafka's KafkaApis): a produce counts its request's size, in bytes of the frame,
once it is appended and answered, acks=0 included (its connection is muted though it gets
no answer). A fetch counts the bytes of records it returns; when that takes the client over
``consumer_byte_rate`` the bytes are taken back and the answer carries no data, only the
throttle time, and the connection is muted. A fetch also asks for no more than the quota
allows in one span (``max_value_in_window``). Replica fetches (from other brokers) are
exempt; there are none until replication.

``request_percentage`` bounds the share of the broker's request handling time a user or
client id may take. Kafka counts the time a request spends on its request handler thread
(and on its network thread); with ``num.io.threads`` threads, a quota of 100 is one
thread's worth. tierlog serves every request on one asyncio event loop, so it counts the
time the request's handler runs on the loop: the sum of the steps of its coroutine, not the
time it spends waiting (for a long poll, an fsync on a thread, a replication wait) while
other requests run. 100% is the whole event loop, one second per second; the quota is a
percentage of that single "thread" (the decoding and encoding of frames are not counted).

Not counted: ApiVersions and the SASL exchange (Kafka does not count them before a client
is authenticated, which is when tierlog serves them too; after it, tierlog does not either:
they cost little), the controller's inter-broker apis (Kafka exempts cluster actions), and
produce with acks=0 (Kafka's rule: no answer to carry a throttle time).

After the handler, the larger of its own throttle (a produce or fetch byte-rate quota,
in its response's ``throttle_time``) and the request quota's becomes the response's
``throttle_time_ms``, and the response is handed to the socket server as a
``ThrottledResponse`` that mutes the connection that long (``core.server.throttle``).

Not as Kafka: a fetch throttled for its request time alone still carries its data (Kafka
answers it empty); the request time is only known once the response is built.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Coroutine, Generator
from typing import Any

from core.server.api_keys import INTER_BROKER_VERSIONS, ApiKey
from core.server.handler_support import BrokerServices, Handler
from core.server.kio_build import has_field
from core.server.protocol import RequestContext
from core.server.quotas import user_of
from core.server.throttle import ThrottledResponse, client_throttles

EXEMPT_APIS = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, *INTER_BROKER_VERSIONS}
)
# One second of handler time, as a percentage: Kafka's NanosToPercentagePerSecond.
_PERCENT_PER_NANO = 100.0 / 1_000_000_000
_INT32_MAX = 2**31 - 1


class TimedCoroutine:
    """Awaits a coroutine and adds up the time its steps run (``ns``): the time it holds the
    event loop, without the time it waits."""

    __slots__ = ("_coro", "ns")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.ns = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            start = time.perf_counter_ns()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.ns += time.perf_counter_ns() - start
                return stop.value
            except BaseException:
                self.ns += time.perf_counter_ns() - start
                raise
            self.ns += time.perf_counter_ns() - start
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # noqa: BLE001 - thrown in (cancellation): forwarded
                value, error = None, e


def _client(ctx: RequestContext) -> tuple[str, str]:
    return user_of(ctx.principal), ctx.client_id or ""


def produce_throttle_ms(broker: BrokerServices, ctx: RequestContext) -> int:
    """Count a produce request against ``producer_byte_rate``: its throttle time, or 0."""
    quota = broker.quotas.produce
    return quota.record(*_client(ctx), ctx.size) if quota.enabled else 0


def is_replica_fetch(request: Any) -> bool:
    """A fetch from another broker's replica (replica id at v14 and older, replica state
    from v15): exempt from the consumer quota."""
    state = getattr(request, "replica_state", None)
    replica_id = state.replica_id if state is not None else getattr(request, "replica_id", -1)
    return replica_id >= 0


def fetch_quota_bytes(broker: BrokerServices, ctx: RequestContext, request: Any) -> int:
    """The most a fetch should return under ``consumer_byte_rate`` (Kafka's
    maxValueInQuotaWindow; int32 max when no quota applies)."""
    if is_replica_fetch(request):
        return _INT32_MAX
    bound = broker.quotas.fetch.max_value_in_window(*_client(ctx))
    return int(min(bound, _INT32_MAX))


def fetch_throttle_ms(broker: BrokerServices, ctx: RequestContext, request: Any, size: int) -> int:
    """Count ``size`` bytes of a fetch answer against ``consumer_byte_rate``: the throttle
    time, or 0. A throttled fetch returns nothing, so its bytes are taken back."""
    if is_replica_fetch(request):
        return 0
    fetch = broker.quotas.fetch
    throttle = fetch.record(*_client(ctx), size)
    if throttle > 0:
        fetch.unrecord(*_client(ctx), size)
    return throttle


async def handle_with_quotas(
    broker: BrokerServices, handler: Handler, ctx: RequestContext, request: Any
) -> Any:
    """Run ``handler`` for ``request``, counting its time against the request quota, and
    return its response, wrapped in a ``ThrottledResponse`` when it is throttled."""
    quotas = broker.quotas
    timed: TimedCoroutine | None = None
    if quotas.request.enabled and ctx.api_key not in EXEMPT_APIS:
        timed = TimedCoroutine(handler(broker, ctx, request))
        response = await timed
    else:
        response = await handler(broker, ctx, request)
    own = 0
    if isinstance(response, ThrottledResponse):
        response, own = response.response, response.throttle_ms
    elif response is not None and has_field(type(response), "throttle_time"):
        own = _ms(response.throttle_time)
    request_ms = 0
    if timed is not None and response is not None:
        request_ms = quotas.request.record(*_client(ctx), timed.ns * _PERCENT_PER_NANO)
    throttle = max(own, request_ms)
    if throttle <= 0:
        return response
    if response is not None and has_field(type(response), "throttle_time"):
        response = dataclasses.replace(
            response, throttle_time=datetime.timedelta(milliseconds=throttle)
        )
    delay = response is not None and not client_throttles(ctx.api_key, ctx.api_version)
    return ThrottledResponse(response, throttle, delay_response=delay)


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value or 0)
