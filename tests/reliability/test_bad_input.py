"""Hostile input: slow-loris clients, connection floods, idle sockets, hostile topic names
and stray directories do not take the broker's service or memory away from real clients;
clients (even a super user) forging internal records or trimming internal topics lose nothing.

Protocol fuzzing of a live broker (random, mutated, oversize, truncated frames) is in
tests/integration/test_protocol_fuzz.py; this suite adds what fuzzing does not: connections
that send a frame's length and then trickle (or never send) the rest, more connections than
``max.connections``, and sockets that stay idle past ``connections.max.idle.ms``. Throughout,
a real client produces and consumes, and the broker's resident memory stays bounded.

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

import json
import re
import socket
import struct
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from core.log.checkpoints import OffsetCheckpointFile
from rlmm.partitioner import metadata_partition
from rlmm.serde import serialize
from support import super_user
from support.broker_process import BrokerProcess, restart, start_broker
from support.internal_writes import (
    INTERNAL,
    TIERED,
    admin_errors,
    create_tiered_topic,
    delete_records_raw,
    manifests,
    produce_raw,
)
from support.kafka_clients import Rec, consume_confluent, produce_confluent
from support.kafka_wire import metadata_errors
from support.waiting import wait_until
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
