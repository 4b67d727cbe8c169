"""The client quota configs of a cluster, in ZooKeeper (Kafka's ZooKeeper mode).

Each entity's quotas are entries of its znode: ``/config/users/<user>``,
``/config/clients/<client id>``, ``/config/users/<user>/clients/<client id>`` (sanitized
names, ``<default>`` for the defaults) and ``/config/ips/<ip>``, in Kafka's format
(``{"version":1,"config":{"producer_byte_rate":"1048576"}}``). A user's znode also holds its
SCRAM credentials, which a quota change keeps. AlterClientQuotas on any broker writes each
entity (``ZkEntityConfigs.update``) and a ``/config/changes`` notification naming its path;
every broker then reads the entity again and applies it (``reload`` hands it to
``ClientQuotas.apply``), so every broker throttles with the same limits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from core.server.quota_entity import (
    QUOTA_KEYS,
    QuotaEntity,
    entity_of_path,
    entity_path,
    stored_text,
)
from core.server.quota_store import Configs
from core.server.zk_entity_configs import ZkEntityConfigs
from core.server.zookeeper import paths
from core.server.zookeeper.errors import ZkError

log = logging.getLogger(__name__)

ApplyQuota = Callable[[QuotaEntity, Mapping[str, float]], None]


def quota_values(config: Mapping[str, str], what: str) -> dict[str, float]:
    """The quota entries of an entity's config (SCRAM entries and unknown keys left out)."""
    out = {}
    for key, text in config.items():
        if key not in QUOTA_KEYS:
            continue
        try:
            out[key] = float(text)
        except ValueError:
            log.error("quota %s of %s is not a number: %r; ignored", key, what, text)
    return out


class ZkQuotaStore:
    """A ``ClientQuotaStore`` over ZooKeeper, for the brokers of a cluster."""

    def __init__(self, configs: ZkEntityConfigs) -> None:
        self._configs = configs

    # -- the store interface (blocking: executor threads) ------------------------------------
    def load(self) -> Configs:
        return self._configs.call(self._load)

    def save(self, changes: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Each entity in its own conditional write (ZooKeeper has no write of several
        znodes that keeps the others' SCRAM entries: Kafka writes them one by one too).

        Raises:
            OSError: ZooKeeper refused a write; entities written before it stay written.
        """
        for entity, values in changes.items():
            try:
                self._configs.call(lambda e=entity, v=values: self._save_one(e, v))
            except (ZkError, TimeoutError) as e:
                raise OSError(f"cannot store the quotas of {entity_path(entity)}: {e}") from e

    # -- on the event loop -----------------------------------------------------------------
    async def _load(self) -> Configs:
        configs: Configs = {}
        for entity_type in (paths.CONFIG_USERS, paths.CONFIG_CLIENTS, paths.CONFIG_IPS):
            for path in await self._configs.entity_paths(entity_type):
                values = await self.read(path)
                if values:
                    configs[entity_of_path(path)] = values
        return configs

    async def read(self, path: str) -> dict[str, float]:
        """The quotas of the entity at ``/config/<path>``."""
        config, _ = await self._configs.read(path)
        return quota_values(config, path)

    async def reload(self, path: str, apply: ApplyQuota) -> None:
        """A change notification for ``path``: apply its quotas as ZooKeeper has them."""
        try:
            entity = entity_of_path(path)
        except ValueError:
            log.warning("config change of %s is not a quota entity; ignored", path)
            return
        apply(entity, await self.read(path))

    async def _save_one(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        def apply(config: dict[str, str]) -> dict[str, str]:
            kept = {k: v for k, v in config.items() if k not in QUOTA_KEYS}
            return {**kept, **{k: stored_text(k, v) for k, v in values.items()}}

        await self._configs.update(entity_path(entity), apply)
