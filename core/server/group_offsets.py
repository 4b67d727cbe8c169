"""Committed consumer-group offsets and group metadata, kept in ``__consumer_offsets``.

What Kafka's group coordinator keeps: per (group, topic, partition) the committed offset,
the leader epoch of the record before it, the client's metadata string and the commit time;
per group its generation, protocol and members. The state lives in memory and every change
is appended to the group's partition of the internal compacted topic ``__consumer_offsets``
(``core.server.offsets_topic``) as Kafka's OffsetCommit / GroupMetadata records
(``core.server.coordinator_records``); a deletion is a tombstone. At start the topic is
replayed to rebuild the state. The log cleaner keeps the topic small.

Upgrade: a broker that kept offsets in ``tierlog-group-offsets.json`` (tierlog before the
topic) imports that file once at start, writes it to the topic and renames it
``tierlog-group-offsets.json.migrated``.

Concurrency: ``commit``, ``delete_topic``, ``expire``, ``delete_group`` and ``store_group``
change the in-memory state at once (so the order of changes is the order of the calls,
which the event loop makes the order of the requests), queue their records and return a
version number; ``flush(version)`` is the blocking write, meant for an executor thread, that
appends the queued records in order and fsyncs, returning once a state at least that new is
durable. Concurrent flushes are serialised; one write may cover several changes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import CorruptCheckpointError
from core.server.coordinator_records import (
    CommittedOffset,
    CoordinatorRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
)
from core.server.offsets_topic import OFFSETS_TOPIC

if TYPE_CHECKING:
    from core.server.offsets_topic import CoordinatorRecord, OffsetsTopic


log = logging.getLogger(__name__)

OFFSETS_FILE = "tierlog-group-offsets.json"  # tierlog before __consumer_offsets
FORMAT_VERSION = 1

TopicPartition = tuple[str, int]


class GroupOffsetStore:
    """Committed offsets and group metadata of every group, journaled in
    ``__consumer_offsets``.

    Args:
        journal: the offsets topic; None keeps everything in memory only (tests, tools).
        legacy_dir: where a ``tierlog-group-offsets.json`` of an older tierlog may be;
            it is imported once (see the module docstring).

    Raises:
        CorruptCheckpointError: the legacy file exists but cannot be parsed (the message
            names it): the broker does not start rather than forget commits.
        KafkaStorageError: the topic cannot be read.
    """

    def __init__(
        self,
        journal: OffsetsTopic | None = None,
        *,
        legacy_dir: Path | None = None,
        load: bool = True,
    ):
        """``load=False`` starts empty: the broker then loads the partitions it coordinates
        one by one (``load_partition``), as their leadership arrives."""
        self.journal = journal
        self._state_lock = threading.Lock()
        self._write_lock = threading.Lock()
        # group -> (topic, partition) -> offset
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._metadata: dict[str, GroupMetadataValue] = {}
        self._pending: list[tuple[int, list[CoordinatorRecord]]] = []  # (partition, records)
        # TxnOffsetCommit: producer id -> group -> offsets, applied at the COMMIT marker.
        self._txn_offsets: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._version = 0
        self._persisted = 0
        # The log end offset after this store's last append, per partition: what a commit
        # waits for the high watermark to reach.
        self._appended: dict[int, int] = {}
        self.skipped_records = 0
        if journal is not None and load:
            self._replay(journal)
        if legacy_dir is not None:
            self._migrate(Path(legacy_dir) / OFFSETS_FILE)

    # -- loading ---------------------------------------------------------------------------
    def load_partition(self, index: int) -> dict[str, GroupMetadataValue]:
        """Replay partition ``index`` into the store (blocking: run it off the event loop);
        returns the stored metadata of its groups, for the coordinator."""
        assert self.journal is not None
        self._replay(self.journal, [index])
        with self._state_lock:
            return {
                g: v for g, v in self._metadata.items() if self.journal.partition_for(g) == index
            }

    def unload_partition(self, index: int) -> set[str]:
        """Forget the groups of partition ``index`` (another broker coordinates them now)
        and the records queued for it; returns the group ids forgotten."""
        assert self.journal is not None
        journal = self.journal
        with self._state_lock:
            gone = {
                g for g in (*self._groups, *self._metadata) if journal.partition_for(g) == index
            }
            for group in gone:
                self._groups.pop(group, None)
                self._metadata.pop(group, None)
            self._pending = [(p, r) for p, r in self._pending if p != index]
            self._appended.pop(index, None)
            for pid in list(self._txn_offsets):
                by_group = self._txn_offsets[pid]
                for group in [g for g in by_group if journal.partition_for(g) == index]:
                    del by_group[group]
                if not by_group:
                    del self._txn_offsets[pid]
        return gone

    def appended_end(self, index: int) -> int:
        """The log end offset of partition ``index`` after this store's last append to it
        (-1 before any)."""
        with self._state_lock:
            return self._appended.get(index, -1)

    def partition_for(self, group: str) -> int:
        return self.journal.partition_for(group) if self.journal is not None else 0

    def _replay(self, journal: OffsetsTopic, indexes: list[int] | None = None) -> None:
        """Rebuild the state of the groups of ``indexes`` (default: all) from the topic, off
        the state lock, then merge it in: the groups of other partitions are served
        meanwhile."""
        groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        metadata: dict[str, GroupMetadataValue] = {}
        records = skipped = 0
        # TxnOffsetCommit records with no marker yet: producer id -> [(partition, record)].
        open_transactions: dict[int, list[tuple[int, CoordinatorRecord]]] = {}
        for key_bytes, value in journal.replay(indexes, open_transactions):
            records += 1
            try:
                key = decode_key(key_bytes)
                if isinstance(key, OffsetCommitKey):
                    tp = (key.topic, key.partition)
                    if value is None:
                        offsets = groups.get(key.group, {})
                        offsets.pop(tp, None)
                        if not offsets:
                            groups.pop(key.group, None)
                    else:
                        committed = decode_offset_commit_value(value)
                        groups.setdefault(key.group, {})[tp] = committed
                elif isinstance(key, GroupMetadataKey):
                    if value is None:
                        metadata.pop(key.group, None)
                    else:
                        metadata[key.group] = decode_group_metadata_value(value)
                else:
                    skipped += 1
            except CoordinatorRecordError as e:
                # Kafka skips what it cannot parse rather than refuse to coordinate at all.
                skipped += 1
                log.warning("skipping an unreadable record of %s: %s", OFFSETS_TOPIC, e)
        txn_offsets = self._open_transaction_offsets(open_transactions)
        with self._state_lock:
            self.skipped_records += skipped
            self._groups.update(groups)
            self._metadata.update(metadata)
            for pid, by_group in txn_offsets.items():
                self._txn_offsets.setdefault(pid, {}).update(by_group)
        where = OFFSETS_TOPIC if indexes is None else f"{OFFSETS_TOPIC}-{indexes[0]}"
        log.info(
            "loaded %d groups with offsets and %d group metadata from %d records of %s",
            len(groups),
            len(metadata),
            records,
            where,
        )

    @staticmethod
    def _open_transaction_offsets(
        open_transactions: Mapping[int, list[tuple[int, CoordinatorRecord]]],
    ) -> dict[int, dict[str, dict[TopicPartition, CommittedOffset]]]:
        """The offsets of transactions replay found no marker for (they apply at it)."""
        txn_offsets: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        for pid, records in open_transactions.items():
            for _, (key_bytes, value) in records:
                try:
                    key = decode_key(key_bytes)
                    if isinstance(key, OffsetCommitKey) and value is not None:
                        offsets = txn_offsets.setdefault(pid, {}).setdefault(key.group, {})
                        offsets[(key.topic, key.partition)] = decode_offset_commit_value(value)
                except CoordinatorRecordError as e:
                    log.warning("skipping an unreadable record of %s: %s", OFFSETS_TOPIC, e)
        return txn_offsets

    # -- transactional offset commits (TxnOffsetCommit) -------------------------------------
    def txn_commit(
        self,
        producer_id: int,
        producer_epoch: int,
        group: str,
        offsets: Mapping[TopicPartition, CommittedOffset],
    ) -> int | None:
        """Journal offsets of a producer's transaction (they apply at its COMMIT marker);
        returns the ``__consumer_offsets`` partition to fsync and wait on (its
        :meth:`appended_end` is the batch's end; None without a journal).

        Raises:
            InvalidProducerEpochError, KafkaStorageError: the append failed.
        """
        records = [
            (offset_commit_key(group, t, p), offset_commit_value(c))
            for (t, p), c in offsets.items()
        ]
        index = None
        if self.journal is not None and records:
            index = self.journal.partition_for(group)
            end = self.journal.append_transactional(index, records, producer_id, producer_epoch)
            with self._state_lock:
                self._appended[index] = max(self._appended.get(index, -1), end)
        with self._state_lock:
            self._txn_offsets.setdefault(producer_id, {}).setdefault(group, {}).update(offsets)
        return index

    def complete_txn(self, producer_id: int, partition: int, commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` was written in ``__consumer_offsets``
        partition ``partition``: apply or drop the producer's offsets of its groups."""
        with self._state_lock:
            groups = self._txn_offsets.get(producer_id)
            if not groups:
                return
            for group in list(groups):
                here = self.journal.partition_for(group) if self.journal is not None else partition
                if here != partition:
                    continue
                offsets = groups.pop(group)
                if commit:
                    self._groups.setdefault(group, {}).update(offsets)
            if not groups:
                del self._txn_offsets[producer_id]

    def has_pending_txn_offsets(self, group: str, tp: TopicPartition) -> bool:
        """Whether a transaction not yet completed holds an offset of ``group`` for ``tp``
        (OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        with self._state_lock:
            return any(tp in groups.get(group, {}) for groups in self._txn_offsets.values())

    def import_legacy(self, directory: Path) -> None:
        """Import ``tierlog-group-offsets.json`` from ``directory`` if it is there (once:
        it is renamed after). Blocking; the partitions its groups map to must be loaded.

        Raises:
            CorruptCheckpointError: the file cannot be parsed.
        """
        self._migrate(Path(directory) / OFFSETS_FILE)

    def _migrate(self, path: Path) -> None:
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            return
        imported: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        try:
            doc = json.loads(text)
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {doc.get('version')!r}")
            for group, topics in doc["groups"].items():
                for topic, partitions in topics.items():
                    for partition, entry in partitions.items():
                        imported.setdefault(group, {})[(topic, int(partition))] = (
                            CommittedOffset.from_json(entry)
                        )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptCheckpointError(f"cannot read committed offsets {path}: {e}") from e
        count = 0
        for group, offsets in imported.items():
            # What the topic already holds is newer: a previous start imported the file
            # and crashed before renaming it.
            fresh = {tp: c for tp, c in offsets.items() if self.fetch(group, *tp) is None}
            count += len(fresh)
            self.commit(group, fresh)
        self.flush()
        path.rename(path.with_name(path.name + ".migrated"))
        log.info("imported %d committed offsets from %s into %s", count, path, OFFSETS_TOPIC)

    # -- persistence -----------------------------------------------------------------------
    def _queue(self, group: str, records: list[CoordinatorRecord]) -> None:
        """Under the state lock: queue the records of a change and bump the version."""
        if not records:
            return
        partition = self.journal.partition_for(group) if self.journal is not None else 0
        self._pending.append((partition, records))
        self._version += 1

    def flush(self, version: int | None = None) -> None:
        """Append the queued records and fsync, unless a state at least ``version`` new is
        durable already. ``None`` writes whatever is queued.

        Blocking: call it from an executor thread when on the event loop.

        Raises:
            KafkaStorageError or OSError: the write failed; the records not written stay
                queued for the next flush.
        """
        with self._write_lock:
            with self._state_lock:
                target = self._version if version is None else version
                if self._persisted >= target:
                    return
                current = self._version
                pending, self._pending = self._pending, []
            if self.journal is not None:
                done = 0
                try:
                    for partition, records in pending:
                        end = self.journal.append(partition, records)
                        with self._state_lock:
                            self._appended[partition] = max(self._appended.get(partition, -1), end)
                        done += 1
                    self.journal.sync(p for p, _ in pending)
                except BaseException:
                    with self._state_lock:
                        self._pending = pending[done:] + self._pending
                    raise
            self._persisted = current

    # -- changes ---------------------------------------------------------------------------
    def commit(self, group: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> int:
        """Record commits in memory; returns the version to pass to :meth:`flush`.

        Idempotent: committing the same values again changes nothing but the timestamp.
        """
        with self._state_lock:
            if offsets:
                self._groups.setdefault(group, {}).update(offsets)
                self._queue(
                    group,
                    [
                        (offset_commit_key(group, t, p), offset_commit_value(c))
                        for (t, p), c in offsets.items()
                    ],
                )
            return self._version

    def _drop(self, group: str, doomed: Iterable[TopicPartition]) -> int:
        """Under the state lock: forget offsets, queue their tombstones; returns how many."""
        offsets = self._groups.get(group, {})
        tombstones = [(offset_commit_key(group, *tp), None) for tp in doomed if tp in offsets]
        for tp in doomed:
            offsets.pop(tp, None)
        if not offsets:
            self._groups.pop(group, None)
        self._queue(group, tombstones)
        return len(tombstones)

    def delete_topic(self, topic: str) -> int:
        """Forget every group's offsets of a deleted topic; returns the version to flush.

        Groups left without offsets are forgotten too (as Kafka drops an empty simple group).
        """
        with self._state_lock:
            for group in list(self._groups):
                self._drop(group, [tp for tp in self._groups[group] if tp[0] == topic])
            return self._version

    def expire(
        self,
        now: int,
        retention_ms: int,
        empty_since: Mapping[str, int],
        active: set[str],
    ) -> tuple[int, int]:
        """Drop expired offsets (Kafka's rule since KIP-211); returns (version to flush,
        offsets dropped).

        Groups with members (``active``) keep every offset. A group that had members and is
        empty since ``empty_since[group]`` loses all its offsets once that is
        ``retention_ms`` ago; a group that never had members (a simple group) loses each
        offset ``retention_ms`` after its commit. An empty group left without offsets loses
        its metadata too (a GroupMetadata tombstone), as in Kafka.
        """
        dropped = 0
        with self._state_lock:
            for group in list(self._groups):
                if group in active:
                    continue
                offsets = self._groups[group]
                since = empty_since.get(group)
                if since is not None:
                    doomed = list(offsets) if now - since >= retention_ms else []
                else:
                    doomed = [
                        tp
                        for tp, c in offsets.items()
                        if now - c.commit_timestamp_ms >= retention_ms
                    ]
                dropped += self._drop(group, doomed)
                if group not in self._groups and group in self._metadata:
                    del self._metadata[group]
                    self._queue(group, [(group_metadata_key(group), None)])
            # Groups that never committed leave only their metadata: it goes once they have
            # been empty for the retention too.
            for group, value in list(self._metadata.items()):
                since = empty_since.get(group, value.current_state_timestamp_ms)
                if (
                    group not in self._groups
                    and group not in active
                    and not value.members
                    and now - since >= retention_ms
                ):
                    del self._metadata[group]
                    self._queue(group, [(group_metadata_key(group), None)])
            return self._version, dropped

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> int:
        """Forget some of a group's committed offsets (OffsetDelete): tombstones for those
        it has; returns the version to flush."""
        with self._state_lock:
            self._drop(group, list(partitions))
            return self._version

    def delete_group(self, group: str) -> int:
        """Forget a group's offsets and metadata (DeleteGroups); returns the version to
        flush."""
        with self._state_lock:
            self._drop(group, list(self._groups.get(group, {})))
            if self._metadata.pop(group, None) is not None:
                self._queue(group, [(group_metadata_key(group), None)])
            return self._version

    def store_group(self, group: str, value: GroupMetadataValue | None) -> int:
        """Record a group's metadata (None: the group is gone); returns the version to
        flush."""
        with self._state_lock:
            if value is None:
                if self._metadata.pop(group, None) is None:
                    return self._version
                self._queue(group, [(group_metadata_key(group), None)])
            else:
                self._metadata[group] = value
                self._queue(group, [(group_metadata_key(group), group_metadata_value(value))])
            return self._version

    # -- queries ---------------------------------------------------------------------------
    def has_group(self, group: str) -> bool:
        """Whether the group is known (it has committed offsets)."""
        with self._state_lock:
            return group in self._groups

    def groups(self) -> list[str]:
        with self._state_lock:
            return sorted(self._groups)

    def group_metadata(self) -> dict[str, GroupMetadataValue]:
        """The last stored metadata of every group that has some."""
        with self._state_lock:
            return dict(self._metadata)

    def fetch(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        with self._state_lock:
            return self._groups.get(group, {}).get((topic, partition))

    def fetch_many(
        self, group: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, CommittedOffset | None]:
        with self._state_lock:
            offsets = self._groups.get(group, {})
            return {tp: offsets.get(tp) for tp in partitions}

    def group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """Every committed partition of the group, sorted by topic and partition."""
        with self._state_lock:
            return dict(sorted(self._groups.get(group, {}).items()))
