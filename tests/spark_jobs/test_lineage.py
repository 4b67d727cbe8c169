"""The canonical log of an archive: KIP-405's unclean-election scenario and random lineages
checked against a brute-force model."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.lineage import Lineage, canonical_ranges, newest_segment
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(uuid.UUID(int=5), "t", 0)
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def segment(
    start: int,
    end: int,
    epochs: dict[int, int],
    *,
    sid: int,
    when: int = 0,
    state: RemoteLogSegmentState = FINISHED,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(TP, uuid.UUID(int=sid)),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1,
        broker_id=1,
        event_timestamp_ms=when,
        segment_size_in_bytes=100,
        segment_leader_epochs=epochs,
        state=state,
    )


def served(ranges) -> dict[int, uuid.UUID]:
    out: dict[int, uuid.UUID] = {}
    for r in ranges:
        for o in range(r.start, r.end + 1):
            assert o not in out, f"offset {o} served twice"
            out[o] = r.segment.segment_id
    return out


def test_kip_405_scenario_5_log_divergence_after_unclean_election():
    # seg-0-3 uuid1 (LE-0@0); seg-0-3 uuid2 (LE-0@0, LE-1@2) copied by the deposed leader;
    # seg-4-5 uuid3 (LE-0@0, LE-2@5) from the current leader, whose lineage is LE-0@0, LE-2@5.
    uuid1 = segment(0, 3, {0: 0}, sid=1, when=1)
    uuid2 = segment(0, 3, {0: 0, 1: 2}, sid=2, when=2)
    uuid3 = segment(4, 5, {0: 4, 2: 5}, sid=3, when=3)
    current = Lineage({0: 0, 2: 5})
    assert newest_segment([uuid1, uuid2, uuid3]) is uuid3  # its checkpoint is the lineage
    assert repr(Lineage.from_checkpoint(b"0\n2\n0 0\n2 5\n")) == "Lineage(0@0, 2@5)"
    ranges = canonical_ranges([uuid2, uuid3, uuid1], current)
    assert [(r.segment.segment_id.int, r.start, r.end) for r in ranges] == [(1, 0, 3), (3, 4, 5)]
    # Nothing from uuid2's LE-1 branch, even when it is the only copy of offsets 2-3.
    only_deposed = canonical_ranges([uuid2, uuid3], current)
    assert served(only_deposed) == {
        0: uuid2.segment_id,
        1: uuid2.segment_id,
        4: uuid3.segment_id,
        5: uuid3.segment_id,
    }


def test_unfinished_copies_and_offsets_below_the_log_start_are_left_out():
    a = segment(0, 9, {0: 0}, sid=1)
    b = segment(10, 19, {0: 10}, sid=2, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    c = segment(10, 19, {0: 10}, sid=3, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    lineage = Lineage({0: 0})
    assert canonical_ranges([a, b, c], lineage) == canonical_ranges([a], lineage)
    assert [(r.start, r.end) for r in canonical_ranges([a], lineage, log_start_offset=4)] == [
        (4, 9)
    ]


def test_two_copies_of_one_range_yield_each_offset_once():
    first = segment(0, 9, {0: 0}, sid=1, when=1)
    again = segment(0, 9, {0: 0}, sid=2, when=2)
    longer = segment(5, 14, {0: 5}, sid=3, when=3)
    got = served(canonical_ranges([again, longer, first], Lineage({0: 0})))
    assert sorted(got) == list(range(15))


# -- random lineages against a brute-force model ----------------------------------------------
@st.composite
def archives(draw):
    n = draw(st.integers(5, 40))
    k = draw(st.integers(1, 4))
    starts = sorted(
        draw(st.lists(st.integers(1, n - 1), min_size=k - 1, max_size=k - 1, unique=True))
    )
    epochs = [0]
    for _ in range(k - 1):
        epochs.append(epochs[-1] + draw(st.integers(1, 3)))
    lineage = dict(zip(epochs, [0, *starts], strict=True))
    truth = Lineage(lineage)
    segs = []
    for sid in range(draw(st.integers(1, 7))):
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(a, n - 1))
        m = {e: max(s, a) for e, s in lineage.items() if s <= b and (_next(lineage, e) or n) > a}
        # Keep only the epochs that really have offsets in [a, b], with clamped starts.
        m = {e: s for e, s in m.items() if truth.epoch_of(s) == e}
        if draw(st.booleans()):  # a branch truncated later: diverges at q with a foreign epoch
            q = draw(st.integers(a, b))
            here = truth.epoch_of(q)
            foreign = [e for e in range(here + 1, epochs[-1]) if e not in lineage]
            if foreign:
                bad = draw(st.sampled_from(foreign))
                m = {e: s for e, s in m.items() if s < q}
                m[bad] = q
        if m:
            segs.append(segment(a, b, m, sid=sid + 1, when=sid))
    log_start = draw(st.integers(0, n // 2))
    return truth, segs, log_start


def _next(lineage: dict[int, int], epoch: int) -> int | None:
    later = [s for e, s in lineage.items() if e > epoch]
    return min(later) if later else None


@settings(max_examples=300, deadline=None)
@given(archives())
def test_random_archives_match_the_brute_force_model(archive):
    truth, segs, log_start = archive
    got = served(canonical_ranges(segs, truth, log_start_offset=log_start))
    by_id = {md.segment_id: md for md in segs}
    expected = set()
    for md in segs:
        own = Lineage(md.segment_leader_epochs)
        for o in range(max(md.start_offset, log_start), md.end_offset + 1):
            if own.epoch_of(o) == truth.epoch_of(o):
                expected.add(o)
    assert set(got) == expected
    for o, sid in got.items():
        md = by_id[sid]
        assert Lineage(md.segment_leader_epochs).epoch_of(o) == truth.epoch_of(o)
