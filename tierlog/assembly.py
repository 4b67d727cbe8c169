"""The composition root: a broker built from its config, with the parts the config asks for.

The core broker always; with ``remote.log.storage.system.enable=true`` also its remote
tier (``tierlog.remote_tier``): the metadata manager on ``__remote_log_metadata`` now, the
RemoteLogManager and the storage plugins as they arrive.
"""

from __future__ import annotations

from core.server.broker import Broker
from core.server.config import BrokerConfig
from tierlog.remote_tier import TieredBroker


def build_broker(config: BrokerConfig) -> TieredBroker:
    return TieredBroker(Broker(config))
