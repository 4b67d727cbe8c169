# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The compiled restore path of the RLMM cache: snapshot entries to columns, ids to rows.

Built by setup.py (``make native``, ``pip install``); loaded through ``rlmm.native``. Each
function has a pure-Python twin that decides exactly the same and returns the same values:
``rlmm.snapshot.decode_run_py`` for ``decode_run``, ``rlmm.segment_store``'s
``_IdTable._ids_absent_py`` / ``_add_ids_py`` for ``ids_absent`` / ``add_ids``. The tests
run both over the same inputs and compare (tests/rlmm/test_native.py).

Everything is bounded by the buffer's length: no read outside it whatever the lengths say.
"""

from cpython.array cimport array, clone, resize
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.object cimport Py_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp

from core.records._bigendian cimport be32, be64

# The usual entry (rlmm.snapshot's _ROW / _ROW_TXN): field offsets inside the entry.
cdef enum:
    ROW_SIZE = 76
    ROW_TXN_SIZE = 79
    AT_FRAME = 0
    AT_API = 1
    AT_VERSION = 2
    AT_ID = 3
    AT_START = 19
    AT_END = 27
    AT_BROKER = 35
    AT_MAX_TS = 39
    AT_EVENT_TS = 47
    AT_EPOCH_COUNT = 55
    AT_EPOCH = 56
    AT_EPOCH_START = 60
    AT_EPOCH_TAGS = 68
    AT_SIZE = 69
    AT_CUSTOM = 73
    AT_STATE = 74
    AT_TAGS = 75  # the tagged-field count (0), or TxnIndexEmpty's section 1, 0, 1
    AT_TXN_VALUE = 78
    SNAPSHOT_API_KEY = 3
    COPY_SEGMENT_FINISHED = 1

cdef array _Q = array("q")


def decode_run(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t max_rows):
    """See ``rlmm.snapshot.decode_run_py``."""
    cdef Py_ssize_t limit = buf.shape[0]
    cdef Py_ssize_t n = 0, length, i
    cdef const uint8_t *e
    cdef int64_t start, prev = 0
    cdef bint txn
    cdef array start_c = clone(_Q, max_rows, False)
    cdef array end_c = clone(_Q, max_rows, False)
    cdef array broker_c = clone(_Q, max_rows, False)
    cdef array ts_c = clone(_Q, max_rows, False)
    cdef array evt_c = clone(_Q, max_rows, False)
    cdef array size_c = clone(_Q, max_rows, False)
    cdef array epoch_c = clone(_Q, max_rows, False)
    cdef bytearray txn_c = bytearray(max_rows)
    cdef list ids = []
    cdef uint8_t *txn_p = <uint8_t *>PyByteArray_AS_STRING(txn_c)
    while n < max_rows and limit - pos >= 4:
        length = be32(&buf[pos])
        if length != ROW_SIZE and length != ROW_TXN_SIZE:
            break
        if limit - pos - 4 < length:
            break
        e = &buf[pos + 4]
        if length == ROW_SIZE:
            if e[AT_TAGS] != 0:
                break
            txn = False
        else:
            if e[AT_TAGS] != 1 or e[AT_TAGS + 1] != 0 or e[AT_TAGS + 2] != 1:
                break
            txn = e[AT_TXN_VALUE] != 0
        start = be64(e + AT_START)
        if (
            e[AT_FRAME] != 1
            or e[AT_API] != SNAPSHOT_API_KEY
            or e[AT_VERSION] > 1
            or e[AT_EPOCH_COUNT] != 2
            or e[AT_EPOCH_TAGS] != 0
            or e[AT_CUSTOM] != 0
            or e[AT_STATE] != COPY_SEGMENT_FINISHED
            or be64(e + AT_END) < start
            or be64(e + AT_EPOCH_START) != start
            or (n > 0 and start <= prev)
        ):
            break
        ids.append(PyBytes_FromStringAndSize(<const char *>(e + AT_ID), 16))
        start_c.data.as_longlongs[n] = start
        end_c.data.as_longlongs[n] = be64(e + AT_END)
        broker_c.data.as_longlongs[n] = be32(e + AT_BROKER)
        ts_c.data.as_longlongs[n] = be64(e + AT_MAX_TS)
        evt_c.data.as_longlongs[n] = be64(e + AT_EVENT_TS)
        size_c.data.as_longlongs[n] = be32(e + AT_SIZE)
        epoch_c.data.as_longlongs[n] = be32(e + AT_EPOCH)
        txn_p[n] = txn
        prev = start
        n += 1
        pos += 4 + length
    for col in (start_c, end_c, broker_c, ts_c, evt_c, size_c, epoch_c):
        resize(<array>col, n)
    del txn_c[n:]
    return pos, ids, start_c, end_c, broker_c, ts_c, evt_c, size_c, bytes(txn_c), epoch_c


cdef inline const uint8_t *_id_at(list blocks, Py_ssize_t b0, int bits, Py_ssize_t r):
    ids = getattr(blocks[(r >> bits) - b0], "ids")
    return <const uint8_t *>PyByteArray_AS_STRING(ids) + ((r & ((1 << bits) - 1)) << 4)


cdef inline Py_ssize_t _slot(const uint16_t *lo, const uint8_t *hi8, const uint16_t *hi16,
                             Py_ssize_t i) noexcept nogil:
    if hi8 != NULL:
        return lo[i] | (<Py_ssize_t>hi8[i] << 16)
    return lo[i] | (<Py_ssize_t>hi16[i] << 16)


def ids_absent(
    array lo, array hi, Py_ssize_t base, list blocks, Py_ssize_t b0, int bits, list ids
):
    """True if no id of ``ids`` (16-byte bytes) is in the table (``_IdTable.find`` each):
    slots hold ``row - base + 2`` in ``lo`` (16 bits) and ``hi`` (8 or 16 bits), 0 empty,
    1 deleted; row ``r`` is in ``blocks[(r >> bits) - b0]``."""
    cdef const uint16_t *plo = lo.data.as_ushorts
    cdef const uint8_t *p8 = hi.data.as_uchars if hi.ob_descr.itemsize == 1 else NULL
    cdef const uint16_t *p16 = NULL if hi.ob_descr.itemsize == 1 else hi.data.as_ushorts
    cdef Py_ssize_t m = Py_SIZE(lo) - 1
    cdef Py_ssize_t i, v
    cdef const char *want
    for idb in ids:
        want = PyBytes_AS_STRING(idb)
        i = hash(idb) & m
        while True:
            v = _slot(plo, p8, p16, i)
            if v == 0:
                break
            if v != 1 and memcmp(_id_at(blocks, b0, bits, v + base - 2), want, 16) == 0:
                return False
            i = (i + 1) & m
    return True


def add_ids(array lo, array hi, list ids, Py_ssize_t first_value):
    """Map absent ``ids`` to the slot values from ``first_value`` on; returns the empty
    slots used."""
    cdef uint16_t *plo = lo.data.as_ushorts
    cdef uint8_t *p8 = hi.data.as_uchars if hi.ob_descr.itemsize == 1 else NULL
    cdef uint16_t *p16 = NULL if hi.ob_descr.itemsize == 1 else hi.data.as_ushorts
    cdef Py_ssize_t m = Py_SIZE(lo) - 1
    cdef Py_ssize_t i, v = first_value, used = 0
    for idb in ids:
        i = hash(idb) & m
        while _slot(plo, p8, p16, i) > 1:
            i = (i + 1) & m
        if _slot(plo, p8, p16, i) == 0:
            used += 1
        plo[i] = v & 0xFFFF
        if p8 != NULL:
            p8[i] = <uint8_t>(v >> 16)
        else:
            p16[i] = <uint16_t>(v >> 16)
        v += 1
    return used


cdef extern from "Python.h":
    int PyObject_IS_GC(object op)
    void PyObject_GC_UnTrack(void *op)


def untrack(a, b, c):
    """Take three new objects out of the garbage collector's lists.

    For the metadata objects a cache builds (uuid, segment id, segment metadata): frozen,
    so they can hold no reference cycle, and a listing page makes 30,000 of them, which
    otherwise fill the young generation, get promoted, and set off full collections in
    the middle of the next pages. Untracked objects are still freed by reference counting.
    """
    for o in (a, b, c):
        if PyObject_IS_GC(o):
            PyObject_GC_UnTrack(<void *>o)
