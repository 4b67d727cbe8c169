"""Idempotent and transactional producer state of one partition (Kafka's ProducerStateManager).

For each producer id the partition remembers the epoch, the metadata of the last five
batches (to answer a retried batch with its original offsets), the coordinator epoch of the
last transaction marker and the first offset of the open transaction, if any. The state is
rebuilt at start-up from the latest snapshot file plus a replay of the log after it.

Snapshot files are named ``<20-digit offset>.snapshot``: the state after every batch below
that offset. Format (Kafka's PID_SNAPSHOT_MAP_SCHEMA, version 1), integers big-endian::

    offset  size  field
         0     2  version                   int16   1
         2     4  crc                       uint32  CRC-32C of every byte after this field
         6     4  producer entry count      int32
        10    46  per producer:
                    producer_id             int64
                    epoch                   int16
                    last_sequence           int32   -1 if no data batch is retained
                    last_offset             int64   -1 if no data batch is retained
                    offset_delta            int32   last offset - first offset of that batch
                    timestamp               int64   max timestamp of the last entry
                    coordinator_epoch       int32   of the last transaction marker, -1 if none
                    current_txn_first_offset int64  -1 if no transaction is open

Only the last batch of each producer is stored; duplicate detection across a restart thus
covers only that batch, as in Kafka.

Threading: like Kafka's, this class is not thread-safe. The partition log calls it under
its own lock, on the append path and during recovery.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import crc32c

from core.clock import now_ms
from core.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from core.fs import atomic_write, fsync_dir
from core.log.files import SNAPSHOT_SUFFIX, filename_prefix, parse_offset_file
from core.records.batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RecordBatchHeader,
    TimestampType,
)
from core.records.record import (
    ControlRecordType,
    EndTransactionMarker,
    decode_records,
    parse_control_type,
)

log = logging.getLogger(__name__)

PRODUCER_SNAPSHOT_VERSION = 1
NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
INT32_MAX = (1 << 31) - 1
SEQUENCE_MODULUS = 1 << 31  # sequences wrap from Int32.MAX to 0
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms

SNAPSHOT_HEADER = struct.Struct(">hIi")
"""version (int16), crc (uint32), producer entry count (int32)."""
SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
"""producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp, coordinator_epoch,
current_txn_first_offset: one format character per field of the table above."""
CRC_POS = struct.calcsize(">h")
ENTRIES_POS = struct.calcsize(">hI")  # the CRC covers the count and the entries
assert SNAPSHOT_ENTRY.size == 46


# -- value types --------------------------------------------------------------------------------


def _decrement_sequence(sequence: int, decrement: int) -> int:
    return (sequence - decrement) % SEQUENCE_MODULUS


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One retained batch of a producer (Kafka's BatchMetadata).

    Attributes:
        last_seq: sequence of the batch's last record.
        last_offset: offset of the batch's last record.
        offset_delta: last offset - first offset (also last seq - first seq).
        timestamp: the batch's max timestamp.
    """

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """What the partition knows of one producer id; replaced, never mutated, on update.

    Attributes:
        batches: up to five retained batches, oldest first, all of ``producer_epoch``.
        current_txn_first_offset: first offset of the open transaction, or None.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batches: tuple[BatchMetadata, ...] = ()

    @property
    def is_empty(self) -> bool:
        """No data batch is retained (a new producer, or only markers at this epoch)."""
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this sequence range at this epoch, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def _with_epoch(self, epoch: int) -> ProducerStateEntry:
        # A new epoch starts a new sequence space: batches of the old one cannot be duplicates.
        if epoch == self.producer_epoch:
            return self
        return dataclasses.replace(self, producer_epoch=epoch, batches=())


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer row of a snapshot file, field for field."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int

    @classmethod
    def of(cls, entry: ProducerStateEntry) -> ProducerSnapshotEntry:
        txn = entry.current_txn_first_offset
        return cls(
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if txn is None else txn,
        )

    def to_state(self) -> ProducerStateEntry:
        """As Kafka's readSnapshot: a batch only when the last offset is defined (>= 0)."""
        batches: tuple[BatchMetadata, ...] = ()
        if self.last_offset >= 0:
            last = BatchMetadata(
                self.last_sequence, self.last_offset, self.offset_delta, self.timestamp
            )
            batches = (last,)
        txn = self.current_txn_first_offset
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.timestamp,
            txn if txn >= 0 else None,
            batches,
        )


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a COMMIT or ABORT marker (Kafka's CompletedTxn).

    Attributes:
        first_offset: the transaction's first data offset.
        last_offset: the marker's offset.
        is_aborted: True for an ABORT marker; the caller then writes the aborted-txn index.
        last_stable_offset: the LSO once this transaction completes: the first offset of the
            earliest transaction of another producer still open, else ``last_offset + 1``.
            The txn index entry carries it (Kafka computes it with ``lastStableOffset``).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@dataclass(slots=True)
class _TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None
    # When this broker first saw the transaction open (its wall clock, not persisted: a
    # reloaded transaction counts from the load). What the hanging-transaction check ages.
    seen_ms: int = dataclasses.field(default_factory=now_ms)


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """A transaction open in this partition, as the hanging-transaction check sees it."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    first_offset: int
    seen_ms: int


# -- snapshot files -----------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The bytes of a snapshot file holding ``entries`` (in the given order)."""
    rows = list(entries)
    buf = bytearray(SNAPSHOT_HEADER.size + SNAPSHOT_ENTRY.size * len(rows))
    SNAPSHOT_HEADER.pack_into(buf, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(rows))
    pos = SNAPSHOT_HEADER.size
    for r in rows:
        SNAPSHOT_ENTRY.pack_into(
            buf,
            pos,
            r.producer_id,
            r.producer_epoch,
            r.last_sequence,
            r.last_offset,
            r.offset_delta,
            r.timestamp,
            r.coordinator_epoch,
            r.current_txn_first_offset,
        )
        pos += SNAPSHOT_ENTRY.size
    struct.pack_into(">I", buf, CRC_POS, crc32c.crc32c(memoryview(buf)[ENTRIES_POS:]))
    return bytes(buf)


def decode_snapshot(data: bytes, source: str = "<bytes>") -> list[ProducerSnapshotEntry]:
    """Parse snapshot bytes; ``source`` names the file in errors.

    Raises:
        CorruptSnapshotError: a version other than 1, a bad CRC, a negative count, or a
            length that does not match the count.
    """
    if len(data) < SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(
            f"producer snapshot {source} is truncated: {len(data)} bytes, "
            f"the header alone needs {SNAPSHOT_HEADER.size}"
        )
    version, stored_crc, count = SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            f"producer snapshot {source} has unknown version {version}, "
            f"expected {PRODUCER_SNAPSHOT_VERSION}"
        )
    computed = crc32c.crc32c(memoryview(data)[ENTRIES_POS:])
    if stored_crc != computed:
        raise CorruptSnapshotError(
            f"producer snapshot {source} is corrupt: stored CRC {stored_crc:#010x}, "
            f"computed {computed:#010x}"
        )
    expected = SNAPSHOT_HEADER.size + SNAPSHOT_ENTRY.size * count
    if count < 0 or len(data) != expected:
        raise CorruptSnapshotError(
            f"producer snapshot {source} holds {len(data)} bytes, which does not match "
            f"its producer count {count}"
        )
    return [
        ProducerSnapshotEntry(*fields)
        for fields in SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[SNAPSHOT_HEADER.size :])
    ]


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerSnapshotEntry]:
    """The producer rows of a snapshot file (for dump-log and tiered storage).

    Raises:
        CorruptSnapshotError: see ``decode_snapshot``; the message names the file.
        KafkaStorageError: the file cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise KafkaStorageError(f"cannot read producer snapshot {path}: {e}") from e
    return decode_snapshot(data, str(path))


def snapshot_path(partition_dir: Path, offset: int) -> Path:
    return partition_dir / f"{filename_prefix(offset)}{SNAPSHOT_SUFFIX}"


def list_snapshot_offsets(partition_dir: Path) -> list[int]:
    """Offsets of the ``.snapshot`` files in ``partition_dir``, ascending."""
    try:
        names = os.listdir(partition_dir)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise KafkaStorageError(f"cannot list {partition_dir}: {e}") from e
    offsets = []
    for name in names:
        parsed = parse_offset_file(name)
        if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX and not parsed[2]:
            offsets.append(parsed[0])
    return sorted(offsets)


# -- control records ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The COMMIT or ABORT marker of a control batch, as far as producer state needs it."""

    control_type: ControlRecordType
    coordinator_epoch: int
    timestamp: int


def read_txn_marker(header: RecordBatchHeader) -> TxnMarker | None:
    """The transaction marker in a control batch; None for an empty control batch (its
    transaction was cleaned away) or a control type other than COMMIT and ABORT.

    Raises:
        CorruptRecordError: the records do not frame.
        InvalidRecordError: a malformed control key or marker value.
    """
    if header.records_count <= 0:
        return None
    record = decode_records(header, verify=False)[0]
    if parse_control_type(record.key) not in ControlRecordType._value2member_map_:
        return None
    marker = EndTransactionMarker.from_record(record)
    return TxnMarker(marker.type, marker.coordinator_epoch, record.timestamp)


# -- the manager --------------------------------------------------------------------------------


class ProducerStateManager:
    """Producer ids of one partition: sequence checks, open transactions and snapshots.

    Offsets: ``map_end_offset`` is the offset up to which (exclusive) the log has been applied.
    A snapshot at offset N holds the state after all batches below N.
    """

    def __init__(
        self,
        partition_dir: Path,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.partition_dir = Path(partition_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        # Open transactions and completed ones whose marker is not yet below the high
        # watermark, each by first offset; together they bound the last stable offset.
        self._ongoing: dict[int, _TxnMetadata] = {}
        self._unreplicated: dict[int, _TxnMetadata] = {}
        self._snapshots: list[int] = list_snapshot_offsets(self.partition_dir)
        self._map_end_offset = 0
        self._last_snap_offset = 0

    # -- read-only views ----------------------------------------------------------------------
    @property
    def map_end_offset(self) -> int:
        return self._map_end_offset

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """A read-only copy of the state per producer id."""
        return MappingProxyType(dict(self._producers))

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        """The LSO bound: the first offset of the earliest open transaction, or of a completed
        one whose marker is not yet below the high watermark; None if there is neither."""
        firsts = [*self._ongoing, *self._unreplicated]
        return min(firsts) if firsts else None

    def open_transactions(self) -> list[OpenTxn]:
        """The open transactions, oldest first."""
        out = []
        for first in sorted(self._ongoing):
            txn = self._ongoing[first]
            entry = self._producers.get(txn.producer_id)
            if entry is None:
                continue
            out.append(
                OpenTxn(
                    txn.producer_id,
                    entry.producer_epoch,
                    entry.coordinator_epoch,
                    first,
                    txn.seen_ms,
                )
            )
        return out

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest open transaction (ignores replication)."""
        return min(self._ongoing) if self._ongoing else None

    # -- the append path ----------------------------------------------------------------------
    def check_append(self, header: RecordBatchHeader) -> BatchMetadata | None:
        """Validate a client's data batch before offsets are assigned (Kafka's CLIENT origin).

        Args:
            header: a batch from a producer; a batch without a producer id passes.

        Returns:
            The metadata of the original batch when this one is a retry of one of the last
            five batches of the producer (same epoch, same first and last sequence): answer
            with its offsets and do not append. None when the batch may be appended.

        Raises:
            ValueError: a control batch (clients cannot send one).
            InvalidProducerEpochError: the epoch is older than the producer's current one.
            OutOfOrderSequenceError: a new epoch not starting at sequence 0, or a sequence
                that does not follow the last one (Int32.MAX is followed by 0). A producer
                without state may start at any sequence, as in Kafka since KIP-360.
            InvalidTxnStateError: a non-transactional batch while a transaction is open.
        """
        if not header.has_producer_id:
            return None
        if header.is_control:
            raise ValueError(f"check_append got a control batch: {header!r}")
        pid, epoch, first_seq = header.producer_id, header.producer_epoch, header.base_sequence
        entry = self._producers.get(pid)
        if entry is None:
            entry = ProducerStateEntry(pid)
        duplicate = entry.find_duplicate(epoch, first_seq, header.last_sequence)
        if duplicate is not None:
            return duplicate

        current_epoch = entry.producer_epoch
        if epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {pid} in {self.partition_dir.name} is older than "
                f"its current epoch {current_epoch}"
            )
        if epoch != current_epoch:
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {pid} in {self.partition_dir.name} starts epoch {epoch} at "
                    f"sequence {first_seq}; a new epoch must start at 0 "
                    f"(current epoch {current_epoch})"
                )
        elif current_epoch != NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence for producer {pid} in {self.partition_dir.name}: "
                f"{first_seq} (incoming), {entry.last_seq} (last appended)"
            )
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {pid} in {self.partition_dir.name} sent a non-transactional batch "
                f"while its transaction from offset {entry.current_txn_first_offset} is open"
            )
        return None

    def check_coordinator_append(self, header: RecordBatchHeader) -> None:
        """Validate a batch the transaction or group coordinator has the leader write
        (Kafka's COORDINATOR origin): a commit or abort marker, or transactional offset
        commits. Sequences are not checked (such batches carry none).

        Raises:
            InvalidProducerEpochError: the batch's epoch is older than the producer's.
            TransactionCoordinatorFencedError: a marker from an older coordinator epoch than
                the producer's last marker here.
        """
        if not header.has_producer_id:
            return
        pid, epoch = header.producer_id, header.producer_epoch
        entry = self._producers.get(pid)
        if entry is None:
            return
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {pid} in {self.partition_dir.name} is older than "
                f"its current epoch {entry.producer_epoch}"
            )
        if header.is_control:
            marker = read_txn_marker(header)
            if marker is not None and marker.coordinator_epoch < entry.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"marker for producer {pid} in {self.partition_dir.name} from coordinator "
                    f"epoch {marker.coordinator_epoch}, older than {entry.coordinator_epoch}"
                )

    def update(self, header: RecordBatchHeader, *, append_time_ms: int) -> CompletedTxn | None:
        """Apply a batch that has its offsets (leader append, or replay during recovery).

        Nothing is validated: on the leader ``check_append`` has run, and the log being
        replayed was accepted once. A batch without a producer id only moves
        ``map_end_offset``; so does a control batch without records.

        Args:
            header: the batch as written, base offset assigned.
            append_time_ms: the broker's time of the append. It becomes the producer's last
                timestamp for a LOG_APPEND_TIME batch; otherwise the batch's max timestamp
                does, as in Kafka. During replay pass the batch's max timestamp.

        Returns:
            The transaction a COMMIT or ABORT marker completed, if one was open; the caller
            writes it to the transaction index when ``is_aborted``. None otherwise.

        Raises:
            CorruptRecordError, InvalidRecordError: a control batch whose marker cannot be
                read.
        """
        self._map_end_offset = max(self._map_end_offset, header.next_offset)
        if not header.has_producer_id:
            return None
        if header.is_control:
            return self._apply_marker(header)
        pid = header.producer_id
        entry = self._producers.get(pid) or ProducerStateEntry(pid)
        entry = entry._with_epoch(header.producer_epoch)
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            timestamp = append_time_ms
        else:
            timestamp = header.max_timestamp
        batch = BatchMetadata(
            header.last_sequence, header.last_offset, header.last_offset_delta, timestamp
        )
        txn_first = entry.current_txn_first_offset
        if header.is_transactional and txn_first is None:
            txn_first = header.base_offset
            self._ongoing[txn_first] = _TxnMetadata(pid, txn_first)
        self._producers[pid] = dataclasses.replace(
            entry,
            last_timestamp=timestamp,
            current_txn_first_offset=txn_first,
            batches=(*entry.batches[-(NUM_BATCHES_TO_RETAIN - 1) :], batch),
        )
        return None

    def _apply_marker(self, header: RecordBatchHeader) -> CompletedTxn | None:
        marker = read_txn_marker(header)
        if marker is None:
            return None  # nothing a transaction or a producer's state depends on
        pid = header.producer_id
        entry = (self._producers.get(pid) or ProducerStateEntry(pid))._with_epoch(
            header.producer_epoch
        )
        completed = None
        first = entry.current_txn_first_offset
        if first is not None:
            txn = self._ongoing.pop(first, None) or _TxnMetadata(pid, first)
            txn.last_offset = header.base_offset
            self._unreplicated[first] = txn
            completed = CompletedTxn(
                pid,
                first,
                header.base_offset,
                marker.control_type == ControlRecordType.ABORT,
                self._last_stable_offset_after(pid, header.base_offset),
            )
        self._producers[pid] = dataclasses.replace(
            entry,
            coordinator_epoch=marker.coordinator_epoch,
            last_timestamp=marker.timestamp,
            current_txn_first_offset=None,
        )
        return completed

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """Kafka's lastStableOffset: the LSO to record in the txn index for ``completed``.

        The first offset of the earliest open transaction of another producer, else the
        offset after the marker. Same value as ``completed.last_stable_offset`` until other
        transactions start or end.
        """
        return self._last_stable_offset_after(completed.producer_id, completed.last_offset)

    def _last_stable_offset_after(self, producer_id: int, marker_offset: int) -> int:
        others = [f for f, t in self._ongoing.items() if t.producer_id != producer_id]
        return min(others) if others else marker_offset + 1

    def update_map_end_offset(self, offset: int) -> None:
        """Record that the log up to ``offset`` (exclusive) has been applied."""
        self._map_end_offset = offset

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below ``high_watermark``: the LSO
        may then pass them."""
        self._drop_unreplicated_below(high_watermark)

    def _drop_unreplicated_below(self, offset: int) -> None:
        for first, txn in list(self._unreplicated.items()):
            if txn.last_offset is not None and txn.last_offset < offset:
                del self._unreplicated[first]

    # -- expiration and log start -------------------------------------------------------------
    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Drop producers idle for ``producer_id_expiration_ms`` with no open transaction.

        Returns:
            The removed producer ids.
        """
        expired = [pid for pid, e in self._producers.items() if self._is_expired(now_ms, e)]
        for pid in expired:
            del self._producers[pid]
        return expired

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """The log start moved up (retention, DeleteRecords), as Kafka's method of that name.

        Completed transactions below it are forgotten and ``map_end_offset`` is raised to it.
        Producer entries are kept, as in Kafka: they expire by time, and a producer whose
        state is gone may restart at any sequence anyway.
        """
        self._drop_unreplicated_below(log_start_offset)
        self._map_end_offset = max(self._map_end_offset, log_start_offset)
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = latest if latest is not None else log_start_offset

    # -- snapshots ----------------------------------------------------------------------------
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    def oldest_snapshot_offset(self) -> int | None:
        return self._snapshots[0] if self._snapshots else None

    def snapshot_file(self, offset: int) -> Path | None:
        """The snapshot taken at ``offset``, if there is one."""
        return snapshot_path(self.partition_dir, offset) if offset in self._snapshots else None

    def take_snapshot(self, offset: int | None = None, *, durable: bool = True) -> Path | None:
        """Write the state at ``map_end_offset`` to ``<offset>.snapshot`` (atomic; durable
        unless ``durable`` is False, when the caller syncs it later with ``sync_snapshot``:
        a snapshot torn by a crash before that is discarded and an older one replayed).

        As in Kafka, nothing is written when no batch was applied since the last snapshot.

        Args:
            offset: the offset to snapshot at, default ``map_end_offset``. A higher offset
                first moves ``map_end_offset`` up to it (the batches in between had no
                producer id; a segment roll passes the new segment's base offset).

        Returns:
            The snapshot written, or None when it was not worth writing one.

        Raises:
            ValueError: ``offset`` below ``map_end_offset``: the state there is gone.
            KafkaStorageError: the file could not be written.
        """
        if offset is not None:
            if offset < self._map_end_offset:
                raise ValueError(
                    f"cannot snapshot producer state at {offset}, below the map end offset "
                    f"{self._map_end_offset}"
                )
            self._map_end_offset = offset
        if self._map_end_offset <= self._last_snap_offset:
            return None
        at = self._map_end_offset
        path = snapshot_path(self.partition_dir, at)
        rows = [ProducerSnapshotEntry.of(e) for _, e in sorted(self._producers.items())]
        try:
            atomic_write(path, encode_snapshot(rows), durable=durable)
        except OSError as e:
            raise KafkaStorageError(f"cannot write producer snapshot {path}: {e}") from e
        if at not in self._snapshots:
            self._snapshots.append(at)
            self._snapshots.sort()
        self._last_snap_offset = at
        log.debug("wrote producer snapshot %s with %d producers", path, len(rows))
        return path

    def sync_snapshot(self, path: Path) -> None:
        """Make a snapshot written with ``durable=False`` durable (its data and its name);
        nothing if it was deleted meanwhile (a truncation).

        Raises:
            KafkaStorageError: the fsync failed.
        """
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
            fsync_dir(path.parent)
        except OSError as e:
            raise KafkaStorageError(f"cannot sync producer snapshot {path}: {e}") from e
        finally:
            os.close(fd)

    def _delete_snapshot(self, offset: int) -> None:
        if offset in self._snapshots:
            self._snapshots.remove(offset)
        delete_snapshot_files([snapshot_path(self.partition_dir, offset)])

    def forget_snapshots_below(self, offset: int) -> list[Path]:
        """Drop the snapshots at offsets below ``offset`` (exclusive) from this manager and
        return their files, for the caller to delete once it no longer holds the log's lock
        (``delete_snapshot_files``). An unlink waits for the file system's journal, up to
        milliseconds on a busy disk; Kafka deletes them asynchronously too. Left behind by a
        crash, they match no segment and start-up removes them (``remove_stray_snapshots``)."""
        doomed = [at for at in self._snapshots if at < offset]
        self._snapshots = [at for at in self._snapshots if at >= offset]
        return [snapshot_path(self.partition_dir, at) for at in doomed]

    def delete_snapshots_above(self, offset: int) -> None:
        """Delete the snapshots at offsets above ``offset`` (exclusive).

        Raises:
            KafkaStorageError: a file could not be deleted.
        """
        for at in list_snapshot_offsets(self.partition_dir):
            if at > offset:
                self._delete_snapshot(at)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots that match no segment, keeping the newest stray one if it lies
        above every segment (the snapshot of a clean shutdown), as Kafka's LogLoader does."""
        bases = set(segment_base_offsets)
        self._snapshots = list_snapshot_offsets(self.partition_dir)
        strays = [s for s in self._snapshots if s not in bases]
        if not strays:
            return
        keep = strays[-1] if not bases or strays[-1] > max(bases) else None
        for at in strays:
            if at != keep:
                self._delete_snapshot(at)

    # -- loading and truncation ---------------------------------------------------------------
    def _clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int | None) -> None:
        while self._snapshots:
            at = self._snapshots[-1]
            path = snapshot_path(self.partition_dir, at)
            try:
                rows = read_snapshot(path)
            except CorruptSnapshotError as e:
                log.warning("deleting corrupt producer snapshot, falling back: %s", e)
                self._delete_snapshot(at)
                continue
            for row in rows:
                entry = row.to_state()
                if now_ms is not None and self._is_expired(now_ms, entry):
                    continue
                self._producers[entry.producer_id] = entry
                if entry.current_txn_first_offset is not None:
                    first = entry.current_txn_first_offset
                    self._ongoing[first] = _TxnMetadata(entry.producer_id, first)
            self._last_snap_offset = self._map_end_offset = at
            return
        self._last_snap_offset = self._map_end_offset = log_start_offset

    def _delete_out_of_range(self, log_start_offset: int, log_end_offset: int) -> None:
        # Kafka also drops a snapshot at exactly the log start: the state there describes
        # batches that are gone.
        for at in list(self._snapshots):
            if at > log_end_offset or at <= log_start_offset:
                self._delete_snapshot(at)

    def load(self, log_start_offset: int, log_end_offset: int, *, now_ms: int | None = None) -> int:
        """Rebuild the state from the latest usable snapshot in the partition dir.

        Snapshots above ``log_end_offset`` (the log was truncated below them) or at or below
        ``log_start_offset`` are deleted. A corrupt snapshot is deleted and the next older one
        is tried. With ``now_ms``, producers already expired are not loaded.

        Returns:
            The offset replay must start from: the snapshot's offset, or ``log_start_offset``
            when none is usable. Replay the batches from there to ``log_end_offset`` with
            ``update``, then ``update_map_end_offset(log_end_offset)``.

        Raises:
            KafkaStorageError: a snapshot could not be read or deleted.
        """
        self._snapshots = list_snapshot_offsets(self.partition_dir)
        self._clear()
        self._delete_out_of_range(log_start_offset, log_end_offset)
        self._load_from_snapshot(log_start_offset, now_ms)
        return self._map_end_offset

    def truncate_and_reload(
        self, log_start_offset: int, log_end_offset: int, *, now_ms: int | None = None
    ) -> int:
        """The log now spans ``[log_start_offset, log_end_offset)``: Kafka's truncateAndReload.

        Out-of-range snapshots are deleted. Unless the state already ends at
        ``log_end_offset``, it is reloaded from the latest remaining snapshot.

        Returns:
            The offset replay must start from (``map_end_offset``).

        Raises:
            KafkaStorageError: a snapshot could not be read or deleted.
        """
        self._delete_out_of_range(log_start_offset, log_end_offset)
        if log_end_offset != self._map_end_offset:
            self._clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)
        return self._map_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget all state and delete every snapshot; the log restarts empty at ``offset``.

        Raises:
            KafkaStorageError: a snapshot could not be deleted.
        """
        self._clear()
        for at in list(self._snapshots):
            self._delete_snapshot(at)
        self._last_snap_offset = 0
        self._map_end_offset = offset


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def delete_snapshot_files(paths: Iterable[Path]) -> None:
    """Unlink producer snapshot files (those already gone are fine).

    Raises:
        KafkaStorageError: a file could not be deleted.
    """
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise KafkaStorageError(f"cannot delete producer snapshot {path}: {e}") from e
