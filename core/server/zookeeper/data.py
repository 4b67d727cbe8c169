"""The content of the cluster-level znodes, encoded and decoded exactly as Kafka 3.x does.

Kafka writes compact JSON (``zk_json``). The encoders write the keys in the order a Kafka 3.9
broker is seen to write them; Kafka builds most of these objects from hash maps, so readers
must not depend on the order. Znode versions and creation zxids are not part of the content:
decoders take them from the znode's stat. Topic, partition and config znodes are in
``zk_topic_data``.

``/brokers/ids/<id>`` (ephemeral, JSON version 5)::

    {"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},
     "endpoints":["PLAINTEXT://server1:9092"],"jmx_port":-1,"port":9092,"host":"server1",
     "version":5,"timestamp":"1704032948949"}

with ``"rack"`` when the broker has one; ``host``/``port`` repeat the first PLAINTEXT endpoint
for old clients (null and -1 without one). The broker epoch is the znode's czxid.

``/controller`` (ephemeral; version 1, without ``kraftControllerEpoch``, before Kafka 3.4)::

    {"version":2,"brokerid":1,"timestamp":"1704032949256","kraftControllerEpoch":-1}

``/controller_epoch``: the epoch as decimal text (``1``).

``/cluster/id`` (the version is a string)::

    {"version":"1","id":"eQzK4lYlQ9y8P21IScOl_g"}

``/latest_producer_id_block`` (block bounds as strings, both inclusive)::

    {"version":1,"broker":0,"block_start":"0","block_end":"999"}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.clock import now_ms
from core.server.zookeeper import json_format as zk_json
from core.server.zookeeper.errors import ZkDataError

BROKER_REGISTRATION_VERSION = 5
CONTROLLER_VERSION = 2
PRODUCER_ID_BLOCK_VERSION = 1
# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE.
PRODUCER_ID_BLOCK_SIZE = 1000
INT64_MAX = (1 << 63) - 1

# Listener names that need no listener_security_protocol_map entry (Kafka's
# DEFAULT_NAME_TO_SECURITY_PROTO: each security protocol names itself).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


# -- /brokers/ids/<id> -------------------------------------------------------------------------
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One advertised listener of a broker: ``NAME://host:port`` and its security protocol."""

    listener_name: str
    host: str | None
    port: int
    security_protocol: str

    def connection_string(self) -> str:
        """Kafka's EndPoint.connectionString: IPv6 hosts in brackets, no host as ``:port``."""
        if self.host is None:
            return f"{self.listener_name}://:{self.port}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, protocol_map: Mapping[str, str]) -> EndPoint:
        """Parse ``NAME://host:port``; the protocol is ``protocol_map[NAME]``.

        Raises:
            ZkDataError: not ``NAME://host:port``, or no protocol for the name.
        """
        match = _ENDPOINT.match(text)
        if match is None:
            raise ZkDataError(f"endpoint {text!r} is not NAME://host:port")
        name = match.group(1).upper()
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ZkDataError(f"endpoint {text!r}: no security protocol for listener {name}")
        return cls(name, match.group(2) or None, int(match.group(3)), protocol)


@dataclass(frozen=True, slots=True)
class SupportedVersionRange:
    """A feature's supported versions as a broker advertises them (KIP-584)."""

    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """The content of ``/brokers/ids/<id>`` (Kafka's BrokerInfo).

    Attributes:
        features: Kafka 3.x ZooKeeper-mode brokers advertise none (``{}``).
        version: the JSON version read; registrations are always written as version 5.
        epoch: the broker epoch, Kafka's name for the znode's creation zxid (czxid); -1 when
            not read from ZooKeeper. Not part of the JSON.
    """

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    features: Mapping[str, SupportedVersionRange] = field(default_factory=dict)
    jmx_port: int = -1
    timestamp_ms: int = field(default_factory=now_ms)
    version: int = BROKER_REGISTRATION_VERSION
    epoch: int = -1

    def endpoint(self, listener_name: str) -> EndPoint | None:
        return next((e for e in self.endpoints if e.listener_name == listener_name), None)


def encode_broker_registration(registration: BrokerRegistration) -> bytes:
    plaintext = next(
        (e for e in registration.endpoints if e.security_protocol == "PLAINTEXT"), None
    )
    value: dict[str, Any] = {
        "features": {
            name: {"min_version": r.min_version, "max_version": r.max_version}
            for name, r in registration.features.items()
        },
        "listener_security_protocol_map": {
            e.listener_name: e.security_protocol for e in registration.endpoints
        },
        "endpoints": [e.connection_string() for e in registration.endpoints],
        "jmx_port": registration.jmx_port,
        "port": plaintext.port if plaintext else -1,
        "host": plaintext.host if plaintext else None,
    }
    if registration.rack is not None:
        value["rack"] = registration.rack
    value["version"] = BROKER_REGISTRATION_VERSION
    value["timestamp"] = str(registration.timestamp_ms)
    return zk_json.dumps(value)


def decode_broker_registration(
    broker_id: int, data: bytes | None, *, czxid: int = -1
) -> BrokerRegistration:
    """Read a registration of JSON version 1 to 5, as Kafka's BrokerIdZNode.decode does."""
    what = f"/brokers/ids/{broker_id}"
    obj = zk_json.loads_object(data, what)
    version = zk_json.field(obj, "version", int, what)
    if version < 1:
        raise ZkDataError(f"{what}: unsupported registration version {version}")
    if version == 1:
        host = zk_json.field(obj, "host", str, what)
        port = zk_json.field(obj, "port", int, what)
        endpoints: tuple[EndPoint, ...] = (EndPoint("PLAINTEXT", host, port, "PLAINTEXT"),)
    else:
        protocol_map = {p: p for p in SECURITY_PROTOCOLS}
        if "listener_security_protocol_map" in obj:
            raw = zk_json.field(obj, "listener_security_protocol_map", dict, what)
            protocol_map = {str(k).upper(): str(v) for k, v in raw.items()}
        listeners = zk_json.field(obj, "endpoints", list, what)
        endpoints = tuple(EndPoint.parse(str(text), protocol_map) for text in listeners)
    features: dict[str, SupportedVersionRange] = {}
    for name, versions in (obj.get("features") or {}).items():
        if not isinstance(versions, dict):
            raise ZkDataError(f"{what}: feature {name!r} is not an object")
        features[name] = SupportedVersionRange(
            zk_json.field(versions, "min_version", int, what),
            zk_json.field(versions, "max_version", int, what),
        )
    rack = obj.get("rack")
    return BrokerRegistration(
        broker_id=broker_id,
        endpoints=endpoints,
        rack=rack if isinstance(rack, str) else None,
        features=features,
        jmx_port=zk_json.field(obj, "jmx_port", int, what),
        timestamp_ms=zk_json.decimal(obj.get("timestamp", "0"), what),
        version=version,
        epoch=czxid,
    )


# -- /controller and /controller_epoch ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """The content of ``/controller``: which broker is the controller.

    Attributes:
        kraft_controller_epoch: -1 unless a KRaft controller took over (a ZooKeeper-to-KRaft
            migration, which tierlog does not do).
        zk_version: the znode's version when read; not part of the JSON.
    """

    broker_id: int
    timestamp_ms: int = field(default_factory=now_ms)
    kraft_controller_epoch: int = -1
    zk_version: int = -1


def encode_controller(registration: ControllerRegistration) -> bytes:
    return zk_json.dumps(
        {
            "version": CONTROLLER_VERSION,
            "brokerid": registration.broker_id,
            "timestamp": str(registration.timestamp_ms),
            "kraftControllerEpoch": registration.kraft_controller_epoch,
        }
    )


def decode_controller(data: bytes | None, *, zk_version: int = -1) -> ControllerRegistration:
    """Read ``/controller`` of version 1 or 2."""
    obj = zk_json.loads_object(data, "/controller")
    kraft_epoch = obj.get("kraftControllerEpoch", -1)
    return ControllerRegistration(
        broker_id=zk_json.field(obj, "brokerid", int, "/controller"),
        timestamp_ms=zk_json.decimal(obj.get("timestamp", "0"), "/controller"),
        kraft_controller_epoch=kraft_epoch if isinstance(kraft_epoch, int) else -1,
        zk_version=zk_version,
    )


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    text = (data or b"").decode("ascii", errors="replace")
    if not re.fullmatch(r"-?[0-9]+", text):
        raise ZkDataError(f"/controller_epoch: not a decimal number: {data!r}")
    return int(text)


# -- /cluster/id -------------------------------------------------------------------------------
def encode_cluster_id(cluster_id: str) -> bytes:
    return zk_json.dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    return zk_json.field(zk_json.loads_object(data, "/cluster/id"), "id", str, "/cluster/id")


# -- /latest_producer_id_block -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """A block of producer ids handed to one broker (Kafka's ProducerIdsBlock)."""

    broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return zk_json.dumps(
        {
            "version": PRODUCER_ID_BLOCK_VERSION,
            "broker": block.broker_id,
            "block_start": str(block.first_producer_id),
            "block_end": str(block.last_producer_id),
        }
    )


def decode_producer_id_block(data: bytes | None) -> ProducerIdBlock:
    what = "/latest_producer_id_block"
    obj = zk_json.loads_object(data, what)
    start = zk_json.decimal(obj.get("block_start"), what)
    end = zk_json.decimal(obj.get("block_end"), what)
    if start < 0 or end < start or end > INT64_MAX:
        raise ZkDataError(f"{what}: bad block [{start}, {end}]")
    return ProducerIdBlock(zk_json.field(obj, "broker", int, what), start, end - start + 1)
