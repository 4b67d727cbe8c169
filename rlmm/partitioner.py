"""Which ``__remote_log_metadata`` partition holds a user partition's events.

Identical to Kafka's RemoteLogMetadataTopicPartitioner, so that tierlog and Kafka brokers put
(and look for) a partition's metadata in the same place::

    h = java.util.Objects.hash(topicId.leastSignificantBits,     # a Long
                               topicId.mostSignificantBits,      # a Long
                               partition)                        # an Integer
      = 31 * (31 * (31 * 1 + Long.hashCode(lsb)) + Long.hashCode(msb)) + partition   (int32)
    Long.hashCode(v) = (int) (v ^ (v >>> 32))
    metadata partition = toPositive(murmur2(h as 4 big-endian bytes)) % numPartitions

Note the least significant half of the topic id comes first. Python integers do not
overflow, so every step is masked back to Java's 32-bit two's complement.
"""

from __future__ import annotations

from tiered.api import TopicIdPartition

_MASK32 = 0xFFFFFFFF
_MURMUR2_SEED = 0x9747B28C
_MURMUR2_M = 0x5BD1E995
_MURMUR2_R = 24


def _to_int32(n: int) -> int:
    n &= _MASK32
    return n - (1 << 32) if n & 0x80000000 else n


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data``, as a signed int32."""
    length = len(data)
    h = (_MURMUR2_SEED ^ length) & _MASK32
    m = _MURMUR2_M
    full = length & ~3
    for i in range(0, full, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & _MASK32
        k ^= k >> _MURMUR2_R
        k = (k * m) & _MASK32
        h = ((h * m) & _MASK32) ^ k
    rest = length - full
    if rest:
        if rest == 3:
            h ^= data[full + 2] << 16
        if rest >= 2:
            h ^= data[full + 1] << 8
        h ^= data[full]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of an int32 (not ``abs``)."""
    return number & 0x7FFFFFFF


def _java_long_hash(unsigned64: int) -> int:
    return _to_int32((unsigned64 ^ (unsigned64 >> 32)) & _MASK32)


def topic_id_partition_hash(topic_id_partition: TopicIdPartition) -> int:
    """``Objects.hash(lsb, msb, partition)`` of the topic id and partition, as Kafka computes."""
    value = topic_id_partition.topic_id.int
    msb, lsb = value >> 64, value & ((1 << 64) - 1)
    h = 1
    for element in (_java_long_hash(lsb), _java_long_hash(msb), topic_id_partition.partition):
        h = _to_int32(31 * h + element)
    return h


def metadata_partition(topic_id_partition: TopicIdPartition, num_partitions: int) -> int:
    """The ``__remote_log_metadata`` partition of ``topic_id_partition``.

    Raises:
        ValueError: ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError(f"number of metadata partitions must be positive, got {num_partitions}")
    key = topic_id_partition_hash(topic_id_partition).to_bytes(4, "big", signed=True)
    return to_positive(murmur2(key)) % num_partitions
