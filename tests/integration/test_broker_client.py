"""tierlog's broker-to-broker client against real tierlog broker processes.

One broker serves PLAINTEXT, SSL (client certificates required), SASL_PLAINTEXT and SASL_SSL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). The client's security settings come from
``inter_broker_client_settings`` over a broker config naming each listener as the
inter-broker listener, the way a second broker of the cluster would build them. Over each
path the client learns the broker's versions and round-trips real requests; a broker killed
with SIGKILL fails the requests in flight, and NodeClient reconnects once it is back.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from core.records.batch import iter_batches
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records
from core.server.api_keys import ApiKey
from core.server.broker_connection import (
    AuthenticationFailedError,
    BrokerConnection,
    ConnectionClosedError,
)
from core.server.config import BrokerConfig
from core.server.interbroker_schema import LeaderAndIsrRequest
from core.server.kio_build import make, nested
from core.server.node_client import BrokerEndpoint, ClientSettings, NodeClient
from core.server.protocol import load_request_schema
from core.server.security import ClientSecurity, inter_broker_client_settings
from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.pki import Pki, make_pki

PASSWORD = "broker-secret-5d1c"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
LISTENERS = (
    "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
)


def jaas(mechanism: str, password: str = PASSWORD) -> str:
    # As on a Kafka broker: the accounts it accepts, and its own login for other brokers.
    return (
        f'{MODULES[mechanism]} required username="broker" password="{password}" '
        f'user_broker="{PASSWORD}";'
    )


def security_settings(pki: Pki) -> dict[str, str]:
    settings = {
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        for mechanism in MECHANISMS:
            settings[f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"] = jaas(
                mechanism
            )
    return settings


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), broker_client_auth=True)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    b = start_broker(
        tmp_path_factory.mktemp("interbroker"),
        {"listeners": LISTENERS, **security_settings(pki)},
    )
    yield b
    code = b.stop()
    assert code == 0, b.log_tail()


def client_security(pki: Pki, listener: str, **over: str) -> ClientSecurity:
    """What a broker with these settings uses to reach ``listener`` of its peers."""
    props = {
        "log.dirs": "/tmp/unused",
        "node.id": "2",
        "listeners": LISTENERS,
        "inter.broker.listener.name": listener,
        **security_settings(pki),
        **over,
    }
    return inter_broker_client_settings(BrokerConfig.from_props(props))


def host_port(broker: BrokerProcess, listener: str) -> tuple[str, int]:
    host, port = broker.endpoints[listener].rsplit(":", 1)
    return host, int(port)


async def connect(
    broker: BrokerProcess, listener: str = "PLAINTEXT", security: ClientSecurity | None = None
) -> BrokerConnection:
    host, port = host_port(broker, listener)
    return await BrokerConnection.open(
        host, port, client_id="broker-2-test", security=security, request_timeout_ms=15_000
    )


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


# -- request builders -------------------------------------------------------------------------
def metadata(*names: str) -> Callable[[int], Any]:
    def build(version: int) -> Any:
        cls = load_request_schema(ApiKey.METADATA, version)
        topic = nested(cls, "MetadataRequestTopic")
        return make(
            cls,
            topics=tuple(make(topic, topic_id=None, name=n) for n in names),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
            include_cluster_authorized_operations=False,
        )

    return build


def create_topics(name: str, partitions: int) -> Callable[[int], Any]:
    def build(version: int) -> Any:
        cls = load_request_schema(ApiKey.CREATE_TOPICS, version)
        topic = make(
            nested(cls, "CreatableTopic"),
            name=name,
            num_partitions=partitions,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        return make(cls, topics=(topic,), timeout=datetime.timedelta(seconds=30))

    return build


def produce(name: str, partition: int, batch: bytes) -> Callable[[int], Any]:
    def build(version: int) -> Any:
        cls = load_request_schema(ApiKey.PRODUCE, version)
        data = make(nested(cls, "PartitionProduceData"), index=partition, records=batch)
        topic = make(nested(cls, "TopicProduceData"), name=name, partition_data=(data,))
        return make(
            cls,
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(topic,),
        )

    return build


def fetch(
    topic_id: uuid.UUID, partition: int, offset: int, max_wait_ms: int = 100
) -> Callable[[int], Any]:
    def build(version: int) -> Any:
        cls = load_request_schema(ApiKey.FETCH, version)
        part = make(
            nested(cls, "FetchPartition"),
            partition=partition,
            fetch_offset=offset,
            partition_max_bytes=1 << 20,
        )
        topic = make(nested(cls, "FetchTopic"), topic_id=topic_id, partitions=(part,))
        return make(
            cls,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            topics=(topic,),
            forgotten_topics_data=(),
        )

    return build


def batch_of(*values: bytes) -> bytes:
    builder = RecordBatchBuilder()
    for i, value in enumerate(values):
        builder.append(value, key=f"k{i}".encode(), timestamp=1_700_000_000_000 + i)
    return bytes(builder.build())


def fetched_values(response: Any) -> list[tuple[int, bytes | None]]:
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none, partition.error_code
    out = []
    for header in iter_batches(bytes(partition.records or b"")):
        out += [(r.offset, r.value) for r in decode_records(header)]
    return out


# -- tests ------------------------------------------------------------------------------------
def test_api_versions_metadata_create_topics_produce_and_fetch_round_trip(broker: BrokerProcess):
    async def main():
        async with await connect(broker) as connection:
            versions = connection.api_versions
            assert versions[ApiKey.PRODUCE][1] >= 9 and versions[ApiKey.FETCH][1] >= 13
            created = await connection.call(
                ApiKey.CREATE_TOPICS, create_topics("ib-orders", 2), versions=(5, 7)
            )
            (result,) = created.topics
            assert result.error_code == ErrorCode.none, result.error_message
            described = await connection.call(
                ApiKey.METADATA, metadata("ib-orders"), versions=(10, 12)
            )
            (topic,) = described.topics
            assert (topic.name, topic.topic_id) == ("ib-orders", result.topic_id)
            assert sorted(p.partition_index for p in topic.partitions) == [0, 1]
            assert all(p.leader_id == 1 for p in topic.partitions)
            values = [b"first", b"second", b"third"]
            produced = await connection.call(
                ApiKey.PRODUCE, produce("ib-orders", 1, batch_of(*values)), versions=(3, 11)
            )
            answer = produced.responses[0].partition_responses[0]
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
            fetched = await connection.call(
                ApiKey.FETCH, fetch(result.topic_id, 1, 0), versions=(13, 16)
            )
            assert fetched_values(fetched) == list(enumerate(values))
            assert fetched.responses[0].partitions[0].high_watermark == 3

    run(main())


def test_pipelined_requests_are_answered_in_order(broker: BrokerProcess):
    names = [f"ib-pipe-{i}" for i in range(8)]

    async def main():
        async with await connect(broker) as connection:
            for name in names:
                await connection.call(ApiKey.CREATE_TOPICS, create_topics(name, 1), versions=(5, 7))
            # Different requests, sent without waiting: each answer must be its own.
            calls = []
            for name in names:
                calls.append(connection.call(ApiKey.METADATA, metadata(name), versions=(12, 12)))
                calls.append(
                    connection.call(
                        ApiKey.PRODUCE,
                        produce(name, 0, batch_of(name.encode())),
                        versions=(3, 11),
                    )
                )
            return await asyncio.gather(*calls)

    answers = run(main())
    for i, name in enumerate(names):
        described, produced = answers[2 * i], answers[2 * i + 1]
        assert described.topics[0].name == name
        assert produced.responses[0].name == name
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_a_controller_request_from_a_client_is_refused_and_the_broker_serves_on(
    broker: BrokerProcess,
):
    request = LeaderAndIsrRequest(
        controller_id=2, controller_epoch=1, topic_states=(), live_leaders=()
    )

    async def main():
        async with await connect(broker) as connection:
            # Advertised, as by Kafka's brokers; only a broker principal may send it.
            assert ApiKey.LEADER_AND_ISR in connection.api_versions
            answer = await connection.send(request, check_version=False)
            assert answer.error_code == ErrorCode.cluster_authorization_failed
            metadata_answer = await connection.call(ApiKey.METADATA, metadata(), versions=(12, 12))
            assert [b.node_id for b in metadata_answer.brokers] == [1]

    run(main())
    assert broker.proc.poll() is None


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_authenticates_with_the_inter_broker_mechanism(
    broker: BrokerProcess, pki: Pki, listener: str, mechanism: str
):
    security = client_security(pki, listener, **{"sasl.mechanism.inter.broker.protocol": mechanism})
    assert security.sasl is not None and security.sasl.mechanism == mechanism

    async def main():
        async with await connect(broker, listener, security) as connection:
            answer = await connection.call(ApiKey.METADATA, metadata(), versions=(12, 12))
            return [b.node_id for b in answer.brokers]

    assert run(main()) == [1]
    assert PASSWORD not in broker.log_file.read_text()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_is_refused_with_the_brokers_message(
    broker: BrokerProcess, pki: Pki, mechanism: str
):
    key = f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config"
    security = client_security(
        pki,
        "SASL_PLAINTEXT",
        **{"sasl.mechanism.inter.broker.protocol": mechanism, key: jaas(mechanism, "wrong")},
    )

    # Kafka's answers: PLAIN names a bad user name or password, SCRAM invalid credentials.
    expected = "Invalid username or password" if mechanism == "PLAIN" else "invalid credentials"

    async def main():
        with pytest.raises(AuthenticationFailedError, match=expected):
            await connect(broker, "SASL_PLAINTEXT", security)

    run(main())


def test_tls_with_a_client_certificate_reaches_the_ssl_listener(broker: BrokerProcess, pki: Pki):
    security = client_security(pki, "SSL")
    assert security.ssl_context is not None and security.ssl_context.check_hostname

    async def main():
        async with await connect(broker, "SSL", security) as connection:
            answer = await connection.call(ApiKey.METADATA, metadata(), versions=(12, 12))
            return [(b.host, b.port) for b in answer.brokers]

    assert run(main()) == [host_port(broker, "SSL")]


def test_tls_refuses_a_broker_whose_certificate_it_does_not_trust(
    broker: BrokerProcess, pki: Pki, tmp_path: Path
):
    other = make_pki(tmp_path / "other")
    security = client_security(pki, "SSL", **{"ssl.truststore.location": str(other.ca)})

    async def main():
        with pytest.raises(AuthenticationFailedError, match="certificate verify failed"):
            await connect(broker, "SSL", security)

    run(main())


def test_node_client_fails_requests_of_a_killed_broker_and_reconnects_once_it_is_back(
    tmp_path: Path,
):
    first = start_broker(tmp_path / "b")
    brokers = [first]
    try:
        host, port = host_port(first, "PLAINTEXT")
        node = BrokerEndpoint(1, host, port)
        settings = ClientSettings(local_id=2, security=ClientSecurity("PLAINTEXT"))

        async def before_kill(client: NodeClient) -> tuple[uuid.UUID, BrokerConnection]:
            created = await client.send(
                node,
                "fetcher-0",
                ApiKey.CREATE_TOPICS,
                create_topics("ib-kill", 1),
                versions=(5, 7),
            )
            topic_id = created.topics[0].topic_id
            await client.send(
                node,
                "fetcher-0",
                ApiKey.PRODUCE,
                produce("ib-kill", 0, batch_of(b"kept")),
                versions=(3, 11),
            )
            return topic_id, await client.connection(node, "fetcher-0")

        async def main():
            client = NodeClient(settings)
            topic_id, connection = await before_kill(client)
            # A long poll at the end of the log is in flight when the broker dies.
            long_poll = asyncio.ensure_future(
                client.send(
                    node,
                    "fetcher-0",
                    ApiKey.FETCH,
                    fetch(topic_id, 0, 1, max_wait_ms=20_000),
                    versions=(13, 16),
                    timeout_ms=60_000,
                )
            )
            while connection.in_flight == 0:
                await asyncio.sleep(0.001)
            first.kill()
            with pytest.raises(ConnectionClosedError) as caught:
                await long_poll
            assert isinstance(caught.value.__cause__, ConnectionError)
            brokers.append(await asyncio.to_thread(restart, first))
            fetched = await client.send(
                node, "fetcher-0", ApiKey.FETCH, fetch(topic_id, 0, 0), versions=(13, 16)
            )
            reconnected = await client.connection(node, "fetcher-0")
            await client.close()
            return fetched, reconnected is not connection

        fetched, new_connection = run(main())
        assert new_connection
        assert fetched_values(fetched) == [(0, b"kept")]
    finally:
        for b in brokers:
            b.kill()
