"""The leader-epoch lineage of a partition, as tiering reads it.

A partition's lineage is its leader-epoch cache: epoch -> first offset written in it. A remote
segment belongs to the partition only if its own epochs fit the lineage (an unclean
election can leave copies from a former leader that do not), and the copy task resumes
after the highest offset already remote along the lineage, newest epoch first.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

if TYPE_CHECKING:
    from core.log.partition_log import PartitionLog


def filtered_leader_epochs(epochs: Mapping[int, int]) -> dict[int, int]:
    """Kafka's buildFilteredLeaderEpochMap: drop epochs that hold no records (an epoch
    starting where the next one starts), keeping ascending order."""
    items = sorted(epochs.items())
    return {
        epoch: start
        for (epoch, start), nxt in itertools.zip_longest(items, items[1:])
        if nxt is None or nxt[1] != start
    }


def is_within_lineage(
    md: RemoteLogSegmentMetadata, log_end_offset: int, leader_epochs: Mapping[int, int]
) -> bool:
    """Kafka's isRemoteSegmentWithinLeaderEpochs.

    ``leader_epochs`` is the partition's filtered lineage (epoch -> start offset). The
    segment's epochs must all be in it, its inner epoch boundaries must be the lineage's,
    its first epoch must not start before the lineage's start of that epoch, its end must
    not pass the start of the lineage's next epoch, and it must end below the log end.
    One deviation: the lineage's earliest epoch starts at the log start offset (the cache
    is truncated when it moves), so a segment straddling the log start still belongs.
    """
    if not leader_epochs:
        return True
    seg = filtered_leader_epochs(md.segment_leader_epochs)
    seg_epochs = list(seg)
    lineage = sorted(leader_epochs.items())
    first_lineage_epoch, last_lineage_epoch = lineage[0][0], lineage[-1][0]
    if seg_epochs[0] < first_lineage_epoch or seg_epochs[-1] > last_lineage_epoch:
        return False

    def next_after(items: list[tuple[int, int]], epoch: int) -> tuple[int, int] | None:
        return next(((e, o) for e, o in items if e > epoch), None)

    seg_items = list(seg.items())
    for epoch, start in seg_items:
        if epoch not in leader_epochs:
            return False
        if epoch == seg_epochs[0] and epoch != first_lineage_epoch and start < leader_epochs[epoch]:
            return False
        if epoch == seg_epochs[-1]:
            nxt = next_after(lineage, epoch)
            if nxt is not None and md.end_offset > nxt[1] - 1:
                return False
        elif next_after(lineage, epoch) != next_after(seg_items, epoch):
            return False
    return md.end_offset < log_end_offset


def has_truncated_epoch(md: RemoteLogSegmentMetadata, leader_epochs: Mapping[int, int]) -> bool:
    """Whether the segment holds records of an epoch that the lineage (filtered) skips
    between its earliest and latest epochs: an epoch an unclean election truncated away
    (KIP-405's "log divergence in remote storage"). Such a segment is an unclean election's
    leftover from this leader's point of view. A segment whose epochs are all in the lineage
    but whose ranges disagree with it (a deposed leader copied records past its epoch's
    end) is not: a later unclean election may make it the lineage's again.
    """
    if not leader_epochs:
        return False
    earliest, latest = min(leader_epochs), max(leader_epochs)
    return any(
        earliest < epoch < latest and epoch not in leader_epochs
        for epoch in filtered_leader_epochs(md.segment_leader_epochs)
    )


def served_ranges(
    md: RemoteLogSegmentMetadata, leader_epochs: Mapping[int, int]
) -> list[tuple[int, int]]:
    """The offsets (inclusive ranges) the segment may serve under the lineage: those whose
    epoch in the segment is their epoch in the lineage (the archive readers' rule)."""
    seg = sorted(filtered_leader_epochs(md.segment_leader_epochs).items())
    lineage = sorted(leader_epochs.items())
    out = []
    for i, (epoch, start) in enumerate(seg):
        end = seg[i + 1][1] - 1 if i + 1 < len(seg) else md.end_offset
        if epoch not in leader_epochs:
            continue
        lineage_start = leader_epochs[epoch]
        nxt = next((o for e, o in lineage if e > epoch), None)
        lineage_end = nxt - 1 if nxt is not None else end
        lo, hi = max(start, lineage_start, md.start_offset), min(end, lineage_end)
        if lo <= hi:
            out.append((lo, hi))
    return out


def highest_remote_offset(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, plog: PartitionLog
) -> int:
    """Kafka's findHighestRemoteOffset: newest epoch first, the highest remote offset of the
    first epoch that has one, bounded by that epoch's end in this log; -1 if none."""
    cache = plog.leader_epoch_cache
    for entry in reversed(cache.entries()):
        highest = rlmm.highest_offset_for_epoch(tp, entry.epoch)
        if highest is None:
            continue
        _, end = cache.end_offset_for(entry.epoch, plog.log_end_offset)
        return end - 1 if 0 <= end <= highest else highest
    return -1


def served_remote_offset(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, plog: PartitionLog
) -> int:
    """``highest_remote_offset``, lowered to what finished segments still hold.

    The RLMM's highest offset of an epoch stays after its segments go (Kafka's rule), which
    is right for segments retention deleted (the log start offset passed them first) but
    not for a copy that finished and was then deleted without being expired: a deposed
    leader's late COPY_SEGMENT_FINISHED landing just before the new leader's
    DELETE_SEGMENT_STARTED of what it saw as a dangling copy. Trusting the retained value
    then would let local retention delete offsets no remote segment holds and the copy task
    skip them. So when the highest offset is above the log start offset and no finished
    segment serves it, the answer is the end of the run of offsets, from the log start
    offset, that COPY_SEGMENT_FINISHED segments hold along this log's lineage (served or
    superseded: after unclean elections this leader's own copy may be superseded by a
    copy it is about to delete); -1 when the tier is empty.
    """
    highest = highest_remote_offset(rlmm, tp, plog)
    start = plog.log_start_offset
    if highest < start or _served_up_to(rlmm, tp, plog, highest) >= highest:
        return highest
    # The rare case: read every segment (the usual one above is one lookup).
    lineage = filtered_leader_epochs(
        {e.epoch: e.start_offset for e in plog.leader_epoch_cache.entries()}
    )
    held = sorted(
        r
        for md in rlmm.list_remote_log_segments(tp)
        if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        for r in served_ranges(md, lineage)
    )
    offset = start - 1
    for lo, hi in held:
        if lo > offset + 1:
            break
        offset = max(offset, hi)
    return min(offset, highest)


def _served_up_to(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition, plog: PartitionLog, offset: int
) -> int:
    """The last offset of ``offset``'s epoch (in this log) that the finished segment
    serving ``offset`` holds; ``offset - 1`` when none serves it."""
    cache = plog.leader_epoch_cache
    epoch = cache.epoch_for_offset(offset)
    if epoch is None:
        return offset - 1
    md = rlmm.remote_log_segment_metadata(tp, epoch, offset)
    if md is None:
        return offset - 1
    seg_next = next((o for e, o in sorted(md.segment_leader_epochs.items()) if e > epoch), None)
    seg_end = md.end_offset if seg_next is None else seg_next - 1
    _, lineage_next = cache.end_offset_for(epoch, plog.log_end_offset)
    return min(seg_end, lineage_next - 1) if lineage_next >= 0 else seg_end


def remote_log_tip(
    rlmm: RemoteLogMetadataManager, tp: TopicIdPartition
) -> RemoteLogSegmentMetadata | None:
    """The newest COPY_SEGMENT_FINISHED segment of the partition without a local log to
    follow: the one whose last leader epoch is the newest (a later epoch supersedes what an
    unclean election left on a former leader's branch), ending highest; None when no
    segment is finished. Where a leader with an empty log starts the partition."""
    tip: RemoteLogSegmentMetadata | None = None
    for md in rlmm.list_remote_log_segments(tp):
        if md.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            continue
        key = (max(md.segment_leader_epochs), md.end_offset)
        if tip is None or key > (max(tip.segment_leader_epochs), tip.end_offset):
            tip = md
    return tip


def remote_log_start_offset(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> int | None:
    """The first offset a COPY_SEGMENT_FINISHED segment of the partition holds, or None."""
    return min(
        (
            md.start_offset
            for md in rlmm.list_remote_log_segments(tp)
            if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ),
        default=None,
    )
