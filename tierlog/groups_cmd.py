"""``tierlog groups list|describe``: consumer groups, their members and their lag.

    tierlog groups list --bootstrap-server HOST:PORT [--command-config FILE] [--json]
    tierlog groups describe GROUP... --bootstrap-server HOST:PORT [--command-config FILE] [--json]

Read with a Kafka admin client (confluent-kafka), so it works against Apache Kafka as well.
``describe`` shows each member's assignment and, per partition with a committed offset, the
committed offset, the log end offset and the lag between them, like ``kafka-consumer-groups.sh
--describe``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tierlog.cli import EXIT_OK, CommandError, Subparsers

TIMEOUT_S = 30.0


def register(subparsers: Subparsers) -> None:
    groups = subparsers.add_parser("groups", help="list and describe consumer groups")
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    common.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client properties (security.protocol, sasl.*, ssl.*)",
    )
    common.add_argument("--json", action="store_true", help="JSON on stdout")
    p = actions.add_parser("list", parents=[common], help="every group with its state")
    p.set_defaults(handler=run_list)
    p = actions.add_parser("describe", parents=[common], help="members, offsets and lag")
    p.add_argument("group", nargs="+", metavar="GROUP")
    p.set_defaults(handler=run_describe)


def _admin(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    from tierlog.metadata_source import client_properties

    settings = client_properties(args.command_config) if args.command_config else {}
    return AdminClient({"bootstrap.servers": args.bootstrap_server, **settings})


def _result(future: Any) -> Any:
    from confluent_kafka import KafkaException

    try:
        return future.result(TIMEOUT_S)
    except KafkaException as e:
        raise CommandError(str(e.args[0])) from e


def run_list(args: argparse.Namespace) -> int:
    admin = _admin(args)
    listing = _result(admin.list_consumer_groups(request_timeout=TIMEOUT_S))
    rows = sorted(
        (g.group_id, g.state.name if g.state is not None else "UNKNOWN") for g in listing.valid
    )
    if args.json:
        print(json.dumps({"groups": [{"group": g, "state": s} for g, s in rows]}))
    else:
        for group, state in rows:
            print(f"{group}\t{state}")
    return EXIT_OK


def describe_group(admin: Any, group: str) -> dict[str, Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    (desc,) = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S).values()
    description = _result(desc)
    owner: dict[tuple[str, int], str] = {}
    members = []
    for m in description.members:
        parts = [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions]
        for tp in parts:
            owner[tp] = m.member_id
        members.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [f"{t}-{p}" for t, p in parts],
            }
        )
    (offsets_future,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S
    ).values()
    committed = [tp for tp in _result(offsets_future).topic_partitions if tp.offset >= 0]
    ends: dict[tuple[str, int], int] = {}
    if committed:
        latest = admin.list_offsets(
            {TopicPartition(tp.topic, tp.partition): OffsetSpec.latest() for tp in committed},
            request_timeout=TIMEOUT_S,
        )
        for tp, future in latest.items():
            ends[(tp.topic, tp.partition)] = _result(future).offset
    partitions = []
    for tp in sorted(committed, key=lambda t: (t.topic, t.partition)):
        end = ends.get((tp.topic, tp.partition), -1)
        partitions.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed_offset": tp.offset,
                "log_end_offset": end,
                "lag": max(end - tp.offset, 0) if end >= 0 else None,
                "member_id": owner.get((tp.topic, tp.partition)),
            }
        )
    return {
        "group": group,
        "state": description.state.name,
        "members": members,
        "partitions": partitions,
    }


def run_describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    docs = [describe_group(admin, g) for g in args.group]
    if args.json:
        print(json.dumps({"groups": docs}))
        return EXIT_OK
    for doc in docs:
        print(f"group {doc['group']}: {doc['state']}, {len(doc['members'])} members")
        print("TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tMEMBER")
        for p in doc["partitions"]:
            lag = "-" if p["lag"] is None else p["lag"]
            print(
                f"{p['topic']}\t{p['partition']}\t{p['committed_offset']}\t"
                f"{p['log_end_offset']}\t{lag}\t{p['member_id'] or '-'}"
            )
    return EXIT_OK
