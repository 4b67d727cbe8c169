"""File names of a partition directory, as Kafka names them (LogFileUtils)."""

from __future__ import annotations

import re
from pathlib import Path

from core.topic_name import is_legal_topic_name

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
META_PROPERTIES = "meta.properties"

# Directories other layers keep in a log dir: neither partitions nor strays.
REMOTE_LOG_INDEX_CACHE_DIR = "remote-log-index-cache"  # Kafka's RemoteIndexCache.DIR_NAME
REMOTE_LOG_METADATA_SNAPSHOTS_DIR = "__remote_log_metadata_snapshots"  # rlmm's snapshots
KNOWN_NON_PARTITION_DIRS = frozenset(
    {REMOTE_LOG_INDEX_CACHE_DIR, REMOTE_LOG_METADATA_SNAPSHOTS_DIR}
)

MAX_PARTITION = (1 << 31) - 1

# Every pattern is used with fullmatch (a "$" anchor would also match before a final "\n")
# and spells its digits [0-9] (\d also matches non-ASCII digits, which int() accepts).
_OFFSET_NAME = re.compile(r"([0-9]{20})(\.[a-z]+)(\.(?:deleted|cleaned|swap))?")
# The partition number as Kafka writes it: no sign, no leading zero.
_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>0|[1-9][0-9]{0,9})", re.DOTALL)
# What PartitionLog.delete renames a partition dir to before removing it (Kafka's
# "<topic>-<partition>.<uuid without dashes>-delete").
_DELETED_DIR = re.compile(r"(?P<dir>.+)\.[0-9a-f]{32}-delete", re.DOTALL)


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded offset Kafka uses as the stem of segment files."""
    return f"{offset:020d}"


def segment_file(directory: Path, base_offset: int, suffix: str, extra: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{suffix}{extra}"


def parse_offset_file(name: str) -> tuple[int, str, str] | None:
    """``(offset, suffix, extra suffix)`` of a segment-style file name, or None."""
    m = _OFFSET_NAME.fullmatch(name)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), m.group(3) or ""


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` from a ``<topic>-<partition>`` directory name, or None.

    None unless the name is exactly what ``partition_dir_name`` makes of a legal topic name
    and a partition in 0..2^31-1, so that a directory this returns a partition for is one
    the broker could have created, and its topic can be written to the offset checkpoints.
    """
    m = _PARTITION_DIR.fullmatch(name)
    if m is None:
        return None
    topic, partition = m.group("topic"), int(m.group("partition"))
    if partition > MAX_PARTITION or not is_legal_topic_name(topic):
        return None
    return topic, partition


def deleted_dir_name(partition_dir: str, unique_id: str) -> str:
    """The name a partition dir is renamed to before it is removed (``unique_id``: 32 hex)."""
    return f"{partition_dir}.{unique_id}-delete"


def is_deleted_partition_dir(name: str) -> bool:
    """Whether ``name`` is a partition dir renamed for deletion (``deleted_dir_name``)."""
    m = _DELETED_DIR.fullmatch(name)
    return m is not None and parse_partition_dir(m.group("dir")) is not None
