# Big-endian reads and writes of Kafka's fixed-width fields, for the compiled modules
# (core/records/_append.pyx, core/log/_recovery.pyx, rlmm/_native.pyx). Inline: each module
# compiles its own copy from this one definition.
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t


cdef inline int64_t be64(const unsigned char *p) noexcept nogil:
    return <int64_t>(
        (<unsigned long long>p[0] << 56) | (<unsigned long long>p[1] << 48)
        | (<unsigned long long>p[2] << 40) | (<unsigned long long>p[3] << 32)
        | (<unsigned long long>p[4] << 24) | (<unsigned long long>p[5] << 16)
        | (<unsigned long long>p[6] << 8) | <unsigned long long>p[7]
    )


cdef inline uint32_t beu32(const unsigned char *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int32_t be32(const unsigned char *p) noexcept nogil:
    return <int32_t>beu32(p)


cdef inline int16_t be16(const unsigned char *p) noexcept nogil:
    return <int16_t>((<unsigned int>p[0] << 8) | p[1])


cdef inline void put32(unsigned char *p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef inline void put64(unsigned char *p, int64_t v) noexcept nogil:
    put32(p, <uint32_t>((<unsigned long long>v) >> 32))
    put32(p + 4, <uint32_t>(<unsigned long long>v))
