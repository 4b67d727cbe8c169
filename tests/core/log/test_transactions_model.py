"""Random interleavings of transactional and plain batches, commits, aborts, rolls,
truncations and reopenings against a model of the last stable offset and the
aborted-transaction index."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.records.builder import RecordBatchBuilder, build_control_batch
from core.records.record import ControlRecordType

CONFIG = LogConfig(
    segment_bytes=600, index_interval_bytes=100, segment_index_bytes=4096, retention_ms=-1
)
PRODUCERS = (11, 12, 13)

# One model entry per batch: (base offset, last offset, kind, producer id)
# kind: "plain", "txn", "commit", "abort".
Entry = tuple[int, int, str, int]


def model_state(entries: list[Entry]) -> tuple[int | None, list[tuple[int, int, int]]]:
    """(first offset of the earliest open transaction, aborted (pid, first, last))."""
    open_first: dict[int, int] = {}
    aborted: list[tuple[int, int, int]] = []
    for base, _, kind, pid in entries:
        if kind == "txn":
            open_first.setdefault(pid, base)
        elif kind in ("commit", "abort"):
            first = open_first.pop(pid, None)
            if kind == "abort" and first is not None:
                aborted.append((pid, first, base))
    return (min(open_first.values()) if open_first else None), aborted


class TransactionsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="tierlog-txn-model-"))
        self.dir = self.tmp / "m-0"
        self.log = PartitionLog(self.dir, "m", 0, CONFIG)
        self.entries: list[Entry] = []
        self.sequences = dict.fromkeys(PRODUCERS, 0)
        self.epochs = dict.fromkeys(PRODUCERS, 0)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _advance_hw(self) -> None:
        self.log.update_high_watermark(self.log.log_end_offset)

    @rule(count=st.integers(1, 4))
    def plain(self, count: int) -> None:
        builder = RecordBatchBuilder()
        for i in range(count):
            builder.append(b"p" * 20, timestamp=1_000 + i)
        info = self.log.append_as_leader(builder.build(), 0)
        self.entries.append((info.first_offset, info.last_offset, "plain", -1))
        self._advance_hw()

    @rule(pid=st.sampled_from(PRODUCERS), count=st.integers(1, 4))
    def transactional(self, pid: int, count: int) -> None:
        builder = RecordBatchBuilder(
            producer_id=pid,
            producer_epoch=self.epochs[pid],
            base_sequence=self.sequences[pid],
            is_transactional=True,
        )
        for i in range(count):
            builder.append(b"t" * 20, timestamp=1_000 + i)
        info = self.log.append_as_leader(builder.build(), 0)
        self.sequences[pid] += count
        self.entries.append((info.first_offset, info.last_offset, "txn", pid))
        self._advance_hw()

    @rule(pid=st.sampled_from(PRODUCERS), commit=st.booleans())
    def end(self, pid: int, commit: bool) -> None:
        # Markers also come for producers without an open transaction (a coordinator's
        # retry, an abort of a transaction that wrote nothing here): they change nothing.
        control = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        self.epochs[pid] += 1  # the coordinator bumps the epoch: sequences restart
        self.sequences[pid] = 0
        batch = build_control_batch(control, producer_id=pid, producer_epoch=self.epochs[pid])
        info = self.log.append_as_coordinator(batch, 0)
        kind = "commit" if commit else "abort"
        self.entries.append((info.first_offset, info.last_offset, kind, pid))
        self._advance_hw()

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @precondition(lambda self: self.entries)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.entries) - 1))
        target = self.entries[index][0]
        self.log.truncate_to(target)
        self.entries = self.entries[:index]
        # Producer state after a truncation restarts each producer at what the log holds.
        self._resync()
        self._advance_hw()

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = PartitionLog(self.dir, "m", 0, CONFIG)
        self._advance_hw()

    def _resync(self) -> None:
        for pid in PRODUCERS:
            entry = self.log.producer_state.last_entry(pid)
            if entry is None:
                continue
            self.epochs[pid] = max(self.epochs[pid], entry.producer_epoch)
            if entry.producer_epoch < self.epochs[pid]:
                # A newer epoch than the log knows starts at sequence 0.
                self.sequences[pid] = 0
            else:
                self.sequences[pid] = entry.last_seq + 1 if entry.batches else 0

    @invariant()
    def lso_and_aborted_index_match_the_model(self) -> None:
        first_open, aborted = model_state(self.entries)
        end = self.log.log_end_offset
        expected_lso = end if first_open is None else first_open
        assert self.log.last_stable_offset == expected_lso
        found = [
            (t.producer_id, t.first_offset, t.last_offset)
            for t in self.log.collect_aborted_txns(0, end)
        ]
        assert sorted(found, key=lambda x: x[2]) == aborted


TestTransactions = TransactionsMachine.TestCase
TestTransactions.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
