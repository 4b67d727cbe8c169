"""The per-record rules Kafka's LogValidator applies to a client's batch, reported per record.

The whole-batch rules (framing, CRC, offset range and count, control batches, sequences)
are checked in ``core.records.batch.scan_client_batches``. The rules here concern single
records, and a batch that breaks them is refused whole with the index of every bad record
(Kafka's RecordValidationException, answered as Produce v8+ ``record_errors``, KIP-467):

- a compacted topic refuses a record without a key (INVALID_RECORD);
- with ``message.timestamp.type=CreateTime``, a record's timestamp must lie within
  ``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]``
  (INVALID_TIMESTAMP); a record without a timestamp (-1) is not checked;
- a producer may not mark its batch LogAppendTime where the topic assigns LogAppendTime
  (INVALID_TIMESTAMP).

Kafka checks a record's key, then its timestamp, and reports at most one error per record;
the batch's error is INVALID_TIMESTAMP if any record has a timestamp error, else
INVALID_RECORD. Batches are checked in order and the first one with bad records fails the
request, as in Kafka (whose v3+ produce requests carry one batch per partition).

Decoding records costs a decompression, so a batch is decoded only when a rule can fail:
the topic is compacted, ``message.timestamp.before.max.ms`` is bounded, the batch's header
claims a max timestamp past ``now + message.timestamp.after.max.ms``, or the batch claims
LogAppendTime. The header's max timestamp is trusted here as the rest of the append path
(time index, retention, segment.ms) trusts it.
"""

from __future__ import annotations

from core.config import INT64_MAX
from core.errors import InvalidTimestampError, RecordError, RecordValidationError
from core.log.config import LogConfig
from core.records.batch import (
    F_ATTRIBUTES,
    F_MAX_TIMESTAMP,
    NO_TIMESTAMP,
    Attributes,
    RecordBatchHeader,
)
from core.records.record import Record, decode_records

_LOG_APPEND_TIME = int(Attributes.TIMESTAMP_TYPE)


def validate_records(
    buf: bytearray,
    batches: list[tuple[int, tuple[int, ...]]],
    config: LogConfig,
    topic_partition: str,
    now: int,
) -> None:
    """Check every record of the scanned client ``batches`` of ``buf``.

    Args:
        batches: ``(position, header fields)`` from ``scan_client_batches``.
        topic_partition: ``topic-partition``, as Kafka names it in the messages.
        now: the broker's time in ms, the reference of the timestamp bounds.

    Raises:
        InvalidTimestampError: some records of a batch have out-of-bounds timestamps (and
            maybe other errors); ``record_errors`` names them all.
        RecordValidationError: some records of a batch break the key rule (INVALID_RECORD).
    """
    create_time = not config.log_append_time
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    latest_allowed = _int64(now + after)
    for pos, fields in batches:
        claims_append_time = bool(fields[F_ATTRIBUTES] & _LOG_APPEND_TIME)
        if not (
            config.compact
            or claims_append_time
            or (create_time and (before < INT64_MAX or fields[F_MAX_TIMESTAMP] > latest_allowed))
        ):
            continue
        errors: list[RecordError] = []
        timestamp_error = False
        records = decode_records(RecordBatchHeader(buf, pos), verify=False)
        for index, record in enumerate(records):
            if config.compact and record.key is None:
                errors.append(
                    RecordError(
                        index,
                        "Compacted topic cannot accept message without key in topic partition "
                        f"{topic_partition}.",
                    )
                )
                continue
            message = _timestamp_error(record, create_time, claims_append_time, now, before, after)
            if message is not None:
                errors.append(RecordError(index, message))
                timestamp_error = True
        if errors and timestamp_error:
            raise InvalidTimestampError(errors)
        if errors:
            raise RecordValidationError(errors)


def _timestamp_error(
    record: Record,
    create_time: bool,
    claims_append_time: bool,
    now: int,
    before: int,
    after: int,
) -> str | None:
    """Kafka's LogValidator.validateTimestamp, with Java's 64-bit arithmetic."""
    ts = record.timestamp
    if create_time and ts != NO_TIMESTAMP:
        diff = _int64(now - ts)
        if diff > before or _int64(-diff) > after:
            return (
                f"Timestamp {ts} of message with offset {record.offset} is out of range. The "
                f"timestamp should be within [{_int64(now - before)}, {_int64(now + after)}]"
            )
    elif claims_append_time:
        return (
            f"Invalid timestamp type in message {_describe(record)}. Producer should not set "
            "timestamp type to LogAppendTime."
        )
    return None


def _describe(record: Record) -> str:
    """Kafka's DefaultRecord.toString."""
    key = 0 if record.key is None else len(record.key)
    value = 0 if record.value is None else len(record.value)
    return (
        f"DefaultRecord(offset={record.offset}, timestamp={record.timestamp}, "
        f"key={key} bytes, value={value} bytes)"
    )


def _int64(value: int) -> int:
    """``value`` wrapped to a signed 64-bit integer, as Java's long arithmetic does."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


__all__ = ["validate_records"]
