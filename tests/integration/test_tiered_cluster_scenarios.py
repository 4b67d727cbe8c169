"""KIP-405's follower and leadership scenarios 1-5 on real broker processes.

Three ``tierlog broker start`` processes share a ZooKeeper and an S3 bucket (moto's HTTP
server, or the endpoint ``TIERLOG_S3_ENDPOINT`` names) through the S3 RSM. The scenarios'
partition has two replicas, A (broker 1) and B (broker 2); broker 3 is the controller
(started first, never stopped) and keeps ``__remote_log_metadata`` writable when A and B
are both down. Leadership moves only as a ZooKeeper-mode controller moves it: brokers
killed (SIGKILL) or restarted, and ``tierlog cluster elect-leaders`` run as a subprocess.
Records are read back from offset 0 with a real consumer (confluent-kafka), with the
leader epoch of each; the remote segments come from ``tierlog metadata list --json``.

Every record is its own batch (one record per produce, acknowledged before the next) and
all batches have one size, so ``segment.bytes`` of n batches and a half makes segments of
exactly n records, as the KIP's tables draw them.

Leader epochs differ from the KIP's tables, which number the elections 0, 1, 2... Apache
Kafka's ZooKeeper-mode controller gives a new leader epoch at every election and also when
it takes a dead broker's replica out of an ISR (``removeReplicasFromIsr``: a dead leader
alone in its ISR leaves the partition leaderless, ISR unchanged, epoch + 1); only a leader
shrinking its own ISR (a lagging follower) keeps the epoch. tierlog's controller does the
same (``core/server/controller/elections.py``), so:

- where the KIP has a follower fall out of sync while its leader writes on in the same
  epoch, the follower is stopped (SIGSTOP) so that the leader drops it from the ISR after
  ``replica.lag.time.max.ms`` (no new epoch), then killed while stopped: the controller
  has no ISR to change when it goes;
- where the KIP's leader dies and an out-of-sync replica is elected uncleanly, the death
  costs one epoch (leaderless) and the unclean election another: the KIP's LE-1 is LE-2
  here, its LE-2 (the second unclean election) is LE-4.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from core.kafka_uuid import uuid_from_base64
from core.records.builder import RecordBatchBuilder
from rlmm.partitioner import metadata_partition
from tests.support.cluster import CLUSTER_SETTINGS, DEADLINE_S, Cluster
from tests.support.s3_harness import (
    Bucket,
    FaultProxy,
    RemoteObject,
    metadata_segments,
    tiering_settings,
)
from tiered.api import TopicIdPartition

TOPIC = "kip405"
A, B, C = 1, 2, 3
FINISHED = "COPY_SEGMENT_FINISHED"
# A follower that stops fetching leaves the ISR after about a second (the leader's check runs
# every half of it); scenarios that kill followers keep it long so that the controller, not
# the leader, takes a dead follower out of the ISR (one more epoch, always).
FAST_LAG = {"replica.lag.time.max.ms": "1000"}
SLOW_LAG = {"replica.lag.time.max.ms": "60000"}
# B, stopped until the leader drops it from the ISR (about 1.5 s), keeps its ZooKeeper
# session meanwhile; the default 4 s would leave too little slack on a loaded machine.
PAUSABLE = {"zookeeper.session.timeout.ms": "6000"}


def value(tag: int) -> bytes:
    """The value of message ``tag`` (the KIP's msg numbers); all values have one size."""
    return b"kip405-msg-%04d|" % tag * 4


def _batch_size() -> int:
    builder = RecordBatchBuilder()
    builder.append(value(0))
    return len(bytes(builder.build()))


BATCH = _batch_size()


def segment_bytes(records: int) -> str:
    """Segments of exactly ``records`` one-record batches: the next batch does not fit."""
    return str(records * BATCH + BATCH // 2)


# -- the cluster ---------------------------------------------------------------------------------
class Scenario:
    """The cluster, the bucket and the scenario's partition ``kip405-0`` (replicas [A, B] or
    [B, A])."""

    def __init__(self, cluster: Cluster, bucket: Bucket) -> None:
        self.cluster = cluster
        self.bucket = bucket

    # -- brokers ---------------------------------------------------------------------------
    def kill(self, broker: int) -> None:
        self.cluster.kill(broker)

    def restart(self, broker: int, empty_disk: bool = False) -> None:
        """Start a killed broker again once its old ZooKeeper session is gone."""
        self.cluster.wait(
            lambda: broker not in self.cluster.registered(), f"broker {broker} unregistered", 60
        )
        if empty_disk:
            shutil.rmtree(Path(self.cluster.brokers[broker].settings["log.dirs"]))
        self.cluster.restart(broker)

    def drop_out_of_sync(self, follower: int, leader: int, tags: Sequence[int], first: int) -> None:
        """The KIP's out-of-sync follower: ``follower`` stops (SIGSTOP) and ``leader``
        appends ``tags`` from offset ``first``; they are acknowledged once the leader
        dropped the stopped follower from the ISR (``replica.lag.time.max.ms``: same leader
        epoch). Then the follower is killed while stopped: a fetch response the leader
        sent it meanwhile dies unread with it, so its log ends exactly at ``first``; it is
        out of the ISR already, so the controller changes nothing when it goes."""
        os.kill(self.cluster.brokers[follower].pid, signal.SIGSTOP)
        _, epoch, _ = self.state()
        self.produce(tags, first)
        self.wait_state(leader, epoch, [leader])
        self.kill(follower)

    # -- the partition as ZooKeeper records it -----------------------------------------------
    def state(self) -> tuple[int, int, list[int]]:
        """(leader, leader epoch, ISR) of the partition."""
        state = self.cluster.state(TOPIC, 0)
        assert state is not None
        return state["leader"], state["leader_epoch"], sorted(state["isr"])

    def wait_state(self, leader: int, epoch: int, isr: Sequence[int], timeout: float = 60) -> None:
        want = (leader, epoch, sorted(isr))
        seen: list[tuple[int, int, list[int]]] = []

        def reached() -> bool:
            seen[:] = [self.state()]
            return seen[0] == want

        self.cluster.wait(reached, f"leader, epoch, ISR {want} (last seen {seen})", timeout)

    def elect(self, kind: str) -> dict[str, Any]:
        """``tierlog cluster elect-leaders --preferred|--unclean`` for the partition."""
        args = [sys.executable, "-m", "tierlog", "cluster", "elect-leaders"]
        args += ["--bootstrap-server", self.cluster.bootstrap, f"--{kind}", "--json"]
        args += ["--partition", f"{TOPIC}:0"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"elect-leaders: {done.stdout}{done.stderr[-2000:]}"
        return json.loads(done.stdout)

    # -- records -----------------------------------------------------------------------------
    def produce(self, tags: Sequence[int], first_offset: int) -> None:
        """Messages ``tags``, one batch each, acknowledged by the ISR (acks=all), at the
        offsets from ``first_offset`` on."""
        producer = Producer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "linger.ms": 0,
                "message.timeout.ms": int(DEADLINE_S * 1000),
            }
        )
        offsets: list[int] = []
        failures: list[KafkaError] = []
        for tag in tags:

            def report(error: KafkaError | None, message: Any) -> None:
                if error is not None:
                    failures.append(error)
                else:
                    offsets.append(message.offset())

            producer.produce(TOPIC, value=value(tag), partition=0, on_delivery=report)
            assert producer.flush(DEADLINE_S) == 0, f"message {tag} unacknowledged"
            assert not failures, f"message {tag}: {failures}"
        assert offsets == list(range(first_offset, first_offset + len(tags)))

    def read(self, start: int = 0) -> list[tuple[int, int, bytes]]:
        """(offset, leader epoch, value) of every record from ``start`` to the high
        watermark, read by a consumer once the clients see the partition's leader."""

        def attempt() -> list[tuple[int, int, bytes]] | None:
            try:
                return self._read(start)
            except KafkaException:
                return None

        return self.cluster.wait(attempt, f"a consumer reading from offset {start}", 60)

    def _read(self, start: int) -> list[tuple[int, int, bytes]] | None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "group.id": "kip405-reader",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
            }
        )
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
            consumer.assign([TopicPartition(TOPIC, 0, start)])
            got: list[tuple[int, int, bytes]] = []
            next_offset = start
            while next_offset < high:
                message = consumer.poll(10)
                if message is None:
                    return None
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    return None
                got.append((message.offset(), message.leader_epoch(), message.value()))
                next_offset = message.offset() + 1
            return got
        finally:
            consumer.close()

    # -- the remote tier ---------------------------------------------------------------------
    def segments(self) -> list[tuple[int, int, dict[int, int], int, str]]:
        """(start, end, leader epochs, copied by, state) of the partition's remote
        segments, as ``tierlog metadata list --json`` shows them, by start offset and
        copier."""
        rows = [
            (
                s["start_offset"],
                s["end_offset"],
                {int(e): o for e, o in s["segment_leader_epochs"].items()},
                s["broker_id"],
                s["state"],
            )
            for s in metadata_segments(self.cluster.bootstrap, TOPIC)
        ]
        return sorted(rows, key=lambda row: (row[0], row[1], row[3]))

    def wait_finished(self, want: list[tuple[int, int, dict[int, int], int]]) -> None:
        """Exactly ``want`` (start, end, epochs, copied by), all COPY_SEGMENT_FINISHED: no
        copy in another state."""
        expected = [(*row, FINISHED) for row in want]
        seen: list[Any] = []

        def listed() -> bool:
            seen[:] = self.segments()
            return seen == expected

        try:
            self.cluster.wait(listed, f"remote segments {want}", 90)
        except AssertionError as e:
            raise AssertionError(f"remote segments {seen}, expected {expected}\n{e}") from None

    def local_bases(self, broker: int) -> list[int]:
        """The base offsets of the partition's segments on ``broker``'s disk."""
        directory = Path(self.cluster.brokers[broker].settings["log.dirs"]) / f"{TOPIC}-0"
        return sorted(int(f.name.split(".")[0]) for f in directory.glob("*.log"))

    def wait_local_start(self, broker: int, offset: int) -> None:
        seen: list[int] = []

        def reached() -> bool:
            seen[:] = self.local_bases(broker)
            return bool(seen) and seen[0] == offset

        self.cluster.wait(
            reached, f"broker {broker}'s local log from {offset} (last seen {seen})", 90
        )


def history(*runs: tuple[Sequence[int], int]) -> list[tuple[int, int, bytes]]:
    """(offset, epoch, value) of messages: runs of (message tags, leader epoch)."""
    rows = [(tag, epoch) for tags, epoch in runs for tag in tags]
    return [(offset, epoch, value(tag)) for offset, (tag, epoch) in enumerate(rows)]


@pytest.fixture
def scenario_factory(
    tmp_path: Path, zk_chroot: str, s3_endpoint: Any, bucket: Bucket
) -> Iterator[Callable[..., Scenario]]:
    """A cluster whose controller is broker 3 and the topic ``kip405``."""
    clusters: list[Cluster] = []

    def factory(
        replicas: Sequence[int],
        topic_configs: dict[str, str],
        settings: dict[str, str],
        b_settings: dict[str, str] | None = None,
    ) -> Scenario:
        all_settings = {
            **CLUSTER_SETTINGS,
            **tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name),
            "unclean.leader.election.enable": "false",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "2",
            **settings,
        }
        cluster = Cluster(tmp_path / "cluster", zk_chroot, all_settings)
        clusters.append(cluster)
        cluster.start_broker(C)
        cluster.wait_controller([C])
        cluster.start_broker(A)
        cluster.wait_registered([A, C])
        # __remote_log_metadata lives on A and C only (replication factor 2, created once
        # both are registered): B, paused or killed, never leads a partition of it, so a
        # paused B cannot hold up A's metadata writes.
        cluster.wait_topic("__remote_log_metadata", 3, 2, timeout=2 * DEADLINE_S)
        cluster.start_broker(B, b_settings)
        cluster.wait_registered([A, B, C])
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        configs = {
            "remote.storage.enable": "true",
            "retention.ms": "-1",
            "local.retention.ms": "0",
            "min.insync.replicas": "1",
            **topic_configs,
        }
        new = NewTopic(TOPIC, 1, replica_assignment=[list(replicas)], config=configs)
        for future in admin.create_topics([new], operation_timeout=DEADLINE_S).values():
            future.result(DEADLINE_S)
        s = Scenario(cluster, bucket)
        s.wait_state(replicas[0], 0, replicas)
        return s

    yield factory
    for cluster in clusters:
        cluster.close()


# -- the scenarios -------------------------------------------------------------------------------
def test_scenario_1_a_new_follower_builds_its_state_from_the_remote_tier_and_later_leads(
    scenario_factory: Callable[..., Scenario],
) -> None:
    """KIP-405 scenario 1 with the epochs a ZooKeeper controller gives.

    Step by step, the KIP's table, then here:

    1. A leads alone, B has nothing. KIP: LE-0@0, LE-1@3, LE-2@5, LE-3@7. Here B dies at
       once: LE-1 (the controller takes the dead follower out of the ISR); A writes 0..2;
       A restarts: LE-2 leaderless, LE-3 from 3.
    2. A tiers and deletes locally: seg-0-2 remote (here LE-1@0), A's local log from 3.
    3. B comes back: 109, ELO 3 in LE-3; offset 2 is in LE-1 (OffsetsForLeaderEpoch(2)
       ends at 3); B's epoch cache LE-1@0 from seg-0-2; it fetches 3..4 and joins the ISR.
    4. A dies, B leads (LE-4): it serves 0..2 from the remote tier and copies 3-5.
    """
    s = scenario_factory(
        [A, B], {"segment.bytes": segment_bytes(3), "local.retention.ms": "0"}, SLOW_LAG
    )
    s.kill(B)
    s.wait_state(A, 1, [A])
    s.produce([0, 1, 2], 0)
    s.kill(A)
    s.wait_state(-1, 2, [A])
    s.restart(A)
    s.wait_state(A, 3, [A])
    s.produce([3, 4], 3)
    # seg-0-2 is remote and gone from A's disk; 3-4 are A's active segment.
    s.wait_finished([(0, 2, {1: 0}, A)])
    s.wait_local_start(A, 3)
    leader_history = history(([0, 1, 2], 1), ([3, 4], 3))
    assert s.read() == leader_history

    # B comes back with an empty log: it builds its state from seg-0-2 and fetches 3..4.
    s.restart(B)
    s.wait_state(A, 3, [A, B])
    assert s.local_bases(B) == [3]

    # A dies: B leads, serves everything from offset 0 (0..2 remotely) and copies 3-5.
    s.kill(A)
    s.wait_state(B, 4, [B])
    assert s.read() == leader_history
    s.produce([5, 6], 5)
    s.wait_finished([(0, 2, {1: 0}, A), (3, 5, {3: 3, 4: 5}, B)])
    s.wait_local_start(B, 6)
    assert s.read() == [*leader_history, (5, 4, value(5)), (6, 4, value(6))]


def test_scenario_2_an_out_of_sync_follower_truncates_fully_rebuilds_and_leads_by_election(
    scenario_factory: Callable[..., Scenario],
) -> None:
    """KIP-405 scenario 2, and a follower that was down while its leader tiered: it
    rejoins the ISR with its first local offset > 0, leads after ``elect-leaders
    --preferred``, serves the whole history, and the remote lineage stays gapless with
    segments copied by both brokers.

    1. B has 0..3. KIP: LE-0@0, LE-1@3. Here B (the preferred replica) leads LE-0 with
       0..3 and copies seg-0-2; B dies: A leads LE-1 from 4.
    2. A goes on and tiers: seg-3-5, seg-6-8 remote, deleted locally: ELO 9.
    3. B comes back: its fetch at 4 (no divergence) gets 109; ELO 9 in LE-1; B drops its
       log, restores LE-0@0, LE-1@4 from seg-6-8 and fetches 9..11.
    4. B leads (KIP: it serves 0..11 and copies 9-11): here the preferred election, LE-2.
    """
    s = scenario_factory(
        [B, A], {"segment.bytes": segment_bytes(3), "local.retention.ms": "0"}, SLOW_LAG
    )
    s.produce([0, 1, 2, 3], 0)
    s.wait_finished([(0, 2, {0: 0}, B)])
    s.kill(B)
    s.wait_state(A, 1, [A])
    s.produce(range(4, 12), 4)
    s.wait_finished([(0, 2, {0: 0}, B), (3, 5, {0: 3, 1: 4}, A), (6, 8, {1: 6}, A)])
    s.wait_local_start(A, 9)
    leader_history = history(([0, 1, 2, 3], 0), (range(4, 12), 1))
    assert s.read() == leader_history

    # B comes back: its log (0..3, LE-0) is on A's lineage, but offset 4 is remote only: it
    # drops its log and restarts it at 9 from seg-6-8's state, then fetches 9..11.
    s.restart(B)
    s.wait_state(A, 1, [A, B])
    assert s.local_bases(B) == [9]

    # B, first local offset 9, becomes the leader by election; it serves 0..11 (0..8 from
    # the remote tier) and copies on from 9: a gapless lineage copied by both brokers.
    s.elect("preferred")
    s.wait_state(B, 2, [A, B])
    assert s.read() == leader_history
    s.produce([12], 12)
    s.wait_finished(
        [(0, 2, {0: 0}, B), (3, 5, {0: 3, 1: 4}, A), (6, 8, {1: 6}, A), (9, 11, {1: 9}, B)]
    )
    assert s.read() == [*leader_history, (12, 2, value(12))]


def unclean_failover_to_b(s: Scenario) -> None:
    """A, the only replica in sync, dies (the partition is left without a leader at LE-1);
    B, out of sync and stopped, is restarted and elected uncleanly: it leads LE-2."""
    s.kill(A)
    s.wait_state(-1, 1, [A])
    s.restart(B)
    s.elect("unclean")
    s.wait_state(B, 2, [B])


def test_scenario_3_after_hard_failures_a_returning_replica_truncates_and_both_serve_one_history(
    scenario_factory: Callable[..., Scenario],
) -> None:
    """KIP-405 scenario 3 (segments of two records).

    1. A leads (LE-0), copies seg-0-1; B has offset 0 only (dropped from the ISR by A,
       no new epoch).
    2. A dies, B leads and writes msg 3 at 1. KIP: LE-1. Here A's death leaves the
       partition leaderless (LE-1), the unclean election gives LE-2.
    3. A comes back: it truncates to 1 and fetches msg 3; ISR [A, B].
    4. Msg 4 at 2: B copies seg-0-1 (LE-0@0, LE-2@1); A's seg-0-1 holds no truncated
       epoch and is kept.
    5. Not in the KIP: A leads again (preferred election, LE-3) and serves B's history,
       offset 0 from the remote tier.
    """
    s = scenario_factory([A, B], {"segment.bytes": segment_bytes(2)}, FAST_LAG, PAUSABLE)
    s.produce([0], 0)
    s.drop_out_of_sync(B, A, [1, 2], 1)
    s.wait_finished([(0, 1, {0: 0}, A)])
    s.wait_local_start(A, 2)

    unclean_failover_to_b(s)
    s.produce([3], 1)

    # A comes back as B's follower: its msgs 1 and 2 (LE-0) are off B's lineage.
    s.restart(A)
    s.wait_state(B, 2, [A, B])
    s.produce([4], 2)
    s.wait_finished([(0, 1, {0: 0}, A), (0, 1, {0: 0, 2: 1}, B)])
    s.wait_local_start(B, 2)
    lineage = history(([0], 0), ([3, 4], 2))
    assert s.read() == lineage
    assert s.read(1) == lineage[1:]

    # A leads again: the same history, offset 0 from the remote tier (B's copy).
    s.elect("preferred")
    s.wait_state(A, 3, [A, B])
    assert s.read() == lineage
    s.produce([5], 3)
    assert s.read(2) == [*lineage[2:], (3, 3, value(5))]


def test_scenario_4_an_unclean_leader_truncates_and_serves_its_branch_across_both_tiers(
    scenario_factory: Callable[..., Scenario],
) -> None:
    """KIP-405 scenario 4 (segments of three records).

    1. A leads (LE-0) with 0..3 and copies seg-0-2; B has offset 0 only.
    2. A dies; B is elected uncleanly. KIP: LE-1, msgs 4, 5 at 1, 2. Here LE-1 is the
       leaderless partition, B leads LE-2; msgs 4, 5, 6 at 1..3.
    3. B copies its seg-0-2 (LE-0@0, LE-2@1) and deletes it locally (KIP: seg-0-1).
    4. Reads: 0 -> msg 0 (LE-0), 1 -> msg 4, 2 -> msg 5 from the remote tier, 3 -> msg 6
       locally. A's seg-0-2 is kept (LE-0 is on B's lineage) and serves nothing past 0.
    """
    s = scenario_factory([A, B], {"segment.bytes": segment_bytes(3)}, FAST_LAG, PAUSABLE)
    s.produce([0], 0)
    s.drop_out_of_sync(B, A, [1, 2, 3], 1)
    s.wait_finished([(0, 2, {0: 0}, A)])
    s.wait_local_start(A, 3)

    unclean_failover_to_b(s)
    s.produce([4, 5, 6], 1)
    s.wait_finished([(0, 2, {0: 0}, A), (0, 2, {0: 0, 2: 1}, B)])
    s.wait_local_start(B, 3)
    lineage = history(([0], 0), ([4, 5, 6], 2))
    assert s.read() == lineage
    # Around the boundary between the tiers: 2 is remote, 3 local.
    assert s.read(1) == lineage[1:]
    assert s.read(2) == lineage[2:]
    assert s.read(3) == lineage[3:]


def diverge_in_remote_storage(s: Scenario) -> None:
    """Scenario 5's first two steps: A (LE-0) tiers seg-0-3 while B is out of sync with 0..1;
    A dies; B is elected uncleanly (LE-2) and copies its own seg-0-3. The bucket then holds
    A's copy of a branch B's lineage truncated (msgs 2, 3) next to B's."""
    s.produce([0, 1], 0)
    s.drop_out_of_sync(B, A, [2, 3, 4], 2)
    s.wait_finished([(0, 3, {0: 0}, A)])
    s.wait_local_start(A, 4)

    # A dies; B, out of sync with 0..1, is elected uncleanly and copies its own seg-0-3.
    unclean_failover_to_b(s)
    s.produce([4, 5, 6], 2)
    s.wait_finished([(0, 3, {0: 0}, A), (0, 3, {0: 0, 2: 2}, B)])
    s.wait_local_start(B, 4)
    assert s.read() == history(([0, 1], 0), ([4, 5, 6], 2))


def test_scenario_5_log_divergence_in_remote_storage_after_two_unclean_elections(
    scenario_factory: Callable[..., Scenario],
) -> None:
    """KIP-405 scenario 5 (segments of four records).

    1. A leads (LE-0) with 0..4 and copies seg-0-3; B has 0..1.
    2. A dies; B is elected uncleanly (KIP LE-1; here LE-1 leaderless, B leads LE-2),
       writes msgs 4, 5, 6 at 2..4 and copies seg-0-3 (LE-0@0, LE-2@2).
    3. B dies; A is elected uncleanly (KIP LE-2, msgs 7, 8 at 5, 6, seg-4-5; here LE-3
       leaderless, A leads LE-4, msgs 7..10 at 5..8, seg-4-7 with LE-0@4, LE-4@5).
    4. A's expiration deletes B's seg-0-3 (it holds B's epoch, which A's lineage never
       had) and keeps its own, which serves 0..3 again.
    5. B comes back with an empty disk: 109, ELO 8 in LE-4; it restores LE-0@0, LE-4@5
       from seg-4-7 and joins the ISR (KIP: ELO 6 in LE-2, LE-0@0, LE-2@5).
    """
    s = scenario_factory([A, B], {"segment.bytes": segment_bytes(4)}, FAST_LAG, PAUSABLE)
    diverge_in_remote_storage(s)

    # B dies; A, unaware of LE-2, is elected uncleanly. Its expiration deletes B's copy (it
    # holds LE-2, an epoch A's lineage does not have) and keeps its own, which serves 0..3.
    s.kill(B)
    s.wait_state(-1, 3, [B])
    s.restart(A)
    s.elect("unclean")
    s.wait_state(A, 4, [A])
    s.produce([7, 8, 9, 10], 5)
    s.wait_finished([(0, 3, {0: 0}, A), (4, 7, {0: 4, 4: 5}, A)])
    s.wait_local_start(A, 8)
    lineage = history(([0, 1, 2, 3, 4], 0), ([7, 8, 9, 10], 4))
    assert s.read() == lineage

    # B comes back with an empty disk: it builds its state from seg-4-7 and joins the ISR.
    s.restart(B, empty_disk=True)
    s.wait_state(A, 4, [A, B])
    assert s.local_bases(B) == [8]
    assert s.read(3) == lineage[3:]


def partition_delete_state(bootstrap: str, *, moving: bool = False) -> str | None:
    """The partition's DELETE_PARTITION_* state, as ``tierlog metadata summary --json``
    shows it (None before any). ``moving``: a metadata partition may be between leaders (a
    broker was just killed), and a failed read answers None, to be asked again."""
    args = [sys.executable, "-m", "tierlog", "metadata", "summary"]
    args += ["--bootstrap-server", bootstrap, "--json"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if moving and done.returncode != 0:
        return None
    assert done.returncode == 0, f"tierlog metadata summary: {done.stderr[-2000:]}"
    rows = [r for r in json.loads(done.stdout)["partitions"] if r["topic"] == TOPIC]
    return rows[0]["partition_delete_state"] if rows else None


def test_deleting_a_tiered_topic_with_a_follower_down_deletes_its_remote_data_once(
    scenario_factory: Callable[..., Scenario],
) -> None:
    """A tiered topic deleted while a follower's broker is down. As in Kafka's ZooKeeper
    mode, the controller stops and deletes the replicas on live brokers at once and the
    dead one's when it is back, and only then completes the deletion. The leader, stopped
    without deletion and then with it, marks the partition DELETE_PARTITION_MARKED and its
    controller's broker marks the partition DELETE_PARTITION_MARKED, and the remover of the
    broker leading its ``__remote_log_metadata`` partition deletes every remote object once
    (DELETE_PARTITION_FINISHED). B, restarted while the deletion waits for it, writes no
    topic manifest again."""
    s = scenario_factory([A, B], {"segment.bytes": segment_bytes(3)}, SLOW_LAG)
    s.produce(range(7), 0)
    s.wait_finished([(0, 2, {0: 0}, A), (3, 5, {0: 3}, A)])
    assert [o for o in s.bucket.objects(TOPIC) if not o.is_topic_manifest]

    s.kill(B)
    s.wait_state(A, 1, [A])
    admin = AdminClient({"bootstrap.servers": s.cluster.bootstrap})
    (future,) = admin.delete_topics([TOPIC], operation_timeout=DEADLINE_S).values()
    future.result(DEADLINE_S)  # answered once the topic left the brokers' metadata
    s.cluster.wait(
        lambda: partition_delete_state(s.cluster.bootstrap) == "DELETE_PARTITION_FINISHED",
        "the remote partition deleted by the metadata partition's leader",
        60,
    )
    assert s.bucket.objects(TOPIC) == []
    assert s.segments() == []
    # The deletion itself waits for B's replica.
    assert s.cluster.zk.exists(f"/admin/delete_topics/{TOPIC}") is not None

    s.restart(B)
    s.cluster.wait(
        lambda: s.cluster.zk.exists(f"/admin/delete_topics/{TOPIC}") is None,
        "the topic deletion completed",
        60,
    )
    assert s.cluster.state(TOPIC, 0) is None
    assert s.local_bases(B) == []
    assert partition_delete_state(s.cluster.bootstrap) == "DELETE_PARTITION_FINISHED"
    # Nothing came back: no segment, and no manifest from B's restart.
    assert [o.key for o in s.bucket.objects(TOPIC)] == []


def is_segment_delete(method: str, path: str) -> bool:
    """The first request of a segment's deletion (DELETE of one of its objects)."""
    key = path.split("?", 1)[0]
    return method == "DELETE" and f"/{TOPIC}-" in key and not key.endswith("topic-manifest.json")


def metadata_leader_of(s: Scenario, objects: list[RemoteObject]) -> int:
    """The broker leading the ``__remote_log_metadata`` partition of ``kip405-0`` (its topic
    id read from the objects' ``<topic>-<topicId>/`` prefix)."""
    topic_id = uuid_from_base64(objects[0].key.split("/", 1)[0][len(TOPIC) + 1 :])
    mp = metadata_partition(TopicIdPartition(topic_id, TOPIC, 0), 3)
    return s.cluster.leader("__remote_log_metadata", mp)


def test_a_topic_deletion_killed_mid_removal_is_finished_by_the_next_metadata_leader(
    scenario_factory: Callable[..., Scenario], s3_endpoint: Any
) -> None:
    """The broker leading the metadata partition of a deleted tiered topic's partition is
    SIGKILLed in the middle of the removal (DELETE_PARTITION_STARTED, its first segment
    deletion held by the S3 proxy). Its periodic run is an hour away and it no longer hosts
    the partition: the broker that takes the metadata partition over reads the unfinished
    deletion and finishes it, and once the killed broker is back every object of the topic,
    manifest included, is gone and stays gone."""
    proxy = FaultProxy(s3_endpoint.url)
    try:
        s = scenario_factory(
            [A, B],
            {"segment.bytes": segment_bytes(3)},
            {
                **SLOW_LAG,
                "rsm.config.storage.s3.endpoint.url": proxy.url,
                "remote.partition.remover.task.interval.ms": "3600000",
            },
        )
        s.produce(range(7), 0)
        s.wait_finished([(0, 2, {0: 0}, A), (3, 5, {0: 3}, A)])
        objects = s.bucket.objects(TOPIC)
        leader = metadata_leader_of(s, objects)  # A or C: the metadata topic lives there
        proxy.hold(is_segment_delete)

        admin = AdminClient({"bootstrap.servers": s.cluster.bootstrap})
        (future,) = admin.delete_topics([TOPIC], operation_timeout=DEADLINE_S).values()
        future.result(DEADLINE_S)
        assert proxy.held_event.wait(60), "no segment deletion started"
        assert partition_delete_state(s.cluster.bootstrap) == "DELETE_PARTITION_STARTED"
        s.kill(leader)
        proxy.release()  # the held DELETE is dropped unanswered: nothing of it reached S3
        assert [o for o in s.bucket.objects(TOPIC) if not o.is_topic_manifest]

        s.cluster.wait(
            lambda: (
                partition_delete_state(s.cluster.bootstrap, moving=True)
                == "DELETE_PARTITION_FINISHED"
            ),
            "the deletion finished by the metadata partition's next leader",
            60,
        )
        assert [o.key for o in s.bucket.objects(TOPIC)] == []

        s.restart(leader)
        s.cluster.wait(
            lambda: s.cluster.zk.exists(f"/admin/delete_topics/{TOPIC}") is None,
            "the topic deletion completed",
            60,
        )
        assert partition_delete_state(s.cluster.bootstrap) == "DELETE_PARTITION_FINISHED"
        assert [o.key for o in s.bucket.objects(TOPIC)] == []
    finally:
        proxy.close()
