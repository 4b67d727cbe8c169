import itertools
import threading
from pathlib import Path

import pytest

from core.errors import CorruptCheckpointError
from core.log.leader_epoch import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
)


@pytest.fixture
def ckpt(tmp_path: Path) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")


@pytest.fixture
def cache(ckpt: LeaderEpochCheckpointFile) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(ckpt)


def make(cache: LeaderEpochFileCache, *pairs: tuple[int, int]) -> LeaderEpochFileCache:
    for epoch, offset in pairs:
        cache.assign(epoch, offset)
    return cache


# -- the checkpoint file ----------------------------------------------------------------------


def test_checkpoint_bytes_are_kafkas_text_layout(ckpt: LeaderEpochCheckpointFile) -> None:
    entries = [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(10, 9_000_000_000)]
    ckpt.write(entries)
    expected = b"0\n3\n0 0\n3 120\n10 9000000000\n"
    assert ckpt.path.read_bytes() == expected
    assert LeaderEpochCheckpointFile.encode(entries) == expected
    assert ckpt.read() == entries
    assert LeaderEpochCheckpointFile.decode(expected) == entries


def test_checkpoint_missing_reads_empty(ckpt: LeaderEpochCheckpointFile) -> None:
    assert ckpt.read() == []


@pytest.mark.parametrize(
    ("content", "line"),
    [(b"0\n1\n0 abc\n", 3), (b"0\n1\n-1 5\n", 3), (b"0\n1\n1 2 3\n", 3)],
)
def test_checkpoint_malformed_line_names_file_and_line(
    ckpt: LeaderEpochCheckpointFile, content: bytes, line: int
) -> None:
    ckpt.path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        ckpt.read()
    assert str(ckpt.path) in str(info.value) and f"line {line}" in str(info.value)


def test_cache_loads_from_checkpoint(ckpt: LeaderEpochCheckpointFile) -> None:
    ckpt.path.write_bytes(b"0\n2\n1 0\n4 50\n")
    assert LeaderEpochFileCache(ckpt).entries() == [EpochEntry(1, 0), EpochEntry(4, 50)]


def test_cache_loading_non_monotonic_checkpoint_applies_assign_rules(
    ckpt: LeaderEpochCheckpointFile,
) -> None:
    # Kafka replays the file through assign: a later entry with a lower start truncates.
    ckpt.path.write_bytes(b"0\n3\n1 0\n2 100\n3 60\n")
    assert LeaderEpochFileCache(ckpt).entries() == [EpochEntry(1, 0), EpochEntry(3, 60)]


# -- assign -------------------------------------------------------------------------------------


def test_assign_new_epoch_appends_and_flushes(cache: LeaderEpochFileCache) -> None:
    assert cache.assign(0, 0)
    assert cache.assign(2, 10)
    assert cache.entries() == [EpochEntry(0, 0), EpochEntry(2, 10)]
    assert cache.checkpoint.path.read_bytes() == b"0\n2\n0 0\n2 10\n"


def test_assign_same_epoch_at_higher_offset_is_ignored_without_flush(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(1, 5)
    cache.checkpoint.path.unlink()
    assert not cache.assign(1, 6)  # every batch of the epoch calls assign
    assert cache.entries() == [EpochEntry(1, 5)]
    assert not cache.checkpoint.path.exists()


def test_assign_same_epoch_at_lower_offset_replaces_entry(cache: LeaderEpochFileCache) -> None:
    make(cache, (0, 0), (1, 20))
    assert cache.assign(1, 15)
    assert cache.entries() == [EpochEntry(0, 0), EpochEntry(1, 15)]


def test_assign_removes_entries_with_epoch_at_or_above_new_epoch(
    cache: LeaderEpochFileCache,
) -> None:
    make(cache, (1, 0), (3, 10), (5, 20))
    cache.assign(4, 30)
    assert cache.entries() == [EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(4, 30)]
    cache.assign(2, 40)
    assert cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 40)]


def test_assign_removes_entries_with_start_offset_at_or_above_new_start(
    cache: LeaderEpochFileCache,
) -> None:
    make(cache, (1, 0), (2, 10), (3, 20))
    cache.assign(6, 10)
    assert cache.entries() == [EpochEntry(1, 0), EpochEntry(6, 10)]
    assert LeaderEpochFileCache(cache.checkpoint).entries() == cache.entries()


def test_assign_rejects_negative_epoch_or_offset(cache: LeaderEpochFileCache) -> None:
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


def test_latest_and_earliest(cache: LeaderEpochFileCache) -> None:
    assert cache.latest_epoch is None and cache.latest_entry is None
    assert cache.earliest_entry is None
    make(cache, (2, 5), (7, 9))
    assert cache.latest_epoch == 7
    assert cache.latest_entry == EpochEntry(7, 9)
    assert cache.earliest_entry == EpochEntry(2, 5)
    assert cache.previous_epoch(7) == 2 and cache.next_epoch(2) == 7
    assert cache.next_epoch(7) is None


# -- epoch_for_offset / end_offset_for ---------------------------------------------------------


def test_epoch_for_offset_is_the_latest_epoch_starting_at_or_below(
    cache: LeaderEpochFileCache,
) -> None:
    make(cache, (1, 10), (3, 20))
    assert cache.epoch_for_offset(9) is None
    assert cache.epoch_for_offset(10) == 1
    assert cache.epoch_for_offset(19) == 1
    assert cache.epoch_for_offset(20) == 3
    assert cache.epoch_for_offset(1000) == 3


@pytest.fixture
def epochs_2_4_6(cache: LeaderEpochFileCache) -> LeaderEpochFileCache:
    return make(cache, (2, 10), (4, 20), (6, 30))


def test_end_offset_for_undefined_epoch_is_undefined(epochs_2_4_6: LeaderEpochFileCache) -> None:
    assert epochs_2_4_6.end_offset_for(-1, 100) == (-1, -1)


def test_end_offset_for_latest_epoch_is_log_end_offset(epochs_2_4_6: LeaderEpochFileCache) -> None:
    assert epochs_2_4_6.end_offset_for(6, 100) == (6, 100)


def test_end_offset_for_cached_epoch_is_start_of_next_epoch(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    assert epochs_2_4_6.end_offset_for(2, 100) == (2, 20)
    assert epochs_2_4_6.end_offset_for(4, 100) == (4, 30)


def test_end_offset_for_uncached_epoch_between_is_floor_epoch_and_next_start(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    assert epochs_2_4_6.end_offset_for(3, 100) == (2, 20)
    assert epochs_2_4_6.end_offset_for(5, 100) == (4, 30)


def test_end_offset_for_epoch_below_earliest_is_requested_epoch_and_earliest_start(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    # Kafka answers with the requested epoch and the first known start offset, so that the
    # follower truncates to the leader's start rather than falling back to its HW.
    assert epochs_2_4_6.end_offset_for(1, 100) == (1, 10)


def test_end_offset_for_epoch_above_latest_is_undefined(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    assert epochs_2_4_6.end_offset_for(7, 100) == (-1, -1)


def test_end_offset_for_on_empty_cache_is_undefined(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(0, 100) == (-1, -1)


# -- truncation -------------------------------------------------------------------------------


def test_truncate_from_end_removes_entries_starting_at_or_after_end(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    epochs_2_4_6.truncate_from_end(20)
    assert epochs_2_4_6.entries() == [EpochEntry(2, 10)]
    assert epochs_2_4_6.checkpoint.read() == [EpochEntry(2, 10)]


def test_truncate_from_end_above_latest_start_keeps_everything(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    epochs_2_4_6.truncate_from_end(31)
    assert len(epochs_2_4_6) == 3


def test_truncate_from_end_with_negative_offset_is_noop(epochs_2_4_6: LeaderEpochFileCache) -> None:
    epochs_2_4_6.truncate_from_end(-1)
    assert len(epochs_2_4_6) == 3


def test_truncate_from_start_moves_owning_epoch_to_new_start(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    epochs_2_4_6.truncate_from_start(25)
    assert epochs_2_4_6.entries() == [EpochEntry(4, 25), EpochEntry(6, 30)]
    assert epochs_2_4_6.checkpoint.read() == epochs_2_4_6.entries()


def test_truncate_from_start_is_exclusive_of_entry_at_that_offset(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    epochs_2_4_6.truncate_from_start(20)
    assert epochs_2_4_6.entries() == [EpochEntry(4, 20), EpochEntry(6, 30)]


def test_truncate_from_start_beyond_all_entries_keeps_latest_epoch(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    epochs_2_4_6.truncate_from_start(100)
    assert epochs_2_4_6.entries() == [EpochEntry(6, 100)]


def test_truncate_from_start_below_earliest_is_noop(epochs_2_4_6: LeaderEpochFileCache) -> None:
    epochs_2_4_6.truncate_from_start(5)
    assert epochs_2_4_6.earliest_entry == EpochEntry(2, 10)


def test_clear_and_flush_writes_empty_checkpoint(epochs_2_4_6: LeaderEpochFileCache) -> None:
    epochs_2_4_6.clear_and_flush()
    assert epochs_2_4_6.entries() == []
    assert epochs_2_4_6.checkpoint.path.read_bytes() == b"0\n0\n"


# -- ranges for tiered storage ----------------------------------------------------------------


def test_entries_for_range_clamps_first_epoch_to_segment_start(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    # A segment holding offsets 15..34 was written by epochs 2, 4 and 6.
    assert epochs_2_4_6.entries_for_range(15, 34) == {2: 15, 4: 20, 6: 30}


def test_entries_for_range_excludes_epoch_starting_after_segment_end(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    assert epochs_2_4_6.entries_for_range(20, 29) == {4: 20}
    assert epochs_2_4_6.entries_for_range(12, 20) == {2: 12, 4: 20}


def test_entries_for_range_leaves_cache_unchanged(epochs_2_4_6: LeaderEpochFileCache) -> None:
    epochs_2_4_6.entries_for_range(25, 26)
    assert len(epochs_2_4_6) == 3


def test_epoch_entries_in_range_without_start_is_checkpoint_truncated_to_segment_end(
    epochs_2_4_6: LeaderEpochFileCache,
) -> None:
    shipped = epochs_2_4_6.epoch_entries_in_range(-1, 30)
    assert LeaderEpochCheckpointFile.encode(shipped) == b"0\n2\n2 10\n4 20\n"


def test_entries_for_range_rejects_inverted_range(epochs_2_4_6: LeaderEpochFileCache) -> None:
    with pytest.raises(ValueError):
        epochs_2_4_6.entries_for_range(10, 9)


def test_concurrent_assign_and_reads_see_monotonic_entries(cache: LeaderEpochFileCache) -> None:
    errors: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            entries = cache.entries()
            for a, b in itertools.pairwise(entries):
                if not (a.epoch < b.epoch and a.start_offset < b.start_offset):
                    errors.append(f"{a} then {b}")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for epoch in range(50):
        cache.assign(epoch, epoch * 10)
    done.set()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache) == 50
