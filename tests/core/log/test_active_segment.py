"""The compiled leader append (core/log/_active_segment.pyx) against the Python path.

``PartitionLog.append_as_leader`` hands each request to the compiled ``ActiveSegmentAppender``
first; it appends the common case or returns None before changing anything, and the Python
path (``_append_as_leader_python``, the twin) does the rest. Two logs, one with the compiled
appender and one without, get the same requests and the same clock: every answer (the
``LogAppendInfo``, or the error's type and message), every patched request buffer, the
in-memory state and finally every file of both log directories must be identical, byte for
byte.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config import INT64_MAX
from core.errors import CoreError, KafkaStorageError
from core.log import partition_log as partition_log_module
from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.records import native
from core.records.batch import Compression, RecordBatchHeader
from core.records.builder import RecordBatchBuilder

COMPILED = native.load_compiled("core.log._active_segment")
FORCED_PURE = os.environ.get(native.PURE_PYTHON_ENV) == "1"
needs_compiled = pytest.mark.skipif(
    FORCED_PURE, reason="TIERLOG_PURE_PYTHON=1: only the Python path exists"
)

START_MS = 1_700_000_000_000
PRODUCER_ID = 7


def test_the_compiled_append_is_built_unless_forced_off() -> None:
    if FORCED_PURE:
        assert COMPILED is None
    else:
        assert COMPILED is not None, "core.log._active_segment is not built: run `make native`"


class Clock:
    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


class Twins:
    """A log with the compiled appender (``a``) and one with the Python path alone (``b``)."""

    def __init__(self, root: Path, config: LogConfig, monkeypatch: pytest.MonkeyPatch) -> None:
        self.clock = Clock()
        self.root = root
        self.a = PartitionLog(root / "a" / "t-0", "t", 0, config, clock=self.clock)
        with monkeypatch.context() as m:
            m.setattr(partition_log_module, "ACTIVE_SEGMENT_APPEND", None)
            self.b = PartitionLog(root / "b" / "t-0", "t", 0, config, clock=self.clock)
        assert self.a._appender is not None and self.b._appender is None
        # How many requests of ``a`` the Python path took (the rest: the compiled call).
        self.python_appends = 0
        python_path = self.a._append_as_leader_python

        def counted(records: bytearray | memoryview, epoch: int) -> object:
            self.python_appends += 1
            return python_path(records, epoch)

        self.a._append_as_leader_python = counted  # type: ignore[method-assign]

    def _outcome(self, log: PartitionLog, request: bytes, epoch: int, view: bool) -> object:
        buf = bytearray(request)
        records: bytearray | memoryview = memoryview(buf) if view else buf
        try:
            info = log.append_as_leader(records, epoch)
        except CoreError as e:
            # Messages may name the log's directory: the same apart from a / b.
            message = str(e).replace(str(self.root / "a"), "D").replace(str(self.root / "b"), "D")
            return ("error", type(e).__name__, message, bytes(buf))
        return ("appended", info, bytes(buf))

    def append(self, request: bytes, epoch: int = 0, *, view: bool = False) -> object:
        a = self._outcome(self.a, request, epoch, view)
        b = self._outcome(self.b, request, epoch, view)
        assert a == b
        self.assert_same_state()
        return a

    def assert_same_state(self) -> None:
        a, b = self.a, self.b
        assert a.log_end_offset == b.log_end_offset
        assert a.producer_state._map_end_offset == b.producer_state._map_end_offset
        assert a._unflushed_messages == b._unflushed_messages
        assert a.leader_epoch_cache.entries() == b.leader_epoch_cache.entries()
        segments_a, segments_b = a.segments(), b.segments()
        assert [s.base_offset for s in segments_a] == [s.base_offset for s in segments_b]
        for sa, sb in zip(segments_a, segments_b, strict=True):
            assert sa.size == sb.size
            assert sa.log.read(0, sa.size) == sb.log.read(0, sb.size)
            assert sa.max_timestamp_so_far == sb.max_timestamp_so_far
            assert sa._bytes_since_last_index_entry == sb._bytes_since_last_index_entry
            assert sa._rolling_based_timestamp == sb._rolling_based_timestamp
            for ia, ib in ((sa.offset_index, sb.offset_index), (sa.time_index, sb.time_index)):
                assert ia.entries == ib.entries
                assert [ia.entry(i) for i in range(ia.entries)] == [
                    ib.entry(i) for i in range(ib.entries)
                ]
            assert sa.offset_index.lookup(2**62) == sb.offset_index.lookup(2**62)

    def close_and_compare_files(self) -> None:
        self.a.close()
        self.b.close()
        files_a = _files(self.root / "a")
        files_b = _files(self.root / "b")
        assert sorted(files_a) == sorted(files_b)
        for name, data in files_a.items():
            assert data == files_b[name], f"{name} differs"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _batch(
    records: int,
    *,
    timestamp: int = START_MS,
    value_bytes: int = 20,
    compression: Compression = Compression.NONE,
    sequence: int | None = None,
) -> bytes:
    builder = RecordBatchBuilder(
        compression=compression,
        producer_id=PRODUCER_ID if sequence is not None else -1,
        producer_epoch=0 if sequence is not None else -1,
        base_sequence=sequence if sequence is not None else -1,
    )
    for i in range(records):
        builder.append(b"v" * value_bytes, key=b"k%d" % i, timestamp=timestamp + i)
    return bytes(builder.build())


@pytest.fixture
def twins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Twins]:
    if FORCED_PURE:
        pytest.skip("TIERLOG_PURE_PYTHON=1: only the Python path exists")

    def make(**config: object) -> Twins:
        return Twins(tmp_path, LogConfig(**config), monkeypatch)  # type: ignore[arg-type]

    return make


@needs_compiled
def test_the_common_case_takes_the_compiled_call_and_writes_the_same_files(twins) -> None:  # type: ignore[no-untyped-def]
    t = twins(segment_bytes=24 * 1024, index_interval_bytes=1000)
    for i in range(200):
        t.clock.now += 3
        t.append(_batch(1 + i % 7, timestamp=t.clock.now - 10, value_bytes=50 + i % 300))
    # The first append (a new leader epoch) and the appends that rolled took the Python path.
    rolls = len(t.a.segments()) - 1
    assert rolls >= 3
    assert t.python_appends == 1 + rolls
    t.close_and_compare_files()


@needs_compiled
@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_several_batches_with_one_max_timestamp_report_the_first(twins, timestamp_type) -> None:  # type: ignore[no-untyped-def]
    t = twins(message_timestamp_type=timestamp_type, index_interval_bytes=1)
    t.append(_batch(1))
    for _ in range(3):
        outcome = t.append(_batch(2) + _batch(3, timestamp=START_MS - 1) + _batch(2))
        info = outcome[1]
        # Kafka's offset of the max timestamp: the last offset of the first batch with it.
        assert info.offset_of_max_timestamp == info.first_offset + 1
        assert info.batch_count == 3
    assert t.python_appends == 1
    t.close_and_compare_files()


@needs_compiled
def test_log_append_time_patches_timestamps_and_crcs_alike(twins) -> None:  # type: ignore[no-untyped-def]
    t = twins(message_timestamp_type="LogAppendTime", index_interval_bytes=1)
    for i in range(20):
        t.clock.now += 1000
        outcome = t.append(_batch(3, timestamp=START_MS - 5 * i))
        assert outcome[0] == "appended"
        header = RecordBatchHeader(bytearray(outcome[2]), 0)
        assert header.max_timestamp == t.clock.now
        header.validate()  # the CRC was recomputed over the new timestamp
    assert t.python_appends == 1
    t.close_and_compare_files()


@needs_compiled
def test_requests_for_the_python_path_get_the_same_answers(twins) -> None:  # type: ignore[no-untyped-def]
    t = twins(max_message_bytes=2000, segment_bytes=8000)
    t.append(_batch(2))
    before = t.python_appends
    cases = [
        _batch(2, sequence=0),  # idempotent
        _batch(2, sequence=5),  # out of order
        _batch(3, timestamp=START_MS + 2 * 3_600_000),  # beyond message.timestamp.after.max.ms
        _batch(40, value_bytes=60),  # above max.message.bytes
        _batch(2)[:-1],  # torn
        _batch(2) + _batch(2, sequence=2),  # a plain batch and an idempotent one
        b"",  # no batch
        _batch(2, compression=Compression.GZIP),  # compressed: no record decoded, compiled
    ]
    for request in cases:
        t.append(request)
    # Every case but the compressed batch needed the Python path.
    assert t.python_appends == before + len(cases) - 1
    t.append(_batch(2), view=True)  # a writable view is patched in place
    t.append(_batch(2), epoch=3)  # a new leader epoch: the Python path writes the cache
    t.append(_batch(2), epoch=3)
    t.close_and_compare_files()


@needs_compiled
def test_a_read_only_buffer_is_copied_by_the_python_path(twins) -> None:  # type: ignore[no-untyped-def]
    t = twins()
    t.append(_batch(2))
    request = _batch(3)
    for log in (t.a, t.b):
        info = log.append_as_leader(memoryview(request), 0)  # type: ignore[arg-type]
        assert info.first_offset == 2
    assert request == _batch(3)  # the caller's bytes are not touched
    t.assert_same_state()


@needs_compiled
def test_rolls_by_time_and_a_config_change_bind_the_appender_anew(twins) -> None:  # type: ignore[no-untyped-def]
    t = twins(segment_ms=10_000)
    for i in range(30):
        t.clock.now += 1500
        t.append(_batch(2, timestamp=t.clock.now))
        if i == 15:
            config = LogConfig(segment_ms=10_000, segment_bytes=4000)
            t.a.update_config(config)
            t.b.update_config(config)
    assert len(t.a.segments()) >= 4
    t.close_and_compare_files()


@needs_compiled
def test_after_truncation_appends_continue_alike(twins) -> None:  # type: ignore[no-untyped-def]
    t = twins(segment_bytes=3000, index_interval_bytes=100)
    for _ in range(40):
        t.append(_batch(3, value_bytes=40))
    for log in (t.a, t.b):
        log.truncate_to(50)
    t.assert_same_state()
    for _ in range(10):
        t.append(_batch(2, value_bytes=40))
    t.close_and_compare_files()


@needs_compiled
@pytest.mark.parametrize("value_bytes", [20, 40_000])
def test_a_failed_write_is_refused_alike_and_appends_nothing(twins, value_bytes) -> None:  # type: ignore[no-untyped-def]
    """Writes up to 64 KiB keep the GIL, larger ones release it: both fail alike."""
    t = twins()
    t.append(_batch(2))
    t.append(_batch(2))
    saved = {}
    for log in (t.a, t.b):
        file = log.active_segment.log
        saved[log] = os.dup(file._fd)
        read_only = os.open(file.path, os.O_RDONLY)
        os.dup2(read_only, file._fd)  # the same descriptor number, now refusing writes
        os.close(read_only)
    outcome = t.append(_batch(3, value_bytes=value_bytes))
    assert outcome[0] == "error" and outcome[1] == KafkaStorageError.__name__
    assert "failed: [Errno 9] Bad file descriptor" in outcome[2]
    for log, fd in saved.items():
        os.dup2(fd, log.active_segment.log._fd)
        os.close(fd)
    outcome = t.append(_batch(2))
    assert outcome[0] == "appended" and outcome[1].first_offset == 4
    t.close_and_compare_files()


@needs_compiled
def test_requests_beyond_64_kib_take_the_compiled_call_and_write_the_same_files(twins) -> None:  # type: ignore[no-untyped-def]
    """Written with the GIL released (smaller ones keep it): the same files either way."""
    t = twins(index_interval_bytes=1000)
    t.append(_batch(1))  # the new leader epoch: the Python path
    for i in range(6):
        t.clock.now += 3
        t.append(_batch(1 + i, timestamp=t.clock.now - 10, value_bytes=30_000 + 7 * i))
    t.append(_batch(2))
    assert t.python_appends == 1
    assert t.a.log_end_offset == 1 + sum(range(1, 7)) + 2
    t.close_and_compare_files()


@needs_compiled
def test_index_readers_on_other_threads_see_and_write_the_same_entries(twins) -> None:  # type: ignore[no-untyped-def]
    """Lookups flush pending index entries under the index's lock while appends add
    entries under the same lock: the files must come out the same as without readers."""
    t = twins(index_interval_bytes=1)
    t.append(_batch(2))
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            segment = t.a.active_segment
            segment.time_index.lookup(START_MS + 10**6)
            entries = segment.offset_index.entries
            if entries:
                segment.offset_index.entry(entries - 1)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for i in range(1500):
            t.clock.now += 1
            request = _batch(1 + i % 3, timestamp=t.clock.now)
            a = t.a.append_as_leader(bytearray(request), 0)
            b = t.b.append_as_leader(bytearray(request), 0)
            assert a == b
    finally:
        done.set()
        for reader in readers:
            reader.join()
    t.assert_same_state()
    t.close_and_compare_files()


# -- any request, any config --------------------------------------------------------------

# Mostly requests for the compiled call, and enough of every other case.
_unlikely = [False] * 4 + [True]
_append_op = st.tuples(
    st.just("append"),
    st.lists(
        st.tuples(
            st.integers(1, 6),  # records
            st.integers(-5_000, 2_000),  # timestamp, relative to now
            st.integers(0, 150),  # value bytes
            st.sampled_from([Compression.NONE] * 3 + [Compression.LZ4]),
            st.sampled_from([False] * 7 + [True]),  # idempotent
        ),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from([None] * 7) | st.tuples(st.integers(0, 3000), st.integers(1, 255)),
    st.sampled_from([None] * 4) | st.integers(0, 3000),  # cut the request there
)
_op = st.one_of(
    _append_op,
    _append_op,
    _append_op,
    st.tuples(st.just("clock"), st.integers(0, 20_000)),
    st.tuples(st.just("epoch")),
)


@needs_compiled
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(_op, min_size=10, max_size=40),
    segment_bytes=st.sampled_from([1500, 4000, 1 << 20, 1 << 20]),
    index_interval=st.sampled_from([1, 200, 4096]),
    segment_ms=st.sampled_from([15_000, 7 * 86_400_000, 7 * 86_400_000]),
    timestamp_type=st.sampled_from(["CreateTime", "LogAppendTime"]),
    after_max=st.sampled_from([1_000, 3_600_000, INT64_MAX]),
    before_max=st.sampled_from([INT64_MAX] * 3 + [4_000]),
    compact=st.sampled_from(_unlikely),
    max_message_bytes=st.sampled_from([1 << 20] * 3 + [900]),
)
def test_compiled_and_python_appends_agree_on_any_requests(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple],
    segment_bytes: int,
    index_interval: int,
    segment_ms: int,
    timestamp_type: str,
    after_max: int,
    before_max: int,
    compact: bool,
    max_message_bytes: int,
) -> None:
    config = LogConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=index_interval,
        segment_ms=segment_ms,
        message_timestamp_type=timestamp_type,
        message_timestamp_after_max_ms=after_max,
        message_timestamp_before_max_ms=before_max,
        cleanup_policy=("compact",) if compact else ("delete",),
        max_message_bytes=max_message_bytes,
    )
    t = Twins(tmp_path_factory.mktemp("twins"), config, monkeypatch)
    t.append(b"")  # refused alike (no batch)
    t.append(_batch(1))  # the first append of an epoch: the Python path writes the cache
    epoch, sequence = 0, 0
    for op in ops:
        if op[0] == "clock":
            t.clock.now += op[1]
        elif op[0] == "epoch":
            epoch += 1
        else:
            _, batches, flip, cut = op
            request = bytearray()
            for records, ts, value_bytes, compression, idempotent in batches:
                request += _batch(
                    records,
                    timestamp=t.clock.now + ts,
                    value_bytes=value_bytes,
                    compression=compression,
                    sequence=sequence if idempotent else None,
                )
                if idempotent:
                    sequence += records
            if flip is not None and flip[0] < len(request):
                request[flip[0]] ^= flip[1]
            if cut is not None:
                request = request[:cut]
            t.append(bytes(request), epoch)
    t.close_and_compare_files()
