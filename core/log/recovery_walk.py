"""The batch walk of segment recovery: validate stored batches and collect the index entries.

``LogSegment.recover`` reads the ``.log`` file in chunks into one reused buffer and feeds
each chunk to a walk, which checks every whole batch in it (framing, magic, CRC-32C, offsets
increasing and within the segment) and builds, as it goes, what recovery writes afterwards:

- the offset index entries (8 bytes each, big-endian, the file format) and the time index
  entries (12 bytes each), one every ``index.interval.bytes`` (the rule of
  ``LogSegment._index_batches``);
- the segment's max timestamp and the last offset of its batch;
- the leader epochs, as ``(epoch, base offset)`` where the epoch differs from the previous
  batch's (assigning the same epoch twice in a row is a no-op for the leader-epoch cache);
- the positions of the batches with a producer id (the producer-state replay after
  recovery reads only those: the others only move its map end offset);
- the end of the valid data.

Two walks implement it: ``_recovery.RecoveryWalk`` (Cython, built by ``make native``) and
``PyRecoveryWalk`` below. They decide the same way; the compiled one does not word errors:
at an invalid batch it calls ``check_stored_batch`` (the one written rule set, here), which
raises the error that recovery logs. TIERLOG_PURE_PYTHON=1 forces the Python walk; the tests
run both over the same files, valid and corrupt, and compare every result.
"""

from __future__ import annotations

import struct
from types import ModuleType

import crc32c

from core.errors import CoreError, CorruptRecordError
from core.records.batch import (
    F_BASE_OFFSET,
    F_EPOCH,
    F_LAST_OFFSET_DELTA,
    F_MAX_TIMESTAMP,
    F_PRODUCER_ID,
    HEADER,
    HEADER_SIZE,
    LENGTH_POS,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    check_structure,
)
from core.records.native import load_compiled

INT32_MAX = (1 << 31) - 1
_I32 = struct.Struct(">i")
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset


def check_stored_batch(
    buf: bytes | bytearray | memoryview,
    offset: int,
    length: int,
    chunk_position: int,
    file_end: int,
    max_size: int | None,
    last_offset: int,
    base_offset: int,
    path: object,
) -> int | None:
    """Check the batch at ``offset`` of a chunk of a segment file; its size if valid.

    Args:
        buf: the chunk; only its first ``length`` bytes were read.
        chunk_position: where the chunk starts in the file; ``file_end``: the file's size.
        max_size: the largest batch allowed, or None.
        last_offset: the last offset of the previous batch (``base_offset - 1`` at first).
        base_offset: the segment's base offset.
        path: the file, for the messages.

    Returns:
        The batch's size, or None when the chunk ends before the batch does (read on).

    Raises:
        CorruptRecordError: a torn or impossible length, a CRC mismatch, a batch above
            ``max_size``, or offsets not above the previous batch's or outside the segment.
        UnsupportedVersionError: a magic other than 2.
    """
    position = chunk_position + offset
    remaining = length - offset
    size = None
    if remaining >= LOG_OVERHEAD:
        size = _I32.unpack_from(buf, offset + LENGTH_POS)[0] + LOG_OVERHEAD
    elif position + remaining < file_end:
        return None  # the chunk cut the length field: the file goes on
    if size is None or size < HEADER_SIZE or position + size > file_end:
        raise CorruptRecordError(
            f"{path}: torn or invalid batch at byte {position} (size {size}, file size {file_end})"
        )
    if size > remaining:
        return None
    fields = HEADER.unpack_from(buf, offset)
    try:
        check_structure(buf, offset, fields, max_size)
    except CoreError as e:
        # The messages count bytes from the chunk: restate the file position.
        raise type(e)(f"{path}: batch at byte {position}: {e}") from e
    base = fields[F_BASE_OFFSET]
    batch_last = base + fields[F_LAST_OFFSET_DELTA]
    if base <= last_offset or not 0 <= batch_last - base_offset <= INT32_MAX:
        raise CorruptRecordError(
            f"{path}: batch at byte {position} has offsets {base}..{batch_last} out of "
            f"order or outside the segment"
        )
    return size


class PyRecoveryWalk:
    """The pure-Python walk; see the module docstring. Attributes are the results so far."""

    def __init__(
        self, base_offset: int, index_interval_bytes: int, max_size: int | None, path: object
    ) -> None:
        self.base_offset = base_offset
        self.interval = index_interval_bytes
        self.max_size = max_size
        self.path = path
        self.last_offset = base_offset - 1
        self.max_timestamp = -1
        self.max_timestamp_offset = base_offset
        self.bytes_since_last_entry = 0
        self.valid_bytes = 0
        self.offset_entries = bytearray()
        self.time_entries = bytearray()
        self.last_entry_timestamp = -1
        self.epochs: list[tuple[int, int]] = []
        self.producer_positions: list[int] = []

    def feed(
        self, buf: bytes | bytearray | memoryview, length: int, position: int, end: int
    ) -> int:
        """Walk the whole batches of ``buf[:length]``, read from file ``position``; ``end``
        is the file size. Returns the bytes consumed: the rest starts a batch the chunk cut.

        Raises:
            CoreError: as ``check_stored_batch``, at the first invalid batch; the results
                then describe the batches before it.
        """
        base, interval = self.base_offset, self.interval
        offset = 0
        while offset < length:
            size = check_stored_batch(
                buf,
                offset,
                length,
                position,
                end,
                self.max_size,
                self.last_offset,
                base,
                self.path,
            )
            if size is None:
                break
            fields = HEADER.unpack_from(buf, offset)
            batch_base = fields[F_BASE_OFFSET]
            batch_last = batch_base + fields[F_LAST_OFFSET_DELTA]
            self.last_offset = batch_last
            batch_ts = fields[F_MAX_TIMESTAMP]
            if batch_ts > self.max_timestamp:
                self.max_timestamp, self.max_timestamp_offset = batch_ts, batch_last
            if self.bytes_since_last_entry > interval:
                self.offset_entries += _OFFSET_ENTRY.pack(batch_last - base, position + offset)
                if self.max_timestamp > self.last_entry_timestamp:
                    self.time_entries += _TIME_ENTRY.pack(
                        self.max_timestamp, self.max_timestamp_offset - base
                    )
                    self.last_entry_timestamp = self.max_timestamp
                self.bytes_since_last_entry = 0
            self.bytes_since_last_entry += size
            epoch = fields[F_EPOCH]
            if not self.epochs or self.epochs[-1][0] != epoch:
                self.epochs.append((epoch, batch_base))
            if fields[F_PRODUCER_ID] > NO_PRODUCER_ID:
                self.producer_positions.append(position + offset)
            offset += size
            self.valid_bytes = position + offset
        return offset


def load() -> ModuleType | None:
    """The compiled walk's module, or None when forced off or not built."""
    return load_compiled("core.log._recovery")


COMPILED: ModuleType | None = load()
"""The compiled walk this process uses, or None for the pure-Python one (tests switch it)."""


def new_walk(
    base_offset: int, index_interval_bytes: int, max_size: int | None, path: object
) -> PyRecoveryWalk:
    """A walk for one segment: the compiled one when built, else the Python one."""
    if COMPILED is not None:
        return COMPILED.RecoveryWalk(  # type: ignore[no-any-return]
            base_offset,
            index_interval_bytes,
            -1 if max_size is None else max_size,
            path,
            crc32c.crc32c,
            check_stored_batch,
        )
    return PyRecoveryWalk(base_offset, index_interval_bytes, max_size, path)
