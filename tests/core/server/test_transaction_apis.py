"""The transaction handlers as a client sees them (framed, decoded, answered)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey

from .fake_broker import FakeBroker, call, schema

TIMEOUT = datetime.timedelta(seconds=30)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path)
    b.make_topic("t", 1)
    yield b
    b.close()


def init(broker: FakeBroker, txn_id: str, version: int = 4) -> tuple[int, int]:
    s = schema(ApiKey.INIT_PRODUCER_ID, version)
    r = call(
        broker,
        ApiKey.INIT_PRODUCER_ID,
        version,
        s.InitProducerIdRequest(
            transactional_id=txn_id,
            transaction_timeout=TIMEOUT,
            producer_id=i64(-1),
            producer_epoch=i16(-1),
        ),
    )
    assert r.error_code == ErrorCode.none
    return r.producer_id, r.producer_epoch


def add_offsets(broker: FakeBroker, txn_id: str, pid: int, epoch: int, group: str) -> Any:
    s = schema(ApiKey.ADD_OFFSETS_TO_TXN, 3)
    request = s.AddOffsetsToTxnRequest(
        transactional_id=txn_id, producer_id=i64(pid), producer_epoch=i16(epoch), group_id=group
    )
    return call(broker, ApiKey.ADD_OFFSETS_TO_TXN, 3, request).error_code


def txn_commit(
    broker: FakeBroker, txn_id: str, pid: int, epoch: int, group: str, **member: Any
) -> ErrorCode:
    s = schema(ApiKey.TXN_OFFSET_COMMIT, 3)
    request = s.TxnOffsetCommitRequest(
        transactional_id=txn_id,
        group_id=group,
        producer_id=i64(pid),
        producer_epoch=i16(epoch),
        generation_id=i32(member.get("generation", -1)),
        member_id=member.get("member_id", ""),
        group_instance_id=None,
        topics=(
            s.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=(
                    s.TxnOffsetCommitRequestPartition(
                        partition_index=i32(0),
                        committed_offset=i64(5),
                        committed_leader_epoch=i32(-1),
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    r = call(broker, ApiKey.TXN_OFFSET_COMMIT, 3, request)
    return r.topics[0].partitions[0].error_code


def offset_fetch(broker: FakeBroker, group: str, require_stable: bool) -> Any:
    s = schema(ApiKey.OFFSET_FETCH, 7)
    request = s.OffsetFetchRequest(
        group_id=group,
        topics=(s.OffsetFetchRequestTopic(name="t", partition_indexes=(i32(0),)),),
        require_stable=require_stable,
    )
    return call(broker, ApiKey.OFFSET_FETCH, 7, request).topics[0].partitions[0]


def test_txn_offset_commit_needs_add_offsets_and_stays_pending(broker: FakeBroker) -> None:
    pid, epoch = init(broker, "tx")
    # Without AddOffsetsToTxn the group's partition is not in a transaction (KIP-890).
    assert txn_commit(broker, "tx", pid, epoch, "g") == ErrorCode.invalid_txn_state
    assert add_offsets(broker, "tx", pid, epoch, "g") == ErrorCode.none
    # KIP-447: a member id the group does not know is refused.
    assert txn_commit(broker, "tx", pid, epoch, "g", member_id="m-1", generation=3) == (
        ErrorCode.unknown_member_id
    )
    assert txn_commit(broker, "tx", pid, epoch, "g") == ErrorCode.none
    # Not committed until the transaction commits; a stable read is told to wait.
    pending = offset_fetch(broker, "g", require_stable=True)
    assert pending.error_code == ErrorCode.unstable_offset_commit
    plain = offset_fetch(broker, "g", require_stable=False)
    assert (plain.error_code, plain.committed_offset) == (ErrorCode.none, -1)
    # The COMMIT marker in the group's __consumer_offsets partition applies them.
    s = broker.group_offsets
    partition = broker.group_offsets.journal.partition_for("g")  # type: ignore[union-attr]
    s.complete_txn(pid, partition, commit=True)
    done = offset_fetch(broker, "g", require_stable=True)
    assert (done.error_code, done.committed_offset) == (ErrorCode.none, 5)


def test_fenced_epochs_by_version(broker: FakeBroker) -> None:
    pid, epoch = init(broker, "old")
    init(broker, "old")  # bumps the epoch: the first producer is fenced
    # AddOffsetsToTxn v2+ answers PRODUCER_FENCED, v0-v1 INVALID_PRODUCER_EPOCH (KIP-588).
    assert add_offsets(broker, "old", pid, epoch, "g") == ErrorCode.producer_fenced
    s = schema(ApiKey.ADD_OFFSETS_TO_TXN, 1)
    request = s.AddOffsetsToTxnRequest(
        transactional_id="old", producer_id=i64(pid), producer_epoch=i16(epoch), group_id="g"
    )
    assert call(broker, ApiKey.ADD_OFFSETS_TO_TXN, 1, request).error_code == (
        ErrorCode.invalid_producer_epoch
    )


def test_add_partitions_v3_refuses_unknown_partitions_whole(broker: FakeBroker) -> None:
    pid, epoch = init(broker, "ap")
    s = schema(ApiKey.ADD_PARTITIONS_TO_TXN, 3)
    request = s.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="ap",
        v3_and_below_producer_id=i64(pid),
        v3_and_below_producer_epoch=i16(epoch),
        v3_and_below_topics=(
            s.AddPartitionsToTxnTopic(name="t", partitions=(i32(0),)),
            s.AddPartitionsToTxnTopic(name="nope", partitions=(i32(0),)),
        ),
    )
    r = call(broker, ApiKey.ADD_PARTITIONS_TO_TXN, 3, request)
    codes = {
        (t.name, p.partition_index): p.partition_error_code
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert codes == {
        ("t", 0): ErrorCode.operation_not_attempted,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }


def test_produce_verification(broker: FakeBroker) -> None:
    """KIP-890: a transactional batch is appended only for a partition of the producer's
    ongoing transaction (the issue's defect: it was appended with NONE)."""
    pid, epoch = init(broker, "v")

    def produce(txn_id: str | None, producer_id: int) -> ErrorCode:
        builder = RecordBatchBuilder(
            producer_id=producer_id, producer_epoch=epoch, base_sequence=0, is_transactional=True
        )
        builder.append(b"x", timestamp=1_700_000_000_000)
        s = schema(ApiKey.PRODUCE, 9)
        request = s.ProduceRequest(
            transactional_id=txn_id,
            acks=i16(1),
            timeout=TIMEOUT,
            topic_data=(
                s.TopicProduceData(
                    name="t",
                    partition_data=(
                        s.PartitionProduceData(index=i32(0), records=bytes(builder.build())),
                    ),
                ),
            ),
        )
        r = call(broker, ApiKey.PRODUCE, 9, request)
        return r.responses[0].partition_responses[0].error_code

    assert produce("unknown", 999_999) == ErrorCode.invalid_producer_id_mapping
    assert produce("v", pid + 1) == ErrorCode.invalid_producer_id_mapping
    assert produce(None, pid) == ErrorCode.transactional_id_authorization_failed
    assert produce("v", pid) == ErrorCode.invalid_txn_state
    partition = broker.replica_manager.partition("t", 0)
    assert partition is not None
    assert partition.log.log_end_offset == 0
    s = schema(ApiKey.ADD_PARTITIONS_TO_TXN, 3)
    request = s.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="v",
        v3_and_below_producer_id=i64(pid),
        v3_and_below_producer_epoch=i16(epoch),
        v3_and_below_topics=(s.AddPartitionsToTxnTopic(name="t", partitions=(i32(0),)),),
    )
    call(broker, ApiKey.ADD_PARTITIONS_TO_TXN, 3, request)
    assert produce("v", pid) == ErrorCode.none
    assert partition.last_stable_offset == 0


def test_produce_verification_by_a_coordinator_on_another_broker(broker: FakeBroker) -> None:
    """In a cluster the transactional id's coordinator may be elsewhere: the leader asks it
    (AddPartitionsToTxn v4 verify_only, ``coordinator.remote``) before appending."""
    coordinator = broker.transaction_coordinator
    txn_id = "elsewhere"
    coordinator.unload(coordinator.partition_for(txn_id))  # another broker leads it now
    asked: list[Any] = []
    answers = {("t", 0): int(ErrorCode.invalid_txn_state)}

    async def remote(txn: str, pid: int, epoch: int, tps: list[Any]) -> dict[Any, int]:
        asked.append((txn, pid, epoch, tuple(tps)))
        return {tp: answers[tp] for tp in tps}

    def produce(seq: int) -> ErrorCode:
        builder = RecordBatchBuilder(
            producer_id=555, producer_epoch=2, base_sequence=seq, is_transactional=True
        )
        builder.append(b"x", timestamp=1_700_000_000_000)
        s = schema(ApiKey.PRODUCE, 9)
        request = s.ProduceRequest(
            transactional_id=txn_id,
            acks=i16(1),
            timeout=TIMEOUT,
            topic_data=(
                s.TopicProduceData(
                    name="t",
                    partition_data=(
                        s.PartitionProduceData(index=i32(0), records=bytes(builder.build())),
                    ),
                ),
            ),
        )
        r = call(broker, ApiKey.PRODUCE, 9, request)
        return r.responses[0].partition_responses[0].error_code

    # Nobody to ask: retriable, nothing appended.
    assert produce(0) == ErrorCode.not_enough_replicas
    coordinator.remote = remote
    assert produce(0) == ErrorCode.invalid_txn_state
    answers[("t", 0)] = 0
    assert produce(0) == ErrorCode.none
    assert asked == [(txn_id, 555, 2, (("t", 0),))] * 2
    # The transaction is open in the partition now: no second question.
    assert produce(1) == ErrorCode.none
    assert len(asked) == 2
