"""Reading a partition's archive: remote segments -> records -> Arrow, without a broker.

What is read is the canonical log (``spark_jobs.lineage``) over the segments the bucket's
manifests describe (``segments_from_manifests``: a bucket alone is enough). Records come in
the schema of Spark's Kafka source plus ``leaderEpoch`` and ``producerId``, as a
READ_COMMITTED consumer would see them: control batches and the records of aborted
transactions (from the segments' transaction indexes) are left out.

Everything here takes an ``ArchiveConfig``, plain strings only, so that Spark executors can
build their own RSM plugin from it: no live client travels from the driver.
"""

from __future__ import annotations

import dataclasses
import struct
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.extras import requires_extra
from core.log.txn_index import AbortedTxn
from core.records import native
from core.records.batch import (
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    F_PRODUCER_ID,
    Attributes,
    RecordBatchHeader,
)
from core.records.record import (
    RecordColumns,
    decode_columns,
    decode_into_buffers,
    flatten_headers,
    new_column_buffers,
)
from rlmm.replay import replay
from rlmm.topic_client import MetadataTopicClient
from rsm_plugins.base import ObjectStoreRemoteStorageManager
from rsm_plugins.layout import ObjectSuffix, SegmentManifest
from spark_jobs.lineage import Lineage, SegmentRange, canonical_ranges, newest_segment
from spark_jobs.segment_batches import ReadBuffers, batches, read_buffers
from tiered.api import (
    RSM_CONFIG_PREFIX,
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    load_plugin,
)

if TYPE_CHECKING:
    from core.records._native import ColumnBuffers  # type: ignore[import-not-found]

with requires_extra("spark", "the Spark jobs (spark_jobs)"):
    import pyarrow as pa
    import pyarrow.compute as pc

SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        (
            "headers",
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        ),
        ("leaderEpoch", pa.int32()),
        ("producerId", pa.int64()),
    ]
)
_TIMESTAMP = SCHEMA.field("timestamp").type
ROWS_PER_BATCH = 65_536
_TXN = struct.Struct(">hqqqq")  # core.log.txn_index's entry: version, pid, first, last, lso
_TXN_ENTRY = _TXN.size


@dataclass(frozen=True)
class ArchiveConfig:
    """How to reach the archive: the RSM plugin by dotted path and its settings (without the
    ``rsm.config.`` prefix). Serialisable: Spark ships it to executors."""

    rsm_class: str = "rsm_plugins.local.LocalDirRemoteStorageManager"
    rsm_config: Mapping[str, str] = field(default_factory=dict)

    def open(self) -> RemoteStorageManager:
        """A configured plugin (close it after use).

        Raises:
            RemoteStorageError: unknown class or bad settings, naming the key.
        """
        rsm = load_plugin(
            self.rsm_class, RemoteStorageManager, key="remote.log.storage.manager.class.name"
        )
        rsm.configure(dict(self.rsm_config))
        return rsm

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ArchiveConfig:
        """From Spark options / broker properties: ``remote.log.storage.manager.class.name``
        and ``rsm.config.*`` keys."""
        rsm_class = options.get("remote.log.storage.manager.class.name", cls.rsm_class)
        rsm_config = {
            k[len(RSM_CONFIG_PREFIX) :]: v
            for k, v in options.items()
            if k.startswith(RSM_CONFIG_PREFIX)
        }
        return cls(rsm_class, rsm_config)


# -- metadata from the bucket alone -------------------------------------------------------------
def segments_from_manifests(
    rsm: RemoteStorageManager, topic: str
) -> dict[int, list[RemoteLogSegmentMetadata]]:
    """Every segment of ``topic`` that has a manifest, by partition.

    A manifest is written last and deleted first, so its presence means a complete copy:
    the segment counts as COPY_SEGMENT_FINISHED whatever state the manifest recorded when it
    was written.

    Raises:
        ValueError: the plugin cannot list its objects (not an object-store plugin).
    """
    if not isinstance(rsm, ObjectStoreRemoteStorageManager):
        raise ValueError(
            f"{type(rsm).__name__} cannot list a bucket: give the metadata another way"
        )
    store = rsm.store
    out: dict[int, list[RemoteLogSegmentMetadata]] = defaultdict(list)
    suffix = "." + ObjectSuffix.MANIFEST.value
    for key in store.list_keys(rsm.key_prefix + f"{topic}-"):
        if not key.endswith(suffix):
            continue
        md = SegmentManifest.from_json(store.get_bytes(key), key).metadata
        if md.topic_id_partition.topic != topic:
            continue  # another topic whose name starts with this one's
        md = dataclasses.replace(md, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
        out[md.topic_id_partition.partition].append(md)
    return dict(out)


def segments_from_metadata_topic(
    client: MetadataTopicClient, topic: str, num_partitions: int | None = None
) -> dict[int, list[RemoteLogSegmentMetadata]]:
    """Every segment of ``topic`` that ``__remote_log_metadata`` records, by partition, as a
    broker's RemoteLogMetadataManager would hold them (all states; the canonical log keeps
    COPY_SEGMENT_FINISHED ones). Read with any metadata-topic client: over Kafka, or offline
    from log dirs. When the topic was deleted and created again, the newest topic id wins.

    Raises:
        RemoteStorageError: the topic cannot be read.
    """
    n = num_partitions or client.partition_count()

    def records() -> Iterator[tuple[int, int, bytes]]:
        for partition in range(n):
            end = client.end_offset(partition)
            offset = 0
            while offset < end:
                batch = client.read(partition, offset, 10_000)
                if not batch:
                    break
                for record in batch:
                    yield partition, record.offset, record.value
                offset = batch[-1].offset + 1

    replayed = replay(records(), n)
    by_id: dict[object, dict[int, list[RemoteLogSegmentMetadata]]] = defaultdict(dict)
    newest: dict[object, int] = defaultdict(int)
    for tp in replayed.store.partitions():
        if tp.topic != topic:
            continue
        cache = replayed.cache(tp)
        segments = list(cache.entries()) if cache is not None else []
        by_id[tp.topic_id][tp.partition] = segments
        for md in segments:
            newest[tp.topic_id] = max(newest[tp.topic_id], md.event_timestamp_ms)
    if not by_id:
        return {}
    return by_id[max(by_id, key=lambda topic_id: newest[topic_id])]


def archive_lineage(
    rsm: RemoteStorageManager, segments: Sequence[RemoteLogSegmentMetadata]
) -> Lineage:
    """The current lineage: the leader-epoch checkpoint copied with the newest leader's
    segment (see ``spark_jobs.lineage``)."""
    newest = newest_segment(segments)
    with rsm.fetch_index(newest, IndexType.LEADER_EPOCH) as stream:
        return Lineage.from_checkpoint(stream.read(), str(newest.remote_log_segment_id))


def aborted_transactions(
    rsm: RemoteStorageManager, segments: Sequence[RemoteLogSegmentMetadata]
) -> dict[int, list[tuple[int, int]]]:
    """Producer id -> the (first, last) offsets of its aborted transactions, from the
    transaction indexes of ``segments`` (skipping those whose metadata says they have none)."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for md in segments:
        if md.txn_index_empty:
            continue
        try:
            with rsm.fetch_index(md, IndexType.TRANSACTION) as stream:
                data = stream.read()
        except RemoteResourceNotFoundError:
            continue
        for at in range(0, len(data) - len(data) % _TXN_ENTRY, _TXN_ENTRY):
            txn = _parse_txn(data[at : at + _TXN_ENTRY])
            out[txn.producer_id].append((txn.first_offset, txn.last_offset))
    return dict(out)


def _parse_txn(entry: bytes) -> AbortedTxn:
    _, pid, first, last, lso = _TXN.unpack(entry)
    return AbortedTxn(pid, first, last, lso)


@dataclass(frozen=True)
class PartitionPlan:
    """What to read of one partition: canonical ranges and the aborted transactions."""

    topic: str
    partition: int
    ranges: list[SegmentRange]
    aborted: dict[int, list[tuple[int, int]]]


def plan_partition(
    rsm: RemoteStorageManager,
    topic: str,
    partition: int,
    segments: Sequence[RemoteLogSegmentMetadata],
    *,
    start: int = 0,
    end: int | None = None,
    since_ms: int | None = None,
    lineage: Lineage | None = None,
) -> PartitionPlan:
    """The canonical ranges of a partition within ``[start, end]`` (``end`` inclusive, None:
    the end), without segments whose max timestamp is below ``since_ms`` (they cannot hold a
    record at or after it) — decided from metadata, without reading them."""
    finished = [s for s in segments if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    if not finished:
        return PartitionPlan(topic, partition, [], {})
    current = lineage if lineage is not None else archive_lineage(rsm, finished)
    ranges = []
    for r in canonical_ranges(finished, current, log_start_offset=start):
        if end is not None and r.start > end:
            continue
        if since_ms is not None and r.segment.max_timestamp_ms < since_ms:
            continue
        ranges.append(
            SegmentRange(r.segment, r.start, min(r.end, end) if end is not None else r.end)
        )
    return PartitionPlan(topic, partition, ranges, aborted_transactions(rsm, finished))


# -- records ------------------------------------------------------------------------------------
_CONTROL = int(Attributes.CONTROL)
_TRANSACTIONAL = int(Attributes.TRANSACTIONAL)


def read_range(
    rsm: RemoteStorageManager,
    r: SegmentRange,
    topic: str,
    partition: int,
    aborted: Mapping[int, list[tuple[int, int]]],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` as Arrow batches of SCHEMA (at most ROWS_PER_BATCH rows each).

    The read starts at the batch the offset index gives for ``r.start`` and stops after the
    batch holding ``r.end``. Every batch's CRC32C is checked as it is decoded. The compiled
    decoder, when built, writes Arrow's buffers directly (``_read_range_buffers``); the
    pure-Python one goes through lists (``_read_range_lists``): the same rows either way.
    """
    read = _read_range_lists if native.COMPILED is None else _read_range_buffers
    return read(rsm, r, topic, partition, aborted, since_ms, until_ms)


def _batches_in_range(
    rsm: RemoteStorageManager, r: SegmentRange
) -> Iterator[tuple[RecordBatchHeader, tuple[int, ...], ReadBuffers]]:
    """The data batches of the segment that may hold offsets of ``r``, with their fields and
    the buffers they are read with (a batch is valid until the next one is taken)."""
    md = r.segment
    position = _start_position(rsm, md, r.start)
    with rsm.fetch_log_segment(md, position) as stream, read_buffers() as buffers:
        for header in batches(stream, buffers):
            fields = header.fields()
            base_offset = fields[F_BASE_OFFSET]
            if base_offset > r.end:
                break
            last_offset = base_offset + fields[F_LAST_OFFSET_DELTA]
            if last_offset < r.start or fields[F_ATTRIBUTES] & _CONTROL:
                continue
            yield header, fields, buffers


def _is_aborted(offset: int, spans: list[tuple[int, int]]) -> bool:
    return any(first <= offset <= last for first, last in spans)


def _read_range_lists(
    rsm: RemoteStorageManager,
    r: SegmentRange,
    topic: str,
    partition: int,
    aborted: Mapping[int, list[tuple[int, int]]],
    since_ms: int | None,
    until_ms: int | None,
) -> Iterator[pa.RecordBatch]:
    cols = RecordColumns()
    constants = _ConstantColumns(topic, partition)
    for header, _, _ in _batches_in_range(rsm, r):
        before = len(cols)
        decode_columns(header, cols)
        if header.is_transactional and header.producer_id in aborted:
            spans = aborted[header.producer_id]
            keep = [i for i in range(before, len(cols)) if not _is_aborted(cols.offsets[i], spans)]
            _keep(cols, before, keep)
        if len(cols) >= ROWS_PER_BATCH:
            yield _to_arrow(cols, constants, r, since_ms, until_ms)
            cols = RecordColumns()
    if len(cols):
        yield _to_arrow(cols, constants, r, since_ms, until_ms)


# The compiled decoder's buffers are handed to Arrow well before any nears 2 GiB (binary
# columns have int32 offsets); one batch adds at most MAX_DECOMPRESSED_BYTES (256 MiB). At
# 4 MiB of values an Arrow batch's memory stays in the CPU's last-level cache while it is
# written and is reused from one batch to the next (8 MiB decoded 10-20% slower here, 1-2
# MiB no faster and makes more, smaller Arrow batches).
_MAX_BUFFER_BYTES = 4 * 1024 * 1024
# Room reserved for values in each set of buffers: the cut above plus a batch of Kafka's
# default message.max.bytes (1 MiB), so that they never grow (by copying) for such batches.
_BUFFER_CAPACITY = _MAX_BUFFER_BYTES + 1024 * 1024 + 64 * 1024


def _read_range_buffers(
    rsm: RemoteStorageManager,
    r: SegmentRange,
    topic: str,
    partition: int,
    aborted: Mapping[int, list[tuple[int, int]]],
    since_ms: int | None,
    until_ms: int | None,
) -> Iterator[pa.RecordBatch]:
    # Timestamps straight in Arrow's microseconds, unless time bounds compare milliseconds.
    scale = 1000 if since_ms is None and until_ms is None else 1
    buffers = new_column_buffers(_BUFFER_CAPACITY, scale)
    constants = _ConstantColumns(topic, partition)
    dropped: list[int] = []  # rows of aborted transactions, left out by the final filter
    for header, fields, read in _batches_in_range(rsm, r):
        before = buffers.rows
        decode_into_buffers(header, buffers, fields=fields, scratch=read.decompression)
        producer_id = fields[F_PRODUCER_ID]
        if fields[F_ATTRIBUTES] & _TRANSACTIONAL and producer_id in aborted:
            spans = aborted[producer_id]
            dropped += [
                before + i
                for i, offset in enumerate(buffers.offsets_from(before))
                if _is_aborted(offset, spans)
            ]
        full = buffers.data_bytes >= _MAX_BUFFER_BYTES
        if buffers.rows - len(dropped) >= ROWS_PER_BATCH or full:
            yield _buffers_to_arrow(buffers, dropped, constants, r, since_ms, until_ms)
            buffers = new_column_buffers(_BUFFER_CAPACITY, scale)
            dropped = []
    if buffers.rows > len(dropped):
        yield _buffers_to_arrow(buffers, dropped, constants, r, since_ms, until_ms)


class _ConstantColumns:
    """The topic and partition columns of one range's batches (the same in every row): built
    once, at the largest batch's length, and sliced (no copy) for each batch."""

    __slots__ = ("_partitions", "_topics", "partition", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self._topics = pa.array([], pa.string())
        self._partitions = pa.array([], pa.int32())

    def columns(self, n: int) -> tuple[pa.Array, pa.Array]:
        if len(self._topics) < n:
            self._topics = pa.repeat(pa.scalar(self.topic, pa.string()), n)
            self._partitions = pa.repeat(pa.scalar(self.partition, pa.int32()), n)
        return self._topics.slice(0, n), self._partitions.slice(0, n)


def _keep(cols: RecordColumns, start: int, keep: list[int]) -> None:
    """Keep, of the rows from ``start`` on, only those at indexes ``keep``."""
    for name in (
        "offsets",
        "timestamps",
        "keys",
        "values",
        "headers",
        "timestamp_types",
        "leader_epochs",
        "producer_ids",
    ):
        column = getattr(cols, name)
        column[start:] = [column[i] for i in keep]


def _start_position(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, offset: int) -> int:
    """The position of the last offset-index entry at or below ``offset`` (0 without one)."""
    with rsm.fetch_index(md, IndexType.OFFSET) as stream:
        data = stream.read()
    best = 0
    base = md.start_offset
    for at in range(0, len(data) - len(data) % 8, 8):
        rel = int.from_bytes(data[at : at + 4], "big")
        pos = int.from_bytes(data[at + 4 : at + 8], "big")
        if at and rel == 0 and pos == 0:
            break  # the preallocated zero tail
        if base + rel > offset:
            break
        best = pos
    return best


def _to_arrow(
    cols: RecordColumns,
    constants: _ConstantColumns,
    r: SegmentRange,
    since_ms: int | None,
    until_ms: int | None,
) -> pa.RecordBatch:
    # Headers: one flat list of keys and values, cut per record by offsets (no dict per row).
    hkeys, hvalues, ends = flatten_headers(cols.headers)
    header_structs = pa.StructArray.from_arrays(
        [pa.array(hkeys, pa.string()), pa.array(hvalues, pa.binary())], names=["key", "value"]
    )
    return _assemble(
        [
            pa.array(cols.keys, pa.binary()),
            pa.array(cols.values, pa.binary()),
            pa.array(cols.offsets, pa.int64()),
            pa.array(cols.timestamps, pa.int64()),
            pa.array(cols.timestamp_types, pa.int32()),
            pa.ListArray.from_arrays(pa.array(ends, pa.int32()), header_structs),
            pa.array(cols.leader_epochs, pa.int32()),
            pa.array(cols.producer_ids, pa.int64()),
        ],
        None,
        constants,
        r,
        since_ms,
        until_ms,
    )


def _buffers_to_arrow(
    buffers: ColumnBuffers,
    dropped: list[int],
    constants: _ConstantColumns,
    r: SegmentRange,
    since_ms: int | None,
    until_ms: int | None,
) -> pa.RecordBatch:
    """The compiled decoder's buffers as a batch of SCHEMA (no copy: Arrow wraps them)."""
    n = buffers.rows
    offset_bounds = buffers.offset_bounds
    b = {name: pa.py_buffer(data) for name, data in buffers.buffers().items()}
    key_nulls, value_nulls, header_value_nulls = buffers.null_counts
    n_headers = buffers.header_rows

    def binary(prefix: str, count: int, nulls: int) -> pa.Array:
        validity = b.get(f"{prefix}_validity")  # there only with nulls
        return pa.Array.from_buffers(
            pa.binary(), count, [validity, b[f"{prefix}_offsets"], b[f"{prefix}_data"]], nulls
        )

    def fixed(type_: pa.DataType, name: str, count: int = n) -> pa.Array:
        return pa.Array.from_buffers(type_, count, [None, b[name]])

    header_keys = pa.Array.from_buffers(
        pa.string(), n_headers, [None, b["header_key_offsets"], b["header_key_data"]]
    )
    header_structs = pa.StructArray.from_arrays(
        [header_keys, binary("header_value", n_headers, header_value_nulls)],
        names=["key", "value"],
    )
    keep = None
    if dropped:
        mask = [True] * n
        for i in dropped:
            mask[i] = False
        keep = pa.array(mask, pa.bool_())
    return _assemble(
        [
            binary("key", n, key_nulls),
            binary("value", n, value_nulls),
            fixed(pa.int64(), "offset"),
            fixed(_TIMESTAMP if buffers.timestamp_scale == 1000 else pa.int64(), "timestamp"),
            fixed(pa.int32(), "timestamp_type"),
            pa.ListArray.from_arrays(fixed(pa.int32(), "header_ends", n + 1), header_structs),
            fixed(pa.int32(), "leader_epoch"),
            fixed(pa.int64(), "producer_id"),
        ],
        keep,
        constants,
        r,
        since_ms,
        until_ms,
        offset_bounds,
    )


def _assemble(
    columns: list[pa.Array],
    keep: pa.Array | None,
    constants: _ConstantColumns,
    r: SegmentRange,
    since_ms: int | None,
    until_ms: int | None,
    offset_bounds: tuple[int, int] | None = None,
) -> pa.RecordBatch:
    """A batch of SCHEMA from the decoded ``columns`` (key, value, offset, timestamp,
    timestampType, headers, leaderEpoch, producerId), without the rows outside ``r`` or the
    times, nor those ``keep`` (when given) marks False.

    Timestamps come in milliseconds (int64), or already in the schema's microseconds when
    there are no time bounds. ``offset_bounds``: the lowest and highest offset of the rows,
    when the caller knows them (else they are computed)."""
    keys, values, offsets, timestamps, timestamp_types, headers, epochs, producer_ids = columns
    n = len(offsets)
    topics, partitions = constants.columns(n)
    if timestamps.type == _TIMESTAMP:
        micros = timestamps
        if since_ms is not None or until_ms is not None:
            raise ValueError("time bounds need the timestamps in milliseconds")
    else:
        # Arrow's multiply wraps at int64, as ColumnBuffers' does (timestamp_scale).
        micros = pc.multiply(timestamps, 1000).view(_TIMESTAMP)
    batch = pa.RecordBatch.from_arrays(
        [
            keys,
            values,
            topics,
            partitions,
            offsets,
            micros,
            timestamp_types,
            headers,
            epochs,
            producer_ids,
        ],
        schema=SCHEMA,
    )
    if n == 0:
        return batch
    if keep is None and since_ms is None and until_ms is None:
        # The common case, a batch inside the range: its bounds tell, no mask needed.
        if offset_bounds is None:
            bounds = pc.min_max(offsets)
            offset_bounds = (bounds["min"].as_py(), bounds["max"].as_py())
        if offset_bounds[0] >= r.start and offset_bounds[1] <= r.end:
            return batch
    # Rows outside the range (the first and last batches may straddle it) or the times.
    mask = pc.and_(pc.greater_equal(offsets, r.start), pc.less_equal(offsets, r.end))
    if keep is not None:
        mask = pc.and_(mask, keep)
    if since_ms is not None:
        mask = pc.and_(mask, pc.greater_equal(timestamps, since_ms))
    if until_ms is not None:
        mask = pc.and_(mask, pc.less(timestamps, until_ms))
    if pc.all(mask).as_py():
        return batch
    return batch.filter(mask)


def read_partition(
    config: ArchiveConfig,
    plan: PartitionPlan,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every range of ``plan``, in offset order (a convenience for tools and tests)."""
    rsm = config.open()
    try:
        for r in plan.ranges:
            yield from read_range(
                rsm,
                r,
                plan.topic,
                plan.partition,
                plan.aborted,
                since_ms=since_ms,
                until_ms=until_ms,
            )
    finally:
        rsm.close()
