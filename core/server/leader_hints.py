"""KIP-951 leader hints: where a NOT_LEADER_OR_FOLLOWER answer sends the client.

Produce v10+ and Fetch v12+ partitions carry ``current_leader`` (the leader's id and epoch as
this broker's metadata cache knows them), and Produce v10+ / Fetch v16+ responses list the
``node_endpoints`` of those leaders on the listener the request came in on, so that a client
goes straight to the new leader instead of refreshing its metadata first. Kafka fills them
for NOT_LEADER_OR_FOLLOWER, and for Fetch also for FENCED_LEADER_EPOCH.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from core.server.cluster_types import TopicPartition
from core.server.kio_build import make, nested_optional
from core.server.metadata_cache import MetadataCache

NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74


class LeaderHints:
    """The hints of one response.

    Args:
        response_type: the response class (its version decides which fields exist).
        listener: the listener of the request: endpoints are given on it.
        errors: the partition error codes that get a hint.
    """

    def __init__(
        self,
        cache: MetadataCache,
        response_type: type,
        listener: str,
        errors: Collection[int] = (NOT_LEADER_OR_FOLLOWER,),
    ) -> None:
        self._snapshot = cache.snapshot()
        self._leader_cls = nested_optional(response_type, "LeaderIdAndEpoch")
        self._endpoint_cls = nested_optional(response_type, "NodeEndpoint")
        self._listener = listener
        self._errors = frozenset(errors)
        self._leaders: set[int] = set()

    def partition_fields(self, tp: TopicPartition, error: int) -> dict[str, Any]:
        """``{"current_leader": ...}`` for a partition answered ``error`` that gets a hint,
        else ``{}`` (the field keeps its default: leader -1, epoch -1)."""
        leader = self.current_leader(tp, error)
        return {} if leader is None else {"current_leader": leader}

    def current_leader(self, tp: TopicPartition, error: int) -> Any | None:
        """The ``current_leader`` of a partition answered ``error`` that gets a hint (kio's
        LeaderIdAndEpoch of the version), else None."""
        if self._leader_cls is None or int(error) not in self._errors:
            return None
        state = self._snapshot.partition(tp)
        leader, epoch = (state.leader, state.leader_epoch) if state is not None else (-1, -1)
        if leader >= 0:
            self._leaders.add(leader)
        return make(self._leader_cls, leader_id=leader, leader_epoch=epoch)

    def node_endpoints(self) -> tuple[Any, ...]:
        """The endpoints of the leaders named by ``partition_fields`` (those alive and with
        the request's listener)."""
        if self._endpoint_cls is None:
            return ()
        out = []
        for broker_id in sorted(self._leaders):
            broker = self._snapshot.broker(broker_id)
            endpoint = broker.endpoint(self._listener) if broker is not None else None
            if broker is not None and endpoint is not None:
                out.append(
                    make(
                        self._endpoint_cls,
                        node_id=broker_id,
                        host=endpoint.host,
                        port=endpoint.port,
                        rack=broker.rack,
                    )
                )
        return tuple(out)
