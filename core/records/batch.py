"""RecordBatch v2 (magic 2): a zero-copy view of the 61-byte header, validation and patching.

Layout of a batch, all integers big-endian (Kafka's DefaultRecordBatch)::

    offset  size  field
         0     8  baseOffset            int64   first offset in the batch
         8     4  batchLength           int32   bytes after this field (total size - 12)
        12     4  partitionLeaderEpoch  int32   set by the leader on append
        16     1  magic                 int8    2
        17     4  crc                   uint32  CRC-32C of attributes .. end of batch
        21     2  attributes            int16   see ``Attributes`` below
        23     4  lastOffsetDelta       int32   offset of the last record - baseOffset
        27     8  baseTimestamp         int64   (Kafka calls it firstTimestamp)
        35     8  maxTimestamp          int64
        43     8  producerId            int64   -1 when not idempotent
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordsCount          int32
        61     -  records               (compressed as a whole when attributes say so)

baseOffset, batchLength and partitionLeaderEpoch lie before the CRC'd range, so the broker
patches baseOffset and partitionLeaderEpoch in place without recomputing the CRC.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from types import ModuleType

import crc32c

from core.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedVersionError,
)
from core.records.native import load_compiled

MAGIC_V2 = 2

HEADER = struct.Struct(">qiibIhiqqqhii")
"""The whole 61-byte header, one field per format character in the order of the table."""
HEADER_SIZE = HEADER.size  # 61, RECORD_BATCH_OVERHEAD in Kafka
assert HEADER_SIZE == 61

# Field positions, derived from the struct rather than typed by hand.
BASE_OFFSET_POS = 0
LENGTH_POS = struct.calcsize(">q")
PARTITION_LEADER_EPOCH_POS = struct.calcsize(">qi")
MAGIC_POS = struct.calcsize(">qii")
CRC_POS = struct.calcsize(">qiib")
ATTRIBUTES_POS = struct.calcsize(">qiibI")
LAST_OFFSET_DELTA_POS = struct.calcsize(">qiibIh")
BASE_TIMESTAMP_POS = struct.calcsize(">qiibIhi")
MAX_TIMESTAMP_POS = struct.calcsize(">qiibIhiq")
PRODUCER_ID_POS = struct.calcsize(">qiibIhiqq")
PRODUCER_EPOCH_POS = struct.calcsize(">qiibIhiqqq")
BASE_SEQUENCE_POS = struct.calcsize(">qiibIhiqqqh")
RECORDS_COUNT_POS = struct.calcsize(">qiibIhiqqqhi")

LOG_OVERHEAD = LENGTH_POS + 4  # baseOffset + batchLength: bytes not counted in batchLength
HEADER_SIZE_UP_TO_MAGIC = MAGIC_POS + 1  # enough to know the size and the magic of a batch

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


class Compression(enum.IntEnum):
    """Codec ids of the low three attribute bits (Kafka's CompressionType)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    """Attribute bit 3; Kafka's TimestampType ids as exposed to clients."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class Attributes(enum.IntFlag):
    """Batch attribute bits above the codec (Kafka's DefaultRecordBatch masks)."""

    COMPRESSION_MASK = 0x07
    TIMESTAMP_TYPE = 0x08
    TRANSACTIONAL = 0x10
    CONTROL = 0x20
    DELETE_HORIZON = 0x40


# The bits as plain ints: ``IntFlag.__and__`` builds a flag object per test, which the header
# properties below, read per batch by every decoder, cannot afford.
_CODEC_MASK = int(Attributes.COMPRESSION_MASK)
_TIMESTAMP_TYPE = int(Attributes.TIMESTAMP_TYPE)
_TRANSACTIONAL = int(Attributes.TRANSACTIONAL)
_CONTROL = int(Attributes.CONTROL)
_DELETE_HORIZON = int(Attributes.DELETE_HORIZON)


def compute_crc(buf: bytes | bytearray | memoryview, position: int, size: int) -> int:
    """CRC-32C of a batch's checked range: attributes up to the end of the batch.

    Args:
        buf: the bytes holding the batch.
        position: where the batch starts in ``buf``.
        size: the whole batch size in bytes (batchLength + 12).
    """
    view = memoryview(buf)[position + ATTRIBUTES_POS : position + size]
    return crc32c.crc32c(view)


class RecordBatchHeader:
    """A view of one batch header over a buffer; reading a field copies nothing else.

    The view does not own the buffer: it is valid while the buffer is. Patching methods
    write into the buffer, which must then be writable (bytearray or a writable memoryview).
    """

    __slots__ = ("_buf", "position")

    def __init__(self, buf: bytes | bytearray | memoryview, position: int = 0) -> None:
        if len(buf) - position < HEADER_SIZE:
            raise CorruptRecordError(
                f"batch header at byte {position} is truncated: "
                f"{len(buf) - position} bytes left, {HEADER_SIZE} needed"
            )
        self._buf = buf
        self.position = position

    # -- fields ------------------------------------------------------------------------
    def fields(self) -> tuple[int, ...]:
        """Every header field at once, in ``HEADER`` order (index with the ``F_*`` names):
        one unpack instead of one per property, for the per-batch loops."""
        return HEADER.unpack_from(self._buf, self.position)

    def _i64(self, pos: int) -> int:
        return _I64.unpack_from(self._buf, self.position + pos)[0]

    def _i32(self, pos: int) -> int:
        return _I32.unpack_from(self._buf, self.position + pos)[0]

    @property
    def base_offset(self) -> int:
        return self._i64(BASE_OFFSET_POS)

    @property
    def batch_length(self) -> int:
        return self._i32(LENGTH_POS)

    @property
    def size_in_bytes(self) -> int:
        """The whole batch, header included: batchLength + 12."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return self._i32(PARTITION_LEADER_EPOCH_POS)

    @property
    def magic(self) -> int:
        return struct.unpack_from(">b", self._buf, self.position + MAGIC_POS)[0]

    @property
    def crc(self) -> int:
        return _U32.unpack_from(self._buf, self.position + CRC_POS)[0]

    @property
    def attributes(self) -> int:
        return struct.unpack_from(">h", self._buf, self.position + ATTRIBUTES_POS)[0]

    @property
    def last_offset_delta(self) -> int:
        return self._i32(LAST_OFFSET_DELTA_POS)

    @property
    def base_timestamp(self) -> int:
        return self._i64(BASE_TIMESTAMP_POS)

    @property
    def max_timestamp(self) -> int:
        return self._i64(MAX_TIMESTAMP_POS)

    @property
    def producer_id(self) -> int:
        return self._i64(PRODUCER_ID_POS)

    @property
    def producer_epoch(self) -> int:
        return struct.unpack_from(">h", self._buf, self.position + PRODUCER_EPOCH_POS)[0]

    @property
    def base_sequence(self) -> int:
        return self._i32(BASE_SEQUENCE_POS)

    @property
    def records_count(self) -> int:
        return self._i32(RECORDS_COUNT_POS)

    # -- derived -----------------------------------------------------------------------
    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 as Kafka does; -1 without one."""
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        return (base + self.last_offset_delta) % (1 << 31)

    @property
    def compression(self) -> int:
        """The codec id (see ``Compression``); may be an id Kafka does not define."""
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL)

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534: when the cleaner may drop this batch's tombstones; None if not set."""
        if self.attributes & _DELETE_HORIZON:
            return self.base_timestamp
        return None

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def records_view(self) -> memoryview:
        """The record bytes after the header (compressed when the batch is)."""
        start = self.position + HEADER_SIZE
        return memoryview(self._buf)[start : self.position + self.size_in_bytes]

    def raw(self) -> memoryview:
        """The whole batch as a view of the underlying buffer."""
        return memoryview(self._buf)[self.position : self.position + self.size_in_bytes]

    # -- checks ------------------------------------------------------------------------
    def compute_crc(self) -> int:
        return compute_crc(self._buf, self.position, self.size_in_bytes)

    def validate(
        self, max_size: int | None = None, *, fields: tuple[int, ...] | None = None
    ) -> None:
        """Check the framing, the magic and the CRC; the structure any stored batch must have.

        ``fields``: the batch's ``fields()`` when the caller already has them.

        Raises:
            CorruptRecordError: a length out of bounds, a batch running past the buffer, or a
                CRC mismatch; the message names the byte position.
            UnsupportedVersionError: a magic other than 2.
        """
        if fields is None:
            fields = HEADER.unpack_from(self._buf, self.position)
        check_structure(self._buf, self.position, fields, max_size)

    def validate_from_client(self) -> None:
        """``validate`` plus the rules Kafka's LogValidator applies to batches from clients.

        Raises:
            CorruptRecordError, UnsupportedVersionError: as ``validate``.
            InvalidRecordError: an inconsistent offset range or count, a control batch, an
                idempotent batch without a sequence, or an undefined codec.
        """
        fields = HEADER.unpack_from(self._buf, self.position)
        check_structure(self._buf, self.position, fields, None)
        _check_client_rules(self.position, fields)

    # -- patches (outside the CRC'd range) -----------------------------------------------
    def set_base_offset(self, offset: int) -> None:
        _I64.pack_into(self._buf, self.position + BASE_OFFSET_POS, offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        _I32.pack_into(self._buf, self.position + PARTITION_LEADER_EPOCH_POS, epoch)

    def __repr__(self) -> str:
        return (
            f"RecordBatchHeader(position={self.position}, base_offset={self.base_offset}, "
            f"last_offset={self.last_offset}, size={self.size_in_bytes}, "
            f"epoch={self.partition_leader_epoch}, count={self.records_count})"
        )


def peek_batch_size(buf: bytes | bytearray | memoryview, position: int) -> int | None:
    """Size of the batch starting at ``position``, or None if fewer than 12 bytes remain."""
    if len(buf) - position < LOG_OVERHEAD:
        return None
    return _I32.unpack_from(buf, position + LENGTH_POS)[0] + LOG_OVERHEAD


def iter_batches(
    buf: bytes | bytearray | memoryview, *, validate: bool = True, max_size: int | None = None
) -> Iterator[RecordBatchHeader]:
    """Yield the header of every batch in ``buf``, in order.

    Args:
        buf: a run of whole batches.
        validate: check framing, magic and CRC of each batch (``RecordBatchHeader.validate``).
        max_size: the largest batch accepted, if bounded.

    Raises:
        CorruptRecordError: trailing bytes that are not a whole batch, or a batch that fails
            validation; nothing after it is yielded.
        UnsupportedVersionError: a batch with a magic other than 2.
    """
    position, end = 0, len(buf)
    while position < end:
        header = RecordBatchHeader(buf, position)
        if validate:
            header.validate(max_size)
        size = header.size_in_bytes
        if size < HEADER_SIZE or position + size > end:
            raise CorruptRecordError(
                f"batch at byte {position}: size {size} does not fit the {end - position} "
                "bytes left"
            )
        yield header
        position += size


def set_log_append_time(header: RecordBatchHeader, timestamp: int) -> None:
    """Mark a batch LogAppendTime with ``timestamp`` as its max timestamp; CRC recomputed.

    Kafka's broker does this in place for topics with message.timestamp.type=LogAppendTime;
    record timestamps then read as the batch max timestamp.
    """
    buf, pos = header._buf, header.position
    attributes = header.attributes | Attributes.TIMESTAMP_TYPE
    struct.pack_into(">h", buf, pos + ATTRIBUTES_POS, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_POS, timestamp)
    _U32.pack_into(buf, pos + CRC_POS, header.compute_crc())


# Field indexes of ``HEADER.unpack_from``: one unpack per batch on the hot paths.
F_BASE_OFFSET, F_LENGTH, F_EPOCH, F_MAGIC, F_CRC, F_ATTRIBUTES, F_LAST_OFFSET_DELTA = range(7)
F_BASE_TIMESTAMP, F_MAX_TIMESTAMP, F_PRODUCER_ID, F_PRODUCER_EPOCH, F_BASE_SEQUENCE = range(7, 12)
F_RECORDS_COUNT = 12

_KNOWN_CODECS = frozenset(int(c) for c in Compression)


def check_structure(
    buf: bytes | bytearray | memoryview, pos: int, fields: tuple[int, ...], max_size: int | None
) -> None:
    """The rules every stored batch obeys (``RecordBatchHeader.validate``): minimum length,
    ``max_size``, framing within ``buf``, magic 2, CRC-32C. ``fields``: its header, unpacked."""
    length = fields[F_LENGTH]
    if length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at byte {pos}: length {length} is below the minimum "
            f"{HEADER_SIZE - LOG_OVERHEAD}"
        )
    size = length + LOG_OVERHEAD
    if max_size is not None and size > max_size:
        raise CorruptRecordError(
            f"batch at byte {pos}: size {size} exceeds the largest allowed {max_size}"
        )
    if pos + size > len(buf):
        raise CorruptRecordError(
            f"batch at byte {pos}: length {length} runs past the end of the data "
            f"({len(buf) - pos} bytes left)"
        )
    magic = fields[F_MAGIC]
    if magic != MAGIC_V2:
        raise UnsupportedVersionError(
            f"batch at byte {pos}: magic {magic} is not supported, only magic 2"
        )
    stored, computed = fields[F_CRC], compute_crc(buf, pos, size)
    if stored != computed:
        raise CorruptRecordError(
            f"batch at byte {pos}: CRC mismatch, stored {stored:#010x}, "
            f"computed {computed:#010x} over bytes {pos + ATTRIBUTES_POS}..{pos + size}"
        )


def _check_client_rules(pos: int, fields: tuple[int, ...]) -> None:
    delta, count = fields[F_LAST_OFFSET_DELTA], fields[F_RECORDS_COUNT]
    if delta < 0:
        raise InvalidRecordError(f"batch at byte {pos}: negative last offset delta {delta}")
    if count <= 0:
        raise InvalidRecordError(f"batch at byte {pos}: invalid record count {count}")
    if delta + 1 != count:
        raise InvalidRecordError(
            f"batch at byte {pos}: offset range of {delta + 1} records "
            f"(last offset delta {delta}) is inconsistent with record count {count}"
        )
    attributes = fields[F_ATTRIBUTES]
    if attributes & _CONTROL:
        raise InvalidRecordError(
            f"batch at byte {pos}: clients are not allowed to write control batches"
        )
    producer_id, base_sequence = fields[F_PRODUCER_ID], fields[F_BASE_SEQUENCE]
    if producer_id > NO_PRODUCER_ID and base_sequence < 0:
        raise InvalidRecordError(
            f"batch at byte {pos}: producer id {producer_id} with invalid "
            f"base sequence {base_sequence}"
        )
    if attributes & _CODEC_MASK not in _KNOWN_CODECS:
        raise InvalidRecordError(
            f"batch at byte {pos}: unknown compression codec id {attributes & _CODEC_MASK}"
        )


def scan_client_batches(
    buf: bytes | bytearray | memoryview, max_size: int
) -> list[tuple[int, tuple[int, ...]]]:
    """Validate every batch of a produce request; ``(position, header fields)`` for each.

    The fields are ``HEADER.unpack_from`` order (see the ``F_*`` indexes). The whole request
    is checked before anything is returned, so a caller appends all batches or none.

    Raises:
        RecordTooLargeError: a batch larger than ``max_size`` (``max.message.bytes``).
        CorruptRecordError, UnsupportedVersionError, InvalidRecordError: as
            ``RecordBatchHeader.validate_from_client``.
    """
    if COMPILED_SCAN is not None:
        # The compiled loop decides the same; on invalid input it returns None and the loop
        # below runs to raise the error with its message.
        scanned = COMPILED_SCAN.scan_client_batches(buf, max_size, crc32c.crc32c)
        if scanned is not None:
            return scanned  # type: ignore[no-any-return]
    out: list[tuple[int, tuple[int, ...]]] = []
    position, end = 0, len(buf)
    if end == 0:
        raise InvalidRecordError("the request carries no record batch")
    while position < end:
        if end - position < HEADER_SIZE:
            raise CorruptRecordError(
                f"batch header at byte {position} is truncated: {end - position} bytes left, "
                f"{HEADER_SIZE} needed"
            )
        fields = HEADER.unpack_from(buf, position)
        size = fields[F_LENGTH] + LOG_OVERHEAD
        # A length running past the request is torn framing (CORRUPT_MESSAGE) whatever its
        # size; only a whole batch can be too large.
        if size > max_size and position + size <= end:
            raise RecordTooLargeError(
                f"batch of {size} bytes at byte {position} exceeds max.message.bytes={max_size}"
            )
        check_structure(buf, position, fields, None)
        _check_client_rules(position, fields)
        out.append((position, fields))
        position += size
    return out


def assign_offsets(
    buf: bytearray | memoryview,
    scanned: list[tuple[int, tuple[int, ...]]],
    next_offset: int,
    epoch: int,
    append_time: int,
    batch_type: type[tuple[int, ...]] = tuple,
) -> tuple[list[tuple[int, ...]], int, int, int, int]:
    """Give the scanned client batches of ``buf`` their offsets and leader epoch, in place.

    Each batch gets base offset ``next_offset`` onwards and ``epoch``; with ``append_time``
    >= 0 (the topic's LogAppendTime) it is also marked LogAppendTime with that max
    timestamp and its CRC recomputed (``set_log_append_time``).

    Args:
        scanned: ``scan_client_batches(buf, ...)``.
        batch_type: a tuple type built for each batch (``LogSegment``'s ``AppendedBatch``).

    Returns:
        ``(batches, last offset, max timestamp, offset of the max timestamp, records)``;
        ``batches`` holds ``(position, base offset, last offset, max timestamp, size)`` per
        batch, as ``batch_type``. The max timestamp is -1 (and its offset the first offset)
        when no batch has one.
    """
    if COMPILED_SCAN is not None:
        return COMPILED_SCAN.assign_offsets(  # type: ignore[no-any-return]
            buf, scanned, next_offset, epoch, append_time, crc32c.crc32c, batch_type
        )
    max_ts, offset_of_max_ts, records = -1, next_offset, 0
    batches: list[tuple[int, ...]] = []
    new = tuple.__new__
    for pos, fields in scanned:
        pack_base_offset_and_epoch(buf, pos, next_offset, epoch)
        last = next_offset + fields[F_LAST_OFFSET_DELTA]
        batch_max_ts = fields[F_MAX_TIMESTAMP]
        if append_time >= 0:
            set_log_append_time(RecordBatchHeader(buf, pos), append_time)
            batch_max_ts = append_time
        if batch_max_ts > max_ts:
            max_ts, offset_of_max_ts = batch_max_ts, last
        size = fields[F_LENGTH] + LOG_OVERHEAD
        batches.append(new(batch_type, (pos, next_offset, last, batch_max_ts, size)))
        records += fields[F_RECORDS_COUNT]
        next_offset = last + 1
    return batches, next_offset - 1, max_ts, offset_of_max_ts, records


COMPILED_SCAN: ModuleType | None = load_compiled("core.records._append")
"""The compiled request validation this process uses, or None (the tests switch it)."""


def pack_base_offset_and_epoch(
    buf: bytearray | memoryview, position: int, base_offset: int, epoch: int
) -> None:
    """Patch a batch's base offset and leader epoch together (both outside the CRC)."""
    _I64.pack_into(buf, position + BASE_OFFSET_POS, base_offset)
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_POS, epoch)
