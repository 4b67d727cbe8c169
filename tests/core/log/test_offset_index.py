"""OffsetIndex: Kafka's ``.index`` bytes, lookups, truncation, reopen and crash recovery."""

from __future__ import annotations

import bisect
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import CorruptIndexError, InvalidOffsetError
from core.log.abstract_index import PENDING_BYTES
from core.log.offset_index import OffsetIndex, OffsetPosition

BASE = 1_000


def kafka_bytes(entries: list[tuple[int, int]], base: int = BASE) -> bytes:
    """The file Kafka writes for (offset, position) entries: int32 relative, int32 position."""
    return b"".join(struct.pack(">ii", offset - base, position) for offset, position in entries)


def model_lookup(entries: list[tuple[int, int]], target: int) -> OffsetPosition:
    offsets = [o for o, _ in entries]
    i = bisect.bisect_right(offsets, target) - 1
    return OffsetPosition(BASE, 0) if i < 0 else OffsetPosition(*entries[i])


def fill(index: OffsetIndex, entries: list[tuple[int, int]]) -> None:
    for offset, position in entries:
        index.append(offset, position)


ENTRIES = [(BASE, 0), (BASE + 3, 4_200), (BASE + 70_000, 9_000), (BASE + 2**31 - 1, 2**31 - 1)]


def test_closed_file_is_kafkas_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    index = OffsetIndex(path, BASE, max_index_size=1024)
    fill(index, ENTRIES)
    index.close()
    assert path.read_bytes() == kafka_bytes(ENTRIES)
    assert path.read_bytes()[:16].hex() == "00000000000000000000000300001068"


def test_new_file_is_preallocated_to_whole_entries(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=85)
    assert (tmp_path / "a.index").stat().st_size == 80
    assert (index.entries, index.max_entries, index.size_in_bytes()) == (0, 10, 0)
    assert index.last_offset == BASE
    assert index.lookup(BASE + 5) == OffsetPosition(BASE, 0)


def test_max_index_size_below_one_entry_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max index size"):
        OffsetIndex(tmp_path / "a.index", BASE, max_index_size=7)
    assert not (tmp_path / "a.index").exists()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    gaps=st.lists(st.integers(1, 5_000), max_size=60),
    targets=st.lists(st.integers(BASE - 10, BASE + 400_000), max_size=40),
    truncate_at=st.integers(BASE - 10, BASE + 400_000),
)
def test_lookup_and_truncate_match_a_model(
    tmp_path: Path, gaps: list[int], targets: list[int], truncate_at: int
) -> None:
    path = tmp_path / "h.index"
    path.unlink(missing_ok=True)
    entries, offset = [], BASE - 1
    for i, gap in enumerate(gaps):
        offset += gap
        entries.append((offset, i * 100))
    index = OffsetIndex(path, BASE, max_index_size=4096)
    fill(index, entries)
    for target in [*targets, *(o for o, _ in entries)]:
        assert index.lookup(target) == model_lookup(entries, target)
    index.truncate_to(truncate_at)
    kept = [e for e in entries if e[0] < truncate_at]
    assert index.entries == len(kept)
    assert index.last_offset == (kept[-1][0] if kept else BASE)
    for target in targets:
        assert index.lookup(target) == model_lookup(kept, target)
    index.close()
    assert path.read_bytes() == kafka_bytes(kept)


def test_lookup_in_a_large_index_crosses_the_warm_section(tmp_path: Path) -> None:
    # 5000 entries: more than the 1024 of the warm section, so both search branches run.
    entries = [(BASE + 7 * i, 64 * i) for i in range(5_000)]
    index = OffsetIndex(tmp_path / "big.index", BASE, max_index_size=5_000 * 8)
    fill(index, entries)
    assert index.is_full()
    for target in range(BASE - 3, BASE + 7 * 5_000 + 10, 97):
        assert index.lookup(target) == model_lookup(entries, target)
    assert index.lookup(2**63 - 1) == OffsetPosition(*entries[-1])
    assert index.entry(4_999) == OffsetPosition(*entries[-1])


def test_reopen_after_close_reads_the_trimmed_file(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    index = OffsetIndex(path, BASE, max_index_size=800)
    fill(index, ENTRIES[:3])
    index.close()
    assert path.stat().st_size == 24

    reader = OffsetIndex(path, BASE, writable=False)
    assert reader.entries == 3
    assert reader.lookup(BASE + 69_999) == OffsetPosition(BASE + 3, 4_200)
    with pytest.raises(ValueError, match="read-only"):
        reader.append(BASE + 80_000, 10_000)
    reader.close()
    assert path.stat().st_size == 24  # a read-only index never changes its file

    writer = OffsetIndex(path, BASE, max_index_size=800)
    assert (writer.entries, writer.max_entries, writer.last_offset) == (3, 100, BASE + 70_000)
    assert path.stat().st_size == 800  # re-expanded for appends
    writer.append(BASE + 80_000, 10_000)
    writer.close()
    assert path.read_bytes() == kafka_bytes([*ENTRIES[:3], (BASE + 80_000, 10_000)])


def crash_copy(index: OffsetIndex, tmp_path: Path) -> Path:
    """The file as a crash would leave it: mapped pages written, never trimmed."""
    index.flush()
    copy = tmp_path / "crashed.index"
    shutil.copyfile(index.path, copy)
    return copy


def test_untrimmed_file_after_a_crash_counts_only_real_entries(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=800)
    fill(index, ENTRIES[:3])
    copy = crash_copy(index, tmp_path)
    assert copy.stat().st_size == 800

    reopened = OffsetIndex(copy, BASE, max_index_size=800)
    assert reopened.entries == 3
    assert reopened.last_offset == BASE + 70_000
    reopened.sanity_check()
    reopened.append(BASE + 70_001, 9_500)
    reopened.close()
    assert copy.read_bytes() == kafka_bytes([*ENTRIES[:3], (BASE + 70_001, 9_500)])


def test_crash_after_truncation_does_not_resurrect_dropped_entries(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=800)
    fill(index, [(BASE + 10 * i, 100 * i) for i in range(1, 20)])
    index.truncate_to(BASE + 55)
    copy = crash_copy(index, tmp_path)
    reopened = OffsetIndex(copy, BASE, writable=False)
    assert reopened.entries == 5
    assert reopened.lookup(BASE + 1_000) == OffsetPosition(BASE + 50, 500)


def test_untouched_preallocated_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    path.write_bytes(bytes(800))
    index = OffsetIndex(path, BASE, writable=False)
    assert index.entries == 0
    index.sanity_check()


def test_first_entry_at_the_base_offset_survives_a_crash(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=800)
    fill(index, [(BASE, 0), (BASE + 1, 5_000)])
    reopened = OffsetIndex(crash_copy(index, tmp_path), BASE, writable=False)
    assert [reopened.entry(i) for i in range(reopened.entries)] == [
        OffsetPosition(BASE, 0),
        OffsetPosition(BASE + 1, 5_000),
    ]


def test_full_index_refuses_appends(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=24)
    fill(index, [(BASE + 1, 1), (BASE + 2, 2)])
    assert not index.is_full()
    index.append(BASE + 3, 3)
    assert index.is_full()
    with pytest.raises(InvalidOffsetError, match="full"):
        index.append(BASE + 4, 4)
    assert index.entries == 3


def test_relative_offset_must_fit_an_int32(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=80)
    assert not index.can_append_offset(BASE - 1)
    assert not index.can_append_offset(BASE + 2**31)
    assert index.can_append_offset(BASE + 2**31 - 1)
    with pytest.raises(InvalidOffsetError, match="relative offset"):
        index.append(BASE - 1, 0)
    with pytest.raises(InvalidOffsetError, match="relative offset"):
        index.append(BASE + 2**31, 0)
    index.append(BASE + 2**31 - 1, 0)
    assert index.last_offset == BASE + 2**31 - 1


def test_append_out_of_order_is_refused(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=80)
    index.append(BASE + 10, 100)
    for offset in (BASE + 10, BASE + 9):
        with pytest.raises(InvalidOffsetError, match="not above its last offset"):
            index.append(offset, 200)
    assert (index.entries, index.last_offset) == (1, BASE + 10)


def test_truncate_and_resize(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=80)
    fill(index, [(BASE + 1, 10), (BASE + 2, 20), (BASE + 3, 30)])
    index.truncate_to(BASE + 100)  # beyond the last entry: nothing changes
    assert index.entries == 3
    with pytest.raises(ValueError, match="holds 3 entries"):
        index.resize(16)
    index.trim_to_valid_size()
    assert (index.path.stat().st_size, index.max_entries, index.is_full()) == (24, 3, True)
    assert index.resize(40) is True
    assert index.resize(47) is False  # rounds down to 40, the current size
    index.truncate()
    assert (index.entries, index.last_offset) == (0, BASE)
    assert index.lookup(BASE + 3) == OffsetPosition(BASE, 0)
    index.close()
    assert index.path.read_bytes() == b""
    with pytest.raises(ValueError, match="closed"):
        index.lookup(BASE)


def test_entry_out_of_range(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=80)
    index.append(BASE + 1, 10)
    assert index.entry(0) == OffsetPosition(BASE + 1, 10)
    with pytest.raises(IndexError):
        index.entry(1)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x00\x00\x00\x01\x00\x00\x00\x10\xff\xff", "not a multiple of 8"),
        (struct.pack(">iiii", 5, 0, 3, 10), "non-zero bytes follow"),
        (struct.pack(">ii", -4, 0) + bytes(8), "non-zero bytes follow its 0 valid entries"),
        (bytes(range(256)) * 4, "non-zero bytes follow"),
    ],
)
def test_sanity_check_names_a_garbage_file(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(content)
    for writable in (False, True):
        index = OffsetIndex(path, BASE, max_index_size=80, writable=writable)
        with pytest.raises(CorruptIndexError, match=reason) as error:
            index.sanity_check()
        assert str(path) in str(error.value)
        index.close()


def test_rename_keeps_the_index_working(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=80)
    index.append(BASE + 1, 10)
    index.rename_to(tmp_path / "a.index.deleted")
    assert index.path == tmp_path / "a.index.deleted"
    assert not (tmp_path / "a.index").exists()
    index.append(BASE + 2, 20)
    index.flush()
    assert index.lookup(BASE + 5) == OffsetPosition(BASE + 2, 20)
    index.close()
    assert (tmp_path / "a.index.deleted").read_bytes() == kafka_bytes(
        [(BASE + 1, 10), (BASE + 2, 20)]
    )
    assert index.delete_if_exists() is True
    assert index.delete_if_exists() is False
    assert not (tmp_path / "a.index.deleted").exists()


def test_entries_reach_the_file_a_page_at_a_time_and_on_flush(tmp_path: Path) -> None:
    """New entries are written with pwrite (not through the mapping), a page at a time;
    lookups see them at once, the file once a page is full or the index is flushed."""
    path = tmp_path / "a.index"
    index = OffsetIndex(path, BASE, max_index_size=64 * 1024)
    per_page = PENDING_BYTES // OffsetIndex.ENTRY_SIZE
    entries = [(BASE + 2 * i, 10 * i) for i in range(per_page + 7)]
    fill(index, entries[:5])
    assert index.lookup(BASE + 9) == OffsetPosition(BASE + 8, 40)
    assert path.read_bytes()[:40] == bytes(40)  # not written yet: zeros, as after a crash
    fill(index, entries[5:])
    on_disk = path.read_bytes()
    assert on_disk[:PENDING_BYTES] == kafka_bytes(entries[:per_page])
    assert on_disk[PENDING_BYTES:] == bytes(len(on_disk) - PENDING_BYTES)
    # A crash now keeps the written page: a valid prefix, which recovery extends.
    crashed = tmp_path / "crashed.index"
    shutil.copyfile(path, crashed)
    reopened = OffsetIndex(crashed, BASE, writable=False)
    assert reopened.entries == per_page
    reopened.sanity_check()
    index.flush()
    assert path.read_bytes()[: len(entries) * 8] == kafka_bytes(entries)
    index.close()
    assert path.read_bytes() == kafka_bytes(entries)


def test_truncation_and_trim_with_entries_not_yet_written(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    index = OffsetIndex(path, BASE, max_index_size=800)
    fill(index, ENTRIES[:3])
    index.truncate_to(BASE + 4)
    assert index.entries == 2
    index.append(BASE + 5, 5_000)
    index.trim_to_valid_size()
    assert path.read_bytes() == kafka_bytes([*ENTRIES[:2], (BASE + 5, 5_000)])
