"""The rules Kafka's ProduceRequest puts on a partition's records before any log sees them.

Kafka (``ProduceRequest.validateRecords``, every version tierlog serves, 3+) wants, per
partition, one record batch of message format v2: Kafka 4 dropped formats v0 and v1
(KIP-724), and its clients send one batch per partition. A first batch of magic 0 or 1, or
a second batch, is INVALID_RECORD; zstd before Produce v7 is UNSUPPORTED_COMPRESSION_TYPE
(KIP-110); a magic byte that is no format at all is CORRUPT_MESSAGE, as Kafka's batch
reader throws. Data too short to hold a whole first batch is left to the log's validation,
which answers torn framing with CORRUPT_MESSAGE.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.records.batch import (
    ATTRIBUTES_POS,
    HEADER_SIZE,
    MAGIC_POS,
    MAGIC_V2,
    Compression,
    peek_batch_size,
)

_CODEC_MASK = 0x07
_FIRST_ZSTD_VERSION = 7


def produce_records_refusal(version: int, records: bytes) -> tuple[ErrorCode, str] | None:
    """The error and message Kafka answers for a partition's ``records``, or None."""
    size = peek_batch_size(records, 0)
    if size is None or size > len(records) or len(records) <= MAGIC_POS:
        return None
    magic = records[MAGIC_POS]
    if magic > MAGIC_V2:
        return ErrorCode.corrupt_message, f"Invalid magic found in record: {magic}"
    if magic != MAGIC_V2:
        return (
            ErrorCode.invalid_record,
            f"Produce requests with version {version} are only allowed to contain record "
            "batches with magic version 2",
        )
    codec = records[ATTRIBUTES_POS + 1] & _CODEC_MASK if size >= HEADER_SIZE else None
    if version < _FIRST_ZSTD_VERSION and codec == Compression.ZSTD:
        return (
            ErrorCode.unsupported_compression_type,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )
    second = peek_batch_size(records, size)
    if second is not None and size + second <= len(records):
        return (
            ErrorCode.invalid_record,
            f"Produce requests with version {version} are only allowed to contain exactly one "
            "record batch per partition",
        )
    return None


__all__ = ["produce_records_refusal"]
