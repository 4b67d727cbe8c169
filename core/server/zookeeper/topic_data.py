"""The content of the topic, partition, config and admin znodes, as Kafka 3.x writes them.

Same conventions as ``data``: compact JSON, keys in the order Kafka 3.9 is seen to write
them, znode versions taken from the stat rather than the content.

``/brokers/topics/<topic>`` (version 3; ``topic_id`` is Kafka's base64url uuid; partitions
absent from ``adding_replicas`` / ``removing_replicas`` have none)::

    {"partitions":{"0":[2,3,1],"1":[3,1,2]},"topic_id":"cMr3GpVESX2L3byPGf93lQ",
     "adding_replicas":{},"removing_replicas":{},"version":3}

``/brokers/topics/<topic>/partitions/<p>/state`` (version 1; ``"leader_recovery_state":1`` is
added only while the partition recovers from an unclean election, KIP-704)::

    {"controller_epoch":1,"leader":2,"version":1,"leader_epoch":0,"isr":[2,3,1]}

``/config/<type>/<name>`` (topics, clients, users, brokers, ips; values are strings)::

    {"version":1,"config":{"retention.ms":"1000"}}

A user's SCRAM credential is the config entry named after the mechanism, whose value is
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (standard base64, Kafka's
ScramCredentialUtils); quotas are plain entries (``producer_byte_rate``, ...).

``/config/changes/config_change_<seq>`` (version 2; version 1 had entity_type/entity_name)::

    {"version":2,"entity_path":"topics/t"}

``/isr_change_notification/isr_change_<seq>`` and ``/admin/preferred_replica_election``::

    {"version":1,"partitions":[{"topic":"t","partition":0}]}

``/admin/reassign_partitions`` (the pre-2.4 reassignment request)::

    {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}
"""

from __future__ import annotations

import base64
import binascii
import enum
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.kafka_uuid import uuid_from_base64, uuid_to_base64
from core.server.sasl import ScramCredential
from core.server.zookeeper import json_format as zk_json
from core.server.zookeeper.errors import ZkDataError

TopicPartition = tuple[str, int]

TOPIC_VERSION = 3
PARTITION_STATE_VERSION = 1
CONFIG_VERSION = 1
CONFIG_CHANGE_VERSION = 2
ISR_CHANGE_VERSION = 1
PREFERRED_REPLICA_ELECTION_VERSION = 1
REASSIGN_PARTITIONS_VERSION = 1


class LeaderRecoveryState(enum.IntEnum):
    """Kafka's LeaderRecoveryState byte values."""

    RECOVERED = 0
    RECOVERING = 1


# -- /brokers/topics/<topic> -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replicas, and those being added or removed by a reassignment."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """The content of ``/brokers/topics/<topic>``: the topic id and each partition's replicas."""

    topic_id: uuid.UUID | None
    partitions: Mapping[int, ReplicaAssignment]


def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    ordered = sorted(assignment.partitions.items())
    value: dict[str, Any] = {"partitions": {str(p): list(a.replicas) for p, a in ordered}}
    if assignment.topic_id is not None:
        value["topic_id"] = uuid_to_base64(assignment.topic_id)
    value["adding_replicas"] = {
        str(p): list(a.adding_replicas) for p, a in ordered if a.adding_replicas
    }
    value["removing_replicas"] = {
        str(p): list(a.removing_replicas) for p, a in ordered if a.removing_replicas
    }
    value["version"] = TOPIC_VERSION
    return zk_json.dumps(value)


def decode_topic_assignment(topic: str, data: bytes | None) -> TopicAssignment:
    """Read ``/brokers/topics/<topic>`` of version 1 to 3."""
    what = f"/brokers/topics/{topic}"
    obj = zk_json.loads_object(data, what)
    topic_id = None
    if "topic_id" in obj:
        try:
            topic_id = uuid_from_base64(zk_json.field(obj, "topic_id", str, what))
        except ValueError as e:
            raise ZkDataError(f"{what}: {e}") from e

    def section(key: str) -> dict[str, tuple[int, ...]]:
        replicas = obj.get(key) or {}
        if not isinstance(replicas, dict):
            raise ZkDataError(f"{what}: {key!r} is not an object")
        return {p: zk_json.int_list(r, what) for p, r in replicas.items()}

    adding, removing = section("adding_replicas"), section("removing_replicas")
    partitions: dict[int, ReplicaAssignment] = {}
    for p, replicas in section("partitions").items():
        if not re.fullmatch(r"[0-9]+", p):
            raise ZkDataError(f"{what}: partition {p!r} is not a number")
        partitions[int(p)] = ReplicaAssignment(replicas, adding.get(p, ()), removing.get(p, ()))
    return TopicAssignment(topic_id, partitions)


# -- /brokers/topics/<topic>/partitions/<p>/state ----------------------------------------------
@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leader and ISR (Kafka's LeaderIsrAndControllerEpoch).

    Attributes:
        partition_epoch: the state znode's version (Kafka's zkVersion, the partition epoch);
            conditional updates expect it. -1 for a state not read from ZooKeeper. Not part
            of the JSON.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    partition_epoch: int = -1


def encode_partition_state(state: PartitionState) -> bytes:
    value: dict[str, Any] = {
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "version": PARTITION_STATE_VERSION,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    }
    if state.leader_recovery_state != LeaderRecoveryState.RECOVERED:
        value["leader_recovery_state"] = int(state.leader_recovery_state)
    return zk_json.dumps(value)


def decode_partition_state(
    tp: TopicPartition, data: bytes | None, *, zk_version: int = -1
) -> PartitionState:
    what = f"/brokers/topics/{tp[0]}/partitions/{tp[1]}/state"
    obj = zk_json.loads_object(data, what)
    recovery = obj.get("leader_recovery_state", 0)
    try:
        recovery_state = LeaderRecoveryState(recovery)
    except ValueError as e:
        raise ZkDataError(f"{what}: unknown leader_recovery_state {recovery!r}") from e
    return PartitionState(
        leader=zk_json.field(obj, "leader", int, what),
        leader_epoch=zk_json.field(obj, "leader_epoch", int, what),
        isr=zk_json.int_list(obj.get("isr"), what),
        controller_epoch=zk_json.field(obj, "controller_epoch", int, what),
        leader_recovery_state=recovery_state,
        partition_epoch=zk_version,
    )


# -- /config/<type>/<name> and /config/changes -------------------------------------------------
def encode_config(config: Mapping[str, str]) -> bytes:
    return zk_json.dumps({"version": CONFIG_VERSION, "config": dict(config)})


def decode_config(data: bytes | None, what: str = "config") -> dict[str, str]:
    """The entries of a config znode; one without data has none (as Kafka reads it)."""
    if not data:
        return {}
    entries = zk_json.loads_object(data, what).get("config") or {}
    if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
        raise ZkDataError(f"{what}: 'config' is not an object of strings: {entries!r}")
    return dict(entries)


def encode_scram_credential(credential: ScramCredential) -> str:
    """The config value Kafka stores for one SCRAM mechanism of a user."""

    def b64(value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")

    return (
        f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
        f"server_key={b64(credential.server_key)},iterations={credential.iterations}"
    )


def decode_scram_credential(value: str) -> ScramCredential:
    parts = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
    if set(parts) != {"salt", "stored_key", "server_key", "iterations"}:
        raise ZkDataError("SCRAM credential: expected salt, stored_key, server_key, iterations")
    try:
        return ScramCredential(
            salt=base64.b64decode(parts["salt"], validate=True),
            iterations=int(parts["iterations"]),
            stored_key=base64.b64decode(parts["stored_key"], validate=True),
            server_key=base64.b64decode(parts["server_key"], validate=True),
        )
    except (ValueError, binascii.Error) as e:
        raise ZkDataError(f"SCRAM credential: {e}") from e


def encode_config_change(entity_path: str) -> bytes:
    return zk_json.dumps({"version": CONFIG_CHANGE_VERSION, "entity_path": entity_path})


def decode_config_change(data: bytes | None) -> str:
    """The ``<type>/<name>`` a notification is about."""
    what = "config change notification"
    obj = zk_json.loads_object(data, what)
    if obj.get("version") == 1:
        entity_type = zk_json.field(obj, "entity_type", str, what)
        return f"{entity_type}/{zk_json.field(obj, 'entity_name', str, what)}"
    return zk_json.field(obj, "entity_path", str, what)


# -- partition lists: ISR changes, preferred replica election, reassignment --------------------
def _encode_partitions(version: int, partitions: Iterable[TopicPartition]) -> bytes:
    items = [{"topic": t, "partition": p} for t, p in sorted(set(partitions))]
    return zk_json.dumps({"version": version, "partitions": items})


def _decode_partitions(data: bytes | None, what: str) -> list[dict[str, Any]]:
    items = zk_json.loads_object(data, what).get("partitions")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ZkDataError(f"{what}: 'partitions' is not a list of objects")
    return items


def _partition_of(item: Mapping[str, Any], what: str) -> TopicPartition:
    return zk_json.field(item, "topic", str, what), zk_json.field(item, "partition", int, what)


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode_partitions(ISR_CHANGE_VERSION, partitions)


def decode_isr_change(data: bytes | None) -> set[TopicPartition]:
    what = "ISR change notification"
    return {_partition_of(item, what) for item in _decode_partitions(data, what)}


def encode_preferred_replica_election(partitions: Iterable[TopicPartition]) -> bytes:
    return _encode_partitions(PREFERRED_REPLICA_ELECTION_VERSION, partitions)


def decode_preferred_replica_election(data: bytes | None) -> set[TopicPartition]:
    what = "/admin/preferred_replica_election"
    return {_partition_of(item, what) for item in _decode_partitions(data, what)}


def encode_reassign_partitions(reassignment: Mapping[TopicPartition, Sequence[int]]) -> bytes:
    items = [
        {"topic": t, "partition": p, "replicas": list(replicas)}
        for (t, p), replicas in sorted(reassignment.items())
    ]
    return zk_json.dumps({"version": REASSIGN_PARTITIONS_VERSION, "partitions": items})


def decode_reassign_partitions(data: bytes | None) -> dict[TopicPartition, tuple[int, ...]]:
    what = "/admin/reassign_partitions"
    return {
        _partition_of(item, what): zk_json.int_list(item.get("replicas"), what)
        for item in _decode_partitions(data, what)
    }
