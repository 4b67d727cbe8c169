"""AlterConfigs (the non-incremental one, which KafkaJS and librdkafka still send) and
DescribeConfigs as real clients see them: confluent-kafka, kafka-python and KafkaJS."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.kafka_topic_configs import KAFKA_4_TOPIC_CONFIGS

from .kafkajs_driver import admin_calls

TIMEOUT_S = 30
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4  # Kafka's ConfigResource.Type bytes, as KafkaJS takes


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("alter-configs"))
    yield b
    b.kill()


def create(broker: BrokerProcess, topic: str, **config: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(TIMEOUT_S)


def overrides(broker: BrokerProcess, topic: str) -> dict[str, str]:
    """The topic's DYNAMIC_TOPIC_CONFIG entries, as confluent-kafka describes them."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    return {
        name: e.value
        for name, e in entries.items()
        if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def test_confluent_kafka_alter_configs_replaces_the_overrides(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    topic = "ck-alter"
    create(broker, topic, **{"retention.ms": "5000", "segment.bytes": "2000000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(resource: Any, validate_only: bool = False) -> Any:
        with pytest.deprecated_call():  # librdkafka keeps the old API for old brokers
            (future,) = admin.alter_configs([resource], validate_only=validate_only).values()
        return future

    new = {"retention.ms": "7000", "max.message.bytes": "2000"}
    alter(ConfigResource(ResourceType.TOPIC, topic, set_config=new)).result(TIMEOUT_S)
    assert overrides(broker, topic) == new  # segment.bytes, not listed, is gone
    alter(
        ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "9"}),
        validate_only=True,
    ).result(TIMEOUT_S)
    assert overrides(broker, topic) == new
    with pytest.raises(KafkaException) as refused:
        alter(ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "-7"})).result(
            TIMEOUT_S
        )
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in refused.value.args[0].str()
    with pytest.raises(KafkaException) as static:
        alter(
            ConfigResource(ResourceType.BROKER, "1", set_config={"log.retention.ms": "1"})
        ).result(TIMEOUT_S)
    assert static.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert overrides(broker, topic) == new


def test_kafka_python_alter_configs(broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    topic = "kp-alter"
    create(broker, topic, **{"retention.ms": "5000"})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "60000"})
        # AlterConfigs replaces the overrides: kafka-python sends the modified keys along.
        answer = admin.alter_configs([resource], incremental=False)
        assert answer == {"topic": {topic: "OK"}}
        assert overrides(broker, topic) == {"retention.ms": "5000", "segment.ms": "60000"}
        bad = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.bytes": "-1"})
        (message,) = admin.alter_configs([bad], incremental=False)["topic"].values()
        assert (
            message.startswith("[Error 40] InvalidConfigurationError")
            and "segment.bytes" in message
        )
        # A reset of every key is an AlterConfigs without keys: every override goes.
        everything = ConfigResource(ConfigResourceType.TOPIC, topic)
        assert admin.reset_configs([everything], incremental=False) == {"topic": {topic: "OK"}}
        assert overrides(broker, topic) == {}
    finally:
        admin.close()


def test_kafkajs_alter_and_describe_configs(broker: BrokerProcess) -> None:
    topic = "kafkajs-alter"
    create(broker, topic, **{"retention.ms": "5000"})

    def alter(resource_type: int, name: str, entries: dict[str, str]) -> tuple[str, Any]:
        return (
            "alterConfigs",
            [
                {
                    "validateOnly": False,
                    "resources": [
                        {
                            "type": resource_type,
                            "name": name,
                            "configEntries": [{"name": k, "value": v} for k, v in entries.items()],
                        }
                    ],
                }
            ],
        )

    describe = ("describeConfigs", [{"resources": [{"type": TOPIC_RESOURCE, "name": topic}]}])
    replaced, described, invalid, static = admin_calls(
        broker.bootstrap,
        [
            alter(TOPIC_RESOURCE, topic, {"cleanup.policy": "compact"}),
            describe,
            alter(TOPIC_RESOURCE, topic, {"segment.bytes": "-1"}),
            alter(BROKER_RESOURCE, "1", {"log.retention.ms": "1"}),
        ],
    )
    assert replaced["ok"], replaced
    (resource,) = replaced["result"]["resources"]
    assert (resource["errorCode"], resource["resourceName"]) == (0, topic)
    assert described["ok"], described
    (entries,) = [r["configEntries"] for r in described["result"]["resources"]]
    # Kafka's order, and retention.ms back to its default.
    assert [e["configName"] for e in entries] == KAFKA_4_TOPIC_CONFIGS
    by_name = {e["configName"]: e for e in entries}
    assert (by_name["cleanup.policy"]["configValue"], by_name["cleanup.policy"]["isDefault"]) == (
        "compact",
        False,
    )
    assert (by_name["retention.ms"]["configValue"], by_name["retention.ms"]["isDefault"]) == (
        "604800000",
        True,
    )
    assert not invalid["ok"] and invalid["error"]["type"] == "INVALID_CONFIG", invalid
    assert not static["ok"] and static["error"]["type"] == "INVALID_REQUEST", static
    assert overrides(broker, topic) == {"cleanup.policy": "compact"}
