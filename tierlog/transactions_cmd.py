"""``tierlog transactions list|describe``: transactional ids, like kafka-transactions.sh.

    tierlog transactions list --bootstrap-server HOST:PORT [--command-config FILE] [--json]
    tierlog transactions describe --transactional-id ID --bootstrap-server HOST:PORT
        [--command-config FILE] [--json]

Speaks the Kafka protocol (ListTransactions to every broker of the cluster,
FindCoordinator then DescribeTransactions to the coordinator), so it works against Apache
Kafka as well. The output columns are kafka-transactions.sh's: ``list`` prints
TransactionalId, Coordinator, ProducerId, TransactionState; ``describe`` prints
CoordinatorId, TransactionalId, ProducerId, ProducerEpoch, TransactionState,
TransactionTimeoutMs, CurrentTransactionStartTimeMs, TransactionDurationTimeMs,
TopicPartitions. ``--command-config`` takes ``security.protocol`` (PLAINTEXT,
SASL_PLAINTEXT, SSL, SASL_SSL), ``sasl.mechanism``, ``sasl.username`` / ``sasl.password``
(or a ``sasl.jaas.config`` entry) and ``ssl.ca.location``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from tierlog.cli import EXIT_OK, CommandError, Subparsers

TIMEOUT_MS = 30_000
LIST_TRANSACTIONS = 66
DESCRIBE_TRANSACTIONS = 65
FIND_COORDINATOR = 10
METADATA = 3
COORDINATOR_TRANSACTION = 1


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("transactions", help="list and describe transactions")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    common.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client properties (security.protocol, sasl.*, ssl.ca.location)",
    )
    common.add_argument("--json", action="store_true", help="JSON on stdout")
    p = actions.add_parser("list", parents=[common], help="every transactional id and state")
    p.set_defaults(handler=run_list)
    p = actions.add_parser("describe", parents=[common], help="one transaction's state")
    p.add_argument("--transactional-id", required=True, metavar="ID")
    p.set_defaults(handler=run_describe)


def _security(args: argparse.Namespace) -> Any:
    import ssl

    from core.server.sasl_client import SaslClientCredentials
    from core.server.security import ClientSecurity
    from tierlog.metadata_source import client_properties

    props = client_properties(args.command_config) if args.command_config else {}
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"):
        raise CommandError(f"security.protocol {protocol} is not supported")
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=props.get("ssl.ca.location"))
    sasl = None
    if protocol.startswith("SASL"):
        try:
            sasl = SaslClientCredentials(
                props.get("sasl.mechanism", "PLAIN").upper(),
                props["sasl.username"],
                props["sasl.password"],
            )
        except KeyError as e:
            raise CommandError(f"{args.command_config}: {e.args[0]} is missing") from e
    return ClientSecurity("client", protocol, context, sasl)


async def _connect(address: str, security: Any) -> Any:
    from core.server.broker_connection import BrokerClientError, BrokerConnection

    host, _, port = address.rpartition(":")
    try:
        return await BrokerConnection.open(
            host,
            int(port),
            client_id="tierlog-transactions",
            security=security,
            request_timeout_ms=TIMEOUT_MS,
        )
    except (BrokerClientError, OSError, ValueError) as e:
        raise CommandError(f"cannot reach {address}: {e}") from e


def _schema(api_key: int, version: int) -> Any:
    from core.server.protocol import load_request_schema

    return load_request_schema(api_key, version)


async def _call(connection: Any, api_key: int, versions: tuple[int, int], build: Any) -> Any:
    from core.server.broker_connection import BrokerClientError

    try:
        return await connection.call(api_key, build, versions=versions)
    except BrokerClientError as e:
        raise CommandError(str(e)) from e


async def _brokers(connection: Any) -> list[tuple[int, str]]:
    from core.server.kio_build import make

    response = await _call(
        connection,
        METADATA,
        (4, 12),
        lambda v: make(
            _schema(METADATA, v),
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )
    return [(b.node_id, f"{b.host}:{b.port}") for b in response.brokers]


async def list_transactions(bootstrap: str, security: Any) -> list[dict[str, Any]]:
    """Every transactional id of every broker of the cluster."""
    from core.server.kio_build import make

    first = await _connect(bootstrap, security)
    try:
        brokers = await _brokers(first)
    finally:
        await first.close()
    rows = []
    for node_id, address in brokers:
        connection = await _connect(address, security)
        try:
            response = await _call(
                connection,
                LIST_TRANSACTIONS,
                (0, 1),
                lambda v: make(
                    _schema(LIST_TRANSACTIONS, v),
                    state_filters=(),
                    producer_id_filters=(),
                    duration_filter=-1,
                ),
            )
        finally:
            await connection.close()
        if response.error_code:
            raise CommandError(f"broker {node_id}: ListTransactions failed: {response.error_code}")
        rows += [
            {
                "transactional_id": t.transactional_id,
                "coordinator": node_id,
                "producer_id": t.producer_id,
                "state": t.transaction_state,
            }
            for t in response.transaction_states
        ]
    return sorted(rows, key=lambda r: r["transactional_id"])


async def describe_transaction(bootstrap: str, security: Any, txn_id: str) -> dict[str, Any]:
    from core.server.kio_build import make

    first = await _connect(bootstrap, security)
    try:
        found = await _call(
            first,
            FIND_COORDINATOR,
            (1, 3),
            lambda v: make(
                _schema(FIND_COORDINATOR, v), key=txn_id, key_type=COORDINATOR_TRANSACTION
            ),
        )
    finally:
        await first.close()
    if found.error_code:
        raise CommandError(f"no coordinator for {txn_id}: {found.error_code.name}")
    from core.server.broker_connection import BrokerClientError, ProtocolViolationError

    connection = await _connect(f"{found.host}:{found.port}", security)
    try:
        response = await connection.call(
            DESCRIBE_TRANSACTIONS,
            lambda v: make(_schema(DESCRIBE_TRANSACTIONS, v), transactional_ids=(txn_id,)),
            versions=(0, 0),
        )
    except ProtocolViolationError:
        # kio cannot read Kafka's -1 "no transaction started" start time: an id initialised
        # but without a transaction yet. Its state and producer id come from the listing.
        connection = await _connect(f"{found.host}:{found.port}", security)
        return await _describe_without_start(connection, found.node_id, txn_id)
    except BrokerClientError as e:
        raise CommandError(str(e)) from e
    finally:
        await connection.close()
    (state,) = response.transaction_states
    if state.error_code:
        raise CommandError(f"{txn_id}: {state.error_code.name}")
    start_ms = int(state.transaction_start_time.timestamp() * 1000)
    now_ms = int(time.time() * 1000)
    return {
        "coordinator": found.node_id,
        "transactional_id": txn_id,
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "state": state.transaction_state,
        "timeout_ms": int(state.transaction_timeout.total_seconds() * 1000),
        "start_time_ms": start_ms if start_ms >= 0 else None,
        "duration_ms": now_ms - start_ms if start_ms >= 0 else None,
        "partitions": [f"{t.topic}-{p}" for t in state.topics for p in t.partitions],
    }


async def _describe_without_start(connection: Any, node_id: int, txn_id: str) -> dict[str, Any]:
    from core.server.kio_build import make

    response = await _call(
        connection,
        LIST_TRANSACTIONS,
        (0, 1),
        lambda v: make(
            _schema(LIST_TRANSACTIONS, v),
            state_filters=(),
            producer_id_filters=(),
            duration_filter=-1,
        ),
    )
    for t in response.transaction_states:
        if t.transactional_id == txn_id:
            return {
                "coordinator": node_id,
                "transactional_id": txn_id,
                "producer_id": t.producer_id,
                "producer_epoch": None,
                "state": t.transaction_state,
                "timeout_ms": None,
                "start_time_ms": None,
                "duration_ms": None,
                "partitions": [],
            }
    raise CommandError(f"{txn_id}: TRANSACTIONAL_ID_NOT_FOUND")


def run_list(args: argparse.Namespace) -> int:
    rows = asyncio.run(list_transactions(args.bootstrap_server, _security(args)))
    if args.json:
        print(json.dumps({"transactions": rows}))
        return EXIT_OK
    print("TransactionalId\tCoordinator\tProducerId\tTransactionState")
    for r in rows:
        print(f"{r['transactional_id']}\t{r['coordinator']}\t{r['producer_id']}\t{r['state']}")
    return EXIT_OK


def run_describe(args: argparse.Namespace) -> int:
    doc = asyncio.run(
        describe_transaction(args.bootstrap_server, _security(args), args.transactional_id)
    )
    if args.json:
        print(json.dumps(doc))
        return EXIT_OK
    print(
        "CoordinatorId\tTransactionalId\tProducerId\tProducerEpoch\tTransactionState\t"
        "TransactionTimeoutMs\tCurrentTransactionStartTimeMs\tTransactionDurationTimeMs\t"
        "TopicPartitions"
    )

    def dash(value: Any) -> str:
        return "None" if value is None else str(value)

    print(
        f"{doc['coordinator']}\t{doc['transactional_id']}\t{doc['producer_id']}\t"
        f"{doc['producer_epoch']}\t{doc['state']}\t{doc['timeout_ms']}\t"
        f"{dash(doc['start_time_ms'])}\t{dash(doc['duration_ms'])}\t"
        f"{','.join(doc['partitions'])}"
    )
    return EXIT_OK
