"""Batch boundaries in bytes read from a remote segment's log, and their CRC32C check.

A ranged read of a remote segment starts at a batch (a position from the offset index, or
where a read before it ended) and ends wherever its byte count says, often inside a batch.
These helpers find what such bytes hold: the answer to a fetch, where the whole batches end
and the offset after them, and the bound of the search for aborted transactions; and they
refuse a corrupt batch before it reaches a consumer.
"""

from __future__ import annotations

from core.records.batch import HEADER_SIZE, RecordBatchHeader, peek_batch_size
from tiered.api import RemoteLogSegmentMetadata, RemoteStorageError


class CorruptRemoteDataError(RemoteStorageError):
    """A batch read from the remote tier fails its CRC32C: it is never served."""


def answer_in(prefix: bytes, fetch_offset: int, max_bytes: int) -> bytes | None:
    """What a fetch at ``fetch_offset`` answers from a read-ahead range ``prefix``: its
    first ``max_bytes`` (the whole first batch when larger), when that batch is whole and
    holds the offset; None otherwise (a batch larger than the range, or a range that does
    not start at the batch asked for). A slice of the whole range is the range itself."""
    size = peek_batch_size(prefix, 0)
    if (
        size is None
        or size < HEADER_SIZE
        or size > len(prefix)
        or RecordBatchHeader(prefix, 0).last_offset < fetch_offset
    ):
        return None
    return prefix[: max(max_bytes, size)]


def whole_batches(data: bytes, at: int = 0) -> tuple[int, int | None]:
    """Where the whole batches of ``data`` from byte ``at`` end, and the offset after the
    last of them (None when there is none)."""
    next_offset = None
    while at + HEADER_SIZE <= len(data):
        size = peek_batch_size(data, at)
        if size is None or size < HEADER_SIZE or at + size > len(data):
            break
        next_offset = RecordBatchHeader(data, at).next_offset
        at += size
    return at, next_offset


def upper_bound_offset(data: bytes, fetch_offset: int) -> int:
    """One past the last offset of the batches in ``data`` (a partial last batch counts:
    its header is enough, and a wider bound only makes the aborted list longer)."""
    at, upper = 0, fetch_offset + 1
    while at + HEADER_SIZE <= len(data):
        size = peek_batch_size(data, at)
        upper = RecordBatchHeader(data, at).last_offset + 1
        if size is None or size < HEADER_SIZE:
            break
        at += size
    return upper


def verify_batches(md: RemoteLogSegmentMetadata, position: int, data: bytes) -> None:
    """Check the CRC32C of every whole batch of ``data`` (read from byte ``position`` of
    the segment). Ranged reads cannot be checked against the manifest's whole-object
    checksum, but every batch carries its own: a flipped bit in the bucket, or a faulty
    proxy or disk on the way, is refused here instead of reaching a consumer. A partial
    last batch is not served as records (clients drop it) and is checked when read whole.

    Raises:
        CorruptRemoteDataError: naming the segment and the byte position.
    """
    at = 0
    while (size := peek_batch_size(data, at)) is not None and at + size <= len(data):
        if size < HEADER_SIZE or (h := RecordBatchHeader(data, at)).crc != h.compute_crc():
            raise CorruptRemoteDataError(
                f"remote segment {md.remote_log_segment_id}: the batch at byte "
                f"{position + at} fails its CRC32C check"
            )
        at += size
