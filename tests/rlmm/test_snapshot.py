"""rlmm.snapshot: Kafka's committed-offsets file and per-partition snapshot file."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlmm.serde import RemoteLogSegmentMetadataSnapshot, serialize
from rlmm.snapshot import (
    COMMITTED_OFFSETS_FILE_NAME,
    CorruptSnapshotError,
    Snapshot,
    decode_snapshot,
    encode_snapshot,
    read_committed_offsets,
    read_snapshot,
    snapshot_path,
    write_committed_offsets,
    write_snapshot,
)
from tiered.api import RemoteLogSegmentState, RemoteStorageError, TopicIdPartition

TP = TopicIdPartition(uuid.UUID("123e4567-e89b-12d3-a456-426614174000"), "orders", 4)


def segment(n: int, **kw: object) -> RemoteLogSegmentMetadataSnapshot:
    fields: dict[str, object] = {
        "segment_id": uuid.UUID(int=n + 1),
        "start_offset": n * 100,
        "end_offset": n * 100 + 99,
        "max_timestamp_ms": 1_700_000_000_000 + n,
        "broker_id": 1,
        "event_timestamp_ms": 1_700_000_000_500 + n,
        "segment_size_in_bytes": 4096,
        "segment_leader_epochs": {0: n * 100},
        "custom_metadata": None,
        "state": RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        "txn_index_empty": True,
    }
    fields.update(kw)
    return RemoteLogSegmentMetadataSnapshot(**fields)  # type: ignore[arg-type]


SNAPSHOT = Snapshot(
    metadata_partition=19,
    metadata_partition_offset=12345,
    segments=[
        segment(0),
        segment(1, custom_metadata=b"rsm-key", state=RemoteLogSegmentState.COPY_SEGMENT_STARTED),
        segment(2, segment_leader_epochs={3: 200, 5: 250}, txn_index_empty=False),
    ],
)


# -- committed offsets ----------------------------------------------------------------------


def test_committed_offsets_file_is_kafkas_text(tmp_path: Path) -> None:
    path = tmp_path / COMMITTED_OFFSETS_FILE_NAME
    write_committed_offsets(path, {3: 42, 0: 10})
    assert path.read_text() == "0\n0 10\n3 42\n"  # version line, then "<partition> <offset>"
    assert read_committed_offsets(path) == {0: 10, 3: 42}
    assert [p.name for p in tmp_path.iterdir()] == [COMMITTED_OFFSETS_FILE_NAME]  # no temp left


def test_committed_offsets_written_by_kafka_are_read(tmp_path: Path) -> None:
    path = tmp_path / COMMITTED_OFFSETS_FILE_NAME
    path.write_text("0\n7   99\n1 5\n")  # Kafka splits on any whitespace, in any order
    assert read_committed_offsets(path) == {7: 99, 1: 5}


def test_missing_committed_offsets_file_means_nothing_committed(tmp_path: Path) -> None:
    assert read_committed_offsets(tmp_path / COMMITTED_OFFSETS_FILE_NAME) == {}


@pytest.mark.parametrize("text", ["", "1\n0 10\n", "0\n0\n", "0\n0 x\n", "0 10\n", "0\n0 1 2\n"])
def test_damaged_committed_offsets_raise_the_typed_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / COMMITTED_OFFSETS_FILE_NAME
    path.write_text(text)
    with pytest.raises(CorruptSnapshotError):
        read_committed_offsets(path)


# -- snapshot files -------------------------------------------------------------------------


def test_snapshot_lives_where_kafka_puts_it(tmp_path: Path) -> None:
    assert snapshot_path(tmp_path, TP) == tmp_path / "orders-4" / "remote_log_snapshot"


def test_snapshot_round_trips_through_the_file(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, TP)
    write_snapshot(path, SNAPSHOT)
    assert read_snapshot(path) == SNAPSHOT
    assert sorted(p.name for p in path.parent.iterdir()) == ["remote_log_snapshot"]
    restored = [s.to_metadata(TP) for s in SNAPSHOT.segments]
    assert [m.topic_id_partition for m in restored] == [TP] * 3


def test_snapshot_layout_is_kafkas(tmp_path: Path) -> None:
    one = Snapshot(2, 77, [segment(0)])
    entry = serialize(segment(0))
    assert encode_snapshot(one) == (
        bytes.fromhex("0000")  # version int16 = 0
        + bytes.fromhex("00000002")  # metadata partition int32
        + bytes.fromhex("000000000000004d")  # metadata partition offset int64 = 77
        + bytes.fromhex("00000001")  # entry count int32
        + len(entry).to_bytes(4, "big")  # entry length int32
        + entry  # RemoteLogSegmentMetadataSnapshotRecord, RemoteLogMetadataSerde framing
    )
    assert entry[:3] == b"\x01\x03\x00"  # frame version 1, api key 3, version 0


def test_missing_or_empty_snapshot_is_no_snapshot(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, TP)
    assert read_snapshot(path) is None
    path.parent.mkdir()
    path.write_bytes(b"")  # Kafka creates the file empty before its first snapshot
    assert read_snapshot(path) is None


@given(
    st.integers(0, 2**31 - 1),
    st.integers(-1, 2**63 - 1),
    st.lists(st.integers(0, 1000), max_size=5),
)
def test_snapshots_round_trip(partition: int, offset: int, ns: list[int]) -> None:
    snap = Snapshot(partition, offset, [segment(n) for n in ns])
    assert decode_snapshot(encode_snapshot(snap)) == snap


def test_every_truncation_raises_the_typed_error() -> None:
    data = encode_snapshot(SNAPSHOT)
    for n in range(1, len(data)):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(data[:n])


def test_trailing_garbage_and_wrong_count_raise_the_typed_error() -> None:
    data = encode_snapshot(SNAPSHOT)
    with pytest.raises(CorruptSnapshotError, match=r"past the end|truncated"):
        decode_snapshot(data + b"\x00\x01")
    with pytest.raises(CorruptSnapshotError, match="counts 4 entries"):
        decode_snapshot(data[:17] + b"\x04" + data[18:])


@pytest.mark.parametrize(
    ("position", "what"),
    [
        (1, "version"),
        (17, "entry count"),
        (18, "first entry's length"),
        (22, "first entry's frame version"),
        (23, "first entry's api key"),
        (24, "first entry's record version"),
    ],
)
def test_a_flipped_structural_byte_raises_the_typed_error(
    tmp_path: Path, position: int, what: str
) -> None:
    path = snapshot_path(tmp_path, TP)
    write_snapshot(path, SNAPSHOT)
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError) as info:
        read_snapshot(path)
    assert isinstance(info.value, RemoteStorageError), what


def test_any_flipped_byte_raises_only_the_typed_error_or_reads_another_snapshot() -> None:
    # Kafka's format has no checksum: a flip inside a number reads as another number (and a
    # flipped bool byte still reads as true). No other exception may escape to the caller.
    data = encode_snapshot(SNAPSHOT)
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0xFF
        with contextlib.suppress(CorruptSnapshotError):
            assert isinstance(decode_snapshot(bytes(damaged)), Snapshot)


# -- the reader's usual-shape path agrees with rlmm.serde ------------------------------------


def serde_oracle(data: bytes) -> list[object] | None:
    """Each entry decoded by rlmm.serde alone, or None when one of them is refused."""
    from rlmm.serde import MetadataSerdeError, decode

    pos, out = 18, []
    while pos < len(data):
        if len(data) - pos < 4:
            return None
        length = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        pos += 4
        if length < 0 or length > len(data) - pos:
            return None
        try:
            out.append(decode(data[pos : pos + length]).event)
        except MetadataSerdeError:
            return None
        pos += length
    return out


USUAL = Snapshot(
    7,
    99,
    [
        segment(0),
        segment(1, txn_index_empty=False),
        segment(2, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED),
        segment(3, segment_leader_epochs={1: 300, 2: 350}),
        segment(4, custom_metadata=b"k"),
    ],
)


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.sampled_from(list(RemoteLogSegmentState)),
            st.integers(0, 2**31 - 1),
            st.integers(-(2**31), 2**31 - 1),
        ),
        max_size=6,
    )
)
def test_usual_entries_read_as_rlmm_serde_reads_them(
    fields: list[tuple[bool, RemoteLogSegmentState, int, int]],
) -> None:
    from rlmm.snapshot import SnapshotRow, decode_snapshot_rows

    segs = [
        segment(n, txn_index_empty=txn, state=state, segment_leader_epochs={epoch: n * 100},
                segment_size_in_bytes=size)
        for n, (txn, state, epoch, size) in enumerate(fields)
    ]  # fmt: skip
    data = encode_snapshot(Snapshot(1, 2, segs))
    _, _, rows = decode_snapshot_rows(data)
    assert all(type(r) is SnapshotRow for r in rows)  # every one took the usual path
    assert [r.to_snapshot() for r in rows] == serde_oracle(data) == segs


def test_record_version_1_entries_take_the_usual_path() -> None:
    from rlmm.snapshot import SnapshotRow, decode_snapshot_rows

    data = bytearray(encode_snapshot(Snapshot(1, 2, [segment(0)])))
    data[24] = 1  # the record version of the first entry
    (row,) = decode_snapshot_rows(bytes(data))[2]
    assert type(row) is SnapshotRow
    assert [row.to_snapshot()] == serde_oracle(bytes(data))


def test_any_flipped_byte_reads_as_rlmm_serde_reads_it() -> None:
    data = encode_snapshot(USUAL)
    for i in range(18, len(data)):
        for flip in (0x01, 0xFF):
            damaged = bytearray(data)
            damaged[i] ^= flip
            expected = serde_oracle(bytes(damaged))
            try:
                got = list(decode_snapshot(bytes(damaged)).segments)
            except CorruptSnapshotError:
                got = None
            if expected is not None and got is None:
                # The file's entry count can still differ (a length flip): serde alone
                # does not check it.
                assert len(expected) != len(USUAL.segments), i
                continue
            assert got == expected, (i, flip)
