"""KIP-405's follower and leadership scenarios on real brokers in one process.

The test is the controller (``tests/tiered/tiered_cluster.py``): it elects leaders and bumps
leader epochs as a controller's LeaderAndIsr would, so every offset and epoch of the KIP's
tables is reproduced exactly. Every message is its own batch; segments hold three batches
(``segment.bytes`` is three batch sizes), so the remote segments are the KIP's seg-0-2,
seg-3-5, ...
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import uuid
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from core.server.cluster_types import StopReplicaPartition
from core.server.kio_build import make, nested
from core.server.protocol import load_request_schema
from rlmm.serde import deserialize
from tests.support import shared_rlmm
from tests.support.waiting import until
from tests.tiered.tiered_cluster import TieredCluster, values
from tiered.api import (
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

TOPIC = "kip405"
TP = (TOPIC, 0)
NONE = 0
OFFSET_MOVED_TO_TIERED_STORAGE = 109
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
FAST_ISR = {"replica.lag.time.max.ms": "500"}  # a follower that stops leaves the ISR fast


def batch_size() -> int:
    builder = RecordBatchBuilder()
    value = values([0])[0]
    builder.append(value, key=value[:4])
    return len(bytes(builder.build()))


BATCH = batch_size()
SEGMENT = 3 * BATCH  # three batches, then a roll


def topic_config(**overrides: str) -> dict[str, str]:
    return {
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT),
        "retention.ms": "-1",
        "local.retention.ms": "-1",
        "local.retention.bytes": "-1",
        **overrides,
    }


class Scenario:
    """One topic of one partition on a tiered cluster; the test elects and produces."""

    def __init__(self, cluster: TieredCluster) -> None:
        self.cluster = cluster
        self.topic_id = uuid.uuid4()
        self.tidp = TopicIdPartition(self.topic_id, TOPIC, 0)
        self.replicas = list(cluster.nodes)

    async def elect(
        self, leader: int, epoch: int, isr: Sequence[int], to: Sequence[int] | None = None
    ) -> None:
        answers = await self.cluster.elect(
            TOPIC,
            self.topic_id,
            1,
            leader=leader,
            isr=isr,
            leader_epoch=epoch,
            replicas=self.replicas,
            to=to,
        )
        assert all(code == NONE for a in answers.values() for code in a.values()), answers

    async def produce(self, leader: int, tags: Sequence[int]) -> None:
        for value in values(tags):
            answer, _ = await self.cluster.produce(leader, TP, [value], acks=1)
            assert answer.error_code == NONE

    def finished(self, node: int) -> list[tuple[int, int, dict[int, int], int]]:
        """(start, end, epochs, copied by) of the COPY_SEGMENT_FINISHED remote segments."""
        return [
            (md.start_offset, md.end_offset, dict(md.segment_leader_epochs), md.broker_id)
            for md in self.cluster.segments(node, self.tidp, FINISHED)
        ]

    async def remote_ranges(self, node: int, ranges: list[tuple[int, int]]) -> None:
        try:
            # A restarted broker's metadata may still be loading (listing it raises).
            await until(
                lambda: (
                    self.cluster.node(node).rlm.rlmm.is_ready(self.tidp)
                    and [(s, e) for s, e, _, _ in self.finished(node)] == ranges
                ),
                timeout=30,
                what=f"remote segments {ranges} seen by broker {node}",
            )
        except AssertionError as e:
            raise AssertionError(f"{e}; finished: {self.finished(node)}") from None

    async def local_start(self, node: int, offset: int) -> None:
        await until(
            lambda: self.cluster.node(node).plog(TP).local_log_start_offset == offset,
            timeout=30,
            what=f"local log start {offset} on broker {node}",
        )

    async def isr(self, leader: int, isr: Sequence[int]) -> None:
        """Wait until the leader has committed ``isr`` (through the ISR writer)."""

        def committed() -> bool:
            partition = self.cluster.nodes[leader].partition(TP)
            return partition is not None and sorted(partition.isr) == sorted(isr)

        await until(committed, timeout=30, what=f"ISR {list(isr)} on broker {leader}")

    async def roll(self, node: int) -> None:
        """Roll the active segment (the KIP's tables place segment boundaries freely)."""
        self.cluster.node(node).plog(TP).roll()

    async def epoch_end(self, node: int, epoch: int) -> tuple[int, int]:
        """A consumer's OffsetsForLeaderEpoch (KIP-320): (epoch, end offset) ``node``
        answers for ``epoch``."""

        def build(version: int) -> Any:
            request_cls = load_request_schema(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
            return make(
                request_cls,
                replica_id=-1,
                topics=(
                    make(
                        nested(request_cls, "OffsetForLeaderTopic"),
                        topic=TOPIC,
                        partitions=(
                            make(
                                nested(request_cls, "OffsetForLeaderPartition"),
                                partition=0,
                                current_leader_epoch=-1,
                                leader_epoch=epoch,
                            ),
                        ),
                    ),
                ),
            )

        response = await self.cluster.client.send(
            self.cluster.nodes[node].endpoint,
            "test-consumer",
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            build,
            versions=(4, 4),
        )
        answer = response.topics[0].partitions[0]
        assert answer.error_code == NONE
        return int(answer.leader_epoch), int(answer.end_offset)

    def gapless(self, node: int) -> None:
        """The remote segments of the lineage follow each other with no gap or overlap."""
        segments = self.finished(node)
        for (_, end, _, _), (start, _, _, _) in itertools.pairwise(segments):
            assert start == end + 1, segments

    async def read(self, node: int, start: int = 0) -> list[tuple[int, int, bytes]]:
        return await self.cluster.read_all(node, TP, start)


def run(
    tmp_path: Path,
    size: int,
    configs: dict[str, str],
    scenario: Callable[[Scenario], Coroutine[Any, Any, None]],
    settings: dict[str, str] | None = None,
) -> None:
    async def main() -> None:
        cluster = TieredCluster(tmp_path, size, {TOPIC: configs}, settings)
        try:
            await cluster.start()
            await scenario(Scenario(cluster))
        finally:
            await cluster.close()

    asyncio.run(asyncio.wait_for(main(), 150))


def expected(tags_and_epochs: Sequence[tuple[int, int]]) -> list[tuple[int, int, bytes]]:
    return [(i, epoch, values([tag])[0]) for i, (tag, epoch) in enumerate(tags_and_epochs)]


def test_scenario_1_a_new_follower_builds_its_state_from_the_remote_tier_and_fetches_from_the_earliest_local_offset(  # noqa: E501
    tmp_path: Path,
) -> None:
    # The leader's local log keeps seg-3-5 and the active segment (6-7): two segments' worth.
    configs = topic_config(**{"local.retention.bytes": str(SEGMENT + 2 * BATCH)})

    async def scenario(s: Scenario) -> None:
        a, b = 1, 2
        # Broker A leads alone: LE-0 from 0, LE-1 from 3, LE-2 from 5, LE-3 from 7.
        for epoch, tags in ((0, [0, 1, 2]), (1, [3, 4]), (2, [5, 6]), (3, [7])):
            await s.elect(a, epoch, [a], to=[a])
            await s.produce(a, tags)
        await s.remote_ranges(a, [(0, 2), (3, 5)])
        await s.local_start(a, 3)
        assert s.finished(a) == [(0, 2, {0: 0}, a), (3, 5, {1: 3, 2: 5}, a)]
        leader_epochs = [(0, 0), (1, 3), (2, 5), (3, 7)]
        assert s.cluster.node(a).epochs(TP) == leader_epochs

        # A new follower B fetches offset 0: OFFSET_MOVED_TO_TIERED_STORAGE, ELO 3 in LE-1;
        # it builds LE-0 from seg-0-2's checkpoint and fetches 3..7 from the leader.
        await s.elect(a, 3, [a], to=[b])
        await s.cluster.caught_up(TP, a, [b])
        follower = s.cluster.node(b).plog(TP)
        assert follower.log_start_offset == 0
        assert follower.local_log_start_offset == 3
        # Nothing of the tiered history was copied to the follower's disk.
        assert sorted(int(f.stem) for f in follower.dir.glob("*.log")) == [3, 6]
        assert s.cluster.node(b).epochs(TP) == leader_epochs
        await s.isr(a, [a, b])
        history = expected([(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 2), (6, 2), (7, 3)])
        assert await s.read(a) == history

        # B becomes the leader: it serves the whole history, offsets 0-2 from the remote tier,
        # and copies on after the highest remote offset of its lineage (5, in LE-2).
        await s.elect(b, 4, [a, b])
        assert await s.read(b) == history
        await s.produce(b, [8, 9, 10, 11])
        await s.remote_ranges(b, [(0, 2), (3, 5), (6, 8)])
        assert s.finished(b) == [
            (0, 2, {0: 0}, a),
            (3, 5, {1: 3, 2: 5}, a),
            (6, 8, {2: 6, 3: 7, 4: 8}, b),
        ]

    run(tmp_path, 2, configs, scenario, FAST_ISR)


def test_scenario_2_an_out_of_sync_follower_whose_offsets_went_remote_truncates_fully_rebuilds_and_later_leads(  # noqa: E501
    tmp_path: Path,
) -> None:
    # Copied segments leave the local disks at once; a stopped follower leaves the ISR fast.
    configs = topic_config(**{"local.retention.ms": "0"})

    async def scenario(s: Scenario) -> None:
        a, b = 1, 2
        # Step 1: B follows A and has 0..3 (LE-0 from 0, LE-1 from 3), then goes offline.
        await s.elect(a, 0, [a, b])
        await s.produce(a, [0, 1, 2])
        await s.elect(a, 1, [a, b])
        await s.produce(a, [3])
        await s.cluster.caught_up(TP, a, [b])
        assert s.cluster.node(b).epochs(TP) == [(0, 0), (1, 3)]
        await s.cluster.nodes[b].stop()
        await s.produce(a, [4])
        await s.isr(a, [a])  # B lags for replica.lag.time.max.ms: the high watermark moves on
        await s.elect(a, 2, [a], to=[a])
        await s.produce(a, [5, 6])
        await s.elect(a, 3, [a], to=[a])
        await s.produce(a, [7, 8, 9, 10, 11])
        # Step 2: seg-0-2, seg-3-5 and seg-6-8 are remote and gone from A's disk: ELO 9.
        await s.remote_ranges(a, [(0, 2), (3, 5), (6, 8)])
        await s.local_start(a, 9)
        assert [e for _, _, e, _ in s.finished(a)] == [{0: 0}, {1: 3, 2: 5}, {2: 6, 3: 7}]

        # Step 3: B comes back. Its fetch at 4 (LE-1) gets OFFSET_MOVED_TO_TIERED_STORAGE;
        # ELO 9 is in LE-3, offset 8 too: B restores the epochs of seg-6-8 and fetches 9..11.
        await s.cluster.nodes[b].start()
        await s.elect(a, 3, [a], to=[b])
        await s.cluster.caught_up(TP, a, [b])
        follower = s.cluster.node(b).plog(TP)
        assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 9)
        assert follower.log_end_offset == 12
        assert s.cluster.node(b).epochs(TP) == [(0, 0), (1, 3), (2, 5), (3, 7)]
        assert sorted(int(f.stem) for f in follower.dir.glob("*.log")) == [9]
        await s.isr(a, [a, b])

        # B, first local offset 9, becomes the leader: it serves the whole history (0-8
        # from the remote tier) and copies on from 9: the lineage stays gapless, with
        # segments copied by both brokers.
        history = expected(
            [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 2), (6, 2)]
            + [(t, 3) for t in range(7, 12)]
        )
        assert await s.read(a) == history
        await s.elect(b, 4, [a, b])
        assert await s.read(b) == history
        await s.produce(b, [12])
        await s.remote_ranges(b, [(0, 2), (3, 5), (6, 8), (9, 11)])
        assert [by for _, _, _, by in s.finished(b)] == [a, a, a, b]
        s.gapless(b)
        await s.local_start(b, 12)
        assert await s.read(b) == [*history, (12, 4, values([12])[0])]

    run(tmp_path, 2, configs, scenario, FAST_ISR)


def test_scenario_3_after_multiple_hard_failures_a_new_leader_copies_its_own_branch_and_consumers_read_it(  # noqa: E501
    tmp_path: Path,
) -> None:
    configs = topic_config(**{"segment.bytes": str(2 * BATCH), "local.retention.ms": "0"})

    async def scenario(s: Scenario) -> None:
        a, b = 1, 2
        # Step 1: A leads (LE-0) and copies seg-0-1. B has only msg 0: the KIP's B lost msgs
        # 1 and 2 in the crash (they were never flushed); here B never fetched them.
        await s.elect(a, 0, [a], to=[a, b])
        await s.produce(a, [0])
        await s.cluster.caught_up(TP, a, [b])
        await s.cluster.stop_replica(b, [TP])
        await s.produce(a, [1, 2])
        await s.isr(a, [a])  # B lags for replica.lag.time.max.ms: the high watermark moves on
        await s.remote_ranges(a, [(0, 1)])
        # Step 2: both crash; B comes back first and leads (LE-1); msg 3 lands at offset 1.
        await s.cluster.nodes[a].stop()
        await s.elect(b, 1, [b], to=[b])
        await s.produce(b, [3])
        # Step 3: A comes back as a follower: it truncates 1-2 and fetches msg 3.
        await s.cluster.nodes[a].start()
        await s.elect(b, 1, [b], to=[a])
        await s.cluster.caught_up(TP, b, [a])
        await s.isr(b, [a, b])
        assert s.cluster.node(a).epochs(TP) == [(0, 0), (1, 1)]
        # Step 4: msg 4 at offset 2 rolls B's first segment, which B copies (it holds offset
        # 1 of LE-1; LE-0's last offset 0 is already remote along B's lineage).
        await s.produce(b, [4])
        await s.remote_ranges(b, [(0, 1), (0, 1)])
        assert s.finished(b) == [(0, 1, {0: 0}, a), (0, 1, {0: 0, 1: 1}, b)]
        await s.local_start(b, 2)
        # Offset 0 is msg 0; offset 1 is msg 3 of LE-1, never A's msg 1 of LE-0.
        assert await s.read(b) == expected([(0, 0), (3, 1), (4, 1)])
        # A consumer at offset 2 in LE-0 is told LE-0 ended at 1 (KIP-320): it truncates.
        assert await s.epoch_end(b, 0) == (0, 1)
        assert await s.epoch_end(b, 1) == (1, 3)

    run(tmp_path, 2, configs, scenario, FAST_ISR)


def test_scenario_4_an_unclean_leader_truncates_and_serves_its_own_branch_from_both_tiers(
    tmp_path: Path,
) -> None:
    configs = topic_config(**{"local.retention.ms": "0"})

    async def scenario(s: Scenario) -> None:
        a, b = 1, 2
        # Step 1: A leads (LE-0), 0..3, and copies seg-0-2; B is out of sync with msg 0.
        await s.elect(a, 0, [a], to=[a, b])
        await s.produce(a, [0])
        await s.cluster.caught_up(TP, a, [b])
        await s.cluster.stop_replica(b, [TP])
        await s.produce(a, [1, 2, 3])
        await s.isr(a, [a])
        await s.remote_ranges(a, [(0, 2)])
        # Step 2: A stops; B is elected uncleanly (LE-1): msgs 4 and 5 at offsets 1 and 2;
        # B's seg-0-1 (LE-0 from 0, LE-1 from 1) is copied once the high watermark is 2.
        await s.cluster.nodes[a].stop()
        await s.elect(b, 1, [b], to=[b])
        await s.produce(b, [4])
        await s.roll(b)
        await s.produce(b, [5])
        await s.remote_ranges(b, [(0, 2), (0, 1)])
        # Step 3: B's first local segment expires. Both remote copies stay: A's seg-0-2 holds
        # no truncated epoch (LE-0 is on B's lineage), it is only not served past offset 0.
        await s.local_start(b, 2)
        assert s.finished(b) == [(0, 2, {0: 0}, a), (0, 1, {0: 0, 1: 1}, b)]
        assert await s.read(b) == expected([(0, 0), (4, 1), (5, 1)])
        assert await s.read(b, 1) == expected([(0, 0), (4, 1), (5, 1)])[1:]
        assert await s.epoch_end(b, 0) == (0, 1)  # offset 2 in LE-0 is refused (KIP-320)

    run(tmp_path, 2, configs, scenario, FAST_ISR)


def test_scenario_5_log_divergence_in_remote_storage_after_two_unclean_elections(
    tmp_path: Path,
) -> None:
    configs = topic_config(**{"local.retention.ms": "0", "segment.bytes": "1048576"})

    async def scenario(s: Scenario) -> None:
        a, b = 1, 2
        # Step 1: A leads (LE-0) with 0..4 and copies seg-0-3; B is out of sync with 0..1.
        await s.elect(a, 0, [a], to=[a, b])
        await s.produce(a, [0, 1])
        await s.cluster.caught_up(TP, a, [b])
        await s.cluster.stop_replica(b, [TP])
        await s.produce(a, [2, 3])
        await s.isr(a, [a])
        await s.roll(a)
        await s.produce(a, [4])
        await s.remote_ranges(a, [(0, 3)])
        uuid1 = s.cluster.segments(a, s.tidp, FINISHED)[0].segment_id
        # Step 2: A stops; B is elected uncleanly (LE-1): msgs 4, 5, 6 at 2..4; B copies its
        # seg-0-3 (LE-0 from 0, LE-1 from 2). A's seg-0-3 holds no truncated epoch: kept.
        await s.cluster.nodes[a].stop()
        await s.elect(b, 1, [b], to=[b])
        await s.produce(b, [4, 5])
        await s.roll(b)
        await s.produce(b, [6])
        await s.remote_ranges(b, [(0, 3), (0, 3)])
        uuid2 = next(
            md.segment_id for md in s.cluster.segments(b, s.tidp, FINISHED) if md.broker_id == b
        )
        # Step 3: B stops; A comes back and is elected uncleanly (LE-2), unaware of LE-1:
        # msgs 7 and 8 at 5 and 6; A copies seg-4-5 (LE-0 at 4, LE-2 from 5). B's seg-0-3
        # holds LE-1, an epoch A's lineage truncated: it is deleted; A's own is kept.
        await s.cluster.nodes[b].stop()
        await s.cluster.nodes[a].start()
        await s.elect(a, 2, [a], to=[a])
        await s.produce(a, [7])
        await s.roll(a)
        await s.produce(a, [8])
        await s.remote_ranges(a, [(0, 3), (4, 5)])
        await until(
            lambda: uuid2 not in {md.segment_id for md in s.cluster.segments(a, s.tidp)},
            timeout=30,
            what="B's seg-0-3 (LE-1) deleted",
        )
        states = {md.segment_id: md.state for md in s.cluster.segments(a, s.tidp)}
        assert states[uuid1] == FINISHED
        assert s.finished(a) == [(0, 3, {0: 0}, a), (4, 5, {0: 4, 2: 5}, a)]
        await s.local_start(a, 6)
        assert s.cluster.node(a).epochs(TP) == [(0, 0), (2, 5)]
        history = expected([(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (7, 2), (8, 2)])
        assert await s.read(a) == history
        # Step 4: B restarts with an empty disk: its fetch at 0 gets
        # OFFSET_MOVED_TO_TIERED_STORAGE, ELO 6 in LE-2; it builds LE-0 from 0 and LE-2 from
        # 5 from seg-4-5 and fetches msg 8; it joins the ISR.
        shutil.rmtree(s.cluster.nodes[b].directory)
        await s.cluster.nodes[b].start()
        await s.elect(a, 2, [a], to=[b])
        await s.cluster.caught_up(TP, a, [b])
        await s.isr(a, [a, b])
        assert s.cluster.node(b).epochs(TP) == [(0, 0), (2, 5)]
        follower = s.cluster.node(b).plog(TP)
        assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 6)
        # A consumer at offset 3 in LE-1 is told LE-1 is unknown here (it ends where LE-0
        # does, at 5: KIP-320 truncates it); offset 2 is msg 2.
        assert await s.epoch_end(a, 1) == (0, 5)
        assert (await s.read(a, 2))[0] == history[2]

    run(tmp_path, 2, configs, scenario, FAST_ISR)


def test_deleting_a_tiered_topic_in_a_cluster_deletes_its_remote_data_once_on_the_metadata_leader(
    tmp_path: Path,
) -> None:
    """The controller's broker (here the partition's leader, a) marks the partition; the
    broker leading its ``__remote_log_metadata`` partition (here b, the follower) deletes
    the remote data once, at once (its periodic run is an hour away); a deletes nothing."""

    async def scenario(s: Scenario) -> None:
        a, b = 1, 2
        await s.elect(a, 0, [a, b])
        await s.produce(a, range(7))
        await s.remote_ranges(a, [(0, 2), (3, 5)])
        await s.cluster.caught_up(TP, a, [b])
        bucket = s.cluster.directory / "bucket"
        assert any(f.is_file() for f in bucket.rglob("*"))
        remote_tiers = {}
        for node in (a, b):
            tiered = s.cluster.node(node).tiered
            assert tiered is not None and tiered.remote_tier.remover is not None
            remote_tiers[node] = tiered.remote_tier
        # These brokers run without ZooKeeper, so each follows every metadata partition:
        # the test gives the metadata partition's leadership to b, as a LeaderAndIsr would.
        rlmms = {node: rt.rlmm for node, rt in remote_tiers.items()}
        mp = rlmms[b].metadata_partition_of(s.tidp)
        rlmms[a].follow_metadata_partitions(set())
        rlmms[b].follow_metadata_partitions({mp})
        # The controller's StopReplica with deletion reaches both replicas.
        for node in (b, a):
            broker = s.cluster.nodes[node].broker
            assert broker is not None
            answer = await broker.replica_manager.stop_replicas(
                100, s.cluster.controller_epoch, [StopReplicaPartition(TP, -2, True)]
            )
            assert answer == {TP: NONE}

        def delete_events() -> list[tuple[RemotePartitionDeleteState, int]]:
            topic = shared_rlmm.shared_topic(
                s.cluster.node(a).settings[f"rlmm.config.{shared_rlmm.SHARED_TOPIC_KEY}"]
            )
            events = [
                deserialize(r.value)
                for p in range(topic.partition_count())
                for r in topic.read(p, 0, 1 << 20)
            ]
            return [
                (e.state, e.broker_id)
                for e in events
                if isinstance(e, RemotePartitionDeleteMetadata) and e.topic_id_partition == s.tidp
            ]

        assert delete_events() == []  # stopping replicas marks nothing
        await asyncio.get_running_loop().run_in_executor(
            None, remote_tiers[a].mark_topic_deleted, TOPIC, s.tidp.topic_id, [0]
        )
        finished = [
            (RemotePartitionDeleteState.DELETE_PARTITION_MARKED, a),
            (RemotePartitionDeleteState.DELETE_PARTITION_STARTED, b),
            (RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, b),
        ]
        await until(
            lambda: delete_events() == finished,
            timeout=30,
            what="the deletion run by the metadata partition's leader",
        )
        # Objects: the spare files the local-dir store makes ahead of copies (temp files,
        # in no listing) go a few seconds after the last copy.
        assert not any(f.is_file() and ".tmp-" not in f.as_posix() for f in bucket.rglob("*"))
        assert remote_tiers[a].remover.marked_partitions() == []

    run(tmp_path, 2, topic_config(), scenario)
