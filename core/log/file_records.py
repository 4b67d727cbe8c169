"""The ``.log`` file of a segment: appends, positional reads and zero-copy slices."""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import CoreError, CorruptRecordError, KafkaStorageError
from core.records.batch import (
    HEADER_SIZE,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    RecordBatchHeader,
    peek_batch_size,
)

# Recovery and deep scans read the file in chunks of this size.
SCAN_CHUNK_BYTES = 8 * 1024 * 1024
# Offset searches start at an index entry, at most index.interval.bytes before the target.
SEARCH_CHUNK_BYTES = 8 * 1024

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_I32 = struct.Struct(">i")


class FileRecords:
    """An append-only file of record batches with its size kept in memory.

    Appends come from one writer at a time (the log's lock); reads use ``pread`` and may run
    concurrently with appends: they never look past the size published before they start.
    """

    def __init__(self, path: Path, *, create: bool = True, writable: bool = True) -> None:
        flags = (os.O_RDWR if writable else os.O_RDONLY) | (os.O_CREAT if create else 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as e:
            raise KafkaStorageError(f"cannot open log file {path}: {e}") from e
        self.path = path
        self._size = os.fstat(self._fd).st_size
        self._closed = False
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    @property
    def fileno(self) -> int:
        """The descriptor, for ``sendfile``; valid until ``close``."""
        self._check_open()
        return self._fd

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log file {self.path} is closed")

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the end; returns the position it was written at."""
        self._check_open()
        position = self._size
        total = len(data)
        try:
            written = os.pwrite(self._fd, data, position)
            if written < total:  # short writes are rare (signals, full disks): finish them
                view = memoryview(data)
                while written < total:
                    written += os.pwrite(self._fd, view[written:], position + written)
        except OSError as e:
            raise KafkaStorageError(f"write to {self.path} failed: {e}") from e
        self._size = position + total
        return position

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``; fewer only at the end of the file.

        Read under the lock ``close`` takes: a reader on another thread than the one closing
        the segment (retention, a roll's replacement, a truncation) can never read a closed
        descriptor, or its number already reused by another file.
        """
        with self._lock:
            self._check_open()
            size = max(0, min(size, self._size - position))
            try:
                return os.pread(self._fd, size, position)
            except OSError as e:
                raise KafkaStorageError(f"read of {self.path} failed: {e}") from e

    def read_into(self, buf: bytearray, position: int, size: int) -> int:
        """Read up to ``size`` bytes from ``position`` into the start of ``buf`` (reused by
        scans: no new buffer per chunk); returns the bytes read, fewer only at the end."""
        with self._lock:  # as ``read``: never a closed or reused descriptor
            self._check_open()
            size = max(0, min(size, self._size - position, len(buf)))
            view = memoryview(buf)[:size]
            done = 0
            try:
                while done < size:
                    n = os.preadv(self._fd, [view[done:]], position + done)
                    if n == 0:
                        break
                    done += n
            except OSError as e:
                raise KafkaStorageError(f"read of {self.path} failed: {e}") from e
            return done

    def flush(self) -> None:
        if self._closed:
            return
        try:
            os.fsync(self._fd)
        except OSError as e:
            raise KafkaStorageError(f"fsync of {self.path} failed: {e}") from e

    def truncate_to(self, size: int) -> int:
        """Shrink the file to ``size`` bytes; returns the bytes removed."""
        self._check_open()
        if size > self._size or size < 0:
            raise ValueError(f"cannot truncate {self.path} of size {self._size} to {size}")
        removed = self._size - size
        if removed:
            os.ftruncate(self._fd, size)
            self._size = size
        return removed

    def duplicate_fd(self) -> int:
        """A new descriptor of the same open file, owned by the caller, for a ``sendfile``
        that outlives this call: it keeps reading the file if the segment is closed or
        deleted meanwhile (taken under the lock ``close`` takes, so the descriptor number
        cannot have been reused by another file).

        Raises:
            KafkaStorageError: the file is closed.
        """
        with self._lock:
            self._check_open()
            return os.dup(self._fd)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)

    def rename_to(self, new_path: Path) -> None:
        os.replace(self.path, new_path)
        self.path = new_path

    def delete_if_exists(self) -> bool:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    # -- scanning ------------------------------------------------------------------------
    def search_for_offset(self, target: int, start: int) -> tuple[int, int, int] | None:
        """``(position, last offset, size)`` of the first batch from ``start`` holding an
        offset >= ``target``; None if none does. Every fetch calls this: it reads the
        headers a few KiB at a time instead of one ``pread`` per batch.
        """
        position, end = start, self._size
        while position + HEADER_SIZE <= end:
            chunk = self.read(position, min(SEARCH_CHUNK_BYTES, end - position))
            offset = 0
            while offset + HEADER_SIZE <= len(chunk):
                base, length = _OFFSET_AND_LENGTH.unpack_from(chunk, offset)
                size = length + LOG_OVERHEAD
                if size < HEADER_SIZE:
                    return None  # not a batch: recovery's business, not a reader's
                last = base + _I32.unpack_from(chunk, offset + LAST_OFFSET_DELTA_POS)[0]
                if last >= target:
                    return position + offset, last, size
                offset += size
            position += offset
        return None

    def batch_headers(
        self, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, RecordBatchHeader]]:
        """``(position, header)`` of each batch from ``start``, reading headers only.

        Stops quietly at a torn tail shorter than a header; a header whose size points
        past ``end`` is yielded, so callers see a partial batch as such.
        """
        end = self._size if end is None else min(end, self._size)
        position = start
        while position + HEADER_SIZE <= end:
            header = RecordBatchHeader(self.read(position, HEADER_SIZE))
            size = header.size_in_bytes
            yield position, header
            if size < HEADER_SIZE:
                return
            position += size

    def scan_batches(
        self, start: int = 0, *, max_size: int | None = None
    ) -> Iterator[tuple[int, RecordBatchHeader]]:
        """``(position, header)`` of each whole, validated batch from ``start``.

        The header views cover the whole batch. Used by recovery and deep tools.

        Raises:
            CorruptRecordError: at the first torn, oversize or CRC-failing batch; its
                ``position`` attribute says where the valid data ends.
            UnsupportedVersionError: a batch with a magic other than 2.
        """
        position = start
        end = self._size
        while position < end:
            chunk = self.read(position, min(SCAN_CHUNK_BYTES, end - position))
            offset = 0
            while offset < len(chunk):
                size = peek_batch_size(chunk, offset)
                if size is None and position + len(chunk) < end:
                    if offset == 0:  # cannot happen with chunks of at least 12 bytes
                        raise ValueError(f"scan chunk too small at byte {position}")
                    break  # the chunk cut a length field: read on from this batch
                if size is None or size < HEADER_SIZE or position + offset + size > end:
                    err = CorruptRecordError(
                        f"{self.path}: torn or invalid batch at byte {position + offset} "
                        f"(size {size}, file size {end})"
                    )
                    err.position = position + offset  # type: ignore[attr-defined]
                    raise err
                if offset + size > len(chunk):
                    if offset == 0:  # a batch larger than the chunk: read it whole
                        chunk = self.read(position, size)
                        continue
                    break
                header = RecordBatchHeader(chunk, offset)
                try:
                    header.validate(max_size)
                except CoreError as e:
                    # The header's messages count bytes from the chunk: restate the position.
                    err = type(e)(f"{self.path}: batch at byte {position + offset}: {e}")
                    err.position = position + offset  # type: ignore[attr-defined]
                    raise err from e
                yield position + offset, header
                offset += size
            position += offset


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment's log file, sent to a client without copying."""

    records: FileRecords
    position: int
    size: int

    def __len__(self) -> int:
        return self.size

    def read_bytes(self) -> bytes:
        return self.records.read(self.position, self.size)
