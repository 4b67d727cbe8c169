"""Hostile input: slow-loris clients, connection floods, idle sockets, large frames, huge
admin requests, hostile topic names and stray directories do not take the broker's service
or memory away from real clients; clients (even a super user) forging internal records or
trimming internal topics lose nothing.

Protocol fuzzing of a live broker (random, mutated, oversize, truncated frames) is in
tests/integration/test_protocol_fuzz.py; this suite adds what fuzzing does not: connections
that send a frame's length and then trickle (or never send) the rest, more connections than
``max.connections``, sockets that stay idle past ``connections.max.idle.ms``, unauthenticated
connections announcing 100 MB frames to a SASL listener (``sasl.server.max.receive.size``),
and many connections pushing large frames at once (``queued.max.request.bytes``). Throughout,
a real client produces and consumes, and the broker's resident memory stays bounded.

Huge admin requests: a 3,000-partition CreateTopics and its DeleteTopics do not stop the
broker answering others, and one asking for more than ``max.partitions.per.request`` is
refused before anything is created.

Topic names: Metadata requests (with auto-creation on, as by default, and no authorizer) for
names with a trailing newline, a carriage return, a tab, a NUL, or non-ASCII look-alikes of
legal characters are answered INVALID_TOPIC_EXCEPTION and create nothing; the broker then
stops cleanly on SIGTERM and starts again. Directories that are not partitions (planted by
hand, or left with a registry entry by a tierlog that let "evil\n" through) are logged by
path and skipped at start-up, and the broker serves.

The internal topics (``__consumer_offsets``, ``__transaction_state``,
``__remote_log_metadata``) take writes from brokers and super users only
(core/server/internal_topics.py), and the remote log metadata manager refuses events of a
partition its broker leads that it did not write (rlmm/manager.py).
"""

from __future__ import annotations

import io
import json
import re
import socket
import struct
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from core.log.checkpoints import OffsetCheckpointFile
from core.server.api_keys import ApiKey
from rlmm.partitioner import metadata_partition
from rlmm.serde import serialize
from tests.support import super_user
from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.internal_writes import (
    INTERNAL,
    TIERED,
    admin_errors,
    create_tiered_topic,
    delete_records_raw,
    manifests,
    produce_raw,
)
from tests.support.kafka_clients import Rec, consume_confluent, produce_confluent, unique_group
from tests.support.kafka_wire import SIZE, metadata_errors
from tests.support.waiting import wait_until
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)

from .soak import SOAK

S = RemoteLogSegmentState

SLOW_CLIENTS = 400 if SOAK else 120
MAX_CONNECTIONS = SLOW_CLIENTS + 30
RSS_LIMIT_MB = 400


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_slow_loris_floods_and_idle_sockets_leave_real_clients_served(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = start_broker(
        tmp_path / "b",
        {"max.connections": str(MAX_CONNECTIONS), "connections.max.idle.ms": "3000"},
    )
    brokers.append(broker)
    rss_before = rss_mb(broker.pid)
    slow: list[socket.socket] = []
    try:
        # Each announces a 10 MB request and then sends it one small piece at a time.
        for _ in range(SLOW_CLIENTS):
            sock = connect(broker.bootstrap)
            sock.sendall(struct.pack(">i", 10_000_000) + b"\0" * 16)
            slow.append(sock)
        for sock in slow:
            sock.sendall(b"\0" * 1024)
        sent = [Rec(b"k%d" % i, b"v%d" % i) for i in range(200)]
        assert produce_confluent(broker.bootstrap, "served", sent) == list(range(200))
        assert [g.value for g in consume_confluent(broker.bootstrap, "served")] == [
            r.value for r in sent
        ]

        # Beyond max.connections a connection is closed at once.
        flood = [connect(broker.bootstrap) for _ in range(MAX_CONNECTIONS)]
        wait_until(
            lambda: sum(closed_by_peer(s) for s in flood) >= MAX_CONNECTIONS - 40,
            20,
            what="connections beyond max.connections refused",
        )
        for s in flood:
            s.close()

        # A socket that never sends a whole request is closed after connections.max.idle.ms
        # (first wait until the closed flood has left room for it to be accepted at all).
        held: list[socket.socket] = []

        def accepted() -> bool:
            sock = connect(broker.bootstrap)
            if closed_by_peer(sock):
                sock.close()
                return False
            held.append(sock)
            return True

        wait_until(accepted, 20, what="room for a new connection")
        idle = held[0]
        began = time.monotonic()
        wait_until(lambda: closed_by_peer(idle), 20, what="an idle connection closed")
        idle_closed_after = time.monotonic() - began
        idle.close()
        rss_during = rss_mb(broker.pid)
    finally:
        for sock in slow:
            sock.close()
    assert rss_during < RSS_LIMIT_MB, f"broker RSS {rss_during:.0f} MB under slow clients"
    again = [Rec(b"x", b"after")]
    assert produce_confluent(broker.bootstrap, "served", again) == [200]
    print(
        f"\n{SLOW_CLIENTS} slow-loris connections: real client served; RSS {rss_before:.0f} -> "
        f"{rss_during:.0f} MB; idle socket closed after {idle_closed_after:.1f}s"
    )


# -- large frames -------------------------------------------------------------------------------
SASL_PASSWORD = "carol-pw-5d1e"
SASL_CLIENT = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "carol",
    "sasl.password": SASL_PASSWORD,
}
HUGE_FRAME = 100_000_000  # under socket.request.max.bytes (104857600)
SASL_MAX_RECEIVE = 524_288  # sasl.server.max.receive.size, Kafka's default


def push(sock: socket.socket, total: int, stop_after_s: float) -> tuple[int, bool]:
    """Send up to ``total`` zero bytes; returns (bytes sent, whether the broker closed the
    connection). Stops when the broker stops reading for ``stop_after_s``."""
    chunk = b"\0" * (1 << 16)
    sent = 0
    sock.settimeout(stop_after_s)
    while sent < total:
        try:
            sent += sock.send(chunk[: min(len(chunk), total - sent)])
        except TimeoutError:
            return sent, False
        except OSError:  # EPIPE / ECONNRESET: the broker closed it
            return sent, True
    return sent, closed_by_peer(sock)


def test_unauthenticated_huge_frames_are_refused_at_the_size_prefix(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = start_broker(
        tmp_path / "b",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_carol="{SASL_PASSWORD}";'
            ),
        },
    )
    brokers.append(broker)
    sasl = broker.endpoints["SASL_PLAINTEXT"]
    rss_before = rss_mb(broker.pid)
    results: list[tuple[int, bool]] = []

    def attack() -> None:
        with connect(sasl) as sock:
            sock.sendall(struct.pack(">i", HUGE_FRAME))
            results.append(push(sock, HUGE_FRAME, stop_after_s=20))

    attackers = [threading.Thread(target=attack) for _ in range(8)]
    for t in attackers:
        t.start()
    for t in attackers:
        t.join()
    rss_after = rss_mb(broker.pid)
    # Every connection was closed long before its 100 MB frame was through: what it could
    # send is what the two kernels' socket buffers took before the reset.
    assert len(results) == 8
    assert all(closed for _, closed in results), results
    assert max(sent for sent, _ in results) < HUGE_FRAME // 4, results
    assert rss_after - rss_before < 40, f"broker RSS {rss_before:.0f} -> {rss_after:.0f} MB"

    # A frame just over the cap is refused too; one at the cap is read (and, not being a
    # request, closes the connection as a malformed frame would).
    with connect(sasl) as sock:
        sock.sendall(struct.pack(">i", SASL_MAX_RECEIVE + 1))
        wait_until(lambda: closed_by_peer(sock), 10, what="a frame over the cap refused")

    # A real SASL client authenticates and then sends frames larger than the cap: the cap
    # holds before authentication only.
    big = Rec(b"big", b"x" * 700_000)
    sent = [Rec(b"k%d" % i, b"v%d" % i) for i in range(50)] + [big]
    assert produce_confluent(sasl, "after-attack", sent, SASL_CLIENT) == list(range(51))
    got = consume_confluent(sasl, "after-attack", config=SASL_CLIENT)
    assert [g.value for g in got] == [r.value for r in sent]
    print(
        f"\n8 unauthenticated 100 MB frames: closed after at most "
        f"{max(s for s, _ in results) / 1e6:.1f} MB sent; RSS {rss_before:.0f} -> "
        f"{rss_after:.0f} MB"
    )


POOL_MB = 32  # queued.max.request.bytes in the test below
FRAME_MB = 16  # socket.request.max.bytes in the test below
PUSHERS = 24


def test_many_large_frames_at_once_stay_within_the_request_memory_pool(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = start_broker(
        tmp_path / "b",
        {
            "socket.request.max.bytes": str(FRAME_MB << 20),
            "queued.max.request.bytes": str(POOL_MB << 20),
            # The pushers hold their connections for the whole test.
            "connections.max.idle.ms": "300000",
        },
    )
    brokers.append(broker)
    rss_before = rss_mb(broker.pid)
    socks = [connect(broker.bootstrap) for _ in range(PUSHERS)]
    pushed: list[int] = []
    peak = [rss_before]
    try:
        # Each announces a 16 MB frame and sends all of it but the last byte, as fast as
        # the broker reads; without a bound the broker would buffer 24 x 16 MB.
        def push_frame(sock: socket.socket) -> None:
            sock.sendall(struct.pack(">i", FRAME_MB << 20))
            pushed.append(push(sock, (FRAME_MB << 20) - 1, stop_after_s=5)[0])

        pushers = [threading.Thread(target=push_frame, args=(s,)) for s in socks]
        for t in pushers:
            t.start()
        for t in pushers:
            t.join()
        peak[0] = max(peak[0], rss_mb(broker.pid))
        # A real client is served while the pool is full: its requests are small.
        sent = [Rec(b"k%d" % i, b"v%d" % i) for i in range(200)]
        assert produce_confluent(broker.bootstrap, "served", sent) == list(range(200))
        got = consume_confluent(broker.bootstrap, "served")
        assert [g.value for g in got] == [r.value for r in sent]
        peak[0] = max(peak[0], rss_mb(broker.pid))
    finally:
        for sock in socks:
            sock.close()
    # Frames admitted: reservations below the pool admit one more frame, so at most
    # POOL + FRAME bytes of bodies; every other connection holds at most its read buffer.
    bound = POOL_MB + FRAME_MB + PUSHERS * 1 + 40
    assert peak[0] - rss_before < bound, (
        f"broker RSS {rss_before:.0f} -> {peak[0]:.0f} MB with {PUSHERS} x {FRAME_MB} MB "
        f"frames pushed ({sum(pushed) / 1e6:.0f} MB sent)"
    )
    # The closed pushers gave their memory back: a real client still produces.
    assert produce_confluent(broker.bootstrap, "served", [Rec(b"x", b"after")]) == [200]
    print(
        f"\n{PUSHERS} x {FRAME_MB} MB frames ({sum(pushed) / 1e6:.0f} MB accepted by the "
        f"sockets), queued.max.request.bytes={POOL_MB} MB: RSS {rss_before:.0f} -> "
        f"{peak[0]:.0f} MB; real client served"
    )


# -- huge admin requests ------------------------------------------------------------------------
MANY_PARTITIONS = 3000
ANSWER_DEADLINE_S = 2.0  # far above a normal ApiVersions round trip (milliseconds)


def api_versions_frame(correlation_id: int) -> bytes:
    request_cls = load_request_schema(ApiKey.API_VERSIONS, 0)
    header_cls = request_cls.__header_schema__
    out = io.BytesIO()
    header = header_cls(
        request_api_key=i16(ApiKey.API_VERSIONS),
        request_api_version=i16(0),
        correlation_id=i32(correlation_id),
        client_id="probe",
    )
    entity_writer(header_cls)(out, header)
    entity_writer(request_cls)(out, request_cls())
    body = out.getvalue()
    return SIZE.pack(len(body)) + body


class ApiVersionsProbe:
    """Asks ApiVersions on its own connection again and again; each answer must come within
    ``ANSWER_DEADLINE_S`` (the socket's timeout), or the probe records the failure."""

    def __init__(self, bootstrap: str) -> None:
        self.sock = connect(bootstrap)
        self.sock.settimeout(ANSWER_DEADLINE_S)
        self.answered = 0
        self.slowest = 0.0
        self.failure: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        correlation_id = 0
        try:
            while not self._done.is_set():
                correlation_id += 1
                asked = time.monotonic()
                self.sock.sendall(api_versions_frame(correlation_id))
                (size,) = SIZE.unpack(self._read(4))
                self._read(size)
                self.answered += 1
                self.slowest = max(self.slowest, time.monotonic() - asked)
                # Paced, not hammering: about 20 questions a second.
                self._done.wait(max(0.0, 0.05 - (time.monotonic() - asked)))
        except TimeoutError:
            self.failure = f"ApiVersions #{correlation_id} not answered in {ANSWER_DEADLINE_S}s"
        except OSError as e:
            self.failure = f"ApiVersions #{correlation_id}: {e}"

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.sock.close()


def create(admin: AdminClient, *topics: NewTopic) -> dict[str, KafkaError | None]:
    """Create topics in one request; each topic's error (None when created)."""
    futures = admin.create_topics(list(topics), request_timeout=120, operation_timeout=120)
    errors: dict[str, KafkaError | None] = {}
    for name, future in futures.items():
        try:
            future.result()
            errors[name] = None
        except KafkaException as e:
            errors[name] = e.args[0]
    return errors


def produce_and_read_back(bootstrap: str, topic: str, partition: int) -> None:
    value = f"{topic}-{partition}".encode()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    delivered: list[object] = []
    producer.produce(
        topic, value=value, partition=partition, on_delivery=lambda e, m: delivered.append(e)
    )
    assert producer.flush(60) == 0 and delivered == [None], delivered
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_group()})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                assert (msg.partition(), msg.offset(), msg.value()) == (partition, 0, value)
                return
        raise AssertionError(f"nothing read back from {topic}-{partition}")
    finally:
        consumer.close()


def test_a_huge_create_topics_leaves_the_broker_answering_and_a_too_large_one_is_refused(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = start_broker(tmp_path / "b")
    brokers.append(broker)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    data = Path(broker.settings["log.dirs"])

    # Refused whole, before anything is created: one topic over the limit, and two that
    # are each under it but not together.
    refused = create(admin, NewTopic("too-many", 10_001, 1))
    assert refused["too-many"].code() == KafkaError.POLICY_VIOLATION
    assert "max.partitions.per.request=10000" in refused["too-many"].str()
    refused = create(admin, NewTopic("half-a", 6000, 1), NewTopic("half-b", 5000, 1))
    assert {e.code() for e in refused.values()} == {KafkaError.POLICY_VIOLATION}
    topics = admin.list_topics(timeout=30).topics
    assert not {"too-many", "half-a", "half-b"} & set(topics)
    assert not [d for d in data.iterdir() if d.name.startswith(("too-many-", "half-"))]

    # 3,000 partitions: the broker keeps answering another connection throughout.
    probe = ApiVersionsProbe(broker.bootstrap)
    try:
        before = probe.answered
        began = time.monotonic()
        assert create(admin, NewTopic("wide", MANY_PARTITIONS, 1)) == {"wide": None}
        created_in = time.monotonic() - began
        during = probe.answered - before
        slowest = probe.slowest
    finally:
        probe.stop()
    assert probe.failure is None, probe.failure
    assert during > 0
    for partition in (0, MANY_PARTITIONS - 1):
        produce_and_read_back(broker.bootstrap, "wide", partition)

    # A concurrent creation of the same name: exactly one wins.
    outcomes: list[KafkaError | None] = []

    def race() -> None:
        outcomes.append(create(admin, NewTopic("raced", 200, 1))["raced"])

    racers = [threading.Thread(target=race) for _ in range(2)]
    for t in racers:
        t.start()
    for t in racers:
        t.join()
    assert sorted(str(o and o.code()) for o in outcomes) == [
        str(KafkaError.TOPIC_ALREADY_EXISTS),
        "None",
    ]

    # Deleting the 3,000 partitions does not stop the answers either.
    probe = ApiVersionsProbe(broker.bootstrap)
    try:
        began = time.monotonic()
        for future in admin.delete_topics(["wide"], operation_timeout=120).values():
            future.result()
        deleted_in = time.monotonic() - began
    finally:
        probe.stop()
    assert probe.failure is None, probe.failure
    wait_until(
        lambda: not [d for d in data.iterdir() if d.name.startswith("wide-")],
        60,
        what="the partition dirs of the deleted topic gone",
    )
    print(
        f"\n{MANY_PARTITIONS} partitions created in {created_in:.1f}s and deleted in "
        f"{deleted_in:.1f}s; {during} ApiVersions answered during the creation, the slowest "
        f"in {slowest * 1000:.0f} ms"
    )


INVALID_TOPIC_EXCEPTION = 17
HOSTILE_TOPIC_NAMES = [
    "evil\n",
    "evil\r\n",
    "a\rb",
    "a\tb",
    "a\x00b",
    "a b",
    "t\u0435st",  # Cyrillic small ie for the "e"
    "\uff54\uff45\uff53\uff54",  # fullwidth "test"
    "topic\u0663",  # Arabic-Indic digit three
    "topic\u00b2",  # superscript two
    "a\u2028b",  # line separator
]
# Checkpoints written often, so that a broken one shows within the test.
FAST_CHECKPOINTS = {
    "replica.high.watermark.checkpoint.interval.ms": "100",
    "log.flush.offset.checkpoint.interval.ms": "100",
}


def data_dir(broker: BrokerProcess) -> Path:
    return Path(broker.settings["log.dirs"])


def partition_dirs(broker: BrokerProcess) -> set[str]:
    return {p.name for p in data_dir(broker).iterdir() if p.is_dir()}


def hw_checkpoint(broker: BrokerProcess) -> dict[tuple[str, int], int]:
    return OffsetCheckpointFile(data_dir(broker) / "replication-offset-checkpoint").read()


@pytest.mark.parametrize("version", [1, 4, 12])
def test_hostile_topic_names_are_refused_and_the_broker_restarts_cleanly(
    tmp_path: Path, brokers: list[BrokerProcess], version: int
) -> None:
    broker = start_broker(tmp_path / "b", FAST_CHECKPOINTS)  # auto-create on, no authorizer
    brokers.append(broker)
    sent = [Rec(b"k", b"before")]
    assert produce_confluent(broker.bootstrap, "served", sent) == [0]
    before = partition_dirs(broker)

    answers = metadata_errors(broker.bootstrap, HOSTILE_TOPIC_NAMES, version)
    assert answers == [(name, INVALID_TOPIC_EXCEPTION) for name in HOSTILE_TOPIC_NAMES]
    # The same request path still auto-creates a legal name.
    assert metadata_errors(broker.bootstrap, ["legal-name"], version) == [("legal-name", 0)]
    assert partition_dirs(broker) - before == {"legal-name-0"}
    registry = json.loads((data_dir(broker) / "tierlog-metadata.json").read_text())
    assert not set(registry["topics"]) & set(HOSTILE_TOPIC_NAMES)

    # Every checkpoint still works: the high watermarks are written, the new topic's too.
    wait_until(
        lambda: {("served", 0), ("legal-name", 0)} <= set(hw_checkpoint(broker)),
        20,
        what="high-watermark checkpoint with every partition",
    )
    assert broker.stop() == 0
    assert (data_dir(broker) / ".kafka_cleanshutdown").exists()

    again = restart(broker)
    brokers.append(again)
    assert [r.value for r in consume_confluent(again.bootstrap, "served")] == [b"before"]
    assert again.stop() == 0
    for log_file in (broker.log_file, again.log_file):
        assert "Traceback" not in log_file.read_text(errors="replace")


STRAY_DIRS = ["evil\n-0", "notapartition", "x-abc", "t-01", "topic-\u0663", "a b-0"]


def test_stray_directories_in_a_log_dir_are_logged_and_the_broker_serves(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = start_broker(tmp_path / "b", FAST_CHECKPOINTS)
    brokers.append(broker)
    sent = [Rec(b"k%d" % i, b"v%d" % i) for i in range(10)]
    assert produce_confluent(broker.bootstrap, "orders", sent) == list(range(10))
    assert broker.stop() == 0

    # What an older tierlog left after a Metadata request for "evil\n": a registry entry and
    # its partition directory. Plus directories planted by hand.
    data = data_dir(broker)
    for name in STRAY_DIRS:
        (data / name).mkdir()
        (data / name / "00000000000000000000.log").write_bytes(b"")
    registry_path = data / "tierlog-metadata.json"
    registry = json.loads(registry_path.read_text())
    registry["topics"]["evil\n"] = dict(registry["topics"]["orders"], id=str(uuid.uuid4()))
    registry_path.write_text(json.dumps(registry))

    again = restart(broker)
    brokers.append(again)
    text = again.log_file.read_text(errors="replace")
    for name in STRAY_DIRS:
        assert f"{str(data / name)!r} is not a partition directory" in text, name
    assert "'evil\\n' has an illegal name and is not served" in text
    assert "Traceback" not in text

    assert [r.value for r in consume_confluent(again.bootstrap, "orders")] == [
        r.value for r in sent
    ]
    assert produce_confluent(again.bootstrap, "orders", [Rec(b"k", b"after")]) == [10]
    wait_until(
        lambda: hw_checkpoint(again).get(("orders", 0)) == 11,
        20,
        what="high-watermark checkpoint of orders-0 at 11",
    )
    assert again.stop() == 0
    for name in STRAY_DIRS:  # left as they were, for the operator
        assert (data / name / "00000000000000000000.log").exists()
    third = restart(again)
    brokers.append(third)
    assert third.stop() == 0


# -- hostile writes to the internal topics --------------------------------------------------

ROUNDS = 40 if SOAK else 8
PER_ROUND = 50
NODE = 1
METADATA_PARTITIONS = 3


def tiered_settings(tmp: Path) -> dict[str, str]:
    return super_user.settings(
        **{
            "remote.log.storage.system.enable": "true",
            "rsm.config.storage.root": str(tmp / "bucket"),
            "rlmm.config.remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
            "remote.log.manager.task.interval.ms": "100",
            "log.retention.check.interval.ms": "200",
            "offsets.topic.num.partitions": "3",
        }
    )


def insider_forgeries(md: RemoteLogSegmentMetadata) -> list[bytes]:
    """What a super user could write to destroy or hide remote data: deletions in the
    broker's name and another's, a phantom segment over the rest of the log (the copy would
    skip real data), a partition deletion mark."""
    sid = md.remote_log_segment_id
    tp = md.topic_id_partition
    phantom = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp), md.end_offset + 1, 10**9, 1, NODE, 1, 1,
        {0: md.end_offset + 1},
    )  # fmt: skip
    return [
        serialize(RemoteLogSegmentMetadataUpdate(sid, 1, None, S.DELETE_SEGMENT_STARTED, NODE)),
        serialize(RemoteLogSegmentMetadataUpdate(sid, 1, None, S.DELETE_SEGMENT_STARTED, 7)),
        serialize(phantom),
        serialize(
            RemoteLogSegmentMetadataUpdate(
                phantom.remote_log_segment_id, 1, None, S.COPY_SEGMENT_FINISHED, NODE
            )
        ),
        serialize(
            RemotePartitionDeleteMetadata(
                tp, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, NODE
            )
        ),
    ]


def test_hostile_writes_to_internal_topics_lose_nothing(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    """While a topic is tiered and a group commits, anonymous and authenticated clients try
    every write that would destroy internal data (forged metadata events and commits,
    DeleteRecords, retention.ms=1, deleting or pre-creating the topics), and a super user
    forges metadata events in the broker's name. Afterwards every acknowledged record reads
    back from offset 0 (mostly from the remote tier), the group's offset is the last one
    committed, and no remote segment was deleted."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    broker = start_broker(tmp_path / "b", tiered_settings(tmp_path))
    brokers.append(broker)
    create_tiered_topic(broker.bootstrap)
    insider = Producer({"bootstrap.servers": super_user.sasl_bootstrap(broker),
                        **super_user.client_config()})  # fmt: skip
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    sent: list[Rec] = []
    refused = forged = 0
    seen: set[object] = set()
    expected_codes = {
        "alter": KafkaError.POLICY_VIOLATION,
        "create": KafkaError.POLICY_VIOLATION,
        "delete": KafkaError.TOPIC_EXCEPTION,
    }
    try:
        for round_ in range(ROUNDS):
            first = len(sent)
            batch = [Rec(b"k%d" % i, (b"%06d" % i) * 40) for i in range(first, first + PER_ROUND)]
            offsets = produce_confluent(broker.bootstrap, TIERED, batch, {"batch.num.messages": 5})
            assert offsets == list(range(first, first + PER_ROUND))
            sent += batch
            committer.commit(offsets=[TopicPartition(TIERED, 0, len(sent))], asynchronous=False)
            segments = manifests(tmp_path)
            seen |= {md.segment_id for md in segments}
            for md in segments[-3:]:
                mp = metadata_partition(md.topic_id_partition, METADATA_PARTITIONS)
                for value in insider_forgeries(md):
                    code = produce_raw(broker.bootstrap, "__remote_log_metadata", mp, value)
                    assert code == ErrorCode.topic_authorization_failed
                    refused += 1
                    insider.produce("__remote_log_metadata", value=value, partition=mp)
                    forged += 1
            for topic in INTERNAL:
                assert produce_raw(broker.bootstrap, topic) == ErrorCode.topic_authorization_failed
                assert delete_records_raw(broker.bootstrap, topic) == ErrorCode.policy_violation
                refused += 2
            user = "alice" if round_ % 2 else None
            config = super_user.client_config(user) if user else {}
            bootstrap = super_user.sasl_bootstrap(broker) if user else broker.bootstrap
            assert admin_errors(bootstrap, **config) == expected_codes
            refused += 3
            assert insider.flush(20) == 0
        (committed,) = committer.committed([TopicPartition(TIERED, 0)], timeout=20)
    finally:
        committer.close()
        del insider  # librdkafka would keep reconnecting once the broker is gone

    # The metadata manager refused every forgery the super user could write.
    def refusals() -> int:
        return len(re.findall(r"WARNING rlmm\.manager: refused", broker.log_file.read_text()))

    wait_until(lambda: refusals() >= forged, 30, what=f"{forged} forged events refused")
    log = broker.log_file.read_text()
    assert "event=remote_delete " not in log
    assert seen <= {md.segment_id for md in manifests(tmp_path)}
    assert committed.offset == len(sent)
    got = consume_confluent(broker.bootstrap, TIERED)
    assert [(g.key, g.value) for g in got] == [(r.key, r.value) for r in sent]
    local_start = min(int(p.stem) for p in (tmp_path / "b" / "data" / f"{TIERED}-0").glob("*.log"))
    assert broker.proc.poll() is None
    print(
        f"\n{refused} hostile requests refused and {forged} forged metadata events by a super "
        f"user refused by the metadata manager, over {ROUNDS} rounds; {len(sent)} records "
        f"read back (offsets below {local_start} from {len(seen)} remote segments); "
        f"no remote segment deleted"
    )
