import struct
from pathlib import Path

import crc32c
import pytest

from core.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from core.log.producer_state import (
    CompletedTxn,
    ProducerSnapshotEntry,
    ProducerStateManager,
    delete_snapshot_files,
    read_snapshot,
)
from core.records.batch import CRC_POS, HEADER, RecordBatchHeader, compute_crc

INT32_MAX = 2**31 - 1
PID = 1000

# -- batch fixtures: headers packed by hand, independent of the record builder ------------------


def marker_record(control_type: int, coordinator_epoch: int) -> bytes:
    """One control record, byte by byte (Kafka's DefaultRecord + EndTransactionMarker)."""
    return (
        b"\x20"  # length 16, zigzag varint
        b"\x00"  # attributes
        b"\x00"  # timestampDelta 0
        b"\x00"  # offsetDelta 0
        b"\x08"  # keyLength 4
        + struct.pack(">hh", 0, control_type)  # key: version 0, type
        + b"\x0c"  # valueLength 6
        + struct.pack(">hi", 0, coordinator_epoch)  # value: version 0, coordinator epoch
        + b"\x00"  # no headers
    )


def batch(
    base_offset: int = 0,
    *,
    seq: int = 0,
    count: int = 1,
    pid: int = PID,
    epoch: int = 0,
    txn: bool = False,
    ts: int = 1_000,
    log_append_time: bool = False,
    marker: tuple[int, int] | None = None,
) -> RecordBatchHeader:
    attributes = (0x10 if txn else 0) | (0x08 if log_append_time else 0)
    records = b""
    if marker is not None:
        attributes |= 0x30  # control + transactional
        records, count, seq = marker_record(*marker), 1, -1
    length = HEADER.size - 12 + len(records)
    buf = bytearray(
        HEADER.pack(
            base_offset, length, 0, 2, 0, attributes, count - 1, ts, ts, pid, epoch, seq, count
        )
    )
    buf += records
    struct.pack_into(">I", buf, CRC_POS, compute_crc(buf, 0, len(buf)))
    header = RecordBatchHeader(buf)
    header.validate()
    return header


ABORT, COMMIT = 0, 1


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


def append(psm: ProducerStateManager, header: RecordBatchHeader) -> CompletedTxn | None:
    """What the leader does: check, then apply."""
    assert psm.check_append(header) is None
    return psm.update(header, append_time_ms=5_000)


def append_run(psm: ProducerStateManager, n: int, size: int = 2, epoch: int = 0) -> None:
    """``n`` in-order batches of ``size`` records at offsets 0, size, 2*size, ..."""
    for i in range(n):
        append(psm, batch(i * size, seq=i * size, count=size, epoch=epoch))


# -- sequence rules -----------------------------------------------------------------------------


def test_in_order_batches_are_accepted_and_tracked(psm: ProducerStateManager) -> None:
    append_run(psm, 3)
    entry = psm.active_producers[PID]
    assert (entry.producer_epoch, entry.last_seq, entry.last_data_offset) == (0, 5, 5)
    assert psm.map_end_offset == 6


@pytest.mark.parametrize("age", range(5))
def test_duplicate_of_each_of_last_five_batches_returns_original_offsets(
    psm: ProducerStateManager, age: int
) -> None:
    append_run(psm, 7)  # batches at offsets 0,2,...,12; the last five start at 4..12
    i = 6 - age
    retry = batch(999, seq=i * 2, count=2)
    dup = psm.check_append(retry)
    assert dup is not None
    assert (dup.first_offset, dup.last_offset) == (i * 2, i * 2 + 1)
    assert (dup.first_seq, dup.last_seq) == (i * 2, i * 2 + 1)


def test_duplicate_older_than_five_batches_is_out_of_order(psm: ProducerStateManager) -> None:
    append_run(psm, 7)
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_append(batch(999, seq=2 * 1, count=2))  # the sixth newest


def test_same_first_sequence_different_length_is_not_a_duplicate(
    psm: ProducerStateManager,
) -> None:
    append_run(psm, 2)
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_append(batch(999, seq=2, count=3))


def test_sequence_gap_is_out_of_order(psm: ProducerStateManager) -> None:
    append_run(psm, 1)  # last seq 1
    with pytest.raises(OutOfOrderSequenceError) as info:
        psm.check_append(batch(2, seq=3))
    assert info.value.error_code == 45


def test_older_epoch_is_fenced(psm: ProducerStateManager) -> None:
    append_run(psm, 1, epoch=3)
    with pytest.raises(InvalidProducerEpochError) as info:
        psm.check_append(batch(2, seq=2, epoch=2))
    assert info.value.error_code == 47


def test_new_epoch_must_start_at_sequence_zero(psm: ProducerStateManager) -> None:
    append_run(psm, 1, epoch=0)
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_append(batch(2, seq=2, epoch=1))
    assert psm.check_append(batch(2, seq=0, epoch=1)) is None


def test_new_epoch_forgets_old_batches_for_duplicate_detection(psm: ProducerStateManager) -> None:
    append(psm, batch(0, seq=0, epoch=0))
    append(psm, batch(1, seq=0, epoch=1))
    assert psm.active_producers[PID].batches[-1].last_offset == 1
    assert len(psm.active_producers[PID].batches) == 1
    with pytest.raises(InvalidProducerEpochError):
        psm.check_append(batch(5, seq=0, epoch=0))


def test_unknown_producer_may_start_at_any_sequence(psm: ProducerStateManager) -> None:
    # Kafka since KIP-360: state may be gone after retention, so the broker accepts.
    assert psm.check_append(batch(0, seq=1234, epoch=5)) is None


def test_sequence_wraps_from_int32_max_to_zero(psm: ProducerStateManager) -> None:
    append(psm, batch(0, seq=INT32_MAX - 1, count=2))  # last seq INT32_MAX
    assert psm.active_producers[PID].last_seq == INT32_MAX
    with pytest.raises(OutOfOrderSequenceError):
        psm.check_append(batch(2, seq=1))  # 0 must follow MAX
    append(psm, batch(2, seq=0, count=3))
    assert psm.active_producers[PID].last_seq == 2


def test_batch_spanning_the_wrap_is_duplicate_checked_by_its_range(
    psm: ProducerStateManager,
) -> None:
    append(psm, batch(0, seq=INT32_MAX - 1, count=4))  # sequences MAX-1, MAX, 0, 1
    dup = psm.check_append(batch(50, seq=INT32_MAX - 1, count=4))
    assert dup is not None and (dup.first_offset, dup.last_offset) == (0, 3)
    assert psm.check_append(batch(4, seq=2)) is None


def test_batch_without_producer_id_passes_and_moves_map_end(psm: ProducerStateManager) -> None:
    plain = batch(10, pid=-1, epoch=-1, seq=-1, count=4)
    assert psm.check_append(plain) is None
    assert psm.update(plain, append_time_ms=0) is None
    assert psm.map_end_offset == 14 and not psm.active_producers


def test_update_does_not_validate_replayed_batches(psm: ProducerStateManager) -> None:
    psm.update(batch(0, seq=0, epoch=2), append_time_ms=0)
    psm.update(batch(1, seq=77, epoch=1), append_time_ms=0)  # would be fenced on the leader
    assert psm.active_producers[PID].producer_epoch == 1


def test_log_append_time_batch_records_broker_time(psm: ProducerStateManager) -> None:
    psm.update(batch(0, ts=1, log_append_time=True), append_time_ms=777)
    assert psm.active_producers[PID].last_timestamp == 777
    psm.update(batch(1, seq=1, ts=5), append_time_ms=777)
    assert psm.active_producers[PID].last_timestamp == 5


def test_active_producers_is_a_read_only_copy(psm: ProducerStateManager) -> None:
    append_run(psm, 1)
    view = psm.active_producers
    with pytest.raises(TypeError):
        view[1] = view[PID]  # type: ignore[index]
    append(psm, batch(2, pid=PID + 1))
    assert PID + 1 not in view


# -- transactions ---------------------------------------------------------------------------------


def test_transaction_bounds_first_unstable_offset_until_marker_below_hw(
    psm: ProducerStateManager,
) -> None:
    assert psm.first_unstable_offset() is None
    append(psm, batch(10, seq=0, count=2, txn=True))
    append(psm, batch(12, seq=2, count=2, txn=True))
    assert psm.first_unstable_offset() == 10
    completed = psm.update(batch(14, marker=(ABORT, 3)), append_time_ms=0)
    assert completed == CompletedTxn(PID, 10, 14, is_aborted=True, last_stable_offset=15)
    assert psm.first_undecided_offset() is None
    assert psm.first_unstable_offset() == 10  # the marker is not replicated yet
    psm.on_high_watermark_updated(14)
    assert psm.first_unstable_offset() == 10
    psm.on_high_watermark_updated(15)
    assert psm.first_unstable_offset() is None
    entry = psm.active_producers[PID]
    assert entry.coordinator_epoch == 3 and entry.current_txn_first_offset is None


def test_commit_marker_completes_without_abort(psm: ProducerStateManager) -> None:
    append(psm, batch(0, txn=True))
    completed = psm.update(batch(1, marker=(COMMIT, 0)), append_time_ms=0)
    assert completed is not None and not completed.is_aborted
    assert psm.last_stable_offset(completed) == 2


def test_last_stable_offset_stops_at_other_producers_open_transaction(
    psm: ProducerStateManager,
) -> None:
    append(psm, batch(0, txn=True))
    append(psm, batch(1, pid=7, txn=True))
    completed = psm.update(batch(2, marker=(ABORT, 0)), append_time_ms=0)
    assert completed is not None and completed.last_stable_offset == 1
    assert psm.first_undecided_offset() == 1


def test_marker_without_open_transaction_completes_nothing(psm: ProducerStateManager) -> None:
    assert psm.update(batch(0, marker=(COMMIT, 9)), append_time_ms=0) is None
    assert psm.active_producers[PID].coordinator_epoch == 9


def test_non_transactional_batch_during_open_transaction_is_refused(
    psm: ProducerStateManager,
) -> None:
    append(psm, batch(0, seq=0, txn=True))
    with pytest.raises(InvalidTxnStateError):
        psm.check_append(batch(1, seq=1, txn=False))


def test_control_batch_in_check_append_is_a_programming_error(psm: ProducerStateManager) -> None:
    with pytest.raises(ValueError):
        psm.check_append(batch(0, marker=(COMMIT, 0)))


# -- snapshot format ------------------------------------------------------------------------------


def test_empty_snapshot_bytes(psm: ProducerStateManager) -> None:
    psm.update_map_end_offset(5)
    path = psm.take_snapshot()
    assert path is not None and path.name == "00000000000000000005.snapshot"
    # version 1, CRC-32C of the four zero bytes of the count, count 0
    assert path.read_bytes() == bytes.fromhex("0001 48674bc7 00000000")


def test_snapshot_bytes_match_kafka_schema(psm: ProducerStateManager) -> None:
    append(psm, batch(40, seq=7, count=3, epoch=2, ts=123456, txn=True))
    psm.update(batch(43, pid=5, epoch=1, marker=(COMMIT, 4)), append_time_ms=0)
    path = psm.take_snapshot()
    assert path is not None and path.name == "00000000000000000044.snapshot"
    body = struct.pack(">i", 2)
    # producer 5: only a marker, so no batch: last seq -1, last offset -1, delta 0
    body += struct.pack(">qhiqiqiq", 5, 1, -1, -1, 0, 1000, 4, -1)
    body += struct.pack(">qhiqiqiq", PID, 2, 9, 42, 2, 123456, -1, 40)
    expected = struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    assert path.read_bytes() == expected
    assert read_snapshot(path) == [
        ProducerSnapshotEntry(5, 1, -1, -1, 0, 1000, 4, -1),
        ProducerSnapshotEntry(PID, 2, 9, 42, 2, 123456, -1, 40),
    ]


def test_read_snapshot_rejects_bad_crc_naming_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000001.snapshot"
    data = bytearray(bytes.fromhex("0001 48674bc7 00000000"))
    data[-1] = 1
    path.write_bytes(data)
    with pytest.raises(CorruptSnapshotError) as info:
        read_snapshot(path)
    assert str(path) in str(info.value) and "CRC" in str(info.value)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x01\x00", bytes.fromhex("0002 48674bc7 00000000")],
    ids=["empty", "truncated header", "version 2"],
)
def test_read_snapshot_rejects_malformed(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "00000000000000000001.snapshot"
    path.write_bytes(data)
    with pytest.raises(CorruptSnapshotError, match=str(path)):
        read_snapshot(path)


def test_read_snapshot_rejects_count_not_matching_length(tmp_path: Path) -> None:
    body = struct.pack(">i", 2) + struct.pack(">qhiqiqiq", 1, 0, 0, 0, 0, 0, -1, -1)
    path = tmp_path / "00000000000000000001.snapshot"
    path.write_bytes(struct.pack(">hI", 1, crc32c.crc32c(body)) + body)
    with pytest.raises(CorruptSnapshotError, match="producer count 2"):
        read_snapshot(path)


# -- snapshots and loading ------------------------------------------------------------------------


def test_snapshot_round_trip_restores_state_and_last_batch_duplicate(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    append_run(psm, 3)
    append(psm, batch(6, pid=7, txn=True))
    psm.take_snapshot()
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load(0, 7) == 7
    assert reloaded.map_end_offset == 7
    entry = reloaded.active_producers[PID]
    assert (entry.last_seq, entry.last_data_offset) == (5, 5)
    dup = reloaded.check_append(batch(99, seq=4, count=2))
    assert dup is not None and dup.first_offset == 4
    # only the last batch survives a snapshot, as in Kafka
    with pytest.raises(OutOfOrderSequenceError):
        reloaded.check_append(batch(99, seq=2, count=2))
    assert reloaded.first_unstable_offset() == 6
    completed = reloaded.update(batch(7, pid=7, marker=(ABORT, 0)), append_time_ms=0)
    assert completed is not None and completed.first_offset == 6


def test_take_snapshot_skips_when_nothing_new(psm: ProducerStateManager) -> None:
    append_run(psm, 1)
    assert psm.take_snapshot() is not None
    assert psm.take_snapshot() is None
    assert psm.latest_snapshot_offset() == 2


def test_take_snapshot_at_higher_offset_advances_map_end(psm: ProducerStateManager) -> None:
    append_run(psm, 1)
    path = psm.take_snapshot(10)
    assert path == psm.snapshot_file(10)
    assert psm.map_end_offset == 10
    with pytest.raises(ValueError):
        psm.take_snapshot(5)


def snapshots_at(tmp_path: Path, *offsets: int) -> None:
    psm = ProducerStateManager(tmp_path)
    for at in offsets:
        psm.update(batch(at - 1, seq=at - 1), append_time_ms=0)
        psm.take_snapshot()


def test_load_falls_back_from_corrupt_snapshot_and_deletes_it(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10, 20)
    newest = tmp_path / "00000000000000000020.snapshot"
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(data)
    psm = ProducerStateManager(tmp_path)
    assert psm.load(0, 30) == 10
    assert not newest.exists()
    assert psm.active_producers[PID].last_data_offset == 9
    assert psm.latest_snapshot_offset() == 10


def test_load_with_every_snapshot_corrupt_replays_from_log_start(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10)
    (tmp_path / "00000000000000000010.snapshot").write_bytes(b"junk")
    psm = ProducerStateManager(tmp_path)
    assert psm.load(3, 30) == 3
    assert not psm.active_producers and psm.latest_snapshot_offset() is None


def test_load_drops_snapshots_above_log_end(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10, 20)
    psm = ProducerStateManager(tmp_path)
    assert psm.load(0, 15) == 10
    assert not (tmp_path / "00000000000000000020.snapshot").exists()
    assert psm.snapshot_file(10) is not None


def test_load_drops_snapshots_at_or_below_log_start_like_kafka(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10, 20)
    psm = ProducerStateManager(tmp_path)
    assert psm.load(20, 25) == 20
    assert not psm.active_producers
    assert psm.oldest_snapshot_offset() is None


def test_load_skips_expired_producers(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=100)
    append(psm, batch(0, ts=1_000))
    append(psm, batch(1, pid=8, ts=1_050))
    psm.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, producer_id_expiration_ms=100)
    reloaded.load(0, 2, now_ms=1_120)
    assert set(reloaded.active_producers) == {8}


def test_remove_expired_producers_keeps_open_transactions(psm: ProducerStateManager) -> None:
    psm = ProducerStateManager(psm.partition_dir, producer_id_expiration_ms=100)
    append(psm, batch(0, ts=1_000))
    append(psm, batch(1, pid=8, ts=1_000, txn=True))
    assert psm.remove_expired_producers(1_099) == []
    assert psm.remove_expired_producers(1_100) == [PID]
    assert set(psm.active_producers) == {8}


def test_forget_snapshots_below_is_exclusive(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10, 20, 30)
    psm = ProducerStateManager(tmp_path)
    delete_snapshot_files(psm.forget_snapshots_below(20))
    assert psm.oldest_snapshot_offset() == 20 and psm.latest_snapshot_offset() == 30
    assert not (tmp_path / "00000000000000000010.snapshot").exists()


def test_truncate_fully_deletes_snapshots_and_restarts(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10, 20)
    psm = ProducerStateManager(tmp_path)
    psm.load(0, 20)
    psm.truncate_fully_and_start_at(500)
    assert not psm.active_producers and psm.map_end_offset == 500
    assert not list(tmp_path.glob("*.snapshot"))
    assert psm.check_append(batch(500, seq=42)) is None


def test_truncate_and_reload_below_map_end_reloads_from_snapshot(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10, 20)
    psm = ProducerStateManager(tmp_path)
    psm.load(0, 20)
    append(psm, batch(20, seq=20))
    assert psm.truncate_and_reload(0, 15) == 10
    assert psm.active_producers[PID].last_seq == 9
    assert psm.snapshot_file(20) is None


def test_truncate_and_reload_at_map_end_only_moves_log_start(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10)
    psm = ProducerStateManager(tmp_path)
    psm.load(0, 10)
    append(psm, batch(10, seq=10))
    assert psm.truncate_and_reload(5, 11) == 11
    assert psm.active_producers[PID].last_seq == 10


def test_remove_stray_snapshots_keeps_newest_above_segments(tmp_path: Path) -> None:
    snapshots_at(tmp_path, 10, 15, 20, 40)
    psm = ProducerStateManager(tmp_path)
    psm.remove_stray_snapshots([0, 20, 30])
    assert sorted(p.name[:20] for p in tmp_path.glob("*.snapshot")) == [
        "00000000000000000020",
        "00000000000000000040",
    ]
