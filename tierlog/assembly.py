"""The composition root: a broker built from its config, with the parts the config asks for.

Today that is the core broker. The remote tier (RemoteLogManager, the metadata manager and
the storage plugins) is plugged in here when ``remote.log.storage.system.enable=true``.
"""

from __future__ import annotations

from core.server.config import BrokerConfig

from core.server.broker import Broker


def build_broker(config: BrokerConfig) -> Broker:
    return Broker(config)
