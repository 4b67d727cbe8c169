"""PartitionLog.append_as_follower: batches stored exactly as the leader wrote them."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import (
    CorruptRecordError,
    KafkaStorageError,
    OffsetsOutOfOrderError,
    UnexpectedAppendOffsetError,
    UnsupportedVersionError,
)
from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.log.txn_index import AbortedTxn
from core.records.batch import MAGIC_POS, Compression, RecordBatchHeader, TimestampType
from core.records.builder import RecordBatchBuilder, build_control_batch
from core.records.record import ControlRecordType, decode_records

from .replicas import append_marker, catch_up, fetch, log_batches

TS = 1_700_000_000_000


def open_log(path: Path, name: str = "leader", **config) -> PartitionLog:
    return PartitionLog(path / f"{name}-0", name, 0, LogConfig(**config))


def replicated_batch(
    base_offset: int,
    values: list[bytes | None],
    *,
    epoch: int = 0,
    timestamp: int = TS,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytearray:
    """A batch as a leader stored it: offsets and partition leader epoch assigned."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    for i, value in enumerate(values):
        builder.append(value, key=b"k", timestamp=timestamp + i)
    return builder.build()


def read_values(plog: PartitionLog) -> list[tuple[int, bytes | None]]:
    out = []
    for _, data in log_batches(plog):
        out.extend((r.offset, r.value) for r in decode_records(_header(data)))
    return out


def _header(data: bytes) -> RecordBatchHeader:
    return RecordBatchHeader(data)


def test_follower_copy_of_a_leader_is_identical(tmp_path, batch):
    """Compressed, idempotent and plain batches over several epochs and segments, fetched
    in reads that end inside batches: the follower's log is the leader's, byte for byte,
    with the same epochs and producer state."""
    config = {"segment_bytes": 900, "index_interval_bytes": 200}
    leader = open_log(tmp_path, **config)
    follower = open_log(tmp_path, "follower", **config)
    sequence = 0
    for i in range(40):
        epoch = i // 10
        if i % 3 == 0:
            records = batch(
                [b"v%d" % i] * 3, producer_id=7, producer_epoch=0, base_sequence=sequence
            )
            sequence += 3
        else:
            records = batch([b"x" * 50, None], compression=list(Compression)[i % 5])
        leader.append_as_leader(records, epoch)
    for max_bytes in (100, 333, 1 << 20):  # 100: one batch per fetch (min one message)
        follower.truncate_to(0)
        catch_up(leader, follower, max_bytes)
        assert log_batches(follower) == log_batches(leader)
        assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries()
        assert follower.producer_state.last_entry(7) == leader.producer_state.last_entry(7)
        assert len(follower.segments()) > 1


def test_a_trailing_partial_batch_is_ignored(tmp_path):
    follower = open_log(tmp_path, "follower")
    first = replicated_batch(0, [b"a", b"b"])
    second = replicated_batch(2, [b"c"])
    info = follower.append_as_follower(first + second[:-10])
    assert (info.first_offset, info.last_offset, info.batch_count) == (0, 1, 1)
    assert info.valid_bytes == len(first)
    assert follower.log_end_offset == 2
    nothing = follower.append_as_follower(second[:30])  # not even a header
    assert (nothing.batch_count, nothing.valid_bytes, nothing.first_offset) == (0, 0, 2)
    assert follower.append_as_follower(b"").batch_count == 0
    assert follower.log_end_offset == 2
    follower.append_as_follower(second)
    assert [v for _, v in read_values(follower)] == [b"a", b"b", b"c"]


def test_an_append_overlapping_the_log_is_refused_with_its_offsets(tmp_path):
    follower = open_log(tmp_path, "follower")
    follower.append_as_follower(replicated_batch(0, [b"a", b"b", b"c"]))
    with pytest.raises(UnexpectedAppendOffsetError) as e:
        follower.append_as_follower(replicated_batch(2, [b"c", b"d"]))
    assert (e.value.first_offset, e.value.last_offset, e.value.log_end_offset) == (2, 3, 3)
    assert follower.log_end_offset == 3
    assert [o for o, _ in read_values(follower)] == [0, 1, 2]


def test_an_append_above_the_log_end_is_taken_as_a_gap(tmp_path):
    """A compacted leader log has gaps: fetching offset 3 may return a batch starting at 9."""
    follower = open_log(tmp_path, "follower")
    follower.append_as_follower(replicated_batch(0, [b"a", b"b", b"c"]))
    info = follower.append_as_follower(replicated_batch(9, [b"j"]))
    assert (info.first_offset, follower.log_end_offset) == (9, 10)
    assert follower.read(5, 1000).records.read_bytes()[:8] == (9).to_bytes(8, "big")
    assert read_values(follower) == [(0, b"a"), (1, b"b"), (2, b"c"), (9, b"j")]


def test_a_gap_beyond_the_segment_offset_range_starts_a_segment_at_the_batch(tmp_path):
    follower = open_log(tmp_path, "follower")
    follower.append_as_follower(replicated_batch(0, [b"a"]))
    far = 2**31 + 100  # not representable relative to the segment at 0
    follower.append_as_follower(replicated_batch(far, [b"z"]))
    assert [s.base_offset for s in follower.segments()] == [0, far]
    assert follower.log_end_offset == far + 1
    assert read_values(follower) == [(0, b"a"), (far, b"z")]


def test_offsets_that_do_not_increase_are_refused_and_nothing_is_appended(tmp_path):
    follower = open_log(tmp_path, "follower")
    overlapping = replicated_batch(0, [b"a", b"b"]) + replicated_batch(1, [b"c"])
    with pytest.raises(OffsetsOutOfOrderError):
        follower.append_as_follower(overlapping)
    assert follower.log_end_offset == 0
    assert follower.segments()[0].size == 0


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda b: b.__setitem__(-1, b[-1] ^ 0xFF), CorruptRecordError),  # CRC
        (lambda b: b.__setitem__(MAGIC_POS, 1), UnsupportedVersionError),
        (lambda b: b.__setitem__(slice(8, 12), (10).to_bytes(4, "big")), CorruptRecordError),
    ],
    ids=["crc", "magic", "short-length"],
)
def test_a_bad_batch_anywhere_rejects_the_whole_fetch(tmp_path, mutate, error):
    follower = open_log(tmp_path, "follower")
    good = replicated_batch(0, [b"a"])
    bad = replicated_batch(1, [b"b"])
    mutate(bad)
    with pytest.raises(error):
        follower.append_as_follower(good + bad)
    assert follower.log_end_offset == 0
    assert follower.segments()[0].size == 0


def test_follower_takes_what_a_client_may_not_send(tmp_path):
    """Client rules are the leader's business: a follower stores batches above its own
    max.message.bytes, records without a key on a compacted topic, control batches, and
    sequences the leader accepted (e.g. after the producer's state expired there). A
    restart that recovers the log keeps all of it."""
    follower = open_log(tmp_path, "follower", max_message_bytes=200, cleanup_policy=("compact",))
    big = replicated_batch(0, [b"x" * 500])
    keyless = RecordBatchBuilder(base_offset=1, partition_leader_epoch=0)
    keyless.append(b"no key", key=None, timestamp=TS)
    seq_5 = replicated_batch(2, [b"s"], producer_id=3, producer_epoch=0, base_sequence=5)
    seq_50 = replicated_batch(3, [b"t"], producer_id=3, producer_epoch=0, base_sequence=50)
    abort = build_control_batch(
        ControlRecordType.ABORT, producer_id=3, producer_epoch=0, base_offset=4, timestamp=TS
    )
    follower.append_as_follower(big + keyless.build() + seq_5 + seq_50 + abort)
    assert follower.log_end_offset == 5
    assert follower.producer_state.last_entry(3).last_seq == 50
    before = log_batches(follower)
    for segment in follower.segments():  # a crash: no flush, no snapshot, no clean marker
        segment.log.close()
    reopened = PartitionLog(
        follower.dir, "follower", 0, follower.config, had_clean_shutdown=False, recovery_point=0
    )
    assert log_batches(reopened) == before
    assert reopened.producer_state.last_entry(3).last_seq == 50


def test_leader_epochs_come_from_the_batches(tmp_path):
    follower = open_log(tmp_path, "follower")
    follower.append_as_follower(
        replicated_batch(0, [b"a"], epoch=2)
        + replicated_batch(1, [b"b"], epoch=2)
        + replicated_batch(2, [b"c"], epoch=5)
    )
    info = follower.append_as_follower(replicated_batch(3, [b"d"], epoch=7))
    assert info.last_leader_epoch == 7
    entries = [(e.epoch, e.start_offset) for e in follower.leader_epoch_cache.entries()]
    assert entries == [(2, 0), (5, 2), (7, 3)]
    # Bytes are not patched: the epochs in the log are the leader's.
    assert [_header(b).partition_leader_epoch for _, b in log_batches(follower)] == [2, 2, 5, 7]


def test_transactions_and_markers_follow_the_batches(tmp_path):
    """An ABORT marker completes its transaction and is indexed; a COMMIT is not; an open
    transaction bounds the LSO; recovery from the same files builds the same state."""
    leader = open_log(tmp_path)
    follower = open_log(tmp_path, "follower")

    def txn_batch(pid, seq, values):
        return replicated_batch(
            leader.log_end_offset,
            values,
            epoch=1,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )

    leader.append_as_follower(txn_batch(10, 0, [b"a", b"b"]))  # 0-1, pid 10
    leader.append_as_follower(txn_batch(11, 0, [b"c"]))  # 2, pid 11
    append_marker(leader, ControlRecordType.ABORT, 10, 0, 1)  # 3
    leader.append_as_follower(txn_batch(11, 1, [b"d"]))  # 4
    append_marker(leader, ControlRecordType.COMMIT, 11, 0, 1)  # 5
    leader.append_as_follower(txn_batch(10, 2, [b"e"]))  # 6, pid 10 again: open
    catch_up(leader, follower, max_bytes=80)

    aborted = follower.collect_aborted_txns(0, follower.log_end_offset)
    assert aborted == [AbortedTxn(10, 0, 3, 2)]  # LSO 2: pid 11's transaction was open
    assert aborted == leader.collect_aborted_txns(0, leader.log_end_offset)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.producer_state.first_unstable_offset() == 6
    assert follower.producer_state.last_entry(10).current_txn_first_offset == 6
    assert follower.producer_state.last_entry(11).current_txn_first_offset is None

    for segment in follower.segments():
        segment.log.close()
    recovered = PartitionLog(
        follower.dir,
        "follower",
        0,
        follower.config,
        had_clean_shutdown=False,
        recovery_point=0,
        high_watermark=7,
    )
    assert recovered.collect_aborted_txns(0, 7) == aborted
    assert recovered.producer_state.first_unstable_offset() == 6
    for pid in (10, 11):
        got, want = (
            recovered.producer_state.last_entry(pid),
            follower.producer_state.last_entry(pid),
        )
        assert (got.last_seq, got.current_txn_first_offset) == (
            want.last_seq,
            want.current_txn_first_offset,
        )


def test_an_unreadable_marker_is_refused_before_anything_is_written(tmp_path):
    follower = open_log(tmp_path, "follower")
    builder = RecordBatchBuilder(
        base_offset=1, producer_id=4, producer_epoch=0, is_transactional=True, is_control=True
    )
    builder.append(b"\x00", key=b"\x00\x00\x00\x00", timestamp=TS)  # ABORT key, bad value
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(replicated_batch(0, [b"a"]) + builder.build())
    assert follower.log_end_offset == 0


def test_log_append_time_batches_keep_the_leaders_time(tmp_path, batch):
    leader = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    follower = open_log(tmp_path, "follower", message_timestamp_type="LogAppendTime")
    leader.append_as_leader(batch([b"a"], timestamp=5), 0)
    stored = log_batches(leader)
    fetch(leader, follower)
    assert log_batches(follower) == stored
    assert _header(log_batches(follower)[0][1]).timestamp_type == TimestampType.LOG_APPEND_TIME


def test_rolls_and_index_entries_follow_the_leader_rules(tmp_path):
    """segment.bytes (three 109-byte batches fit in 400) and segment.ms on record
    timestamps (every fifth batch is an hour later) roll follower segments; index entries
    come every index.interval.bytes."""
    follower = open_log(
        tmp_path, "follower", segment_bytes=400, segment_ms=60_000, index_interval_bytes=100
    )
    for offset in range(20):
        ts = TS + (offset // 5) * 3_600_000
        follower.append_as_follower(replicated_batch(offset, [b"y" * 40], timestamp=ts))
    segments = follower.segments()
    assert [s.base_offset for s in segments] == [0, 3, 5, 8, 10, 13, 15, 18]
    assert [s.offset_index.entries for s in segments] == [2, 1, 2, 1, 2, 1, 2, 1]
    assert follower.read(7, 1 << 20).records.read_bytes()[:8] == (7).to_bytes(8, "big")


def test_flush_policy_applies_to_follower_appends(tmp_path):
    follower = open_log(tmp_path, "follower", flush_messages=2)
    follower.append_as_follower(replicated_batch(0, [b"a"]))
    assert follower.recovery_point == 0
    follower.append_as_follower(replicated_batch(1, [b"b"]))
    assert follower.recovery_point == 2  # flush.messages reached: fsynced inline
    follower.inline_flush = False
    follower.append_as_follower(replicated_batch(2, [b"c", b"d"]))
    assert follower.flush_due and follower.recovery_point == 2


def test_a_closed_log_refuses_follower_appends(tmp_path):
    follower = open_log(tmp_path, "follower")
    follower.close()
    with pytest.raises(KafkaStorageError):
        follower.append_as_follower(replicated_batch(0, [b"a"]))
