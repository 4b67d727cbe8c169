"""``tierlog cluster``: what describe makes of a cluster's metadata, and the arguments of
elect-leaders (the commands against a real cluster: tests/integration/test_cluster.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tierlog.cli import CommandError
from tierlog.cluster_cmd import _partitions, describe_cluster


def partition(leader: int, replicas: list[int], isr: list[int]) -> SimpleNamespace:
    return SimpleNamespace(leader=leader, replicas=replicas, isrs=isr)


class FakeAdmin:
    def list_topics(self, timeout: float) -> SimpleNamespace:
        return SimpleNamespace(
            cluster_id="abc",
            controller_id=2,
            brokers={
                3: SimpleNamespace(id=3, host="h3", port=9092),
                2: SimpleNamespace(id=2, host="h2", port=9092),
            },
            topics={
                "t": SimpleNamespace(
                    partitions={
                        1: partition(-1, [1, 3], [1]),
                        0: partition(2, [2, 3, 1], [2, 3]),
                        2: partition(3, [3, 2], [3, 2]),
                    }
                )
            },
        )


def test_describe_counts_under_replicated_and_offline_partitions() -> None:
    doc = describe_cluster(FakeAdmin())
    assert (doc["cluster_id"], doc["controller"]) == ("abc", 2)
    assert [b["id"] for b in doc["brokers"]] == [2, 3]
    states = [(p["partition"], p["under_replicated"], p["offline"]) for p in doc["partitions"]]
    assert states == [(0, True, False), (1, True, True), (2, False, False)]
    assert (doc["under_replicated"], doc["offline"]) == (2, 1)


def test_partitions_are_topic_colon_index() -> None:
    assert _partitions([]) is None
    parsed = _partitions(["orders:0", "a:b:12"])
    assert [(tp.topic, tp.partition) for tp in parsed] == [("orders", 0), ("a:b", 12)]
    for bad in ("orders", "orders:", ":1", "orders:-1", "orders:x"):
        with pytest.raises(CommandError, match="TOPIC:PARTITION"):
            _partitions([bad])
