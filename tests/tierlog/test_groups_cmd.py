"""``tierlog groups``: group ids and topic names that start with ``-``, against a real broker.

Group ids can be any string and ``-`` is legal anywhere in a topic name, so ``groups
describe`` must take ``-readers`` as the group it names, as it is and after ``--``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.broker_process import BrokerProcess, start_broker
from tierlog.cli import main

TOPIC = "-events"
GROUPS = {"-readers": 3, "--js": 5}  # group -> committed offset of partition 0
RECORDS = 7


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = start_broker(tmp_path_factory.mktemp("groups-cmd") / "broker")
    try:
        producer = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(RECORDS):
            producer.produce(TOPIC, value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0
        for group, offset in GROUPS.items():
            # A simple group: offsets committed without joining (no members, state EMPTY).
            consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
            consumer.close()
        yield b
    finally:
        if b.proc.poll() is None:
            code = b.stop()
            assert code == 0, b.log_tail()


def describe(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    code = main(["groups", "describe", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)["groups"]


def test_group_ids_starting_with_a_dash(capsys, broker: BrokerProcess) -> None:
    server = ("--bootstrap-server", broker.bootstrap)
    for argv in (
        ("-readers", *server, "--json"),  # as it is
        ("--json", "-readers", *server),
        (*server, "--json", "--", "-readers"),  # after --
    ):
        (doc,) = describe(capsys, *argv)
        assert doc["group"] == "-readers", argv
        assert doc["partitions"] == [
            {
                "topic": TOPIC,
                "partition": 0,
                "committed_offset": 3,
                "log_end_offset": RECORDS,
                "lag": RECORDS - 3,
                "member_id": None,
            }
        ], argv
    # Several groups; "--js" reads as an abbreviation of --json, so it must follow --.
    docs = describe(capsys, *server, "--json", "--", "-readers", "--js")
    assert [(d["group"], d["partitions"][0]["committed_offset"]) for d in docs] == [
        ("-readers", 3),
        ("--js", 5),
    ]

    code = main(["groups", "list", *server, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    listed = {g["group"] for g in json.loads(captured.out)["groups"]}
    assert set(GROUPS) <= listed
