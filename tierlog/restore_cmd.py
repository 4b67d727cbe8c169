"""``tierlog restore``: recreate topics from the remote tier alone, for a stopped broker.

For a broker that lost its disks: with the broker stopped, ``tierlog restore --config
FILE --topic T`` reads the bucket named by FILE (the broker's ``server.properties``) and
recreates T in the broker's log dirs with the same topic id, partition count and configs,
its finished remote segments in ``__remote_log_metadata``, and each partition's local log
empty after the last remote offset with its leader epochs and producer state
(``tierlog.topic_restore``). Once the broker starts, reads from offset 0 are served from the
remote tier and new records are appended after it.

Refused, naming what is wrong: a topic that exists; a broker that is running (its log dirs
are locked); a bucket without the topic's ``topic-manifest.json`` unless ``--partitions``
(and ``--topic-config``) say what it held; a config that does not tier
(``remote.log.storage.system.enable``) or another metadata manager than the default.

With ``zookeeper.connect`` in FILE the topic is restored into the cluster
(``tierlog.cluster_restore``): checked against ZooKeeper and the live brokers' configs, its
segments published to ``__remote_log_metadata`` over the protocol, then registered in
ZooKeeper with its id, configs and an assignment over the live brokers. Each broker that
becomes a replica of a restored partition starts its empty log after the remote tier before
serving it (``core.server.replica_manager``'s remote start).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from tierlog.cli import EXIT_OK, EXIT_USAGE, CommandError, Subparsers, positive_int

# Below the S3 plugin's connection pool (10): more threads would open and drop connections.
DEFAULT_READ_THREADS = 8


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "restore",
        help="recreate topics from the remote tier alone (broker stopped)",
        description=(
            "Recreate topics from the remote tier alone, for a broker that lost its disks: "
            "same topic id, partitions and configs, the remote segments registered, the "
            "local log starting after the last remote offset with its leader epochs and "
            "producer state. The broker must be stopped; a topic that exists is refused."
        ),
    )
    p.add_argument(
        "--config",
        type=Path,
        required=True,
        metavar="FILE",
        help="the broker's properties (server.properties): log dirs, remote tier, RSM plugin",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, as `tierlog broker start --set` (repeatable)",
    )
    p.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="T",
        help="a topic to restore (repeatable)",
    )
    p.add_argument(
        "--partitions",
        type=positive_int,
        metavar="N",
        help="partition count of topics whose bucket has no topic manifest (written before "
        "tierlog kept one)",
    )
    p.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config of topics without a topic manifest (repeatable; "
        "remote.storage.enable=true is implied)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=DEFAULT_READ_THREADS,
        metavar="N",
        help=f"parallel reads of the bucket (default {DEFAULT_READ_THREADS})",
    )
    p.add_argument(
        "--replication-factor",
        type=positive_int,
        metavar="N",
        help="cluster only: replicas per partition (default: the config's "
        "default.replication.factor)",
    )
    p.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="cluster only: where to publish __remote_log_metadata and ask the brokers' "
        "configs (default: the live brokers' inter-broker listener, from ZooKeeper)",
    )
    p.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="cluster only: client properties (TLS, SASL) of a super user or the broker "
        "principal: only they may write __remote_log_metadata",
    )
    p.add_argument("--json", action="store_true", help="the summary as JSON on stdout")
    p.set_defaults(handler=run_restore)


def _pairs(option: str, pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"{option} expects KEY=VALUE, got {pair!r}", EXIT_USAGE)
        out[key.strip()] = value.strip()
    return out


def progress(message: str) -> None:
    print(f"tierlog: restore: {message}", file=sys.stderr, flush=True)


def run_restore(args: argparse.Namespace) -> int:
    from core.errors import CoreError
    from core.server.config import load_broker_config
    from rlmm.manager import NUM_PARTITIONS_KEY, TopicBasedRemoteLogMetadataManager
    from rlmm.topic_client import DEFAULT_METADATA_PARTITIONS
    from tiered.api import RLMM_CLASS_NAME, RLMM_CONFIG_PREFIX, RemoteStorageError
    from tierlog.offline_storage import OfflineBrokerStorage, OfflineStorageError
    from tierlog.remote_storage_config import open_object_store_rsm
    from tierlog.topic_restore import RestoreError, plan_topic, restore

    topics = list(dict.fromkeys(args.topic))
    if len(topics) != len(args.topic):
        raise CommandError("a --topic is given twice", EXIT_USAGE)
    overrides = _pairs("--set", args.set)
    topic_configs = _pairs("--topic-config", args.topic_config)
    try:
        config = load_broker_config(args.config, overrides)
    except (CoreError, OSError, ValueError) as e:
        raise CommandError(str(e)) from e
    cluster = "zookeeper.connect" in config.originals
    if not cluster and (args.replication_factor or args.bootstrap_server or args.command_config):
        raise CommandError(
            "--replication-factor, --bootstrap-server and --command-config are for a cluster "
            f"(zookeeper.connect in the config); {args.config} has none",
            EXIT_USAGE,
        )
    if not config.remote_log_storage_system_enable:
        raise CommandError(
            f"{args.config}: remote.log.storage.system.enable is false: the broker would not "
            "serve the remote tier of a restored topic"
        )
    rlmm_class = config.get(RLMM_CLASS_NAME)
    default_rlmm = f"{TopicBasedRemoteLogMetadataManager.__module__}." + (
        TopicBasedRemoteLogMetadataManager.__name__
    )
    if rlmm_class != default_rlmm:
        raise CommandError(
            f"{args.config}: {RLMM_CLASS_NAME}={rlmm_class}: restore writes the metadata of "
            f"the default manager ({default_rlmm}) only"
        )
    raw_partitions = config.originals.get(
        RLMM_CONFIG_PREFIX + NUM_PARTITIONS_KEY, str(DEFAULT_METADATA_PARTITIONS)
    )
    try:
        metadata_partitions = int(raw_partitions)
    except ValueError:
        raise CommandError(
            f"{RLMM_CONFIG_PREFIX}{NUM_PARTITIONS_KEY}={raw_partitions!r} is not a number"
        ) from None
    began = time.monotonic()
    try:
        rsm = open_object_store_rsm(config.originals)
    except RemoteStorageError as e:
        raise CommandError(str(e)) from e
    try:
        plans = []
        for topic in topics:
            progress(f"{topic}: reading the bucket")
            plans.append(
                plan_topic(
                    rsm,
                    topic,
                    partitions=args.partitions,
                    configs=topic_configs,
                    threads=args.threads,
                    progress=progress,
                )
            )
        if cluster:
            _restore_into_cluster(args, config, plans, metadata_partitions)
            plans_done = plans
        else:
            try:
                storage = OfflineBrokerStorage.of_broker(config)
            except OfflineStorageError as e:
                raise CommandError(f"{e}: the broker must be stopped") from e
            try:
                restored = restore(
                    storage, plans, metadata_partitions=metadata_partitions, progress=progress
                )
            finally:
                storage.close()
            plans_done = [r.plan for r in restored]
    except RestoreError as e:
        raise CommandError(str(e)) from e
    except RemoteStorageError as e:
        raise CommandError(f"{e} (nothing was registered: run the restore again)") from e
    finally:
        rsm.close()
    elapsed = time.monotonic() - began
    docs = [_topic_json(plan) for plan in plans_done]
    if args.json:
        print(json.dumps({"topics": docs, "seconds": round(elapsed, 3)}, separators=(",", ":")))
        return EXIT_OK
    for doc in docs:
        print(
            f"restored topic {doc['topic']} (id {doc['topic_id']}): {doc['partitions']} "
            f"partitions, {doc['segments']} segments, {doc['remote_bytes']} bytes"
            + ("" if doc["from_manifest"] else " (partitions and configs as given)")
        )
        for p in doc["partition_details"]:
            offsets = (
                "no remote data: empty from offset 0"
                if not p["segments"]
                else f"offsets {p['log_start_offset']}..{p['next_offset'] - 1} remote, "
                f"new records from {p['next_offset']}"
            )
            left_out = (
                f", {p['left_out']} copies off the canonical log left out" if p["left_out"] else ""
            )
            print(
                f"  partition {p['partition']}: {p['segments']} segments, {offsets}, "
                f"leader epoch {p['latest_epoch']}{left_out}"
            )
        for warning in doc["warnings"]:
            print(f"  warning: {warning}")
    if cluster:
        print(f"restored {len(docs)} topics into the cluster in {elapsed:.1f} s")
    else:
        print(f"restored {len(docs)} topics in {elapsed:.1f} s; start the broker to serve them")
    return EXIT_OK


def _restore_into_cluster(
    args: argparse.Namespace, config: Any, plans: list[Any], metadata_partitions: int
) -> None:
    """Check, publish the metadata, register in ZooKeeper (``tierlog.cluster_restore``).

    Raises:
        CommandError, RestoreError, RemoteStorageError.
    """
    import asyncio

    from rlmm.manager import TopicBasedRemoteLogMetadataManager
    from rlmm.topic_client import MetadataTopicError
    from tiered.api import RemoteStorageError
    from tierlog import cluster_restore
    from tierlog.metadata_source import client_properties
    from tierlog.topic_restore import publish_segments

    settings = client_properties(args.command_config) if args.command_config else {}
    factor = args.replication_factor or config.default_replication_factor
    defaults = config.log_config_defaults()
    default_rlmm = f"{TopicBasedRemoteLogMetadataManager.__module__}." + (
        TopicBasedRemoteLogMetadataManager.__name__
    )

    async def run() -> None:
        from core.server.zookeeper.errors import ZkError
        from core.server.zookeeper.kafka_zk import KafkaZkClient

        connect = config.get("zookeeper.connect")
        try:
            # A tool never creates the chroot: without it there is no cluster to restore into.
            zk = await KafkaZkClient.connect(
                connect,
                session_timeout_ms=config.get("zookeeper.session.timeout.ms"),
                connection_timeout_ms=config.get("zookeeper.connection.timeout.ms")
                or config.get("zookeeper.session.timeout.ms"),
                create_chroot=False,
            )
        except (ValueError, ZkError) as e:
            raise CommandError(f"zookeeper.connect={connect}: {e}") from e
        try:
            view = await cluster_restore.check_cluster(
                zk, plans, replication_factor=factor, broker_defaults=defaults
            )
            bootstrap = args.bootstrap_server or view.bootstrap(config.inter_broker_listener_name)
            if not bootstrap:
                raise CommandError(
                    f"no live broker advertises the listener {config.inter_broker_listener_name}"
                    ": give --bootstrap-server"
                )
            progress(f"cluster: brokers {view.broker_ids} live; asking their configs")
            configs = await asyncio.to_thread(
                cluster_restore.describe_broker_configs, bootstrap, view.broker_ids, settings
            )
            problems = cluster_restore.brokers_not_tiering(configs, default_rlmm)
            if problems:
                raise CommandError(
                    "the cluster does not tier, so it could not serve a restored topic: "
                    + "; ".join(problems)
                    + ". Nothing was written"
                )
            # First: the tool's own idempotent producer below makes a broker claim a block.
            warning = await cluster_restore.reserve_producer_ids(zk, plans)
            if warning is not None:
                progress(f"warning: {warning}")
            from rlmm.kafka_client import KafkaMetadataTopicClient

            try:
                client = KafkaMetadataTopicClient(bootstrap, **settings)
            except MetadataTopicError as e:
                raise CommandError(str(e)) from e
            try:
                await asyncio.to_thread(
                    publish_segments,
                    client,
                    config.node_id,
                    plans,
                    metadata_partitions=metadata_partitions,
                    progress=progress,
                )
            except MetadataTopicError as e:
                raise RemoteStorageError(str(e)) from e
            await cluster_restore.register_topics(
                zk,
                plans,
                live_brokers=view.broker_ids,
                replication_factor=factor,
                broker_defaults=defaults,
            )
            for plan in plans:
                progress(f"{plan.topic}: registered in ZooKeeper")
        finally:
            await zk.close()

    asyncio.run(run())


def _topic_json(plan: Any) -> dict[str, Any]:
    from core.kafka_uuid import uuid_to_base64

    return {
        "topic": plan.topic,
        "topic_id": uuid_to_base64(plan.topic_id),
        "partitions": plan.partitions,
        "configs": dict(plan.configs),
        "from_manifest": plan.from_manifest,
        "segments": plan.segments,
        "remote_bytes": plan.remote_bytes,
        "partition_details": [
            {
                "partition": p.partition,
                "segments": len(p.segments),
                "log_start_offset": p.log_start_offset,
                "next_offset": p.next_offset,
                "latest_epoch": p.latest_epoch,
                "producer_state_restored": p.producer_snapshot is not None,
                "gaps": [list(g) for g in p.gaps],
                "left_out": len(p.left_out),
            }
            for p in plan.partition_plans
        ],
        "warnings": list(plan.warnings),
    }
