"""Recovery's batch walk: the compiled one (core/log/_recovery.pyx) against the Python one.

Both walk the same segment bytes, valid and corrupt, in chunks of several sizes (batches cut
by a chunk boundary anywhere, the length field included) and must find the same valid end,
the same index entries, epochs, producer batches and max timestamp, and refuse the same
batch with the same error. ``LogSegment.recover`` built on them must keep every valid batch
whatever the chunk size, and cut exactly the invalid tail.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import CoreError
from core.log import recovery_walk
from core.log import segment as segment_module
from core.log.config import LogConfig
from core.log.file_records import FileRecords
from core.log.segment import LogSegment
from core.records import native
from core.records.builder import RecordBatchBuilder

FORCED_PURE = os.environ.get(native.PURE_PYTHON_ENV) == "1"
COMPILED = recovery_walk.load()
needs_compiled = pytest.mark.skipif(
    FORCED_PURE, reason="TIERLOG_PURE_PYTHON=1: only the pure-Python walk exists"
)
BASE = 1000


def test_the_compiled_walk_is_built_unless_forced_off() -> None:
    if FORCED_PURE:
        assert COMPILED is None
    else:
        assert COMPILED is not None, "core.log._recovery is not built: run `make native`"


def _segment_bytes(sizes: list[int], epochs: list[int], producers: list[bool]) -> bytes:
    out = bytearray()
    offset = BASE
    for i, records in enumerate(sizes):
        producer = producers[i % len(producers)]
        builder = RecordBatchBuilder(
            base_offset=offset,
            partition_leader_epoch=epochs[i % len(epochs)],
            producer_id=9 if producer else -1,
            producer_epoch=0 if producer else -1,
            base_sequence=offset - BASE if producer else -1,
        )
        for j in range(records):
            # Timestamps go up and down, so the time index sees both.
            builder.append(b"x" * (40 * j), timestamp=10_000 + ((i * 7) % 5) * 100 + j)
        out += builder.build()
        offset += records
    return bytes(out)


def _walk(walk: object, data: bytes, chunk: int) -> dict[str, object]:
    """Feed ``data`` to ``walk`` as ``LogSegment.recover`` does, ``chunk`` bytes at a time."""
    buf = bytearray(chunk)
    position, end, error = 0, len(data), None
    try:
        while position < end:
            length = min(len(buf), end - position)
            buf[:length] = data[position : position + length]
            consumed = walk.feed(buf, length, position, end)  # type: ignore[attr-defined]
            if consumed == 0:
                buf = bytearray(struct.unpack_from(">i", buf, 8)[0] + 12)
            position += consumed
    except CoreError as e:
        error = (type(e), str(e))
    return {
        name: getattr(walk, name)
        for name in (
            "valid_bytes",
            "last_offset",
            "max_timestamp",
            "max_timestamp_offset",
            "bytes_since_last_entry",
            "last_entry_timestamp",
            "offset_entries",
            "time_entries",
            "epochs",
            "producer_positions",
        )
    } | {"error": error}


def _both(
    data: bytes, chunk: int, max_size: int | None = None, interval: int = 100
) -> tuple[dict, dict]:
    assert COMPILED is not None
    python = _walk(recovery_walk.PyRecoveryWalk(BASE, interval, max_size, "seg.log"), data, chunk)
    compiled = _walk(
        COMPILED.RecoveryWalk(
            BASE,
            interval,
            -1 if max_size is None else max_size,
            "seg.log",
            recovery_walk.crc32c.crc32c,
            recovery_walk.check_stored_batch,
        ),
        data,
        chunk,
    )
    return python, compiled


@needs_compiled
@pytest.mark.parametrize("chunk", [64, 100, 257, 4096, 1 << 20])
def test_a_valid_segment_walks_the_same_in_any_chunk_size(chunk: int) -> None:
    data = _segment_bytes([1, 3, 2, 5, 1, 4, 2], [3, 3, 4, 4, 4, 6, 6], [False, True])
    python, compiled = _both(data, chunk)
    assert python == compiled
    assert python["error"] is None and python["valid_bytes"] == len(data)
    assert python["epochs"] == [(3, BASE), (4, BASE + 4), (6, BASE + 12)]
    assert python["offset_entries"] and python["time_entries"]


@needs_compiled
def test_index_entries_follow_the_interval_rule_at_its_edges() -> None:
    """An entry once more than ``index.interval.bytes`` were walked since the last: the
    interval set to exactly one batch's size, one byte less and one more."""
    data = _segment_bytes([1, 1, 1, 1, 1, 1], [1], [False])
    size = struct.unpack_from(">i", data, 8)[0] + 12
    counts = []
    for interval in (0, size - 1, size, size + 1, 10 * size):
        python, compiled = _both(data, 1 << 16, interval=interval)
        assert python == compiled
        counts.append(len(python["offset_entries"]) // 8)
    # One-record batches of equal size: after each batch once the interval is below it.
    assert counts == [5, 5, 2, 2, 0]


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=6),
    epochs=st.lists(st.integers(min_value=-1, max_value=3), min_size=1, max_size=3),
    producers=st.lists(st.booleans(), min_size=1, max_size=3),
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=3000), st.integers(0, 255)), max_size=3
    ),
    cut=st.none() | st.integers(min_value=0, max_value=3000),
    chunk=st.sampled_from([13, 61, 200, 1 << 16]),
    max_size=st.sampled_from([None, 300]),
)
def test_compiled_and_python_walks_agree_on_any_segment(
    sizes: list[int],
    epochs: list[int],
    producers: list[bool],
    edits: list[tuple[int, int]],
    cut: int | None,
    chunk: int,
    max_size: int | None,
) -> None:
    data = bytearray(_segment_bytes(sizes, epochs, producers))
    for at, value in edits:
        if at < len(data):
            data[at] = value
    if cut is not None:
        data = data[:cut]
    python, compiled = _both(bytes(data), chunk, max_size)
    assert python == compiled


def _walk_module(implementation: str) -> object:
    return COMPILED if implementation == "compiled" else None


def _write_segment(directory: Path, data: bytes) -> LogSegment:
    config = LogConfig(index_interval_bytes=100)
    segment = LogSegment(directory, BASE, config, created_ms=0)
    segment.log.append(data)
    return segment


@pytest.mark.parametrize("implementation", ["compiled", "pure-python"])
@pytest.mark.parametrize("chunk", [61, 70, 4096])
def test_recovery_keeps_batches_whose_header_a_chunk_boundary_cuts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, implementation: str, chunk: int
) -> None:
    """Before the walk, a chunk ending inside a batch's first 12 bytes read as a torn batch
    and recovery cut the valid log there."""
    if implementation == "compiled" and COMPILED is None:
        pytest.skip("TIERLOG_PURE_PYTHON=1")
    monkeypatch.setattr(
        recovery_walk, "COMPILED", COMPILED if implementation == "compiled" else None
    )
    monkeypatch.setattr(segment_module, "SCAN_CHUNK_BYTES", chunk)
    data = _segment_bytes([1, 2, 3, 1, 2, 4, 1], [1], [False])
    segment = _write_segment(tmp_path, data)
    truncated, producers = segment.recover(None)
    assert truncated == 0 and producers == []
    assert segment.size == len(data)
    assert segment.read_next_offset() == BASE + 14


@pytest.mark.parametrize("implementation", ["compiled", "pure-python"])
def test_recovery_cuts_a_torn_tail_and_rebuilds_the_same_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, implementation: str
) -> None:
    if implementation == "compiled" and COMPILED is None:
        pytest.skip("TIERLOG_PURE_PYTHON=1")
    monkeypatch.setattr(
        recovery_walk, "COMPILED", COMPILED if implementation == "compiled" else None
    )
    data = _segment_bytes([2, 3, 1, 4, 2], [1, 2], [True, False])
    segment = _write_segment(tmp_path, data + data[:30])  # a torn further batch
    epochs: list[tuple[int, int]] = []
    truncated, producers = segment.recover(None, lambda e, o: epochs.append((e, o)))
    assert truncated == 30 and segment.size == len(data)
    assert epochs == [(1, BASE), (2, BASE + 2), (1, BASE + 5), (2, BASE + 6), (1, BASE + 10)]
    assert len(producers) == 3
    records = FileRecords(segment.log.path, create=False, writable=False)
    try:
        assert [p for p, h in records.batch_headers() if h.has_producer_id] == producers
    finally:
        records.close()
    index_files = (segment.offset_index.path.read_bytes(), segment.time_index.path.read_bytes())
    segment.close()
    # The other implementation rebuilds byte-identical index files from the same log.
    other = None if implementation == "compiled" else COMPILED
    if implementation == "pure-python" and COMPILED is None:
        return
    monkeypatch.setattr(recovery_walk, "COMPILED", other)
    again = LogSegment(
        tmp_path, BASE, LogConfig(index_interval_bytes=100), created_ms=0, create=False
    )
    assert again.recover(None).truncated_bytes == 0
    assert (again.offset_index.path.read_bytes(), again.time_index.path.read_bytes()) == index_files
    again.close()


def test_scan_batches_reads_on_when_a_chunk_cuts_a_length_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.log import file_records

    data = _segment_bytes([1, 2, 3, 1, 2], [1], [False])
    path = tmp_path / "x.log"
    path.write_bytes(data)
    records = FileRecords(path, create=False, writable=False)
    try:
        expected = [p for p, _ in records.batch_headers()]
        for chunk in (61, 70, 100, 150):
            monkeypatch.setattr(file_records, "SCAN_CHUNK_BYTES", chunk)
            assert [p for p, _ in records.scan_batches(0)] == expected
    finally:
        records.close()
