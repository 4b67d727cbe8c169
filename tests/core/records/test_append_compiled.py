"""The compiled append steps (core/records/_append.pyx) against the pure-Python ones.

``scan_client_batches`` must accept exactly the requests the Python loop accepts and return
the same header fields; on any request the Python loop refuses, the compiled one returns
None, so the caller raises the Python loop's error: the same Kafka error code and message.
``assign_offsets`` must patch the same bytes and report the same offsets and timestamps.
"""

from __future__ import annotations

import os

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import CoreError
from core.records import batch as batch_module
from core.records import native
from core.records.batch import (
    RecordBatchHeader,
    assign_offsets,
    scan_client_batches,
)
from core.records.builder import RecordBatchBuilder

COMPILED = native.load_compiled("core.records._append")
FORCED_PURE = os.environ.get(native.PURE_PYTHON_ENV) == "1"
needs_compiled = pytest.mark.skipif(
    FORCED_PURE, reason="TIERLOG_PURE_PYTHON=1: only the pure-Python steps exist"
)


def test_the_compiled_steps_are_built_unless_forced_off() -> None:
    if FORCED_PURE:
        assert COMPILED is None
    else:
        assert COMPILED is not None, "core.records._append is not built: run `make native`"


def _batch(records: int, *, producer_id: int = -1, sequence: int = -1, ts: int = 1_000) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
    )
    for i in range(records):
        builder.append(b"v%d" % i, key=b"k", timestamp=ts + i)
    return bytes(builder.build())


def _request(counts: list[int]) -> bytes:
    return b"".join(
        _batch(n, producer_id=7 if i % 2 else -1, sequence=3 if i % 2 else -1)
        for i, n in enumerate(counts)
    )


def _outcome(buf: bytes, max_size: int) -> object:
    """The Python loop's answer: the scanned list, or the error's type and message."""
    saved = batch_module.COMPILED_SCAN
    batch_module.COMPILED_SCAN = None
    try:
        return scan_client_batches(bytearray(buf), max_size)
    except CoreError as e:
        return type(e), str(e)
    finally:
        batch_module.COMPILED_SCAN = saved


def _compiled(buf: bytes, max_size: int) -> object:
    assert COMPILED is not None
    return COMPILED.scan_client_batches(bytearray(buf), max_size, crc32c.crc32c)


@needs_compiled
def test_valid_requests_scan_to_the_same_fields() -> None:
    buf = _request([1, 5, 3, 16])
    expected = _outcome(buf, 1 << 20)
    assert isinstance(expected, list) and len(expected) == 4
    assert _compiled(buf, 1 << 20) == expected
    # And through the public function, which the append path calls.
    assert scan_client_batches(bytearray(buf), 1 << 20) == expected


@needs_compiled
@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda b: b[:-1], id="torn-tail"),
        pytest.param(lambda b: b[:30], id="torn-header"),
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b[:16] + b"\x01" + b[17:], id="magic-1"),
        pytest.param(lambda b: b[:-3] + bytes([b[-3] ^ 1]) + b[-2:], id="crc-mismatch"),
        pytest.param(lambda b: b[:8] + b"\x00\x00\x00\x10" + b[12:], id="length-below-minimum"),
    ],
)
def test_invalid_requests_fall_back_to_the_python_error(mutate) -> None:  # type: ignore[no-untyped-def]
    buf = mutate(_request([2, 3]))
    expected = _outcome(buf, 1 << 20)
    assert isinstance(expected, tuple), "the mutation must make the request invalid"
    assert _compiled(buf, 1 << 20) is None
    with pytest.raises(expected[0]) as raised:
        scan_client_batches(bytearray(buf), 1 << 20)
    assert str(raised.value) == expected[1]


@needs_compiled
def test_a_batch_above_max_message_bytes_is_refused_by_both() -> None:
    buf = _request([4])
    expected = _outcome(buf, len(buf) - 1)
    assert isinstance(expected, tuple) and expected[0].__name__ == "RecordTooLargeError"
    assert _compiled(buf, len(buf) - 1) is None


def _with_field(buf: bytes, at: int, data: bytes) -> bytes:
    """``buf`` (one batch) with ``data`` written at ``at`` and its CRC made right again, so
    that only the rule about that field can refuse it."""
    out = bytearray(buf)
    out[at : at + len(data)] = data
    out[17:21] = RecordBatchHeader(out, 0).compute_crc().to_bytes(4, "big")
    return bytes(out)


@needs_compiled
@pytest.mark.parametrize(
    ("at", "data"),
    [
        *[pytest.param(21, bytes([0, codec]), id=f"codec-{codec}") for codec in (5, 6, 7)],
        pytest.param(21, b"\x00\x20", id="control"),
        pytest.param(23, (-1).to_bytes(4, "big", signed=True), id="negative-delta"),
        pytest.param(23, (5).to_bytes(4, "big"), id="delta-not-count"),
        pytest.param(57, (0).to_bytes(4, "big"), id="count-0"),
        pytest.param(43, (7).to_bytes(8, "big"), id="producer-without-sequence"),
    ],
)
def test_each_client_rule_refuses_in_both(at: int, data: bytes) -> None:
    buf = _with_field(_batch(3), at, data)
    expected = _outcome(buf, 1 << 20)
    assert isinstance(expected, tuple), "the edit must break a client rule"
    assert expected[0].__name__ == "InvalidRecordError"
    assert _compiled(buf, 1 << 20) is None


@needs_compiled
def test_defined_codecs_and_an_idempotent_batch_pass_in_both() -> None:
    for codec in range(5):
        buf = _with_field(_batch(2), 21, bytes([0, codec]))
        assert _compiled(buf, 1 << 20) == _outcome(buf, 1 << 20)
    buf = _batch(2, producer_id=7, sequence=0)
    assert _compiled(buf, 1 << 20) == _outcome(buf, 1 << 20)


# Header fields a client could set wrongly; each rewritten field keeps a valid CRC when it
# lies before the CRC'd range and breaks it otherwise (both paths must agree either way).
_FIELD_OFFSETS = [0, 8, 12, 16, 21, 23, 43, 51, 53, 57]


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    counts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=3),
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=2000), st.integers(0, 255)), max_size=3
    ),
    field_edit=st.none()
    | st.tuples(st.sampled_from(_FIELD_OFFSETS), st.binary(min_size=1, max_size=8)),
    recrc=st.booleans(),
    cut=st.none() | st.integers(min_value=0, max_value=2000),
    max_size=st.sampled_from([1 << 20, 100, 200]),
)
def test_compiled_and_python_scans_agree_on_any_request(
    counts: list[int],
    edits: list[tuple[int, int]],
    field_edit: tuple[int, bytes] | None,
    recrc: bool,
    cut: int | None,
    max_size: int,
) -> None:
    buf = bytearray(_request(counts))
    if field_edit is not None:
        at, data = field_edit
        buf[at : at + len(data)] = data  # same length: the batch is at least 61 bytes
        if recrc and len(buf) >= 61:
            header = RecordBatchHeader(buf, 0)
            if 61 <= header.size_in_bytes <= len(buf):
                buf[17:21] = header.compute_crc().to_bytes(4, "big")
    for at, value in edits:
        if at < len(buf):
            buf[at] = value
    if cut is not None:
        buf = buf[:cut]
    expected = _outcome(bytes(buf), max_size)
    got = _compiled(bytes(buf), max_size)
    if isinstance(expected, list):
        assert got == expected
    else:
        assert got is None
        with pytest.raises(expected[0]) as raised:
            scan_client_batches(bytearray(buf), max_size)
        assert str(raised.value) == expected[1]


def _assign_both(buf: bytes, append_time: int) -> tuple[object, object, bytes, bytes]:
    scanned = _outcome(buf, 1 << 20)
    assert isinstance(scanned, list)
    compiled_buf, pure_buf = bytearray(buf), bytearray(buf)
    compiled = assign_offsets(compiled_buf, scanned, 100, 5, append_time)
    saved = batch_module.COMPILED_SCAN
    batch_module.COMPILED_SCAN = None
    try:
        python = assign_offsets(pure_buf, scanned, 100, 5, append_time)
    finally:
        batch_module.COMPILED_SCAN = saved
    return compiled, python, bytes(compiled_buf), bytes(pure_buf)


@pytest.mark.parametrize("append_time", [-1, 1_700_000_000_000])
def test_assign_offsets_patches_the_same_bytes(append_time: int) -> None:
    buf = _request([1, 5, 3])
    compiled, python, compiled_buf, pure_buf = _assign_both(buf, append_time)
    assert compiled == python
    assert compiled_buf == pure_buf
    batches, last_offset, max_ts, offset_of_max_ts, records = python  # type: ignore[misc]
    assert [b[1] for b in batches] == [100, 101, 106]
    assert (last_offset, records) == (108, 9)
    # Every patched batch is still valid (the CRC covers the LogAppendTime rewrite).
    patched = bytearray(pure_buf)
    headers = [RecordBatchHeader(patched, p) for p, _ in scan_client_batches(patched, 1 << 20)]
    assert [h.partition_leader_epoch for h in headers] == [5, 5, 5]
    if append_time >= 0:
        assert max_ts == append_time and offset_of_max_ts == 100
        assert all(h.max_timestamp == append_time for h in headers)
    else:
        assert max_ts == 1_004 and offset_of_max_ts == 105


def test_assign_offsets_builds_the_given_tuple_type() -> None:
    from core.log.segment import AppendedBatch

    scanned = scan_client_batches(bytearray(_request([2])), 1 << 20)
    batches, *_ = assign_offsets(bytearray(_request([2])), scanned, 0, 0, -1, AppendedBatch)
    assert isinstance(batches[0], AppendedBatch)
    assert batches[0].last_offset == 1
