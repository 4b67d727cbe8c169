"""Committed consumer-group offsets, kept in one JSON file until groups have their topic.

What Kafka keeps in ``__consumer_offsets`` for a "simple" group (one that commits with
generation -1 and no membership): per (group, topic, partition) the committed offset, the
leader epoch of the record at that offset, the client's metadata string and the commit
time. A single broker keeps them in ``tierlog-group-offsets.json`` in the first log dir,
replaced atomically (``core.fs.atomic_write``: temp file, fsync, rename, fsync the dir) on
every commit, so that acknowledged commits survive a crash or restart.

A later issue brings the group coordinator and replaces this file with the
``__consumer_offsets`` topic (Kafka's OffsetCommit key/value records, compacted); the file is
then read once to migrate and no longer written.

Layout (version 1)::

    {"version": 1,
     "groups": {"<group>": {"<topic>": {"<partition>": {
         "offset": 42, "leader_epoch": 3, "metadata": "", "commit_timestamp": 1700000000000}}}}}

Concurrency: ``commit`` and ``delete_topic`` change the in-memory state at once (so the
order of commits is the order of the calls, which the event loop makes the order of the
requests) and return a version number; ``flush(version)`` is the blocking write, meant for
an executor thread, that returns once a state at least that new is on disk. Concurrent
flushes are serialised; one write may cover several commits.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from core.errors import CorruptCheckpointError
from core.fs import atomic_write

log = logging.getLogger(__name__)

OFFSETS_FILE = "tierlog-group-offsets.json"
FORMAT_VERSION = 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One committed position (Kafka's OffsetAndMetadata).

    Args:
        offset: the next offset the group will consume.
        leader_epoch: the leader epoch of the record before ``offset``; -1 when unknown.
        metadata: the client's string ("" when the client sent null).
        commit_timestamp_ms: when the broker accepted the commit.
    """

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = 0

    def __post_init__(self) -> None:
        if self.leader_epoch < -1:
            raise ValueError(f"leader_epoch must be >= -1, got {self.leader_epoch}")

    def to_json(self) -> dict[str, object]:
        return {
            "offset": self.offset,
            "leader_epoch": self.leader_epoch,
            "metadata": self.metadata,
            "commit_timestamp": self.commit_timestamp_ms,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> CommittedOffset:
        return cls(
            offset=_as_int(doc["offset"]),
            leader_epoch=_as_int(doc.get("leader_epoch", -1)),
            metadata=str(doc.get("metadata", "")),
            commit_timestamp_ms=_as_int(doc.get("commit_timestamp", 0)),
        )


def _as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupOffsetStore:
    """Committed offsets per group, persisted in ``<directory>/tierlog-group-offsets.json``.

    Args:
        directory: the first log dir (it must exist).

    Raises:
        CorruptCheckpointError: the file exists but cannot be parsed; the message names it.
            The broker does not start over a file it cannot read rather than forget commits.
    """

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / OFFSETS_FILE
        self._state_lock = threading.Lock()
        self._write_lock = threading.Lock()
        # group -> (topic, partition) -> offset
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._version = 0
        self._persisted = 0
        self._load()

    # -- persistence -----------------------------------------------------------------------
    def _load(self) -> None:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return
        try:
            doc = json.loads(text)
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {doc.get('version')!r}")
            for group, topics in doc["groups"].items():
                offsets: dict[TopicPartition, CommittedOffset] = {}
                for topic, partitions in topics.items():
                    for partition, entry in partitions.items():
                        offsets[(topic, int(partition))] = CommittedOffset.from_json(entry)
                if offsets:
                    self._groups[group] = offsets
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptCheckpointError(f"cannot read committed offsets {self.path}: {e}") from e
        log.info("loaded committed offsets of %d groups from %s", len(self._groups), self.path)

    def _document(self) -> dict[str, object]:
        groups: dict[str, dict[str, dict[str, object]]] = {}
        for group, offsets in sorted(self._groups.items()):
            topics: dict[str, dict[str, object]] = {}
            for (topic, partition), committed in sorted(offsets.items()):
                topics.setdefault(topic, {})[str(partition)] = committed.to_json()
            groups[group] = topics
        return {"version": FORMAT_VERSION, "groups": groups}

    def flush(self, version: int | None = None) -> None:
        """Write the current state unless a state at least ``version`` new is on disk.

        Blocking (fsync): call it from an executor thread when on the event loop.
        ``None`` writes whatever is newer than the last write.

        Raises:
            OSError: the write failed; the previous file is unchanged.
        """
        with self._write_lock:
            with self._state_lock:
                target = self._version if version is None else version
                if self._persisted >= target:
                    return
                current = self._version
                data = json.dumps(self._document(), indent=1).encode("utf-8")
            atomic_write(self.path, data)
            self._persisted = current

    # -- changes ---------------------------------------------------------------------------
    def commit(self, group: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> int:
        """Record commits in memory; returns the version to pass to :meth:`flush`.

        Idempotent: committing the same values again changes nothing but the timestamp.
        """
        with self._state_lock:
            if offsets:
                self._groups.setdefault(group, {}).update(offsets)
                self._version += 1
            return self._version

    def delete_topic(self, topic: str) -> int:
        """Forget every group's offsets of a deleted topic; returns the version to flush.

        Groups left without offsets are forgotten too (as Kafka drops an empty simple group).
        """
        with self._state_lock:
            changed = False
            for group in list(self._groups):
                offsets = self._groups[group]
                doomed = [tp for tp in offsets if tp[0] == topic]
                for tp in doomed:
                    del offsets[tp]
                changed = changed or bool(doomed)
                if not offsets:
                    del self._groups[group]
            if changed:
                self._version += 1
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
        offset ``retention_ms`` after its commit.
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
                for tp in doomed:
                    del offsets[tp]
                dropped += len(doomed)
                if not offsets:
                    del self._groups[group]
            if dropped:
                self._version += 1
            return self._version, dropped

    def delete_group(self, group: str) -> int:
        """Forget a group's offsets (DeleteGroups); returns the version to flush."""
        with self._state_lock:
            if self._groups.pop(group, None) is not None:
                self._version += 1
            return self._version

    # -- queries ---------------------------------------------------------------------------
    def has_group(self, group: str) -> bool:
        """Whether the group is known (it has committed offsets)."""
        with self._state_lock:
            return group in self._groups

    def groups(self) -> list[str]:
        with self._state_lock:
            return sorted(self._groups)

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
