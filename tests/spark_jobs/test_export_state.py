"""The Parquet export's state file: offsets per segment, round trips, the migration of the
previous format, and refusals that name the file."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from spark_jobs.export_state import ExportState
from spark_jobs.offset_ranges import OffsetRanges
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(uuid.UUID(int=5), "orders", 0)


def segment(start: int, end: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP, uuid.uuid4()),
        start,
        end,
        max_timestamp_ms=0,
        broker_id=1,
        event_timestamp_ms=0,
        segment_size_in_bytes=100,
        segment_leader_epochs={0: start},
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    )


def test_offsets_accumulate_per_segment_and_round_trip():
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    state = (
        ExportState()
        .adding([("orders", 0, a, OffsetRanges.of([(0, 9)]))])
        .adding(
            [
                ("orders", 0, a, OffsetRanges.of([(10, 19), (30, 39)])),
                ("orders", 1, b, OffsetRanges()),  # nothing dealt with: nothing recorded
            ]
        )
    )
    assert state.done(a) == OffsetRanges.of([(0, 19), (30, 39)])
    assert state.done(b) == OffsetRanges()
    text = state.to_json()
    doc = json.loads(text)
    assert doc["version"] == 2 and "updated" in doc and "exported" not in doc
    assert doc["segments"] == {
        a: {"topic": "orders", "partition": 0, "offsets": [[0, 19], [30, 39]]}
    }
    again = ExportState.from_json(text, "state.json")
    assert again.segments == state.segments and again.legacy == ()


def test_the_previous_format_is_migrated_for_the_segments_a_run_plans():
    first, second, gone = segment(0, 99), segment(100, 199), str(uuid.uuid4())
    legacy = {
        "exported": [
            # first was exported in two pieces (maxBytesPerPartition); second from offset
            # 150 (startingOffsets); the third segment is not planned by this run.
            f"orders/0/{first.segment_id}/0",
            f"orders/0/{first.segment_id}/50",
            f"orders/0/{second.segment_id}/150",
            f"other/3/{gone}/7",
        ],
        "updated": "2026-01-01T00:00:00+00:00",
    }
    state = ExportState.from_json(json.dumps(legacy), "state.json")
    assert state.segments == {} and len(state.legacy) == 4
    migrated = state.migrated([first, second])
    assert migrated.done(str(first.segment_id)) == OffsetRanges.of([(0, 99)])
    assert migrated.done(str(second.segment_id)) == OffsetRanges.of([(150, 199)])
    assert migrated.legacy == (f"other/3/{gone}/7",)
    doc = json.loads(migrated.to_json())
    assert doc["exported"] == [f"other/3/{gone}/7"]  # written back for a later run
    assert doc["segments"][str(second.segment_id)]["topic"] == "orders"
    assert ExportState.from_json(migrated.to_json(), "s").migrated([]).legacy == migrated.legacy


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"version": 3, "segments": {}}',
        '{"version": 2, "segments": {"x": {"topic": "orders", "partition": 0}}}',
        '{"version": 2, "segments": {"x": {"topic": "t", "partition": 0, "offsets": [[5, 1]]}}}',
        '{"exported": ["orders/0/no-first-offset"]}',
        '{"exported": ["orders/zero/id/0"]}',
    ],
)
def test_a_state_that_is_neither_format_is_refused_naming_the_file(text):
    with pytest.raises(
        ValueError, match=re.escape("out/_tierlog_export.json: not a tierlog export state")
    ):
        ExportState.from_json(text, "out/_tierlog_export.json")
