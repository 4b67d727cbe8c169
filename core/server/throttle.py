"""A response with a throttle: what the socket server needs to mute a connection (KIP-219).

A request that violated a quota is answered at once with ``throttle_time_ms`` set, and the
connection is muted: the broker reads nothing more from it until the throttle time has
passed, counted from when the answer was ready (Kafka's ThrottledChannel). Clients back off
for that long too. Before KIP-219 (Kafka 2.0) the broker delayed the answer itself instead;
Kafka still does so for the request versions older than the one each api bumped for
KIP-219, and for the apis whose responses never opted in (Kafka's
``AbstractResponse.shouldClientThrottle`` is false by default):
``CLIENT_THROTTLES_FROM`` holds, per api key, the first version whose client throttles
itself, from the comments of Kafka's message specifications ("Starting in version N, on
quota violation, brokers send out responses before throttling").

Handlers return a ``ThrottledResponse`` in place of their response when it is throttled;
``core.server.network`` unwraps it. This module imports nothing of the broker: the socket
server may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

CLIENT_THROTTLES_FROM: Mapping[int, int] = MappingProxyType(
    {
        0: 6,  # Produce
        1: 8,  # Fetch
        2: 3,  # ListOffsets
        3: 6,  # Metadata
        8: 4,  # OffsetCommit
        9: 4,  # OffsetFetch
        10: 2,  # FindCoordinator
        11: 3,  # JoinGroup
        12: 2,  # Heartbeat
        13: 2,  # LeaveGroup
        14: 2,  # SyncGroup
        15: 2,  # DescribeGroups
        16: 2,  # ListGroups
        18: 2,  # ApiVersions
        19: 3,  # CreateTopics
        20: 2,  # DeleteTopics
        21: 1,  # DeleteRecords
        22: 1,  # InitProducerId
        24: 1,  # AddPartitionsToTxn
        25: 1,  # AddOffsetsToTxn
        26: 1,  # EndTxn
        28: 1,  # TxnOffsetCommit
        29: 1,  # DescribeAcls
        30: 1,  # CreateAcls
        31: 1,  # DeleteAcls
        32: 2,  # DescribeConfigs
        33: 1,  # AlterConfigs
        34: 1,  # AlterReplicaLogDirs
        35: 1,  # DescribeLogDirs
        37: 1,  # CreatePartitions
        42: 1,  # DeleteGroups
    }
)


def client_throttles(api_key: int, api_version: int) -> bool:
    """Whether a client of this request version backs off by itself (KIP-219), so that the
    broker answers before the throttle rather than after it."""
    first = CLIENT_THROTTLES_FROM.get(api_key)
    return first is not None and api_version >= first


@dataclass(frozen=True, slots=True)
class ThrottledResponse:
    """A handler's answer (None: no answer, produce with acks=0) and the milliseconds its
    connection stays muted; ``delay_response``: the answer itself waits that long first
    (request versions before KIP-219)."""

    response: Any
    throttle_ms: int
    delay_response: bool = False
