"""Offset sets as ranges: the arithmetic the Iceberg export's exactly-once state rests on,
checked against Python sets of offsets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.offset_ranges import ExportedRanges, OffsetRanges

pairs = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 8)).map(lambda p: (p[0], p[0] + p[1])),
    max_size=6,
)


def offsets(ranges: OffsetRanges) -> set[int]:
    return {o for lo, hi in ranges for o in range(lo, hi + 1)}


@given(pairs, pairs, st.integers(0, 70), st.integers(0, 10))
def test_ranges_behave_as_sets_of_offsets(a, b, first, width):
    ra, rb = OffsetRanges.of(a), OffsetRanges.of(b)
    sa = {o for lo, hi in a for o in range(lo, hi + 1)}
    sb = {o for lo, hi in b for o in range(lo, hi + 1)}
    assert offsets(ra) == sa and ra.count() == len(sa)
    # Sorted, disjoint and not adjacent: one canonical form per set.
    assert all(x[1] + 1 < y[0] for x, y in zip(ra.ranges, ra.ranges[1:], strict=False))
    assert offsets(ra.union(rb)) == sa | sb
    last = first + width
    assert offsets(ra.missing_from(first, last)) == set(range(first, last + 1)) - sa
    assert ra.overlaps(rb) == bool(sa & sb)


def test_json_round_trip_and_malformed_state_names_its_source():
    state = ExportedRanges(
        {
            ("orders", 0): OffsetRanges.of([(0, 9), (20, 29)]),
            ("orders", 3): OffsetRanges.of([(5, 5)]),
        }
    )
    text = state.to_json()
    assert text == '{"orders":{"0":[[0,9],[20,29]],"3":[[5,5]]}}'
    assert ExportedRanges.from_json(text, "x") == state
    with pytest.raises(ValueError, match="snapshot 7"):
        ExportedRanges.from_json('{"orders": [1, 2]}', "snapshot 7")
    with pytest.raises(ValueError, match="snapshot 7"):
        ExportedRanges.from_json('{"orders": {"0": [[9, 1]]}}', "snapshot 7")
