"""Partition: one partition this broker hosts, as its leader or as a follower (Kafka's Partition).

The controller decides the roles (LeaderAndIsr, or the local controller in embedded mode);
the ReplicaManager applies them with ``make_leader`` and ``make_follower``.

A **leader** appends clients' batches with its leader epoch and keeps, per follower, what the
follower's fetches say (``ReplicaState``: its log end offset and when it was last caught up,
by Kafka's rule). From those it moves:

- the **high watermark**: the smallest log end offset over the maximal ISR (the committed
  ISR plus a replica being added) and over replicas caught up within
  ``replica.lag.time.max.ms`` (Kafka 3.x also waits for those, so that a replica about to
  join is not left behind); never backwards. When it moves, produces waiting for acks=all
  and fetches waiting for data are tried again (``ReplicaHost.on_high_watermark_advanced``);
- the **ISR**: a follower whose log reaches the high watermark and the start of the
  leader's epoch joins (``maybe_expand_isr``); one not caught up for
  ``replica.lag.time.max.ms`` leaves (``maybe_shrink_isr``). A change is proposed to the
  ``IsrWriter`` and counts only once written; one change at a time is in flight, and a
  refused change waits for the controller's next LeaderAndIsr.

A **follower** takes batches as the leader wrote them (the replica fetcher) and the high
watermark from the leader's fetch responses, capped at its own log end offset.

Everything here runs on the event loop; the only blocking call is
``assign_epoch_start_offset``, which the ReplicaManager runs on a thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

from core.errors import CoreError
from core.log.partition_log import LogAppendInfo, PartitionLog
from core.server.cluster_types import NO_LEADER, LeaderAndIsr, PartitionState, TopicPartition
from core.server.isr_writer import IsrWriteError, IsrWriter
from core.server.zookeeper.topic_data import LeaderRecoveryState

log = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1
NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


def monotonic_ms() -> int:
    """Milliseconds of a clock that never jumps: replica lag is a duration."""
    return time.monotonic_ns() // 1_000_000


# -- errors -------------------------------------------------------------------------------------
class NotLeaderError(CoreError):
    """NOT_LEADER_OR_FOLLOWER: this broker does not lead the partition."""

    error_code = 6


class FencedLeaderEpochError(CoreError):
    """FENCED_LEADER_EPOCH: the request's leader epoch is older than the broker's."""

    error_code = 74


class UnknownLeaderEpochError(CoreError):
    """UNKNOWN_LEADER_EPOCH: the request's leader epoch is newer than the broker's."""

    error_code = 75


class NotEnoughReplicasError(CoreError):
    """NOT_ENOUGH_REPLICAS: an acks=all produce while the ISR is smaller than
    ``min.insync.replicas``; nothing was appended."""

    error_code = 19


# -- the leader's view of a follower ----------------------------------------------------------
@dataclass(slots=True)
class ReplicaState:
    """What a leader knows of one follower (Kafka's Replica and its ReplicaState).

    Attributes:
        log_end_offset: the follower's last fetch offset: its log end offset; -1 unknown.
        log_start_offset: the follower's log start offset; -1 unknown.
        last_fetch_leader_log_end_offset: the leader's log end offset at the last fetch.
        last_fetch_time_ms: when that fetch was read.
        last_caught_up_time_ms: the last time the follower was known to have everything
            the leader had (``update_fetch_state``).
    """

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def update_fetch_state(
        self,
        fetch_offset: int,
        log_start_offset: int,
        fetch_time_ms: int,
        leader_log_end_offset: int,
    ) -> None:
        """A fetch from this follower was read (Kafka's rule for the caught-up time): it
        asked for the leader's log end offset at the read -> caught up now; it asked for at
        least the leader's log end offset of its previous fetch -> caught up as of that
        fetch; else no change."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(
            leader_log_end_offset, self.last_fetch_leader_log_end_offset
        )
        self.last_fetch_time_ms = fetch_time_ms

    def reset(
        self, now_ms: int, leader_log_end_offset: int, *, new_leader: bool, in_sync: bool
    ) -> None:
        """The leader epoch changed (Kafka's resetReplicaState): ISR members count as caught
        up now, the others as never, so that neither holds the high watermark back for
        what happened before; a broker that just became leader forgets the offsets too."""
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        if new_leader:
            self.log_end_offset = UNKNOWN_OFFSET
            self.log_start_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
        else:
            self.last_fetch_leader_log_end_offset = leader_log_end_offset
            self.last_fetch_time_ms = now_ms if in_sync else 0

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (
            self.log_end_offset == leader_log_end_offset
            or now_ms - self.last_caught_up_time_ms <= max_lag_ms
        )


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    """An ISR change submitted and not answered yet (Kafka's PendingExpandIsr /
    PendingShrinkIsr)."""

    proposed: LeaderAndIsr
    expanding: bool


class ReplicaHost(Protocol):
    """What a Partition needs from the broker hosting it (the ReplicaManager)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def replica_lag_time_max_ms(self) -> int: ...

    @property
    def isr_writer(self) -> IsrWriter: ...

    def clock_ms(self) -> int:
        """The time replica lag is measured with (monotonic milliseconds)."""
        ...

    def on_high_watermark_advanced(self, partition: Partition) -> None:
        """The leader's high watermark moved up: try the waiting produces and fetches."""
        ...


class Partition:
    """One hosted partition: its log, its role, and as leader its followers' states."""

    def __init__(
        self,
        topic: str,
        topic_id: uuid.UUID,
        index: int,
        log: PartitionLog,
        host: ReplicaHost,
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.index = index
        self.log = log
        self.host = host
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.leader_recovery_state = int(LeaderRecoveryState.RECOVERED)
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()  # committed
        self.pending_isr: PendingIsrChange | None = None
        self.remote_replicas: dict[int, ReplicaState] = {}
        # Where the current leader epoch starts in the log (leaders only).
        self.leader_epoch_start_offset: int | None = None
        # The leader's empty local log waits to start after the partition's remote tier
        # (ReplicaManager's remote start): until then it serves nobody.
        self.awaiting_remote_start = False
        # The partition epoch at which an ISR change was refused: none is proposed again
        # until the controller's LeaderAndIsr brings a newer state.
        self._isr_refused_at: int | None = None
        self._isr_task: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return f"Partition({self.topic}-{self.index}, {role}, epoch {self.leader_epoch})"

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.host.broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.log.producer_state.first_unstable_offset()
        hw = self.log.high_watermark
        return hw if first_unstable is None else min(first_unstable, hw)

    @property
    def min_insync_replicas(self) -> int:
        """``min.insync.replicas`` of the topic (the broker's default unless overridden)."""
        return self.log.config.min_insync_replicas

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus any replica a pending change adds: the high watermark
        waits for all of them, so that it never has to move back if the change commits."""
        pending = self.pending_isr
        if pending is None or not pending.expanding:
            return self.isr
        return self.isr + tuple(r for r in pending.proposed.isr if r not in self.isr)

    # -- roles ---------------------------------------------------------------------------------
    def make_leader(self, state: PartitionState) -> bool:
        """Lead the partition as ``state`` says (Kafka's makeLeader).

        The ISR and replicas are taken as given; with a new leader epoch the epoch starts at
        the log end offset (``leader_epoch_start_offset``) and the followers' states are
        reset. The caller records the epoch start in the log's epoch cache at once with
        ``assign_epoch_start_offset`` (on a thread: it writes a checkpoint). The high
        watermark is then moved if the ISR allows (with ISR = [self], to the log end).

        Returns:
            True if the leader epoch is new (the epoch cache needs its start).
        """
        lai = state.leader_and_isr
        now = self.host.clock_ms()
        was_leader = self.is_leader
        new_epoch = lai.leader_epoch > self.leader_epoch or not was_leader
        self.controller_epoch = state.controller_epoch
        self.replicas = state.replicas
        self.isr = lai.isr
        self.pending_isr = None
        self._isr_refused_at = None
        self.leader_recovery_state = lai.leader_recovery_state
        self.remote_replicas = {
            r: self.remote_replicas.get(r) or ReplicaState(r)
            for r in state.replicas
            if r != self.host.broker_id
        }
        if new_epoch:
            start = self.log.log_end_offset
            for replica in self.remote_replicas.values():
                replica.reset(
                    now, start, new_leader=not was_leader, in_sync=replica.broker_id in lai.isr
                )
            self.leader_epoch = lai.leader_epoch
            self.leader_epoch_start_offset = start
        self.partition_epoch = lai.partition_epoch
        self.leader_id = self.host.broker_id
        log.info(
            "%s-%d: leader at epoch %d, ISR %s, log end %d, high watermark %d",
            self.topic,
            self.index,
            self.leader_epoch,
            list(self.isr),
            self.log.log_end_offset,
            self.log.high_watermark,
        )
        self.maybe_increment_high_watermark(now)
        return new_epoch

    def restart_epoch_at_log_end(self) -> None:
        """The leader's log was restarted (after the remote tier): its epoch starts at the
        new log end, and the followers' positions, taken before, are forgotten. The caller
        records the start with ``assign_epoch_start_offset``."""
        if not self.is_leader:
            return
        now = self.host.clock_ms()
        start = self.log.log_end_offset
        self.leader_epoch_start_offset = start
        for replica in self.remote_replicas.values():
            replica.reset(now, start, new_leader=True, in_sync=replica.broker_id in self.isr)

    def assign_epoch_start_offset(self) -> None:
        """Record where the leader's epoch starts in the log's epoch cache (blocking: it
        writes the leader-epoch checkpoint). A no-op once a batch of the epoch is in."""
        start = self.leader_epoch_start_offset
        if self.is_leader and start is not None:
            self.log.assign_epoch_start_offset(self.leader_epoch, start)

    def make_follower(self, state: PartitionState) -> bool:
        """Follow ``state.leader`` (Kafka's makeFollower): no followers' states, no ISR
        changes; the high watermark now comes from the leader.

        Returns:
            True if the leader or the leader epoch changed (or this broker led): the fetcher
            must start again from the log end, with truncation first.
        """
        lai = state.leader_and_isr
        changed = (
            self.is_leader or self.leader_id != lai.leader or self.leader_epoch != lai.leader_epoch
        )
        self.controller_epoch = state.controller_epoch
        self.replicas = state.replicas
        self.isr = lai.isr
        self.pending_isr = None
        self._isr_refused_at = None
        self.leader_recovery_state = lai.leader_recovery_state
        self.remote_replicas = {}
        self.leader_epoch_start_offset = None
        self.leader_epoch = lai.leader_epoch
        self.partition_epoch = lai.partition_epoch
        self.leader_id = lai.leader
        if changed:
            log.info(
                "%s-%d: follower of broker %d at epoch %d, log end %d, high watermark %d",
                self.topic,
                self.index,
                self.leader_id,
                self.leader_epoch,
                self.log.log_end_offset,
                self.log.high_watermark,
            )
        return changed

    def make_stopped(self) -> None:
        """No longer a replica served here (StopReplica, topic deletion)."""
        self.leader_id = NO_LEADER
        self.remote_replicas = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = None

    # -- requests ------------------------------------------------------------------------------
    def check_leader(self) -> None:
        """Raises NotLeaderError unless this broker leads the partition and serves it (a
        leader whose empty log still waits to start after the remote tier does not)."""
        if not self.is_leader:
            raise NotLeaderError(
                f"broker {self.host.broker_id} is not the leader of {self.topic}-{self.index}"
                f" (leader: {self.leader_id}, epoch {self.leader_epoch})"
            )
        if self.awaiting_remote_start:
            raise NotLeaderError(
                f"broker {self.host.broker_id} leads {self.topic}-{self.index} but its log "
                "is still being started after the remote tier"
            )

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's check of a request's current leader epoch (-1 = not given)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}"
            )

    def append_as_leader(
        self, records: bytearray | memoryview, required_acks: int = 1
    ) -> LogAppendInfo:
        """Append clients' batches with this leader's epoch, then move the high watermark
        if the ISR allows (with ISR = [self] it reaches the new log end at once).

        Raises:
            NotLeaderError: this broker does not lead the partition.
            NotEnoughReplicasError: ``required_acks`` is -1 and the ISR is smaller than
                ``min.insync.replicas`` (checked before appending, as Kafka does).
            CoreError subclasses of ``PartitionLog.append_as_leader``.
        """
        self.check_leader()
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the "
                f"min.isr requirement of {self.min_insync_replicas} for partition "
                f"{self.topic}-{self.index}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch)
        if not info.duplicate:
            self.maybe_increment_high_watermark()
        return info

    def append_as_coordinator(self, records: bytearray) -> LogAppendInfo:
        """Append batches of this broker's coordinators: transaction markers and
        transactional offset commits (Kafka's AppendOrigin.COORDINATOR). Kafka writes them
        with acks=all: the ISR must satisfy ``min.insync.replicas`` before the append, and
        the caller waits for the high watermark to pass the batch.

        Raises:
            NotLeaderError: this broker does not lead the partition.
            NotEnoughReplicasError: the ISR is smaller than ``min.insync.replicas``.
            CoreError subclasses of ``PartitionLog.append_as_coordinator``.
        """
        self.check_leader()
        if len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the "
                f"min.isr requirement of {self.min_insync_replicas} for partition "
                f"{self.topic}-{self.index}"
            )
        info = self.log.append_as_coordinator(records, self.leader_epoch)
        if not info.duplicate:
            self.maybe_increment_high_watermark()
        return info

    def check_enough_replicas_reached(self, required_offset: int) -> tuple[bool, int]:
        """An acks=all produce's condition (Kafka's checkEnoughReplicasReachOffset).

        Returns:
            ``(done, error code)``: not leader any more -> NOT_LEADER_OR_FOLLOWER; the high
            watermark reached ``required_offset`` -> done, with
            NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR fell below ``min.insync.replicas``
            meanwhile; else not done.
        """
        if not self.is_leader:
            return True, NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if len(self.maximal_isr) < self.min_insync_replicas:
                return True, NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return True, NONE
        return False, NONE

    # -- the leader's followers ------------------------------------------------------------
    def update_follower_fetch_state(
        self,
        replica_id: int,
        fetch_offset: int,
        follower_log_start_offset: int,
        fetch_time_ms: int,
        leader_log_end_offset: int,
    ) -> bool:
        """A follower's fetch was read: record its position, maybe add it to the ISR, maybe
        move the high watermark (Kafka's updateFollowerFetchState).

        Args:
            leader_log_end_offset: the leader's log end offset when the fetch was read (not
                now: appends after the read must not keep the follower out of the ISR).

        Returns:
            False if ``replica_id`` is not a replica of the partition (or this broker does
            not lead it): the fetch then gets no records, as in Kafka.
        """
        replica = self.remote_replicas.get(replica_id)
        if replica is None or not self.is_leader:
            return False
        previous_end = replica.log_end_offset
        replica.update_fetch_state(
            fetch_offset, follower_log_start_offset, fetch_time_ms, leader_log_end_offset
        )
        self.maybe_expand_isr(replica)
        if previous_end != replica.log_end_offset:
            self.maybe_increment_high_watermark(fetch_time_ms)
        return True

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """Move the high watermark up to what the maximal ISR (and replicas caught up within
        the lag time) have; never down. Returns True if it moved (delayed produces and
        fetches were tried again)."""
        if not self.is_leader:
            return False
        now = self.host.clock_ms() if now_ms is None else now_ms
        leader_end = self.log.log_end_offset
        new_hw = leader_end
        maximal = self.maximal_isr
        lag = self.host.replica_lag_time_max_ms
        for replica in self.remote_replicas.values():
            end = replica.log_end_offset
            if end < new_hw and (
                replica.broker_id in maximal or replica.is_caught_up(leader_end, now, lag)
            ):
                new_hw = end
        if new_hw <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(new_hw)
        self.host.on_high_watermark_advanced(self)
        return True

    def maybe_expand_isr(self, replica: ReplicaState) -> None:
        """Propose adding ``replica`` to the ISR if its log reaches the high watermark and
        the start of this leader's epoch (Kafka's isFollowerInSync), no change is in
        flight, and no refused change waits for the controller."""
        if not self._may_change_isr() or replica.broker_id in self.isr:
            return
        start = self.leader_epoch_start_offset
        end = replica.log_end_offset
        if start is None or end < start or end < self.log.high_watermark:
            return
        self._propose((*self.isr, replica.broker_id), expanding=True)

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        """ISR members (other than this leader) not caught up within the lag time."""
        leader_end = self.log.log_end_offset
        lag = self.host.replica_lag_time_max_ms
        out = []
        for broker_id in self.isr:
            if broker_id == self.host.broker_id:
                continue
            replica = self.remote_replicas.get(broker_id)
            if replica is None or not replica.is_caught_up(leader_end, now_ms, lag):
                out.append(broker_id)
        return out

    def maybe_shrink_isr(self, now_ms: int | None = None) -> None:
        """Propose removing the ISR members not caught up for ``replica.lag.time.max.ms``
        (the periodic check, Kafka's maybeShrinkIsr). The leader itself always stays."""
        if not self.is_leader or not self._may_change_isr():
            return
        now = self.host.clock_ms() if now_ms is None else now_ms
        out = self.out_of_sync_replicas(now)
        if not out:
            return
        log.info(
            "%s-%d: shrinking ISR from %s: replicas %s not caught up within %d ms (log end %d, "
            "high watermark %d)",
            self.topic,
            self.index,
            list(self.isr),
            out,
            self.host.replica_lag_time_max_ms,
            self.log.log_end_offset,
            self.log.high_watermark,
        )
        self._propose(tuple(r for r in self.isr if r not in out), expanding=False)

    def _may_change_isr(self) -> bool:
        return (
            self.is_leader
            and self.pending_isr is None
            and self._isr_refused_at != self.partition_epoch
        )

    def _propose(self, isr: tuple[int, ...], *, expanding: bool) -> None:
        proposed = LeaderAndIsr(
            leader=self.host.broker_id,
            leader_epoch=self.leader_epoch,
            isr=isr,
            partition_epoch=self.partition_epoch,
            # Kafka's leader proposes RECOVERED: it has what every ISR member has.
            leader_recovery_state=int(LeaderRecoveryState.RECOVERED),
        )
        pending = PendingIsrChange(proposed, expanding)
        self.pending_isr = pending
        if expanding:
            log.info(
                "%s-%d: expanding ISR from %s to %s",
                self.topic,
                self.index,
                list(self.isr),
                list(isr),
            )
        self._isr_task = asyncio.ensure_future(self._write_isr(pending))

    async def _write_isr(self, pending: PendingIsrChange) -> None:
        try:
            committed = await self.host.isr_writer.submit(
                self.tp, pending.proposed, self.controller_epoch
            )
        except IsrWriteError as e:
            log.warning("%s-%d: %s; proposed again later", self.topic, self.index, e)
            if self.pending_isr is pending:
                self.pending_isr = None
            return
        except Exception:
            # A bug in a writer: the partition keeps its committed ISR and can try again.
            log.exception("%s-%d: ISR update failed", self.topic, self.index)
            if self.pending_isr is pending:
                self.pending_isr = None
            return
        if self.pending_isr is not pending:
            return  # a LeaderAndIsr replaced the state meanwhile: it wins
        self.pending_isr = None
        if committed is None or committed.leader_epoch != self.leader_epoch:
            self._isr_refused_at = self.partition_epoch
            return
        self.isr = committed.isr
        self.partition_epoch = committed.partition_epoch
        self.leader_recovery_state = committed.leader_recovery_state
        log.info(
            "%s-%d: ISR is now %s (partition epoch %d)",
            self.topic,
            self.index,
            list(self.isr),
            self.partition_epoch,
        )
        # After a shrink the high watermark may move (the slow replica no longer counts).
        self.maybe_increment_high_watermark()

    # -- follower --------------------------------------------------------------------------
    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower takes the leader's high watermark, capped at its own log end."""
        self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))
