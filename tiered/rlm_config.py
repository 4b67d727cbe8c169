"""The RemoteLogManager's broker settings, each declared once with Kafka's key and default.

Kafka's ``RemoteLogManagerConfig`` defines the same keys; values come from the broker's
properties (strings) or from Python values in tests. The keys are declared with core's
``ConfigDef`` like every other config in tierlog; ``RemoteLogManagerConfig.from_props``
raises ``ValueError`` naming the key for an unparsable or out-of-range value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from core.config import INT64_MAX, ConfigDef, ConfigKey, ConfigType, at_least, between
from core.errors import InvalidConfigError

LONG_MAX = INT64_MAX
_L, _D = ConfigType.LONG, ConfigType.DOUBLE

RLM_CONFIG = ConfigDef(
    [
        ConfigKey("remote.log.manager.task.interval.ms", _L, 30_000,
                  "Interval between runs of each partition's copy and expiration tasks.",
                  at_least(1)),
        ConfigKey("remote.log.manager.task.retry.backoff.ms", _L, 500,
                  "First delay before a failed task runs again.", at_least(1)),
        ConfigKey("remote.log.manager.task.retry.backoff.max.ms", _L, 30_000,
                  "Upper bound of the exponential retry delay.", at_least(1)),
        ConfigKey("remote.log.manager.task.retry.jitter", _D, 0.2,
                  "Relative random jitter added to retry delays.", between(0.0, 0.5)),
        ConfigKey("remote.log.manager.copier.thread.pool.size", _L, 10,
                  "Threads copying segments to remote storage.", at_least(1)),
        ConfigKey("remote.log.manager.expiration.thread.pool.size", _L, 10,
                  "Threads expiring remote segments.", at_least(1)),
        ConfigKey("remote.log.reader.threads", _L, 10,
                  "Threads serving remote fetches and remote ListOffsets.", at_least(1)),
        ConfigKey("remote.log.reader.max.pending.tasks", _L, 100,
                  "Remote reads queued or running before new ones are rejected.", at_least(1)),
        ConfigKey("remote.fetch.max.wait.ms", _L, 500,
                  "How long a fetch waits for the remote tier before timing out that partition.",
                  at_least(1)),
        ConfigKey("remote.log.manager.copy.max.bytes.per.second", _L, LONG_MAX,
                  "Broker-wide bound on bytes copied to remote storage per second.",
                  at_least(1)),
        ConfigKey("remote.log.manager.fetch.max.bytes.per.second", _L, LONG_MAX,
                  "Broker-wide bound on bytes read from remote storage per second.",
                  at_least(1)),
        ConfigKey("remote.log.index.file.cache.total.size.bytes", _L, 1024 * 1024 * 1024,
                  "Disk bound of the remote index cache.", at_least(1)),
    ]
)  # fmt: skip


def _parse(name: str, raw: Any) -> Any:
    if isinstance(raw, bool) or (
        isinstance(raw, float) and RLM_CONFIG[name].type is _L and not raw.is_integer()
    ):
        raise ValueError(
            f"Invalid value {raw!r} for configuration {name}: expected a "
            f"{RLM_CONFIG[name].type.value}"
        )
    try:
        return RLM_CONFIG.parse_value(name, raw)
    except InvalidConfigError as e:
        raise ValueError(str(e)) from e


@dataclass(frozen=True, slots=True)
class RemoteLogManagerConfig:
    """Parsed settings; field names are the keys with dots as underscores."""

    remote_log_manager_task_interval_ms: int = 30_000
    remote_log_manager_task_retry_backoff_ms: int = 500
    remote_log_manager_task_retry_backoff_max_ms: int = 30_000
    remote_log_manager_task_retry_jitter: float = 0.2
    remote_log_manager_copier_thread_pool_size: int = 10
    remote_log_manager_expiration_thread_pool_size: int = 10
    remote_log_reader_threads: int = 10
    remote_log_reader_max_pending_tasks: int = 100
    remote_fetch_max_wait_ms: int = 500
    remote_log_manager_copy_max_bytes_per_second: int = LONG_MAX
    remote_log_manager_fetch_max_bytes_per_second: int = LONG_MAX
    remote_log_index_file_cache_total_size_bytes: int = 1024 * 1024 * 1024

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None) -> RemoteLogManagerConfig:
        """Parse the known keys of ``props`` (other keys are ignored: they belong elsewhere).

        Raises:
            ValueError: a value that does not parse or is out of range; the message names
                the key.
        """
        props = props or {}
        values = {
            key.name.replace(".", "_"): _parse(key.name, props[key.name])
            for key in RLM_CONFIG
            if key.name in props
        }
        return cls(**values)

    @staticmethod
    def keys() -> list[str]:
        return [key.name for key in RLM_CONFIG]

    def __post_init__(self) -> None:
        for f in fields(self):
            _parse(f.name.replace("_", "."), getattr(self, f.name))
