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

Reading is the start-up path of a broker with millions of remote segments, so entries of the
usual shape (frame 1, api key 3, version 0 or 1, one leader epoch, no custom metadata, no
tagged field but TxnIndexEmpty) are unpacked by one ``struct`` call each into a
``SnapshotRow`` tuple; any other entry goes through ``rlmm.serde.decode``. Both read the same
bytes to the same values (tests/rlmm/test_snapshot.py compares them). The broker's restore
(``open_snapshot_stream``) goes further: it reads the file a chunk at a time and decodes
runs of up to 1024 usual COPY_SEGMENT_FINISHED entries straight into columns
(``SnapshotRun``, by ``rlmm._native.decode_run`` in C when built, else its twin
``decode_run_py``), which the cache appends a block at a time; the file format is unchanged.

Partitions being deleted get no snapshot (as in Kafka); their state is replayed.
Writes are atomic: temp file, fsync, rename, fsync of the directory (core.fs.atomic_write).
"""

from __future__ import annotations

import os
import struct
import uuid
from array import array
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from core.fs import atomic_write
from rlmm import native
from rlmm.serde import (
    SEGMENT_METADATA_SNAPSHOT_API_KEY,
    MetadataSerdeError,
    RemoteLogSegmentMetadataSnapshot,
    decode,
    serialize,
)
from tiered.api import RemoteLogSegmentState, TopicIdPartition

COMMITTED_OFFSETS_FILE_NAME = "_rlmm_committed_offsets"
COMMITTED_OFFSETS_VERSION = 0
SNAPSHOT_FILE_NAME = "remote_log_snapshot"
SNAPSHOT_VERSION = 0

_HEADER = struct.Struct(">hiqi")  # version, metadata partition, its offset, entry count
_LENGTH = struct.Struct(">i")
# An entry of the usual shape, field by field (see SnapshotRow), ending with its tagged-field
# count (0); with TxnIndexEmpty set the section is count 1, tag 0, size 1 (checked apart,
# skipped here), then the value.
_ROW = struct.Struct(">BBB16sqqiqqBiqBiBbB")
_ROW_TXN = struct.Struct(">BBB16sqqiqqBiqBiBb3xB")
_TXN_TAG = b"\x01\x00\x01"
_ROW_SIZE = _ROW.size
_ROW_TXN_SIZE = _ROW_TXN.size
_TXN_TAG_AT = _ROW_SIZE - 1  # where the TxnIndexEmpty section starts
_TXN_TAG_END = _TXN_TAG_AT + len(_TXN_TAG)
_STATES = frozenset(int(s) for s in RemoteLogSegmentState)
_FINISHED = int(RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
_tuple_new = tuple.__new__
# The streaming reader: reads this much at a time, refills below _REFILL bytes left, and
# cuts runs at _RUN_ROWS entries (a run's columns are built whole before it is restored).
_CHUNK = 1 << 20
_REFILL = 1 << 16
_RUN_ROWS = 1024
# No entry is shorter: its length field, the frame's version and api key, the record
# version and the segment id.
_MIN_ENTRY = 4 + 3 + 16


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


class SnapshotRow(NamedTuple):
    """A snapshot entry of the usual shape, as the bytes hold it (one ``struct`` unpack).

    The first three fields are the frame (1, 3, record version); ``epoch_count`` (2, a
    compact array of one), ``epoch_tags`` (0) and ``custom_metadata_length`` (0, null) are
    the fixed bytes of that shape. It has the attributes ``RemoteLogMetadataCache`` reads
    from an entry; ``to_snapshot`` builds the full record.
    """

    frame: int
    api_key: int
    version: int
    idb: bytes
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    epoch_count: int
    epoch: int
    epoch_start: int
    epoch_tags: int
    segment_size_in_bytes: int
    custom_metadata_length: int
    state: int
    txn_tag: int  # 0 (no tagged field) or TxnIndexEmpty's byte

    @property
    def txn_index_empty(self) -> bool:
        return self.txn_tag != 0

    def to_snapshot(self) -> RemoteLogSegmentMetadataSnapshot:
        return RemoteLogSegmentMetadataSnapshot(
            uuid.UUID(bytes=self.idb),
            self.start_offset,
            self.end_offset,
            self.max_timestamp_ms,
            self.broker_id,
            self.event_timestamp_ms,
            self.segment_size_in_bytes,
            {self.epoch: self.epoch_start},
            None,
            RemoteLogSegmentState(self.state),
            self.txn_index_empty,
        )


SnapshotEntry = SnapshotRow | RemoteLogSegmentMetadataSnapshot


class SnapshotRun(NamedTuple):
    """Consecutive usual entries as columns, in the shape a restore appends in bulk:
    COPY_SEGMENT_FINISHED, one leader epoch starting at the start offset, start offsets
    strictly ascending. Column ``i`` of each field is entry ``i``'s value."""

    ids: list[bytes]  # segment ids, 16 bytes each
    start_offset: array[int]
    end_offset: array[int]
    broker_id: array[int]
    max_timestamp_ms: array[int]
    event_timestamp_ms: array[int]
    segment_size_in_bytes: array[int]
    txn_index_empty: bytes  # 1 where TxnIndexEmpty is set, else 0
    epoch: array[int]

    def records(self) -> list[RemoteLogSegmentMetadataSnapshot]:
        """The entries as record objects (for the rare restore that cannot take the run)."""
        finished = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        return [
            RemoteLogSegmentMetadataSnapshot(
                uuid.UUID(bytes=idb), start, end, ts, broker, evt, size, {epoch: start}, None,
                finished, bool(txn),
            )
            for idb, start, end, broker, ts, evt, size, txn, epoch in zip(*self, strict=True)
        ]  # fmt: skip


def decode_run_py(
    buf: bytes | bytearray | memoryview, pos: int, max_rows: int
) -> tuple[int, list[bytes], *tuple[array[int], ...]]:  # type: ignore[valid-type]
    """The longest run of entries from ``pos`` (a length field) that fits ``SnapshotRun``:
    at most ``max_rows``, each whole inside ``buf`` and of the usual shape of
    ``decode_snapshot_rows`` with the run's conditions. Returns the position after the run
    and its columns (in ``SnapshotRun``'s order). Never raises for bad bytes: the run just
    ends there, and the entry is read (and judged) one at a time.

    The pure-Python twin of ``rlmm._native.decode_run``; ``decode_run`` picks one.
    """
    limit = len(buf)
    ids: list[bytes] = []
    cols = [array("q") for _ in range(7)]
    start_c, end_c, broker_c, ts_c, evt_c, size_c, epoch_c = cols
    txn_c = bytearray()
    prev = 0
    while len(ids) < max_rows and limit - pos >= 4:
        (length,) = _LENGTH.unpack_from(buf, pos)
        if length not in (_ROW_SIZE, _ROW_TXN_SIZE) or limit - pos - 4 < length:
            break
        e = pos + 4
        if length == _ROW_SIZE:
            u = _ROW.unpack_from(buf, e)
            if u[16] != 0:
                break
            txn = 0
        else:
            if buf[e + _TXN_TAG_AT : e + _TXN_TAG_END] != _TXN_TAG:
                break
            u = _ROW_TXN.unpack_from(buf, e)
            txn = 1 if u[16] else 0
        start = u[4]
        if not (
            u[0] == 1
            and u[1] == SEGMENT_METADATA_SNAPSHOT_API_KEY
            and u[2] <= 1
            and u[9] == 2
            and u[12] == 0
            and u[14] == 0
            and u[15] == _FINISHED
            and u[5] >= start
            and u[11] == start
            and (not ids or start > prev)
        ):
            break
        ids.append(u[3])
        start_c.append(start)
        end_c.append(u[5])
        broker_c.append(u[6])
        ts_c.append(u[7])
        evt_c.append(u[8])
        size_c.append(u[13])
        epoch_c.append(u[10])
        txn_c.append(txn)
        prev = start
        pos += 4 + length
    return (pos, ids, start_c, end_c, broker_c, ts_c, evt_c, size_c, bytes(txn_c), epoch_c)


def decode_run(
    buf: bytes | bytearray | memoryview, pos: int, max_rows: int
) -> tuple[int, SnapshotRun | None]:
    """``decode_run_py``'s run, by the compiled module when it is built: the position after
    it and the run (None when the entry at ``pos`` does not start one)."""
    impl = native.COMPILED
    out = (impl.decode_run if impl is not None else decode_run_py)(buf, pos, max_rows)
    return out[0], (SnapshotRun(*out[1:]) if out[1] else None)


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
    partition, offset, entries = decode_snapshot_rows(data)
    segments = [e.to_snapshot() if type(e) is SnapshotRow else e for e in entries]
    return Snapshot(partition, offset, segments)  # type: ignore[arg-type]


def decode_snapshot_rows(
    data: bytes | bytearray | memoryview,
) -> tuple[int, int, list[SnapshotEntry]]:
    """``decode_snapshot`` without building a record object per usual entry: the metadata
    partition, its offset, and the entries (``SnapshotRow`` for the usual shape).

    Raises:
        CorruptSnapshotError: as ``decode_snapshot``.
    """
    view = memoryview(data)
    partition, offset, count = _decode_header(view)
    pos = _HEADER.size
    size = len(view)
    segments: list[SnapshotEntry] = []
    while pos < size:
        entry, pos = _decode_entry(view, pos, len(segments))
        segments.append(entry)
    if len(segments) != count:
        raise CorruptSnapshotError(
            f"snapshot header counts {count} entries, the file holds {len(segments)}"
        )
    return partition, offset, segments


def _decode_header(view: memoryview) -> tuple[int, int, int]:
    """The header's metadata partition, offset and entry count."""
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
    return partition, offset, count


def _decode_entry(view: memoryview, pos: int, index: int) -> tuple[SnapshotEntry, int]:
    """The entry at ``pos`` (its length field) and the position after it."""
    size = len(view)
    if size - pos < 4:
        raise CorruptSnapshotError(f"snapshot entry {index}: truncated length")
    (length,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if length < 0 or length > size - pos:
        raise CorruptSnapshotError(
            f"snapshot entry {index}: length {length} runs past the end of the file"
        )
    if length == _ROW_SIZE:
        u = _ROW.unpack_from(view, pos)
    elif length == _ROW_TXN_SIZE and view[pos + _TXN_TAG_AT : pos + _TXN_TAG_END] == _TXN_TAG:
        u = _ROW_TXN.unpack_from(view, pos)
    else:
        u = None
    if (
        u is not None
        and u[0] == 1
        and u[1] == SEGMENT_METADATA_SNAPSHOT_API_KEY
        and u[2] <= 1
        and u[9] == 2
        and u[12] == 0
        and u[14] == 0
        and u[15] in _STATES
        and u[5] >= u[4]
        and (length == _ROW_TXN_SIZE or u[16] == 0)
    ):
        return _tuple_new(SnapshotRow, u), pos + length
    try:
        record = decode(view[pos : pos + length])
    except MetadataSerdeError as e:
        raise CorruptSnapshotError(f"snapshot entry {index}: {e}") from e
    if not isinstance(record.event, RemoteLogSegmentMetadataSnapshot):
        raise CorruptSnapshotError(
            f"snapshot entry {index} has api key {record.api_key}, "
            f"expected {SEGMENT_METADATA_SNAPSHOT_API_KEY}"
        )
    return record.event, pos + length


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


def read_snapshot_rows(
    path: str | os.PathLike[str],
) -> tuple[int, int, list[SnapshotEntry]] | None:
    """``decode_snapshot_rows`` of the file, or None when it is missing or empty.

    Raises:
        CorruptSnapshotError: the file is damaged; discard it and replay the topic.
        OSError: the file exists but cannot be read.
    """
    data = _snapshot_bytes(path)
    return None if data is None else decode_snapshot_rows(data)


@dataclass(frozen=True, slots=True)
class SnapshotStream:
    """A snapshot file opened for a restore: its header, and its entries read as they are
    consumed (``SnapshotRun`` for runs of the usual shape, else one ``SnapshotEntry``).

    Iterating ``entries`` raises ``CorruptSnapshotError`` at the first damage (and at the
    end if the count differs from the header's): a restore must be discarded then. The file
    is read ``_CHUNK`` bytes at a time, so that memory stays bounded by the cache being
    built, not by the file; it closes when ``entries`` is exhausted or dropped.
    """

    metadata_partition: int
    metadata_partition_offset: int
    count: int
    entries: Generator[SnapshotEntry | SnapshotRun, None, None]


def open_snapshot_stream(path: str | os.PathLike[str]) -> SnapshotStream | None:
    """The snapshot's header and lazy entries, or None when the file is missing or empty.

    Raises:
        CorruptSnapshotError: the header is damaged (entries raise as they are read).
        OSError: the file exists but cannot be read.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the generator (or here)
    except FileNotFoundError:
        return None
    try:
        head = f.read(_HEADER.size)
        if not head:
            f.close()
            return None
        partition, offset, count = _decode_header(memoryview(head))
        # The count sizes the restore's id table: bound it by what the file can hold.
        room = os.fstat(f.fileno()).st_size - _HEADER.size
        if count > room // _MIN_ENTRY:
            raise CorruptSnapshotError(
                f"snapshot header counts {count} entries, more than its {room} bytes can hold"
            )
    except BaseException:
        f.close()
        raise
    return SnapshotStream(partition, offset, count, _stream_entries(f, count))


def _stream_entries(f: BinaryIO, count: int) -> Generator[SnapshotEntry | SnapshotRun, None, None]:
    with f:
        buf, pos, index, eof = b"", 0, 0, False
        while True:
            if not eof and len(buf) - pos <= _REFILL:
                more = f.read(_CHUNK)
                eof = not more
                buf, pos = buf[pos:] + more, 0
            if pos == len(buf) and eof:
                break
            end, run = decode_run(buf, pos, _RUN_ROWS)
            if run is not None:
                pos = end
                index += len(run.ids)
                yield run
                continue
            # One entry by the general reader, once it is whole in buf (or the file ended).
            while not eof and (
                len(buf) - pos < 4 or len(buf) - pos - 4 < _LENGTH.unpack_from(buf, pos)[0]
            ):
                more = f.read(max(_CHUNK, len(buf) - pos))
                eof = not more
                buf, pos = buf[pos:] + more, 0
            entry, pos = _decode_entry(memoryview(buf), pos, index)
            index += 1
            yield entry
        if index != count:
            raise CorruptSnapshotError(
                f"snapshot header counts {count} entries, the file holds {index}"
            )


def read_snapshot(path: str | os.PathLike[str]) -> Snapshot | None:
    """The snapshot, or None when the file is missing or empty (Kafka creates it empty).

    Raises:
        CorruptSnapshotError: the file is damaged; discard it and replay the topic.
        OSError: the file exists but cannot be read.
    """
    data = _snapshot_bytes(path)
    return None if data is None else decode_snapshot(data)


def _snapshot_bytes(path: str | os.PathLike[str]) -> bytes | None:
    """The file's bytes, or None when it is missing or empty."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    return data or None
