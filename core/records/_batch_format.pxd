# RecordBatch v2 sizes the compiled append steps and recovery walk share
# (core/records/_append.pyx, core/log/_recovery.pyx), and the C call both use to hand a
# batch's bytes to the Python CRC-32C function without a copy.

cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char *mem, Py_ssize_t size, int flags)
    int PyBUF_READ

cdef enum:
    HEADER_SIZE = 61  # the batch header, up to and including the record count
    LOG_OVERHEAD = 12  # base offset + batch length
    MAGIC_V2 = 2
