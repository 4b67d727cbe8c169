"""Interop with the batches of kafka-python and aiokafka, both ways, for every codec.

kafka-python 3.0 compresses snappy only through python-snappy, which is not a dependency
here; its snappy cases are skipped unless python-snappy is installed, and snappy interop is
covered by aiokafka, which uses cramjam.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioReader
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.codec import has_snappy
from kafka.record.default_records import DefaultRecordBatch as KpReader
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from core.records.batch import Compression, RecordBatchHeader
from core.records.builder import RecordBatchBuilder, build_control_batch
from core.records.record import ControlRecordType, Record, decode_records

# Every test runs with each record decoder (tests/core/records/conftest.py).
pytestmark = pytest.mark.usefixtures("decoder")

Inputs = list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]

# (timestamp, key, value, headers); values compressible so that no client falls back to NONE,
# one value large enough to span several snappy (32 KiB) and lz4 (64 KiB) blocks.
INPUTS: Inputs = [
    (1_700_000_000_000, b"key-1", b"value " * 50, [("trace", b"abc"), ("empty", b"")]),
    (1_700_000_000_500, None, b"null key " * 40, []),
    (1_699_999_999_000, b"tombstone", None, [("null-header", None)]),
    (1_700_000_001_000, b"", b"", [("ünïcode", b"\xff\x00")]),
    (1_700_000_002_000, b"big", b"0123456789abcdef" * 20_000, []),
]
CODECS = list(Compression)


def expected_records(base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, (ts, key, value, headers) in enumerate(INPUTS)
    ]


def skip_kafka_python_snappy(codec: Compression) -> None:
    if codec == Compression.SNAPPY and not has_snappy():
        pytest.skip("kafka-python 3.0 needs python-snappy for snappy; covered via aiokafka")


def build_with(builder_cls: Callable[..., Any], codec: Compression) -> bytes:
    builder = builder_cls(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=10**8,
    )
    for i, (ts, key, value, headers) in enumerate(INPUTS):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def build_ours(codec: Compression, partition_leader_epoch: int = -1) -> bytes:
    builder = RecordBatchBuilder(compression=codec, partition_leader_epoch=partition_leader_epoch)
    for ts, key, value, headers in INPUTS:
        builder.append(value, key=key, headers=headers, timestamp=ts)
    return bytes(builder.build())


def read_with(reader_cls: Callable[[bytes], Any], buf: bytes) -> list[Record]:
    batch = reader_cls(buf)
    assert batch.validate_crc()
    return [
        Record(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
        for r in batch
    ]


# -- theirs -> ours ------------------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_batches_decode_with_ours(codec: Compression) -> None:
    skip_kafka_python_snappy(codec)
    header = RecordBatchHeader(build_with(KpBuilder, codec))
    header.validate()
    assert header.compression == codec
    assert header.max_timestamp == 1_700_000_002_000
    assert decode_records(header) == expected_records()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_aiokafka_batches_decode_with_ours(codec: Compression) -> None:
    header = RecordBatchHeader(build_with(AioBuilder, codec))
    header.validate()
    assert header.compression == codec
    assert decode_records(header) == expected_records()


# -- ours -> theirs ------------------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_our_batches_decode_with_kafka_python(codec: Compression) -> None:
    skip_kafka_python_snappy(codec)
    assert read_with(KpReader, build_ours(codec)) == expected_records()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_our_batches_decode_with_aiokafka(codec: Compression) -> None:
    assert read_with(AioReader, build_ours(codec)) == expected_records()


def test_our_patched_batches_decode_with_theirs() -> None:
    buf = bytearray(build_ours(Compression.ZSTD))
    header = RecordBatchHeader(buf)
    header.set_base_offset(1000)
    header.set_partition_leader_epoch(4)
    assert read_with(KpReader, bytes(buf)) == expected_records(1000)
    assert read_with(AioReader, bytes(buf)) == expected_records(1000)


# -- identical bytes -----------------------------------------------------------------------
def test_uncompressed_bytes_identical_to_kafka_python() -> None:
    # kafka-python writes partition leader epoch 0 where Java's producer writes -1.
    assert build_ours(Compression.NONE, partition_leader_epoch=0) == build_with(
        KpBuilder, Compression.NONE
    )


def test_uncompressed_bytes_identical_to_aiokafka() -> None:
    assert build_ours(Compression.NONE) == build_with(AioBuilder, Compression.NONE)


def test_control_batch_reads_as_commit_marker_in_kafka_python() -> None:
    buf = build_control_batch(
        ControlRecordType.COMMIT, producer_id=3, producer_epoch=1, base_offset=10, timestamp=7
    )
    batch = KpReader(bytes(buf))
    assert batch.is_control_batch and batch.is_transactional
    (marker,) = list(batch)
    assert marker.commit and not marker.abort
    assert marker.offset == 10
