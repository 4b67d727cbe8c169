"""core.server.config: Kafka's broker keys, defaults, aliases and validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config import INT64_MAX
from core.errors import InvalidConfigError
from core.log.config import TOPIC_CONFIG
from core.properties import PropertiesFileError, parse_properties
from core.server.config import (
    BROKER_CONFIG,
    COMPATIBILITY_KEYS,
    BrokerConfig,
    Listener,
    load_broker_config,
)

HOUR = 3_600_000
REPO = Path(__file__).resolve().parents[3]

# A representative copy of Apache Kafka 4.x's config/server.properties (KRaft, combined).
KAFKA_SAMPLE = """
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
controller.quorum.voters=1@localhost:9093
############################# Socket Server Settings #############################
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\
SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
############################# Log Basics #############################
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""

# ... and of the ZooKeeper-era one, which users still copy.
KAFKA_ZK_SAMPLE = """
broker.id=0
listeners=PLAINTEXT://localhost:9092
num.network.threads=3
log.dirs=/tmp/kafka-logs
num.partitions=1
log.retention.hours=168
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""


def cfg(**props: str) -> BrokerConfig:
    return BrokerConfig.from_props({k.replace("_", "."): v for k, v in props.items()})


def build(props: dict[str, str]) -> BrokerConfig:
    return BrokerConfig.from_props(props)


def error(props: dict[str, str]) -> str:
    with pytest.raises(InvalidConfigError) as info:
        BrokerConfig.from_props(props)
    return str(info.value)


# -- defaults and samples ---------------------------------------------------------------------


def test_defaults_are_kafkas() -> None:
    c = build({})
    assert c.node_id == 1
    assert c.listeners == (Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),)
    assert c.advertised_listeners == c.listeners
    assert c.log_dirs == (Path("/tmp/kafka-logs"),)
    assert (c.num_partitions, c.default_replication_factor) == (1, 1)
    assert c.auto_create_topics_enable and c.delete_topic_enable
    assert c.socket_request_max_bytes == 104857600
    assert c.connections_max_idle_ms == 600000
    assert c.fetch_max_bytes == 57671680
    assert c.offsets_topic_num_partitions == 50
    assert c.num_recovery_threads_per_data_dir == 2
    assert c.remote_log_storage_system_enable is False
    assert c.default_log_config().retention_ms == 168 * HOUR
    assert c.default_log_config().segment_ms == 168 * HOUR


def test_kafka_sample_server_properties_loads() -> None:
    c = build(parse_properties(KAFKA_SAMPLE))
    assert c.node_id == 1 and c.process_roles == ("broker", "controller")
    assert [str(lst) for lst in c.listeners] == ["PLAINTEXT://:9092", "CONTROLLER://:9093"]
    assert c.broker_listeners == (Listener("PLAINTEXT", "PLAINTEXT", "", 9092),)
    # The controller listener is never advertised to clients.
    assert c.advertised_listeners == (Listener("PLAINTEXT", "PLAINTEXT", "localhost", 9092),)
    assert c.inter_broker_listener_name == "PLAINTEXT"
    assert c.controller_listener_names == ("CONTROLLER",)
    assert c.log_dirs == (Path("/tmp/kraft-combined-logs"),)
    assert c.num_recovery_threads_per_data_dir == 1
    assert c.offsets_topic_replication_factor == 1
    assert (c.transaction_state_log_replication_factor, c.transaction_state_log_min_isr) == (1, 1)
    assert c.log_retention_check_interval_ms == 300000
    assert c.default_log_config().segment_bytes == 1073741824


def test_kafka_zookeeper_era_sample_loads() -> None:
    c = build(parse_properties(KAFKA_ZK_SAMPLE))
    assert c.node_id == 0 and c.group_initial_rebalance_delay_ms == 0


def test_repo_server_properties_parses_and_loads() -> None:
    path = REPO / "config" / "server.properties"
    c = load_broker_config(path, {})
    assert c.node_id == 1
    assert c.listeners == (Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),)
    assert c.log_dirs == (Path("/tmp/tierlog-logs"),)
    assert c.auto_create_topics_enable and c.num_partitions == 1
    assert c.default_log_config().retention_ms == 168 * HOUR
    # Every key the example mentions, set or commented out, is a declared key.
    commented = re.findall(r"^#([a-z0-9.]+)=", path.read_text(), flags=re.MULTILINE)
    assert "remote.log.storage.system.enable" in commented
    for key in commented:
        assert key in BROKER_CONFIG, key


def test_compatibility_keys_are_accepted_and_documented() -> None:
    build({k: "x" for k in COMPATIBILITY_KEYS})
    documented = (REPO / "config" / "server.properties").read_text()
    assert "accepted for compatibility, no effect" in documented.lower()
    for key in COMPATIBILITY_KEYS:
        assert key in documented


def test_load_broker_config_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nnode.id=4\n")
    c = load_broker_config(path, {"num.partitions": "7"})
    assert (c.num_partitions, c.node_id) == (7, 4)
    assert load_broker_config(None, {"num.partitions": "2"}).num_partitions == 2


def test_load_broker_config_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(PropertiesFileError, match=r"missing\.properties"):
        load_broker_config(tmp_path / "missing.properties", {})


# -- errors name the key ----------------------------------------------------------------------


def test_unknown_key_fails() -> None:
    assert error({"no.such.key": "1"}).startswith("Unknown configuration no.such.key")
    assert "did you mean log.retention.hours" in error({"log.retention.hour": "1"})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "0"),
        ("num.partitions", "many"),
        ("auto.create.topics.enable", "yes"),
        ("socket.request.max.bytes", "0"),
        ("fetch.max.bytes", "100"),
        ("log.segment.bytes", "2"),
        ("log.cleanup.policy", "shred"),
        ("node.id", "-1"),
        ("log.retention.hours", "x"),
        ("process.roles", "observer"),
        ("offsets.topic.replication.factor", "40000"),
    ],
)
def test_bad_value_names_key(key: str, value: str) -> None:
    message = error({key: value})
    assert f"for configuration {key}" in message and value in message


def test_the_request_memory_pool_holds_one_largest_request() -> None:
    # Kafka's rule: a bounded queued.max.request.bytes is at least socket.request.max.bytes.
    assert build({}).queued_max_request_bytes == 104857600
    message = error({"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1001"})
    assert "Invalid value 1000 for configuration queued.max.request.bytes" in message
    assert "socket.request.max.bytes (1001)" in message
    assert build({"queued.max.request.bytes": "-1"}).queued_max_request_bytes == -1
    assert build({"socket.request.max.bytes": "1000", "queued.max.request.bytes": "1000"})


def test_values_are_trimmed() -> None:
    assert build({"num.partitions": " 4  "}).num_partitions == 4


# -- aliases and precedence -------------------------------------------------------------------


def test_broker_id_is_an_alias_of_node_id() -> None:
    assert build({"broker.id": "5"}).node_id == 5
    assert build({"broker.id": "5", "node.id": "5"}).node_id == 5
    assert "node.id to the same value as broker.id" in error({"broker.id": "5", "node.id": "6"})
    assert build({"broker.id": "5"}).get("node.id") == 5


def test_log_dirs_wins_over_log_dir() -> None:
    assert build({"log.dir": "/a"}).log_dirs == (Path("/a"),)
    assert build({"log.dir": "/a", "log.dirs": "/b, /c"}).log_dirs == (Path("/b"), Path("/c"))
    assert "log.dirs" in error({"log.dirs": "/b,/b/"})
    assert "At least one log directory" in error({"log.dirs": ""})


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, 168 * HOUR),
        ({"log.retention.hours": "1"}, HOUR),
        ({"log.retention.hours": "1", "log.retention.minutes": "2"}, 120_000),
        ({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "7"}, 7),
        ({"log.retention.minutes": "2", "log.retention.ms": "7"}, 7),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-1"}, -1),  # negative means unlimited
        ({"log.retention.ms": "-5"}, -1),
    ],
)
def test_retention_precedence(props: dict[str, str], expected: int) -> None:
    c = build(props)
    assert c.log_config_defaults()["retention.ms"] == str(expected)
    assert c.default_log_config().retention_ms == expected


def test_zero_retention_is_rejected_naming_the_key() -> None:
    assert "configuration log.retention.minutes" in error({"log.retention.minutes": "0"})
    assert "configuration log.retention.ms" in error({"log.retention.ms": "0"})


def test_roll_and_jitter_precedence() -> None:
    c = build({"log.roll.hours": "2", "log.roll.jitter.hours": "1"})
    assert (c.default_log_config().segment_ms, c.default_log_config().segment_jitter_ms) == (
        2 * HOUR,
        HOUR,
    )
    c = build({"log.roll.hours": "2", "log.roll.ms": "5000", "log.roll.jitter.ms": "10"})
    assert (c.default_log_config().segment_ms, c.default_log_config().segment_jitter_ms) == (
        5000,
        10,
    )
    assert "configuration log.roll.hours" in error({"log.roll.hours": "0"})
    assert "configuration log.roll.ms" in error({"log.roll.ms": "0"})


def test_flush_interval_falls_back_to_scheduler_interval() -> None:
    assert build({}).default_log_config().flush_ms == INT64_MAX
    c = build({"log.flush.scheduler.interval.ms": "3000"})
    assert c.default_log_config().flush_ms == 3000
    c = build({"log.flush.scheduler.interval.ms": "3000", "log.flush.interval.ms": "1000"})
    assert c.default_log_config().flush_ms == 1000 and c.log_flush_scheduler_interval_ms == 3000


def test_local_retention_defaults_and_errors_name_broker_keys() -> None:
    c = build({"log.local.retention.ms": "1000", "log.local.retention.bytes": "10"})
    lc = c.default_log_config()
    assert (lc.local_retention_ms, lc.local_retention_bytes) == (1000, 10)
    message = error({"log.retention.ms": "1000", "log.local.retention.ms": "5000"})
    assert "configuration log.local.retention.ms" in message
    assert "log.retention.ms" in message


def test_default_log_config_reflects_log_overrides() -> None:
    c = build(
        {
            "log.segment.bytes": "1048576",
            "log.retention.bytes": "5000000",
            "log.index.interval.bytes": "100",
            "log.index.size.max.bytes": "4096",
            "log.flush.interval.messages": "10",
            "message.max.bytes": "2000",
            "log.cleanup.policy": "compact,delete",
            "log.message.timestamp.type": "LogAppendTime",
            "log.segment.delete.delay.ms": "0",
            "min.insync.replicas": "2",
            "compression.type": "zstd",
            "unclean.leader.election.enable": "true",
        }
    )
    lc = c.default_log_config()
    assert lc.segment_bytes == 1048576 and lc.retention_bytes == 5000000
    assert lc.index_interval_bytes == 100 and lc.segment_index_bytes == 4096
    assert lc.flush_messages == 10 and lc.max_message_bytes == 2000
    assert lc.cleanup_policy == ("compact", "delete") and lc.log_append_time
    assert lc.file_delete_delay_ms == 0 and lc.min_insync_replicas == 2
    assert lc.compression_type == "zstd" and lc.unclean_leader_election_enable
    # A topic override still wins over the broker default.
    from core.log.config import LogConfig

    topic = LogConfig.from_props({"segment.bytes": "2048"}, defaults=c.log_config_defaults())
    assert topic.segment_bytes == 2048 and topic.retention_bytes == 5000000


def test_every_topic_server_default_is_declared_once() -> None:
    for key in TOPIC_CONFIG:
        if key.server_default_property is not None:
            assert key.server_default_property in BROKER_CONFIG
    assert set(build({}).log_config_defaults()) == {
        k.name for k in TOPIC_CONFIG if k.server_default_property
    }


# -- listeners --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("PLAINTEXT://127.0.0.1:9092", [("PLAINTEXT", "127.0.0.1", 9092)]),
        ("PLAINTEXT://:0", [("PLAINTEXT", "", 0)]),
        ("PLAINTEXT://0.0.0.0:9092", [("PLAINTEXT", "0.0.0.0", 9092)]),
        ("PLAINTEXT://[::1]:9092", [("PLAINTEXT", "::1", 9092)]),
        ("PLAINTEXT://::1:9092", [("PLAINTEXT", "::1", 9092)]),  # unbracketed, as Kafka allows
        ("PLAINTEXT://my-host.example.com:9092", [("PLAINTEXT", "my-host.example.com", 9092)]),
        ("plaintext://kafka_1:9092", [("PLAINTEXT", "kafka_1", 9092)]),
        (
            "PLAINTEXT://a:1, PLAINTEXT2://b:0 ,PLAINTEXT3://c:0",
            [("PLAINTEXT", "a", 1), ("PLAINTEXT2", "b", 0), ("PLAINTEXT3", "c", 0)],
        ),
    ],
)
def test_listeners_parse(value: str, expected: list[tuple[str, str, int]]) -> None:
    protocol_map = "PLAINTEXT:PLAINTEXT,PLAINTEXT2:PLAINTEXT,PLAINTEXT3:PLAINTEXT"
    c = build(
        {
            "listeners": value,
            "listener.security.protocol.map": protocol_map,
            "advertised.listeners": "PLAINTEXT://adv:9092",
        }
    )
    assert [(lst.name, lst.host, lst.port) for lst in c.listeners] == expected
    assert all(lst.security_protocol == "PLAINTEXT" for lst in c.listeners)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("CLIENT://localhost:9093", "no security protocol is defined for listener CLIENT"),
        ("PLAINTEXT://localhost", "missing port"),
        ("PLAINTEXT://localhost:", "missing port"),
        ("PLAINTEXT://localhost:99999", "port 99999"),
        ("PLAINTEXT://localhost:-1", "port -1"),
        ("PLAINTEXT://bad host:9092", "not a valid hostname"),
        ("PLAINTEXT://ex@mple:9092", "not a valid hostname"),
        ("PLAINTEXT://-lead:9092", "not a valid hostname"),
        ("PLAINTEXT://[::1:9092", "expected NAME://[ipv6]:port"),
        ("PLAINTEXT://[nothex]:9092", "not a valid hostname"),
        ("localhost:9092", "expected NAME://host:port"),
        ("PLAINTEXT://a:9092,PLAINTEXT://b:9093", "different name"),
        ("PLAINTEXT://a:9092,plaintext://b:9093", "different name"),
        # Whole-string checks, ASCII digits only: isdigit() takes "²" (which int() then
        # refuses) and Arabic-Indic digits (which int() reads as 9092).
        ("PLAINTEXT://localhost:90\n92", "port 90\n92"),
        ("PLAINTEXT://localhost:\u00b2", "port \u00b2"),
        ("PLAINTEXT://localhost:\u0669\u0660\u0669\u0662", "port \u0669\u0660\u0669\u0662"),
        ("PLAINTEXT://local\nhost:9092", "not a valid hostname"),
        ("PLAIN\nTEXT://localhost:9092", "listener name"),
    ],
)
def test_bad_listeners_name_the_key(value: str, reason: str) -> None:
    message = error({"listeners": value})
    assert "for configuration listeners" in message and reason in message


def test_duplicate_ports_rejected_but_port_zero_may_repeat() -> None:
    props = {"listener.security.protocol.map": "A:PLAINTEXT,PLAINTEXT:PLAINTEXT"}
    message = error({**props, "listeners": "PLAINTEXT://a:9092,A://b:9092"})
    assert "for configuration listeners" in message and "different port" in message
    c = build({**props, "listeners": "PLAINTEXT://a:0,A://b:0"})
    assert [lst.port for lst in c.listeners] == [0, 0]


def test_security_protocol_map_is_validated() -> None:
    message = error({"listener.security.protocol.map": "PLAINTEXT:TLS"})
    assert "configuration listener.security.protocol.map" in message and "TLS" in message
    assert "listener.security.protocol.map" in error({"listener.security.protocol.map": "x"})


def test_advertised_listeners() -> None:
    c = build({"listeners": "PLAINTEXT://127.0.0.1:0", "advertised.listeners": "PLAINTEXT://h:9"})
    assert c.advertised_listeners == (Listener("PLAINTEXT", "PLAINTEXT", "h", 9),)
    # Port 0 is kept: the broker advertises the port it actually bound.
    assert build({"listeners": "PLAINTEXT://127.0.0.1:0"}).advertised_listeners[0].port == 0
    # An empty host is advertised as this machine's name.
    assert build({"listeners": "PLAINTEXT://:9092"}).advertised_listeners[0].host != ""
    message = error({"listeners": "PLAINTEXT://0.0.0.0:9092"})
    assert "configuration advertised.listeners" in message and "0.0.0.0" in message
    message = error({"advertised.listeners": "OTHER://h:1"})
    assert "configuration advertised.listeners" in message
    message = error(
        {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
            "advertised.listeners": "OTHER://h:1",
        }
    )
    assert "configuration advertised.listeners" in message and "not defined in listeners" in message


def test_inter_broker_listener() -> None:
    props = {
        "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
    }
    assert "configuration inter.broker.listener.name" in error(props)  # PLAINTEXT by default
    c = build({**props, "inter.broker.listener.name": "internal"})
    assert c.inter_broker_listener_name == "INTERNAL"
    message = error(
        {
            **props,
            "inter.broker.listener.name": "INTERNAL",
            "security.inter.broker.protocol": "PLAINTEXT",
        }
    )
    assert "only one of" in message


def test_controller_listeners_are_not_broker_listeners() -> None:
    props = {"listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"}
    # Without an explicit map, a controller listener is PLAINTEXT (as in Kafka).
    c = build({**props, "controller.listener.names": "CONTROLLER"})
    assert [lst.name for lst in c.listeners] == ["PLAINTEXT", "CONTROLLER"]
    assert [lst.name for lst in c.broker_listeners] == ["PLAINTEXT"]
    assert [lst.name for lst in c.advertised_listeners] == ["PLAINTEXT"]
    message = error({"listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER"})
    assert "at least one broker listener" in message
    assert "configuration controller.quorum.voters" in error({"controller.quorum.voters": "bad"})
    assert "controller.quorum.bootstrap.servers" in error(
        {"controller.quorum.bootstrap.servers": "nohost"}
    )
    arabic_one = "\u0661"
    assert "controller.quorum.voters" in error(
        {"controller.quorum.voters": f"{arabic_one}@localhost:9093"}
    )
    assert "controller.quorum.bootstrap.servers" in error(
        {"controller.quorum.bootstrap.servers": f"localhost:909{arabic_one}"}
    )


def test_process_roles() -> None:
    assert build({"process.roles": "broker,controller"}).process_roles == ("broker", "controller")
    assert "must contain broker" in error({"process.roles": "controller"})
    assert "duplicate" in error({"process.roles": "broker,broker"})


def test_replica_fetch_wait_bounded_by_timeouts() -> None:
    message = error({"replica.fetch.wait.max.ms": "40000"})
    assert "configuration replica.fetch.wait.max.ms" in message


# -- outputs ----------------------------------------------------------------------------------


def test_to_props_and_sources() -> None:
    c = build({"num.partitions": "3", "log.retention.hours": "1"})
    props = c.to_props()
    assert set(props) == {k.name for k in BROKER_CONFIG}
    assert props["num.partitions"] == "3" and props["log.retention.hours"] == "1"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["auto.create.topics.enable"] == "true"
    assert props["log.retention.ms"] is None
    assert not c.is_default("num.partitions") and c.is_default("num.io.threads")
    assert c.get("log.retention.hours") == 1
    with pytest.raises(InvalidConfigError, match="Unknown configuration nope"):
        c.get("nope")


def test_log_manager_config() -> None:
    c = build(
        {
            "log.dirs": "/x,/y",
            "node.id": "3",
            "num.recovery.threads.per.data.dir": "4",
            "log.retention.check.interval.ms": "1000",
            "log.flush.offset.checkpoint.interval.ms": "10",
            "producer.id.expiration.ms": "99",
            "log.segment.bytes": "4096",
        }
    )
    m = c.log_manager_config(cluster_id="abc")
    assert m.log_dirs == (Path("/x"), Path("/y")) and m.node_id == 3 and m.cluster_id == "abc"
    assert m.num_recovery_threads_per_data_dir == 4
    assert m.retention_check_interval_ms == 1000
    assert m.flush_offset_checkpoint_interval_ms == 10
    assert m.producer_id_expiration_ms == 99
    assert m.default_log_config.segment_bytes == 4096


def test_every_key_has_a_doc_and_is_declared_once() -> None:
    names = [k.name for k in BROKER_CONFIG]
    assert len(names) == len(set(names))
    assert all(k.doc for k in BROKER_CONFIG)


def test_config_is_frozen() -> None:
    c = build({})
    with pytest.raises(AttributeError):
        c.num_partitions = 2  # type: ignore[misc]


# -- inert keys -------------------------------------------------------------------------------


def test_the_inert_keys_a_kafka_sample_sets_are_named_in_order() -> None:
    c = BrokerConfig.from_props(parse_properties(KAFKA_SAMPLE))
    assert c.inert_keys_given() == [
        "controller.quorum.bootstrap.servers",
        "controller.quorum.voters",
        "num.io.threads",
        "num.network.threads",
        "share.coordinator.state.topic.min.isr",
        "share.coordinator.state.topic.replication.factor",
    ]
    zk = BrokerConfig.from_props(parse_properties(KAFKA_ZK_SAMPLE))
    # The ZooKeeper keys work: the broker joins that cluster.
    assert zk.inert_keys_given() == ["num.network.threads"]
    assert zk.get("zookeeper.connect") == "localhost:2181"
    # Keys that work are not named, and a topic default inherits its topic key's marker.
    assert cfg(num_partitions="3", socket_send_buffer_bytes="-1").inert_keys_given() == []
    assert cfg(min_insync_replicas="2").inert_keys_given() == []
    assert cfg(compression_type="gzip").inert_keys_given() == ["compression.type"]


def test_socket_buffer_sizes_take_minus_one_for_the_os_default() -> None:
    c = cfg(socket_send_buffer_bytes="-1", socket_receive_buffer_bytes="65536")
    assert (c.socket_send_buffer_bytes, c.socket_receive_buffer_bytes) == (-1, 65536)
    assert "socket.receive.buffer.bytes" in error({"socket.receive.buffer.bytes": "-2"})
