"""TimeIndex: Kafka's ``.timeindex`` bytes, the maybe-append rule, lookups and recovery."""

from __future__ import annotations

import bisect
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import CorruptIndexError, InvalidOffsetError
from core.log.time_index import TimeIndex, TimestampOffset

BASE = 500
T0 = 1_700_000_000_000


def kafka_bytes(entries: list[tuple[int, int]], base: int = BASE) -> bytes:
    """The file Kafka writes for (timestamp, offset) entries: int64 time, int32 relative."""
    return b"".join(struct.pack(">qi", ts, offset - base) for ts, offset in entries)


def model_lookup(entries: list[tuple[int, int]], target: int) -> TimestampOffset:
    i = bisect.bisect_right([ts for ts, _ in entries], target) - 1
    return TimestampOffset(-1, BASE) if i < 0 else TimestampOffset(*entries[i])


def test_closed_file_is_kafkas_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000500.timeindex"
    index = TimeIndex(path, BASE, max_index_size=120)
    entries = [(T0, BASE), (T0 + 1, BASE + 7), (T0 + 9_000, BASE + 2**31 - 1)]
    for ts, offset in entries:
        index.maybe_append(ts, offset)
    index.close()
    assert path.read_bytes() == kafka_bytes(entries)
    assert path.read_bytes()[:12].hex() == "0000018bcfe5680000000000"


def test_new_file_is_preallocated_to_whole_entries(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "a.timeindex", BASE, max_index_size=100)
    assert (tmp_path / "a.timeindex").stat().st_size == 96
    assert (index.entries, index.max_entries) == (0, 8)
    assert index.last_entry == TimestampOffset(-1, BASE)
    assert index.lookup(T0) == TimestampOffset(-1, BASE)


def test_only_a_larger_timestamp_is_appended(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "a.timeindex", BASE, max_index_size=120)
    index.maybe_append(-1, BASE + 1)  # NO_TIMESTAMP: nothing to index
    assert index.entries == 0
    index.maybe_append(T0, BASE + 1)
    index.maybe_append(T0, BASE + 1)  # the entry re-offered at roll: ignored
    index.maybe_append(T0, BASE + 4)  # same time, later offset: still ignored
    assert (index.entries, index.last_entry) == (1, TimestampOffset(T0, BASE + 1))
    with pytest.raises(InvalidOffsetError, match="below its last timestamp"):
        index.maybe_append(T0 - 1, BASE + 5)
    with pytest.raises(InvalidOffsetError, match="below its last offset"):
        index.maybe_append(T0 + 1, BASE)
    index.maybe_append(T0 + 1, BASE + 1)  # an equal offset is allowed
    assert index.entries == 2
    with pytest.raises(InvalidOffsetError, match="relative offset"):
        index.maybe_append(T0 + 2, BASE + 2**31)
    assert index.last_entry == TimestampOffset(T0 + 1, BASE + 1)


def test_empty_index_refuses_an_offset_below_the_base(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "a.timeindex", BASE, max_index_size=120)
    assert not index.can_append_offset(BASE - 1)
    with pytest.raises(InvalidOffsetError, match="relative offset"):
        index.maybe_append(T0, BASE - 1)


def test_full_keeps_one_slot_for_the_roll(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "a.timeindex", BASE, max_index_size=36)  # 3 slots
    index.maybe_append(T0, BASE)
    assert not index.is_full()
    index.maybe_append(T0 + 1, BASE + 1)
    assert index.is_full()
    with pytest.raises(InvalidOffsetError, match="full"):
        index.maybe_append(T0 + 2, BASE + 2)
    index.maybe_append(T0 + 2, BASE + 2, skip_full_check=True)
    assert index.entries == 3
    with pytest.raises(InvalidOffsetError, match="no slot left"):
        index.maybe_append(T0 + 3, BASE + 3, skip_full_check=True)
    index.close()
    assert index.path.read_bytes() == kafka_bytes(
        [(T0, BASE), (T0 + 1, BASE + 1), (T0 + 2, BASE + 2)]
    )


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.integers(1, 1_000), st.integers(0, 50)), max_size=60),
    targets=st.lists(st.integers(T0 - 10, T0 + 70_000), max_size=40),
    truncate_at=st.integers(BASE - 5, BASE + 3_100),
)
def test_lookup_and_truncate_match_a_model(
    tmp_path: Path, steps: list[tuple[int, int]], targets: list[int], truncate_at: int
) -> None:
    path = tmp_path / "h.timeindex"
    path.unlink(missing_ok=True)
    entries, ts, offset = [], T0, BASE
    for ts_gap, offset_gap in steps:  # offsets may repeat; timestamps strictly increase
        ts, offset = ts + ts_gap, offset + offset_gap
        entries.append((ts, offset))
    index = TimeIndex(path, BASE, max_index_size=12 * 64)
    for entry in entries:
        index.maybe_append(*entry)
    for target in [*targets, *(t for t, _ in entries)]:
        assert index.lookup(target) == model_lookup(entries, target)
    index.truncate_to(truncate_at)
    kept = [e for e in entries if e[1] < truncate_at]
    assert index.entries == len(kept)
    assert index.last_entry == (TimestampOffset(*kept[-1]) if kept else TimestampOffset(-1, BASE))
    for target in targets:
        assert index.lookup(target) == model_lookup(kept, target)
    index.close()
    assert path.read_bytes() == kafka_bytes(kept)


def test_lookup_in_a_large_index_crosses_the_warm_section(tmp_path: Path) -> None:
    entries = [(T0 + 3 * i, BASE + 2 * i) for i in range(3_000)]  # warm section: 682
    index = TimeIndex(tmp_path / "big.timeindex", BASE, max_index_size=12 * 3_001)
    for entry in entries:
        index.maybe_append(*entry)
    for target in range(T0 - 2, T0 + 9_010, 41):
        assert index.lookup(target) == model_lookup(entries, target)


def test_reopen_and_crash_recovery(tmp_path: Path) -> None:
    path = tmp_path / "a.timeindex"
    entries = [(T0, BASE), (T0 + 5, BASE + 3), (T0 + 6, BASE + 3)]
    index = TimeIndex(path, BASE, max_index_size=1200)
    for entry in entries:
        index.maybe_append(*entry)
    index.flush()
    crashed = tmp_path / "crashed.timeindex"
    shutil.copyfile(path, crashed)  # preallocated, never trimmed
    index.close()
    assert path.stat().st_size == 36

    for file in (path, crashed):
        reopened = TimeIndex(file, BASE, max_index_size=1200)
        reopened.sanity_check()
        assert reopened.entries == 3
        assert reopened.last_entry == TimestampOffset(T0 + 6, BASE + 3)
        reopened.maybe_append(T0 + 7, BASE + 4)
        reopened.close()
        assert file.read_bytes() == kafka_bytes([*entries, (T0 + 7, BASE + 4)])


def test_entry_torn_across_pages_is_not_counted(tmp_path: Path) -> None:
    # Slot 341 straddles the first 4 KiB page: its timestamp reached disk, its offset did not.
    good = [(T0 + i, BASE + i + 1) for i in range(341)]
    data = bytearray(kafka_bytes(good) + bytes(1200))
    struct.pack_into(">q", data, 341 * 12, T0 + 341)
    path = tmp_path / "a.timeindex"
    path.write_bytes(bytes(data[: 12 * 400]))
    index = TimeIndex(path, BASE, writable=False)
    assert index.entries == 341
    assert index.lookup(T0 + 10_000) == TimestampOffset(T0 + 340, BASE + 341)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (bytes(13), "not a multiple of 12"),
        (struct.pack(">qiqi", T0, 5, T0 - 1, 6), "non-zero bytes follow its 1 valid"),
        (struct.pack(">qi", T0, -1), "non-zero bytes follow its 0 valid"),
    ],
)
def test_sanity_check_names_a_garbage_file(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "00000000000000000500.timeindex"
    path.write_bytes(content)
    index = TimeIndex(path, BASE, max_index_size=120)
    with pytest.raises(CorruptIndexError, match=reason) as error:
        index.sanity_check()
    assert str(path) in str(error.value)


def test_rename_truncate_and_close(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "a.timeindex", BASE, max_index_size=120)
    index.maybe_append(T0, BASE + 1)
    index.rename_to(tmp_path / "a.timeindex.cleaned")
    index.maybe_append(T0 + 1, BASE + 2)
    assert index.entry(1) == TimestampOffset(T0 + 1, BASE + 2)
    index.truncate_to(BASE + 2)
    assert index.last_entry == TimestampOffset(T0, BASE + 1)
    index.close()
    assert not (tmp_path / "a.timeindex").exists()
    assert (tmp_path / "a.timeindex.cleaned").read_bytes() == kafka_bytes([(T0, BASE + 1)])
    with pytest.raises(ValueError, match="closed"):
        index.maybe_append(T0 + 5, BASE + 5)
