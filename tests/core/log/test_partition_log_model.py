"""Random appends, rolls, truncations and reopenings against an in-memory model of the log."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.log.config import LogConfig
from core.log.partition_log import PartitionLog
from core.records.batch import Compression, iter_batches
from core.records.builder import RecordBatchBuilder
from core.records.record import decode_records

CONFIG = LogConfig(
    segment_bytes=700, index_interval_bytes=100, segment_index_bytes=4096, retention_ms=-1
)

values = st.lists(st.binary(max_size=120) | st.none(), min_size=1, max_size=6)


class PartitionLogMachine(RuleBasedStateMachine):
    """The model is the list of batches: (base offset, epoch, values)."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="tierlog-model-"))
        self.dir = self.tmp / "m-0"
        self.log = PartitionLog(self.dir, "m", 0, CONFIG)
        self.batches: list[tuple[int, int, list[bytes | None]]] = []
        self.epoch = 0
        self.next_offset = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(vals=values, codec=st.sampled_from(list(Compression)), bump=st.booleans())
    def append(self, vals, codec, bump):
        if bump:
            self.epoch += 1
        builder = RecordBatchBuilder(compression=codec)
        for i, v in enumerate(vals):
            builder.append(v, key=None, timestamp=1_000 + self.next_offset + i)
        info = self.log.append_as_leader(builder.build(), self.epoch)
        assert info.first_offset == self.next_offset
        self.batches.append((self.next_offset, self.epoch, list(vals)))
        self.next_offset += len(vals)

    @rule()
    def roll(self):
        self.log.roll()

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data):
        keep = data.draw(st.integers(0, len(self.batches)))
        target = self.batches[keep][0] if keep < len(self.batches) else self.next_offset
        self.log.truncate_to(target)
        del self.batches[keep:]
        self.next_offset = target
        self.epoch = max([e for _, e, _ in self.batches], default=self.epoch)

    @rule(clean=st.booleans())
    def reopen(self, clean):
        recovery_point = self.log.recovery_point
        if clean:
            self.log.close()
        else:
            for segment in self.log.segments():  # files closed without flush or snapshot
                segment.log.close()
        self.log = PartitionLog(
            self.dir,
            "m",
            0,
            CONFIG,
            had_clean_shutdown=clean,
            recovery_point=recovery_point if clean else 0,
        )

    @invariant()
    def reads_match_model(self):
        assert self.log.log_end_offset == self.next_offset
        expected = [(base + i, v) for base, _, vals in self.batches for i, v in enumerate(vals)]
        got = []
        offset = 0
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, 1 << 16).records.read_bytes()
            for header in iter_batches(data):
                got.extend((r.offset, r.value) for r in decode_records(header))
                offset = header.next_offset
        assert got == expected

    @invariant()
    def epochs_match_model(self):
        starts: dict[int, int] = {}
        for base, epoch, _ in self.batches:
            starts.setdefault(epoch, base)
        got = {e.epoch: e.start_offset for e in self.log.leader_epoch_cache.entries()}
        assert got == starts


TestPartitionLogModel = PartitionLogMachine.TestCase
TestPartitionLogModel.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
