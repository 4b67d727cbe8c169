"""The RSM plugin a tool opens from broker properties (``remote.log.storage.manager.class.name``
and ``rsm.config.*``), as the broker configures it: a broker's ``server.properties`` works as
it is, and so does a file holding only those keys."""

from __future__ import annotations

from collections.abc import Mapping

from core.server.config import BROKER_CONFIG
from rsm_plugins.base import ObjectStoreRemoteStorageManager
from tiered.api import (
    RSM_CLASS_NAME,
    RSM_CONFIG_PREFIX,
    RemoteStorageError,
    RemoteStorageManager,
    load_plugin,
    prefixed_configs,
)


def open_object_store_rsm(props: Mapping[str, str]) -> ObjectStoreRemoteStorageManager:
    """The configured plugin named by ``props`` (default: the broker's default plugin).

    Raises:
        RemoteStorageError: the plugin cannot be loaded or configured (naming the key), or
            it is not an object-store plugin of this project's layout, which the tools
            need to list and read the bucket.
    """
    class_name = props.get(RSM_CLASS_NAME) or str(BROKER_CONFIG[RSM_CLASS_NAME].default)
    rsm = load_plugin(class_name, RemoteStorageManager, key=RSM_CLASS_NAME)
    if not isinstance(rsm, ObjectStoreRemoteStorageManager):
        raise RemoteStorageError(
            f"{RSM_CLASS_NAME}={class_name} is not an object-store plugin "
            "(rsm_plugins.base.ObjectStoreRemoteStorageManager): its bucket cannot be listed"
        )
    try:
        rsm.configure(prefixed_configs(props, RSM_CONFIG_PREFIX))
    except RemoteStorageError as e:
        rsm.close()
        raise RemoteStorageError(f"{RSM_CLASS_NAME}={class_name}: {e}") from e
    return rsm
