"""Per-topic log configuration with Kafka's key names, defaults and validation rules."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from core.config import (
    INT32_MAX,
    INT64_MAX,
    ConfigDef,
    ConfigKey,
    ConfigType,
    at_least,
    between,
    format_value,
    one_of,
)
from core.errors import InvalidConfigError

DAY_MS = 24 * 60 * 60 * 1000
# Kafka's LogConfig.DEFAULT_MAX_MESSAGE_BYTES: 1 MiB plus the batch overhead.
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12

# Kafka's sentinel for the local.retention.* keys: "use the value of retention.*".
LOCAL_RETENTION_SAME_AS_TOTAL = -2


def _retention_at_least_minus_one(name: str, value: Any) -> None:
    at_least(-1)(name, value)


def _local_retention(name: str, value: Any) -> None:
    at_least(LOCAL_RETENTION_SAME_AS_TOTAL)(name, value)


def _gzip_level(name: str, value: Any) -> None:
    # Kafka's GzipCompression validator: 1..9, or -1 (Deflater.DEFAULT_COMPRESSION).
    if value != -1 and not 1 <= value <= 9:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration {name}: Value must be between 1 and 9 "
            "or equal to -1"
        )


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def _throttled_replicas(name: str, value: Any) -> None:
    # Kafka's ThrottledReplicaListValidator: partition:broker entries, or the literal *.
    entries = [str(v).strip() for v in value]
    if entries == ["*"] or all(_THROTTLED_REPLICA.fullmatch(e) for e in entries):
        return
    raise InvalidConfigError(
        f"Invalid value {','.join(entries)} for configuration {name}: {name} must be the "
        "literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


L = ConfigType.LONG
I = ConfigType.INT  # noqa: E741 - a one-letter alias keeps the table below readable

TOPIC_CONFIG = ConfigDef(
    [
        # Minimum 14 bytes (a legacy record's overhead) as in Kafka 3.x; Kafka 4 raised the
        # topic minimum to 1 MiB, which would make the tests' small segments impossible.
        ConfigKey(
            "segment.bytes",
            I,
            1024 * 1024 * 1024,
            "Segment file size.",
            at_least(14),
            "log.segment.bytes",
        ),
        ConfigKey(
            "segment.ms",
            L,
            7 * DAY_MS,
            "Roll a segment after this long.",
            at_least(1),
            "log.roll.ms",
        ),
        ConfigKey(
            "segment.jitter.ms",
            L,
            0,
            "Random jitter subtracted from segment.ms.",
            at_least(0),
            "log.roll.jitter.ms",
        ),
        ConfigKey(
            "segment.index.bytes",
            I,
            10 * 1024 * 1024,
            "Size of the offset and time indexes.",
            at_least(4),
            "log.index.size.max.bytes",
        ),
        ConfigKey(
            "index.interval.bytes",
            I,
            4096,
            "Bytes between offset index entries.",
            at_least(0),
            "log.index.interval.bytes",
        ),
        ConfigKey(
            "retention.ms",
            L,
            7 * DAY_MS,
            "Delete data older than this; -1 keeps it.",
            _retention_at_least_minus_one,
            "log.retention.ms",
        ),
        ConfigKey(
            "retention.bytes",
            L,
            -1,
            "Delete the oldest segments above this size; -1 keeps all.",
            None,
            "log.retention.bytes",
        ),
        ConfigKey(
            "local.retention.ms",
            L,
            LOCAL_RETENTION_SAME_AS_TOTAL,
            "With tiering, how long segments stay on local disk; -2 means retention.ms.",
            _local_retention,
            "log.local.retention.ms",
        ),
        ConfigKey(
            "local.retention.bytes",
            L,
            LOCAL_RETENTION_SAME_AS_TOTAL,
            "With tiering, local size bound; -2 means retention.bytes.",
            _local_retention,
            "log.local.retention.bytes",
        ),
        ConfigKey(
            "remote.storage.enable",
            ConfigType.BOOLEAN,
            False,
            "Tier this topic's segments to remote storage (KIP-405).",
        ),
        ConfigKey(
            "remote.log.copy.disable",
            ConfigType.BOOLEAN,
            False,
            "Stop copying new segments to remote storage (KIP-950).",
        ),
        ConfigKey(
            "remote.log.delete.on.disable",
            ConfigType.BOOLEAN,
            False,
            "Delete remote data when tiering is turned off (KIP-950).",
        ),
        ConfigKey(
            "flush.messages",
            L,
            INT64_MAX,
            "fsync after this many messages.",
            at_least(1),
            "log.flush.interval.messages",
        ),
        ConfigKey(
            "flush.ms",
            L,
            INT64_MAX,
            "fsync at least this often.",
            at_least(0),
            "log.flush.interval.ms",
        ),
        ConfigKey(
            "max.message.bytes",
            I,
            DEFAULT_MAX_MESSAGE_BYTES,
            "Largest record batch accepted.",
            at_least(0),
            "message.max.bytes",
        ),
        ConfigKey(
            "file.delete.delay.ms",
            L,
            60_000,
            "Delay before deleted segment files are removed.",
            at_least(0),
            "log.segment.delete.delay.ms",
        ),
        ConfigKey(
            "message.timestamp.type",
            ConfigType.STRING,
            "CreateTime",
            "CreateTime or LogAppendTime.",
            one_of("CreateTime", "LogAppendTime"),
            "log.message.timestamp.type",
        ),
        # KIP-937's bounds on CreateTime timestamps, with Kafka 4's defaults (KIP-1030 set
        # after.max.ms to one hour). Kafka 4 removed message.timestamp.difference.max.ms.
        ConfigKey(
            "message.timestamp.before.max.ms",
            L,
            INT64_MAX,
            "With CreateTime, refuse records whose timestamp is more than this before the "
            "broker's time (INVALID_TIMESTAMP, naming the records).",
            at_least(0),
            "log.message.timestamp.before.max.ms",
        ),
        ConfigKey(
            "message.timestamp.after.max.ms",
            L,
            3_600_000,
            "With CreateTime, refuse records whose timestamp is more than this after the "
            "broker's time (INVALID_TIMESTAMP, naming the records).",
            at_least(0),
            "log.message.timestamp.after.max.ms",
        ),
        ConfigKey(
            "cleanup.policy",
            ConfigType.LIST,
            ["delete"],
            "delete and/or compact.",
            one_of("delete", "compact"),
            "log.cleanup.policy",
        ),
        # The compaction keys (cleanup.policy=compact), with Kafka's defaults.
        ConfigKey(
            "delete.retention.ms",
            L,
            DAY_MS,
            "How long a compacted topic keeps tombstones after their first cleaning.",
            at_least(0),
            "log.cleaner.delete.retention.ms",
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio",
            ConfigType.DOUBLE,
            0.5,
            "Clean a compacted log once this share of it is dirty (not yet cleaned).",
            between(0.0, 1.0),
            "log.cleaner.min.cleanable.ratio",
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            L,
            0,
            "A record stays uncompacted at least this long after it was written.",
            at_least(0),
            "log.cleaner.min.compaction.lag.ms",
        ),
        ConfigKey(
            "max.compaction.lag.ms",
            L,
            INT64_MAX,
            "A record becomes eligible for compaction at most this long after it was "
            "written, whatever the dirty ratio.",
            at_least(1),
            "log.cleaner.max.compaction.lag.ms",
        ),
        ConfigKey(
            "min.insync.replicas",
            I,
            1,
            "The in-sync replicas an acks=all produce needs: with fewer in the ISR it is "
            "refused with NOT_ENOUGH_REPLICAS before the append, or answered "
            "NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank while it waited. acks=1 "
            "and acks=0 ignore it. A broker running alone has an ISR of one.",
            at_least(1),
            "min.insync.replicas",
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            ConfigType.BOOLEAN,
            False,
            "Whether the controller may make a replica outside the ISR the leader when no "
            "in-sync replica is alive (the records it lacks are lost; the old leader "
            "truncates them when it returns). A broker running alone has no election.",
            None,
            "unclean.leader.election.enable",
        ),
        ConfigKey(
            "compression.type",
            ConfigType.STRING,
            "producer",
            "Kafka: 'producer' keeps batches as the producer compressed them; a codec name "
            "(or 'uncompressed') makes the broker recompress them. tierlog always keeps "
            "batches as sent, as 'producer' does.",
            one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
            "compression.type",
            inert=True,
        ),
        # KIP-390's levels, for the recompression compression.type would ask for.
        ConfigKey(
            "compression.gzip.level",
            I,
            -1,
            "Kafka: the gzip level (1-9, -1 for the codec's default) when compression.type=gzip "
            "makes the broker recompress. tierlog never recompresses (see compression.type).",
            _gzip_level,
            "compression.gzip.level",
            inert=True,
        ),
        ConfigKey(
            "compression.lz4.level",
            I,
            9,
            "Kafka: the lz4 level (1-17) when compression.type=lz4 makes the broker recompress. "
            "tierlog never recompresses (see compression.type).",
            between(1, 17),
            "compression.lz4.level",
            inert=True,
        ),
        ConfigKey(
            "compression.zstd.level",
            I,
            3,
            "Kafka: the zstd level (-131072 to 22) when compression.type=zstd makes the broker "
            "recompress. tierlog never recompresses (see compression.type).",
            between(-131072, 22),
            "compression.zstd.level",
            inert=True,
        ),
        ConfigKey(
            "preallocate",
            ConfigType.BOOLEAN,
            False,
            "Kafka: create each new segment file at segment.bytes. tierlog's segment files "
            "grow as they are written.",
            None,
            "log.preallocate",
            inert=True,
        ),
        # Topic-only keys (no broker default), set by Kafka's reassignment tool.
        ConfigKey(
            "leader.replication.throttled.replicas",
            ConfigType.LIST,
            [],
            "The replicas (partition:broker, or * for all) whose traffic as leaders to "
            "followers outside the ISR is bounded by the leader broker's "
            "leader.replication.throttled.rate (set by a reassignment with a throttle).",
            _throttled_replicas,
        ),
        ConfigKey(
            "follower.replication.throttled.replicas",
            ConfigType.LIST,
            [],
            "The replicas (partition:broker, or * for all) whose fetching as followers, "
            "while not caught up, is bounded by the follower broker's "
            "follower.replication.throttled.rate (set by a reassignment with a throttle).",
            _throttled_replicas,
        ),
    ]
)
del L, I


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The effective configuration of one partition log. Field names mirror Kafka's keys."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    local_retention_ms: int = LOCAL_RETENTION_SAME_AS_TOTAL
    local_retention_bytes: int = LOCAL_RETENTION_SAME_AS_TOTAL
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    file_delete_delay_ms: int = 60_000
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = INT64_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = DAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _validate_local_retention(self)

    @classmethod
    def from_props(
        cls, props: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None
    ) -> LogConfig:
        """Build from Kafka topic keys; ``defaults`` holds topic keys too (broker overrides).

        Raises:
            InvalidConfigError: an unknown key, an invalid value, or an inconsistent
                combination (local retention above total retention); the message names it.
        """
        values = TOPIC_CONFIG.parse(props, defaults=defaults)
        kwargs = {_field_name(k): v for k, v in values.items()}
        for key in TOPIC_CONFIG:
            if key.type is ConfigType.LIST:
                kwargs[_field_name(key.name)] = tuple(kwargs[_field_name(key.name)])
        return cls(**kwargs)

    def to_props(self) -> dict[str, str]:
        """Every key as a string, for persistence and DescribeConfigs."""
        return {
            key.name: format_value(key, _as_config_value(getattr(self, _field_name(key.name))))
            for key in TOPIC_CONFIG
        }

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        current = {k: _as_config_value(v) for k, v in self._by_key().items()}
        current.update(props)
        return LogConfig.from_props(current)

    def _by_key(self) -> dict[str, Any]:
        return {key.name: getattr(self, _field_name(key.name)) for key in TOPIC_CONFIG}

    @property
    def effective_local_retention_ms(self) -> int:
        if self.local_retention_ms == LOCAL_RETENTION_SAME_AS_TOTAL:
            return self.retention_ms
        return self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        if self.local_retention_bytes == LOCAL_RETENTION_SAME_AS_TOTAL:
            return self.retention_bytes
        return self.local_retention_bytes

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def max_index_entries_span(self) -> int:
        """Offsets one segment may span: relative offsets are int32 in the indexes."""
        return INT32_MAX


def _field_name(key: str) -> str:
    return key.replace(".", "_")


def _as_config_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


_FIELDS = {f.name for f in fields(LogConfig)}
assert {_field_name(k.name) for k in TOPIC_CONFIG} == _FIELDS, "LogConfig out of sync"


def _validate_local_retention(cfg: LogConfig) -> None:
    # Kafka's LogConfig.validateRemoteStorageRetention rules: the local bound may not exceed
    # the total bound, and an unbounded local retention needs an unbounded total.
    for local_name, local, total_name, total in (
        ("local.retention.ms", cfg.local_retention_ms, "retention.ms", cfg.retention_ms),
        (
            "local.retention.bytes",
            cfg.local_retention_bytes,
            "retention.bytes",
            cfg.retention_bytes,
        ),
    ):
        if local == LOCAL_RETENTION_SAME_AS_TOTAL:
            continue
        if local == -1 and total != -1:
            raise InvalidConfigError(
                f"Invalid value -1 for configuration {local_name}: Value must not be -1 as "
                f"{total_name} value is set as {total}."
            )
        if total != -1 and local > total:
            raise InvalidConfigError(
                f"Invalid value {local} for configuration {local_name}: Value must not be "
                f"more than {total_name} property value: {total}"
            )
    if cfg.remote_storage_enable and cfg.compact:
        raise InvalidConfigError(
            "Invalid value compact for configuration cleanup.policy: remote log storage is "
            "only supported for topics with cleanup.policy=delete"
        )
