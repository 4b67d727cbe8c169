"""File names of a partition directory, as Kafka names them (LogFileUtils)."""

from __future__ import annotations

import re
from pathlib import Path

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

_OFFSET_NAME = re.compile(r"^(\d{20})(\.[a-z]+)(\.(?:deleted|cleaned|swap))?$")
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded offset Kafka uses as the stem of segment files."""
    return f"{offset:020d}"


def segment_file(directory: Path, base_offset: int, suffix: str, extra: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{suffix}{extra}"


def parse_offset_file(name: str) -> tuple[int, str, str] | None:
    """``(offset, suffix, extra suffix)`` of a segment-style file name, or None."""
    m = _OFFSET_NAME.match(name)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), m.group(3) or ""


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` from a ``<topic>-<partition>`` directory name, or None."""
    m = _PARTITION_DIR.match(name)
    if m is None:
        return None
    return m.group("topic"), int(m.group("partition"))
