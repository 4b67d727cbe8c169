"""Encoding RecordBatch v2, for tests, internal topics and benchmarks.

The bytes are those Kafka's Java client (MemoryRecordsBuilder) writes for the same inputs,
except for the compressed payload, whose bytes depend on the compressor:

- baseTimestamp is the first record's timestamp; record timestamps are deltas from it;
  maxTimestamp is the largest record timestamp, or the log append time under LOG_APPEND_TIME.
- Record attributes are 0; null keys, values and header values are written as length -1.
- A compressed batch stays compressed even when that makes it larger, as in Java (some
  Python clients fall back to NONE; Kafka does not).
- Control batches carry one marker record and are transactional (Kafka's
  MemoryRecords.withEndTransactionMarker).
"""

from __future__ import annotations

from collections.abc import Iterable

from core.clock import now_ms
from core.records.batch import (
    ATTRIBUTES_POS,
    CRC_POS,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Attributes,
    Compression,
    TimestampType,
    compute_crc,
)
from core.records.codec import compress
from core.records.record import ControlRecordType, EndTransactionMarker, Header
from core.records.varint import (
    INT32_MAX,
    encode_varint,
    encode_varlong,
)

_NULL = encode_varint(-1)


class RecordBatchBuilder:
    """Accumulates records and encodes them as one batch.

    Example::

        builder = RecordBatchBuilder(compression=Compression.ZSTD, base_offset=100)
        builder.append(b"value", key=b"key", headers=[("h", b"v")], timestamp=1_700_000_000_000)
        batch = builder.build()   # a bytearray; RecordBatchHeader(batch) reads it back
    """

    def __init__(
        self,
        *,
        compression: Compression | int = Compression.NONE,
        compression_level: int | None = None,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        log_append_time: int | None = None,
        delete_horizon_ms: int | None = None,
    ) -> None:
        """Args as the header fields of the table in ``core.records.batch``.

        ``delete_horizon_ms`` (KIP-534, written by the log cleaner) becomes the batch's base
        timestamp with the DELETE_HORIZON attribute set: after that time the cleaner may drop
        the batch's tombstones. Record timestamps stay exact (their deltas are taken from it).

        Raises:
            ValueError: an inconsistent combination Kafka's MemoryRecordsBuilder also
                rejects: transactional without a producer id, an idempotent producer
                without epoch or sequence, LOG_APPEND_TIME without ``log_append_time``,
                or an unknown codec.
        """
        if compression not in Compression._value2member_map_:
            raise ValueError(f"unknown compression codec id {compression}")
        if is_transactional and producer_id == NO_PRODUCER_ID:
            raise ValueError("a transactional batch needs a producer id")
        if (
            producer_id != NO_PRODUCER_ID
            and (producer_epoch == NO_PRODUCER_EPOCH or base_sequence == NO_SEQUENCE)
            and not is_control
        ):
            raise ValueError("an idempotent batch needs a producer epoch and a base sequence")
        if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time is None:
            raise ValueError("LOG_APPEND_TIME needs log_append_time")
        self.compression = Compression(compression)
        self.compression_level = compression_level
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.timestamp_type = timestamp_type
        self.log_append_time = log_append_time
        self._records = bytearray()
        self._count = 0
        self._last_offset: int | None = None
        self.delete_horizon_ms = delete_horizon_ms
        self._base_timestamp: int | None = delete_horizon_ms
        self._max_timestamp = -1

    def __len__(self) -> int:
        """The number of records appended so far."""
        return self._count

    def append(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Iterable[Header] = (),
        timestamp: int | None = None,
        offset: int | None = None,
    ) -> int:
        """Add a record; returns its offset.

        Args:
            value: the value, None for a null value (a tombstone).
            key: the key, None for a null key.
            headers: (key, value) pairs; a None value is a null header value.
            timestamp: milliseconds since the epoch; None for now, as Kafka's producer does.
            offset: the record's absolute offset; None for the next one. Offsets must grow
                but may skip (as in a compacted batch).

        Raises:
            ValueError: an offset not above the previous one or below the base offset.
        """
        if offset is None:
            offset = self.base_offset if self._last_offset is None else self._last_offset + 1
        elif offset < self.base_offset or (
            self._last_offset is not None and offset <= self._last_offset
        ):
            raise ValueError(
                f"offset {offset} must be >= base offset {self.base_offset} and above the "
                f"last offset {self._last_offset}"
            )
        if offset - self.base_offset > INT32_MAX:
            raise ValueError(f"offset {offset} is too far above base offset {self.base_offset}")
        if timestamp is None:
            timestamp = now_ms()
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        self._max_timestamp = max(self._max_timestamp, timestamp)

        body = bytearray(b"\x00")  # attributes
        body += encode_varlong(timestamp - self._base_timestamp)
        body += encode_varint(offset - self.base_offset)
        _write_bytes(body, key)
        _write_bytes(body, value)
        headers = tuple(headers)
        body += encode_varint(len(headers))
        for h_key, h_value in headers:
            _write_bytes(body, h_key.encode("utf-8"))
            _write_bytes(body, h_value)
        self._records += encode_varint(len(body))
        self._records += body
        self._count += 1
        self._last_offset = offset
        return offset

    def build(self, *, last_offset: int | None = None) -> bytearray:
        """The encoded batch, CRC included.

        Args:
            last_offset: the batch's last offset when it must be kept although its last
                records were removed (the log cleaner keeps a v2 batch's offset range, as
                Kafka does, so that producer sequence numbers stay consistent). With it the
                batch may be empty.

        Returns:
            A new bytearray (writable, so ``RecordBatchHeader`` can patch it in place).

        Raises:
            ValueError: no record was appended and no ``last_offset`` given (Kafka never
                writes an empty batch from a producer), or ``last_offset`` is below the
                last record's offset.
        """
        if last_offset is None:
            if self._count == 0 or self._last_offset is None:
                raise ValueError("a batch needs at least one record")
            last_offset = self._last_offset
        elif self._last_offset is not None and last_offset < self._last_offset:
            raise ValueError(f"last offset {last_offset} is below record {self._last_offset}")
        if last_offset - self.base_offset > INT32_MAX or last_offset < self.base_offset:
            raise ValueError(f"last offset {last_offset} out of range of {self.base_offset}")
        base_timestamp = self._base_timestamp
        if base_timestamp is None:  # an empty batch
            base_timestamp = NO_TIMESTAMP
        payload = compress(self.compression, self._records, self.compression_level)
        attributes = int(self.compression)
        if self.delete_horizon_ms is not None:
            attributes |= Attributes.DELETE_HORIZON
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= Attributes.TIMESTAMP_TYPE
            max_timestamp = self.log_append_time
        else:
            max_timestamp = self._max_timestamp
        if self.is_transactional:
            attributes |= Attributes.TRANSACTIONAL
        if self.is_control:
            attributes |= Attributes.CONTROL
        size = HEADER_SIZE + len(payload)
        buf = bytearray(size)
        HEADER.pack_into(
            buf,
            0,
            self.base_offset,
            size - LOG_OVERHEAD,
            self.partition_leader_epoch,
            MAGIC_V2,
            0,  # CRC, computed below over the finished bytes
            attributes,
            last_offset - self.base_offset,
            base_timestamp,
            max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._count,
        )
        buf[HEADER_SIZE:] = payload
        crc = compute_crc(buf, 0, size)
        buf[CRC_POS:ATTRIBUTES_POS] = crc.to_bytes(4, "big")
        return buf


def build_control_batch(
    marker: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp: int | None = None,
) -> bytearray:
    """A commit or abort marker batch, as the transaction coordinator has the leader write.

    Raises:
        ValueError: ``producer_id`` is -1.
    """
    end = EndTransactionMarker(marker, coordinator_epoch)
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
    builder.append(end.value(), key=end.key(), timestamp=timestamp)
    return builder.build()


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _NULL
    else:
        out += encode_varint(len(data))
        out += data
