"""Kafka RecordBatch v2: the header view (batch), codecs, record decoding and a builder."""

from core.records.batch import (
    Compression,
    RecordBatchHeader,
    TimestampType,
    iter_batches,
)
from core.records.builder import RecordBatchBuilder, build_control_batch
from core.records.record import (
    ControlRecordType,
    DecodedBatch,
    EndTransactionMarker,
    Record,
    RecordColumns,
    decode_batch,
    decode_columns,
    decode_records,
)

__all__ = [
    "Compression",
    "ControlRecordType",
    "DecodedBatch",
    "EndTransactionMarker",
    "Record",
    "RecordBatchBuilder",
    "RecordBatchHeader",
    "RecordColumns",
    "TimestampType",
    "build_control_batch",
    "decode_batch",
    "decode_columns",
    "decode_records",
    "iter_batches",
]
