"""The compiled record decoder against the pure-Python one, on the same bytes.

Valid batches of every codec must decode to equal values, and malformed records sections
(mutated, truncated, random bytes, wrong counts) must fail the same way: the same exception
type with the same message, or the same records. ``ColumnBuffers`` (Arrow's layout, for the
archive reader) must hold exactly what ``decode_columns`` lists, and append nothing for a
batch that fails.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import CorruptRecordError, InvalidRecordError
from core.records import native
from core.records.batch import (
    HEADER_SIZE,
    LENGTH_POS,
    LOG_OVERHEAD,
    RECORDS_COUNT_POS,
    Compression,
    RecordBatchHeader,
    TimestampType,
)
from core.records.builder import RecordBatchBuilder
from core.records.codec import DecompressionBuffer
from core.records.record import (
    RecordColumns,
    decode_columns,
    decode_into_buffers,
    decode_records,
    flatten_headers,
)

COMPILED = native.load()
FORCED_PURE = os.environ.get(native.PURE_PYTHON_ENV) == "1"

maybe_bytes = st.none() | st.binary(max_size=200)
header_keys = st.text(max_size=12)
headers = st.lists(st.tuples(header_keys, maybe_bytes), max_size=3)
records = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**41), maybe_bytes, maybe_bytes, headers),
    min_size=1,
    max_size=20,
)


def test_the_compiled_decoder_is_built_unless_forced_off() -> None:
    if FORCED_PURE:
        assert native.load() is None
        assert native.implementation() == "pure-python"
    else:
        assert COMPILED is not None, "core.records._native is not built: run `make native`"
        assert native.COMPILED is COMPILED
        assert native.implementation() == "compiled"


needs_compiled = pytest.mark.skipif(
    FORCED_PURE, reason="TIERLOG_PURE_PYTHON=1: only the pure-Python decoder exists"
)


def run_with(module: ModuleType | None, fn: Callable[[], Any]) -> tuple[str, Any]:
    """``fn()`` with the given decoder: ("ok", result) or (error type, message)."""
    saved = native.COMPILED
    native.COMPILED = module
    try:
        return ("ok", fn())
    except (CorruptRecordError, InvalidRecordError) as e:
        return (type(e).__name__, str(e))
    finally:
        native.COMPILED = saved


def both(fn: Callable[[], Any]) -> tuple[tuple[str, Any], tuple[str, Any]]:
    return run_with(COMPILED, fn), run_with(None, fn)


def build(
    inputs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: Compression = Compression.NONE,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> bytearray:
    builder = RecordBatchBuilder(
        compression=codec,
        base_offset=base_offset,
        timestamp_type=timestamp_type,
        log_append_time=1_700_000_000_123
        if timestamp_type == TimestampType.LOG_APPEND_TIME
        else None,
    )
    for ts, key, value, hdrs in inputs:
        builder.append(value, key=key, headers=hdrs, timestamp=ts)
    return builder.build()


def with_section(template: bytes, section: bytes, count: int) -> bytearray:
    """``template``'s header (uncompressed) over another records section and count; the CRC
    is left stale, so decode with verify=False."""
    buf = bytearray(template[:HEADER_SIZE]) + section
    struct.pack_into(">i", buf, LENGTH_POS, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">i", buf, RECORDS_COUNT_POS, count)
    return buf


def columns_from_buffers(
    buf: bytes | bytearray, scratch: DecompressionBuffer | None = None, capacity: int = 0
) -> RecordColumns:
    """What the compiled ColumnBuffers hold for a batch, read back into lists."""
    assert COMPILED is not None
    into = COMPILED.ColumnBuffers(capacity)
    saved = native.COMPILED
    native.COMPILED = COMPILED
    try:
        decode_into_buffers(RecordBatchHeader(buf), into, verify=False, scratch=scratch)
    finally:
        native.COMPILED = saved
    n, nh = into.rows, into.header_rows
    b = {k: bytes(memoryview(v)) for k, v in into.buffers().items()}

    def ints(name: str, fmt: str, count: int) -> list[int]:
        return list(struct.unpack(f"={count}{fmt}", b[name]))

    def binary(prefix: str, count: int, nullable: bool = True) -> list[bytes | None]:
        ends = ints(f"{prefix}_offsets", "i", count + 1)
        data = b[f"{prefix}_data"]
        valid = b.get(f"{prefix}_validity")
        out: list[bytes | None] = []
        for i in range(count):
            if nullable and valid is not None and not valid[i >> 3] >> (i & 7) & 1:
                out.append(None)
            else:
                out.append(data[ends[i] : ends[i + 1]])
        return out

    hkeys = [k.decode("utf-8") for k in binary("header_key", nh, nullable=False)]  # type: ignore[union-attr]
    hvalues = binary("header_value", nh)
    hends = ints("header_ends", "i", n + 1)
    return RecordColumns(
        offsets=ints("offset", "q", n),
        timestamps=ints("timestamp", "q", n),
        keys=binary("key", n),
        values=binary("value", n),
        headers=[
            tuple(
                zip(hkeys[hends[i] : hends[i + 1]], hvalues[hends[i] : hends[i + 1]], strict=True)
            )
            for i in range(n)
        ],
        timestamp_types=ints("timestamp_type", "i", n),
        leader_epochs=ints("leader_epoch", "i", n),
        producer_ids=ints("producer_id", "q", n),
    )


SHARED_SCRATCH = DecompressionBuffer()


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(
    inputs=records,
    codec=st.sampled_from(list(Compression)),
    base_offset=st.integers(min_value=0, max_value=2**62),
    timestamp_type=st.sampled_from(list(TimestampType)),
)
def test_valid_batches_decode_to_the_same_values(
    inputs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: Compression,
    base_offset: int,
    timestamp_type: TimestampType,
) -> None:
    buf = bytes(build(inputs, codec, base_offset, timestamp_type))
    compiled, pure = both(lambda: decode_records(RecordBatchHeader(buf)))
    assert compiled[0] == "ok"
    assert compiled == pure
    compiled, pure = both(lambda: decode_columns(RecordBatchHeader(buf)))
    assert compiled == pure
    assert columns_from_buffers(buf) == pure[1]
    # As the archive reader decodes: into reserved columns, through a decompression buffer
    # reused from example to example (batches of every size and codec in turn).
    assert columns_from_buffers(buf, SHARED_SCRATCH, capacity=len(buf)) == pure[1]
    flat = both(lambda: flatten_headers(pure[1].headers))
    assert flat[0] == flat[1]


def mutate(section: bytes, data: st.DataObject) -> bytes:
    """A few random edits: overwrite, insert or delete bytes, or cut the tail."""
    out = bytearray(section)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        kind = data.draw(st.sampled_from(["set", "insert", "delete", "cut"]))
        at = data.draw(st.integers(min_value=0, max_value=max(0, len(out) - 1)))
        if kind == "set" and out:
            out[at] = data.draw(st.integers(min_value=0, max_value=255))
        elif kind == "insert":
            out[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and out:
            del out[at : at + data.draw(st.integers(min_value=1, max_value=4))]
        elif kind == "cut":
            del out[at:]
    return bytes(out)


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(inputs=records, data=st.data())
def test_malformed_records_fail_the_same_way(
    inputs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    data: st.DataObject,
) -> None:
    valid = bytes(build(inputs))
    section = mutate(valid[HEADER_SIZE:], data)
    count = len(inputs) + data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    buf = bytes(with_section(valid, section, count))
    compiled, pure = both(lambda: decode_records(RecordBatchHeader(buf), verify=False))
    assert compiled == pure
    # The Arrow-layout path: the same outcome, and on success the same columns.
    pure_columns = run_with(None, lambda: decode_columns(RecordBatchHeader(buf), verify=False))
    assert run_with(COMPILED, lambda: columns_from_buffers(buf)) == pure_columns


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(section=st.binary(max_size=120), count=st.integers(min_value=-2, max_value=20))
def test_random_bytes_fail_the_same_way(section: bytes, count: int) -> None:
    buf = bytes(with_section(build([(0, b"k", b"v", [])]), section, count))
    compiled, pure = both(lambda: decode_records(RecordBatchHeader(buf), verify=False))
    assert compiled == pure


@needs_compiled
def test_invalid_utf8_header_keys_are_replaced_alike() -> None:
    valid = build([(0, None, b"v", [("k\u00e9y", b"x")])])
    at = bytes(valid).index("k\u00e9y".encode()) + 1
    valid[at] = 0xFF  # a lone 0xFF, then a stray continuation byte: two malformed bytes
    buf = bytes(valid)
    compiled, pure = both(lambda: decode_records(RecordBatchHeader(buf), verify=False))
    assert compiled == pure
    assert pure[1][0].headers == (("k\ufffd\ufffdy", b"x"),)
    assert columns_from_buffers(buf).headers == [(("k\ufffd\ufffdy", b"x"),)]


@needs_compiled
def test_a_failed_batch_leaves_the_column_buffers_unchanged() -> None:
    assert COMPILED is not None
    good = bytes(build([(5, b"a", b"1", [("h", None)]), (6, None, b"2", [])], base_offset=10))
    bad = bytearray(good)
    struct.pack_into(">i", bad, RECORDS_COUNT_POS, 3)  # one record more than there is
    into = COMPILED.ColumnBuffers()
    saved = native.COMPILED
    native.COMPILED = COMPILED
    try:
        decode_into_buffers(RecordBatchHeader(good), into)
        with pytest.raises(CorruptRecordError, match=r"record count|runs past"):
            decode_into_buffers(RecordBatchHeader(bytes(bad)), into, verify=False)
        assert (into.rows, into.header_rows, into.null_counts) == (2, 1, (1, 0, 1))
        decode_into_buffers(RecordBatchHeader(good), into)
        assert into.offsets_from(0) == [10, 11, 10, 11]
    finally:
        native.COMPILED = saved


@needs_compiled
@pytest.mark.parametrize("timestamp_type", list(TimestampType))
def test_column_buffers_scale_timestamps_and_know_their_offset_bounds(timestamp_type) -> None:
    # What the archive reader asks for: microseconds for Arrow (wrapping at int64 as Arrow's
    # multiply does) and the offsets' bounds (no kernel to find them).
    assert COMPILED is not None
    inputs = [(5, b"a", b"1", []), (-7, None, b"2", []), (2**63 // 1000 + 1, b"c", None, [])]
    good = bytes(build(inputs, base_offset=10, timestamp_type=timestamp_type))
    bad = build(inputs, base_offset=100, timestamp_type=timestamp_type)
    struct.pack_into(">i", bad, RECORDS_COUNT_POS, 4)  # one record more than there is
    want = decode_columns(RecordBatchHeader(good)).timestamps
    into = COMPILED.ColumnBuffers(0, 1000)
    assert into.offset_bounds is None
    assert into.timestamp_scale == 1000
    saved = native.COMPILED
    native.COMPILED = COMPILED
    try:
        decode_into_buffers(RecordBatchHeader(good), into)
        with pytest.raises(CorruptRecordError):
            decode_into_buffers(RecordBatchHeader(bytes(bad)), into, verify=False)
    finally:
        native.COMPILED = saved
    assert into.offset_bounds == (10, 12)  # the failed batch left no trace
    micros = struct.unpack("=3q", bytes(memoryview(into.buffers()["timestamp"])))
    wrapped = [(t * 1000 + 2**63) % 2**64 - 2**63 for t in want]
    assert list(micros) == wrapped
    if timestamp_type == TimestampType.CREATE_TIME:
        assert any(w != t * 1000 for w, t in zip(wrapped, want, strict=True))  # one wrapped
