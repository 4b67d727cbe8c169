"""KIP-890 part 1: a partition leader verifies a transactional batch before appending it.

A transactional batch (attributes bit 4) opens a transaction in its partition when its
producer has none open there; from then on the partition's last stable offset stays at its
first offset until a COMMIT or ABORT marker, which only the transaction coordinator
writes. A batch that the coordinator does not know about would therefore pin the LSO
forever (a "hanging transaction": every read_committed consumer of the partition stuck).
So, as Kafka does since KIP-890, the leader asks the coordinator first whether the
partition is in the producer's ongoing transaction, and refuses the batch otherwise:

- INVALID_PRODUCER_ID_MAPPING: the transactional id is unknown, or has another producer id;
- INVALID_TXN_STATE: the producer is known but the partition is not in an ongoing
  transaction of it (AddPartitionsToTxn was not done, or the transaction ended);
- INVALID_PRODUCER_EPOCH: an older epoch than the coordinator's (a fenced producer);
- TRANSACTIONAL_ID_AUTHORIZATION_FAILED: a Produce request carrying transactional batches
  without a transactional id, or one the principal may not WRITE (Kafka's KafkaApis);
- NOT_ENOUGH_REPLICAS: the coordinator cannot answer now (not loaded, busy): retriable,
  the answer Kafka gives producers in that case.

A batch of a producer whose transaction is already open in the partition (same epoch) is
not verified again: its transaction is known to the coordinator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.records.batch import F_ATTRIBUTES, F_PRODUCER_EPOCH, F_PRODUCER_ID, HEADER, Attributes
from core.server.api_keys import ApiKey
from core.server.broker_connection import BrokerClientError
from core.server.kio_build import make, nested
from core.server.protocol import load_request_schema

NONE = 0
NOT_ENOUGH_REPLICAS = 19
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
# Coordinator answers that mean "ask again later": the producer retries.
RETRIABLE = frozenset({14, 15, 16, 51})  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORD., CONCURRENT

_TRANSACTIONAL = int(Attributes.TRANSACTIONAL)
_CONTROL = int(Attributes.CONTROL)


def transactional_producer(records: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(producer id, epoch) of the first batch when it is a transactional data batch.

    Framing is validated later by the append; a request too short for a header is no
    transactional batch here (the append refuses it)."""
    if len(records) < HEADER.size:
        return None
    fields = HEADER.unpack_from(records, 0)
    attributes = fields[F_ATTRIBUTES]
    if not attributes & _TRANSACTIONAL or attributes & _CONTROL:
        return None
    return fields[F_PRODUCER_ID], fields[F_PRODUCER_EPOCH]


_MESSAGES = {
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional records need a transactional id the "
    "principal may write",
    NOT_ENOUGH_REPLICAS: "the transaction coordinator cannot verify the transaction now",
    47: "the producer's epoch is older than its coordinator's (fenced)",
    48: "the partition is not in an ongoing transaction of the producer",
    49: "the transaction coordinator knows no such producer for this transactional id",
}


def verification_message(code: int) -> str:
    """The error message of a refused transactional batch."""
    return _MESSAGES.get(code, "transactional batch refused by its coordinator")


async def remote_verifications(
    coordinator: Any, request: Any, partition_of: Callable[[str, int], Any]
) -> dict[tuple[str, int], int]:
    """The answers of another broker's coordinator for the transactional batches of a
    Produce ``request`` that this broker cannot verify itself (its transactional id is
    coordinated elsewhere), by partition; empty without any.

    Awaited before the appends of the request; it suspends only when it has something to
    ask, so a Produce without such batches still appends before its first suspension.
    ``coordinator.remote`` asks (None: nobody to ask, and the local answer stands).
    """
    txn_id = request.transactional_id
    remote = coordinator.remote
    if txn_id is None or remote is None or coordinator.is_coordinator(txn_id):
        return {}
    wanted: list[tuple[str, int]] = []
    producer = None
    for topic_data in request.topic_data:
        for pdata in topic_data.partition_data:
            found = transactional_producer(pdata.records) if pdata.records else None
            partition = partition_of(topic_data.name, pdata.index)
            if found is None or partition is None:
                continue
            entry = partition.log.producer_state.last_entry(found[0])
            if entry is not None and entry.current_txn_first_offset is not None:
                continue  # open here already (an older epoch is refused by the append)
            producer = found
            wanted.append((topic_data.name, pdata.index))
    if producer is None:
        return {}
    answers: dict[tuple[str, int], int] = await remote(txn_id, producer[0], producer[1], wanted)
    return answers


def verification_error(
    transactional_id: str | None,
    may_write: Callable[[str], bool],
    partition: Any,
    records: bytes | bytearray | memoryview,
    verify: Callable[[str, int, int, tuple[str, int]], int],
) -> int:
    """The error code refusing ``records`` for ``partition``, or NONE to append them.

    Args:
        transactional_id: the Produce request's.
        may_write: the principal's WRITE permission on a transactional id.
        partition: the leader partition (``topic``, ``index``, ``log``).
        verify: the coordinator's answer for (id, producer id, epoch, partition).
    """
    producer = transactional_producer(records)
    if producer is None:
        return NONE
    if transactional_id is None or not may_write(transactional_id):
        return TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    pid, epoch = producer
    entry = partition.log.producer_state.last_entry(pid)
    open_here = entry is not None and entry.current_txn_first_offset is not None
    if open_here and entry.producer_epoch == epoch:
        return NONE  # its transaction is open here: the coordinator knows it
    code = verify(transactional_id, pid, epoch, (partition.topic, partition.index))
    if code in RETRIABLE:
        return NOT_ENOUGH_REPLICAS
    return code


def abort_hanging_transactions(
    partitions: Any,
    knows_open_transaction: Callable[[int, tuple[str, int]], bool | None],
    write_abort: Callable[[Any, Any], None],
    max_timeout_ms: int,
    now_ms: int,
) -> int:
    """Abort the transactions open in partitions led here for longer than
    ``transaction.max.timeout.ms`` that no coordinator knows of; returns how many.

    Verification keeps new ones from appearing; this ends those written before it existed
    (or by a coordinator whose state was lost), which Kafka leaves to an operator
    (``kafka-transactions.sh abort``). A transaction its coordinator knows is left to the
    coordinator, which aborts it at its own timeout (never longer than the maximum).

    Args:
        partitions: the leader partitions (``topic``, ``index``, ``log``).
        knows_open_transaction: the coordinator's answer for (producer id, partition);
            None when it cannot tell (another broker coordinates): nothing is aborted.
        write_abort: appends an ABORT marker for an ``OpenTxn`` to a partition.
    """
    aborted = 0
    for partition in partitions:
        for txn in partition.log.open_transactions():
            if now_ms - txn.seen_ms <= max_timeout_ms:
                continue
            if (
                knows_open_transaction(txn.producer_id, (partition.topic, partition.index))
                is not False
            ):
                continue
            write_abort(partition, txn)
            aborted += 1
    return aborted


ADD_PARTITIONS_VERIFY_VERSIONS = (4, 4)


async def verify_remotely(
    node_client: Any,
    coordinator: Any,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[tuple[str, int]],
) -> dict[tuple[str, int], int]:
    """Ask the coordinator on another broker (AddPartitionsToTxn v4, ``verify_only``):
    the error code per partition, as ``TransactionCoordinator.verify`` answers locally.
    A failed connection answers NOT_ENOUGH_REPLICAS (the producer retries).

    Args:
        node_client: the inter-broker ``NodeClient``.
        coordinator: the coordinator's ``BrokerEndpoint``.
    """

    def build(version: int) -> Any:
        request_type = load_request_schema(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        txn_cls = nested(request_type, "AddPartitionsToTxnTransaction")
        topic_cls = nested(request_type, "AddPartitionsToTxnTopic")
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        return make(
            request_type,
            transactions=(
                make(
                    txn_cls,
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    verify_only=True,
                    topics=tuple(
                        make(topic_cls, name=t, partitions=tuple(p)) for t, p in by_topic.items()
                    ),
                ),
            ),
        )

    try:
        response = await node_client.send(
            coordinator,
            "txn-verification",
            ApiKey.ADD_PARTITIONS_TO_TXN,
            build,
            versions=ADD_PARTITIONS_VERIFY_VERSIONS,
        )
    except (BrokerClientError, OSError):
        return dict.fromkeys(partitions, NOT_ENOUGH_REPLICAS)
    codes = dict.fromkeys(partitions, NOT_ENOUGH_REPLICAS)
    if response.error_code:
        return dict.fromkeys(partitions, int(response.error_code))
    for result in response.results_by_transaction:
        for topic in result.topic_results:
            for p in topic.results_by_partition:
                code = int(p.partition_error_code)
                codes[(topic.name, p.partition_index)] = (
                    NOT_ENOUGH_REPLICAS if code in RETRIABLE else code
                )
    return codes
