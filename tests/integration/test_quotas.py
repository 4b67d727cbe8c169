"""Client quotas on a real broker with real clients.

Quotas are set and described with kafka-python's AlterClientQuotas/DescribeClientQuotas
messages (neither kafka-python's nor confluent-kafka's AdminClient has a quota method) and
survive a restart; a producer and a consumer over their byte rates are throttled
(librdkafka reports the throttle times it is sent) while the broker's own measure of their
rate, scraped from its Prometheus endpoint, stays near the quota; a client over its
request_percentage gets throttle times; clients without a quota never do; principals
without ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster are refused, and a user quota holds
for that SASL-authenticated user whatever its client id.

The broker runs with ``quota.window.num=5`` so that an idle client's burst allowance (four
windows' worth) and the tests stay short. Kafka's rate pads its span to ``num - 1`` windows
until that many have passed, so the measured rate steps up by up to ``1 / (num - 1)`` when a
window completes (10% with the default 11 samples, 25% here): the bound below allows for
it. Nothing here measures the clients' speed: the assertions are on throttle times and on
the broker's accounting.
"""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_wire import Connection
from tests.support.s3_harness import broker_log_lines

QUOTA = 256 * 1024  # bytes per second
RECORDS = 2048
PAYLOAD = b"q" * 1024  # 2 MiB in all


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = start_broker(
        tmp_path / "quotas",
        {"quota.window.num": "5", "metrics.prometheus.port": "0", "num.partitions": "1"},
    )
    yield b
    if b.proc.poll() is None:
        assert b.stop() == 0, b.log_tail()


# -- kafka-python's quota messages ----------------------------------------------------------------
def admin(bootstrap: str, **security: Any):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, **security)


def alter_quotas(bootstrap: str, *entries: tuple, validate_only=False, **security) -> list:
    """Entries of ((type, name), ...), key, value (None: remove); the response entries."""
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest

    entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(
        entries=[
            entry(
                entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[entry.OpData(key=key, value=value or 0.0, remove=value is None)],
            )
            for entity, key, value in entries
        ],
        validate_only=validate_only,
    )
    client = admin(bootstrap, **security)
    try:
        return client._manager.run(client._manager.send, request).entries
    finally:
        client.close()


def describe_quotas(bootstrap: str, *components: tuple, strict=False, **security) -> Any:
    from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest

    component = DescribeClientQuotasRequest.ComponentData
    request = DescribeClientQuotasRequest(
        components=[component(entity_type=t, match_type=m, match=v) for t, m, v in components],
        strict=strict,
    )
    client = admin(bootstrap, **security)
    try:
        return client._manager.run(client._manager.send, request)
    finally:
        client.close()


def as_table(response: Any) -> dict[tuple, dict[str, float]]:
    assert response.error_code == 0, response.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name or "<default>") for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


# -- the broker's accounting ---------------------------------------------------------------------
def metrics_url(broker: BrokerProcess) -> str:
    (line,) = broker_log_lines(broker, "Prometheus metrics on")
    return re.search(r"(http://\S+/metrics)", line).group(1)


def scrape(url: str, name: str, client_id: str) -> float | None:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'client_id="{client_id}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


class Scraper:
    """Samples one series of the broker's metrics every 50 ms on a thread."""

    def __init__(self, url: str, name: str, client_id: str) -> None:
        self.args = (url, name, client_id)
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            value = scrape(*self.args)
            if value is not None:
                self.samples.append(value)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- clients ------------------------------------------------------------------------------------
def produce(
    bootstrap: str, topic: str, client_id: str, records: int = RECORDS, **config: Any
) -> list[float]:
    """Send ``records`` records of 1 KiB; the throttle times (ms) the producer was sent."""
    from confluent_kafka import Producer

    throttles: list[float] = []
    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "batch.size": 16384,
            "linger.ms": 5,
            # One request at a time: the broker measures each before the next is sent.
            "max.in.flight.requests.per.connection": 1,
            "throttle_cb": lambda event: throttles.append(event.throttle_time * 1000),
            **config,
        }
    )
    for i in range(records):
        while True:
            try:
                producer.produce(
                    topic, PAYLOAD, key=str(i), on_delivery=lambda e, m: e and errors.append(e)
                )
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0
    producer.poll(0)
    assert errors == []
    return throttles


def consume(bootstrap: str, topic: str, client_id: str) -> tuple[int, list[float]]:
    """Read the topic from the start: the records read and the throttle times (ms)."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    throttles: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"g-{client_id}",
            "enable.auto.commit": False,
            "throttle_cb": lambda event: throttles.append(event.throttle_time * 1000),
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    deadline = time.monotonic() + 120
    try:
        while read < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read += 1
    finally:
        consumer.close()
    return read, throttles


# -- tests ---------------------------------------------------------------------------------------
def test_quotas_are_altered_described_and_kept_across_a_restart(broker: BrokerProcess) -> None:
    results = alter_quotas(
        broker.bootstrap,
        ((("user", "alice"),), "producer_byte_rate", 1048576.0),
        ((("user", "alice"), ("client-id", None)), "request_percentage", 25.0),
        ((("client-id", None),), "consumer_byte_rate", 2097152.0),
        ((("ip", "10.1.2.3"),), "connection_creation_rate", 10.0),
        ((("client-id", "x"),), "no_such_quota", 1.0),
        ((("client-id", "y"),), "producer_byte_rate", 1.5),
    )
    codes = [(r.error_code, r.error_message) for r in results]
    assert [c for c, _ in codes[:4]] == [0, 0, 0, 0]
    assert codes[4] == (ErrorCode.invalid_request, "Invalid configuration key no_such_quota")
    assert codes[5][0] == ErrorCode.invalid_request and "Long" in codes[5][1]
    expected = {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0},
        (("client-id", "<default>"), ("user", "alice")): {"request_percentage": 25.0},
        (("client-id", "<default>"),): {"consumer_byte_rate": 2097152.0},
        (("ip", "10.1.2.3"),): {"connection_creation_rate": 10.0},
    }
    assert as_table(describe_quotas(broker.bootstrap)) == expected
    only_alice = describe_quotas(broker.bootstrap, ("user", 0, "alice"), strict=True)
    assert as_table(only_alice) == {(("user", "alice"),): {"producer_byte_rate": 1048576.0}}

    assert broker.stop() == 0, broker.log_tail()
    again = restart(broker)
    try:
        assert as_table(describe_quotas(again.bootstrap)) == expected
        assert (Path(again.settings["log.dirs"]) / "client-quotas.json").exists()
        ip = ((("ip", "10.1.2.3"),), "connection_creation_rate", None)
        (removed,) = alter_quotas(again.bootstrap, ip)
        assert removed.error_code == 0
        assert (("ip", "10.1.2.3"),) not in as_table(describe_quotas(again.bootstrap))
    finally:
        assert again.stop() == 0, again.log_tail()


def test_a_producer_over_its_byte_rate_is_throttled_and_held_near_it(broker: BrokerProcess) -> None:
    (result,) = alter_quotas(
        broker.bootstrap, ((("client-id", "slow-producer"),), "producer_byte_rate", float(QUOTA))
    )
    assert result.error_code == 0
    url = metrics_url(broker)
    with Scraper(url, "kafka_server_produce_byte_rate", "slow-producer") as rates:
        throttles = produce(broker.bootstrap, "quota-produce", "slow-producer")
    assert throttles and max(throttles) > 0, "the producer was never sent a throttle time"
    assert rates.samples, "the broker's metrics never showed the producer's rate"
    # Without the quota the rate would be the client's and the disk's speed, tens of times
    # the quota; throttled, it stays within one request's worth of it.
    assert max(rates.samples) <= 1.5 * QUOTA, rates.samples
    assert max(rates.samples) >= 0.5 * QUOTA, rates.samples
    assert scrape(url, "kafka_server_produce_throttle_time", "slow-producer") > 0

    # Another client, no quota of its own: never throttled.
    assert produce(broker.bootstrap, "quota-produce", "free-producer") == []


def test_a_consumer_over_its_byte_rate_is_throttled_and_reads_everything(
    broker: BrokerProcess,
) -> None:
    assert produce(broker.bootstrap, "quota-fetch", "loader") == []
    (result,) = alter_quotas(
        broker.bootstrap, ((("client-id", None),), "consumer_byte_rate", float(QUOTA))
    )
    assert result.error_code == 0
    url = metrics_url(broker)
    with Scraper(url, "kafka_server_fetch_byte_rate", "slow-consumer") as rates:
        read, throttles = consume(broker.bootstrap, "quota-fetch", "slow-consumer")
    assert read == RECORDS
    assert throttles and max(throttles) > 0, "the consumer was never sent a throttle time"
    assert rates.samples and max(rates.samples) <= 1.5 * QUOTA, rates.samples


def test_a_client_over_its_request_percentage_is_throttled(broker: BrokerProcess) -> None:
    (result,) = alter_quotas(
        broker.bootstrap, ((("client-id", "busy"),), "request_percentage", 0.01)
    )
    assert result.error_code == 0
    from kio.schema.metadata.v12.request import MetadataRequest

    request = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )

    def throttle_times(client_id: str, count: int, until_throttled: bool) -> list[int]:
        times = []
        with Connection(broker.bootstrap, client_id=client_id) as connection:
            for _ in range(count):
                response = connection.request(3, 12, request)
                times.append(int(response.throttle_time.total_seconds() * 1000))
                if until_throttled and times[-1] > 0:
                    break
        return times

    # 0.01% of the event loop is 0.1 ms of handler time a second: a few Metadata requests.
    busy = throttle_times("busy", 200, until_throttled=True)
    assert busy[-1] > 0, busy
    assert busy[-1] <= 1000  # request throttles are capped at quota.window.size.seconds
    assert throttle_times("idle", 20, until_throttled=False) == [0] * 20


USERS = {"admin": "admin-pw", "alice": "alice-pw"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)


def sasl(user: str) -> dict[str, str]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def grant_write(bootstrap: str, topic: str, principal: str, admin_config: dict) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    client = AdminClient({"bootstrap.servers": bootstrap, **admin_config})
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for future in client.create_acls(bindings).values():
        future.result(30)


def test_only_principals_allowed_cluster_configs_alter_or_describe_quotas_and_a_user_quota_holds(
    tmp_path: Path,
) -> None:
    b = start_broker(
        tmp_path / "secured",
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "quota.window.num": "2",
        },
    )
    try:
        entry = ((("user", "alice"),), "producer_byte_rate", 64 * 1024.0)
        (denied,) = alter_quotas(b.bootstrap, entry, **sasl("alice"))
        assert denied.error_code == ErrorCode.cluster_authorization_failed
        refused = describe_quotas(b.bootstrap, **sasl("alice"))
        assert refused.error_code == ErrorCode.cluster_authorization_failed
        assert as_table(describe_quotas(b.bootstrap, **sasl("admin"))) == {}

        (allowed,) = alter_quotas(b.bootstrap, entry, **sasl("admin"))
        assert allowed.error_code == 0
        assert as_table(describe_quotas(b.bootstrap, **sasl("admin"))) == {
            (("user", "alice"),): {"producer_byte_rate": 64 * 1024.0}
        }

        # The quota follows the authenticated principal, whatever its client id.
        def librdkafka(user: str) -> dict[str, str]:
            return {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": USERS[user],
            }

        assert produce(b.bootstrap, "by-user", "any-client", 256, **librdkafka("admin")) == []
        grant_write(b.bootstrap, "by-user", "User:alice", librdkafka("admin"))
        throttled = produce(b.bootstrap, "by-user", "any-client", 256, **librdkafka("alice"))
        assert throttled and max(throttled) > 0
    finally:
        assert b.stop() == 0, b.log_tail()
