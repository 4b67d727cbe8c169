"""The RemoteLogManager's broker settings, each declared once with Kafka's key and default.

Kafka's ``RemoteLogManagerConfig`` defines the same keys; values come from the broker's
properties (strings) or from Python values in tests. The keys are declared with core's
``ConfigDef`` like every other config in tierlog; ``RemoteLogManagerConfig.from_props``
raises ``ValueError`` naming the key for an unparsable or out-of-range value.

KIP-405 named two keys that Kafka shipped under other names. Configs written from the KIP
still start: ``DEPRECATED_ALIASES`` maps each old name to Kafka's (converting the unit), and
``from_props`` logs a warning naming both. When both are set the new name wins and the old
one is ignored, with a warning too, as Kafka does with its own renamed keys (the old
``remote.log.manager.thread.pool.size`` only fills in for
``remote.log.manager.copier.thread.pool.size`` when that one is not set).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from core.config import INT64_MAX, ConfigDef, ConfigKey, ConfigType, at_least, between
from core.errors import InvalidConfigError

log = logging.getLogger(__name__)

LONG_MAX = INT64_MAX
_L, _D = ConfigType.LONG, ConfigType.DOUBLE

RLM_CONFIG = ConfigDef(
    [
        ConfigKey("remote.log.manager.task.interval.ms", _L, 30_000,
                  "Interval between runs of each partition's copy, expiration and follower tasks.",
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
                  "Threads expiring remote segments (on followers: tracking the leader's copies).",
                  at_least(1)),
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
        # KIP-405's remover of deleted topics' remote data; Kafka has no key for it.
        ConfigKey("remote.partition.remover.task.interval.ms", _L, 3_600_000,
                  "Interval between runs deleting the remote data of deleted tiered topics; "
                  "a run also starts as soon as a deletion is marked or found unfinished "
                  "(tierlog's; named in KIP-405).", at_least(1)),
    ]
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DeprecatedAlias:
    """An old key name accepted for ``new``: ``new = old * scale``."""

    old: str
    new: str
    scale: int
    why: str


DEPRECATED_ALIASES = (
    DeprecatedAlias("remote.log.index.file.cache.total.size.mb",
                    "remote.log.index.file.cache.total.size.bytes", 1024 * 1024,
                    "KIP-405's name; Kafka takes the size in bytes (MB x 1048576)"),
    DeprecatedAlias("remote.log.manager.task.retry.interval.ms",
                    "remote.log.manager.task.retry.backoff.ms", 1,
                    "KIP-405's name of the first retry delay"),
)  # fmt: skip
_ALIAS_KEYS = ConfigDef(ConfigKey(a.old, _L, None, a.why, at_least(1)) for a in DEPRECATED_ALIASES)


def resolve_deprecated(props: Mapping[str, Any]) -> dict[str, Any]:
    """``props`` with each deprecated name replaced by Kafka's (value converted), warning
    about each; the new name wins when both are given.

    Raises:
        ValueError: an old key's value does not parse or is out of range (names the old key).
    """
    out = dict(props)
    for alias in DEPRECATED_ALIASES:
        if alias.old not in out:
            continue
        raw = out.pop(alias.old)
        if alias.new in out:
            log.warning(
                "%s is deprecated and ignored: %s is set too and wins (%s)",
                alias.old,
                alias.new,
                alias.why,
            )
            continue
        try:
            value = _ALIAS_KEYS.parse_value(alias.old, raw)
        except InvalidConfigError as e:
            raise ValueError(str(e)) from e
        if value * alias.scale > LONG_MAX:
            raise ValueError(
                f"Invalid value {raw} for configuration {alias.old}: "
                f"{alias.new} would exceed {LONG_MAX}"
            )
        out[alias.new] = value * alias.scale
        log.warning(
            "%s is deprecated: use %s (%s); read as %s=%d",
            alias.old,
            alias.new,
            alias.why,
            alias.new,
            out[alias.new],
        )
    return out


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
    remote_partition_remover_task_interval_ms: int = 3_600_000

    @classmethod
    def from_props(cls, props: Mapping[str, Any] | None = None) -> RemoteLogManagerConfig:
        """Parse the known keys of ``props`` (other keys are ignored: they belong elsewhere).
        Deprecated names are read as their new ones, with a warning (``resolve_deprecated``).

        Raises:
            ValueError: a value that does not parse or is out of range; the message names
                the key.
        """
        props = resolve_deprecated(props or {})
        values = {
            key.name.replace(".", "_"): _parse(key.name, props[key.name])
            for key in RLM_CONFIG
            if key.name in props
        }
        return cls(**values)

    @staticmethod
    def keys() -> list[str]:
        """Every key ``from_props`` reads: the declared ones and the deprecated names."""
        return [key.name for key in RLM_CONFIG] + [a.old for a in DEPRECATED_ALIASES]

    def __post_init__(self) -> None:
        for f in fields(self):
            _parse(f.name.replace("_", "."), getattr(self, f.name))
