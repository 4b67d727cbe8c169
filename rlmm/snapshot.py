"""Fast restart: the committed-offsets file and per-partition metadata snapshots.

Both formats are Kafka's (``CommittedOffsetsFile`` and ``RemoteLogMetadataSnapshotFile`` of
the topic-based RLMM, which later Kafka releases dropped in favour of replaying the topic).

Committed offsets, ``<rlmm dir>/_rlmm_committed_offsets``, UTF-8 text::

    0                      the format version, alone on the first line
    <partition> <offset>   one line per metadata partition (split on whitespace)

Snapshot of one user partition, ``<rlmm dir>/<topic>-<partition>/remote_log_snapshot``::

    version                    int16   0
    metadata partition         int32   the __remote_log_metadata partition it was read from
    metadata partition offset  int64   the offset of the last event it includes
    entry count                int32
    entries, each:
        length                 int32   of the bytes that follow
        bytes                          a RemoteLogSegmentMetadataSnapshotRecord (api key 3)
                                       in RemoteLogMetadataSerde framing (see rlmm.serde)

Big-endian, no checksum (Kafka has none, and a trailer would break Kafka's reader, which
reads entries up to the end of the file). Damage is found by the lengths and the count
(truncation, trailing garbage), and by each entry's strict decoding (frame version, api key,
record version, field lengths, states); a flipped bit inside a number goes unnoticed. KIP-405
as written also put the topic name and id in the file; Kafka's file carries neither (the
directory names the partition), and neither do we.

Partitions being deleted get no snapshot (as in Kafka); their state is replayed.
Writes are atomic: temp file, fsync, rename, fsync of the directory (core.fs.atomic_write).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.fs import atomic_write
from rlmm.serde import (
    SEGMENT_METADATA_SNAPSHOT_API_KEY,
    MetadataSerdeError,
    RemoteLogSegmentMetadataSnapshot,
    decode,
    serialize,
)
from tiered.api import TopicIdPartition

COMMITTED_OFFSETS_FILE_NAME = "_rlmm_committed_offsets"
COMMITTED_OFFSETS_VERSION = 0
SNAPSHOT_FILE_NAME = "remote_log_snapshot"
SNAPSHOT_VERSION = 0

_HEADER = struct.Struct(">hiqi")  # version, metadata partition, its offset, entry count
_LENGTH = struct.Struct(">i")


class CorruptSnapshotError(MetadataSerdeError):
    """A snapshot or committed-offsets file that cannot be trusted.

    The caller discards the file and replays ``__remote_log_metadata`` from the beginning.
    """


# -- committed offsets ----------------------------------------------------------------------


def encode_committed_offsets(offsets: Mapping[int, int]) -> bytes:
    lines = [str(COMMITTED_OFFSETS_VERSION)]
    lines += [f"{partition} {offset}" for partition, offset in sorted(offsets.items())]
    return ("\n".join(lines) + "\n").encode("utf-8")


def decode_committed_offsets(data: bytes) -> dict[int, int]:
    """Parse the file's bytes.

    Raises:
        CorruptSnapshotError: no version line, another version, or a malformed line.
    """
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise CorruptSnapshotError("committed offsets file is not UTF-8 text") from e
    if not lines or not lines[0]:
        raise CorruptSnapshotError("committed offsets file has no version header")
    if lines[0].strip() != str(COMMITTED_OFFSETS_VERSION):
        raise CorruptSnapshotError(f"committed offsets file has invalid version {lines[0]!r}")
    offsets: dict[int, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split()
        try:
            partition, offset = (int(f) for f in fields)
        except ValueError as e:  # wrong field count, or not integers
            raise CorruptSnapshotError(
                f"committed offsets file line {number} is not '<partition> <offset>': {line!r}"
            ) from e
        offsets[partition] = offset
    return offsets


def write_committed_offsets(path: str | os.PathLike[str], offsets: Mapping[int, int]) -> None:
    """Replace the file atomically with ``offsets`` (metadata partition -> offset).

    Raises:
        OSError: the write failed; the previous file is unchanged.
    """
    atomic_write(path, encode_committed_offsets(offsets))


def read_committed_offsets(path: str | os.PathLike[str]) -> dict[int, int]:
    """The committed offsets, or an empty dict when the file does not exist.

    Raises:
        CorruptSnapshotError: the file is damaged (see ``decode_committed_offsets``).
        OSError: the file exists but cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return {}
    return decode_committed_offsets(data)


# -- snapshots ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A user partition's segments as of ``metadata_partition_offset`` (inclusive)."""

    metadata_partition: int
    metadata_partition_offset: int
    segments: Sequence[RemoteLogSegmentMetadataSnapshot]
    version: int = SNAPSHOT_VERSION

    def __post_init__(self) -> None:
        if self.version != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported snapshot version {self.version}")
        object.__setattr__(self, "segments", tuple(self.segments))


def partition_dir_name(topic_id_partition: TopicIdPartition) -> str:
    """``<topic>-<partition>``: the directory Kafka keeps a partition's snapshot in."""
    return f"{topic_id_partition.topic}-{topic_id_partition.partition}"


def snapshot_path(rlmm_dir: str | os.PathLike[str], topic_id_partition: TopicIdPartition) -> Path:
    return Path(rlmm_dir) / partition_dir_name(topic_id_partition) / SNAPSHOT_FILE_NAME


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """The file's bytes.

    Raises:
        MetadataSerdeError: a value does not fit its Kafka type.
    """
    try:
        header = _HEADER.pack(
            snapshot.version,
            snapshot.metadata_partition,
            snapshot.metadata_partition_offset,
            len(snapshot.segments),
        )
    except struct.error as e:
        raise MetadataSerdeError(f"snapshot header out of range: {e}") from e
    out = bytearray(header)
    for segment in snapshot.segments:
        entry = serialize(segment)
        out += _LENGTH.pack(len(entry))
        out += entry
    return bytes(out)


def decode_snapshot(data: bytes | bytearray | memoryview) -> Snapshot:
    """Parse a snapshot file's bytes.

    Raises:
        CorruptSnapshotError: a short header, another version, an entry length running past
            the end, an entry that is not a valid segment snapshot record, or an entry
            count that differs from the header's.
    """
    view = memoryview(data)
    if len(view) < _HEADER.size:
        raise CorruptSnapshotError(
            f"snapshot is {len(view)} bytes, shorter than its {_HEADER.size}-byte header"
        )
    version, partition, offset, count = _HEADER.unpack_from(view, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot has unsupported version {version}")
    if partition < 0 or offset < -1 or count < 0:
        raise CorruptSnapshotError(
            f"snapshot header is invalid: partition {partition}, offset {offset}, count {count}"
        )
    pos = _HEADER.size
    segments: list[RemoteLogSegmentMetadataSnapshot] = []
    while pos < len(view):
        if len(view) - pos < _LENGTH.size:
            raise CorruptSnapshotError(f"snapshot entry {len(segments)}: truncated length")
        (length,) = _LENGTH.unpack_from(view, pos)
        pos += _LENGTH.size
        if length < 0 or length > len(view) - pos:
            raise CorruptSnapshotError(
                f"snapshot entry {len(segments)}: length {length} runs past the end of the file"
            )
        try:
            record = decode(view[pos : pos + length])
        except MetadataSerdeError as e:
            raise CorruptSnapshotError(f"snapshot entry {len(segments)}: {e}") from e
        if not isinstance(record.event, RemoteLogSegmentMetadataSnapshot):
            raise CorruptSnapshotError(
                f"snapshot entry {len(segments)} has api key {record.api_key}, "
                f"expected {SEGMENT_METADATA_SNAPSHOT_API_KEY}"
            )
        segments.append(record.event)
        pos += length
    if len(segments) != count:
        raise CorruptSnapshotError(
            f"snapshot header counts {count} entries, the file holds {len(segments)}"
        )
    return Snapshot(partition, offset, segments, version)


def write_snapshot(path: str | os.PathLike[str], snapshot: Snapshot) -> None:
    """Replace the snapshot file atomically, creating its directory if needed.

    Raises:
        MetadataSerdeError: a value does not fit its Kafka type; nothing is written.
        OSError: the write failed; the previous file is unchanged.
    """
    data = encode_snapshot(snapshot)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)


def read_snapshot(path: str | os.PathLike[str]) -> Snapshot | None:
    """The snapshot, or None when the file is missing or empty (Kafka creates it empty).

    Raises:
        CorruptSnapshotError: the file is damaged; discard it and replay the topic.
        OSError: the file exists but cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    if not data:
        return None
    return decode_snapshot(data)
