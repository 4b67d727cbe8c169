from pathlib import Path

import pytest

from core.errors import CorruptCheckpointError
from core.log.checkpoints import OffsetCheckpointFile


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "recovery-point-offset-checkpoint"


def test_write_produces_kafkas_text_layout_sorted(path: Path) -> None:
    OffsetCheckpointFile(path).write({("orders", 12): 100, ("a.b_c-d", 0): 5, ("orders", 2): 0})
    assert path.read_bytes() == b"0\n3\na.b_c-d 0 5\norders 2 0\norders 12 100\n"
    assert not (path.parent / (path.name + ".tmp")).exists()


def test_encode_matches_written_file(path: Path) -> None:
    offsets = {("t", 1): 42}
    OffsetCheckpointFile(path).write(offsets)
    assert OffsetCheckpointFile.encode(offsets) == path.read_bytes() == b"0\n1\nt 1 42\n"


def test_write_of_nothing_is_version_and_zero_count(path: Path) -> None:
    OffsetCheckpointFile(path).write({})
    assert path.read_bytes() == b"0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


def test_read_a_file_as_kafka_writes_it(path: Path) -> None:
    path.write_bytes(b"0\n2\n__consumer_offsets 7 9223372036854775807\nlogs -1 0\n")
    assert OffsetCheckpointFile(path).read() == {
        ("__consumer_offsets", 7): 9223372036854775807,
        ("logs", -1): 0,
    }


def test_round_trip_replaces_previous_content(path: Path) -> None:
    f = OffsetCheckpointFile(path)
    f.write({("a", 0): 1, ("b", 0): 2})
    f.write({("a", 0): 10})
    assert f.read() == {("a", 0): 10}


def test_missing_file_reads_as_empty(path: Path) -> None:
    assert OffsetCheckpointFile(path).read() == {}


@pytest.mark.parametrize("content", [b"", b"0\n"], ids=["empty file", "version line only"])
def test_truncated_header_reads_as_empty_like_kafka(path: Path, content: bytes) -> None:
    path.write_bytes(content)
    assert OffsetCheckpointFile(path).read() == {}


def test_windows_and_old_mac_line_ends_are_lines_like_java_readline(path: Path) -> None:
    path.write_bytes(b"0\r\n2\r\nt 0 1\rt 1 2\r\n")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 1, ("t", 1): 2}


def test_extra_spaces_between_fields_are_accepted_like_java_split(path: Path) -> None:
    path.write_bytes(b"0\n1\nt  \t3   4  \n")
    assert OffsetCheckpointFile(path).read() == {("t", 3): 4}


def test_partition_listed_twice_keeps_last_offset(path: Path) -> None:
    path.write_bytes(b"0\n2\nt 0 1\nt 0 2\n")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 2}


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"0\n1\ntopic 0\n", 3),  # two fields
        (b"0\n1\ntopic 0 1 2\n", 3),  # four fields
        (b"0\n1\ntopic zero 1\n", 3),
        (b"0\n1\ntopic 0 1_000\n", 3),  # Python's int() takes underscores, Java does not
        (b"0\n1\ntopic 2147483648 1\n", 3),  # partition beyond int32
        (b"0\n1\n topic 0 1\n", 3),  # leading space: an empty first field in Java
        (b"0\n2\nt 0 1\n\n", 4),  # a blank line is an entry line
        (b"zero\n0\n", 1),
        (b"0\nmany\n", 2),
    ],
)
def test_malformed_line_error_names_file_and_line(path: Path, content: bytes, line: int) -> None:
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)
    assert f"line {line}" in str(info.value)


def test_count_that_does_not_match_entries_is_corrupt(path: Path) -> None:
    path.write_bytes(b"0\n3\nt 0 1\nt 1 1\n")
    with pytest.raises(CorruptCheckpointError, match="expected 3 entries"):
        OffsetCheckpointFile(path).read()


def test_unknown_version_is_corrupt(path: Path) -> None:
    path.write_bytes(b"1\n0\n")
    with pytest.raises(CorruptCheckpointError, match="unrecognised version 1"):
        OffsetCheckpointFile(path).read()


def test_corrupt_checkpoint_is_a_storage_error_with_kafkas_code(path: Path) -> None:
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert info.value.error_code == 56  # KAFKA_STORAGE_ERROR


def test_topic_with_whitespace_is_refused_and_file_left_intact(path: Path) -> None:
    f = OffsetCheckpointFile(path)
    f.write({("good", 0): 1})
    with pytest.raises(ValueError, match="bad topic"):
        f.write({("bad topic", 0): 2})
    assert f.read() == {("good", 0): 1}
