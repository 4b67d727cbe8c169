"""Fixtures for the log tests: batches as a client would send them."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from core.records.batch import Compression
from core.records.builder import RecordBatchBuilder


def client_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp: int = 1_700_000_000_000,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytearray:
    """A batch with base offset 0 and no leader epoch, the way producers send it."""
    builder = RecordBatchBuilder(
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        builder.append(value, key=key, timestamp=timestamp + i)
    return builder.build()


@pytest.fixture
def batch():
    return client_batch
