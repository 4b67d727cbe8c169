"""ListOffsets -3 (MAX_TIMESTAMP, KIP-734) over the local log.

Kafka since KAFKA-16310 answers the offset of the first record carrying the largest
timestamp, with that timestamp and the leader epoch of its batch; before it, the last offset
of the batch holding it, which is what a time index entry records.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.log.config import LogConfig
from core.log.partition_log import MAX_TIMESTAMP, PartitionLog, TimestampAndOffset
from core.records.builder import RecordBatchBuilder


def batch_at(timestamps: Sequence[int], value: bytes = b"v") -> bytearray:
    """One client batch whose records carry ``timestamps`` in order."""
    builder = RecordBatchBuilder()
    for ts in timestamps:
        builder.append(value, timestamp=ts)
    return builder.build()


def open_log(path: Path, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog(path, "t", 0, config or LogConfig(), **kw)


def max_timestamp(plog: PartitionLog) -> TimestampAndOffset | None:
    return plog.fetch_offset_by_timestamp(MAX_TIMESTAMP)


def test_one_batch_answers_the_record_with_the_largest_timestamp(tmp_path):
    plog = open_log(tmp_path / "t-0")
    assert max_timestamp(plog) is None  # an empty log has none
    plog.append_as_leader(batch_at([100, 400, 200]), leader_epoch=3)
    assert max_timestamp(plog) == TimestampAndOffset(400, 1, 3)


def test_ties_answer_the_first_record_in_log_order(tmp_path):
    # Several segments; the largest timestamp appears in two batches of the second segment
    # and again in a later segment: the first record carrying it wins, as in Kafka (the
    # earliest segment on ties, the first batch reaching the max, its first such record).
    cfg = LogConfig(index_interval_bytes=1)
    plog = open_log(tmp_path / "t-0", cfg)
    pad = b"x" * 60
    plog.append_as_leader(batch_at([10, 700, 20], pad), 1)  # offsets 0-2
    plog.append_as_leader(batch_at([30, 40], pad), 1)  # 3-4
    plog.roll()
    plog.append_as_leader(batch_at([50, 60], pad), 2)  # 5-6
    plog.append_as_leader(batch_at([800, 900, 70, 900], pad), 2)  # 7-10
    plog.append_as_leader(batch_at([900, 80], pad), 2)  # 11-12
    plog.roll()
    plog.append_as_leader(batch_at([5, 900, 6], pad), 4)  # 13-15
    plog.append_as_leader(batch_at([850], pad), 4)  # 16
    assert len(plog.segments()) == 3
    assert max_timestamp(plog) == TimestampAndOffset(900, 8, 2)


def test_compressed_batch_answers_the_record_offset(tmp_path):
    from core.records.batch import Compression

    plog = open_log(tmp_path / "t-0")
    plog.append_as_leader(batch_at([1, 2]), 0)
    builder = RecordBatchBuilder(compression=Compression.GZIP)
    for ts in (300, 100, 500, 200, 400):
        builder.append(b"z" * 100, timestamp=ts)
    plog.append_as_leader(builder.build(), 0)  # offsets 2-6
    assert max_timestamp(plog) == TimestampAndOffset(500, 4, 0)


def test_log_append_time_answers_the_first_record_of_the_latest_batch(tmp_path):
    # Under LogAppendTime every record of a batch carries the batch's append time, so the
    # first record carrying the largest one is the first of the last batch appended
    # (Kafka's ListOffsetsIntegrationTest: the first offset of the batch).
    now = [5_000]
    cfg = LogConfig(message_timestamp_type="LogAppendTime")
    plog = open_log(tmp_path / "t-0", cfg, clock=lambda: now[0])
    plog.append_as_leader(batch_at([100, 400, 200]), 0)  # 0-2 at 5000
    now[0] = 6_000
    plog.append_as_leader(batch_at([900, 300]), 1)  # 3-4 at 6000
    now[0] = 5_500  # a clock stepping back does not move the max
    plog.append_as_leader(batch_at([999]), 1)  # 5 at 5500
    assert max_timestamp(plog) == TimestampAndOffset(6_000, 3, 1)


def _filled(path: Path, cfg: LogConfig) -> PartitionLog:
    plog = open_log(path, cfg)
    pad = b"y" * 80
    for i in range(12):  # several segments; the max is inside the fifth batch
        top = 9_000 if i == 4 else 1_000 + i
        plog.append_as_leader(batch_at([1_000 + i, top, 1_000 - i], pad), 0)
    plog.append_as_leader(batch_at([9_000, 9_000], pad), 1)  # a later tie: not the answer
    assert len(plog.segments()) > 2
    assert max_timestamp(plog) == TimestampAndOffset(9_000, 13, 0)
    return plog


def test_max_timestamp_survives_a_clean_restart(tmp_path):
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=200)
    plog = _filled(tmp_path / "t-0", cfg)
    plog.close()
    again = open_log(tmp_path / "t-0", cfg, had_clean_shutdown=True, recovery_point=39)
    assert max_timestamp(again) == TimestampAndOffset(9_000, 13, 0)


def test_max_timestamp_survives_recovery_rebuilding_the_indexes(tmp_path):
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=200)
    plog = _filled(tmp_path / "t-0", cfg)
    plog.close()
    for index in (tmp_path / "t-0").glob("*.timeindex"):
        index.unlink()
    for index in (tmp_path / "t-0").glob("*.index"):
        index.unlink()
    again = open_log(tmp_path / "t-0", cfg, had_clean_shutdown=False, recovery_point=0)
    assert max_timestamp(again) == TimestampAndOffset(9_000, 13, 0)


def test_truncation_below_the_max_answers_the_next_largest(tmp_path):
    plog = open_log(tmp_path / "t-0")
    plog.append_as_leader(batch_at([100, 300, 200]), 0)  # 0-2
    plog.append_as_leader(batch_at([150, 700]), 1)  # 3-4
    assert max_timestamp(plog) == TimestampAndOffset(700, 4, 1)
    plog.truncate_to(3)
    assert max_timestamp(plog) == TimestampAndOffset(300, 1, 0)
