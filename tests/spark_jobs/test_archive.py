"""Reading an archive without a broker: manifests -> canonical ranges -> Arrow records."""

from __future__ import annotations

from spark_jobs.archive import SCHEMA, plan_partition, read_partition, segments_from_manifests

from .archive_data import T0, write_archive


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
