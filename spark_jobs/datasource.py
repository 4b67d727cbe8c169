"""``spark.read.format("tierlog")``: the archive of a tiered topic as a DataFrame.

A pyspark Python Data Source. Register it once per session::

    from spark_jobs.datasource import register
    register(spark)
    df = (spark.read.format("tierlog")
          .option("rsm.config.storage.root", "/var/tierlog/bucket")
          .option("topic", "orders")
          .load())

The schema is that of Spark's Kafka source (key, value, topic, partition, offset,
timestamp, timestampType, headers) plus ``leaderEpoch`` and ``producerId``, so jobs written
for ``format("kafka")`` move over unchanged. Options:

- ``remote.log.storage.manager.class.name`` (default the local-directory plugin) and the
  plugin's ``rsm.config.*`` settings, as in the broker's config;
- where the segment metadata comes from: ``bootstrap.servers`` (``__remote_log_metadata``
  read over Kafka, any broker including Apache Kafka; ``kafka.*`` options go to the client,
  e.g. ``kafka.security.protocol``), ``log.dirs`` (the topic's ``.log`` files, offline,
  comma-separated dirs), or by default the bucket's manifests alone;
  ``metadata.num.partitions`` if the metadata topic's partition count cannot be read;
- ``topic`` (comma-separated) or ``topicPattern`` (a regular expression); ``partitions``
  (comma-separated, default all);
- ``startingOffsets`` / ``endingOffsets``: ``earliest`` / ``latest`` or JSON as for Spark's
  Kafka source, ``{"orders": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest; ending offsets
  are exclusive, as there);
- ``startingTimestamp`` / ``endingTimestamp``: epoch milliseconds (records with
  ``starting <= timestamp < ending``); segments that end before the start are skipped from
  their metadata without being read;
- ``maxBytesPerPartition``: segments larger than this (default 128 MiB) are split into
  several Spark partitions at offset-index entries.

The driver plans (lists manifests, resolves the lineage, reads the small indexes it needs);
executors read log ranges through their own plugin instance built from the options: no
live client is shipped.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.extras import requires_extra
from core.kafka_uuid import uuid_from_base64
from spark_jobs.archive import (
    ArchiveConfig,
    plan_partition,
    read_range,
    segments_from_manifests,
    segments_from_metadata_topic,
)
from spark_jobs.lineage import SegmentRange
from tiered.api import IndexType, RemoteStorageManager

with requires_extra("spark", "the Spark jobs (spark_jobs)"):
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

DEFAULT_MAX_BYTES = 128 * 1024 * 1024
EARLIEST, LATEST = -2, -1


class TierlogOptionError(ValueError):
    """An option that cannot be used; the message names it."""


@dataclass(frozen=True)
class SegmentSplit(InputPartition):  # type: ignore[misc]
    """One Spark partition: a range of one remote segment, with what reading it needs."""

    config: ArchiveConfig
    topic: str
    partition: int
    range: SegmentRange
    aborted: dict[int, list[tuple[int, int]]]
    since_ms: int | None
    until_ms: int | None


def _offsets(text: str | None, name: str, default: int) -> dict[str, dict[int, int]] | int:
    if text is None or text == "":
        return default
    if text in ("earliest", "latest"):
        return EARLIEST if text == "earliest" else LATEST
    try:
        doc = json.loads(text)
        return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in doc.items()}
    except (ValueError, AttributeError) as e:
        raise TierlogOptionError(
            f"option {name}: expected earliest, latest or JSON like "
            f'{{"topic": {{"0": 23}}}}, got {text!r}'
        ) from e


def _int(options: Mapping[str, str], key: str, name: str) -> int | None:
    value = options.get(key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as e:
        raise TierlogOptionError(f"option {name}: not an integer: {value!r}") from e


def topics_in_bucket(rsm: RemoteStorageManager) -> set[str]:
    """Topic names with objects in the bucket (``<topic>-<topic id>/...`` folders)."""
    from rsm_plugins.base import ObjectStoreRemoteStorageManager

    if not isinstance(rsm, ObjectStoreRemoteStorageManager):
        raise TierlogOptionError("topicPattern needs a plugin that can list its bucket")
    names = set()
    prefix = rsm.key_prefix
    for key in rsm.store.list_keys(prefix):
        folder = key[len(prefix) :].split("/", 1)[0]
        topic, _, topic_id = folder.rpartition("-")
        try:
            uuid_from_base64(topic_id)
        except ValueError:
            continue
        if topic:
            names.add(topic)
    return names


def _split(rsm: RemoteStorageManager, r: SegmentRange, max_bytes: int) -> list[SegmentRange]:
    """``r`` cut at offset-index entries about every ``max_bytes`` of the segment."""
    if r.segment.segment_size_in_bytes <= max_bytes:
        return [r]
    with rsm.fetch_index(r.segment, IndexType.OFFSET) as stream:
        data = stream.read()
    base = r.segment.start_offset
    cuts: list[int] = []
    next_cut = max_bytes
    for at in range(0, len(data) - len(data) % 8, 8):
        rel = int.from_bytes(data[at : at + 4], "big")
        pos = int.from_bytes(data[at + 4 : at + 8], "big")
        if at and rel == 0 and pos == 0:
            break
        # An entry names the last offset of the batch at ``pos``: the next batch starts
        # after it, so cutting at rel + 1 never splits a batch.
        if pos >= next_cut and r.start < base + rel + 1 <= r.end:
            cuts.append(base + rel + 1)
            next_cut = pos + max_bytes
    bounds = [r.start, *cuts, r.end + 1]
    return [SegmentRange(r.segment, lo, hi - 1) for lo, hi in itertools.pairwise(bounds)]


class TierlogReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options over case-insensitively (lower-cased): look them up so.
        self.options = {k.lower(): v for k, v in dict(options).items()}
        self.config = ArchiveConfig.from_options(self.options)
        self.starting = _offsets(self.options.get("startingoffsets"), "startingOffsets", EARLIEST)
        self.ending = _offsets(self.options.get("endingoffsets"), "endingOffsets", LATEST)
        self.since_ms = _int(self.options, "startingtimestamp", "startingTimestamp")
        self.until_ms = _int(self.options, "endingtimestamp", "endingTimestamp")
        self.max_bytes = (
            _int(self.options, "maxbytesperpartition", "maxBytesPerPartition") or DEFAULT_MAX_BYTES
        )
        wanted = self.options.get("partitions")
        self.partition_filter = {int(p) for p in wanted.split(",") if p.strip()} if wanted else None

    def _topics(self, rsm: RemoteStorageManager) -> list[str]:
        if self.options.get("topic"):
            return [t.strip() for t in self.options["topic"].split(",") if t.strip()]
        pattern = self.options.get("topicpattern")
        if pattern:
            compiled = re.compile(pattern)
            return sorted(t for t in topics_in_bucket(rsm) if compiled.fullmatch(t))
        raise TierlogOptionError("give option topic (comma-separated) or topicPattern")

    def _bound(self, spec: Any, topic: str, partition: int, default: int) -> int:
        if isinstance(spec, int):
            return spec
        return spec.get(topic, {}).get(partition, default)

    def _metadata(self) -> tuple[Any, Any]:
        """A function from topic to its segments by partition, and what to close after."""
        num = _int(self.options, "metadata.num.partitions", "metadata.num.partitions")
        if self.options.get("bootstrap.servers"):
            from rlmm.kafka_client import KafkaMetadataTopicClient

            settings = {
                k[len("kafka.") :]: v for k, v in self.options.items() if k.startswith("kafka.")
            }
            client = KafkaMetadataTopicClient(self.options["bootstrap.servers"], **settings)
            return (lambda _rsm, t: segments_from_metadata_topic(client, t, num)), client
        if self.options.get("log.dirs"):
            from pathlib import Path

            from rlmm.topic_client import LogDirMetadataTopicReader

            dirs = [Path(d.strip()) for d in self.options["log.dirs"].split(",") if d.strip()]
            reader = LogDirMetadataTopicReader(dirs)
            return (lambda _rsm, t: segments_from_metadata_topic(reader, t, num)), reader
        return segments_from_manifests, None

    def partitions(self) -> Sequence[InputPartition]:
        rsm = self.config.open()
        segments_of, closing = self._metadata()
        try:
            splits: list[SegmentSplit] = []
            for topic in self._topics(rsm):
                by_partition = segments_of(rsm, topic)
                for partition in sorted(by_partition):
                    if self.partition_filter is not None and partition not in self.partition_filter:
                        continue
                    start = self._bound(self.starting, topic, partition, EARLIEST)
                    end = self._bound(self.ending, topic, partition, LATEST)
                    plan = plan_partition(
                        rsm,
                        topic,
                        partition,
                        by_partition[partition],
                        start=max(start, 0),
                        end=None if end < 0 else end - 1,  # Spark's ending offsets exclude
                        since_ms=self.since_ms,
                    )
                    for r in plan.ranges:
                        for piece in _split(rsm, r, self.max_bytes):
                            splits.append(
                                SegmentSplit(
                                    self.config,
                                    topic,
                                    partition,
                                    piece,
                                    plan.aborted,
                                    self.since_ms,
                                    self.until_ms,
                                )
                            )
            return splits
        finally:
            rsm.close()
            if closing is not None:
                closing.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        split: SegmentSplit = partition  # type: ignore[assignment]
        rsm = split.config.open()
        try:
            yield from read_range(
                rsm,
                split.range,
                split.topic,
                split.partition,
                split.aborted,
                since_ms=split.since_ms,
                until_ms=split.until_ms,
            )
        finally:
            rsm.close()


class TierlogDataSource(DataSource):  # type: ignore[misc]
    """``format("tierlog")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "tierlog"

    def schema(self) -> str:
        return (
            "key binary, value binary, topic string, partition int, offset long, "
            "timestamp timestamp, timestampType int, "
            "headers array<struct<key: string, value: binary>>, "
            "leaderEpoch int, producerId long"
        )

    def reader(self, schema: Any) -> DataSourceReader:
        return TierlogReader(self.options)


def register(spark: Any) -> None:
    """Make ``format("tierlog")`` available in ``spark``'s session."""
    spark.dataSource.register(TierlogDataSource)
