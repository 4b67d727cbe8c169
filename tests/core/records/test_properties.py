"""Property tests: any records, any codec, build -> decode gives them back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.records.batch import Compression, RecordBatchHeader, iter_batches
from core.records.builder import RecordBatchBuilder
from core.records.record import Record, decode_columns, decode_records
from core.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

# Every test runs with each record decoder (tests/core/records/conftest.py).
pytestmark = pytest.mark.usefixtures("decoder")

maybe_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=20), maybe_bytes), max_size=4)
timestamps = st.integers(min_value=0, max_value=2**41)
record_inputs = st.lists(
    st.tuples(timestamps, maybe_bytes, maybe_bytes, headers), min_size=1, max_size=40
)


@settings(max_examples=150, deadline=None)
@given(
    inputs=record_inputs,
    codec=st.sampled_from(list(Compression)),
    base_offset=st.integers(min_value=0, max_value=2**62),
    epoch=st.integers(min_value=-1, max_value=INT32_MAX),
)
def test_build_then_decode_returns_the_records(
    inputs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: Compression,
    base_offset: int,
    epoch: int,
) -> None:
    builder = RecordBatchBuilder(
        compression=codec, base_offset=base_offset, partition_leader_epoch=epoch
    )
    for ts, key, value, hdrs in inputs:
        builder.append(value, key=key, headers=hdrs, timestamp=ts)
    buf = builder.build()
    (header,) = list(iter_batches(buf))
    expected = [
        Record(base_offset + i, ts, key, value, tuple(hdrs))
        for i, (ts, key, value, hdrs) in enumerate(inputs)
    ]
    assert decode_records(header) == expected
    cols = decode_columns(RecordBatchHeader(buf))
    assert list(
        zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers, strict=True)
    ) == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected]
    assert cols.leader_epochs == [epoch] * len(inputs)
    assert header.max_timestamp == max(ts for ts, *_ in inputs)


@given(st.integers(min_value=INT32_MIN, max_value=INT32_MAX), st.binary(max_size=3))
def test_varint_round_trip(value: int, prefix: bytes) -> None:
    data = prefix + encode_varint(value) + b"\x01"
    assert decode_varint(data, len(prefix)) == (value, len(data) - 1)


@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    data = encode_varlong(value)
    assert decode_varlong(data, 0) == (value, len(data))
