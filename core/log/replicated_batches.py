"""Validation of record batches a follower fetched from its leader.

The leader assigned the offsets and leader epochs; the follower checks that the bytes are
whole, uncorrupted v2 batches with increasing offsets and stores them as they are (Kafka's
UnifiedLog.analyzeAndValidateRecords for a REPLICATION append). Client rules do not apply:
control batches, empty batches left by the log cleaner and batches above the follower's
``max.message.bytes`` are all legal here, since the leader accepted them.
"""

from __future__ import annotations

from core.errors import CorruptRecordError, OffsetsOutOfOrderError
from core.records.batch import (
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatchHeader,
    peek_batch_size,
)

Batch = tuple[int, tuple[int, ...]]
"""A batch's position in the buffer and its header fields (``HEADER.unpack_from`` order)."""


def scan_replicated_batches(buf: bytes | bytearray | memoryview) -> tuple[list[Batch], int]:
    """Validate the whole batches of a fetch response's records for one partition.

    A fetch may end inside a batch (the leader's read is bounded by bytes, not batches): such
    a trailing partial batch is not an error and is left out, as Kafka's follower does.

    Returns:
        ``(batches, valid_bytes)``: each whole batch as ``(position, fields)``, and the
        number of leading bytes they cover (the bytes to append).

    Raises:
        CorruptRecordError: a batch length below the header size, or a batch failing its CRC
            (CORRUPT_MESSAGE); nothing is returned, so nothing of the fetch is appended.
        UnsupportedVersionError: a whole batch with a magic other than 2.
        OffsetsOutOfOrderError: a batch whose last offset is below its base offset, or that
            does not start above the previous batch's last offset.
    """
    out: list[Batch] = []
    position, end = 0, len(buf)
    previous_last = None
    while end - position >= LOG_OVERHEAD:
        size = peek_batch_size(buf, position)
        assert size is not None  # at least LOG_OVERHEAD bytes remain
        if size < HEADER_SIZE:
            raise CorruptRecordError(
                f"replicated batch at byte {position}: size {size} is below the minimum "
                f"{HEADER_SIZE}"
            )
        if position + size > end:
            break  # the partial batch that ends a size-bounded read
        RecordBatchHeader(buf, position).validate()
        fields = HEADER.unpack_from(buf, position)
        base = fields[F_BASE_OFFSET]
        last = base + fields[F_LAST_OFFSET_DELTA]
        if last < base or (previous_last is not None and base <= previous_last):
            raise OffsetsOutOfOrderError(
                f"replicated batch at byte {position} has offsets {base}..{last}, not above "
                f"the previous batch's last offset {previous_last}"
            )
        previous_last = last
        out.append((position, fields))
        position += size
    return out, position
