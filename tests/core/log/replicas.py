"""Helpers for the replication tests: PartitionLogs copying each other as replicas do."""

from __future__ import annotations

from core.log.partition_log import LogAppendInfo, PartitionLog
from core.records.batch import iter_batches
from core.records.builder import build_control_batch
from core.records.record import ControlRecordType


def log_batches(plog: PartitionLog) -> list[tuple[int, bytes]]:
    """``(base offset, bytes)`` of every batch of the log, read through ``PartitionLog.read``."""
    out: list[tuple[int, bytes]] = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 1 << 20)
        if info.records is None:
            raise AssertionError(f"{plog}: nothing to read at {offset}")
        for header in iter_batches(info.records.read_bytes()):
            out.append((header.base_offset, bytes(header.raw())))
            offset = header.next_offset
    return out


def fetch(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 20) -> LogAppendInfo:
    """One follower fetch: the leader's bytes from the follower's log end offset, appended.

    The leader's read may end inside a batch (``max_bytes``), as a real fetch does.
    """
    info = leader.read(follower.log_end_offset, max_bytes)
    data = info.records.read_bytes() if info.records is not None else b""
    return follower.append_as_follower(data)


def catch_up(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 20) -> None:
    """Fetch until the follower's log end offset is the leader's."""
    for _ in range(10_000):
        if follower.log_end_offset >= leader.log_end_offset:
            return
        fetch(leader, follower, max_bytes)
    raise AssertionError(f"{follower} did not catch up with {leader}")


def truncate_by_epoch(leader: PartitionLog, follower: PartitionLog) -> int:
    """The follower's truncation on a leader change (KIP-101/KIP-279): ask the leader for the
    end of the follower's latest epoch, truncate, repeat until final; without an epoch,
    truncate to the high watermark. Returns the number of OffsetsForLeaderEpoch rounds."""
    rounds = 0
    while True:
        epoch = follower.latest_epoch
        if epoch is None:
            follower.truncate_to(follower.high_watermark)
            return rounds
        rounds += 1
        state = follower.truncation_state_for(leader.end_offset_for_epoch(epoch))
        follower.truncate_to(state.offset)
        if state.truncation_completed:
            return rounds
        if rounds > 1000:
            raise AssertionError("truncation does not converge")


def append_marker(
    leader: PartitionLog,
    marker: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    leader_epoch: int,
    timestamp: int = 1_700_000_000_000,
    coordinator_epoch: int = 0,
) -> LogAppendInfo:
    """Write a transaction marker on a leader.

    Clients cannot send control batches, and the coordinator's path to the leader (Kafka's
    WriteTxnMarkers, appendAsLeader with origin COORDINATOR) does not exist yet: the marker
    is written with its offset and epoch already assigned, through the follower path.
    """
    batch = build_control_batch(
        marker,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        base_offset=leader.log_end_offset,
        partition_leader_epoch=leader_epoch,
        timestamp=timestamp,
    )
    return leader.append_as_follower(batch)
