"""The error hierarchy of core: each error carries the Kafka error code it maps to.

The protocol layer answers a failed partition with ``error.error_code``; tools print the
message. Codes are Kafka's (``org.apache.kafka.common.protocol.Errors``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar


class CoreError(Exception):
    """Base of every error raised by core. ``error_code`` is Kafka's code for it."""

    error_code: ClassVar[int] = -1  # UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False


class CorruptRecordError(CoreError):
    """A batch fails its CRC, is torn, or its framing is not a RecordBatch (CORRUPT_MESSAGE)."""

    error_code = 2
    retriable = True  # Kafka marks CORRUPT_MESSAGE retriable: a resend may not be corrupt


class InvalidRecordError(CoreError):
    """A well-framed batch that breaks a rule of the format or of the broker (INVALID_RECORD)."""

    error_code = 87


@dataclass(frozen=True, slots=True)
class RecordError:
    """One refused record of a batch (KIP-467): its index in the batch and why."""

    batch_index: int
    message: str | None

    def __str__(self) -> str:
        # Kafka's ProduceResponse.RecordError.toString, which the partition's message embeds.
        shown = "null" if self.message is None else f"'{self.message}'"
        return f"RecordError(batchIndex={self.batch_index}, message={shown})"


class RecordValidationError(InvalidRecordError):
    """A batch refused because of some of its records (Kafka's RecordValidationException).

    Nothing of the batch is appended. ``record_errors`` names the refused records by their
    index in the batch; Produce v8+ answers them as ``record_errors`` and the message as
    ``error_message`` (KIP-467), so that a client can tell the bad records from the others.
    The message is Kafka's: the count and the first three errors.
    """

    def __init__(self, record_errors: Sequence[RecordError], message: str | None = None) -> None:
        self.record_errors = tuple(record_errors)
        if message is None:
            shown = ", ".join(str(e) for e in self.record_errors[:3])
            message = (
                f"One or more records have been rejected due to {len(self.record_errors)} "
                f"record errors in total, and only showing the first three errors at most: "
                f"[{shown}]"
            )
        super().__init__(message)


class InvalidTimestampError(RecordValidationError):
    """Records whose CreateTime is out of the topic's bounds (INVALID_TIMESTAMP), KIP-467 style.

    ``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms``, or a producer
    claiming LogAppendTime on a topic that assigns it.
    """

    error_code = 32

    def __init__(self, record_errors: Sequence[RecordError]) -> None:
        super().__init__(
            record_errors, "One or more records have been rejected due to invalid timestamp"
        )


class UnsupportedVersionError(CoreError):
    """A batch magic other than 2 (UNSUPPORTED_VERSION in the produce path)."""

    error_code = 35


class RecordTooLargeError(CoreError):
    """A batch larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE)."""

    error_code = 10


class RecordBatchTooLargeError(CoreError):
    """A produce request's records for one partition larger than ``segment.bytes``
    (RECORD_BATCH_TOO_LARGE): they could never fit in a segment, so Kafka refuses them
    (UnifiedLog.append) rather than giving each such append a segment of its own."""

    error_code = 18


class UnsupportedCompressionTypeError(CoreError):
    """A compression codec id that Kafka does not define (UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = 76


class OffsetOutOfRangeError(CoreError):
    """A read below the log start offset or above the log end offset (OFFSET_OUT_OF_RANGE)."""

    error_code = 1


class UnexpectedAppendOffsetError(CoreError):
    """A follower append whose first batch starts below the log end offset.

    Kafka's UnexpectedAppendOffsetException: the fetched data overlaps what the follower
    already has, so its fetch position and its log disagree. Not an error a client sees
    (Kafka would answer UNKNOWN_SERVER_ERROR); the replica fetcher acts on it.

    Attributes:
        first_offset: base offset of the first batch of the append.
        last_offset: last offset of the append.
        log_end_offset: the follower's log end offset when the append was refused.
    """

    def __init__(self, message: str, first_offset: int, last_offset: int, log_end_offset: int):
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_end_offset = log_end_offset


class OffsetsOutOfOrderError(CoreError):
    """Replicated batches whose offsets do not increase (Kafka's OffsetsOutOfOrderException).

    A follower takes offsets as the leader assigned them; a batch not wholly above the one
    before it would break every index. Not an error a client sees.
    """


class KafkaStorageError(CoreError):
    """A log dir or file could not be read or written (KAFKA_STORAGE_ERROR)."""

    error_code = 56
    retriable = True


class CorruptIndexError(CoreError):
    """An index file is inconsistent with its segment; it is rebuilt, never served."""

    error_code = 2


class OutOfOrderSequenceError(CoreError):
    """An idempotent batch whose sequence does not follow the last one.

    Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER.
    """

    error_code = 45


class DuplicateSequenceError(CoreError):
    """A retried idempotent batch already in the log (DUPLICATE_SEQUENCE_NUMBER).

    The append path normally answers duplicates with the original offsets instead.
    """

    error_code = 46


class InvalidProducerEpochError(CoreError):
    """A batch from a fenced producer epoch (INVALID_PRODUCER_EPOCH)."""

    error_code = 47


class UnknownProducerIdError(CoreError):
    """The broker has no state for this producer id (UNKNOWN_PRODUCER_ID)."""

    error_code = 59


class InvalidConfigError(CoreError):
    """A log or broker config value is invalid; the message names the key (INVALID_CONFIG)."""

    error_code = 40


class LogDirNotUsableError(CoreError):
    """A log dir cannot be created, locked or written at start-up."""

    error_code = 56


class InvalidTxnStateError(CoreError):
    """A non-transactional batch from a producer whose transaction is open (INVALID_TXN_STATE)."""

    error_code = 48


class TransactionCoordinatorFencedError(CoreError):
    """A transaction marker from a coordinator epoch older than the one that wrote the
    producer's last marker in this partition (TRANSACTION_COORDINATOR_FENCED)."""

    error_code = 52


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint file (offsets, leader epochs) cannot be parsed; the message names file and line.

    Kafka fails the log dir on such a file (KAFKA_STORAGE_ERROR), so this is a storage error.
    """


class CorruptSnapshotError(KafkaStorageError):
    """A producer-state ``.snapshot`` file fails its version, length or CRC check.

    The loader deletes such a file and falls back to an older snapshot, as Kafka does.
    """


class InvalidMetaPropertiesError(LogDirNotUsableError):
    """A log dir's ``meta.properties`` is malformed or belongs to another node or cluster."""


class InvalidOffsetError(CoreError):
    """An index entry that would break the index's ordering or capacity (a broker bug).

    Kafka raises ``InvalidOffsetException`` for the same appends; it never reaches a client.
    """
