# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The compiled record decoder: the per-record loop of ``core.records.record`` in C.

Built by setup.py (``make native``, ``pip install``). ``core.records.record`` calls it when
it imported (see ``core.records.native``) and falls back to its pure-Python loop otherwise.

One loop (``_parse``) reads the records and hands each field to a sink: ``_ListSink`` makes
the Python lists of ``decode_records`` (keys and values as bytes, headers as tuples);
``ColumnBuffers`` appends to Arrow's memory layout (offsets, validity bits, data) for the
archive reader, with no Python object per record.

It decides, record by record, exactly what the Python loop decides (the same varint rules,
the same bounds, null for any negative length, lenient UTF-8 for header keys), and returns
the same lists. It does not word errors: on any malformed input it returns None and the
caller runs the Python loop over the same bytes, which raises the error with its message.
The tests run both over the same inputs, valid and not, and compare the results.

Everything is bounded by the length of ``data``: no read outside the buffer whatever the
varints say.
"""

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport (
    INT32_MAX, INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t,
)
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

cdef extern from *:
    """
    static inline int tierlog_add_overflows(long long a, long long b, long long *out) {
        return __builtin_add_overflow(a, b, out);
    }
    """
    int tierlog_add_overflows(long long a, long long b, long long *out)

cdef enum:
    MIN_RECORD_SIZE = 7  # seven one-byte fields: null key and value, no headers
    MAX_VARINT_BYTES = 5
    MAX_VARLONG_BYTES = 10

cdef tuple NO_HEADERS = ()


cdef inline bint _leb128(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos,
                         int max_bytes, uint64_t *raw) noexcept nogil:
    """Unsigned LEB128 at pos[0], at most max_bytes long; False when malformed or cut."""
    cdef Py_ssize_t i = pos[0]
    cdef Py_ssize_t start = i
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if i >= end:
            return False
        b = data[i]
        i += 1
        if shift < 64:
            result |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            pos[0] = i
            raw[0] = result
            return True
        shift += 7
        if i - start >= max_bytes:
            return False


cdef inline bint _varint(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos,
                         int64_t *value) noexcept nogil:
    """Zigzag int32 (Kafka's readVarint): the low 32 bits of a 5-byte encoding count."""
    cdef uint64_t raw
    cdef uint32_t r32
    if not _leb128(data, end, pos, MAX_VARINT_BYTES, &raw):
        return False
    r32 = <uint32_t>raw
    value[0] = <int32_t>((r32 >> 1) ^ (<uint32_t>0 - (r32 & 1)))
    return True


cdef inline bint _varlong(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos,
                          int64_t *value) noexcept nogil:
    """Zigzag int64 (Kafka's readVarlong)."""
    cdef uint64_t raw
    if not _leb128(data, end, pos, MAX_VARLONG_BYTES, &raw):
        return False
    value[0] = <int64_t>((raw >> 1) ^ (<uint64_t>0 - (raw & 1)))
    return True


cdef inline object _sum(long long base, long long delta):
    """base + delta as a Python int; past int64 (only from corrupt headers) as Python does."""
    cdef long long out
    if tierlog_add_overflows(base, delta, &out):
        return base + <object>delta
    return out



# -- sinks ---------------------------------------------------------------------------------
cdef class _Sink:
    """Where ``_parse`` puts each record's fields. Lengths < 0 mean null."""

    cdef int key(self, const unsigned char *p, int64_t n) except -1:
        return 0

    cdef int value(self, const unsigned char *p, int64_t n) except -1:
        return 0

    cdef int header(self, const unsigned char *k, int64_t kn,
                    const unsigned char *v, int64_t vn) except -1:
        return 0

    cdef int end_record(self, long long offset_base, int64_t offset_delta,
                        long long ts_base, int64_t ts_delta, int64_t n_headers) except -1:
        return 0


cdef class _ListSink(_Sink):
    cdef list offsets, timestamps, keys, values, headers, current

    def __cinit__(self):
        self.offsets, self.timestamps = [], []
        self.keys, self.values, self.headers = [], [], []
        self.current = None

    cdef int key(self, const unsigned char *p, int64_t n) except -1:
        self.keys.append(None if n < 0 else PyBytes_FromStringAndSize(<const char*>p, n))
        return 0

    cdef int value(self, const unsigned char *p, int64_t n) except -1:
        self.values.append(None if n < 0 else PyBytes_FromStringAndSize(<const char*>p, n))
        return 0

    cdef int header(self, const unsigned char *k, int64_t kn,
                    const unsigned char *v, int64_t vn) except -1:
        if self.current is None:
            self.current = []
        self.current.append((
            PyUnicode_DecodeUTF8(<const char*>k, kn, "replace"),
            None if vn < 0 else PyBytes_FromStringAndSize(<const char*>v, vn),
        ))
        return 0

    cdef int end_record(self, long long offset_base, int64_t offset_delta,
                        long long ts_base, int64_t ts_delta, int64_t n_headers) except -1:
        if n_headers == 0:
            self.headers.append(NO_HEADERS)
        else:
            self.headers.append(tuple(self.current))
            self.current = None
        self.offsets.append(_sum(offset_base, offset_delta))
        self.timestamps.append(_sum(ts_base, ts_delta))
        return 0


cdef struct Buf:
    char *data
    Py_ssize_t size
    Py_ssize_t cap


cdef int _reserve(Buf *b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap
    cdef char *grown
    if b.size + extra <= b.cap:
        return 0
    cap = max(b.cap * 2, b.size + extra, 4096)
    grown = <char*>realloc(b.data, cap)
    if grown == NULL:
        raise MemoryError()
    b.data, b.cap = grown, cap
    return 0


cdef inline int _put(Buf *b, const void *p, Py_ssize_t n) except -1:
    if b.size + n > b.cap:
        _reserve(b, n)
    if n > 0:
        memcpy(b.data + b.size, p, n)
    b.size += n
    return 0


cdef inline int _i32(Buf *b, int32_t v) except -1:
    return _put(b, &v, 4)


cdef inline int _i64(Buf *b, int64_t v) except -1:
    return _put(b, &v, 8)


cdef inline int _u8(Buf *b, uint8_t v) except -1:
    return _put(b, &v, 1)


cdef char *_FORMAT_B = "B"


cdef class Memory:
    """A buffer taken from ``ColumnBuffers``: read-only, freed with the last reference
    (Arrow keeps one while an array uses it)."""

    cdef char *data
    cdef Py_ssize_t size
    cdef Py_ssize_t shape[1]

    def __dealloc__(self):
        free(self.data)

    def __len__(self):
        return self.size

    def __getbuffer__(self, Py_buffer *view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("column memory is read-only")
        self.shape[0] = self.size
        view.buf = self.data
        view.obj = self
        view.len = self.size
        view.readonly = 1
        view.itemsize = 1
        view.format = _FORMAT_B if flags & PyBUF_FORMAT else NULL
        view.ndim = 1
        view.shape = self.shape if flags & PyBUF_ND else NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass


cdef Memory _take(Buf *b):
    """The buffer's memory as a ``Memory``; the buffer is left empty."""
    cdef Memory m = Memory.__new__(Memory)
    if b.data == NULL:  # never written: Arrow wants an address even for no bytes
        _reserve(b, 1)
    m.data, m.size = b.data, b.size
    b.data, b.size, b.cap = NULL, 0, 0
    return m


cdef bytes _bitmap(Buf *flags, Py_ssize_t n):
    """One byte per row (0 or 1) as Arrow's validity bitmap (LSB first)."""
    cdef bytearray out = bytearray((n + 7) // 8)
    cdef unsigned char *bits = out
    cdef Py_ssize_t i
    for i in range(n):
        if flags.data[i]:
            bits[i >> 3] |= 1 << (i & 7)
    return bytes(out)


cdef bint _ascii(const unsigned char *p, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if p[i] >= 0x80:
            return False
    return True


# Buffer indexes in ColumnBuffers.bufs.
cdef enum:
    B_OFFSET, B_TIMESTAMP, B_TS_TYPE, B_EPOCH, B_PID
    B_KEY_VALID, B_KEY_OFFSETS, B_KEY_DATA
    B_VALUE_VALID, B_VALUE_OFFSETS, B_VALUE_DATA
    B_HEADER_ENDS, B_HKEY_OFFSETS, B_HKEY_DATA
    B_HVALUE_VALID, B_HVALUE_OFFSETS, B_HVALUE_DATA
    B_COUNT


cdef class ColumnBuffers(_Sink):
    """Decoded records in Arrow's memory layout, appended batch by batch.

    Columns: offset, timestamp (ms), timestampType, leaderEpoch, producerId (fixed width);
    key and value (binary: validity, int32 offsets, data); headers (list offsets over
    header key strings and header value binaries). ``buffers()`` hands them out as bytes.
    A batch either appends all its records or nothing.

    ``data_capacity``: bytes reserved for values at once (allocated, not touched), so that
    a caller who cuts its batches near a known size never pays a copy of the values buffer
    when it doubles. ``timestamp_scale``: what timestamps (milliseconds) are multiplied by
    as they are written, 1000 for Arrow's microseconds (wrapping at int64 as Arrow's
    unchecked multiply does); ``offset_bounds``: the lowest and highest offset appended.
    """

    cdef Buf bufs[B_COUNT]
    cdef readonly Py_ssize_t rows
    cdef Py_ssize_t key_nulls, value_nulls, hvalue_nulls, header_count
    cdef int32_t ts_type, epoch
    cdef int64_t pid, scale, min_offset, max_offset
    cdef bint taken

    def __cinit__(self, Py_ssize_t data_capacity=0, int64_t timestamp_scale=1):
        cdef int i
        for i in range(B_COUNT):
            self.bufs[i].data = NULL
            self.bufs[i].size = 0
            self.bufs[i].cap = 0
        if data_capacity > 0:
            _reserve(&self.bufs[B_VALUE_DATA], data_capacity)
        self.rows = 0
        self.scale = timestamp_scale
        self.min_offset, self.max_offset = INT64_MAX, INT64_MIN
        self.key_nulls = self.value_nulls = self.hvalue_nulls = self.header_count = 0
        for i in (B_KEY_OFFSETS, B_VALUE_OFFSETS, B_HEADER_ENDS, B_HKEY_OFFSETS,
                  B_HVALUE_OFFSETS):
            _i32(&self.bufs[i], 0)

    def __dealloc__(self):
        cdef int i
        for i in range(B_COUNT):
            free(self.bufs[i].data)

    @property
    def data_bytes(self):
        """The largest of the variable-length data buffers (their offsets are int32)."""
        return max(self.bufs[B_KEY_DATA].size, self.bufs[B_VALUE_DATA].size,
                   self.bufs[B_HKEY_DATA].size, self.bufs[B_HVALUE_DATA].size)

    @property
    def null_counts(self):
        """(keys, values, header values) that are null."""
        return self.key_nulls, self.value_nulls, self.hvalue_nulls

    @property
    def header_rows(self):
        return self.header_count

    @property
    def timestamp_scale(self):
        return self.scale

    @property
    def offset_bounds(self):
        """(lowest, highest) offset of the rows, or None without rows."""
        return (self.min_offset, self.max_offset) if self.rows else None

    def decode(self, const unsigned char[::1] data, Py_ssize_t count, long long base_offset,
               long long base_timestamp, log_append_time, int timestamp_type, int epoch,
               long long producer_id):
        """Append a batch's records section; False (and nothing appended) when malformed.

        ``log_append_time``: the batch's maxTimestamp for a LOG_APPEND_TIME batch (every
        record gets it), or None.
        """
        cdef Py_ssize_t sizes[B_COUNT]
        cdef Py_ssize_t rows = self.rows, header_count = self.header_count
        cdef Py_ssize_t nulls[3]
        cdef Py_ssize_t i
        cdef int64_t *ts
        cdef int64_t lat, bounds[2]
        if self.taken:
            raise RuntimeError("these columns were handed over by buffers(): use new ones")
        # Keys and values take at most the batch's bytes; header keys up to three times
        # that (each malformed UTF-8 byte becomes a 3-byte U+FFFD).
        if 3 * data.shape[0] > INT32_MAX - self.data_bytes:
            raise OverflowError("the batch would overflow the column buffers: flush first")
        for i in range(B_COUNT):
            sizes[i] = self.bufs[i].size
        nulls[0], nulls[1], nulls[2] = self.key_nulls, self.value_nulls, self.hvalue_nulls
        bounds[0], bounds[1] = self.min_offset, self.max_offset
        self.ts_type, self.epoch, self.pid = timestamp_type, epoch, producer_id
        self._reserve_for(data.shape[0], min(count, data.shape[0] // MIN_RECORD_SIZE))
        ok = False
        try:
            ok = _parse(data, count, base_offset, base_timestamp, self)
        finally:
            if not ok:
                self._rollback(sizes, rows, header_count, nulls)
                self.min_offset, self.max_offset = bounds[0], bounds[1]
        if not ok:
            return False
        if log_append_time is not None:
            lat = <int64_t>(<uint64_t>(<long long>log_append_time) * <uint64_t>self.scale)
            ts = <int64_t*>(self.bufs[B_TIMESTAMP].data)
            for i in range(rows, self.rows):
                ts[i] = lat
        return True

    cdef int _reserve_for(self, Py_ssize_t nbytes, Py_ssize_t rows) except -1:
        """Room for a batch of ``rows`` records in ``nbytes``: one growth per batch at most,
        not one per record (keys and values together take less than the batch's bytes)."""
        cdef int i
        if rows <= 0:
            return 0
        _reserve(&self.bufs[B_VALUE_DATA], nbytes)
        for i in (B_OFFSET, B_TIMESTAMP, B_PID):
            _reserve(&self.bufs[i], rows * 8)
        for i in (B_TS_TYPE, B_EPOCH, B_KEY_OFFSETS, B_VALUE_OFFSETS, B_HEADER_ENDS):
            _reserve(&self.bufs[i], rows * 4)
        for i in (B_KEY_VALID, B_VALUE_VALID):
            _reserve(&self.bufs[i], rows)
        return 0

    cdef void _rollback(self, Py_ssize_t *sizes, Py_ssize_t rows, Py_ssize_t header_count,
                        Py_ssize_t *nulls) noexcept:
        cdef int i
        for i in range(B_COUNT):
            self.bufs[i].size = sizes[i]
        self.rows, self.header_count = rows, header_count
        self.key_nulls, self.value_nulls, self.hvalue_nulls = nulls[0], nulls[1], nulls[2]

    def offsets_from(self, Py_ssize_t start):
        """The offsets of rows ``start`` .. the last, as a list."""
        cdef int64_t *off = <int64_t*>(self.bufs[B_OFFSET].data)
        return [off[i] for i in range(start, self.rows)]

    def buffers(self):
        """Every buffer by name, handed over without a copy (each a ``Memory``); the
        validity bitmaps are LSB first, and only there for a column with nulls. The columns
        are then empty: use them no more."""
        def take(int i):
            return _take(&self.bufs[i])
        out = {}
        if self.key_nulls:
            out["key_validity"] = _bitmap(&self.bufs[B_KEY_VALID], self.rows)
        if self.value_nulls:
            out["value_validity"] = _bitmap(&self.bufs[B_VALUE_VALID], self.rows)
        if self.hvalue_nulls:
            out["header_value_validity"] = _bitmap(&self.bufs[B_HVALUE_VALID],
                                                   self.header_count)
        out.update({
            "offset": take(B_OFFSET),
            "timestamp": take(B_TIMESTAMP),
            "timestamp_type": take(B_TS_TYPE),
            "leader_epoch": take(B_EPOCH),
            "producer_id": take(B_PID),
            "key_offsets": take(B_KEY_OFFSETS),
            "key_data": take(B_KEY_DATA),
            "value_offsets": take(B_VALUE_OFFSETS),
            "value_data": take(B_VALUE_DATA),
            "header_ends": take(B_HEADER_ENDS),
            "header_key_offsets": take(B_HKEY_OFFSETS),
            "header_key_data": take(B_HKEY_DATA),
            "header_value_offsets": take(B_HVALUE_OFFSETS),
            "header_value_data": take(B_HVALUE_DATA),
        })
        self.taken = True
        return out

    cdef int key(self, const unsigned char *p, int64_t n) except -1:
        if n < 0:
            self.key_nulls += 1
            _u8(&self.bufs[B_KEY_VALID], 0)
        else:
            _u8(&self.bufs[B_KEY_VALID], 1)
            _put(&self.bufs[B_KEY_DATA], p, n)
        _i32(&self.bufs[B_KEY_OFFSETS], <int32_t>self.bufs[B_KEY_DATA].size)
        return 0

    cdef int value(self, const unsigned char *p, int64_t n) except -1:
        if n < 0:
            self.value_nulls += 1
            _u8(&self.bufs[B_VALUE_VALID], 0)
        else:
            _u8(&self.bufs[B_VALUE_VALID], 1)
            _put(&self.bufs[B_VALUE_DATA], p, n)
        _i32(&self.bufs[B_VALUE_OFFSETS], <int32_t>self.bufs[B_VALUE_DATA].size)
        return 0

    cdef int header(self, const unsigned char *k, int64_t kn,
                    const unsigned char *v, int64_t vn) except -1:
        cdef const char *utf8
        cdef Py_ssize_t utf8_len
        cdef object text
        if _ascii(k, kn):
            _put(&self.bufs[B_HKEY_DATA], k, kn)
        else:
            # Lenient UTF-8, as the Python decoder: malformed bytes become U+FFFD.
            text = PyUnicode_DecodeUTF8(<const char*>k, kn, "replace")
            encoded = (<str>text).encode("utf-8")
            _put(&self.bufs[B_HKEY_DATA], <const char*>encoded, len(encoded))
        _i32(&self.bufs[B_HKEY_OFFSETS], <int32_t>self.bufs[B_HKEY_DATA].size)
        if vn < 0:
            self.hvalue_nulls += 1
            _u8(&self.bufs[B_HVALUE_VALID], 0)
        else:
            _u8(&self.bufs[B_HVALUE_VALID], 1)
            _put(&self.bufs[B_HVALUE_DATA], v, vn)
        _i32(&self.bufs[B_HVALUE_OFFSETS], <int32_t>self.bufs[B_HVALUE_DATA].size)
        self.header_count += 1
        return 0

    cdef int end_record(self, long long offset_base, int64_t offset_delta,
                        long long ts_base, int64_t ts_delta, int64_t n_headers) except -1:
        cdef long long offset, ts
        if tierlog_add_overflows(offset_base, offset_delta, &offset):
            raise OverflowError(f"offset {offset_base} + {offset_delta} is past int64")
        if tierlog_add_overflows(ts_base, ts_delta, &ts):
            raise OverflowError(f"timestamp {ts_base} + {ts_delta} is past int64")
        _i64(&self.bufs[B_OFFSET], offset)
        _i64(&self.bufs[B_TIMESTAMP], <int64_t>(<uint64_t>ts * <uint64_t>self.scale))
        if offset < self.min_offset:
            self.min_offset = offset
        if offset > self.max_offset:
            self.max_offset = offset
        _i32(&self.bufs[B_TS_TYPE], self.ts_type)
        _i32(&self.bufs[B_EPOCH], self.epoch)
        _i64(&self.bufs[B_PID], self.pid)
        _i32(&self.bufs[B_HEADER_ENDS], <int32_t>self.header_count)
        self.rows += 1
        return 0


# -- the loop ------------------------------------------------------------------------------
cdef bint _parse(const unsigned char[::1] data, Py_ssize_t count, long long base_offset,
                 long long base_timestamp, _Sink sink) except -1:
    """Read ``count`` records from ``data`` into ``sink``; False when malformed (the sink
    may then hold part of the batch: callers discard it)."""
    cdef Py_ssize_t end = data.shape[0]
    cdef Py_ssize_t pos = 0, body_end, p, avail
    cdef Py_ssize_t i
    cdef int64_t length, ts_delta, off_delta, size, n_headers, h, ksize, vsize
    # Everything below reads through this pointer, always below data + end.
    cdef const unsigned char *base = &data[0] if end > 0 else NULL
    cdef const unsigned char *kp
    if count < 0 or count > end // MIN_RECORD_SIZE:
        return False
    for i in range(count):
        if not _varint(base, end, &pos, &length):
            return False
        body_end = pos + length
        if length < MIN_RECORD_SIZE - 1 or body_end > end:
            return False
        pos += 1  # attributes: one byte, unused by Kafka
        if not _varlong(base, end, &pos, &ts_delta):
            return False
        if not _varint(base, end, &pos, &off_delta):
            return False
        if not _varint(base, end, &pos, &size):
            return False
        if size >= 0 and pos + size > body_end:
            return False
        sink.key(base + pos, size)
        if size > 0:
            pos += size
        if not _varint(base, end, &pos, &size):
            return False
        if size >= 0 and pos + size > body_end:
            return False
        sink.value(base + pos, size)
        if size > 0:
            pos += size
        if pos >= end:
            return False
        if base[pos] == 0:  # zigzag 0: no headers
            n_headers = 0
            pos += 1
        else:
            if not _varint(base, end, &pos, &n_headers):
                return False
            avail = body_end - pos
            # Each header takes at least two bytes.
            if n_headers < 0 or avail < 0 or n_headers > avail // 2:
                return False
            for h in range(n_headers):
                if not _varint(base, end, &pos, &ksize):
                    return False
                if ksize < 0 or pos + ksize > body_end:
                    return False
                kp = base + pos
                pos += ksize
                if not _varint(base, end, &pos, &vsize):
                    return False
                if vsize >= 0 and pos + vsize > body_end:
                    return False
                sink.header(kp, ksize, base + pos, vsize)
                if vsize > 0:
                    pos += vsize
        if pos != body_end:
            return False
        sink.end_record(base_offset, off_delta, base_timestamp, ts_delta, n_headers)
    if pos != end:
        return False
    return True


def decode_records(const unsigned char[::1] data, Py_ssize_t count, long long base_offset,
                   long long base_timestamp):
    """The records section ``data`` of a batch as ``(offsets, timestamps, keys, values,
    headers)`` lists, or None when the bytes are malformed in any way.

    Timestamps are base + delta (the caller applies LOG_APPEND_TIME).
    """
    cdef _ListSink sink = _ListSink()
    if not _parse(data, count, base_offset, base_timestamp, sink):
        return None
    return sink.offsets, sink.timestamps, sink.keys, sink.values, sink.headers


def flatten_headers(list headers):
    """Per-record header tuples as one list of keys, one of values, and the running end
    index after each record (``len(headers) + 1`` entries from 0): Arrow's list layout."""
    cdef list keys = [], values = [], ends = [0]
    cdef tuple record_headers, header
    cdef Py_ssize_t n = 0
    for record_headers in headers:
        for header in record_headers:
            keys.append(header[0])
            values.append(header[1])
            n += 1
        ends.append(n)
    return keys, values, ends
