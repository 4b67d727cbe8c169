# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled batch walk of segment recovery (see ``core.log.recovery_walk``).

``RecoveryWalk`` does what ``PyRecoveryWalk`` does, with the same attributes and the same
results, one C loop per chunk instead of Python steps per batch. It does not word errors:
at the first batch it finds invalid it calls the Python ``check_stored_batch`` on that batch,
which raises the error recovery logs (and if that finds nothing wrong the two disagree, which
the tests rule out: a CorruptRecordError says so).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t

from core.records._batch_format cimport (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    PyBUF_READ,
    PyMemoryView_FromMemory,
)
from core.records._bigendian cimport be64, beu32, put32, put64

from core.errors import CorruptRecordError

cdef long long INT32_MAX = 2147483647


cdef class RecoveryWalk:
    """One segment's walk; construct through ``core.log.recovery_walk.new_walk``."""

    cdef readonly long long base_offset, interval, max_size
    cdef readonly long long last_offset, max_timestamp, max_timestamp_offset
    cdef readonly long long bytes_since_last_entry, valid_bytes, last_entry_timestamp
    cdef readonly bytearray offset_entries, time_entries
    cdef readonly list epochs, producer_positions
    cdef readonly object path
    cdef object crc, checker
    cdef bint have_epoch
    cdef int32_t prev_epoch

    def __init__(self, long long base_offset, long long index_interval_bytes, long long max_size,
                 object path, object crc, object checker):
        self.base_offset = base_offset
        self.interval = index_interval_bytes
        self.max_size = max_size  # -1: no bound
        self.path = path
        self.crc = crc
        self.checker = checker
        self.last_offset = base_offset - 1
        self.max_timestamp = -1
        self.max_timestamp_offset = base_offset
        self.bytes_since_last_entry = 0
        self.valid_bytes = 0
        self.offset_entries = bytearray()
        self.time_entries = bytearray()
        self.last_entry_timestamp = -1
        self.epochs = []
        self.producer_positions = []
        self.have_epoch = False
        self.prev_epoch = 0

    cdef int _fail(self, object buf, Py_ssize_t offset, Py_ssize_t length, long long position,
                   long long end) except -1:
        self.checker(
            buf, offset, length, position, end, None if self.max_size < 0 else self.max_size,
            self.last_offset, self.base_offset, self.path,
        )
        raise CorruptRecordError(
            f"{self.path}: batch at byte {position + offset}: the compiled recovery walk "
            "refused a batch the Python check accepts"
        )

    def feed(self, object buf, Py_ssize_t length, long long position, long long end):
        """As ``PyRecoveryWalk.feed``."""
        cdef Py_buffer view
        cdef const unsigned char *data
        cdef const unsigned char *h
        cdef Py_ssize_t offset = 0, remaining
        cdef long long size, base, batch_last, batch_ts, n
        cdef int32_t epoch
        cdef unsigned char entry[12]
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if length > view.len:
                raise ValueError(f"length {length} exceeds the buffer's {view.len} bytes")
            data = <const unsigned char *>view.buf
            while offset < length:
                remaining = length - offset
                h = data + offset
                if remaining < LOG_OVERHEAD:
                    if position + offset + remaining < end:
                        break
                    self._fail(buf, offset, length, position, end)
                size = <long long>(<int32_t>beu32(h + 8)) + LOG_OVERHEAD
                if size < HEADER_SIZE or position + offset + size > end:
                    self._fail(buf, offset, length, position, end)
                if size > remaining:
                    break
                if self.max_size >= 0 and size > self.max_size:
                    self._fail(buf, offset, length, position, end)
                if <int8_t>h[16] != MAGIC_V2:
                    self._fail(buf, offset, length, position, end)
                if <uint32_t>self.crc(
                    PyMemoryView_FromMemory(<char *>h + 21, size - 21, PyBUF_READ)
                ) != beu32(h + 17):
                    self._fail(buf, offset, length, position, end)
                base = be64(h)
                batch_last = base + <int32_t>beu32(h + 23)
                if (base <= self.last_offset or batch_last - self.base_offset < 0
                        or batch_last - self.base_offset > INT32_MAX):
                    self._fail(buf, offset, length, position, end)
                # Valid: the rules of LogSegment._index_batches.
                self.last_offset = batch_last
                batch_ts = be64(h + 35)
                if batch_ts > self.max_timestamp:
                    self.max_timestamp = batch_ts
                    self.max_timestamp_offset = batch_last
                if self.bytes_since_last_entry > self.interval:
                    put32(entry, <uint32_t>(batch_last - self.base_offset))
                    put32(entry + 4, <uint32_t>(position + offset))
                    n = len(self.offset_entries)
                    self.offset_entries[n:n] = PyMemoryView_FromMemory(<char *>entry, 8, PyBUF_READ)
                    if self.max_timestamp > self.last_entry_timestamp:
                        put64(entry, self.max_timestamp)
                        put32(entry + 8,
                               <uint32_t>(self.max_timestamp_offset - self.base_offset))
                        n = len(self.time_entries)
                        self.time_entries[n:n] = PyMemoryView_FromMemory(
                            <char *>entry, 12, PyBUF_READ
                        )
                        self.last_entry_timestamp = self.max_timestamp
                    self.bytes_since_last_entry = 0
                self.bytes_since_last_entry += size
                epoch = <int32_t>beu32(h + 12)
                if not self.have_epoch or epoch != self.prev_epoch:
                    self.epochs.append((epoch, base))
                    self.have_epoch = True
                    self.prev_epoch = epoch
                if be64(h + 43) > -1:
                    self.producer_positions.append(position + offset)
                offset += size
                self.valid_bytes = position + offset
            return offset
        finally:
            PyBuffer_Release(&view)
