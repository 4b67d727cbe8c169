"""Where a follower's log diverges from its leader's: the KIP-101 / KIP-279 rules.

Leader epochs name lineages. When leadership moves, a follower may hold offsets that the
new leader never had (written by a deposed leader and never committed). Before it fetches,
the follower finds the last offset both logs share and truncates there, instead of
truncating to its high watermark as replicas did before KIP-101 (which could lose committed
data or leave logs that differ under the same offsets).

Two sides, both pure functions of (epoch, end offset) answers from the leader-epoch caches:

- follower (``follower_truncation_state``): the leader answered OffsetsForLeaderEpoch for the
  follower's latest epoch, or a Fetch response carried a ``diverging_epoch``; where does the
  follower truncate, and is that final? Kafka's AbstractFetcherThread.getOffsetTruncationState.
- leader (``diverging_epoch``): a follower's Fetch (v12+) says the epoch of the last batch it
  has; is its position on the leader's lineage, or must it truncate first? Kafka's
  Partition.readRecords check on ``lastFetchedEpoch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from core.errors import OffsetOutOfRangeError
from core.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


class EpochEndOffset(NamedTuple):
    """An OffsetsForLeaderEpoch answer: the largest known epoch <= the requested one and the
    offset where it ended (exclusive: the start of the next epoch, or the log end offset for
    the latest epoch). ``(-1, -1)`` when undefined.
    """

    epoch: int
    end_offset: int

    @property
    def is_undefined(self) -> bool:
        return self.epoch == UNDEFINED_EPOCH or self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED_EPOCH_END_OFFSET = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@dataclass(frozen=True, slots=True)
class OffsetTruncationState:
    """Where a follower truncates, and whether it may fetch afterwards.

    Attributes:
        offset: truncate the log to this offset (a no-op when it is at or above the log end
            offset), then fetch from the log end offset.
        truncation_completed: False when the leader answered an epoch the follower does not
            have (KIP-279): after truncating to ``offset`` the follower asks again, for its
            new latest epoch, and repeats until this is True.
    """

    offset: int
    truncation_completed: bool


def follower_truncation_state(
    leader: EpochEndOffset,
    local_for_leader_epoch: EpochEndOffset,
    log_end_offset: int,
    fallback_offset: int,
) -> OffsetTruncationState:
    """The follower's truncation offset given the leader's answer (Kafka's rules).

    Args:
        leader: the leader's ``(epoch, end offset)`` for the epoch the follower asked about
            (its latest), or the ``diverging_epoch`` of a Fetch response.
        local_for_leader_epoch: the follower's own ``end_offset_for_epoch(leader.epoch)``:
            its largest epoch <= ``leader.epoch`` and where that epoch ends locally;
            undefined when the follower's cache has no such epoch (it is empty).
        log_end_offset: the follower's log end offset.
        fallback_offset: where to truncate when the leader cannot say (it answered an
            undefined end offset: it has no epoch at or below the one asked, e.g. its cache
            is empty). Kafka uses the fetch offset the follower started from, its high
            watermark.

    Returns:
        - leader end offset undefined: ``fallback_offset``, final.
        - leader epoch undefined but end offset defined (OffsetsForLeaderEpoch v0): the
          leader's end offset, final.
        - the follower has no epoch <= the leader's: the leader's end offset, final.
        - the follower's largest epoch <= the leader's is older than the leader's (it never
          saw the leader's epoch): its own end offset for that older epoch, *not* final;
          ask again with the new latest epoch (KIP-279).
        - same epoch on both sides: the smaller of both end offsets, final.

        The offset is never above ``log_end_offset``.
    """
    if leader.end_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetTruncationState(min(fallback_offset, log_end_offset), True)
    if leader.epoch == UNDEFINED_EPOCH or local_for_leader_epoch.is_undefined:
        return OffsetTruncationState(min(leader.end_offset, log_end_offset), True)
    if local_for_leader_epoch.epoch != leader.epoch:
        return OffsetTruncationState(min(local_for_leader_epoch.end_offset, log_end_offset), False)
    offset = min(local_for_leader_epoch.end_offset, leader.end_offset, log_end_offset)
    return OffsetTruncationState(offset, True)


def diverging_epoch(
    leader_for_last_fetched_epoch: EpochEndOffset,
    last_fetched_epoch: int,
    fetch_offset: int,
    log_start_offset: int,
) -> EpochEndOffset | None:
    """The leader's check of a follower fetch that names its last fetched epoch (Fetch v12+).

    Args:
        leader_for_last_fetched_epoch: the leader's ``end_offset_for_epoch(last_fetched_epoch)``.
        last_fetched_epoch: the epoch of the last batch in the follower's log; negative
            (-1 on the wire) means the fetch does not say, and nothing is checked.
        fetch_offset: the follower's fetch offset (its log end offset).
        log_start_offset: the leader's log start offset.

    Returns:
        None when the follower's log up to ``fetch_offset`` is on the leader's lineage: the
        leader has ``last_fetched_epoch`` and it ends at or after ``fetch_offset``. Otherwise
        the ``(epoch, end offset)`` to answer as ``diverging_epoch``, with no records; the
        follower then truncates with ``follower_truncation_state``.

    Raises:
        OffsetOutOfRangeError: the leader cannot place ``last_fetched_epoch`` (undefined
            answer), or ``fetch_offset`` is below its log start offset (then the follower
            must restart from the leader's log start, whatever the epochs say). As in Kafka.
    """
    if last_fetched_epoch < 0:
        return None  # Kafka reads -1 as an absent lastFetchedEpoch
    answer = leader_for_last_fetched_epoch
    if answer.is_undefined:
        raise OffsetOutOfRangeError(
            f"could not determine the end offset of the last fetched epoch {last_fetched_epoch}"
        )
    if fetch_offset < log_start_offset:
        raise OffsetOutOfRangeError(
            f"fetch offset {fetch_offset} is below the log start offset {log_start_offset}"
        )
    if answer.epoch < last_fetched_epoch or answer.end_offset < fetch_offset:
        return answer
    return None
