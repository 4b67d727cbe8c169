"""Reading an archive without a broker: manifests -> canonical ranges -> Arrow records."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from rsm_plugins.local import LocalDirRemoteStorageManager
from spark_jobs import segment_batches
from spark_jobs.archive import SCHEMA, plan_partition, read_partition, segments_from_manifests
from tests.support.record_decoders import IMPLEMENTATIONS, using

from .archive_data import T0, write_archive


@pytest.fixture(autouse=True, params=IMPLEMENTATIONS)
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here reads with each record decoder."""
    with using(request.param):
        yield request.param


def rows(batches) -> list[tuple]:
    out = []
    for batch in batches:
        assert batch.schema == SCHEMA
        for r in batch.to_pylist():
            headers = tuple((h["key"], h["value"]) for h in r["headers"])
            ts = int(r["timestamp"].timestamp() * 1000)
            out.append((r["offset"], r["key"], r["value"], headers, ts))
    return out


def test_the_archive_reads_back_what_a_read_committed_consumer_would_see(tmp_path):
    archive = write_archive(tmp_path)
    rsm = archive.config.open()
    try:
        found = segments_from_manifests(rsm, "orders")
        assert sorted(md.segment_id for md in found[0]) == sorted(
            md.segment_id for md in archive.segments
        )
        plan = plan_partition(rsm, "orders", 0, found[0])
    finally:
        rsm.close()
    assert plan.aborted  # the transaction index was read
    got = rows(read_partition(archive.config, plan))
    want = [e for e in archive.expected if e[0] not in archive.aborted_offsets]
    assert got == want
    assert archive.aborted_offsets and not {g[0] for g in got} & archive.aborted_offsets


def test_offset_and_time_bounds(tmp_path):
    archive = write_archive(tmp_path)
    rsm = archive.config.open()
    try:
        plan = plan_partition(rsm, "orders", 0, archive.segments, start=30, end=70)
        since = T0 + 50_000
        timed = plan_partition(rsm, "orders", 0, archive.segments, since_ms=since)
    finally:
        rsm.close()
    got = rows(read_partition(archive.config, plan))
    assert [g[0] for g in got] == [
        e[0] for e in archive.expected if 30 <= e[0] <= 70 and e[0] not in archive.aborted_offsets
    ]
    # Segments entirely before the time bound are not even planned.
    assert len(timed.ranges) < len(plan_partition_all(archive).ranges)
    late = rows(read_partition(archive.config, timed, since_ms=since))
    assert late and all(g[4] >= since for g in late)


def plan_partition_all(archive):
    rsm = archive.config.open()
    try:
        return plan_partition(rsm, "orders", 0, archive.segments)
    finally:
        rsm.close()


def table(archive, plan, **bounds) -> pa.Table:
    return pa.Table.from_batches(list(read_partition(archive.config, plan, **bounds)), SCHEMA)


def test_both_decoders_give_the_same_arrow_columns(tmp_path):
    # Every codec, null keys and values, headers, an aborted transaction, range and time
    # bounds: the compiled decoder's Arrow buffers equal the pure-Python decoder's lists.
    archive = write_archive(tmp_path)
    rsm = archive.config.open()
    try:
        plans = [
            (plan_partition(rsm, "orders", 0, archive.segments), {}),
            (plan_partition(rsm, "orders", 0, archive.segments, start=30, end=70), {}),
            (plan_partition(rsm, "orders", 0, archive.segments), {"until_ms": T0 + 60_000}),
        ]
    finally:
        rsm.close()
    for plan, bounds in plans:
        tables = {}
        for implementation in IMPLEMENTATIONS:
            with using(implementation):
                tables[implementation] = table(archive, plan, **bounds)
        pure = tables["pure-python"]
        assert pure.num_rows > 0
        for got in tables.values():
            assert got.equals(pure), (got.to_pylist()[:3], pure.to_pylist()[:3])


@pytest.mark.parametrize(("chunk", "buffer"), [(7, 4096), (64, 256), (100, 100), (1000, 3000)])
def test_any_read_size_and_buffer_size_give_the_same_rows(tmp_path, monkeypatch, chunk, buffer):
    # Batches cut by reads, moved to the buffer's front, larger than the whole buffer (it
    # grows): the rows are those of the default sizes.
    archive = write_archive(tmp_path)
    plan = plan_partition_all(archive)
    want = table(archive, plan)
    monkeypatch.setattr(segment_batches, "READ_CHUNK_BYTES", chunk)
    monkeypatch.setattr(segment_batches, "READ_BUFFER_BYTES", buffer)
    got = table(archive, plan)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want)


class ReadOnlyStream:
    """A plugin's stream with ``read`` and nothing else (no ``readinto``)."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def read(self, n: int = -1) -> bytes:
        return self._stream.read(n)

    def __enter__(self) -> ReadOnlyStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.close()


def test_a_plugin_stream_without_readinto_is_read_too(tmp_path, monkeypatch):
    archive = write_archive(tmp_path)
    plan = plan_partition_all(archive)
    want = table(archive, plan)
    fetch = LocalDirRemoteStorageManager.fetch_log_segment
    monkeypatch.setattr(
        LocalDirRemoteStorageManager,
        "fetch_log_segment",
        lambda self, *args: ReadOnlyStream(fetch(self, *args)),
    )
    assert table(archive, plan).equals(want)
