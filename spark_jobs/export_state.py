"""The Parquet export's memory, ``_tierlog_export.json``: the offsets of each remote segment
the export has dealt with (exported, or read and left out for good: control records,
aborted transactions). Offsets outside a run's time bounds are not in it, so a later run
with other bounds, or none, exports them.

Format 2, written since offsets are recorded::

    {"version": 2,
     "segments": {"<segment id>": {"topic": "orders", "partition": 0,
                                   "offsets": [[0, 41], [60, 99]]}},
     "updated": "<ISO time of the run>"}

Format 1, written before, is migrated on read: ``{"exported": ["<topic>/<partition>/<segment
id>/<first offset>", ...]}`` named the ranges exported whole. A key is read as the offsets
from its first offset to the end of its segment, as soon as a run plans that segment (its
end offset is then known). Keys of segments a run does not plan (another topic, say) are
written back under ``"exported"`` as they were, until a run plans them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spark_jobs.offset_ranges import OffsetRanges
from tiered.api import RemoteLogSegmentMetadata

VERSION = 2


@dataclass(frozen=True)
class SegmentOffsets:
    """The offsets of one remote segment the export has dealt with."""

    topic: str
    partition: int
    offsets: OffsetRanges


@dataclass(frozen=True)
class ExportState:
    """Offsets dealt with, by segment id; and format-1 keys not migrated yet."""

    segments: Mapping[str, SegmentOffsets] = field(default_factory=dict)
    legacy: tuple[str, ...] = ()

    def done(self, segment_id: str) -> OffsetRanges:
        entry = self.segments.get(segment_id)
        return entry.offsets if entry is not None else OffsetRanges()

    def adding(self, done: Iterable[tuple[str, int, str, OffsetRanges]]) -> ExportState:
        """This state with the ``(topic, partition, segment id, offsets)`` of ``done`` added."""
        out = dict(self.segments)
        for topic, partition, segment_id, offsets in done:
            if offsets:
                before = out.get(segment_id)
                merged = offsets if before is None else before.offsets.union(offsets)
                out[segment_id] = SegmentOffsets(topic, partition, merged)
        return ExportState(out, self.legacy)

    def migrated(self, segments: Iterable[RemoteLogSegmentMetadata]) -> ExportState:
        """Format-1 keys of ``segments`` turned into offsets; the others kept as they are."""
        by_id = {str(md.segment_id): md for md in segments}
        done = []
        kept = []
        for key in self.legacy:
            topic, partition, segment_id, first = key.split("/")
            md = by_id.get(segment_id)
            if md is None:
                kept.append(key)
            elif int(first) <= md.end_offset:
                first_offset = max(int(first), md.start_offset)
                offsets = OffsetRanges(((first_offset, md.end_offset),))
                done.append((topic, int(partition), segment_id, offsets))
        return ExportState(self.segments, tuple(kept)).adding(done)

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "version": VERSION,
            "segments": {
                sid: {
                    "topic": entry.topic,
                    "partition": entry.partition,
                    "offsets": [[lo, hi] for lo, hi in entry.offsets],
                }
                for sid, entry in sorted(self.segments.items())
            },
        }
        if self.legacy:
            doc["exported"] = list(self.legacy)
        doc["updated"] = datetime.now(UTC).isoformat()
        return json.dumps(doc, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> ExportState:
        """Parse either format.

        Raises:
            ValueError: neither, naming ``source``.
        """
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict):
                raise TypeError("not a JSON object")
            version = doc.get("version", 1)
            if version not in (1, VERSION):
                raise ValueError(f"format version {version!r} is not known to this export")
            segments = {
                str(sid): SegmentOffsets(
                    str(entry["topic"]),
                    int(entry["partition"]),
                    OffsetRanges.of((int(lo), int(hi)) for lo, hi in entry["offsets"]),
                )
                for sid, entry in doc.get("segments", {}).items()
            }
            legacy = tuple(str(key) for key in doc.get("exported", ()))
            for key in legacy:
                _topic, partition, _segment_id, first = key.split("/")
                int(partition), int(first)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(
                f"{source}: not a tierlog export state ({type(e).__name__}: {e})"
            ) from e
        return cls(segments, legacy)
