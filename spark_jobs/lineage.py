"""The canonical log of a partition's archive: which remote segment serves which offsets.

A bucket may hold more than one copy of an offset: a leader changed while a segment was
being copied (two copies of one range), or an unclean election truncated a branch that a
deposed leader had already copied (KIP-405's "log divergence in remote storage"). Readers
of the archive must return each offset once, and only from the branch that survived.

Kafka's rule, applied per offset: in the *current* leader-epoch lineage each offset ``o``
belongs to one epoch ``E(o)`` (the last epoch whose start is ``<= o``). A remote segment may
serve ``o`` only if it holds ``o`` and its own epoch map assigns ``o`` to that same epoch.
By Kafka's log-matching property, two segments that agree on the epoch of an offset hold
the same record there, so any such segment will do; a segment whose map disagrees holds a
truncated branch at ``o``.

The current lineage is the broker's leader-epoch checkpoint when one is known. From the
archive alone it is the ``leader-epoch-checkpoint`` object copied with the segment of the
newest leader (``newest_segment``: the greatest highest epoch, then the furthest end offset):
the RemoteLogManager ships the whole checkpoint up to that segment's end, not just the
segment's own epochs. A segment's own epoch map may start its first epoch at the epoch's
real start or at the segment's start; only its epochs for offsets inside the segment are
used, so both forms work.

Offsets are inclusive, as in Kafka's RemoteLogSegmentMetadata.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.log.leader_epoch import LeaderEpochCheckpointFile
from tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """Offsets ``start..end`` (inclusive) of the canonical log, served by ``segment``."""

    segment: RemoteLogSegmentMetadata
    start: int
    end: int

    def __post_init__(self) -> None:
        if not self.segment.start_offset <= self.start <= self.end <= self.segment.end_offset:
            raise ValueError(
                f"range {self.start}..{self.end} is not inside segment "
                f"{self.segment.start_offset}..{self.segment.end_offset}"
            )


class Lineage:
    """A leader-epoch lineage: epochs with their start offsets, both increasing."""

    def __init__(self, entries: Mapping[int, int] | Iterable[tuple[int, int]]) -> None:
        pairs = sorted(entries.items() if isinstance(entries, Mapping) else entries)
        for (e1, s1), (e2, s2) in itertools.pairwise(pairs):
            if not (e1 < e2 and s1 <= s2):
                raise ValueError(f"not a lineage: epoch {e1}@{s1} then {e2}@{s2}")
        self.epochs = [e for e, _ in pairs]
        self.starts = [s for _, s in pairs]

    def epoch_of(self, offset: int) -> int | None:
        """The epoch ``offset`` belongs to, or None before the first epoch."""
        i = bisect.bisect_right(self.starts, offset) - 1
        return self.epochs[i] if i >= 0 else None

    def __repr__(self) -> str:
        return (
            "Lineage("
            + ", ".join(f"{e}@{s}" for e, s in zip(self.epochs, self.starts, strict=False))
            + ")"
        )

    @classmethod
    def from_checkpoint(cls, data: bytes, source: str = "<checkpoint>") -> Lineage:
        """Parse Kafka's ``leader-epoch-checkpoint`` text (as copied to the remote tier).

        Raises:
            CorruptCheckpointError: malformed bytes, naming ``source``.
        """
        return cls(
            (e.epoch, e.start_offset) for e in LeaderEpochCheckpointFile.decode(data, source)
        )


def newest_segment(segments: Sequence[RemoteLogSegmentMetadata]) -> RemoteLogSegmentMetadata:
    """The copy made by the newest leader: whose checkpoint object is the current lineage.

    Raises:
        ValueError: no segment.
    """
    if not segments:
        raise ValueError("no remote segment: no lineage")
    return max(
        segments,
        key=lambda md: (max(md.segment_leader_epochs), md.end_offset, md.event_timestamp_ms),
    )


def canonical_ranges(
    segments: Iterable[RemoteLogSegmentMetadata],
    lineage: Lineage,
    *,
    log_start_offset: int = 0,
) -> list[SegmentRange]:
    """The canonical log as ranges of COPY_SEGMENT_FINISHED segments, in offset order.

    Each offset ``>= log_start_offset`` that some finished segment may serve (see the module
    docstring) appears in exactly one range. Where several segments may serve an offset, the
    one already serving the previous offset is kept, else the one that serves furthest without a
    break, then the newest copy (fewer, longer reads). Gaps (offsets no segment may serve) are
    left out.

    Args:
        segments: remote segments in any states; only COPY_SEGMENT_FINISHED ones count.
        lineage: the current leader-epoch lineage.
        log_start_offset: offsets below are not returned (DeleteRecords, retention).
    """
    finished = [s for s in segments if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    if not finished:
        return []
    current = lineage
    own = {id(md): Lineage(md.segment_leader_epochs) for md in finished}
    # Between two consecutive breakpoints every segment's coverage and every epoch lookup
    # is constant, so one decision per interval decides all its offsets.
    points = {max(log_start_offset, 0)}
    for md in finished:
        points.update((md.start_offset, md.end_offset + 1))
        points.update(md.segment_leader_epochs.values())
    points.update(current.starts)
    cuts = sorted(p for p in points if p >= log_start_offset)
    intervals = list(itertools.pairwise(cuts))
    valid: list[list[RemoteLogSegmentMetadata]] = []
    for lo, hi in intervals:
        want = current.epoch_of(lo)
        valid.append(
            []
            if want is None
            else [
                md
                for md in finished
                if md.start_offset <= lo
                and hi - 1 <= md.end_offset
                and own[id(md)].epoch_of(lo) == want
            ]
        )
    # reach[i][id(md)]: the last interval md serves without a break from interval i on.
    reach: list[dict[int, int]] = [{} for _ in intervals]
    for i in range(len(intervals) - 1, -1, -1):
        following = reach[i + 1] if i + 1 < len(intervals) else {}
        for md in valid[i]:
            reach[i][id(md)] = following.get(id(md), i)
    out: list[SegmentRange] = []
    previous: RemoteLogSegmentMetadata | None = None
    for i, (lo, hi) in enumerate(intervals):
        candidates = valid[i]
        if not candidates:
            previous = None
            continue
        if previous is None or previous not in candidates:
            # The copy that serves furthest without a break, then the newest copy.
            previous = max(candidates, key=lambda md: (reach[i][id(md)], md.event_timestamp_ms))
        if out and out[-1].segment is previous and out[-1].end == lo - 1:
            out[-1] = SegmentRange(previous, out[-1].start, hi - 1)
        else:
            out.append(SegmentRange(previous, lo, hi - 1))
    return out
