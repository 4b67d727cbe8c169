"""Consumer groups with subscribe(): real clients share partitions, rebalance when a member
leaves, and resume after their committed offsets when the broker restarted after SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.support.broker_process import START_TIMEOUT_S, BrokerProcess, restart
from tests.support.waiting import wait_until

TOPIC = "grouped"
PARTITIONS = 6
GROUP = "shared"
# A session that outlives any broker outage restart() tolerates (its start deadline, plus the
# clients' reconnect backoff, at most 10 s). Clients end their membership themselves when
# the coordinator does not answer for session.timeout.ms (librdkafka drops its member id and
# joins afresh, as it would against Kafka), so only members whose sessions outlast the
# outage can carry on in their generation.
OUTLIVES_RESTART_MS = int(2 * START_TIMEOUT_S * 1000)
# Commit answers expected while the group rebalances.
REBALANCE_CODES = {22, 25, 27}  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS


@dataclass
class Member:
    """A group consumer on a thread: what it received and what it is assigned."""

    bootstrap: str
    kind: str  # "confluent", "kafka-python" or "aiokafka"
    group: str = GROUP
    session_timeout_ms: int = 10000
    assignments: int = 0  # how many assignments the member received (rebalances seen)
    seen: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset)
    assigned: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    def start(self) -> Member:
        target = {
            "confluent": self._confluent,
            "kafka-python": self._kafka_python,
            "aiokafka": self._aiokafka,
        }[self.kind]
        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(60)

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.assigned)

    def offsets(self) -> list[tuple[int, int]]:
        with self.lock:
            return list(self.seen)

    def _confluent(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        def on_assign(consumer: Any, parts: list[Any]) -> None:
            with self.lock:
                self.assigned = {p.partition for p in parts}
                self.assignments += 1

        def on_revoke(consumer: Any, parts: list[Any]) -> None:
            with self.lock:
                self.assigned = set()

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": self.session_timeout_ms,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    if not msg.error().retriable() and msg.error().code() != -191:
                        self.errors.append(str(msg.error()))
                    continue
                with self.lock:
                    self.seen.append((msg.partition(), msg.offset()))
                try:
                    consumer.commit(message=msg, asynchronous=False)
                except KafkaException as e:
                    # A commit racing a rebalance is refused (REBALANCE_IN_PROGRESS, ...);
                    # the record is then delivered again to its next owner, as in Kafka.
                    if not e.args[0].retriable() and e.args[0].code() not in REBALANCE_CODES:
                        self.errors.append(str(e.args[0]))
        finally:
            consumer.close()  # leaves the group

    def _kafka_python(self) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import CommitFailedError

        consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=500,
        )
        try:
            while not self.stop.is_set():
                batches = consumer.poll(timeout_ms=200)
                with self.lock:
                    self.assigned = {tp.partition for tp in consumer.assignment()}
                    for tp, records in batches.items():
                        self.seen.extend((tp.partition, r.offset) for r in records)
                if batches:
                    # The group may have rebalanced meanwhile: the next owner re-reads.
                    with contextlib.suppress(CommitFailedError):
                        consumer.commit()

        finally:
            consumer.close()

    def _aiokafka(self) -> None:
        asyncio.run(self._aiokafka_loop())

    async def _aiokafka_loop(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener
        from aiokafka.errors import CommitFailedError, KafkaError

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                with member.lock:
                    member.assigned = set()

            async def on_partitions_assigned(self, assigned: Any) -> None:
                with member.lock:
                    member.assigned = {tp.partition for tp in assigned}
                    member.assignments += 1

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=500,
        )
        consumer.subscribe([TOPIC], listener=Listener())
        await consumer.start()
        try:
            while not self.stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                with self.lock:
                    for tp, records in batches.items():
                        self.seen.extend((tp.partition, r.offset) for r in records)
                if batches:
                    try:
                        await consumer.commit()
                    except CommitFailedError:
                        pass  # rebalanced meanwhile: the next owner re-reads
                    except KafkaError as e:
                        if not getattr(e, "retriable", False):
                            self.errors.append(repr(e))
        finally:
            await consumer.stop()


def cli_json(broker: BrokerProcess, *args: str) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tierlog",
            "groups",
            *args,
            "--bootstrap-server",
            broker.bootstrap,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def create(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)


def produce(broker: BrokerProcess, start: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def test_three_clients_share_rebalance_and_resume_after_a_crash(broker_factory) -> None:
    broker: BrokerProcess = broker_factory({"group.initial.rebalance.delay.ms": "500"})
    create(broker)
    produce(broker, 0, 600)
    members = [
        Member(broker.bootstrap, "confluent").start(),
        Member(broker.bootstrap, "confluent").start(),
        Member(broker.bootstrap, "kafka-python").start(),
    ]
    try:

        def shared() -> bool:
            parts = [m.partitions() for m in members]
            union = set().union(*parts)
            return (
                all(parts)
                and union == set(range(PARTITIONS))
                and sum(len(p) for p in parts) == PARTITIONS
            )

        wait_until(shared, 60, 0.2, what="three members sharing six partitions")
        wait_until(
            lambda: len({o for m in members for o in m.offsets()}) == 600,
            60,
            0.2,
            what="all 600 records consumed once by the group",
        )

        # tierlog groups: the group, its three members, every partition committed, no lag.
        def described() -> dict:
            return cli_json(broker, "describe", GROUP)["groups"][0]

        wait_until(
            lambda: sorted(p["lag"] for p in described()["partitions"]) == [0] * PARTITIONS,
            30,
            0.5,
            what="every partition committed with no lag",
        )
        doc = described()
        assert doc["state"] == "STABLE" and len(doc["members"]) == 3
        assert {p["committed_offset"] for p in doc["partitions"]} == {100}
        listed = cli_json(broker, "list")["groups"]
        assert {"group": GROUP, "state": "STABLE"} in listed

        # A member leaves: the others take its partitions over.
        members[0].close()
        wait_until(
            lambda: (
                members[1].partitions() | members[2].partitions() == set(range(PARTITIONS))
                and not members[1].partitions() & members[2].partitions()
            ),
            60,
            0.2,
            what="two members covering every partition after one left",
        )
        for m in members:
            assert not m.errors, m.errors
    finally:
        for m in members:
            m.close()

    # Committed offsets survive SIGKILL: a new member reads only what was produced after.
    broker.kill()
    broker = restart(broker)
    produce(broker, 600, 60)
    late = Member(broker.bootstrap, "confluent").start()
    try:
        wait_until(lambda: len(late.offsets()) >= 60, 60, 0.2, what="the new records")
        seen = late.offsets()
        assert all(offset >= 100 for _, offset in seen), "re-read committed records"
        assert len(set(seen)) == 60
    finally:
        late.close()
        broker.kill()


def test_a_group_reading_a_tiered_topic_from_the_beginning_gets_the_remote_history(
    broker_factory, tmp_path
) -> None:
    from .test_tiering import TOPIC as TIERED
    from .test_tiering import N, create_and_fill, local_start, settings

    broker: BrokerProcess = broker_factory(
        {**settings(tmp_path), "group.initial.rebalance.delay.ms": "0"}
    )
    create_and_fill(broker)
    wait_until(lambda: local_start(broker) > N // 2, 60, 0.5, what="half the topic remote")
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "history",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([TIERED])
    offsets: set[int] = set()
    try:
        wait_until(
            lambda: (
                offsets.update(m.offset() for m in consumer.consume(1000, 0.2) if not m.error())
                or len(offsets) == N
            ),
            90,
            0.0,
            what="the whole history through the group",
        )
    finally:
        consumer.close()
    assert offsets == set(range(N))


def test_members_of_two_clients_keep_their_assignment_across_a_broker_sigkill(
    broker_factory,
) -> None:
    """Group metadata is in __consumer_offsets: after a SIGKILL and restart the members carry
    on in their generation (no new assignment) and consume what is produced next. Their
    sessions outlive the outage however slow the restart is (OUTLIVES_RESTART_MS); the
    broker counts them from when it serves again."""
    broker: BrokerProcess = broker_factory({"group.initial.rebalance.delay.ms": "1000"})
    create(broker)
    produce(broker, 0, 60)
    members = [
        Member(broker.bootstrap, kind, "kept", OUTLIVES_RESTART_MS).start()
        for kind in ("confluent", "aiokafka")
    ]
    try:

        def shared() -> bool:
            parts = [m.partitions() for m in members]
            return all(parts) and sorted(p for ps in parts for p in ps) == list(range(PARTITIONS))

        wait_until(shared, 60, 0.2, what="a confluent and an aiokafka member sharing")
        wait_until(
            lambda: len({o for m in members for o in m.offsets()}) == 60,
            60,
            0.2,
            what="the first 60 records consumed by the group",
        )
        before = [(m.assignments, m.partitions()) for m in members]
        generation = cli_json(broker, "describe", "kept")["groups"][0]

        broker.kill()
        broker = restart(broker)
        produce(broker, 60, 60)
        wait_until(
            lambda: len({o for m in members for o in m.offsets()}) == 120,
            60,
            0.2,
            what="the records produced after the restart",
        )
        assert [(m.assignments, m.partitions()) for m in members] == before
        after = cli_json(broker, "describe", "kept")["groups"][0]
        assert after["state"] == "STABLE"
        assert {m["member_id"] for m in after["members"]} == {
            m["member_id"] for m in generation["members"]
        }
        for m in members:
            assert not m.errors, m.errors
    finally:
        for m in members:
            m.close()
        broker.kill()


def test_consumer_offsets_holds_kafkas_records_readable_by_a_plain_consumer(
    broker_factory,
) -> None:
    """A client reading __consumer_offsets (as Kafka tools do) finds OffsetCommitKey v1 /
    OffsetCommitValue v3 records in the group's partition, decoded here independently."""
    import struct

    from confluent_kafka import Consumer, TopicPartition

    broker: BrokerProcess = broker_factory({"offsets.topic.num.partitions": "5"})
    create(broker)
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "audited"})
    committer.commit(offsets=[TopicPartition(TOPIC, 2, 17)], asynchronous=False)
    committer.close()

    # Java's "audited".hashCode() % 5, computed as Kafka's Utils.abs(...) % partitions.
    h = 0
    for ch in "audited":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h & 0x80000000 else h
    partition = abs(h) % 5

    reader = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
        }
    )
    reader.assign([TopicPartition("__consumer_offsets", partition, 0)])
    records = []
    try:
        wait_until(
            lambda: (
                records.extend(m for m in reader.consume(10, 0.2) if not m.error()) or bool(records)
            ),
            30,
            0.0,
            what="the commit record in __consumer_offsets",
        )
    finally:
        reader.close()
    key, value = records[0].key(), records[0].value()
    version, glen = struct.unpack_from(">hh", key)
    group = key[4 : 4 + glen].decode()
    (tlen,) = struct.unpack_from(">h", key, 4 + glen)
    topic = key[6 + glen : 6 + glen + tlen].decode()
    (part,) = struct.unpack_from(">i", key, 6 + glen + tlen)
    assert (version, group, topic, part) == (1, "audited", TOPIC, 2)
    value_version, offset = struct.unpack_from(">hq", value)
    assert (value_version, offset) == (3, 17)
    broker.kill()
