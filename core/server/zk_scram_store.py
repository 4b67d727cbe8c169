"""The SCRAM credentials of a cluster, in ZooKeeper (Kafka's ZooKeeper mode).

Each user's credentials are entries of its ``/config/users/<sanitized user>`` znode, in
Kafka's format (``"SCRAM-SHA-256": "salt=<b64>,stored_key=<b64>,server_key=<b64>,
iterations=8192"``), beside its quotas, which a change keeps. AlterUserScramCredentials on
any broker writes the znode (a conditional write, ``ZkEntityConfigs.update``) and a
``/config/changes`` notification naming ``users/<user>``; every broker reloads that user into
its ``ScramCredentialCache`` when it sees the notification (``reload``), so the user can
authenticate on every broker. A broker loads every user's credentials before its listeners
accept connections. DescribeUserScramCredentials answers from the cache, which follows
ZooKeeper.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from core.server.sasl import ScramCredential
from core.server.scram_credentials import (
    SCRAM_MECHANISMS,
    ScramCredentialCache,
    ScramCredentialStoreError,
    UserChange,
)
from core.server.zk_entity_configs import ZkEntityConfigs
from core.server.zookeeper import paths
from core.server.zookeeper.errors import ZkError
from core.server.zookeeper.paths import desanitize_entity_name, sanitize_entity_name
from core.server.zookeeper.topic_data import decode_scram_credential, encode_scram_credential

log = logging.getLogger(__name__)


def _credentials(config: Mapping[str, str], what: str) -> dict[str, ScramCredential]:
    out = {}
    for mechanism in SCRAM_MECHANISMS:
        if mechanism in config:
            try:
                out[mechanism] = decode_scram_credential(config[mechanism])
            except (ValueError, ZkError) as e:
                log.error("unreadable %s credential of %s ignored: %s", mechanism, what, e)
    return out


class ZkScramCredentialStore:
    """A ``ScramCredentialStore`` over ZooKeeper, for the brokers of a cluster."""

    def __init__(self, configs: ZkEntityConfigs, cache: ScramCredentialCache) -> None:
        self._configs = configs
        self.cache = cache

    # -- on the event loop -----------------------------------------------------------------
    async def load(self) -> None:
        """Every user's credentials into the cache (at start, before serving)."""
        users = {}
        for path in await self._configs.entity_paths(paths.CONFIG_USERS):
            parts = path.split("/")
            if len(parts) != 2 or parts[1] == paths.DEFAULT_ENTITY:
                continue
            config, _ = await self._configs.read(path)
            users[desanitize_entity_name(parts[1])] = _credentials(config, path)
        self.cache.set_all(users)

    async def reload(self, sanitized_user: str) -> None:
        """A ``users/<user>`` change notification: the user's credentials again."""
        path = f"{paths.CONFIG_USERS}/{sanitized_user}"
        config, _ = await self._configs.read(path)
        self.cache.set_user(desanitize_entity_name(sanitized_user), _credentials(config, path))

    async def _alter_user(self, user: str, change: UserChange) -> None:
        def apply(config: dict[str, str]) -> dict[str, str]:
            for mechanism, credential in change.items():
                if credential is None:
                    config.pop(mechanism, None)
                else:
                    config[mechanism] = encode_scram_credential(credential)
            return config

        path = f"{paths.CONFIG_USERS}/{sanitize_entity_name(user)}"
        written = await self._configs.update(path, apply)
        self.cache.set_user(user, _credentials(written, path))

    # -- the store interface (blocking: executor threads) ------------------------------------
    def users(self) -> dict[str, dict[str, ScramCredential]]:
        found: dict[str, dict[str, ScramCredential]] = {}
        for mechanism in SCRAM_MECHANISMS:
            for user in self.cache.scram_users(mechanism):
                credential = self.cache.scram_credential(mechanism, user)
                if credential is not None:
                    found.setdefault(user, {})[mechanism] = credential
        return dict(sorted(found.items()))

    def user(self, name: str) -> dict[str, ScramCredential]:
        found = {}
        for mechanism in SCRAM_MECHANISMS:
            credential = self.cache.scram_credential(mechanism, name)
            if credential is not None:
                found[mechanism] = credential
        return found

    def alter(self, changes: Mapping[str, UserChange]) -> dict[str, Exception | None]:
        """Each user's change in its own znode write: per user, stored or the error."""
        out: dict[str, Exception | None] = {}
        for user, change in changes.items():
            try:
                self._configs.call(lambda u=user, c=change: self._alter_user(u, c))
                out[user] = None
            except (ZkError, TimeoutError) as e:
                log.error("cannot store the SCRAM credentials of %s: %s", user, e)
                out[user] = ScramCredentialStoreError(f"cannot store SCRAM credentials: {e}")
        return out
