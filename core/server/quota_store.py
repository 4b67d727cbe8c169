"""Where client quota configs live: the store interface, and the local file store.

A single broker keeps them in ``client-quotas.json`` in its first log dir, replaced
atomically (``core.fs.atomic_write``) on every change. The file holds, for each entity, the
content ZooKeeper-mode Kafka keeps in that entity's ``/config/<path>`` znode (codecs of
``core.server.zookeeper.topic_data``), keyed by that path::

    {"version":1,"entities":{
      "users/alice":{"version":1,"config":{"producer_byte_rate":"1048576"}},
      "users/alice/clients/c1":{"version":1,"config":{"request_percentage":"25.0"}},
      "clients/<default>":{"version":1,"config":{"consumer_byte_rate":"2097152"}}}}

so that moving the quotas to ZooKeeper is a copy of each entry to its znode.

A cluster keeps them in ZooKeeper instead (a ``ClientQuotaStore`` over
``core.server.zookeeper``): ``save`` writes each entity's znode with ``encode_config``
(deleting it when its config empties) and then one ``/config/changes/config_change_``
notification per entity (``encode_config_change(entity_path)``); every broker watches the
notifications and hands the named entity's new config to ``ClientQuotas.apply``, which is
what a local alteration calls too.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from core.errors import CoreError
from core.fs import atomic_write
from core.server.quota_entity import QuotaEntity, entity_of_path, entity_path, stored_text
from core.server.zookeeper.errors import ZkDataError
from core.server.zookeeper.topic_data import decode_config, encode_config

log = logging.getLogger(__name__)

QUOTA_FILE = "client-quotas.json"
FILE_VERSION = 1

Configs = dict[QuotaEntity, dict[str, float]]


class QuotaStoreError(CoreError):
    """The stored quota configs cannot be read (a damaged file): the broker does not start
    rather than serve without them."""


class ClientQuotaStore(Protocol):
    """Durable client quota configs. Both methods block: call them off the event loop."""

    def load(self) -> Configs:
        """Every entity's config."""
        ...

    def save(self, changes: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Replace the config of each entity in ``changes`` (an empty one deletes the
        entity), durably, all or nothing where the store allows it.

        Raises:
            OSError: the change could not be made durable; nothing was applied.
        """
        ...


class LocalQuotaStore:
    """The quota configs of a single broker, in ``<dir>/client-quotas.json``."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / QUOTA_FILE
        self._configs: Configs = {}
        self._lock = threading.Lock()

    def load(self) -> Configs:
        """Read the file (none yet: no quotas).

        Raises:
            QuotaStoreError: the file is not what ``save`` writes; the message names it.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            configs: Configs = {}
        else:
            configs = self._decode(data)
        with self._lock:
            self._configs = {e: dict(v) for e, v in configs.items()}
        return configs

    def _decode(self, data: bytes) -> Configs:
        what = str(self.path)
        try:
            document = json.loads(data)
            if not isinstance(document, dict) or document.get("version") != FILE_VERSION:
                raise ValueError(f"expected a version {FILE_VERSION} object")
            entities = document.get("entities")
            if not isinstance(entities, dict):
                raise ValueError("'entities' is not an object")
            configs: Configs = {}
            for path, znode in entities.items():
                entity = entity_of_path(path)
                config = decode_config(json.dumps(znode).encode(), f"{what}: {path}")
                configs[entity] = {k: float(v) for k, v in config.items()}
            return configs
        except (ValueError, ZkDataError) as e:
            raise QuotaStoreError(f"cannot read the client quotas in {what}: {e}") from e

    def save(self, changes: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        with self._lock:
            updated = dict(self._configs)
            for entity, values in changes.items():
                if values:
                    updated[entity] = dict(values)
                else:
                    updated.pop(entity, None)
            atomic_write(self.path, self._encode(updated))
            self._configs = updated

    @staticmethod
    def _encode(configs: Configs) -> bytes:
        entities = {}
        for entity in sorted(configs, key=entity_path):
            values = configs[entity]
            text = {k: stored_text(k, values[k]) for k in sorted(values)}
            entities[entity_path(entity)] = json.loads(encode_config(text))
        document = {"version": FILE_VERSION, "entities": entities}
        return (json.dumps(document, indent=1) + os.linesep).encode()
