"""``tierlog transactions list|describe`` against a real broker with transactional
producers (one in an open transaction, one idle after its commit, one never used)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess, start_broker
from tierlog.cli import main


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    b = start_broker(tmp_path_factory.mktemp("txn-cmd") / "broker")
    producers = []
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(30)
        for txn_id in ("open-one", "done-one", "idle-one"):
            p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": txn_id})
            p.init_transactions(30)
            producers.append(p)
        producers[0].begin_transaction()
        producers[0].produce("orders", b"x", partition=1)
        producers[0].flush(30)
        producers[1].begin_transaction()
        producers[1].produce("orders", b"y", partition=0)
        producers[1].commit_transaction(30)
        yield b
    finally:
        code = b.stop()
        assert code == 0, b.log_tail()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["transactions", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list(capsys: pytest.CaptureFixture[str], broker: BrokerProcess) -> None:
    code, out, err = run(capsys, "list", "--bootstrap-server", broker.bootstrap, "--json")
    assert code == 0, err
    rows = {r["transactional_id"]: r["state"] for r in json.loads(out)["transactions"]}
    assert rows == {"open-one": "Ongoing", "done-one": "CompleteCommit", "idle-one": "Empty"}
    code, out, _ = run(capsys, "list", "--bootstrap-server", broker.bootstrap)
    lines = out.splitlines()
    assert lines[0] == "TransactionalId\tCoordinator\tProducerId\tTransactionState"
    assert len(lines) == 4 and lines[2].startswith("idle-one\t1\t")


def test_describe(capsys: pytest.CaptureFixture[str], broker: BrokerProcess) -> None:
    server = ("--bootstrap-server", broker.bootstrap, "--json")
    code, out, err = run(capsys, "describe", "--transactional-id", "open-one", *server)
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["state"], doc["partitions"], doc["coordinator"]) == ("Ongoing", ["orders-1"], 1)
    assert doc["start_time_ms"] > 0 and doc["timeout_ms"] == 60_000
    code, out, err = run(capsys, "describe", "--transactional-id", "idle-one", *server)
    assert code == 0, err
    assert (json.loads(out)["state"], json.loads(out)["start_time_ms"]) == ("Empty", None)
    code, out, err = run(capsys, "describe", "--transactional-id", "nobody", *server)
    assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in err
