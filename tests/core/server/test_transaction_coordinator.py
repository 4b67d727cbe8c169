"""The transaction coordinator over real storage: Kafka's state machine, markers in the
partitions, KIP-890 verification, timeouts, recovery from the log, hanging transactions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.records.builder import RecordBatchBuilder, build_control_batch
from core.records.record import ControlRecordType
from core.server.internal_topics import TRANSACTION_STATE_TOPIC
from core.server.transaction_coordinator import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    CoordinatorSettings,
    TransactionCoordinator,
)
from core.server.transaction_log import TransactionState
from core.server.transaction_marker_channel import MarkerChannel, TxnMarker
from core.server.transaction_state_topic import TransactionStateLog
from core.server.transaction_verification import abort_hanging_transactions

from .fake_broker import FakeBroker

S = TransactionState


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path)
    b.make_topic("t", 2)
    yield b
    b.close()


class BlockedMarkers(MarkerChannel):
    """Markers that never get written (a coordinator that crashes before sending them)."""

    async def send(self, marker: TxnMarker, still_needed: Callable[[], bool]) -> bool:
        await asyncio.Event().wait()
        return False


def coordinator(
    broker: FakeBroker, clock: Clock, markers: type[MarkerChannel] = MarkerChannel
) -> TransactionCoordinator:
    rm = broker.replica_manager

    async def written(partition: Any, offset: int) -> None:
        await rm.wait_durable_always(partition)

    return TransactionCoordinator(
        lambda: 2,
        TransactionStateLog(lambda i: rm.partition(TRANSACTION_STATE_TOPIC, i), written),
        markers(rm, on_written=broker.on_marker_written),
        broker.allocate_producer_id,
        CoordinatorSettings(max_timeout_ms=60_000),
        clock=clock,
    )


async def loaded(c: TransactionCoordinator) -> TransactionCoordinator:
    for index in range(2):
        await c.load(index, 0)
    return c


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def txn_batch(pid: int, epoch: int, seq: int = 0, value: bytes = b"v") -> bytearray:
    builder = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )
    builder.append(value, timestamp=1_700_000_000_000)
    return builder.build()


def state(c: TransactionCoordinator, txn_id: str) -> TransactionState:
    error, meta = c.describe(txn_id)
    assert error == NONE and meta is not None
    return meta.state


def test_init_add_verify_commit(broker: FakeBroker) -> None:
    async def go() -> None:
        c = await loaded(coordinator(broker, Clock()))
        assert (await c.init_producer_id("a", 0, -1, -1))[0] == INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id("a", 60_001, -1, -1))[0] == INVALID_TRANSACTION_TIMEOUT
        error, pid, epoch = await c.init_producer_id("a", 10_000, -1, -1)
        assert (error, epoch) == (NONE, 0)
        error, pid2, epoch = await c.init_producer_id("a", 10_000, -1, -1)
        assert (error, pid2, epoch) == (NONE, pid, 1)
        assert c.verify("a", pid, 1, [("t", 0)]) == {("t", 0): INVALID_TXN_STATE}
        assert c.verify("nobody", pid, 1, [("t", 0)]) == {("t", 0): INVALID_PRODUCER_ID_MAPPING}
        assert await c.add_partitions("a", pid, 0, [("t", 0)]) == PRODUCER_FENCED
        assert await c.add_partitions("a", pid + 1, 1, [("t", 0)]) == INVALID_PRODUCER_ID_MAPPING
        assert await c.add_partitions("a", pid, 1, [("t", 0)]) == NONE
        assert state(c, "a") is S.ONGOING
        assert c.verify("a", pid, 1, [("t", 0), ("t", 1)]) == {
            ("t", 0): NONE,
            ("t", 1): INVALID_TXN_STATE,
        }
        assert c.verify("a", pid, 0, [("t", 0)]) == {("t", 0): INVALID_PRODUCER_EPOCH}
        partition = broker.replica_manager.partition("t", 0)
        assert partition is not None
        broker.replica_manager.append(partition, txn_batch(pid, 1))
        assert partition.last_stable_offset == 0  # the transaction is open
        assert await c.end_txn("a", pid, 1, commit=True) == NONE
        await until(lambda: state(c, "a") is S.COMPLETE_COMMIT)
        assert partition.last_stable_offset == partition.high_watermark == 2
        assert partition.log.collect_aborted_txns(0, 2) == []
        # A retried commit is answered NONE; an abort now is INVALID_TXN_STATE.
        assert await c.end_txn("a", pid, 1, commit=True) == NONE
        assert await c.end_txn("a", pid, 1, commit=False) == INVALID_TXN_STATE

    run(go)


def test_init_fences_an_open_transaction(broker: FakeBroker) -> None:
    async def go() -> None:
        c = await loaded(coordinator(broker, Clock()))
        _, pid, epoch = await c.init_producer_id("f", 10_000, -1, -1)
        assert await c.add_partitions("f", pid, epoch, [("t", 1)]) == NONE
        partition = broker.replica_manager.partition("t", 1)
        assert partition is not None
        broker.replica_manager.append(partition, txn_batch(pid, epoch))
        # The second producer's init aborts the first's transaction with a bumped epoch.
        assert (await c.init_producer_id("f", 10_000, -1, -1))[0] == CONCURRENT_TRANSACTIONS
        await until(lambda: state(c, "f") is S.COMPLETE_ABORT)
        error, pid2, epoch2 = await c.init_producer_id("f", 10_000, -1, -1)
        assert (error, pid2, epoch2) == (NONE, pid, epoch + 2)
        assert [t.producer_id for t in partition.log.collect_aborted_txns(0, 2)] == [pid]
        assert partition.last_stable_offset == partition.high_watermark
        # The fenced producer's commit fails.
        assert await c.end_txn("f", pid, epoch, commit=True) == PRODUCER_FENCED

    run(go)


def test_timed_out_transaction_is_aborted(broker: FakeBroker) -> None:
    async def go() -> None:
        clock = Clock()
        c = await loaded(coordinator(broker, clock))
        _, pid, epoch = await c.init_producer_id("slow", 5_000, -1, -1)
        assert await c.add_partitions("slow", pid, epoch, [("t", 0)]) == NONE
        partition = broker.replica_manager.partition("t", 0)
        assert partition is not None
        broker.replica_manager.append(partition, txn_batch(pid, epoch))
        clock.now += 5_000
        c.abort_timed_out()
        assert state(c, "slow") is S.ONGOING  # not older than its timeout yet
        clock.now += 1
        c.abort_timed_out()
        await until(lambda: state(c, "slow") is S.COMPLETE_ABORT)
        assert partition.last_stable_offset == partition.high_watermark == 2
        _, meta = c.describe("slow")
        assert meta is not None and meta.producer_epoch == epoch + 1

    run(go)


def test_prepared_transaction_completes_after_reload(broker: FakeBroker) -> None:
    async def go() -> None:
        first = await loaded(coordinator(broker, Clock(), BlockedMarkers))
        _, pid, epoch = await first.init_producer_id("r", 10_000, -1, -1)
        assert await first.add_partitions("r", pid, epoch, [("t", 0), ("t", 1)]) == NONE
        for index in (0, 1):
            partition = broker.replica_manager.partition("t", index)
            assert partition is not None
            broker.replica_manager.append(partition, txn_batch(pid, epoch))
        assert await first.end_txn("r", pid, epoch, commit=False) == NONE
        assert state(first, "r") is S.PREPARE_ABORT
        first.shutdown()
        # A new coordinator (the broker restarted) finds PrepareAbort in the log.
        second = await loaded(coordinator(broker, Clock()))
        await until(lambda: state(second, "r") is S.COMPLETE_ABORT)
        for index in (0, 1):
            partition = broker.replica_manager.partition("t", index)
            assert partition is not None
            assert partition.last_stable_offset == partition.high_watermark == 2
            assert len(partition.log.collect_aborted_txns(0, 2)) == 1

    run(go)


def test_expired_transactional_id_is_removed(broker: FakeBroker) -> None:
    async def go() -> None:
        clock = Clock()
        c = await loaded(coordinator(broker, clock))
        assert (await c.init_producer_id("old", 10_000, -1, -1))[0] == NONE
        clock.now += c.settings.id_expiration_ms + 1
        c.remove_expired()
        await until(lambda: c.describe("old")[0] != NONE)
        reloaded = await loaded(coordinator(broker, clock))
        assert reloaded.describe("old")[1] is None  # the tombstone stays

    run(go)


def test_hanging_transaction_is_aborted_after_the_max_timeout(broker: FakeBroker) -> None:
    async def go() -> None:
        c = await loaded(coordinator(broker, Clock()))
        partition = broker.replica_manager.partition("t", 0)
        assert partition is not None
        # Written before verification existed (straight to the log): nobody knows it.
        partition.append_as_leader(txn_batch(4242, 0))
        [open_txn] = partition.log.open_transactions()
        aborted: list[int] = []

        def abort(p: Any, txn: Any) -> None:
            aborted.append(txn.producer_id)
            batch = build_control_batch(
                ControlRecordType.ABORT,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
            )
            broker.replica_manager.append_marker(p.topic, p.index, batch)

        def sweep(now: int) -> int:
            return abort_hanging_transactions(
                [partition], c.knows_open_transaction, abort, 60_000, now
            )

        assert sweep(open_txn.seen_ms + 60_000) == 0
        assert partition.last_stable_offset == 0
        assert sweep(open_txn.seen_ms + 60_001) == 1
        assert aborted == [4242]
        assert partition.last_stable_offset == partition.high_watermark == 2

    run(go)


def test_known_transaction_is_left_to_its_coordinator(broker: FakeBroker) -> None:
    async def go() -> None:
        c = await loaded(coordinator(broker, Clock()))
        _, pid, epoch = await c.init_producer_id("k", 10_000, -1, -1)
        assert await c.add_partitions("k", pid, epoch, [("t", 0)]) == NONE
        partition = broker.replica_manager.partition("t", 0)
        assert partition is not None
        broker.replica_manager.append(partition, txn_batch(pid, epoch))
        [txn] = partition.log.open_transactions()
        late = txn.seen_ms + 10**9
        calls: list[Any] = []
        count = abort_hanging_transactions(
            [partition], c.knows_open_transaction, lambda p, t: calls.append(t), 60_000, late
        )
        assert (count, calls) == (0, [])

    run(go)


def test_no_verdict_on_unknown_transactions_without_every_partition(broker: FakeBroker) -> None:
    async def go() -> None:
        c = await loaded(coordinator(broker, Clock()))
        assert c.knows_open_transaction(4242, ("t", 0)) is False
        c.unload(1)  # another broker leads __transaction_state-1 now
        assert c.knows_open_transaction(4242, ("t", 0)) is None

    run(go)
