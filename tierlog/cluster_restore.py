"""Restoring topics into a ZooKeeper-mode cluster (``tierlog restore`` with zookeeper.connect).

A single broker's restore (``tierlog.topic_restore``) writes the stopped broker's own
storage. A cluster's brokers keep running and own their disks, so a cluster restore writes
only what a Kafka cluster shares, in the order that keeps a run cut short harmless:

1. checks, writing nothing: the topic and its id are unknown to the cluster, enough brokers
   are registered for the replication factor, the topic's configs are valid and tiered, and
   every live broker tiers (``remote.log.storage.system.enable=true`` with the default
   metadata manager, asked over the protocol with DescribeConfigs);
2. the producer ids of the restored producer state reserved in
   ``/latest_producer_id_block`` (``reserve_producer_ids``: a ZooKeeper built again would
   hand them out anew), before anything else makes a broker claim a block (the tool's own
   idempotent producer below does);
3. ``__remote_log_metadata``: the canonical segments published over the Kafka protocol
   (``topic_restore.publish_segments`` through the RLMM's Kafka client, as a super user or
   the broker principal: only they may produce there), in the name of the config's
   ``node.id``; a run cut short records each segment once when run again;
4. last, the commit, as Kafka's ZooKeeper-mode admin creates a topic (``ZkClusterAdmin``,
   reused): ``/config/topics/<t>`` with the manifest's configs, then ``/brokers/topics/<t>``
   with the original topic id, the partition count and Kafka's rack-unaware assignment over
   the live brokers, and in the same ZooKeeper transaction each partition's state znode at
   the leader epoch after the lineage's latest (so new batches never go back in epoch); the
   controller adopts those states and tells the replicas.

The replicas' local logs are not written by the tool (they are on the brokers' disks): each
broker that becomes the leader of a restored partition finds its local log empty while its
RLMM holds finished segments, and starts the log after the newest one of the newest leader
epoch, with that segment's leader epochs and producer state, before it serves the partition
(the remote start of ``core.server.replica_manager``; Apache Kafka has no topic restore and
no such step). Its followers, empty too, then take KIP-405's path: OFFSET_MOVED_TO_TIERED_STORAGE
at offset 0, their state built from the remote tier. See docs/OPERATIONS.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.errors import CoreError
from core.kafka_uuid import uuid_to_base64
from core.log.config import LogConfig
from core.server.metadata_cache import MetadataCache
from core.server.topics import TopicInfo
from core.server.zk_admin import MetadataWaiters, ZkClusterAdmin
from core.server.zookeeper.data import BrokerRegistration
from core.server.zookeeper.kafka_zk import KafkaZkClient
from tierlog.topic_restore import REMOTE_STORAGE_ENABLE, RestoreError, TopicPlan

REMOTE_LOG_STORAGE_SYSTEM_ENABLE = "remote.log.storage.system.enable"
RLMM_CLASS_NAME_KEY = "remote.log.metadata.manager.class.name"
# The "broker" a producer-id block reserved by the tool names (no broker claimed it).
RESTORE_TOOL_BROKER_ID = -1


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the checks read of the cluster: its live brokers, by id."""

    brokers: Mapping[int, BrokerRegistration]

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def bootstrap(self, listener_name: str) -> str:
        """``host:port,...`` of the live brokers' ``listener_name`` endpoints ('' if none)."""
        found = []
        for broker_id in self.broker_ids:
            endpoint = self.brokers[broker_id].endpoint(listener_name)
            if endpoint is not None and endpoint.host:
                found.append(f"{endpoint.host}:{endpoint.port}")
        return ",".join(found)


async def check_cluster(
    zk: KafkaZkClient,
    plans: Sequence[TopicPlan],
    *,
    replication_factor: int,
    broker_defaults: Mapping[str, str],
) -> ClusterView:
    """Refuse what the cluster cannot take, writing nothing (see the module docstring).

    Raises:
        RestoreError: naming the topic, its id, or what the cluster lacks.
    """
    brokers = await zk.get_live_brokers()
    if not brokers:
        raise RestoreError(
            "no broker is registered in ZooKeeper (/brokers/ids): start the cluster's brokers "
            "first; the restored partitions are placed on the live ones"
        )
    if replication_factor > len(brokers):
        raise RestoreError(
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} live brokers ({', '.join(map(str, sorted(brokers)))})"
        )
    existing = await zk.get_all_topics()
    marked = await zk.get_topics_marked_for_deletion()
    ids: dict[uuid.UUID, str] = {
        assignment.topic_id: name
        for name, assignment in (await zk.get_topic_assignments(existing)).items()
        if assignment.topic_id is not None
    }
    for plan in plans:
        if plan.topic in marked:
            raise RestoreError(
                f"topic {plan.topic} is being deleted in the cluster: wait until it is gone"
            )
        if plan.topic in existing:
            raise RestoreError(
                f"topic {plan.topic} exists in the cluster: restore refuses to replace it"
            )
        if plan.topic_id in ids:
            raise RestoreError(
                f"topic {plan.topic}: its id {uuid_to_base64(plan.topic_id)} is topic "
                f"{ids[plan.topic_id]} in the cluster"
            )
        key = plan.topic.replace(".", "_")
        clash = sorted(t for t in existing if t.replace(".", "_") == key)
        if clash:
            raise RestoreError(
                f"topic {plan.topic} collides with existing topics: {', '.join(clash)}"
            )
        try:
            config = LogConfig.from_props(dict(plan.configs), defaults=dict(broker_defaults))
        except CoreError as e:
            raise RestoreError(f"topic {plan.topic}: {e}") from e
        if not config.remote_storage_enable:
            raise RestoreError(
                f"topic {plan.topic}: its configs do not enable {REMOTE_STORAGE_ENABLE}: the "
                "brokers would not read its remote data"
            )
    return ClusterView(brokers)


async def reserve_producer_ids(zk: KafkaZkClient, plans: Sequence[TopicPlan]) -> str | None:
    """Reserve in ZooKeeper the producer ids the restored producer state names: a cluster
    built again would hand them out anew, and a new producer given one would meet another's
    sequences (OUT_OF_ORDER_SEQUENCE_NUMBER). Returns a warning when the cluster had handed
    out producer ids already: its producers may hold ids the restored state names too."""
    highest = max((p.max_producer_id for plan in plans for p in plan.partition_plans), default=-1)
    if highest < 0:
        return None
    previous = await zk.reserve_producer_ids_through(RESTORE_TOOL_BROKER_ID, highest)
    if previous < 0:
        return None
    return (
        f"this cluster has handed out producer ids already (up to {previous}); the restored "
        f"producer state names ids up to {highest}: a producer of this cluster holding one "
        "of them would be refused (OUT_OF_ORDER_SEQUENCE_NUMBER) writing to a restored "
        "partition until it starts again with a new id"
    )


def brokers_not_tiering(
    broker_configs: Mapping[int, Mapping[str, str]], default_rlmm: str
) -> list[str]:
    """Why each live broker could not serve a restored topic's remote tier (empty: all can).

    Args:
        broker_configs: per broker id, its configs as DescribeConfigs gives them.
    """
    problems = []
    for broker_id in sorted(broker_configs):
        configs = broker_configs[broker_id]
        if configs.get(REMOTE_LOG_STORAGE_SYSTEM_ENABLE, "false").lower() != "true":
            problems.append(f"broker {broker_id}: {REMOTE_LOG_STORAGE_SYSTEM_ENABLE} is not true")
        elif configs.get(RLMM_CLASS_NAME_KEY, default_rlmm) != default_rlmm:
            problems.append(
                f"broker {broker_id}: {RLMM_CLASS_NAME_KEY}={configs[RLMM_CLASS_NAME_KEY]}, "
                f"not the default manager ({default_rlmm})"
            )
    return problems


def describe_broker_configs(
    bootstrap_servers: str,
    broker_ids: Sequence[int],
    client_settings: Mapping[str, str],
    timeout_s: float = 30.0,
) -> dict[int, dict[str, str]]:
    """Each broker's configs, asked over the protocol (DescribeConfigs, resource BROKER).

    Raises:
        RestoreError: a broker cannot be asked (the message names it).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({**client_settings, "bootstrap.servers": bootstrap_servers})
    out: dict[int, dict[str, str]] = {}
    # librdkafka takes one BROKER resource per call.
    for broker_id in broker_ids:
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        (future,) = admin.describe_configs([resource], request_timeout=timeout_s).values()
        try:
            entries = future.result(timeout=timeout_s)
        except (KafkaException, TimeoutError) as e:
            raise RestoreError(f"cannot read the configs of broker {broker_id}: {e}") from e
        out[broker_id] = {
            name: entry.value for name, entry in entries.items() if entry.value is not None
        }
    return out


async def register_topics(
    zk: KafkaZkClient,
    plans: Sequence[TopicPlan],
    *,
    live_brokers: Sequence[int],
    replication_factor: int,
    broker_defaults: Mapping[str, str],
) -> list[TopicInfo]:
    """Register each topic in ZooKeeper with its own id (the commit; see the module
    docstring), placing replicas over ``live_brokers`` with Kafka's rack-unaware rule.

    Raises:
        RestoreError: ZooKeeper refused a topic (it appeared meanwhile, say); the topics
            before it are registered.
    """
    # The admin's MetadataCache is only where a broker finds live brokers and waits for
    # leaders; the tool passes the brokers and does not wait (timeout 0).
    admin = ZkClusterAdmin(zk, MetadataWaiters(MetadataCache(-1)), broker_defaults)
    created = []
    for plan in plans:
        try:
            created.append(
                await admin.create_topic(
                    plan.topic,
                    plan.partitions,
                    plan.configs,
                    replication_factor=replication_factor,
                    topic_id=plan.topic_id,
                    brokers=live_brokers,
                    # New batches must not go back in epoch: the first leader starts the
                    # epoch after the restored lineage's latest, as a single broker's start.
                    first_leader_epochs={
                        p.partition: p.latest_epoch + 1 for p in plan.partition_plans
                    },
                )
            )
        except CoreError as e:
            raise RestoreError(f"topic {plan.topic}: {e}") from e
    return created
