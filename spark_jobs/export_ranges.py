"""What an export run has left to do, and what it did: the planned ranges cut down to the
offsets not exported yet, and the offsets of a range a run dealt with under time bounds.
Shared by the Parquet export (``spark_jobs.export``) and the Iceberg export
(``spark_jobs.iceberg_export``); the range arithmetic is ``spark_jobs.offset_ranges``.

A run deals with an offset when it exports its record, or when it reads it and leaves it
out for good (control records, aborted transactions). A record outside the run's time
bounds (``startingTimestamp`` / ``endingTimestamp``) is not dealt with: a later run with
other bounds, or none, exports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from core.extras import requires_extra
from spark_jobs.datasource import SegmentSplit
from spark_jobs.lineage import SegmentRange
from spark_jobs.offset_ranges import OffsetRanges

with requires_extra("spark", "the Spark jobs (spark_jobs)"):
    import pyarrow as pa
    import pyarrow.compute as pc

_US_PER_MS = 1000


def pending_splits(
    splits: Sequence[SegmentSplit], done: Callable[[SegmentSplit], OffsetRanges]
) -> list[SegmentSplit]:
    """``splits`` cut down to the offsets not in ``done(split)`` (a range may become
    several)."""
    out = []
    for split in splits:
        r = split.range
        for lo, hi in done(split).missing_from(r.start, r.end):
            out.append(dataclasses.replace(split, range=SegmentRange(r.segment, lo, hi)))
    return out


def time_window(
    rows: pa.Table, first: int, last: int, since_ms: int | None, until_ms: int | None
) -> tuple[pa.Table, OffsetRanges]:
    """The rows of ``rows`` (range ``first..last``, offset order) inside the time bounds, and
    the offsets of the range dealt with: all but the runs of rows outside the bounds."""
    whole = OffsetRanges(((first, last),))
    micros = rows["timestamp"].cast(pa.int64())
    bounds = []
    if since_ms is not None:
        bounds.append(pc.greater_equal(micros, since_ms * _US_PER_MS))
    if until_ms is not None:
        bounds.append(pc.less(micros, until_ms * _US_PER_MS))
    if not bounds:
        return rows, whole
    keep = bounds[0] if len(bounds) == 1 else pc.and_(*bounds)
    if pc.all(keep).as_py() is not False:  # True, or None for no rows
        return rows, whole
    left_out: list[tuple[int, int]] = []
    run: list[int] = []
    for offset, kept in zip(rows["offset"].to_pylist(), keep.to_pylist(), strict=True):
        if kept:
            if run:
                left_out.append((run[0], run[-1]))
                run = []
        else:
            run.append(offset)
    if run:
        left_out.append((run[0], run[-1]))
    return rows.filter(keep), OffsetRanges.of(left_out).missing_from(first, last)
