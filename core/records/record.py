"""Decoding the records of a RecordBatch v2, for tools and for Spark.

Layout of one record inside a batch's records section (Kafka's DefaultRecord)::

    length          varint    bytes after this field
    attributes      int8      unused, always 0
    timestampDelta  varlong   timestamp - batch baseTimestamp
    offsetDelta     varint    offset - batch baseOffset
    keyLength       varint    -1 for a null key
    key             bytes
    valueLength     varint    -1 for a null value
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint, key utf-8, valueLength varint (-1 null),
                    value)

The records section follows the 61-byte header and is compressed as a whole when the batch's
codec is not NONE. With LOG_APPEND_TIME every record's timestamp is the batch maxTimestamp,
as Kafka's readers report it.

Errors: bytes that do not frame as records (a record running past its length or the batch,
a varint cut short, a record count that does not match) raise ``CorruptRecordError``; well
framed values that break a rule of the format (a negative header count or header key length,
a malformed control key) raise ``InvalidRecordError``, as Kafka's DefaultRecord does. Every
message names the batch position and the byte position inside the records section
(decompressed, for a compressed batch).

Two entry points: ``decode_records`` builds ``Record`` objects; ``decode_columns`` appends to
plain lists, one per field, which is what Arrow wants and skips an object per record.

The per-record loop runs compiled (``core.records._native``, Cython) when the extension is
built, and in Python otherwise or with TIERLOG_PURE_PYTHON=1 (``core.records.native``). The
Python loop is the reference: the compiled one decides the same rules and leaves the wording
of every error to it (on malformed bytes it gives up and the Python loop runs).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.errors import CorruptRecordError, InvalidRecordError
from core.records import native
from core.records.batch import (
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_BASE_TIMESTAMP,
    F_EPOCH,
    F_MAX_TIMESTAMP,
    F_PRODUCER_ID,
    F_RECORDS_COUNT,
    HEADER_SIZE,
    Attributes,
    Compression,
    RecordBatchHeader,
    TimestampType,
)
from core.records.codec import BytesLike, DecompressionBuffer, decompress
from core.records.varint import decode_varint, decode_varlong

if TYPE_CHECKING:
    from core.records._native import ColumnBuffers  # type: ignore[import-not-found]

Header = tuple[str, bytes | None]
Headers = tuple[Header, ...]

NO_HEADERS: Headers = ()
_CONTROL = int(Attributes.CONTROL)
_CODEC_MASK = int(Attributes.COMPRESSION_MASK)
_LOG_APPEND_TIME = int(Attributes.TIMESTAMP_TYPE)
MIN_RECORD_SIZE = 7
"""The smallest encoded record: seven one-byte fields, null key and value, no headers."""


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record. ``timestamp`` already accounts for the batch's timestamp type."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = NO_HEADERS


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch's header fields with its decoded records."""

    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    timestamp_type: TimestampType
    max_timestamp: int
    compression: Compression
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    records: tuple[Record, ...]


@dataclass(slots=True)
class RecordColumns:
    """Decoded records as parallel lists, one entry per record, in offset order.

    The per-batch fields that Spark's Kafka schema carries per row (timestamp type, leader
    epoch, producer id) are repeated per record, so every list has the same length.
    """

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    leader_epochs: list[int] = field(default_factory=list)
    producer_ids: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)


# -- control records -----------------------------------------------------------------------
class ControlRecordType(enum.IntEnum):
    """The type in a control record's key (Kafka's ControlRecordType; KRaft types omitted)."""

    ABORT = 0
    COMMIT = 1


CONTROL_KEY = struct.Struct(">hh")
"""Control record key, version 0: int16 version, int16 type."""
END_TXN_MARKER_VALUE = struct.Struct(">hi")
"""Commit/abort marker value, version 0: int16 version, int32 coordinatorEpoch."""
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


def parse_control_type(key: bytes | None) -> int:
    """The type of a control record from its key; compare with ``ControlRecordType``.

    Types newer than ABORT and COMMIT (KRaft's) come back as plain ints, as Kafka's readers
    treat them as unknown and skip them.

    Raises:
        InvalidRecordError: a null key, one shorter than 4 bytes, or a negative version.
    """
    if key is None or len(key) < CONTROL_KEY.size:
        size = "null" if key is None else f"{len(key)} bytes"
        raise InvalidRecordError(f"control record key is {size}, at least 4 bytes needed")
    version, type_ = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record key has negative version {version}")
    return type_


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A commit or abort marker: the single record of a transactional control batch."""

    type: ControlRecordType
    coordinator_epoch: int

    def key(self) -> bytes:
        return CONTROL_KEY.pack(CONTROL_KEY_VERSION, self.type)

    def value(self) -> bytes:
        return END_TXN_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, self.coordinator_epoch)

    @classmethod
    def from_record(cls, record: Record) -> EndTransactionMarker:
        """Parse a marker from a control record.

        Raises:
            InvalidRecordError: not an ABORT/COMMIT key, or a value shorter than 6 bytes or
                with a negative version.
        """
        type_ = parse_control_type(record.key)
        if type_ not in ControlRecordType._value2member_map_:
            raise InvalidRecordError(f"control record type {type_} is not a commit or abort")
        value = record.value
        if value is None or len(value) < END_TXN_MARKER_VALUE.size:
            size = "null" if value is None else f"{len(value)} bytes"
            raise InvalidRecordError(f"end transaction marker value is {size}, 6 needed")
        version, epoch = END_TXN_MARKER_VALUE.unpack_from(value)
        if version < 0:
            raise InvalidRecordError(f"end transaction marker has negative version {version}")
        return cls(ControlRecordType(type_), epoch)


# -- decoding ------------------------------------------------------------------------------
def records_data(
    header: RecordBatchHeader, scratch: DecompressionBuffer | None = None
) -> BytesLike:
    """The batch's records section, decompressed when the batch is compressed.

    ``scratch``: decompress into its reused buffer (the result is then valid until its next
    use); without it the result is bytes of its own.

    Raises:
        UnsupportedCompressionTypeError: the batch's codec id is not one Kafka defines.
        CorruptRecordError: the compressed data is corrupt; the message names the batch.
    """
    codec = header.compression
    try:
        if scratch is not None:
            return scratch.decompress(codec, header.records_view)
        return decompress(codec, header.records_view)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"batch at byte {header.position}: {e}") from e


def decode_columns(
    header: RecordBatchHeader,
    into: RecordColumns | None = None,
    *,
    verify: bool = True,
    include_control: bool = False,
) -> RecordColumns:
    """Append the batch's records to ``into`` (a new ``RecordColumns`` if None).

    Args:
        header: the batch.
        into: columns to extend; decoding a whole segment into one set of lists saves
            concatenating per batch.
        verify: check framing, magic and CRC first (``RecordBatchHeader.validate``); pass
            False when the batch came through ``iter_batches`` with validation.
        include_control: also append control batches' records; by default they are skipped,
            as consumers never see them.

    Returns:
        ``into``, or the new columns. On error, ``into`` is left unchanged.

    Raises:
        CorruptRecordError, UnsupportedVersionError: the batch fails validation.
        UnsupportedCompressionTypeError: an undefined codec id.
        CorruptRecordError: the records do not frame (see the module docstring).
        InvalidRecordError: a record breaks a rule of the format.
    """
    cols = RecordColumns() if into is None else into
    if verify:
        header.validate()
    if header.is_control and not include_control:
        return cols
    count = header.records_count
    offsets, timestamps, keys, values, headers = _decode(header, _records_section(header), count)
    n = len(offsets)
    cols.offsets += offsets
    cols.timestamps += timestamps
    cols.keys += keys
    cols.values += values
    cols.headers += headers
    cols.timestamp_types += [int(header.timestamp_type)] * n
    cols.leader_epochs += [header.partition_leader_epoch] * n
    cols.producer_ids += [header.producer_id] * n
    return cols


def decode_into_buffers(
    header: RecordBatchHeader,
    into: ColumnBuffers,
    *,
    verify: bool = True,
    include_control: bool = False,
    fields: tuple[int, ...] | None = None,
    scratch: DecompressionBuffer | None = None,
) -> None:
    """``decode_columns`` for the compiled decoder: append the batch's records to ``into``
    (a ``core.records._native.ColumnBuffers``, from ``new_column_buffers``) in Arrow's
    memory layout, with no Python object per record. Same arguments and errors as
    ``decode_columns``, plus ``fields``: the batch's ``fields()`` when the caller has them
    (this runs once per batch: every header property read costs an unpack), and
    ``scratch``: a buffer to decompress into, reused from batch to batch (the records are
    copied out of it). On error ``into`` is left unchanged.
    """
    compiled = native.COMPILED
    if compiled is None:
        raise RuntimeError("decode_into_buffers needs the compiled decoder (core.records._native)")
    if fields is None:
        fields = header.fields()
    if verify:
        header.validate(fields=fields)
    attributes = fields[F_ATTRIBUTES]
    if attributes & _CONTROL and not include_control:
        return
    if attributes & _CODEC_MASK == Compression.NONE:
        data: BytesLike = header.raw()[HEADER_SIZE:]
    else:
        data = records_data(header, scratch)
    count = fields[F_RECORDS_COUNT]
    log_append_time = fields[F_MAX_TIMESTAMP] if attributes & _LOG_APPEND_TIME else None
    base_offset, base_ts = fields[F_BASE_OFFSET], fields[F_BASE_TIMESTAMP]
    if not into.decode(
        data,
        count,
        base_offset,
        base_ts,
        log_append_time,
        TimestampType.CREATE_TIME if log_append_time is None else TimestampType.LOG_APPEND_TIME,
        fields[F_EPOCH],
        fields[F_PRODUCER_ID],
    ):
        _decode_python(header, bytes(data), count, base_offset, base_ts)  # raises the error
        raise CorruptRecordError(
            f"{_where(header, data)}: the compiled decoder refused records that the "
            "Python decoder accepts"
        )


def new_column_buffers(data_capacity: int = 0, timestamp_scale: int = 1) -> ColumnBuffers | None:
    """Empty ``ColumnBuffers`` for ``decode_into_buffers``, or None without the compiled
    decoder (then use ``RecordColumns`` and ``decode_columns``).

    ``data_capacity``: the bytes of values to make room for at once (memory is reserved, not
    touched): a buffer grown batch by batch would be copied at each doubling.
    ``timestamp_scale``: timestamps are written multiplied by it (1000: Arrow's
    microseconds, wrapping at int64 as Arrow's multiply does).
    """
    compiled = native.COMPILED
    return None if compiled is None else compiled.ColumnBuffers(data_capacity, timestamp_scale)


def flatten_headers(headers: list[Headers]) -> tuple[list[str], list[bytes | None], list[int]]:
    """Per-record headers (``RecordColumns.headers``) as Arrow's list layout: every header key
    in one list, every value in another, and the end index after each record, from 0
    (``len(headers) + 1`` entries); record i owns entries ``ends[i]:ends[i + 1]``."""
    compiled = native.COMPILED
    if compiled is not None:
        return compiled.flatten_headers(headers)
    keys: list[str] = []
    values: list[bytes | None] = []
    ends = [0]
    for record_headers in headers:
        for key, value in record_headers:
            keys.append(key)
            values.append(value)
        ends.append(len(keys))
    return keys, values, ends


def decode_records(header: RecordBatchHeader, *, verify: bool = True) -> list[Record]:
    """The batch's records, control records included, in offset order.

    Raises:
        The errors of ``decode_columns``.
    """
    if verify:
        header.validate()
    offsets, timestamps, keys, values, headers = _decode(
        header, _records_section(header), header.records_count
    )
    return list(map(Record, offsets, timestamps, keys, values, headers))


def decode_batch(header: RecordBatchHeader, *, verify: bool = True) -> DecodedBatch:
    """The batch's header fields and records.

    Raises:
        The errors of ``decode_columns``.
    """
    records = decode_records(header, verify=verify)
    codec = header.compression
    return DecodedBatch(
        base_offset=header.base_offset,
        last_offset=header.last_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=header.timestamp_type,
        max_timestamp=header.max_timestamp,
        compression=Compression(codec),  # records_data already rejected unknown ids
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        records=tuple(records),
    )


def _records_section(header: RecordBatchHeader) -> BytesLike:
    """What ``_decode`` reads: the decompressed records, or for an uncompressed batch, when
    the compiled decoder runs, a view of them (it copies only keys and values out)."""
    if header.compression == Compression.NONE and native.COMPILED is not None:
        return header.records_view
    return records_data(header)


def _decode(
    header: RecordBatchHeader, data: BytesLike, count: int
) -> tuple[list[int], list[int], list[bytes | None], list[bytes | None], list[Headers]]:
    """Parse ``count`` records from ``data``, the batch's (decompressed) records section.

    The compiled decoder runs when there is one; on malformed bytes (it returns None) the
    Python loop runs over the same bytes and raises the error with its message.
    """
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    compiled = native.COMPILED
    decoded = None
    if compiled is not None:
        decoded = compiled.decode_records(data, count, base_offset, base_ts)
    if decoded is None:
        decoded = _decode_python(header, bytes(data), count, base_offset, base_ts)
        if compiled is not None:
            # Unreachable while both decoders agree (the tests compare them); if they ever
            # do not, refusing the batch is the safe side.
            raise CorruptRecordError(
                f"{_where(header, data)}: the compiled decoder refused records that the "
                "Python decoder accepts"
            )
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        decoded = (decoded[0], [header.max_timestamp] * count, *decoded[2:])
    return decoded


def _where(header: RecordBatchHeader, data: BytesLike) -> str:
    """Where a batch's records are, for error messages."""
    batch_pos = header.position
    if header.compression == Compression.NONE:
        return f"batch at byte {batch_pos} (records from byte {batch_pos + HEADER_SIZE})"
    codec = Compression(header.compression).name.lower()
    return f"batch at byte {batch_pos} ({len(data)} bytes of decompressed {codec} records)"


def _decode_python(
    header: RecordBatchHeader, data: bytes, count: int, base_offset: int, base_ts: int
) -> tuple[list[int], list[int], list[bytes | None], list[bytes | None], list[Headers]]:
    """The pure-Python decoder: the reference for the format rules, and the one that words
    every error. Timestamps are base + delta (``_decode`` applies LOG_APPEND_TIME)."""
    where = _where(header, data)
    end = len(data)
    if count < 0 or count > end // MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"{where}: record count {count} is impossible for {end} bytes of records"
        )
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[Headers] = []
    add_offset, add_ts = offsets.append, timestamps.append
    add_key, add_value, add_headers = keys.append, values.append, headers.append
    dv, dvl = decode_varint, decode_varlong
    pos = 0
    i = 0
    start = 0
    # The hot loop of every decode. Each varint is read inline when it takes one or two
    # bytes (nearly always) and by the varint module otherwise; an IndexError can only come
    # from the inline reads running off the end of the data. The lists are the caller's only
    # after the loop succeeds, so an error leaves nothing half-appended.
    try:
        for i in range(count):  # noqa: B007 - i names the record in error messages
            start = pos
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                b = (b & 0x7F) | (c << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = dv(data, pos)
            body_end = pos + length
            if length < MIN_RECORD_SIZE - 1 or body_end > end:
                raise CorruptRecordError(
                    f"length {length} does not fit the {end - pos} bytes left in the batch"
                )
            # attributes (pos): one byte, unused by Kafka
            b = data[pos + 1]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            elif (c := data[pos + 2]) < 0x80:
                b = (b & 0x7F) | (c << 7)
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 3
            else:
                ts_delta, pos = dvl(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                b = (b & 0x7F) | (c << 7)
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                off_delta, pos = dv(data, pos)
            b = data[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                b = (b & 0x7F) | (c << 7)
                size = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                size, pos = dv(data, pos)
            if size >= 0:
                if pos + size > body_end:
                    raise CorruptRecordError(
                        f"key of {size} bytes at byte {pos} runs past the record end "
                        f"at byte {body_end}"
                    )
                add_key(data[pos : pos + size])
                pos += size
            else:
                add_key(None)
            b = data[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                b = (b & 0x7F) | (c << 7)
                size = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                size, pos = dv(data, pos)
            if size >= 0:
                if pos + size > body_end:
                    raise CorruptRecordError(
                        f"value of {size} bytes at byte {pos} runs past the record end "
                        f"at byte {body_end}"
                    )
                add_value(data[pos : pos + size])
                pos += size
            else:
                add_value(None)
            if data[pos] == 0:  # zigzag 0: no headers
                add_headers(NO_HEADERS)
                pos += 1
            else:
                n_headers, pos = dv(data, pos)
                record_headers, pos = _decode_headers(data, pos, n_headers, body_end)
                add_headers(record_headers)
            if pos != body_end:
                raise CorruptRecordError(
                    f"fields end at byte {pos}, but the record length says byte {body_end}"
                )
            add_offset(base_offset + off_delta)
            add_ts(base_ts + ts_delta)
    except IndexError as e:
        raise CorruptRecordError(
            f"{where}: record {i} at byte {start} runs past the end of the {end} bytes of "
            f"records (the header declares {count} records)"
        ) from e
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{where}: record {i} at byte {start}: {e}") from e
    except InvalidRecordError as e:
        raise InvalidRecordError(f"{where}: record {i} at byte {start}: {e}") from e
    if pos != end:
        raise CorruptRecordError(
            f"{where}: {end - pos} bytes remain at byte {pos} after the {count} records "
            "the header declares"
        )
    return offsets, timestamps, keys, values, headers


def _decode_headers(data: bytes, pos: int, count: int, body_end: int) -> tuple[Headers, int]:
    if count < 0:
        raise InvalidRecordError(f"negative header count {count} before byte {pos}")
    if count > (body_end - pos) // 2:  # each header takes at least two bytes
        raise CorruptRecordError(
            f"header count {count} cannot fit the {body_end - pos} bytes left in the record"
        )
    dv = decode_varint
    out: list[Header] = []
    for _ in range(count):
        size, pos = dv(data, pos)
        if size < 0:
            raise InvalidRecordError(f"negative header key length {size} before byte {pos}")
        if pos + size > body_end:
            raise CorruptRecordError(
                f"header key of {size} bytes at byte {pos} runs past the record end "
                f"at byte {body_end}"
            )
        # Java decodes header keys leniently (malformed UTF-8 becomes U+FFFD); so do we, so
        # that a bad key is visible in tools instead of making the whole batch unreadable.
        key = data[pos : pos + size].decode("utf-8", "replace")
        pos += size
        size, pos = dv(data, pos)
        if size >= 0:
            if pos + size > body_end:
                raise CorruptRecordError(
                    f"header value of {size} bytes at byte {pos} runs past the record end "
                    f"at byte {body_end}"
                )
            out.append((key, data[pos : pos + size]))
            pos += size
        else:
            out.append((key, None))
    return tuple(out), pos
