"""``tierlog cluster describe|elect-leaders``: a cluster's brokers, controller and partitions.

    tierlog cluster describe --bootstrap-server HOST:PORT [--command-config FILE] [--json]
    tierlog cluster elect-leaders (--preferred | --unclean) [--partition TOPIC:P]...
                                  --bootstrap-server HOST:PORT [--command-config FILE] [--json]

Read with a Kafka admin client (confluent-kafka), so both work against Apache Kafka as well.
``describe`` lists the live brokers and the controller (Metadata), and per partition its
leader, replicas and ISR; a partition whose ISR is smaller than its replica set is
under-replicated, one without a leader offline (Kafka's kafka-topics.sh
``--under-replicated-partitions`` / ``--unavailable-partitions``). ``elect-leaders`` sends
ElectLeaders to the controller (kafka-leader-election.sh): ``--preferred`` moves leadership
back to each partition's first replica when it is alive and in sync; ``--unclean`` lets an
out-of-sync replica lead a partition that has no live in-sync replica, losing the records
it lacks. Without ``--partition`` every partition is asked for.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tierlog.cli import EXIT_BAD_DATA, EXIT_OK, CommandError, Subparsers
from tierlog.metadata_source import client_properties

TIMEOUT_S = 30.0


def register(subparsers: Subparsers) -> None:
    cluster = subparsers.add_parser("cluster", help="describe a cluster, elect leaders")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    common.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client properties (security.protocol, sasl.*, ssl.*)",
    )
    common.add_argument("--json", action="store_true", help="JSON on stdout")
    p = actions.add_parser(
        "describe", parents=[common], help="brokers, controller, leaders, replicas and ISRs"
    )
    p.set_defaults(handler=run_describe)
    p = actions.add_parser("elect-leaders", parents=[common], help="preferred or unclean elections")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--preferred", action="store_true", help="the first replica leads")
    kind.add_argument("--unclean", action="store_true", help="an out-of-sync replica may lead")
    p.add_argument(
        "--partition",
        action="append",
        default=[],
        metavar="TOPIC:PARTITION",
        help="a partition to elect for (repeatable; default every partition)",
    )
    p.set_defaults(handler=run_elect_leaders)


def _admin(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import AdminClient

    settings = client_properties(args.command_config) if args.command_config else {}
    return AdminClient({"bootstrap.servers": args.bootstrap_server, **settings})


def describe_cluster(admin: Any) -> dict[str, Any]:
    """The cluster as Metadata shows it, as a JSON-ready dict."""
    from confluent_kafka import KafkaException

    try:
        metadata = admin.list_topics(timeout=TIMEOUT_S)
    except KafkaException as e:
        raise CommandError(str(e.args[0])) from e
    partitions = []
    for name in sorted(metadata.topics):
        topic = metadata.topics[name]
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            partitions.append(
                {
                    "topic": name,
                    "partition": index,
                    "leader": p.leader,
                    "replicas": list(p.replicas),
                    "isr": list(p.isrs),
                    "under_replicated": len(p.isrs) < len(p.replicas),
                    "offline": p.leader < 0,
                }
            )
    return {
        "cluster_id": metadata.cluster_id,
        "controller": metadata.controller_id,
        "brokers": [
            {"id": b.id, "host": b.host, "port": b.port}
            for b in sorted(metadata.brokers.values(), key=lambda b: b.id)
        ],
        "partitions": partitions,
        "under_replicated": sum(p["under_replicated"] for p in partitions),
        "offline": sum(p["offline"] for p in partitions),
    }


def run_describe(args: argparse.Namespace) -> int:
    doc = describe_cluster(_admin(args))
    if args.json:
        print(json.dumps(doc))
        return EXIT_OK
    print(f"cluster {doc['cluster_id']}: controller {doc['controller']}")
    for b in doc["brokers"]:
        print(f"broker {b['id']} {b['host']}:{b['port']}")
    print(
        f"{len(doc['partitions'])} partitions, {doc['under_replicated']} under-replicated, "
        f"{doc['offline']} offline"
    )
    print("TOPIC\tPARTITION\tLEADER\tREPLICAS\tISR\tSTATUS")
    for p in doc["partitions"]:
        status = (
            "offline" if p["offline"] else "under-replicated" if p["under_replicated"] else "ok"
        )
        replicas = ",".join(map(str, p["replicas"]))
        isr = ",".join(map(str, p["isr"]))
        print(f"{p['topic']}\t{p['partition']}\t{p['leader']}\t{replicas}\t{isr}\t{status}")
    return EXIT_OK


def _partitions(specs: list[str]) -> list[Any] | None:
    from confluent_kafka import TopicPartition

    if not specs:
        return None
    out = []
    for spec in specs:
        topic, sep, index = spec.rpartition(":")
        if not sep or not topic or not index.isdigit():
            raise CommandError(f"--partition {spec}: expected TOPIC:PARTITION")
        out.append(TopicPartition(topic, int(index)))
    return out


def run_elect_leaders(args: argparse.Namespace) -> int:
    from confluent_kafka import ElectionType, KafkaException

    election = ElectionType.UNCLEAN if args.unclean else ElectionType.PREFERRED
    admin = _admin(args)  # kept alive: the future fails if the client is collected
    future = admin.elect_leaders(election, _partitions(args.partition))
    try:
        results = future.result(TIMEOUT_S)
    except KafkaException as e:
        raise CommandError(str(e.args[0])) from e
    rows = []
    for tp, failure in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        error = failure.args[0] if failure is not None else None  # a KafkaError
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "error": None if error is None else error.name(),
                "message": None if error is None else error.str(),
            }
        )
    if args.json:
        print(json.dumps({"results": rows}))
    else:
        for r in rows:
            outcome = "elected" if r["error"] is None else f"{r['error']}: {r['message']}"
            print(f"{r['topic']}-{r['partition']}\t{outcome}")
    # ELECTION_NOT_NEEDED is no failure: the partition already has the leader asked for.
    failed = [r for r in rows if r["error"] not in (None, "ELECTION_NOT_NEEDED")]
    return EXIT_BAD_DATA if failed else EXIT_OK
