"""``tierlog restore`` into a ZooKeeper-mode cluster: the checks and the ZooKeeper
registration against a real ZooKeeper, the metadata published through the RLMM's client,
and the command's refusals with real cluster brokers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from core.log.leader_epoch import EpochEntry
from core.server.zookeeper.data import BrokerRegistration, EndPoint
from core.server.zookeeper.kafka_zk import KafkaZkClient
from core.server.zookeeper.topic_data import ReplicaAssignment, TopicAssignment
from rlmm.kafka_client import KafkaMetadataTopicClient
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.topic_client import MetadataTopicError
from tests.support import super_user
from tests.support.broker_process import start_broker
from tests.support.cluster import DEADLINE_S, cluster_factory  # noqa: F401 - fixture
from tests.support.cluster_clients import produce
from tests.support.memory_metadata import MemoryTopic
from tests.support.tiered_data import TierWriter, local_rsm_props, write_tiered_topic
from tiered.api import RemoteLogSegmentState, RemoteStorageError, TopicIdPartition
from tierlog import cluster_restore
from tierlog.cli import main
from tierlog.remote_storage_config import open_object_store_rsm
from tierlog.topic_restore import RestoreError, TopicPlan, plan_topic, publish_segments

DEFAULTS: dict[str, str] = {}
CONFIGS = {"remote.storage.enable": "true", "retention.ms": "-1", "max.message.bytes": "5000"}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[tuple[dict[str, str], TopicPlan]]:
    props = local_rsm_props(tmp_path / "bucket")
    writer = TierWriter(tmp_path, props, tmp_path / "lost-broker")
    write_tiered_topic(writer, partitions=3, batches=9, configs=CONFIGS)
    writer.close()
    rsm = open_object_store_rsm(props)
    try:
        plan = plan_topic(rsm, "orders")
    finally:
        rsm.close()
    yield props, plan


async def brokers(zk_chroot: str, ids: list[int]) -> KafkaZkClient:
    """A session holding the registrations of brokers ``ids`` (as live brokers do)."""
    zk = await KafkaZkClient.connect(zk_chroot)
    await zk.ensure_persistent_paths()
    for broker_id in ids:
        endpoint = EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id, "PLAINTEXT")
        await zk.register_broker(BrokerRegistration(broker_id, (endpoint,)))
    return zk


def test_registration_keeps_id_partitions_and_configs_over_the_live_brokers(
    zk_chroot: str, bucket: tuple[dict[str, str], TopicPlan]
) -> None:
    _, plan = bucket

    async def scenario() -> None:
        zk = await brokers(zk_chroot, [1, 2, 3])
        try:
            view = await cluster_restore.check_cluster(
                zk, [plan], replication_factor=2, broker_defaults=DEFAULTS
            )
            assert view.broker_ids == [1, 2, 3]
            assert view.bootstrap("PLAINTEXT") == "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"
            await cluster_restore.register_topics(
                zk, [plan], live_brokers=view.broker_ids, replication_factor=2,
                broker_defaults=DEFAULTS,
            )  # fmt: skip
            assignment = await zk.get_topic_assignment("orders")
            assert assignment is not None and assignment.topic_id == plan.topic_id
            replicas = {p: a.replicas for p, a in assignment.partitions.items()}
            assert sorted(replicas) == [0, 1, 2]
            for r in replicas.values():
                assert len(r) == 2 and len(set(r)) == 2 and set(r) <= {1, 2, 3}
            # Kafka's rack-unaware placement: consecutive partitions' leaders round-robin.
            assert sorted(r[0] for r in replicas.values()) == [1, 2, 3]
            assert await zk.get_topic_config("orders") == CONFIGS
            # Run again (or the topic restored meanwhile): refused, naming it.
            with pytest.raises(RestoreError, match="topic orders exists in the cluster"):
                await cluster_restore.check_cluster(
                    zk, [plan], replication_factor=2, broker_defaults=DEFAULTS
                )
        finally:
            await zk.close()

    run(scenario())


def test_the_restored_producer_ids_are_reserved_in_zookeeper(
    zk_chroot: str, bucket: tuple[dict[str, str], TopicPlan]
) -> None:
    _, plan = bucket
    # The lost cluster had handed out producer ids up to 5000; the restored producer state
    # names them. A ZooKeeper built again must not hand them out to new producers.
    old_ids = dataclasses.replace(
        plan,
        partition_plans=tuple(
            dataclasses.replace(p, max_producer_id=5000 if p.partition == 1 else 17)
            for p in plan.partition_plans
        ),
    )

    async def scenario() -> None:
        zk = await brokers(zk_chroot, [1, 2])
        try:
            # A new cluster: nothing handed out yet, so no producer can hold a restored id.
            assert await cluster_restore.reserve_producer_ids(zk, [old_ids]) is None
            block = await zk.allocate_producer_id_block(1)
            assert block.first_producer_id == 5001
            # A cluster that handed out ids already is warned: its producers may hold some.
            again = dataclasses.replace(
                old_ids,
                partition_plans=tuple(
                    dataclasses.replace(p, max_producer_id=9000) for p in plan.partition_plans
                ),
            )
            warning = await cluster_restore.reserve_producer_ids(zk, [again])
            assert warning is not None and "up to 6000" in warning and "9000" in warning
            assert (await zk.allocate_producer_id_block(2)).first_producer_id == 9001
        finally:
            await zk.close()

    run(scenario())


def test_the_checks_refuse_what_the_cluster_cannot_take(
    zk_chroot: str, bucket: tuple[dict[str, str], TopicPlan]
) -> None:
    _, plan = bucket

    async def check(zk: KafkaZkClient, p: TopicPlan = plan, factor: int = 1) -> None:
        await cluster_restore.check_cluster(
            zk, [p], replication_factor=factor, broker_defaults=DEFAULTS
        )

    async def scenario() -> None:
        zk = await KafkaZkClient.connect(zk_chroot)
        try:
            await zk.ensure_persistent_paths()
            with pytest.raises(RestoreError, match="no broker is registered"):
                await check(zk)
        finally:
            await zk.close()
        zk = await brokers(zk_chroot, [1, 2])
        try:
            with pytest.raises(RestoreError, match="replication factor 3 is larger than the 2"):
                await check(zk, factor=3)
            untiered = TopicPlan(
                plan.topic, plan.topic_id, plan.partitions, {"retention.ms": "-1"}, True,
                plan.partition_plans,
            )  # fmt: skip
            with pytest.raises(RestoreError, match=r"remote\.storage\.enable"):
                await check(zk, untiered)
            bad = TopicPlan(
                plan.topic, plan.topic_id, plan.partitions, {**CONFIGS, "retention.ms": "x"},
                True, plan.partition_plans,
            )  # fmt: skip
            with pytest.raises(RestoreError, match=r"retention\.ms"):
                await check(zk, bad)
            # Another topic holds the id: refused, naming it.
            other = TopicAssignment(plan.topic_id, {0: ReplicaAssignment((1,))})
            await zk.create_topic_assignment("payments", other)
            with pytest.raises(RestoreError, match="is topic payments in the cluster"):
                await check(zk)
            # A topic being deleted under the name.
            fresh = TopicAssignment(uuid.uuid4(), {0: ReplicaAssignment((1,))})
            await zk.create_topic_assignment("orders", fresh)
            await zk.mark_topic_for_deletion("orders")
            with pytest.raises(RestoreError, match="orders is being deleted"):
                await check(zk)
            assert await zk.get_topic_config("orders") == {}  # nothing was written
        finally:
            await zk.close()

    run(scenario())


def test_publishing_records_each_canonical_segment_finished_once(
    bucket: tuple[dict[str, str], TopicPlan],
) -> None:
    _, plan = bucket
    topic = MemoryTopic(5)
    publish_segments(topic, 2, [plan], metadata_partitions=5)
    publish_segments(topic, 2, [plan], metadata_partitions=5)  # a second run adds nothing
    records = sum(len(topic.partitions[p]) for p in range(5))
    assert records == 2 * plan.segments  # one add and one finish each
    rlmm = TopicBasedRemoteLogMetadataManager(topic)
    rlmm.configure({"remote.log.metadata.topic.num.partitions": "5"})
    try:
        for p in plan.partition_plans:
            tp = TopicIdPartition(plan.topic_id, plan.topic, p.partition)
            rlmm.on_partition_leadership_changes(set(), {tp})
            assert rlmm.wait_ready(tp, 10)
            listed = list(rlmm.list_remote_log_segments(tp))
            assert [md.segment_id for md in listed] == [md.segment_id for md in p.segments]
            assert {md.state for md in listed} == {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
            assert {md.broker_id for md in listed} <= {2, p.segments[0].broker_id}
    finally:
        rlmm.close()


def test_brokers_without_tiering_are_named() -> None:
    default = "rlmm.manager.TopicBasedRemoteLogMetadataManager"
    configs = {
        1: {"remote.log.storage.system.enable": "true"},
        2: {"remote.log.storage.system.enable": "false"},
        3: {
            "remote.log.storage.system.enable": "true",
            "remote.log.metadata.manager.class.name": "x.Y",
        },
    }
    problems = cluster_restore.brokers_not_tiering(configs, default)
    assert problems == [
        "broker 2: remote.log.storage.system.enable is not true",
        "broker 3: remote.log.metadata.manager.class.name=x.Y, not the default manager "
        f"({default})",
    ]


def write_config(path: Path, props: dict[str, str], zk_connect: str, **extra: str) -> Path:
    settings = {
        **props,
        "node.id": "9",
        "log.dirs": str(path.parent / "unused-log-dir"),
        "remote.log.storage.system.enable": "true",
        "zookeeper.connect": zk_connect,
        **extra,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def test_the_command_refuses_a_cluster_that_does_not_tier_and_writes_nothing(
    tmp_path: Path,
    bucket: tuple[dict[str, str], TopicPlan],
    cluster_factory,  # noqa: F811 - the fixture
    capsys,
) -> None:
    props, _ = bucket
    cluster = cluster_factory(size=2)
    config = write_config(tmp_path / "restore.properties", props, cluster.zk_connect)
    code = main(["restore", "--config", str(config), "--topic", "orders", "--json"])
    out, err = capsys.readouterr()
    assert code == 1, out
    assert "the cluster does not tier" in err
    assert "broker 1: remote.log.storage.system.enable is not true" in err
    assert "broker 2: remote.log.storage.system.enable is not true" in err

    async def topics() -> set[str]:
        zk = await KafkaZkClient.connect(cluster.zk_connect, create_chroot=False)
        try:
            return await zk.get_all_topics()
        finally:
            await zk.close()

    assert "orders" not in run(topics())
    assert not (tmp_path / "unused-log-dir").exists()


def test_the_command_refuses_an_empty_cluster_and_single_broker_only_options(
    tmp_path: Path, bucket: tuple[dict[str, str], TopicPlan], zk_chroot: str, capsys
) -> None:
    props, _ = bucket

    async def prepare() -> None:
        zk = await KafkaZkClient.connect(zk_chroot)
        await zk.ensure_persistent_paths()
        await zk.close()

    run(prepare())
    config = write_config(tmp_path / "restore.properties", props, zk_chroot)
    code = main(["restore", "--config", str(config), "--topic", "orders"])
    _, err = capsys.readouterr()
    assert code == 1 and "no broker is registered in ZooKeeper" in err
    single = tmp_path / "single.properties"
    single.write_text(config.read_text().replace(f"zookeeper.connect={zk_chroot}\n", ""))
    code = main(["restore", "--config", str(single), "--topic", "orders",
                 "--replication-factor", "2"])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2 and "are for a cluster" in err


def test_publishing_over_the_protocol_needs_a_super_user(
    tmp_path: Path, bucket: tuple[dict[str, str], TopicPlan]
) -> None:
    _, plan = bucket
    broker = start_broker(tmp_path / "broker", super_user.settings())
    try:
        bootstrap = super_user.sasl_bootstrap(broker)
        admin = KafkaMetadataTopicClient(bootstrap, timeout_s=15, **super_user.client_config())
        admin.ensure_topic(3)
        # An ordinary principal may not write __remote_log_metadata: nothing is recorded.
        alice = KafkaMetadataTopicClient(
            bootstrap, timeout_s=15, **super_user.client_config("alice")
        )
        with pytest.raises((MetadataTopicError, RemoteStorageError), match=r"(?i)authoriz"):
            publish_segments(alice, 9, [plan], metadata_partitions=3)
        assert admin.end_offset(0) + admin.end_offset(1) + admin.end_offset(2) == 0
        publish_segments(admin, 9, [plan], metadata_partitions=3)
        reader = KafkaMetadataTopicClient(bootstrap, timeout_s=15, **super_user.client_config())
        rlmm = TopicBasedRemoteLogMetadataManager(reader)
        rlmm.configure({"remote.log.metadata.topic.num.partitions": "3"})
        try:
            for p in plan.partition_plans:
                tp = TopicIdPartition(plan.topic_id, plan.topic, p.partition)
                rlmm.on_partition_leadership_changes(set(), {tp})
                assert rlmm.wait_ready(tp, 30)
                listed = list(rlmm.list_remote_log_segments(tp))
                assert [md.segment_id for md in listed] == [md.segment_id for md in p.segments]
                assert {md.state for md in listed} == {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
        finally:
            rlmm.close()
    finally:
        code = broker.stop()
        assert code == 0, broker.log_tail()


def test_registered_partitions_are_led_by_live_brokers_after_the_restored_epoch(
    bucket: tuple[dict[str, str], TopicPlan],
    cluster_factory,  # noqa: F811 - the fixture
) -> None:
    _, plan = bucket
    # A lineage that reached leader epoch 4: the partitions' first leaders lead epoch 5, so
    # that new batches never go back in epoch (the controller would start them at 0).
    raised = dataclasses.replace(
        plan,
        partition_plans=tuple(
            dataclasses.replace(p, epochs=(*p.epochs, EpochEntry(4, p.next_offset)))
            for p in plan.partition_plans
        ),
    )
    cluster = cluster_factory(size=2)

    async def register() -> None:
        zk = await KafkaZkClient.connect(cluster.zk_connect, create_chroot=False)
        try:
            view = await cluster_restore.check_cluster(
                zk, [raised], replication_factor=2, broker_defaults=DEFAULTS
            )
            await cluster_restore.register_topics(
                zk, [raised], live_brokers=view.broker_ids, replication_factor=2,
                broker_defaults=DEFAULTS,
            )  # fmt: skip
        finally:
            await zk.close()

    run(register())
    cluster.wait_topic("orders", 3, 2)
    acked = produce(cluster, "orders", [f"v{i}".encode() for i in range(12)])
    assert {p for p, _, _ in acked} == {0, 1, 2}
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "epochs", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition("orders", p, 0) for p in range(3)])
        epochs: dict[int, set[int]] = {}
        deadline = time.monotonic() + DEADLINE_S
        while sum(len(v) for v in epochs.values()) < 3 or len(epochs) < 3:
            assert time.monotonic() < deadline, epochs
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            epochs.setdefault(message.partition(), set()).add(message.leader_epoch())
            if len(epochs) == 3:
                break
        assert epochs == {0: {5}, 1: {5}, 2: {5}}
    finally:
        consumer.close()


def test_the_command_publishes_the_segments_then_registers_the_topic(
    tmp_path: Path,
    bucket: tuple[dict[str, str], TopicPlan],
    zk_chroot: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> None:
    props, plan = bucket
    broker = start_broker(tmp_path / "broker", super_user.settings())
    command_config = tmp_path / "admin.properties"
    command_config.write_text("".join(f"{k}={v}\n" for k, v in super_user.client_config().items()))
    # The cluster's brokers as ZooKeeper shows them (registrations only: no broker answers
    # for them), all tiering; the broker started here serves __remote_log_metadata.
    monkeypatch.setattr(
        cluster_restore,
        "describe_broker_configs",
        lambda bootstrap, ids, settings: {
            b: {"remote.log.storage.system.enable": "true"} for b in ids
        },
    )

    async def with_brokers() -> None:
        zk = await brokers(zk_chroot, [1, 2, 3])
        try:
            argv = [
                "restore", "--config", str(config), "--topic", "orders", "--json",
                "--replication-factor", "3", "--command-config", str(command_config),
                "--bootstrap-server", super_user.sasl_bootstrap(broker),
            ]  # fmt: skip
            code = await asyncio.to_thread(main, argv)
            out, err = capsys.readouterr()
            results.append((code, out, err, await zk.get_topic_assignment("orders")))
        finally:
            await zk.close()

    try:
        config = write_config(tmp_path / "restore.properties", props, zk_chroot)
        results: list[tuple[int, str, str, Any]] = []
        run(with_brokers())
        code, out, err, assignment = results[-1]
        assert code == 0, err
        summary = json.loads(out)
        assert summary["topics"][0]["segments"] == plan.segments
        assert assignment is not None and assignment.topic_id == plan.topic_id
        assert all(len(a.replicas) == 3 for a in assignment.partitions.values())
        published = KafkaMetadataTopicClient(
            super_user.sasl_bootstrap(broker), timeout_s=15, **super_user.client_config()
        )
        try:
            total = sum(published.end_offset(p) for p in range(published.partition_count()))
        finally:
            published.close()
        assert total == 2 * plan.segments
    finally:
        assert broker.stop() == 0, broker.log_tail()
