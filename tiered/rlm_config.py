"""The RemoteLogManager's broker settings, each declared once with Kafka's key and default.

Kafka's ``RemoteLogManagerConfig`` defines the same keys; values come from the broker's
properties (strings) or from Python values in tests. ``RemoteLogManagerConfig.from_props``
raises ``ValueError`` naming the key for an unparsable or out-of-range value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class _Key:
    name: str
    kind: type
    default: Any
    valid: Callable[[Any], bool]
    rule: str
    doc: str


def _at_least(n: float) -> Callable[[Any], bool]:
    return lambda v: v >= n


_KEYS: dict[str, _Key] = {
    k.name: k
    for k in (
        _Key(
            "remote.log.manager.task.interval.ms", int, 30_000, _at_least(1), ">= 1",
            "Interval between runs of each partition's copy and expiration tasks.",
        ),
        _Key(
            "remote.log.manager.task.retry.backoff.ms", int, 500, _at_least(1), ">= 1",
            "First delay before a failed task runs again.",
        ),
        _Key(
            "remote.log.manager.task.retry.backoff.max.ms", int, 30_000, _at_least(1), ">= 1",
            "Upper bound of the exponential retry delay.",
        ),
        _Key(
            "remote.log.manager.task.retry.jitter", float, 0.2,
            lambda v: 0.0 <= v <= 0.5, "in [0, 0.5]",
            "Relative random jitter added to retry delays.",
        ),
        _Key(
            "remote.log.manager.copier.thread.pool.size", int, 10, _at_least(1), ">= 1",
            "Threads copying segments to remote storage.",
        ),
        _Key(
            "remote.log.manager.expiration.thread.pool.size", int, 10, _at_least(1), ">= 1",
            "Threads expiring remote segments.",
        ),
        _Key(
            "remote.log.reader.threads", int, 10, _at_least(1), ">= 1",
            "Threads serving remote fetches and remote ListOffsets.",
        ),
        _Key(
            "remote.log.reader.max.pending.tasks", int, 100, _at_least(1), ">= 1",
            "Remote reads queued or running before new ones are rejected.",
        ),
        _Key(
            "remote.fetch.max.wait.ms", int, 500, _at_least(1), ">= 1",
            "How long a fetch waits for the remote tier before timing out that partition.",
        ),
        _Key(
            "remote.log.manager.copy.max.bytes.per.second", int, LONG_MAX, _at_least(1),
            ">= 1", "Broker-wide bound on bytes copied to remote storage per second.",
        ),
        _Key(
            "remote.log.manager.fetch.max.bytes.per.second", int, LONG_MAX, _at_least(1),
            ">= 1", "Broker-wide bound on bytes read from remote storage per second.",
        ),
        _Key(
            "remote.log.index.file.cache.total.size.bytes", int, 1024 * 1024 * 1024,
            _at_least(1), ">= 1", "Disk bound of the remote index cache.",
        ),
    )
}  # fmt: skip


def _parse(key: _Key, raw: Any) -> Any:
    try:
        if key.kind is int:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            value: Any = int(raw)
        else:
            value = float(raw)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"Invalid value {raw!r} for configuration {key.name}: not a {key.kind.__name__}"
        ) from e
    if not key.valid(value):
        raise ValueError(f"Invalid value {raw!r} for configuration {key.name}: must be {key.rule}")
    return value


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
            name.replace(".", "_"): _parse(key, props[name])
            for name, key in _KEYS.items()
            if name in props
        }
        return cls(**values)

    @staticmethod
    def keys() -> list[str]:
        return list(_KEYS)

    def __post_init__(self) -> None:
        for f in fields(self):
            _parse(_KEYS[f.name.replace("_", ".")], getattr(self, f.name))
