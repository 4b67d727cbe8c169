"""How the metadata manager reaches ``__remote_log_metadata``: a small client interface.

rlmm never imports the broker. Three implementations serve the one RLMM code path:

- inside the broker, an in-process client over the broker's own logs (``tierlog/``);
- in the CLI and Spark, a real Kafka client (``KafkaMetadataTopicClient``), which works
  against any broker holding the topic, Apache Kafka included;
- offline, ``LogDirMetadataTopicReader``, which reads the topic's segment files from a log
  dir (the ``.log`` files alone suffice: indexes and checkpoints are not needed).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from core.errors import CoreError
from core.log.file_records import FileRecords
from core.log.files import parse_partition_dir
from core.records.record import decode_records
from tiered.api import RemoteStorageError

METADATA_TOPIC = "__remote_log_metadata"
DEFAULT_METADATA_PARTITIONS = 50


class MetadataTopicError(RemoteStorageError):
    """The metadata topic is missing, mis-sized, unreachable or unreadable."""


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    partition: int
    offset: int
    value: bytes


class MetadataTopicClient(Protocol):
    """What the RLMM needs of ``__remote_log_metadata``. Calls may block; callers are
    background threads, never an event loop."""

    def ensure_topic(self, num_partitions: int) -> None:
        """Create the topic (retention.ms=-1, cleanup.policy=delete) or check the existing
        one has ``num_partitions`` partitions.

        Raises:
            MetadataTopicError: a partition-count mismatch, or the topic cannot be created.
        """

    def partition_count(self) -> int:
        """The topic's partition count."""

    def append(self, partition: int, value: bytes, *, durable: bool = True) -> int:
        """Append one record (null key) and return its offset once it is stored; with
        ``durable`` (the default) once it, and every record before it in ``partition``,
        survives a crash of this machine. ``durable=False`` lets a client skip its own sync
        (a later durable append covers the record); a client whose every append is durable
        (replicated, acknowledged by ``acks=all``) ignores it.

        Raises:
            MetadataTopicError: the append failed; nothing was acknowledged.
        """

    def read(self, partition: int, start_offset: int, max_records: int) -> list[MetadataRecord]:
        """Records from ``start_offset`` (inclusive), at most ``max_records``, in order."""

    def end_offset(self, partition: int) -> int:
        """The offset after the last record of ``partition`` (0 when empty)."""

    def close(self) -> None:
        """Release connections."""


@runtime_checkable
class MetadataTopicBatchAppender(Protocol):
    """A ``MetadataTopicClient`` that can also append several records at once."""

    def append_all(self, partition: int, values: Sequence[bytes], *, durable: bool = True) -> int:
        """Append ``values`` in order, all or none (one record batch), and return the offset
        of the last once stored; with ``durable`` once it and every record before it in
        ``partition`` survive a crash of this machine (one sync for all).

        Raises:
            MetadataTopicError: the append failed; none of the records was stored.
        """


class LogDirMetadataTopicReader:
    """Reads ``__remote_log_metadata`` offline from Kafka-format log dirs (read-only).

    Works on a log dir copied from any broker, Apache Kafka's included: only the
    ``<topic>-<partition>/*.log`` files are read. Appends raise ``MetadataTopicError``.
    """

    def __init__(self, log_dirs: Sequence[Path]) -> None:
        self._partitions: dict[int, list[Path]] = {}
        for log_dir in log_dirs:
            if not Path(log_dir).is_dir():
                raise MetadataTopicError(f"log dir {log_dir} does not exist")
            for child in Path(log_dir).iterdir():
                tp = parse_partition_dir(child.name)
                if tp is not None and tp[0] == METADATA_TOPIC and child.is_dir():
                    self._partitions[tp[1]] = sorted(child.glob("*.log"))
        if not self._partitions:
            raise MetadataTopicError(
                f"no {METADATA_TOPIC} partitions in {', '.join(map(str, log_dirs))}"
            )

    def ensure_topic(self, num_partitions: int) -> None:
        count = self.partition_count()
        if count != num_partitions:
            raise MetadataTopicError(
                f"{METADATA_TOPIC} has {count} partitions in the log dirs, "
                f"expected {num_partitions}"
            )

    def partition_count(self) -> int:
        return max(self._partitions) + 1

    def append(self, partition: int, value: bytes, *, durable: bool = True) -> int:
        raise MetadataTopicError("the offline log-dir reader cannot append")

    def _records(self, partition: int, start_offset: int = 0) -> Iterator[MetadataRecord]:
        paths = self._partitions.get(partition, [])
        bases = [int(p.name.split(".", 1)[0]) for p in paths]
        # Skip the segments wholly below start_offset (their successor starts at or below it).
        first = max(0, bisect.bisect_right(bases, start_offset) - 1)
        for path in paths[first:]:
            records = FileRecords(path, create=False, writable=False)
            try:
                try:
                    for _, header in records.scan_batches():
                        if header.is_control:
                            continue
                        for record in decode_records(header):
                            if record.value is not None:
                                yield MetadataRecord(partition, record.offset, record.value)
                except CoreError as e:
                    # A torn tail (a copy taken from a live broker): what precedes is good.
                    if getattr(e, "position", None) is None:
                        raise MetadataTopicError(f"{path}: {e}") from e
            finally:
                records.close()

    def read(self, partition: int, start_offset: int, max_records: int) -> list[MetadataRecord]:
        out: list[MetadataRecord] = []
        for record in self._records(partition, start_offset):
            if record.offset < start_offset:
                continue
            out.append(record)
            if len(out) >= max_records:
                break
        return out

    def end_offset(self, partition: int) -> int:
        last = -1
        paths = self._partitions.get(partition, [])
        start = int(paths[-1].name.split(".", 1)[0]) if paths else 0
        for record in self._records(partition, start):
            last = record.offset
        return last + 1

    def close(self) -> None:
        self._partitions.clear()
