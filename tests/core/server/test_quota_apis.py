"""DescribeClientQuotas / AlterClientQuotas handlers and quota enforcement in the request path
(produce, fetch, the request quota), against the broker's real parts (``FakeBroker``).

Requests are framed and decoded by the protocol codec as a client's would be; responses a
client reads are encoded and decoded again. Quota sensors run on a clock the tests move.
"""

from __future__ import annotations

import asyncio
import datetime
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32

from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from core.server.authorizer import AclAuthorizer
from core.server.handlers import HANDLERS
from core.server.kio_build import make
from core.server.quota_enforcement import TimedCoroutine, handle_with_quotas
from core.server.quota_entity import QuotaEntity
from core.server.quota_store import LocalQuotaStore
from core.server.quotas import ClientQuotas
from core.server.throttle import ThrottledResponse

from .fake_broker import CODEC, LISTENER, FakeBroker, call, schema

TIMEOUT = datetime.timedelta(seconds=5)
CLIENT = "quota-test-client"


class Clock:
    def __init__(self) -> None:
        self.ms = 5_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path / "data")
    b.clock = Clock()
    b.quotas = ClientQuotas.open(LocalQuotaStore(tmp_path / "data"), clock=b.clock)
    yield b
    b.close()


def serve(broker: FakeBroker, api_key: ApiKey, version: int, request: Any) -> tuple[Any, Any]:
    """Frame and decode ``request`` as sent by ``CLIENT``, then serve it as the broker does
    (quotas included): (context, the handler's result, maybe a ThrottledResponse)."""
    request_type = load_request_schema(api_key, version)
    header_type = request_type.__header_schema__
    out = io.BytesIO()
    entity_writer(header_type)(
        out,
        header_type(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(1),
            client_id=CLIENT,
        ),
    )
    entity_writer(request_type)(out, request)
    ctx, decoded = CODEC.decode_request(out.getvalue(), LISTENER, "127.0.0.1:1")
    result = asyncio.run(handle_with_quotas(broker, HANDLERS[api_key], ctx, decoded))
    return ctx, result


def as_read(ctx: Any, response: Any) -> Any:
    frame = CODEC.encode_response(ctx, response)
    response_type = CODEC.response_type(ctx.api_key, ctx.api_version)
    _, used = entity_reader(response_type.__header_schema__)(frame, 4)
    return entity_reader(response_type)(frame, 4 + used)[0]


def set_quota(broker: FakeBroker, key: str, value: float, **entity: str | None) -> None:
    pairs = QuotaEntity.of(**entity).parts
    s = schema(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    request = s.AlterClientQuotasRequest(
        entries=(
            s.EntryData(
                entity=tuple(s.EntityData(entity_type=t, entity_name=n) for t, n in pairs),
                ops=(s.OpData(key=key, value=value, remove=False),),
            ),
        ),
        validate_only=False,
    )
    (entry,) = call(broker, ApiKey.ALTER_CLIENT_QUOTAS, 1, request).entries
    assert entry.error_code == ErrorCode.none, entry.error_message


# -- AlterClientQuotas / DescribeClientQuotas ----------------------------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_alter_then_describe_through_the_codec(broker: FakeBroker, version: int) -> None:
    a = schema(ApiKey.ALTER_CLIENT_QUOTAS, version)
    request = a.AlterClientQuotasRequest(
        entries=(
            a.EntryData(
                entity=(
                    a.EntityData(entity_type="user", entity_name="alice"),
                    a.EntityData(entity_type="client-id", entity_name=None),
                ),
                ops=(
                    a.OpData(key="producer_byte_rate", value=1024.0, remove=False),
                    a.OpData(key="request_percentage", value=12.5, remove=False),
                ),
            ),
            a.EntryData(
                entity=(a.EntityData(entity_type="client-id", entity_name="c1"),),
                ops=(a.OpData(key="no_such_key", value=1.0, remove=False),),
            ),
        ),
        validate_only=False,
    )
    ok, bad = call(broker, ApiKey.ALTER_CLIENT_QUOTAS, version, request).entries
    assert ok.error_code == ErrorCode.none and ok.error_message is None
    assert [(e.entity_type, e.entity_name) for e in ok.entity] == [
        ("user", "alice"),
        ("client-id", None),
    ]
    assert bad.error_code == ErrorCode.invalid_request
    assert bad.error_message == "Invalid configuration key no_such_key"

    d = schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, version)
    describe = d.DescribeClientQuotasRequest(
        components=(d.ComponentData(entity_type="user", match_type=i8(0), match="alice"),),
        strict=False,
    )
    response = call(broker, ApiKey.DESCRIBE_CLIENT_QUOTAS, version, describe)
    assert response.error_code == ErrorCode.none
    (entry,) = response.entries
    assert {(e.entity_type, e.entity_name) for e in entry.entity} == {
        ("user", "alice"),
        ("client-id", None),
    }
    assert {(v.key, v.value) for v in entry.values} == {
        ("producer_byte_rate", 1024.0),
        ("request_percentage", 12.5),
    }


def test_describe_errors_are_answered_in_the_response(broker: FakeBroker) -> None:
    d = schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)

    def describe(entity_type: str, match_type: int) -> Any:
        component = d.ComponentData(entity_type=entity_type, match_type=i8(match_type), match=None)
        request = d.DescribeClientQuotasRequest(components=(component,), strict=True)
        return call(broker, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)

    bad = describe("user", 0)
    assert bad.error_code == ErrorCode.invalid_request and bad.entries is None
    assert "MATCH_TYPE_EXACT" in bad.error_message
    assert describe("group", 2).error_code == ErrorCode.unsupported_version


def test_quota_apis_need_the_cluster_config_acls(broker: FakeBroker, tmp_path: Path) -> None:
    broker.authorizer = AclAuthorizer(tmp_path)  # User:ANONYMOUS has no ACL at all
    a = schema(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    request = a.AlterClientQuotasRequest(
        entries=(
            a.EntryData(
                entity=(a.EntityData(entity_type="user", entity_name="mallory"),),
                ops=(a.OpData(key="producer_byte_rate", value=1e12, remove=False),),
            ),
        ),
        validate_only=False,
    )
    (entry,) = call(broker, ApiKey.ALTER_CLIENT_QUOTAS, 1, request).entries
    assert entry.error_code == ErrorCode.cluster_authorization_failed
    assert broker.quotas.configs() == {}
    d = schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)
    describe = d.DescribeClientQuotasRequest(components=(), strict=False)
    denied = call(broker, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe)
    assert denied.error_code == ErrorCode.cluster_authorization_failed
    assert denied.entries is None

    broker.authorizer = AclAuthorizer(tmp_path, ["User:ANONYMOUS"])
    (entry,) = call(broker, ApiKey.ALTER_CLIENT_QUOTAS, 1, request).entries
    assert entry.error_code == ErrorCode.none
    (found,) = call(broker, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe).entries
    assert found.entity[0].entity_name == "mallory"


# -- producer_byte_rate -------------------------------------------------------------------------
def produce_request(version: int, acks: int, payload: int) -> Any:
    s = schema(ApiKey.PRODUCE, version)
    builder = RecordBatchBuilder()
    builder.append(b"x" * payload, timestamp=1_700_000_000_000)
    return s.ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=TIMEOUT,
        topic_data=(
            s.TopicProduceData(
                name="t",
                partition_data=(s.PartitionProduceData(index=i32(0), records=builder.build()),),
            ),
        ),
    )


def test_a_producer_over_its_byte_rate_is_answered_with_a_throttle_time(
    broker: FakeBroker,
) -> None:
    broker.make_topic("t", 1)
    # 1000 B/s: a burst of 10000 bytes passes (ten windows of an idle client).
    set_quota(broker, "producer_byte_rate", 1000, client_id=CLIENT)
    ctx, first = serve(broker, ApiKey.PRODUCE, 9, produce_request(9, 1, 6000))
    assert not isinstance(first, ThrottledResponse)
    assert as_read(ctx, first).throttle_time == datetime.timedelta(0)
    ctx, second = serve(broker, ApiKey.PRODUCE, 9, produce_request(9, 1, 6000))
    assert isinstance(second, ThrottledResponse) and not second.delay_response
    # Two frames of ctx.size bytes in 10 s: (2 * size / 10 - 1000) / 1000 * 10000 ms.
    expected = round((2 * ctx.size / 10 - 1000) / 1000 * 10_000)
    assert second.throttle_ms == expected
    read = as_read(ctx, second.response)
    assert read.throttle_time == datetime.timedelta(milliseconds=expected)
    # Kafka appends first, then throttles: both batches are in the log.
    (topic,) = read.responses
    assert topic.partition_responses[0].base_offset == 1
    # Produce v5 predates KIP-219: the broker holds that answer for the throttle time.
    ctx, old = serve(broker, ApiKey.PRODUCE, 5, produce_request(5, 1, 10))
    assert isinstance(old, ThrottledResponse) and old.delay_response


def test_an_acks_0_producer_over_quota_is_muted_without_an_answer(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    set_quota(broker, "producer_byte_rate", 100, client_id=None)
    _, first = serve(broker, ApiKey.PRODUCE, 9, produce_request(9, 0, 500))
    assert first is None
    _, second = serve(broker, ApiKey.PRODUCE, 9, produce_request(9, 0, 2000))
    assert isinstance(second, ThrottledResponse)
    assert second.response is None and second.throttle_ms > 0


def test_a_producer_without_a_quota_is_not_throttled(broker: FakeBroker) -> None:
    broker.make_topic("t", 1)
    set_quota(broker, "producer_byte_rate", 100, client_id="someone-else")
    for _ in range(3):
        _, result = serve(broker, ApiKey.PRODUCE, 9, produce_request(9, 1, 50_000))
        assert not isinstance(result, ThrottledResponse)


# -- consumer_byte_rate -------------------------------------------------------------------------
def fetch_request(max_bytes: int = 1 << 20) -> Any:
    s = schema(ApiKey.FETCH, 12)
    return s.FetchRequest(
        cluster_id=None,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=i32(1),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            s.FetchTopic(
                topic="t",
                partitions=(
                    s.FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=0,
                        last_fetched_epoch=i32(-1),
                        log_start_offset=-1,
                        partition_max_bytes=i32(max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def fill(broker: FakeBroker, batches: int, payload: int) -> None:
    broker.make_topic("t", 1)
    partition = broker.replica_manager.partition("t", 0)
    for i in range(batches):
        builder = RecordBatchBuilder()
        builder.append(b"y" * payload, timestamp=1_700_000_000_000 + i)
        broker.replica_manager.append(partition, builder.build())


def records_bytes(response: Any) -> int:
    return sum(len(p.records or b"") for t in response.responses for p in t.partitions)


def test_a_consumer_over_its_byte_rate_gets_no_data_and_a_throttle_time(
    broker: FakeBroker,
) -> None:
    fill(broker, 4, 3000)
    set_quota(broker, "consumer_byte_rate", 1000, user="ANONYMOUS")
    ctx, first = serve(broker, ApiKey.FETCH, 12, fetch_request())
    # The fetch asks for at most what the quota allows in the span: 1000 B/s x 10 s.
    served = records_bytes(as_read(ctx, first))
    assert 0 < served <= 10_000
    rate_after_first = broker.quotas.fetch.metrics()[0].rate
    ctx, second = serve(broker, ApiKey.FETCH, 12, fetch_request())
    assert isinstance(second, ThrottledResponse) and second.throttle_ms > 0
    read = as_read(ctx, second.response)
    assert read.responses == () and read.error_code == ErrorCode.none
    assert read.throttle_time == datetime.timedelta(milliseconds=second.throttle_ms)
    # The bytes not sent were taken back.
    assert broker.quotas.fetch.metrics()[0].rate == rate_after_first


# -- request_percentage -------------------------------------------------------------------------
def metadata_request(version: int) -> Any:
    s = schema(ApiKey.METADATA, version)
    return make(
        s.MetadataRequest,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def test_a_client_over_its_request_percentage_is_throttled_at_most_one_window(
    broker: FakeBroker,
) -> None:
    # 0.000001% of the event loop: 10 ns per second; any handler takes more.
    set_quota(broker, "request_percentage", 0.000001, user="ANONYMOUS", client_id=CLIENT)
    ctx, result = serve(broker, ApiKey.METADATA, 12, metadata_request(12))
    assert isinstance(result, ThrottledResponse)
    assert 0 < result.throttle_ms <= 1000  # capped at quota.window.size.seconds
    assert not result.delay_response
    assert as_read(ctx, result.response).throttle_time == datetime.timedelta(
        milliseconds=result.throttle_ms
    )
    _, old = serve(broker, ApiKey.METADATA, 5, metadata_request(5))
    assert isinstance(old, ThrottledResponse) and old.delay_response
    s = schema(ApiKey.API_VERSIONS, 3)
    request = s.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    _, exempt = serve(broker, ApiKey.API_VERSIONS, 3, request)
    assert not isinstance(exempt, ThrottledResponse)


def test_handler_time_counts_the_steps_not_the_waits(monkeypatch) -> None:
    now = [0]
    monkeypatch.setattr("core.server.quota_enforcement.time.perf_counter_ns", lambda: now[0])

    async def handler(ready: asyncio.Future) -> str:
        now[0] += 5_000_000  # 5 ms of work
        await ready
        now[0] += 3_000_000  # 3 ms more
        return "done"

    async def scenario() -> None:
        ready = asyncio.get_running_loop().create_future()
        timed = TimedCoroutine(handler(ready))
        task = asyncio.ensure_future(_await(timed))
        await asyncio.sleep(0)
        now[0] += 1_000_000_000  # a second of waiting: not the handler's
        ready.set_result(None)
        assert await task == "done"
        assert timed.ns == 8_000_000

    asyncio.run(scenario())


async def _await(awaitable: Any) -> Any:
    return await awaitable


def test_a_cancelled_handler_sees_the_cancellation() -> None:
    seen: list[str] = []

    async def handler() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def scenario() -> None:
        task = asyncio.ensure_future(_await(TimedCoroutine(handler())))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert seen == ["cancelled"]
