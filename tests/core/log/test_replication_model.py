"""Replicas of one partition under random produce, fetch, crash, restart and elections.

Each replica is a broker's LogManager holding the partition's PartitionLog in its own log
dir. A leader appends client batches (plain, idempotent, transactional, compressed or not)
and transaction markers; followers fetch byte ranges read from the leader's log and append
them with ``append_as_follower``; the leader's high watermark is the smallest log end offset
of its ISR. Replicas crash (files left as a killed process leaves them: no flush, no
snapshot, no clean-shutdown marker) and restart through a new LogManager from the
checkpoints. Elections follow Kafka's ZooKeeper-mode controller: a new leader from the live
ISR (clean), or, with none left, any live replica (unclean, ISR of one); every election and
every removal of a dead follower from the ISR starts a new leader epoch, which the leader
assigns at its log end offset. On each leader change a follower truncates either first, by
OffsetsForLeaderEpoch (KIP-101/KIP-279), or on its first fetch, by the leader's diverging
epoch (Fetch v12+).

Invariants, after every step:

- offsets: log start <= high watermark <= log end; recovery point <= log end.
- committed data: batches below the highest high watermark of the lineage (reset only by an
  unclean election) never change and are on the leader and every live ISR member.
- lineage: a follower that has truncated (or passed the diverging-epoch check) holds a
  prefix of the leader's log, batch for batch and byte for byte.
- epochs: a replica's leader-epoch cache is the one its batches imply (each epoch newer
  than all before it starts at its first batch), plus at most an entry at the log end
  for an epoch that has written nothing yet (a leader's own, or a stale one of a replica
  that has not yet truncated).
- producer state: per producer (epoch, last sequence, last offset, open transaction), the
  LSO bound and the aborted-transaction index equal what the replica's batches imply.

And in rules: checkpoints written after truncations and at random times are readable and
never name an offset above the log end; a copy of a replica's directory opened fresh
(recovery from offset 0, with and without its producer snapshots) rebuilds the same batches,
epochs, producer state and aborted transactions.

``TIERLOG_SOAK=1`` runs many more and longer examples (tens of minutes: raise pytest's
timeout, ``-o timeout=3600``, as ``make soak`` does for tests/reliability).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.log.checkpoints import OffsetCheckpointFile
from core.log.config import LogConfig
from core.log.files import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from core.log.log_manager import LogManager, LogManagerConfig
from core.log.partition_log import PartitionLog
from core.log.producer_state import read_txn_marker
from core.log.txn_index import AbortedTxn
from core.records.batch import Compression, RecordBatchHeader
from core.records.builder import RecordBatchBuilder
from core.records.record import ControlRecordType

from .replicas import append_marker, log_batches

SOAK = os.environ.get("TIERLOG_SOAK") == "1"
N = 3
TOPIC = "r"
TS = 1_700_000_000_000
CONFIG = LogConfig(
    segment_bytes=1500, index_interval_bytes=150, segment_index_bytes=4096, retention_ms=-1
)
IDEMPOTENT_PID = 100
TXN_PIDS = (201, 202)

# Follower states: truncate by OffsetsForLeaderEpoch first; fetch at once naming the last
# fetched epoch (the leader may answer a diverging epoch); known to be on the leader's lineage.
TRUNCATING, FETCHING, VERIFIED = "truncating", "fetching", "verified"


@dataclass
class Replica:
    broker_id: int
    log_dir: Path
    manager: LogManager | None = None
    state: str = TRUNCATING

    @property
    def alive(self) -> bool:
        return self.manager is not None

    @property
    def log(self) -> PartitionLog:
        assert self.manager is not None
        plog = self.manager.get_log(TOPIC, 0)
        assert plog is not None
        return plog


@dataclass(frozen=True)
class ProducerView:
    """What producer state must say of one producer id, derived from the batches."""

    producer_epoch: int
    last_seq: int
    last_offset: int
    txn_first_offset: int | None


def expected_producer_state(
    batches: list[RecordBatchHeader], high_watermark: int
) -> tuple[dict[int, ProducerView], list[AbortedTxn], int | None]:
    """Producer views, aborted transactions and the LSO bound the batches imply.

    Independent of ProducerStateManager: a replay of Kafka's rules over the batch headers.
    """
    producers: dict[int, ProducerView] = {}
    open_txns: dict[int, int] = {}  # producer id -> first offset
    completed: list[tuple[int, int]] = []  # (first offset, marker offset)
    aborted: list[AbortedTxn] = []
    for h in batches:
        if not h.has_producer_id:
            continue
        pid = h.producer_id
        view = producers.get(pid, ProducerView(h.producer_epoch, -1, -1, None))
        if view.producer_epoch != h.producer_epoch:
            view = ProducerView(h.producer_epoch, -1, -1, view.txn_first_offset)
        if h.is_control:
            marker = read_txn_marker(h)
            if marker is None:
                continue
            first = open_txns.pop(pid, None)
            if first is not None:
                completed.append((first, h.base_offset))
                if marker.control_type == ControlRecordType.ABORT:
                    others = [f for p, f in open_txns.items() if p != pid]
                    lso = min(others) if others else h.base_offset + 1
                    aborted.append(AbortedTxn(pid, first, h.base_offset, lso))
            view = ProducerView(view.producer_epoch, view.last_seq, view.last_offset, None)
        else:
            txn = view.txn_first_offset
            if h.is_transactional and txn is None:
                txn = open_txns[pid] = h.base_offset
            view = ProducerView(view.producer_epoch, h.last_sequence, h.last_offset, txn)
        producers[pid] = view
    unstable = [*open_txns.values(), *(f for f, last in completed if last >= high_watermark)]
    return producers, aborted, (min(unstable) if unstable else None)


def headers(plog: PartitionLog) -> list[RecordBatchHeader]:
    return [RecordBatchHeader(data) for _, data in log_batches(plog)]


def implied_epochs(batches: list[RecordBatchHeader]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for h in batches:
        if not out or h.partition_leader_epoch > out[-1][0]:
            out.append((h.partition_leader_epoch, h.base_offset))
    return out


def _memory_dir() -> str | None:
    """/dev/shm when there is one: the model's crashes are process kills, which fsync does
    not matter to, and the thousands of fsyncs of checkpoints and snapshots would otherwise
    take most of the run's time."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


class ReplicationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="tierlog-replication-", dir=_memory_dir()))
        self.replicas = [Replica(i, self.tmp / f"broker-{i}") for i in range(N)]
        for replica in self.replicas:
            self._start(replica)
        self.epoch = 0
        self.leader: int | None = 0
        self.isr = set(range(N))
        self.follower_leo: dict[int, int] = {}  # the leader's view of its followers
        self.committed: dict[int, bytes] = {}  # base offset -> batch, below committed_hw
        self.committed_hw = 0
        self.clock = TS
        self.replicas[0].log.leader_epoch_cache.assign(0, 0)
        self.replicas[0].state = VERIFIED

    def teardown(self) -> None:
        for replica in self.replicas:
            if replica.manager is not None:
                replica.manager.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- brokers ---------------------------------------------------------------------------
    def _start(self, replica: Replica) -> None:
        replica.manager = LogManager(
            LogManagerConfig(
                log_dirs=(replica.log_dir,),
                node_id=replica.broker_id + 1,
                default_log_config=CONFIG,
            )
        )
        plog = replica.manager.get_or_create_log(TOPIC, 0, CONFIG)
        # Rolls flush, and truncations delete files, at once instead of on the scheduler's
        # threads: a run must replay exactly for Hypothesis to shrink it. (The late flush
        # racing a truncation has its own test in test_truncation.py.)
        plog.scheduler = None

    def _kill(self, replica: Replica) -> None:
        """What a SIGKILL leaves: the files as written, nothing flushed, no marker."""
        assert replica.manager is not None
        plog = replica.log
        replica.manager.close_without_marker()
        for segment in plog.segments():
            segment.log.close()
            segment.txn_index.close()
        replica.manager = None

    def _alive(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive]

    def _followers(self) -> list[Replica]:
        return [r for r in self._alive() if r.broker_id != self.leader]

    def _leader_log(self) -> PartitionLog:
        assert self.leader is not None
        return self.replicas[self.leader].log

    def _new_epoch(self, leader: int, fetch_first: bool) -> None:
        """A LeaderAndIsr with a new leader epoch: the leader assigns it at its log end (Kafka's
        makeLeader), every other live replica restarts its fetcher (truncating anew)."""
        self.epoch += 1
        self.leader = leader
        plog = self.replicas[leader].log
        plog.leader_epoch_cache.assign(self.epoch, plog.log_end_offset)
        self.replicas[leader].state = VERIFIED
        for replica in self._followers():
            replica.state = FETCHING if fetch_first else TRUNCATING

    def _advance_high_watermark(self) -> None:
        leader = self._leader_log()
        offsets = [leader.log_end_offset]
        offsets += [self.follower_leo.get(r, -1) for r in self.isr if r != self.leader]
        if min(offsets) > leader.high_watermark:
            leader.update_high_watermark(min(offsets))
        self.committed_hw = max(self.committed_hw, leader.high_watermark)
        self._record_committed(leader)

    def _record_committed(self, plog: PartitionLog) -> None:
        for header in headers(plog):
            if header.last_offset >= self.committed_hw:
                break
            data = bytes(header.raw())
            assert self.committed.setdefault(header.base_offset, data) == data, (
                f"committed batch at {header.base_offset} changed"
            )

    def _truncate(self, replica: Replica, offset: int) -> None:
        assert replica.manager is not None
        if replica.manager.truncate_to(TOPIC, 0, offset):
            event("a follower truncated data")
        self._check_checkpoints(replica)

    def _check_checkpoints(self, replica: Replica) -> None:
        """Every offset checkpoint of the replica's log dir is readable and within the log."""
        for name in (
            REPLICATION_OFFSET_CHECKPOINT,
            RECOVERY_POINT_CHECKPOINT,
            LOG_START_OFFSET_CHECKPOINT,
        ):
            written = OffsetCheckpointFile(replica.log_dir / name).read().get((TOPIC, 0))
            assert written is None or written <= replica.log.log_end_offset, (name, written)

    def _truncate_by_epoch(self, replica: Replica) -> None:
        leader, plog = self._leader_log(), replica.log
        for _ in range(100):
            epoch = plog.latest_epoch
            if epoch is None:  # nothing to ask about: Kafka truncates to the high watermark
                self._truncate(replica, plog.high_watermark)
                break
            state = plog.truncation_state_for(leader.end_offset_for_epoch(epoch))
            self._truncate(replica, state.offset)
            if state.truncation_completed:
                break
            event("KIP-279: the leader answered an epoch the follower lacks")
        else:
            raise AssertionError("truncation did not converge")
        replica.state = VERIFIED

    # -- rules -----------------------------------------------------------------------------
    @precondition(lambda self: self.leader is not None)
    @rule(
        batches=st.lists(
            st.tuples(
                st.sampled_from(["plain", "idempotent", "txn", "txn", "commit", "abort"]),
                st.integers(1, 4),
                st.sampled_from(list(Compression)),
                st.sampled_from(TXN_PIDS),
            ),
            min_size=1,
            max_size=4,
        )
    )
    def produce(self, batches):
        for kind, count, codec, txn_pid in batches:
            self._produce_one(kind, count, codec, txn_pid)
        self._advance_high_watermark()

    def _produce_one(self, kind: str, count: int, codec: Compression, txn_pid: int) -> None:
        leader = self._leader_log()
        self.clock += 1_000
        if kind in ("commit", "abort"):
            entry = leader.producer_state.last_entry(txn_pid)
            if entry is not None and entry.current_txn_first_offset is not None:
                marker = ControlRecordType.COMMIT if kind == "commit" else ControlRecordType.ABORT
                event(f"a transaction {kind}")
                append_marker(leader, marker, txn_pid, 0, self.epoch, timestamp=self.clock)
                return
            kind = "txn"
        pid = {"plain": -1, "idempotent": IDEMPOTENT_PID, "txn": txn_pid}[kind]
        sequence = -1
        if pid >= 0:
            entry = leader.producer_state.last_entry(pid)
            sequence = 0 if entry is None or entry.last_seq < 0 else entry.last_seq + 1
        builder = RecordBatchBuilder(
            compression=codec,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=sequence,
            is_transactional=kind == "txn",
        )
        for i in range(count):
            builder.append(b"v%d-%d" % (self.clock, i) * 5, key=b"k%d" % i, timestamp=self.clock)
        info = leader.append_as_leader(builder.build(), self.epoch)
        assert not info.duplicate

    @precondition(lambda self: self.leader is not None and self._followers())
    @rule(data=st.data(), max_bytes=st.sampled_from([1, 300, 900, 1 << 20]))
    def fetch(self, data, max_bytes):
        """One fetch by one follower (the others fall behind)."""
        self._fetch_once(data.draw(st.sampled_from(self._followers())), max_bytes)

    @precondition(lambda self: self.leader is not None and self._followers())
    @rule(max_bytes=st.sampled_from([300, 1 << 20]))
    def replicate(self, max_bytes):
        """Every follower fetches until it has the leader's log end."""
        for replica in self._followers():
            for _ in range(200):
                self._fetch_once(replica, max_bytes)
                if replica.log.log_end_offset == self._leader_log().log_end_offset:
                    break
            else:
                raise AssertionError(f"broker {replica.broker_id} does not catch up")

    def _fetch_once(self, replica: Replica, max_bytes: int) -> None:
        leader, plog = self._leader_log(), replica.log
        if replica.state == TRUNCATING:
            self._truncate_by_epoch(replica)
        elif replica.state == FETCHING:
            epoch = plog.latest_epoch
            if epoch is None:
                self._truncate(replica, plog.high_watermark)
            else:
                diverging = leader.diverging_epoch(plog.log_end_offset, epoch)
                if diverging is not None:
                    event("the leader answered a diverging epoch")
                    state = plog.truncation_state_for(diverging)
                    self._truncate(replica, state.offset)
                    replica.state = VERIFIED if state.truncation_completed else TRUNCATING
                    return
            replica.state = VERIFIED
        leader_hw = leader.high_watermark
        info = leader.read(plog.log_end_offset, max_bytes)
        records = info.records.read_bytes() if info.records is not None else b""
        plog.append_as_follower(records)
        plog.update_high_watermark(min(leader_hw, plog.log_end_offset))
        self.follower_leo[replica.broker_id] = plog.log_end_offset
        # Kafka's maybeExpandIsr: caught up to the HW and into the leader's current epoch.
        epoch_start = leader.leader_epoch_cache.epoch_entry(self.epoch)
        if (
            replica.broker_id not in self.isr
            and plog.log_end_offset >= leader.high_watermark
            and epoch_start is not None
            and plog.log_end_offset >= epoch_start.start_offset
        ):
            self.isr.add(replica.broker_id)
        self._advance_high_watermark()

    @precondition(lambda self: self._alive())
    @rule(data=st.data(), fetch_first=st.booleans())
    def crash(self, data, fetch_first):
        replica = data.draw(st.sampled_from(self._alive()))
        self._kill(replica)
        if replica.broker_id == self.leader:
            self.leader = None  # the ISR stays until an election
        elif replica.broker_id in self.isr and len(self.isr) > 1:
            # The controller takes a dead follower out of the ISR with a new leader epoch
            # (ZooKeeper mode's removeReplicasFromIsr).
            self.isr.discard(replica.broker_id)
            self.follower_leo.pop(replica.broker_id, None)
            if self.leader is not None:
                self._new_epoch(self.leader, fetch_first)
                self._advance_high_watermark()

    @precondition(lambda self: len(self._alive()) < N)
    @rule(data=st.data(), fetch_first=st.booleans())
    def restart(self, data, fetch_first):
        replica = data.draw(st.sampled_from([r for r in self.replicas if not r.alive]))
        self._start(replica)
        replica.state = FETCHING if fetch_first else TRUNCATING
        self.follower_leo.pop(replica.broker_id, None)

    @precondition(lambda self: self._alive())
    @rule(data=st.data(), unclean=st.booleans(), fetch_first=st.booleans())
    def elect(self, data, unclean, fetch_first):
        """An election by the controller: offline (no leader), or preferred (moving
        leadership off a live leader)."""
        self._elect(data, unclean, fetch_first)

    @precondition(lambda self: self.leader is not None)
    @rule(
        data=st.data(),
        unclean=st.booleans(),
        fetch_first=st.booleans(),
        comes_back=st.booleans(),
    )
    def fail_over(self, data, unclean, fetch_first, comes_back):
        """The leader dies with what it has not replicated yet; another replica is elected;
        the old leader may come back at once, as a follower that must truncate."""
        old = self.replicas[self.leader]
        self._kill(old)
        self.leader = None
        self._elect(data, unclean, fetch_first)
        if comes_back:
            self._start(old)
            old.state = FETCHING if fetch_first else TRUNCATING

    def _elect(self, data, unclean: bool, fetch_first: bool) -> None:
        alive = [r.broker_id for r in self._alive()]
        clean = [b for b in alive if b in self.isr and b != self.leader]
        if clean:
            new = data.draw(st.sampled_from(clean))
            self.isr = {b for b in self.isr if b in alive}
            self.follower_leo = {}  # a new leader knows no follower's position yet
            self._new_epoch(new, fetch_first)
            self._advance_high_watermark()
        elif unclean and self.leader is None and alive:  # no live ISR member: any replica
            new = data.draw(st.sampled_from(alive))
            event("unclean election")
            self.isr = {new}
            self.follower_leo = {}
            self._new_epoch(new, fetch_first)
            # The lineage restarts: what the new leader has up to its HW is what is committed.
            self.committed, self.committed_hw = {}, 0
            self._advance_high_watermark()

    @precondition(lambda self: self.leader is not None and len(self.isr) > 1)
    @rule(data=st.data())
    def shrink_isr(self, data):
        """The leader drops a follower it thinks is lagging (no new leader epoch)."""
        follower = data.draw(st.sampled_from(sorted(self.isr - {self.leader})))
        self.isr.discard(follower)
        self._advance_high_watermark()

    @precondition(lambda self: self._alive())
    @rule(data=st.data(), task=st.sampled_from(["roll", "flush", "checkpoint"]))
    def housekeeping(self, data, task):
        """A roll, an fsync or the periodic offset checkpoints on one replica."""
        replica = data.draw(st.sampled_from(self._alive()))
        plog = replica.log
        if task == "roll":
            plog.roll()
        elif task == "flush":
            plog.flush()
        else:
            assert replica.manager is not None
            replica.manager.checkpoint_high_watermarks()
            replica.manager.checkpoint_recovery_points()
            replica.manager.checkpoint_log_start_offsets()
            for name, value in (
                (REPLICATION_OFFSET_CHECKPOINT, plog.high_watermark),
                (RECOVERY_POINT_CHECKPOINT, plog.recovery_point),
                (LOG_START_OFFSET_CHECKPOINT, plog.log_start_offset),
            ):
                assert OffsetCheckpointFile(replica.log_dir / name).read() == {(TOPIC, 0): value}

    @precondition(lambda self: self._alive())
    @rule(data=st.data(), from_scratch=st.booleans())
    def recovery_rebuilds_the_same_state(self, data, from_scratch):
        """A copy of the replica's directory, opened fresh and recovered from offset 0, holds
        the same batches and rebuilds the same epochs, producers and aborted transactions;
        ``from_scratch`` also removes the producer snapshots and the epoch checkpoint."""
        replica = data.draw(st.sampled_from(self._alive()))
        plog = replica.log
        copy = self.tmp / "copy" / plog.dir.name
        shutil.rmtree(copy.parent, ignore_errors=True)
        with plog.lock:
            shutil.copytree(plog.dir, copy)
        if from_scratch:
            for path in [*copy.glob("*.snapshot"), copy / "leader-epoch-checkpoint"]:
                path.unlink(missing_ok=True)
        fresh = PartitionLog(
            copy,
            TOPIC,
            0,
            CONFIG,
            log_start_offset=plog.log_start_offset,
            recovery_point=0,
            high_watermark=plog.high_watermark,
        )
        try:
            batches = headers(plog)
            assert log_batches(fresh) == log_batches(plog)
            fresh_epochs = [(e.epoch, e.start_offset) for e in fresh.leader_epoch_cache.entries()]
            if from_scratch:
                assert fresh_epochs == implied_epochs(batches)
            else:
                # Loading drops an entry at the log end (an epoch that wrote nothing), as
                # Kafka's loader does; a leader assigns its epoch again when told it leads.
                cached = [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()]
                if cached and cached[-1][1] == plog.log_end_offset:
                    cached.pop()
                assert fresh_epochs == cached
            for pid in (IDEMPOTENT_PID, *TXN_PIDS):
                assert producer_view(fresh, pid) == producer_view(plog, pid), pid
            assert aborted_txns(fresh) == aborted_txns(plog)
            undecided = plog.producer_state.first_undecided_offset()
            assert fresh.producer_state.first_undecided_offset() == undecided
            if from_scratch:
                _, _, first_unstable = expected_producer_state(batches, plog.high_watermark)
                assert fresh.producer_state.first_unstable_offset() == first_unstable
        finally:
            fresh.close()
            shutil.rmtree(copy.parent, ignore_errors=True)

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def replicas_are_consistent(self):
        logs = {r.broker_id: log_batches(r.log) for r in self._alive()}
        leader = logs.get(self.leader) if self.leader is not None else None
        for replica in self._alive():
            plog, batches = replica.log, logs[replica.broker_id]
            parsed = [RecordBatchHeader(data) for _, data in batches]
            self._check_offsets(plog)
            if replica.broker_id in self.isr:
                self._check_committed(replica.broker_id, dict(batches))
            follower = leader is not None and replica.broker_id != self.leader
            if follower and replica.state == VERIFIED:
                assert batches == leader[: len(batches)], (
                    f"broker {replica.broker_id} diverges from leader {self.leader}"
                )
            self._check_epochs(replica.broker_id, plog, parsed)
            self._check_producers(replica.broker_id, plog, parsed)

    @staticmethod
    def _check_offsets(plog: PartitionLog) -> None:
        assert 0 <= plog.log_start_offset <= plog.high_watermark <= plog.log_end_offset
        assert plog.recovery_point <= plog.log_end_offset

    def _check_committed(self, broker_id: int, have: dict[int, bytes]) -> None:
        """Committed batches are on every live ISR member, unchanged."""
        for base, data in self.committed.items():
            assert have.get(base) == data, (
                f"broker {broker_id} (ISR) lost or changed committed batch {base}"
            )

    @staticmethod
    def _check_epochs(broker_id: int, plog: PartitionLog, batches: list[RecordBatchHeader]):
        implied = implied_epochs(batches)
        cached = [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()]
        if cached == implied:
            return
        # An epoch that has written nothing yet: the leader's, or one a replica assigned as
        # leader before it lost leadership; its first batch of a newer epoch replaces it,
        # and truncation removes it.
        assert cached[:-1] == implied, (broker_id, cached, implied)
        epoch, start = cached[-1]
        assert start == plog.log_end_offset, (broker_id, cached, implied)
        assert not implied or epoch > implied[-1][0], (broker_id, cached, implied)

    @staticmethod
    def _check_producers(broker_id: int, plog: PartitionLog, batches: list[RecordBatchHeader]):
        producers, aborted, first_unstable = expected_producer_state(batches, plog.high_watermark)
        for pid in (IDEMPOTENT_PID, *TXN_PIDS):
            assert producer_view(plog, pid) == producers.get(pid), (broker_id, pid)
        assert aborted_txns(plog) == aborted, broker_id
        state = plog.producer_state
        opened = [v.txn_first_offset for v in producers.values()]
        opened = [o for o in opened if o is not None]
        first_open = min(opened) if opened else None
        assert state.first_undecided_offset() == first_open
        # As in Kafka, a transaction completed below the high watermark stops bounding the
        # LSO for good, even if the high watermark later goes down (a follower of a leader
        # with a lower one) or the state is reloaded from a snapshot past the marker; so the
        # bound lies between "open transactions only" and the exact one.
        got = state.first_unstable_offset()
        inf = 1 << 63
        exact = inf if first_unstable is None else first_unstable
        loosest = inf if first_open is None else first_open
        assert exact <= (inf if got is None else got) <= loosest, (got, first_unstable)


def producer_view(plog: PartitionLog, pid: int) -> ProducerView | None:
    entry = plog.producer_state.last_entry(pid)
    if entry is None:
        return None
    return ProducerView(
        entry.producer_epoch,
        entry.last_seq,
        entry.last_data_offset,
        entry.current_txn_first_offset,
    )


def aborted_txns(plog: PartitionLog) -> list[AbortedTxn]:
    return [txn for s in plog.segments() for txn in s.txn_index.all_aborted_txns()]


TestReplicationModel = ReplicationMachine.TestCase
TestReplicationModel.settings = settings(
    max_examples=1000 if SOAK else 60,
    stateful_step_count=150 if SOAK else 60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
