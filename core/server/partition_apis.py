"""CreatePartitions: adding partitions to a topic, with Kafka's checks and error codes.

Per topic, in Kafka's order: a topic named twice is INVALID_REQUEST; without ALTER on it,
TOPIC_AUTHORIZATION_FAILED; an unknown topic UNKNOWN_TOPIC_OR_PARTITION; a count that is
not larger than the current one INVALID_PARTITIONS; explicit assignments must give one
replica list per new partition, each naming only live brokers, once each, with the topic's
replication factor (INVALID_REPLICA_ASSIGNMENT): on a single broker that is ``[node.id]``.

tierlog refuses more than Kafka in two places, both POLICY_VIOLATION:

- the internal topics (``__consumer_offsets``, ``__transaction_state``,
  ``__remote_log_metadata``), for everyone: each one's partition count is fixed by a broker
  key (a group's offsets live in partition ``hash(group) % count``; the remote log metadata
  manager refuses to start on a count that differs from its key), so a new partition would
  move or strand their records;
- a request adding more partitions in all than ``max.partitions.per.request``, refused
  whole, as CreateTopics is (Kafka's controller caps one request's partitions so).

The new partitions are registered, then opened on executor threads a step at a time, as a
new topic's are (``BrokerServices.create_partitions``); the answer waits for them up to the
request's timeout (REQUEST_TIMED_OUT after it, the opening goes on; a timeout <= 0 answers
REQUEST_TIMED_OUT at once, as Kafka's ZooKeeper-mode broker does). ``validate_only`` checks
everything and changes nothing. Partitions of a tiered topic are tiered from their creation.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from core.errors import CoreError
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation, ResourceType
from core.server.handler_support import NO_THROTTLE, BrokerServices, Handler, allowed, error_of
from core.server.internal_topics import PROTECTED_TOPICS
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext

log = logging.getLogger(__name__)

# The broker key that fixes each internal topic's partition count.
_COUNT_KEYS = {
    "__consumer_offsets": "offsets.topic.num.partitions",
    "__transaction_state": "transaction.state.log.num.partitions",
    "__remote_log_metadata": "remote.log.metadata.topic.num.partitions",
}


class _Refused(Exception):
    """One topic's answer, other than NONE."""

    def __init__(self, error: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _check_assignments(broker: BrokerServices, topic: Any, added: int) -> None:
    """Kafka's checks of explicit assignments for the ``added`` new partitions: brokers
    the MetadataCache lists as alive (this one alone when running alone), one list per new
    partition, each as long as the topic's replication factor, no broker twice.

    Raises:
        _Refused: INVALID_REPLICA_ASSIGNMENT.
    """
    if topic.assignments is None:
        return
    cache = broker.metadata_cache
    live = {b.broker_id for b in cache.alive_brokers()} | {broker.config.node_id}
    assignments = [list(a.broker_ids) for a in topic.assignments]
    unknown = sorted({b for replicas in assignments for b in replicas} - live)
    if unknown:
        raise _Refused(
            ErrorCode.invalid_replica_assignment,
            f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.",
        )
    if len(assignments) != added:
        raise _Refused(
            ErrorCode.invalid_replica_assignment,
            f"Increasing the number of partitions by {added} but {len(assignments)} "
            "assignments provided.",
        )
    first = cache.partition((topic.name, 0))
    replication = len(first.replicas) if first is not None else 1
    for replicas in assignments:
        if len(replicas) != replication or len(set(replicas)) != len(replicas):
            raise _Refused(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment {replicas} is not consistent with the "
                f"topic's replication factor of {replication} (each broker listed once).",
            )


async def handle_create_partitions(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "CreatePartitionsTopicResult")
    timeout_s = request.timeout.total_seconds()
    validate_only = bool(request.validate_only)
    counts = Counter(t.name for t in request.topics)
    answers: dict[str, tuple[ErrorCode, str | None]] = {}
    todo = []
    for topic in request.topics:
        name = topic.name
        if counts[name] > 1:
            answers[name] = (ErrorCode.invalid_request, "Duplicate topic in request.")
        elif not allowed(broker, ctx, Operation.ALTER, ResourceType.TOPIC, name):
            answers[name] = (
                ErrorCode.topic_authorization_failed,
                "The topic authorization is failed.",
            )
        elif name in PROTECTED_TOPICS:
            answers[name] = (
                ErrorCode.policy_violation,
                f"The partition count of the internal topic {name} cannot change: it is "
                f"{_COUNT_KEYS[name]}.",
            )
        else:
            todo.append(topic)

    # The partition cap applies to the request's additions together, before any change.
    added = {}
    for topic in todo:
        info = broker.topics.get(topic.name)
        if info is not None and topic.count > info.partitions:
            added[topic.name] = topic.count - info.partitions
    limit = broker.config.get("max.partitions.per.request")
    if sum(added.values()) > limit:
        refusal = (
            "Excessively large number of partitions per request "
            f"({sum(added.values())} added, max.partitions.per.request={limit})."
        )
        log.info("refused CreatePartitions from %s: %s", ctx.client_address, refusal)
        for topic in todo:
            answers[topic.name] = (ErrorCode.policy_violation, refusal)
        todo = []

    openings: dict[str, asyncio.Future[Any]] = {}
    for topic in todo:
        try:
            info = broker.topics.get(topic.name)
            if info is not None and topic.count > info.partitions:
                _check_assignments(broker, topic, topic.count - info.partitions)
            assignments = (
                None
                if topic.assignments is None
                else [tuple(a.broker_ids) for a in topic.assignments]
            )
            _, opening = await broker.create_partitions(
                topic.name, topic.count, assignments=assignments, validate_only=validate_only
            )
        except _Refused as e:
            answers[topic.name] = (e.error, e.message)
            continue
        except CoreError as e:
            answers[topic.name] = (error_of(e), str(e))
            continue
        answers[topic.name] = (ErrorCode.none, None)
        if opening is not None:
            openings[topic.name] = opening

    if openings:
        await _wait_opened(openings, timeout_s, answers)
    results = tuple(
        make(result_cls, name=name, error_code=answers[name][0], error_message=answers[name][1])
        for name in counts  # each topic once, in request order
    )
    return make(response_type, throttle_time=NO_THROTTLE, results=results)


async def _wait_opened(
    openings: dict[str, asyncio.Future[Any]],
    timeout_s: float,
    answers: dict[str, tuple[ErrorCode, str | None]],
) -> None:
    """Wait up to ``timeout_s`` for the new partitions to be served; the topics whose
    partitions are not open by then answer REQUEST_TIMED_OUT (their opening goes on)."""
    if timeout_s > 0:
        await asyncio.wait([asyncio.shield(f) for f in openings.values()], timeout=timeout_s)
    for name, opening in openings.items():
        if not opening.done() or opening.cancelled():
            answers[name] = (ErrorCode.request_timed_out, None)
        elif opening.exception() is not None:
            error = opening.exception()
            assert error is not None
            answers[name] = (error_of(error), str(error))


HANDLERS: dict[int, Handler] = {ApiKey.CREATE_PARTITIONS: handle_create_partitions}
