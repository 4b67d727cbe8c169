"""A remote segment's ``.log`` object open as a local file, sent from with ``sendfile``.

With a plugin that has ``tiered.api.LogSegmentFiles`` (the local-directory one), a remote
fetch needs neither a read into memory nor a CRC32C pass per range: the plugin checked the
whole object against its manifest before handing out its descriptor, and the broker sends
the fetch's byte range from it as it sends a local segment's (a ``FileSlice``). What is
read here is the headers of the batches in the range (``pread`` of 61 bytes each), to find
where the fetch starts and where the next one will (remembered in ``FilePositions``, so
that a sequential consumer's next fetch needs no index lookup).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from core.errors import KafkaStorageError
from core.log.file_records import FileSlice
from core.records.batch import HEADER_SIZE, RecordBatchHeader, peek_batch_size
from tiered.api import RemoteStorageError

# Where sequential consumers' next fetches start in remote log files (plugins with
# LogSegmentFiles): (segment id, next fetch offset) -> byte position, the newest kept.
FILE_POSITIONS_MAX_ENTRIES = 1024


class RemoteLogFile:
    """The open descriptor of one ``.log`` object, in the shape that ``FileSlice`` and the
    response writer use of a segment's ``FileRecords`` (``path``, ``read``,
    ``duplicate_fd``). The descriptor is closed by ``close`` or when
    the last reference goes (the answer holding a slice of it was sent or dropped): the
    writer reads a small slice, or sends a large one from a duplicate, before it writes
    the answer."""

    def __init__(self, fd: int, segment: object) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._segment = segment
        try:
            self.size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise

    @property
    def path(self) -> str:
        """What error messages call the file (formatted only for one)."""
        return f"remote segment {self._segment}"

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``; fewer only at the end of the file. Read
        under the lock ``close`` takes, as ``FileRecords.read``: never a closed descriptor,
        or its number reused by another file."""
        size = max(0, min(size, self.size - position))
        with self._lock:
            try:
                return os.pread(self._checked_fd(), size, position)
            except OSError as e:
                raise KafkaStorageError(f"read of {self.path} failed: {e}") from e

    def duplicate_fd(self) -> int:
        """A new descriptor of the same open file, owned by the caller (for a ``sendfile``
        that outlives this object)."""
        with self._lock:
            return os.dup(self._checked_fd())

    def _checked_fd(self) -> int:
        if self._fd < 0:
            raise KafkaStorageError(f"{self.path} is closed")
        return self._fd

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(frozen=True, slots=True)
class FileRegion:
    """What a fetch sends from a remote log file.

    Attributes:
        records: the byte range, from the batch holding the fetch offset; it may end
            inside a batch (clients drop a partial tail), as a read into memory does.
        upper_bound: one past the last offset of the batches in it, a partial last one
            included (the bound of the search for aborted transactions).
        next_offset: the offset after the last whole batch (the consumer's next fetch
            offset), or None when the range holds no whole batch.
        next_position: the byte position of that next batch in the file.
    """

    records: FileSlice
    upper_bound: int
    next_offset: int | None
    next_position: int


def find_region(
    file: RemoteLogFile, position: int, fetch_offset: int, max_bytes: int
) -> FileRegion | None:
    """The bytes a fetch at ``fetch_offset`` sends, scanning batch headers from byte
    ``position`` (a batch start at or before the batch holding the offset): from that batch,
    ``max_bytes`` long, or the whole batch when it is larger. None when the file has no
    batch holding an offset at or after ``fetch_offset``.

    Raises:
        RemoteStorageError: a batch header that does not frame a batch.
    """
    at = position
    while True:
        header = _header(file, at)
        if header is None:
            return None
        size, last_offset, _ = header
        if last_offset >= fetch_offset:
            break
        at += size
    end = min(at + max(max_bytes, size), file.size)
    upper = fetch_offset + 1
    next_offset = None
    next_position = at
    p = at
    while p + HEADER_SIZE <= end and (header := _header(file, p)) is not None:
        size, last_offset, following = header
        upper = last_offset + 1
        if p + size > end:
            break
        next_offset, next_position = following, p + size
        p += size
    # The slice's records are this file (duck-typed: what FileSlice uses of FileRecords).
    return FileRegion(FileSlice(file, at, end - at), upper, next_offset, next_position)  # type: ignore[arg-type]


def _header(file: RemoteLogFile, position: int) -> tuple[int, int, int] | None:
    """(size, last offset, next offset) of the batch at ``position``; None at the end of
    the file or before a torn last batch's header."""
    data = file.read(position, HEADER_SIZE)
    if len(data) < HEADER_SIZE:
        return None
    size = peek_batch_size(data, 0)
    if size is None or size < HEADER_SIZE:
        raise RemoteStorageError(
            f"{file.path}: the batch at byte {position} has an invalid size {size}"
        )
    header = RecordBatchHeader(data, 0)
    return size, header.last_offset, header.next_offset


class FilePositions:
    """Byte positions of the batches sequential consumers fetch next from remote log files,
    keyed by (segment id, offset): the fetch that served the batches before remembers
    where the next one starts, so the next fetch needs no index lookup. Thread-safe; the
    FILE_POSITIONS_MAX_ENTRIES newest are kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._positions: OrderedDict[tuple[uuid.UUID, int], int] = OrderedDict()

    def get(self, key: tuple[uuid.UUID, int]) -> int | None:
        with self._lock:
            return self._positions.get(key)

    def put(self, key: tuple[uuid.UUID, int], position: int) -> None:
        with self._lock:
            self._positions[key] = position
            self._positions.move_to_end(key)
            while len(self._positions) > FILE_POSITIONS_MAX_ENTRIES:
                self._positions.popitem(last=False)
