"""SCRAM credentials managed at run time: what AlterUserScramCredentials changes,
DescribeUserScramCredentials lists and the SCRAM servers of every SASL listener check.

Two parts, as in Kafka:

- ``ScramCredentialCache`` (Kafka's CredentialCache): the credentials in memory, by mechanism
  and user, read by the SASL servers at each exchange (``core.server.sasl``); a change is
  seen by the next authentication, on every listener.
- a ``ScramCredentialStore``: where they are kept durably. The handlers
  (``core.server.scram_apis``) read and change credentials only through this interface.
  ``LocalScramCredentialStore`` keeps them in ``tierlog-scram-credentials.json`` in the
  first log dir, replaced atomically, and updates the cache once the file is durable.

The local file holds, per user, exactly what Kafka's ZooKeeper mode keeps in
``/config/users/<sanitized user>`` (``core.server.zookeeper.topic_data``)::

    {"version": 1, "users": {"alice": {"version": 1, "config": {
        "SCRAM-SHA-256": "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=8192"}}}}

User names are sanitized as Kafka's Sanitizer does (URL-encoding), so each entry can be
written to its znode as it is. Entries that are not SCRAM credentials (a user's quotas, in
Kafka) are kept unchanged. A store for a ZooKeeper cluster writes the znode (keeping its
other entries) and then a ``/config/changes`` notification (``users/<user>``); every broker
reloads that user's znode into its cache when it sees the notification, and loads every
user's at start, as Kafka's DynamicConfigManager does.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from core.errors import CoreError
from core.fs import atomic_write
from core.server.sasl import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential
from core.server.zookeeper.errors import ZkDataError
from core.server.zookeeper.paths import desanitize_entity_name, sanitize_entity_name
from core.server.zookeeper.topic_data import (
    decode_config,
    decode_scram_credential,
    encode_config,
    encode_scram_credential,
)

log = logging.getLogger(__name__)

CREDENTIALS_FILE = "tierlog-scram-credentials.json"
FORMAT_VERSION = 1
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)

# A user's credentials, by mechanism name.
UserCredentials = Mapping[str, ScramCredential]
# What an alteration does to one user: per mechanism, the new credential, or None to delete.
UserChange = Mapping[str, ScramCredential | None]


class ScramCredentialStoreError(CoreError):
    """The credentials cannot be read or written (the message names the file)."""


class ScramCredentialCache:
    """The credentials the SASL servers check (a ``core.server.sasl.ScramCredentialSource``).

    Thread-safe: replaced per user, read at each SCRAM exchange.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, UserCredentials] = {}

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def scram_users(self, mechanism: str) -> frozenset[str]:
        with self._lock:
            return frozenset(u for u, creds in self._users.items() if mechanism in creds)

    def set_user(self, user: str, credentials: UserCredentials) -> None:
        """Replace every credential of ``user`` (none: the user has no credential left)."""
        with self._lock:
            if credentials:
                self._users[user] = MappingProxyType(dict(credentials))
            else:
                self._users.pop(user, None)

    def set_all(self, users: Mapping[str, UserCredentials]) -> None:
        with self._lock:
            self._users = {u: MappingProxyType(dict(c)) for u, c in users.items() if c}


class ScramCredentialStore(Protocol):
    """Where run-time SCRAM credentials are kept; the handlers' only way to them."""

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        """Every user with at least one credential, with its credentials by mechanism."""
        ...

    def user(self, name: str) -> dict[str, ScramCredential]:
        """One user's credentials by mechanism (empty: none)."""
        ...

    def alter(self, changes: Mapping[str, UserChange]) -> dict[str, Exception | None]:
        """Apply each user's change, durably, then to the cache; per user, None or the
        error that kept its change from being stored (the other users' still apply).
        Blocking: call it from an executor thread."""
        ...


class LocalScramCredentialStore:
    """The credentials of a single broker, in ``<directory>/tierlog-scram-credentials.json``.

    Args:
        directory: the first log dir.
        cache: updated at load and after every durable change.

    Raises:
        ScramCredentialStoreError: the file exists and cannot be read (the broker does not
            start rather than forget or misread credentials).
    """

    def __init__(self, directory: Path, cache: ScramCredentialCache) -> None:
        self.path = Path(directory) / CREDENTIALS_FILE
        self.cache = cache
        self._lock = threading.Lock()
        # sanitized user name -> the user's config entries, as the znode holds them
        self._configs: dict[str, dict[str, str]] = self._load()
        cache.set_all(self.users())

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise ScramCredentialStoreError(f"cannot read {self.path}: {e}") from e
        try:
            doc = json.loads(text)
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {doc.get('version')!r}")
            configs = {}
            for sanitized, znode in doc["users"].items():
                what = f"user {desanitize_entity_name(sanitized)}"
                config = decode_config(json.dumps(znode).encode("utf-8"), what)
                for mechanism in SCRAM_MECHANISMS:
                    if mechanism in config:
                        decode_scram_credential(config[mechanism])  # fails now, not at login
                configs[sanitized] = config
            return configs
        except (ValueError, KeyError, TypeError, AttributeError, ZkDataError) as e:
            raise ScramCredentialStoreError(
                f"cannot read SCRAM credentials {self.path}: {e}"
            ) from e

    def _save(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        doc = {
            "version": FORMAT_VERSION,
            "users": {
                name: json.loads(encode_config(config))
                for name, config in sorted(configs.items())
                if config
            },
        }
        atomic_write(self.path, json.dumps(doc, indent=1).encode("utf-8"))

    @staticmethod
    def _credentials(config: Mapping[str, str]) -> dict[str, ScramCredential]:
        return {m: decode_scram_credential(config[m]) for m in SCRAM_MECHANISMS if m in config}

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        with self._lock:
            found = {
                desanitize_entity_name(name): self._credentials(config)
                for name, config in self._configs.items()
            }
        return {user: creds for user, creds in sorted(found.items()) if creds}

    def user(self, name: str) -> dict[str, ScramCredential]:
        with self._lock:
            return self._credentials(self._configs.get(sanitize_entity_name(name), {}))

    def alter(self, changes: Mapping[str, UserChange]) -> dict[str, Exception | None]:
        """Every user's change in one atomic replacement of the file: all are stored, or
        none (each user then answers the write's error)."""
        with self._lock:
            configs = {name: dict(config) for name, config in self._configs.items()}
            for user, change in changes.items():
                config = configs.setdefault(sanitize_entity_name(user), {})
                for mechanism, credential in change.items():
                    if credential is None:
                        config.pop(mechanism, None)
                    else:
                        config[mechanism] = encode_scram_credential(credential)
            try:
                self._save(configs)
            except OSError as e:
                log.error("cannot store SCRAM credentials in %s: %s", self.path, e)
                error = ScramCredentialStoreError(f"cannot store SCRAM credentials: {e}")
                return dict.fromkeys(changes, error)
            self._configs = {name: config for name, config in configs.items() if config}
            for user in changes:
                self.cache.set_user(
                    user, self._credentials(self._configs.get(sanitize_entity_name(user), {}))
                )
        return dict.fromkeys(changes)
