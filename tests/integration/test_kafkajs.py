"""KafkaJS (Node.js) against a real broker: a consumer group of two KafkaJS members, and
its admin client. Produce and consume of every record shape are in the client matrix; a
KafkaJS group rebalancing onto partitions added by CreatePartitions is in
test_create_partitions.

KafkaJS's admin client also has ``alterConfigs`` (AlterConfigs, the non-incremental API),
which is not exercised here; it has no call for OffsetDelete or the SCRAM credential APIs.
"""

from __future__ import annotations

from tests.support.broker_process import BrokerProcess
from tests.support.kafka_clients import Rec
from tests.support.waiting import wait_until

from .kafkajs_driver import GroupMember, admin_calls, produce_kafkajs

TOPIC_CONFIG_RESOURCE = 2  # KafkaJS's ConfigResourceTypes.TOPIC (Kafka's byte value)
PARTITIONS = 4


def produce_spread(broker: BrokerProcess, topic: str, start: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def offsets_of(start: int, count: int) -> set[tuple[int, int]]:
    """(partition, offset) of the records ``start .. start+count-1`` of produce_spread."""
    return {(i % PARTITIONS, i // PARTITIONS) for i in range(start, start + count)}


def test_two_kafkajs_members_share_a_topic_and_rebalance_when_one_leaves(broker_factory):
    broker: BrokerProcess = broker_factory({"group.initial.rebalance.delay.ms": "500"})
    topic, group = "kafkajs-grouped", "kafkajs-group"
    (created,) = admin_calls(
        broker.bootstrap,
        [("createTopics", [{"topics": [{"topic": topic, "numPartitions": PARTITIONS}]}])],
    )
    assert created == {"ok": True, "result": True}
    produce_spread(broker, topic, 0, 80)
    members = [GroupMember(broker.bootstrap, topic, group) for _ in range(2)]
    try:

        def shared() -> bool:
            a, b = (m.partitions() for m in members)
            return bool(a) and bool(b) and not a & b and a | b == set(range(PARTITIONS))

        wait_until(shared, 60, 0.2, what="two KafkaJS members sharing four partitions")
        wait_until(
            lambda: members[0].records() | members[1].records() == offsets_of(0, 80),
            60,
            0.2,
            what="the 80 records read by the group",
        )
        (described,) = admin_calls(broker.bootstrap, [("describeGroups", [[group]])])
        doc = described["result"]["groups"][0]
        assert (doc["state"], doc["protocol"], len(doc["members"])) == (
            "Stable",
            "RoundRobinAssigner",
            2,
        )

        # One member leaves (KafkaJS sends LeaveGroup on disconnect): the other takes its
        # partitions over and reads what is produced next, on all of them.
        leaver, stayer = members
        joins_before = len(stayer.events("assigned"))
        assert leaver.leave() == 0, leaver.log()
        assert leaver.events()[-1]["event"] == "stopped"
        wait_until(
            lambda: stayer.partitions() == set(range(PARTITIONS)),
            60,
            0.2,
            what="the remaining member assigned every partition",
        )
        assert len(stayer.events("assigned")) > joins_before
        produce_spread(broker, topic, 80, 40)
        wait_until(
            lambda: offsets_of(80, 40) <= stayer.records(),
            60,
            0.2,
            what="the remaining member reading the new records of every partition",
        )
        for m in members:
            assert not m.events("crash"), (m.events("crash"), m.log())
    finally:
        for m in members:
            m.kill()


def test_kafkajs_admin_calls(broker_factory):
    broker: BrokerProcess = broker_factory()
    topic = "kafkajs-admin"
    new_topic = {
        "topic": topic,
        "numPartitions": 3,
        "replicationFactor": 1,
        "configEntries": [{"name": "retention.ms", "value": "3600000"}],
    }
    answers = admin_calls(
        broker.bootstrap,
        [
            ("createTopics", [{"topics": [new_topic]}]),
            ("createTopics", [{"topics": [new_topic]}]),  # exists: KafkaJS answers false
            ("listTopics", []),
            ("fetchTopicMetadata", [{"topics": [topic]}]),
            (
                "describeConfigs",
                [
                    {
                        "resources": [
                            {
                                "type": TOPIC_CONFIG_RESOURCE,
                                "name": topic,
                                "configNames": ["retention.ms", "cleanup.policy"],
                            }
                        ],
                        "includeSynonyms": False,
                    }
                ],
            ),
        ],
    )
    for answer in answers:
        assert answer["ok"], answer
    created, again, listed, metadata, configs = (a["result"] for a in answers)
    assert (created, again) == (True, False)
    assert topic in listed
    (described,) = metadata["topics"]
    assert described["name"] == topic
    assert [
        (p["partitionId"], p["leader"], p["partitionErrorCode"]) for p in described["partitions"]
    ] == [(0, 1, 0), (1, 1, 0), (2, 1, 0)]
    (resource,) = configs["resources"]
    assert resource["errorCode"] == 0
    entries = {e["configName"]: e for e in resource["configEntries"]}
    assert (entries["retention.ms"]["configValue"], entries["retention.ms"]["isDefault"]) == (
        "3600000",
        False,
    )
    assert (entries["cleanup.policy"]["configValue"], entries["cleanup.policy"]["isDefault"]) == (
        "delete",
        True,
    )

    # CreatePartitions, DescribeCluster (KafkaJS asks Metadata), offsets and DeleteGroups.
    group = "kafkajs-admin-group"
    answers = admin_calls(
        broker.bootstrap,
        [
            ("createPartitions", [{"topicPartitions": [{"topic": topic, "count": 5}]}]),
            ("createPartitions", [{"topicPartitions": [{"topic": topic, "count": 2}]}]),
            ("fetchTopicMetadata", [{"topics": [topic]}]),
            ("describeCluster", []),
            (
                "setOffsets",
                [
                    {
                        "groupId": group,
                        "topic": topic,
                        "partitions": [{"partition": 4, "offset": "3"}],
                    }
                ],
            ),
            ("fetchOffsets", [{"groupId": group, "topics": [topic]}]),
            ("deleteGroups", [[group]]),
            ("fetchOffsets", [{"groupId": group, "topics": [topic]}]),
        ],
    )
    grown, shrink, metadata, cluster, set_offsets, fetched, deleted, gone = answers
    assert grown == {"ok": True, "result": None}
    assert not shrink["ok"] and "INVALID_PARTITIONS" in str(shrink["error"]), shrink
    assert [p["partitionId"] for p in metadata["result"]["topics"][0]["partitions"]] == list(
        range(5)
    )
    host, port = broker.bootstrap.rsplit(":", 1)
    assert cluster["ok"], cluster
    assert cluster["result"]["brokers"] == [{"nodeId": 1, "host": host, "port": int(port)}]
    assert cluster["result"]["controller"] == 1 and cluster["result"]["clusterId"]
    assert set_offsets["ok"], set_offsets

    def committed(answer: dict) -> dict[int, str]:
        assert answer["ok"], answer
        (t,) = answer["result"]
        return {p["partition"]: p["offset"] for p in t["partitions"]}

    assert committed(fetched)[4] == "3"
    assert deleted == {"ok": True, "result": [{"groupId": group, "errorCode": 0}]}
    assert committed(gone)[4] == "-1"

    base = 1_700_000_000_000
    records = [Rec(b"k", b"v%d" % i, (), base + i * 1000) for i in range(10)]
    assert produce_kafkajs(broker.bootstrap, topic, records) == list(range(10))
    answers = admin_calls(
        broker.bootstrap,
        [
            ("fetchTopicOffsets", [topic]),
            ("fetchTopicOffsetsByTimestamp", [topic, base + 3500]),
            (
                "deleteTopicRecords",
                [{"topic": topic, "partitions": [{"partition": 0, "offset": "4"}]}],
            ),
            ("fetchTopicOffsets", [topic]),
            # Above the high watermark: Kafka's OFFSET_OUT_OF_RANGE, nothing deleted.
            (
                "deleteTopicRecords",
                [{"topic": topic, "partitions": [{"partition": 0, "offset": "40"}]}],
            ),
            ("fetchTopicOffsets", [topic]),
            ("deleteTopics", [{"topics": [topic]}]),
            ("listTopics", []),
        ],
    )
    offsets, by_time, deleted, after, refused, unchanged, dropped, listed = answers

    def watermarks(answer: dict) -> dict[int, tuple[int, int]]:
        assert answer["ok"], answer
        return {p["partition"]: (int(p["low"]), int(p["high"])) for p in answer["result"]}

    assert watermarks(offsets) == {0: (0, 10), 1: (0, 0), 2: (0, 0), 3: (0, 0), 4: (0, 0)}
    assert by_time["ok"] and by_time["result"][0] == {"partition": 0, "offset": "4"}
    assert deleted == {"ok": True, "result": None}
    assert watermarks(after)[0] == (4, 10)
    assert not refused["ok"]
    (failed,) = refused["error"]["cause"]["partitions"]
    assert failed["error"]["type"] == "OFFSET_OUT_OF_RANGE", refused
    assert watermarks(unchanged)[0] == (4, 10)
    assert dropped == {"ok": True, "result": None}
    assert listed["ok"], listed
    wait_until(
        lambda: topic not in admin_calls(broker.bootstrap, [("listTopics", [])])[0]["result"],
        30,
        0.2,
        what="the deleted topic gone from listTopics",
    )
