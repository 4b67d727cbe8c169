# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The common case of a leader append in one compiled call: ``ActiveSegmentAppender``.

``PartitionLog.append_as_leader`` calls ``append`` under the log's lock. For a request whose
batches all take the common path, the call validates them (framing, magic, CRC-32C and the
client rules of ``core.records.batch.scan_client_batches``), decides that no roll is due
(``LogSegment.should_roll``'s rule), patches base offsets and the leader epoch (and
LogAppendTime) in place, writes the bytes with ``pwrite`` at the end of the segment's file
and adds the offset and time index entries (``LogSegment._index_batches``'s rule), then
returns the ``LogAppendInfo``. Everything else returns None *before anything is changed*,
and the log runs its Python path, which raises the error Kafka's client gets or does the
rare work:

- any invalid batch (the Python path words the error);
- a batch with a producer id (idempotence and transaction checks), a control batch, a batch
  claiming LogAppendTime, or one whose records must be decoded for
  ``core.log.record_validation``'s rules (compacted topics, bounded
  ``message.timestamp.before.max.ms``, a max timestamp past ``now +
  message.timestamp.after.max.ms``);
- a request larger than ``segment.bytes``, a roll, a segment whose max timestamp or
  rolling timestamp is not loaded yet, more than 64 batches, a read-only buffer;
- a closed log, or an epoch other than the log's latest (the Python path writes the
  leader-epoch cache).

The Python path is the twin: the tests run the same requests through both and compare the
results, the errors and the files byte for byte (tests/core/log/test_active_segment.py).

State: nothing is cached that Python code may change. The appender keeps what is fixed for
the life of the active segment (the file descriptor, base offset, the index objects, their
locks, entry arrays and pending-entry buffers, the config values) and reads the rest from
the Python objects on every call, writing back what it changes. It binds again whenever
the log's last segment or its config object is not the one it bound to. What it reads and
writes, all under the log's lock, as the Python path does:

- ``PartitionLog``: ``_closed``, ``_latest_epoch``, ``_segments``, ``config``,
  ``_log_end_offset``, ``_unflushed_messages``, ``inline_flush``, ``log_start_offset``
  (and ``flush()`` when ``flush.messages`` is reached); ``ProducerStateManager``:
  ``_map_end_offset``;
- ``LogSegment``: ``_max_ts`` (a ``(timestamp, offset)`` tuple), ``_rolling_based_timestamp``,
  ``_bytes_since_last_index_entry``, ``created_ms``; ``FileRecords``: ``_fd``, ``_size``;
- ``OffsetIndex``: ``_entries``, ``_max_entries``, ``_last_offset``, ``_pending`` and
  ``_pending_from``, the ``_relatives`` and ``_positions`` arrays; ``TimeIndex``: the same
  counts and buffer, ``_last_timestamp``, ``_last_entry_offset``. Entries are added under
  the index's own lock, as ``OffsetIndex.append`` and ``TimeIndex.maybe_append`` do, and
  reach the file with ``_write_pending``'s ``pwrite``, a page at a time, as before; the
  buffers and arrays are changed in place by the Python code too, never replaced.

The write: one ``pwrite`` (finishing short writes), with the GIL held up to 64 KiB and
released beyond (``_write`` says why); a failure raises
``KafkaStorageError`` with ``FileRecords.append``'s message, and the file size is left as
it was (the next append overwrites the partial bytes), as in ``FileRecords.append``.
"""

from cpython.array cimport array, resize_smart
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from libc.errno cimport EINTR, EIO, errno
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t, uint64_t
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec
from posix.types cimport off_t
from posix.unistd cimport pwrite

from core.records._batch_format cimport (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    PyBUF_READ,
    PyMemoryView_FromMemory,
)
from core.records._bigendian cimport be16, be32, be64, beu32, put32, put64

import os

from core.errors import KafkaStorageError

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject *type, Py_ssize_t nitems)

cdef enum:
    CONTROL = 0x20
    CODEC_MASK = 0x07
    MAX_CODEC = 4  # Compression.ZSTD: codec ids 0..4 are defined
    TIMESTAMP_TYPE = 0x08  # the LogAppendTime attribute bit
    MAX_BATCHES = 64  # more in one request: the Python path (v3+ produce requests carry one)
    OFFSET_ENTRY = 8  # relative offset, position
    TIME_ENTRY = 12  # timestamp, relative offset
    GIL_KEPT_BYTES = 64 * 1024  # a request's records up to this size are written with the GIL

cdef int64_t INT32_MAX = 2147483647
cdef int64_t NO_TIMESTAMP = -1


cdef int _write(int fd, unsigned char *data, Py_ssize_t end, int64_t at) noexcept nogil:
    """pwrite ``end`` bytes at ``at``, finishing short writes; 0, or the errno.

    Called with the GIL held for writes up to ``GIL_KEPT_BYTES``: one into the page cache
    takes a microsecond or two, and releasing the GIL for it let any other thread that
    wanted the GIL take it, the appending thread (the broker's event loop) then waiting
    to get it back, up to the 5 ms switch interval while that thread runs Python code:
    with one busy Python thread beside it, a one-record append took 9-15 us of wall time
    (once 59 us) instead of 5-6 us (``python -m bench.produce_requests --mode gil``;
    docs/BENCHMARKS.md, issue 19 session 7). Larger writes release it, as os.pwrite does."""
    cdef Py_ssize_t done = 0
    cdef ssize_t written
    while done < end:
        written = pwrite(fd, data + done, end - done, <off_t>(at + done))
        if written < 0:
            if errno == EINTR:
                continue
            return errno
        if written == 0:  # no progress: report it rather than spin
            return EIO
        done += written
    return 0


cdef inline void _put(object info, Py_ssize_t i, object value):
    Py_INCREF(value)  # PyTuple_SET_ITEM takes the reference
    PyTuple_SET_ITEM(info, i, value)


cdef struct Batch:
    Py_ssize_t position  # within the request
    Py_ssize_t size
    int64_t base_offset
    int64_t last_offset
    int64_t max_timestamp  # after LogAppendTime
    int32_t records


cdef class ActiveSegmentAppender:
    """Appends common-case client requests to a log's active segment; see the module doc.

    One per ``PartitionLog``. It binds to the active segment and the config on first use
    and binds again when either changed (a roll, a truncation, a config update).

    Args:
        log: the ``PartitionLog``.
        crc: ``crc32c.crc32c``.
        info_type: ``LogAppendInfo`` (allocated as its tuple type, then filled in).
        wall_clock: ``core.clock.now_ms``: when the log's clock is this function, the time
            is read here with ``clock_gettime`` (the same milliseconds) instead of calling it.
        pending_bytes: ``abstract_index.PENDING_BYTES``.
    """

    # The log and what is fixed for its life (its clock and producer state are set once,
    # in its constructor).
    cdef object log, producer_state, clock, crc, info_type
    cdef object lock_acquire, lock_release
    cdef bint wall_clock
    cdef Py_ssize_t pending_bytes
    # The binding: the active segment and config it was made for, and what they fix.
    cdef object segment, config, file, offset_index, time_index
    cdef object oi_acquire, oi_release, ti_acquire, ti_release
    cdef array relatives, positions
    cdef bytearray oi_pending, ti_pending
    cdef int fd
    cdef int64_t base_offset, segment_bytes, roll_ms, index_interval, max_message_bytes
    cdef int64_t after_max_ms, flush_messages
    cdef bint log_append_time, always_python

    def __init__(self, log, crc, info_type, wall_clock, Py_ssize_t pending_bytes):
        self.log = log
        self.producer_state = log.producer_state
        self.clock = log.clock
        self.wall_clock = log.clock is wall_clock
        self.lock_acquire = log.lock.acquire
        self.lock_release = log.lock.release
        self.crc = crc
        self.info_type = info_type
        self.pending_bytes = pending_bytes

    cdef int _bind(self, object segment, object config) except -1:
        """Take the active segment and config (lock held)."""
        self.segment = None  # unbound until every step below succeeded
        segment.load_append_state()
        offset_index, time_index = segment.offset_index, segment.time_index
        relatives, positions = offset_index._relatives, offset_index._positions
        if relatives.typecode != "i" or positions.typecode != "i":
            raise ValueError("the offset index keeps its entries in int32 arrays")
        if not offset_index.writable or not time_index.writable:
            raise ValueError(f"the indexes of segment {segment.base_offset} are read-only")
        before = config.message_timestamp_before_max_ms
        after = config.message_timestamp_after_max_ms
        # Where every batch has records to decode (core.log.record_validation), the Python
        # path always runs; so it does for bounds beyond a long (no Kafka config has them).
        self.always_python = bool(
            config.compact
            or (not config.log_append_time and before != 2**63 - 1)
            or not -(2**63) <= after < 2**63
            or not -(2**63) <= config.flush_messages < 2**63
        )
        self.after_max_ms = 0 if self.always_python else after
        self.flush_messages = 0 if self.always_python else config.flush_messages
        self.file = segment.log
        self.fd = segment.log._fd
        self.offset_index, self.time_index = offset_index, time_index
        self.oi_acquire, self.oi_release = offset_index._lock.acquire, offset_index._lock.release
        self.ti_acquire, self.ti_release = time_index._lock.acquire, time_index._lock.release
        self.relatives, self.positions = relatives, positions
        self.oi_pending, self.ti_pending = offset_index._pending, time_index._pending
        self.base_offset = segment.base_offset
        self.index_interval = segment.index_interval_bytes
        self.segment_bytes = config.segment_bytes
        self.roll_ms = config.segment_ms - segment.rolling_jitter_ms
        self.max_message_bytes = config.max_message_bytes
        self.log_append_time = config.log_append_time
        self.config = config
        self.segment = segment
        return 0

    def append(self, object buf, long long epoch):
        """Append the client batches of ``buf`` (patched in place) as ``epoch``'s leader,
        under the log's lock.

        Args:
            buf: the request's records; must be a writable buffer.
            epoch: the leader epoch.

        Returns:
            The ``LogAppendInfo``; None when the request takes the Python path, with nothing
            changed.

        Raises:
            KafkaStorageError: the write failed (the batches are patched, nothing appended).
        """
        cdef Py_buffer view
        cdef object log = self.log, segment, config
        cdef list segments
        cdef int64_t now
        cdef timespec ts
        if not -2147483648 <= epoch <= 2147483647:
            return None
        try:
            PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
        except (BufferError, TypeError):
            return None  # read-only or not a buffer: the Python path copies or refuses it
        try:
            self.lock_acquire()
            try:
                # A closed log, a new leader epoch (the epoch cache is written after the
                # append): the Python path.
                if log._closed or epoch != log._latest_epoch:
                    return None
                segments = log._segments
                segment = segments[len(segments) - 1]
                config = log.config
                if segment is not self.segment or config is not self.config:
                    self._bind(segment, config)
                if self.always_python:
                    return None
                if self.wall_clock:
                    clock_gettime(CLOCK_REALTIME, &ts)
                    now = <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
                else:
                    now = self.clock()
                return self._append(<unsigned char *>view.buf, view.len, <int32_t>epoch, now)
            finally:
                self.lock_release()
        finally:
            PyBuffer_Release(&view)

    cdef object _append(self, unsigned char *data, Py_ssize_t end, int32_t epoch, int64_t now):
        cdef Batch batches[MAX_BATCHES]
        cdef Batch *b
        cdef Py_ssize_t position = 0, size, count = 0, i
        cdef unsigned char *h
        cdef int32_t length, delta, records_in_batch
        cdef int16_t attributes
        cdef object log = self.log
        cdef int64_t next_offset = log._log_end_offset
        cdef int64_t batch_ts, max_ts = NO_TIMESTAMP, offset_of_max_ts = next_offset
        cdef int64_t offset = next_offset, records = 0, file_size, waited, rolling, unflushed
        cdef int64_t seg_max_ts, seg_max_ts_offset, since, start_max_ts
        cdef Py_ssize_t oi_entries, oi_max_entries
        cdef int64_t latest_allowed
        cdef bint append_time = self.log_append_time and now >= 0
        cdef bint create_time = not self.log_append_time
        cdef int error = 0
        cdef object rolling_obj, max_ts_obj
        if end == 0 or end > self.segment_bytes:
            return None
        # Java's long arithmetic, as core.log.record_validation's bound.
        latest_allowed = <int64_t>(<uint64_t>now + <uint64_t>self.after_max_ms)

        # 1. Validate every batch; nothing changes until all of them pass.
        while position < end:
            if count == MAX_BATCHES or end - position < HEADER_SIZE:
                return None
            h = data + position
            length = be32(h + 8)
            size = <Py_ssize_t>length + LOG_OVERHEAD
            if size > self.max_message_bytes:
                return None
            if length < HEADER_SIZE - LOG_OVERHEAD or position + size > end:
                return None
            if <int8_t>h[16] != MAGIC_V2:
                return None
            delta = be32(h + 23)
            records_in_batch = be32(h + 57)
            if delta < 0 or records_in_batch <= 0 or <int64_t>delta + 1 != records_in_batch:
                return None
            attributes = be16(h + 21)
            if attributes & (CONTROL | TIMESTAMP_TYPE) or (attributes & CODEC_MASK) > MAX_CODEC:
                return None
            if be64(h + 43) > -1:  # a producer id: idempotence checks in Python
                return None
            batch_ts = be64(h + 35)
            if create_time and batch_ts > latest_allowed:
                return None  # its records must be checked against the bound
            if <uint32_t>self.crc(
                PyMemoryView_FromMemory(<char *>h + 21, size - 21, PyBUF_READ)
            ) != beu32(h + 17):
                return None
            b = &batches[count]
            b.position = position
            b.size = size
            b.base_offset = offset
            b.last_offset = offset + delta
            b.max_timestamp = now if append_time else batch_ts
            b.records = records_in_batch
            if b.max_timestamp > max_ts:
                max_ts = b.max_timestamp
                offset_of_max_ts = b.last_offset
            records += records_in_batch
            offset = b.last_offset + 1
            count += 1
            position += size

        # 2. The roll rule (LogSegment.should_roll, cheapest tests first): a roll, or state
        # not loaded yet, is the Python path's.
        file_size = self.file._size
        if file_size > self.segment_bytes - end:
            return None
        if not 0 <= offset - 1 - self.base_offset <= INT32_MAX:
            return None
        # The entry counts change only under the log's lock, which this call holds.
        oi_entries = self.offset_index._entries
        oi_max_entries = self.offset_index._max_entries
        if oi_entries >= oi_max_entries:
            return None
        if self.time_index._entries >= self.time_index._max_entries - 1:
            return None
        if file_size > 0:
            rolling_obj = self.segment._rolling_based_timestamp
            if rolling_obj is None:
                return None
            rolling = rolling_obj
            if rolling >= 0:
                waited = max_ts - rolling  # max_ts >= -1: no overflow
            else:
                waited = now - <int64_t>self.segment.created_ms
            if waited > self.roll_ms:
                return None
        max_ts_obj = self.segment._max_ts  # (timestamp, offset), or None: not loaded
        if max_ts_obj is None:
            return None

        # 3. Patch offsets, epoch and LogAppendTime in place (assign_offsets).
        for i in range(count):
            b = &batches[i]
            h = data + b.position
            put64(h, b.base_offset)
            put32(h + 12, <uint32_t>epoch)
            if append_time:
                h[22] = h[22] | TIMESTAMP_TYPE  # the low byte of the attributes
                put64(h + 35, now)
                put32(h + 17, <uint32_t>self.crc(
                    PyMemoryView_FromMemory(<char *>h + 21, b.size - 21, PyBUF_READ)
                ))

        # 4. The write (FileRecords.append); the buffer stays exported. A small write keeps
        # the GIL: see _write.
        if end <= GIL_KEPT_BYTES:
            error = _write(self.fd, data, end, file_size)
        else:
            with nogil:
                error = _write(self.fd, data, end, file_size)
        if error:
            raise KafkaStorageError(
                f"write to {self.file.path} failed: {OSError(error, os.strerror(error))}"
            )
        self.file._size = file_size + end

        # 5. The indexes (LogSegment.append and _index_batches).
        if file_size == 0 and batches[0].max_timestamp != NO_TIMESTAMP:
            self.segment._rolling_based_timestamp = batches[0].max_timestamp
        seg_max_ts = start_max_ts = (<tuple>max_ts_obj)[0]
        seg_max_ts_offset = (<tuple>max_ts_obj)[1]
        since = self.segment._bytes_since_last_index_entry
        for i in range(count):
            b = &batches[i]
            if b.max_timestamp > seg_max_ts:
                seg_max_ts = b.max_timestamp
                seg_max_ts_offset = b.last_offset
            if since > self.index_interval:
                oi_entries = self._offset_entry(
                    b.last_offset, file_size + b.position, oi_entries, oi_max_entries
                )
                if seg_max_ts > self.time_index._last_timestamp:
                    self._time_entry(seg_max_ts, seg_max_ts_offset)
                since = 0
            since += b.size
        self.segment._bytes_since_last_index_entry = since
        if seg_max_ts != start_max_ts:
            self.segment._max_ts = (seg_max_ts, seg_max_ts_offset)

        # 6. The log's bookkeeping (PartitionLog._write and _append_validated).
        end_offset = offset  # one int object for both
        log._log_end_offset = end_offset
        self.producer_state._map_end_offset = end_offset  # update_map_end_offset
        unflushed = log._unflushed_messages
        unflushed += records
        log._unflushed_messages = unflushed
        if unflushed >= self.flush_messages and log.inline_flush:
            log.flush()
        # LogAppendInfo(...) without tuple.__new__'s lookup and copies: allocated as its
        # tuple type allocates it (tp_alloc), then filled in.
        info = PyType_GenericAlloc(<PyTypeObject *>self.info_type, 11)
        _put(info, 0, next_offset)
        _put(info, 1, offset - 1)
        _put(info, 2, epoch)
        _put(info, 3, max_ts)
        _put(info, 4, offset_of_max_ts)
        _put(info, 5, now if self.log_append_time else -1)
        _put(info, 6, log.log_start_offset)
        _put(info, 7, end)
        _put(info, 8, count)
        _put(info, 9, records)
        _put(info, 10, False)
        return info

    cdef Py_ssize_t _offset_entry(self, int64_t offset, int64_t position, Py_ssize_t entries,
                                  Py_ssize_t max_entries) except -1:
        """``OffsetIndex.append(offset, position)`` to an index of ``entries`` entries and
        room for ``max_entries``; returns the new count. The method itself runs to raise.

        The index is open: it closes only with its segment, which is then no longer the
        log's active segment, or with the log (both checked by ``append``).
        """
        cdef object index = self.offset_index
        cdef Py_ssize_t used
        cdef int64_t relative = offset - self.base_offset
        cdef unsigned char *p
        self.oi_acquire()
        try:
            if (
                entries >= max_entries
                or (entries and offset <= <int64_t>index._last_offset)
                or not 0 <= relative <= INT32_MAX
                or not 0 <= position <= INT32_MAX
            ):
                index.append(offset, position)
                return index._entries
            used = PyByteArray_GET_SIZE(self.oi_pending)
            if used == 0:
                index._pending_from = entries
            PyByteArray_Resize(self.oi_pending, used + OFFSET_ENTRY)
            p = <unsigned char *>PyByteArray_AS_STRING(self.oi_pending) + used
            put32(p, <uint32_t>relative)
            put32(p + 4, <uint32_t>position)
            index._entries = entries + 1
            if used + OFFSET_ENTRY >= self.pending_bytes:
                index._write_pending()
            index._last_offset = offset
            # Nothing exports these arrays' buffers (bisect does not), so they may grow here.
            resize_smart(self.relatives, entries + 1)
            self.relatives.data.as_ints[entries] = <int>relative
            resize_smart(self.positions, entries + 1)
            self.positions.data.as_ints[entries] = <int>position
            return entries + 1
        finally:
            self.oi_release()

    cdef void _time_entry(self, int64_t timestamp, int64_t offset) except *:
        """``TimeIndex.maybe_append(timestamp, offset)``; the method itself runs to raise."""
        cdef object index = self.time_index
        cdef Py_ssize_t entries, used, max_entries
        cdef int64_t relative = offset - self.base_offset, last_ts
        cdef unsigned char *p
        self.ti_acquire()
        try:
            entries = index._entries
            max_entries = index._max_entries
            last_ts = index._last_timestamp
            if (
                index._closed
                or entries >= max_entries - 1
                or (entries and (offset < <int64_t>index._last_entry_offset or timestamp < last_ts))
                or not 0 <= relative <= INT32_MAX
            ):
                index.maybe_append(timestamp, offset)
                return
            if timestamp <= last_ts:
                return
            used = PyByteArray_GET_SIZE(self.ti_pending)
            if used == 0:
                index._pending_from = entries
            PyByteArray_Resize(self.ti_pending, used + TIME_ENTRY)
            p = <unsigned char *>PyByteArray_AS_STRING(self.ti_pending) + used
            put64(p, timestamp)
            put32(p + 8, <uint32_t>relative)
            index._entries = entries + 1
            if used + TIME_ENTRY >= self.pending_bytes:
                index._write_pending()
            index._last_timestamp = timestamp
            index._last_entry_offset = offset
        finally:
            self.ti_release()
