"""Follower truncation by leader epoch (KIP-101, KIP-279) and the leader's diverging-epoch
check (Fetch v12+): the rules as pure functions, then the scenarios of the KIPs with logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import OffsetOutOfRangeError
from core.log.config import LogConfig
from core.log.divergence import (
    UNDEFINED_EPOCH_END_OFFSET,
    EpochEndOffset,
    OffsetTruncationState,
    diverging_epoch,
    follower_truncation_state,
)
from core.log.partition_log import PartitionLog
from core.records.builder import RecordBatchBuilder

from .replicas import catch_up, fetch, log_batches, truncate_by_epoch

UNDEFINED = UNDEFINED_EPOCH_END_OFFSET


# -- the follower's rule ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("leader", "local", "leo", "fallback", "expected"),
    [
        # The leader cannot place the epoch: truncate to the fallback (the high watermark).
        (EpochEndOffset(-1, -1), EpochEndOffset(3, 40), 40, 25, (25, True)),
        (EpochEndOffset(-1, -1), UNDEFINED, 10, 25, (10, True)),  # never above the log end
        # OffsetsForLeaderEpoch v0 answers an offset without an epoch.
        (EpochEndOffset(-1, 30), EpochEndOffset(3, 40), 40, 0, (30, True)),
        (EpochEndOffset(-1, 50), EpochEndOffset(3, 40), 40, 0, (40, True)),
        # The follower tracks no epoch at or below the leader's.
        (EpochEndOffset(2, 30), UNDEFINED, 40, 0, (30, True)),
        # Same epoch: the smaller end wins, bounded by the log end.
        (EpochEndOffset(3, 30), EpochEndOffset(3, 40), 40, 0, (30, True)),
        (EpochEndOffset(3, 50), EpochEndOffset(3, 40), 40, 0, (40, True)),
        (EpochEndOffset(3, 50), EpochEndOffset(3, 45), 40, 0, (40, True)),
        # KIP-279: the follower never had the leader's epoch 3; its largest older epoch (2)
        # ends at 35 locally. Truncate there and ask again.
        (EpochEndOffset(3, 50), EpochEndOffset(2, 35), 40, 0, (35, False)),
        (EpochEndOffset(3, 20), EpochEndOffset(2, 35), 30, 0, (30, False)),
    ],
)
def test_follower_truncation_state(leader, local, leo, fallback, expected):
    state = follower_truncation_state(leader, local, leo, fallback)
    assert state == OffsetTruncationState(*expected)


# -- the leader's check ----------------------------------------------------------------------
def test_a_fetch_on_the_leaders_lineage_is_not_diverging():
    # The follower's last epoch 4 is the leader's, which ends at 100 >= the fetch offset 80.
    assert diverging_epoch(EpochEndOffset(4, 100), 4, 80, 0) is None
    assert diverging_epoch(EpochEndOffset(4, 80), 4, 80, 0) is None


def test_a_fetch_past_the_end_of_the_epoch_on_the_leader_is_diverging():
    assert diverging_epoch(EpochEndOffset(4, 70), 4, 80, 0) == EpochEndOffset(4, 70)


def test_a_fetch_from_an_epoch_the_leader_never_had_is_diverging():
    # The leader's largest epoch <= 5 is 4: the follower's epoch 5 is not on its lineage.
    assert diverging_epoch(EpochEndOffset(4, 100), 5, 80, 0) == EpochEndOffset(4, 100)


def test_a_fetch_without_a_last_fetched_epoch_is_not_checked():
    assert diverging_epoch(UNDEFINED, -1, 10, 20) is None


def test_an_unplaceable_epoch_or_a_fetch_below_the_log_start_is_out_of_range():
    with pytest.raises(OffsetOutOfRangeError):
        diverging_epoch(UNDEFINED, 3, 10, 0)
    with pytest.raises(OffsetOutOfRangeError):
        diverging_epoch(EpochEndOffset(3, 100), 3, 10, 20)


# -- epoch queries on a log -------------------------------------------------------------------
def open_log(tmp_path: Path, name: str) -> PartitionLog:
    return PartitionLog(tmp_path / f"{name}-0", name, 0, LogConfig())


def write(plog: PartitionLog, epoch: int, count: int, tag: bytes) -> None:
    """``count`` one-record batches written by a leader in ``epoch``."""
    for i in range(count):
        plog.append_as_leader(_client_batch(tag + b"%d" % i), epoch)


def _client_batch(value: bytes) -> bytearray:
    builder = RecordBatchBuilder()
    builder.append(value, timestamp=1_700_000_000_000)
    return builder.build()


def become_leader(plog: PartitionLog, epoch: int) -> None:
    """What a new leader does before its first append (Kafka's makeLeader)."""
    plog.leader_epoch_cache.assign(epoch, plog.log_end_offset)


def test_end_offset_for_epoch(tmp_path):
    plog = open_log(tmp_path, "p")
    assert plog.end_offset_for_epoch(0) == UNDEFINED  # empty cache
    assert plog.latest_epoch is None
    write(plog, 1, 5, b"a")  # epoch 1: 0-4
    write(plog, 3, 4, b"b")  # epoch 3: 5-8
    assert plog.latest_epoch == 3
    assert plog.end_offset_for_epoch(3) == (3, 9)  # the latest ends at the log end
    assert plog.end_offset_for_epoch(2) == (1, 5)  # largest epoch <= 2, ends where 3 starts
    assert plog.end_offset_for_epoch(1) == (1, 5)
    assert plog.end_offset_for_epoch(0) == (0, 0)  # below every epoch: the earliest start
    assert plog.end_offset_for_epoch(4) == UNDEFINED  # above the latest
    assert plog.end_offset_for_epoch(-1) == UNDEFINED


# -- KIP-101 and KIP-279 scenarios -------------------------------------------------------------
def test_kip101_scenario_1_hw_truncation_then_election_loses_no_committed_message(tmp_path):
    """A leads epoch 0 and has m1, m2 (HW 2); B fetched both but its HW is still 1 when it
    restarts. Truncating to the HW (before KIP-101) would drop m2 on B, and m2 would be lost
    when B became leader. With epochs, B asks A where epoch 0 ends (2) and keeps m2."""
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    write(a, 0, 2, b"m")
    catch_up(a, b)
    a.update_high_watermark(2)
    b.update_high_watermark(1)
    assert b.truncation_state_for(UNDEFINED).offset == 1  # the old rule: to the HW
    assert truncate_by_epoch(a, b) == 1
    assert b.log_end_offset == 2
    # A dies, B becomes leader in epoch 1; A returns as a follower: nothing diverges.
    become_leader(b, 1)
    assert truncate_by_epoch(b, a) == 1
    assert log_batches(a) == log_batches(b)
    assert a.log_end_offset == 2


def test_kip101_scenario_2_divergence_after_multiple_hard_failures(tmp_path):
    """A leads epoch 0 with m1, m2; B has m1 (HW 1). Both crash; B returns first, leads
    epoch 1 and writes m3 at offset 1. A returns: it must drop m2 (never committed) and take
    m3, so that offset 1 means the same record on both replicas."""
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    write(a, 0, 2, b"m")
    fetch(a, b, max_bytes=1)  # one batch: m1
    assert b.log_end_offset == 1
    become_leader(b, 1)
    write(b, 1, 1, b"n")
    truncate_by_epoch(b, a)
    assert a.log_end_offset == 1  # m2 is gone
    catch_up(b, a)
    assert log_batches(a) == log_batches(b)
    assert a.leader_epoch_cache.entries() == b.leader_epoch_cache.entries()


def test_kip279_fast_leader_failover(tmp_path):
    """A (epoch 0) writes m0, m1, m2; B has m0, m1. B leads epoch 1 and writes n2 at offset
    2, then fails before A fetches; A leads epoch 2 (its m2 stays) and writes m3. B returns.
    Before KIP-279 A answered "epoch 1 ends at 3" without an epoch and B kept n2 at offset 2
    against A's m2; with the epoch in the answer (0, 3), B truncates to where its own epoch
    0 ends (2)."""
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    write(a, 0, 2, b"m")
    catch_up(a, b)
    write(a, 0, 1, b"late")  # m2, not fetched by B
    become_leader(b, 1)
    write(b, 1, 1, b"n")  # n2
    become_leader(a, 2)
    write(a, 2, 1, b"m3")
    answer = a.end_offset_for_epoch(b.latest_epoch)
    assert answer == (0, 3)
    assert follower_truncation_state(EpochEndOffset(-1, 3), UNDEFINED, 3, 0).offset == 3
    assert b.truncation_state_for(answer) == OffsetTruncationState(2, True)
    truncate_by_epoch(a, b)
    catch_up(a, b)
    assert log_batches(a) == log_batches(b)
    assert [(e.epoch, e.start_offset) for e in b.leader_epoch_cache.entries()] == [(0, 0), (2, 3)]


def test_kip279_follower_walks_back_through_epochs_it_does_not_share(tmp_path):
    """Leader epochs 1 (0-5), 3 (6-8), 5 (9-11); the follower shares 0-4 of epoch 1 and then
    led epochs 2 (5-7) and 4 (8-9) itself. The leader answers epoch 4 with (3, 9): the
    follower never had epoch 3 and truncates to where its epoch 2 ends (8), asks again for
    epoch 2, gets (1, 6), and settles on 5, the end of the shared part."""
    leader, follower = open_log(tmp_path, "leader"), open_log(tmp_path, "follower")
    write(leader, 1, 5, b"c")
    catch_up(leader, follower)
    write(leader, 1, 1, b"L")
    write(follower, 2, 3, b"F")
    write(leader, 3, 3, b"L3")
    write(follower, 4, 2, b"F4")
    write(leader, 5, 3, b"L5")
    assert leader.end_offset_for_epoch(4) == (3, 9)
    assert follower.truncation_state_for(EpochEndOffset(3, 9)) == OffsetTruncationState(8, False)
    assert truncate_by_epoch(leader, follower) == 2
    assert follower.log_end_offset == 5
    catch_up(leader, follower)
    assert log_batches(follower) == log_batches(leader)
    assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries()


def test_unclean_election_the_old_leader_gives_up_what_the_new_one_lacks(tmp_path):
    old, new = open_log(tmp_path, "old"), open_log(tmp_path, "new")
    write(old, 0, 10, b"o")
    for _ in range(5):
        fetch(old, new, max_bytes=1)
    become_leader(new, 1)  # unclean: new had only 0-4
    write(new, 1, 2, b"n")
    truncate_by_epoch(new, old)
    assert old.log_end_offset == 5
    catch_up(new, old)
    assert log_batches(old) == log_batches(new)


def test_fetch_with_last_fetched_epoch_detects_and_resolves_divergence(tmp_path):
    """The Fetch v12+ path: the follower fetches at once, naming its last epoch; the leader
    answers a diverging epoch instead of records; the follower truncates and fetches."""
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    write(a, 0, 2, b"m")
    catch_up(a, b)
    write(a, 0, 1, b"late")
    become_leader(b, 1)
    write(b, 1, 1, b"n")
    become_leader(a, 2)
    write(a, 2, 1, b"m3")
    diverging = a.diverging_epoch(b.log_end_offset, b.latest_epoch)
    assert diverging == (0, 3)
    b.truncate_to(b.truncation_state_for(diverging).offset)
    assert a.diverging_epoch(b.log_end_offset, b.latest_epoch) is None
    catch_up(a, b)
    assert log_batches(a) == log_batches(b)
    assert a.diverging_epoch(b.log_end_offset, b.latest_epoch) is None


def test_a_fetch_below_the_leaders_log_start_is_out_of_range(tmp_path):
    a = open_log(tmp_path, "a")
    write(a, 0, 4, b"m")
    a.update_high_watermark(4)
    a.maybe_increment_log_start_offset(3, "test")
    with pytest.raises(OffsetOutOfRangeError):
        a.diverging_epoch(1, 0)
    assert a.diverging_epoch(3, 0) is None
    assert a.diverging_epoch(1, -1) is None  # no last fetched epoch: nothing to check
