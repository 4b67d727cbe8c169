# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled steps of a leader append: ``scan_client_batches`` and ``assign_offsets``.

Built by setup.py (``make native``, ``pip install``). The functions of the same names in
``core.records.batch`` call these when the module imported and run their pure-Python loops
otherwise (TIERLOG_PURE_PYTHON=1, or no compiler).

``scan_client_batches`` decides exactly what the Python loop decides (the same framing, magic, CRC-32C and client
rules, in the same order) and returns the same list, but it does not word errors: on any
invalid input it returns None and the caller runs the Python loop over the same bytes, which
raises the error Kafka's client would get, with its message. The tests run both over the
same inputs, valid and not, and compare.

The CRC-32C is the ``crc32c`` package's (hardware CRC), handed a memoryview of the checked
range: the one call into Python per batch.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t

from core.records._batch_format cimport (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    PyBUF_READ,
    PyMemoryView_FromMemory,
)
from core.records._bigendian cimport be16, be32, be64, beu32, put32, put64

cdef enum:
    CONTROL = 0x20
    CODEC_MASK = 0x07
    MAX_CODEC = 4  # Compression.ZSTD: codec ids 0..4 are defined
    TIMESTAMP_TYPE = 0x08  # the LogAppendTime attribute bit


cdef object _scan(const unsigned char *data, Py_ssize_t end, Py_ssize_t max_size, object crc):
    cdef Py_ssize_t position = 0, size
    cdef const unsigned char *h
    cdef int32_t length, delta, count, base_sequence
    cdef int16_t attributes
    cdef int64_t producer_id
    cdef uint32_t stored
    cdef list out = []
    if end == 0:
        return None
    while position < end:
        if end - position < HEADER_SIZE:
            return None
        h = data + position
        length = be32(h + 8)
        size = <Py_ssize_t>length + LOG_OVERHEAD
        # The order of the Python loop: too large (only a whole batch), then the structure
        # (minimum length, framing, magic, CRC), then the client rules.
        if size > max_size and position + size <= end:
            return None
        if length < HEADER_SIZE - LOG_OVERHEAD or position + size > end:
            return None
        if <int8_t>h[16] != MAGIC_V2:
            return None
        stored = beu32(h + 17)
        if <uint32_t>crc(PyMemoryView_FromMemory(<char *>h + 21, size - 21, PyBUF_READ)) != stored:
            return None
        delta = be32(h + 23)
        count = be32(h + 57)
        attributes = be16(h + 21)
        producer_id = be64(h + 43)
        base_sequence = be32(h + 53)
        if delta < 0 or count <= 0 or <int64_t>delta + 1 != count:
            return None
        if attributes & CONTROL:
            return None
        if producer_id > -1 and base_sequence < 0:
            return None
        if (attributes & CODEC_MASK) > MAX_CODEC:
            return None
        out.append((position, (
            be64(h), length, be32(h + 12), <int8_t>h[16], stored, attributes, delta,
            be64(h + 27), be64(h + 35), producer_id, be16(h + 51), base_sequence, count,
        )))
        position += size
    return out


def scan_client_batches(object buf, Py_ssize_t max_size, object crc):
    """``(position, header fields)`` of every batch of a produce request, as the Python
    ``scan_client_batches`` returns them; None when any batch is invalid (the caller then
    runs the Python loop, which raises the error).

    Args:
        buf: the request's records (any object with the buffer protocol).
        max_size: ``max.message.bytes``.
        crc: ``crc32c.crc32c``.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return _scan(<const unsigned char *>view.buf, view.len, max_size, crc)
    finally:
        PyBuffer_Release(&view)


def assign_offsets(object buf, list scanned, long long next_offset, int32_t epoch,
                   long long append_time, object crc, object batch_type):
    """What ``core.records.batch.assign_offsets`` does, in one C loop; see it for the
    arguments and the result. ``batch_type``: the class of the per-batch tuples."""
    cdef Py_buffer view
    cdef unsigned char *data
    cdef unsigned char *h
    cdef Py_ssize_t pos, size
    cdef long long last, batch_max_ts, max_ts = -1, offset_of_max_ts = next_offset
    cdef long long records = 0
    cdef tuple fields
    cdef list appended = []
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        data = <unsigned char *>view.buf
        for pos, fields in scanned:
            h = data + pos
            size = <Py_ssize_t>(<int32_t>beu32(h + 8)) + LOG_OVERHEAD
            if pos < 0 or size < HEADER_SIZE or pos + size > view.len:
                raise ValueError(f"batch at byte {pos} does not lie within the buffer")
            put64(h, next_offset)
            put32(h + 12, <uint32_t>epoch)
            last = next_offset + <int32_t>beu32(h + 23)
            batch_max_ts = be64(h + 35)
            if append_time >= 0:
                h[22] = h[22] | TIMESTAMP_TYPE  # the low byte of the attributes
                put64(h + 35, append_time)
                put32(h + 17, <uint32_t>crc(
                    PyMemoryView_FromMemory(<char *>h + 21, size - 21, PyBUF_READ)
                ))
                batch_max_ts = append_time
            if batch_max_ts > max_ts:
                max_ts = batch_max_ts
                offset_of_max_ts = last
            appended.append(tuple.__new__(batch_type, (pos, next_offset, last, batch_max_ts, size)))
            records += <int32_t>beu32(h + 57)
            next_offset = last + 1
        return appended, next_offset - 1, max_ts, offset_of_max_ts, records
    finally:
        PyBuffer_Release(&view)
