"""rlmm.partitioner: the same metadata partition as Kafka's RemoteLogMetadataTopicPartitioner.

The murmur2 vectors are Kafka's own (clients UtilsTest.testMurmur2). The partition vectors
were computed with the JDK (java.util.Objects.hash over UUID.getLeast/MostSignificantBits and
the partition, then Kafka's murmur2 and toPositive), independently of this code.
"""

from __future__ import annotations

import uuid

import pytest

from rlmm.partitioner import metadata_partition, murmur2, to_positive, topic_id_partition_hash
from tiered.api import TopicIdPartition


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafkas_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_to_positive_masks_the_sign_bit_rather_than_negating() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


# (topic id, partition, Objects.hash, partition of 50, partition of 7)
JDK_VECTORS = [
    ("00000000-0000-0000-0000-000000000001", 0, 30752, 35, 0),
    ("00000000-0000-0000-0000-000000000001", 1000, 31752, 27, 6),
    ("123e4567-e89b-12d3-a456-426614174000", 0, -32500719, 19, 3),
    ("123e4567-e89b-12d3-a456-426614174000", 1, -32500718, 37, 2),
    ("123e4567-e89b-12d3-a456-426614174000", 49, -32500670, 32, 6),
    ("ffffffff-ffff-ffff-ffff-ffffffffffff", 7, 29798, 31, 6),
    ("8f1c2d3e-4b5a-6978-8796-a5b4c3d2e1f0", 1, 147258398, 36, 4),
    ("8f1c2d3e-4b5a-6978-8796-a5b4c3d2e1f0", 7, 147258404, 43, 0),
]


@pytest.mark.parametrize(("topic_id", "partition", "java_hash", "of_50", "of_7"), JDK_VECTORS)
def test_metadata_partition_matches_kafka(
    topic_id: str, partition: int, java_hash: int, of_50: int, of_7: int
) -> None:
    tp = TopicIdPartition(uuid.UUID(topic_id), "any-name", partition)
    assert topic_id_partition_hash(tp) == java_hash
    assert metadata_partition(tp, 50) == of_50
    assert metadata_partition(tp, 7) == of_7


def test_topic_name_does_not_change_the_partition() -> None:
    tid = uuid.UUID(JDK_VECTORS[2][0])
    assert metadata_partition(TopicIdPartition(tid, "a", 0), 50) == metadata_partition(
        TopicIdPartition(tid, "b", 0), 50
    )


def test_non_positive_partition_count_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        metadata_partition(TopicIdPartition(uuid.uuid4(), "t", 0), 0)
