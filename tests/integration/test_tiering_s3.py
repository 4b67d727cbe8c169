"""Tiered storage end to end on S3: real broker processes, real clients, S3 over HTTP.

The end-to-end tests of issue 5 with the remote tier on ``S3RemoteStorageManager``, talking
HTTP to moto's server on 127.0.0.1 (or to the endpoint named by ``TIERLOG_S3_ENDPOINT``):

1. produce with confluent-kafka, tier, read back identical from offset 0 (confluent, kcat);
2. SIGKILL while copying (held at a chosen S3 PUT by ``s3_harness.FaultProxy``), restart:
   no acknowledged record lost, no copy left in COPY_SEGMENT_STARTED, no orphan object;
3. the S3 endpoint stopped under load: produce and local reads go on, tiering resumes;
4. retention.bytes, retention.ms and DeleteRecords delete remote segments; enabling tiering
   on an existing topic offloads it; deleting the topic empties the bucket.

Sizes are scaled down from the issue's so that the file runs in about two minutes on a CI
machine with two cores: 24 MiB instead of 200 MiB, with 256 KiB segments instead of 1 MiB
(about 100 segments, half the issue's 200), and the S3 outage lasts 15 s instead of 60 s
(longer than every S3 timeout and retry backoff configured here, so the broker does see the
endpoint down and retries several times; a longer outage exercises nothing more). Test 3
stops the moto server it starts itself, so it is skipped with ``TIERLOG_S3_ENDPOINT``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_clients import Got, Rec, consume_confluent, consume_kcat, produce_confluent
from tests.support.kafka_wire import list_offset_v11
from tests.support.s3_harness import (
    Bucket,
    FaultProxy,
    broker_log_lines,
    launcher,
    local_log_start,
    local_segment_bases,
    metadata_segments,
    metadata_segments_offline,
    orphan_report,
    tiering_settings,
    watermarks,
)
from tests.support.waiting import wait_until

KIB = 1024
SEGMENT_BYTES = 256 * KIB
VALUE_BYTES = 1000
# librdkafka's default batch.size (1 MB) would make every batch, and so every segment, 1 MB:
# a batch is never split across segments.
PRODUCER = {"batch.size": 64 * KIB, "enable.idempotence": True}


# -- data -------------------------------------------------------------------------------------
def value(i: int) -> bytes:
    """~1 KB of printable text unique to ``i`` (kcat -J prints values as text)."""
    head = b"%08d|" % i
    return (head * (VALUE_BYTES // len(head) + 1))[:VALUE_BYTES]


def key(i: int) -> bytes:
    return b"k%d" % i


def records(start: int, count: int, timestamp: int | None = None) -> list[Rec]:
    return [Rec(key(i), value(i), timestamp=timestamp) for i in range(start, start + count)]


def assert_identical(got: list[Got], start: int, end: int, who: str) -> None:
    """``got`` is exactly offsets ``start..end-1`` with the keys and values produced."""
    assert len(got) == end - start, f"{who}: read {len(got)} records, expected {end - start}"
    for i, g in zip(range(start, end), got, strict=True):
        assert (g.offset, g.key, g.value) == (i, key(i), value(i)), f"{who}: record {i} differs"


# -- fixtures ---------------------------------------------------------------------------------
def create_topic(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        future.result(30)


def tiered_config(**overrides: str) -> dict[str, str]:
    return {
        "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(SEGMENT_BYTES),
        "remote.storage.enable": "true",
        "retention.ms": "-1",
        **overrides,
    }


def list_offsets(bootstrap: str, topic: str, spec: int) -> int:
    """ListOffsets for partition 0 with a wire-level spec: -2 earliest, -4 earliest local,
    -5 latest tiered (KIP-1005). kafka-python sends them; librdkafka refuses them."""
    from kafka import KafkaAdminClient, TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return admin.list_partition_offsets({tp: spec})[tp].offset
    finally:
        admin.close()


EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6


# -- 1. produce, tier, read back --------------------------------------------------------------
N1 = 24_000  # ~24 MiB of values


def test_s3_tiered_topic_reads_back_identical_from_offset_0(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess]
) -> None:
    topic = "tiered-s3"
    broker = start_broker(
        tmp_path / "b", tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    )
    brokers.append(broker)
    create_topic(broker.bootstrap, topic, tiered_config())
    began = time.monotonic()
    produce_confluent(broker.bootstrap, topic, records(0, N1), PRODUCER)
    produced = time.monotonic()

    def mostly_remote() -> bool:
        # The active segment, one kept by local.retention.bytes, maybe one not yet deleted.
        return (
            len(local_segment_bases(broker, topic)) <= 3
            and bucket.log_bytes(topic) > 0.9 * N1 * VALUE_BYTES
        )

    wait_until(mostly_remote, 120, 0.5, what="most data copied to S3 and deleted locally")
    tiered = time.monotonic()
    local_start = local_log_start(broker, topic)
    earliest_local = list_offsets(broker.bootstrap, topic, EARLIEST_LOCAL)
    assert earliest_local == local_start, "ListOffsets -4 is the first local segment's base"
    tiered_before = list_offsets(broker.bootstrap, topic, LATEST_TIERED)
    assert tiered_before >= local_start - 1
    # -6 (KIP-1023, ListOffsets v11): the first offset not yet copied, whatever copies run
    # between the three requests.
    pending = list_offset_v11(broker.bootstrap, topic, 0, EARLIEST_PENDING_UPLOAD)
    tiered_after = list_offsets(broker.bootstrap, topic, LATEST_TIERED)
    assert tiered_before + 1 <= pending <= tiered_after + 1
    assert local_start > N1 * 0.9, "local retention freed the disk"
    assert watermarks(broker.bootstrap, topic) == (0, N1)

    assert_identical(consume_confluent(broker.bootstrap, topic), 0, N1, "confluent-kafka")
    assert_identical(consume_kcat(broker.bootstrap, topic), 0, N1, "kcat")
    print(
        f"\nproduced {N1} records in {produced - began:.1f}s; tiered in {tiered - produced:.1f}s;"
        f" local log start {local_start} (ListOffsets -4: {earliest_local});"
        f" {bucket.segment_count(topic)} segments, {bucket.log_bytes(topic)} bytes on S3;"
        f" read back in {time.monotonic() - tiered:.1f}s"
    )


# -- 2. SIGKILL while copying ------------------------------------------------------------------
class BackgroundProducer:
    """Produces records ``key(i)``/``value(i)`` at a steady pace on a thread (acks=all, no
    idempotence: retries across a broker restart may duplicate, never lose, records), and
    remembers which offset the broker acknowledged for each."""

    def __init__(self, bootstrap: str, topic: str, per_second: int) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.per_second = per_second
        self.acked: dict[int, int] = {}  # offset -> i
        self.last_acked = -1  # the highest i acknowledged
        self.errors: list[str] = []
        self.sent = 0
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 64 * KIB}
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _report(self, i: int):
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"record {i}: {err}")
            else:
                self.acked[msg.offset()] = i
                self.last_acked = max(self.last_acked, i)

        return report

    def _run(self) -> None:
        began = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - began) * self.per_second)
            while self.sent < due:
                try:
                    self._producer.produce(
                        self.topic,
                        key=key(self.sent),
                        value=value(self.sent),
                        partition=0,
                        on_delivery=self._report(self.sent),
                    )
                except BufferError:
                    break
                self.sent += 1
            self._producer.poll(0.02)

    def stop(self, timeout: float = 90.0) -> None:
        self._stop.set()
        self._thread.join(10)
        remaining = self._producer.flush(timeout)
        assert remaining == 0, f"{remaining} records never acknowledged; errors {self.errors[:3]}"


def assert_acked_present(bootstrap: str, topic: str, acked: dict[int, int]) -> None:
    """Every acknowledged offset holds the record acknowledged for it."""
    got = {g.offset: (g.key, g.value) for g in consume_confluent(bootstrap, topic)}
    lost = [o for o, i in sorted(acked.items()) if got.get(o) != (key(i), value(i))]
    if lost:
        first = lost[0]
        found = got.get(first)
        raise AssertionError(
            f"{len(lost)} of {len(acked)} acknowledged records lost or changed (read "
            f"{len(got)}, offsets {min(got, default=None)}..{max(got, default=None)}); first at "
            f"offset {first}: acknowledged key {key(acked[first])!r}, read "
            f"{None if found is None else found[0]!r}"
        )


def settled(broker: BrokerProcess, bucket: Bucket, topic: str) -> bool:
    """Every rolled segment copied, no copy in progress or left behind, nothing deleting."""
    active = local_segment_bases(broker, topic)[-1]
    if list_offsets(broker.bootstrap, topic, LATEST_TIERED) < active - 1:
        return False
    states = {s["state"] for s in metadata_segments(broker.bootstrap, topic)}
    return states == {"COPY_SEGMENT_FINISHED"} and not bucket.incomplete_stems(topic)


STALL_S = 60.0


def wait_settled(broker: BrokerProcess, bucket: Bucket, topic: str) -> None:
    """Wait until tiering has settled (``settled``). The backlog to copy grows with the time
    the test took to get here, and copies go as fast as the machine lets them, so no fixed
    deadline fits every machine: this fails when tiering makes no progress (its highest
    tiered offset stays put) for ``STALL_S``, which a stuck copy or a copy left in
    COPY_SEGMENT_STARTED would cause."""
    best, since = -2, time.monotonic()
    while not settled(broker, bucket, topic):
        tiered = list_offsets(broker.bootstrap, topic, LATEST_TIERED)
        if tiered > best:
            best, since = tiered, time.monotonic()
        assert time.monotonic() - since < STALL_S, (
            f"{topic}: tiering stalled at offset {best} for {STALL_S:.0f}s:\n{broker.log_tail()}"
        )
        time.sleep(0.5)  # the poll interval, as wait_until's


def coverage_gaps(finished: list[dict[str, Any]], local_start: int) -> list[tuple[int, int]]:
    """Offset ranges (inclusive) below ``local_start`` that no remote segment holds."""
    gaps, expected = [], 0
    for seg in sorted(finished, key=lambda s: s["start_offset"]):
        if seg["start_offset"] > expected:
            gaps.append((expected, seg["start_offset"] - 1))
        expected = max(expected, seg["end_offset"] + 1)
    if expected < local_start:
        gaps.append((expected, local_start - 1))
    return gaps


def assert_no_gap(finished: list[dict[str, Any]], local_start: int) -> None:
    """The remote segments and the local log together hold every offset from 0."""
    gaps = coverage_gaps(finished, local_start)
    assert not gaps, f"offsets in neither tier: {gaps}"


def is_put_of(suffix: str):
    return lambda method, path: method == "PUT" and path.split("?", 1)[0].endswith(suffix)


def test_sigkill_while_copying_loses_nothing_and_leaves_no_dangling_copy_or_orphan(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess]
) -> None:
    topic = "killed-s3"
    proxy = FaultProxy(s3_endpoint.url)
    try:
        settings = tiering_settings(proxy.url, s3_endpoint, bucket.name)
        broker = start_broker(tmp_path / "b", settings)
        brokers.append(broker)
        create_topic(broker.bootstrap, topic, tiered_config())
        producer = BackgroundProducer(broker.bootstrap, topic, per_second=800)
        # Where each kill lands: with the segment's objects written but not its manifest
        # (the copy's last PUT held), before any object of the segment (its first PUT, the
        # .log, held), and wherever a kill lands right after new objects show up.
        rounds = [is_put_of(".manifest.json"), is_put_of(".log"), None]
        dangling: list[int] = []
        for hold in rounds:
            if hold is not None:
                proxy.hold(hold)
                assert proxy.held_event.wait(30), f"no copy reached S3:\n{broker.log_tail()}"
            else:
                before = len(bucket.objects(topic))
                wait_until(
                    lambda n=before: len(bucket.objects(topic)) > n, 30, 0.01, what="a new copy"
                )
            broker.kill()
            offline = metadata_segments_offline(broker.settings["log.dirs"], topic)
            dangling.append(sum(s["state"] == "COPY_SEGMENT_STARTED" for s in offline))
            proxy.release()
            broker = restart(broker)
            brokers.append(broker)
            # The next kill only after the new broker acknowledged records sent after the
            # restart (its delivery reports), so that every broker took writes.
            sent = producer.sent
            wait_until(
                lambda n=sent: producer.last_acked >= n,
                60,
                0.05,
                what="an acknowledgement from the restarted broker",
            )
        producer.stop()
        assert dangling[0] >= 1 and dangling[1] >= 1, f"kills did not land mid-copy: {dangling}"

        # The next task runs delete what the kills left; then tiering catches up.
        wait_settled(broker, bucket, topic)
        problems: list[str] = []
        # One broker, no unclean election: no remote segment may leave the epoch lineage.
        lineage = [line for b in brokers for line in broker_log_lines(b, "leader-epoch lineage")]
        if lineage:
            problems.append(
                f"{len(lineage)} remote segments deleted as outside the leader-epoch lineage:\n"
                + "\n".join(lineage[:3])
            )
        finished = metadata_segments(broker.bootstrap, topic, "COPY_SEGMENT_FINISHED")
        gaps = coverage_gaps(finished, local_log_start(broker, topic))
        if gaps:
            lost = sum(1 for o in producer.acked if any(lo <= o <= hi for lo, hi in gaps))
            problems.append(f"offsets in neither tier: {gaps}; {lost} acknowledged records lost")
        orphans = orphan_report(bucket, {s["segment_id"] for s in finished})
        if orphans:
            problems.append(f"{len(orphans)} orphan objects: {orphans[:3]}")
        cleaned = [line for b in brokers for line in broker_log_lines(b, 'reason="dangling copy"')]
        if len(cleaned) < 2:
            problems.append(f"dangling copies not deleted after restart: {cleaned}")
        assert not problems, "\n".join(problems)
        # Every acknowledged record reads back, across both tiers.
        assert_acked_present(broker.bootstrap, topic, producer.acked)
        print(
            f"\nkills left {dangling} segments in COPY_SEGMENT_STARTED, deleted after restart; "
            f"{len(producer.acked)} records acknowledged, none lost; {len(finished)} segments "
            f"on S3, no orphans"
        )
    finally:
        proxy.close()


# -- 3. S3 down under load ---------------------------------------------------------------------
OUTAGE_S = 15.0
OUTAGE_ROUNDS = 3  # produce + local read rounds done while S3 is down, at the least
# The producer's own deadline for each record (librdkafka's message.timeout.ms, the request
# timeout's default). S3 stays down until the rounds are done, so a produce or a read that
# waited on S3 would never complete during the outage and fail at its client's deadline,
# however fast or slow the machine is.
OUTAGE_PRODUCER = {**PRODUCER, "message.timeout.ms": 30_000}
OUTAGE_READ_TIMEOUT_S = 30.0


def test_s3_outage_delays_tiering_but_not_produce_or_local_reads(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    if os.environ.get(launcher.ENV_ENDPOINT):
        pytest.skip("stops the S3 endpoint: needs the moto server this test starts")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address=launcher.HOST, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = launcher.S3Endpoint(url=f"http://{host}:{port}", kind="moto")
    name = f"tierlog-outage-{uuid.uuid4().hex[:10]}"
    endpoint.create_bucket(name)
    client = endpoint.client()
    bucket = Bucket(client, name)
    topic = "outage-s3"
    try:
        broker = start_broker(tmp_path / "b", tiering_settings(endpoint.url, endpoint, name))
        brokers.append(broker)
        create_topic(broker.bootstrap, topic, tiered_config())
        produce_confluent(broker.bootstrap, topic, records(0, 3000), PRODUCER)
        wait_until(lambda: local_log_start(broker, topic) > 2000, 60, 0.2, what="tiering")
        segments_before = bucket.segment_count(topic)

        server.stop()
        down_since = time.monotonic()
        produced, rounds = 3000, 0
        while rounds < OUTAGE_ROUNDS or time.monotonic() - down_since < OUTAGE_S:
            offsets = produce_confluent(
                broker.bootstrap, topic, records(produced, 300), OUTAGE_PRODUCER
            )
            assert offsets == list(range(produced, produced + 300))
            got = consume_confluent(
                broker.bootstrap, topic, start=produced, timeout_s=OUTAGE_READ_TIMEOUT_S
            )
            assert_identical(got, produced, produced + 300, "local read during the outage")
            produced += 300
            rounds += 1
        # Local retention deletes only what is copied: the local log starts at most one past
        # the highest tiered offset. Read in this order (both only grow), a copy finishing in
        # between cannot fail the check; one finishing at the stop (its upload done just
        # before) is counted, unlike a tiered offset read before the outage began.
        local_start_in_outage = local_log_start(broker, topic)
        tiered_in_outage = list_offsets(broker.bootstrap, topic, LATEST_TIERED)
        failed_copies = broker_log_lines(broker, "event=remote_copy_failed")

        server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
        server.start()
        # Tiering resumes: the data produced during the outage goes remote, local data goes.
        wait_until(
            lambda: local_log_start(broker, topic) > produced - 1000, 90, 0.5, what="resumed"
        )
        assert bucket.segment_count(topic) > segments_before
        assert local_start_in_outage <= tiered_in_outage + 1, "local data deleted before its copy"
        assert failed_copies, f"the broker never saw S3 down:\n{broker.log_tail()}"
        assert_identical(consume_confluent(broker.bootstrap, topic), 0, produced, "after")

        wait_settled(broker, bucket, topic)
        finished = metadata_segments(broker.bootstrap, topic, "COPY_SEGMENT_FINISHED")
        assert_no_gap(finished, local_log_start(broker, topic))
        assert not orphan_report(bucket, {s["segment_id"] for s in finished})
        print(
            f"\nS3 down: {produced - 3000} records produced and read locally in {rounds} rounds; "
            f"{len(failed_copies)} failed copies logged; local log start "
            f"{local_start_in_outage} during (tiered to {tiered_in_outage}), "
            f"{local_log_start(broker, topic)} after"
        )
    finally:
        client.close()
        server.stop()


# -- 4. retention across both tiers ------------------------------------------------------------
@pytest.fixture
def tiered_broker(
    tmp_path: Path, s3_endpoint: Any, bucket: Bucket, brokers: list[BrokerProcess]
) -> BrokerProcess:
    broker = start_broker(
        tmp_path / "b", tiering_settings(s3_endpoint.url, s3_endpoint, bucket.name)
    )
    brokers.append(broker)
    return broker


def remote_segments_wait(broker: BrokerProcess, bucket: Bucket, topic: str) -> list[dict[str, Any]]:
    """Wait until tiering has settled; the COPY_SEGMENT_FINISHED segments, by start offset."""
    wait_settled(broker, bucket, topic)
    finished = metadata_segments(broker.bootstrap, topic, "COPY_SEGMENT_FINISHED")
    return sorted(finished, key=lambda s: s["start_offset"])


def test_retention_bytes_deletes_remote_segments_and_moves_the_log_start(
    tiered_broker: BrokerProcess, bucket: Bucket
) -> None:
    broker, topic, n = tiered_broker, "by-size", 4000
    retention = 1024 * KIB
    create_topic(broker.bootstrap, topic, tiered_config(**{"retention.bytes": str(retention)}))
    produce_confluent(broker.bootstrap, topic, records(0, n), PRODUCER)

    def trimmed() -> bool:
        low, _ = watermarks(broker.bootstrap, topic)
        return low > 0 and bucket.log_bytes(topic) <= retention

    wait_until(trimmed, 90, 0.5, what="remote segments deleted by retention.bytes")
    remote = remote_segments_wait(broker, bucket, topic)
    low, high = watermarks(broker.bootstrap, topic)
    assert high == n
    assert remote and low == remote[0]["start_offset"], (
        "the log starts at the oldest remote segment"
    )
    local_only = sum(
        (Path(broker.settings["log.dirs"]) / f"{topic}-0" / f"{b:020d}.log").stat().st_size
        for b in local_segment_bases(broker, topic)
        if b > remote[-1]["end_offset"]
    )
    kept = sum(s["segment_size_in_bytes"] for s in remote) + local_only
    # As Kafka: the oldest segment goes while what stays is still >= retention.bytes.
    oldest = remote[0]["segment_size_in_bytes"]
    assert retention <= kept < retention + oldest, f"{kept} bytes kept of {retention}"
    assert n - low < 0.4 * n, f"log start {low}: most of the history was deleted"
    assert not orphan_report(bucket, {s["segment_id"] for s in remote})
    assert_identical(consume_confluent(broker.bootstrap, topic, start=low), low, n, "from low")


def test_retention_ms_deletes_old_remote_segments(
    tiered_broker: BrokerProcess, bucket: Bucket
) -> None:
    broker, topic, old, new = tiered_broker, "by-time", 2000, 2000
    hour_ms = 3_600_000
    create_topic(broker.bootstrap, topic, tiered_config(**{"retention.ms": str(hour_ms)}))
    two_hours_ago = int(time.time() * 1000) - 2 * hour_ms
    produce_confluent(broker.bootstrap, topic, records(0, old, two_hours_ago), PRODUCER)
    produce_confluent(broker.bootstrap, topic, records(old, new), PRODUCER)

    wait_until(
        lambda: watermarks(broker.bootstrap, topic)[0] > 0, 90, 0.5, what="retention.ms deletes"
    )
    remote = remote_segments_wait(broker, bucket, topic)
    low, high = watermarks(broker.bootstrap, topic)
    cutoff = int(time.time() * 1000) - hour_ms
    assert all(s["max_timestamp_ms"] > cutoff for s in remote), (
        "a remote segment outlived retention.ms"
    )
    # Every segment holding only old records went; the first with a new record stays.
    assert old - SEGMENT_BYTES // VALUE_BYTES <= low <= old, f"log start {low}"
    assert remote[0]["start_offset"] == low
    assert not orphan_report(bucket, {s["segment_id"] for s in remote})
    assert_identical(consume_confluent(broker.bootstrap, topic, start=low), low, high, "from low")


def test_delete_records_moves_the_log_start_into_the_remote_tier(
    tiered_broker: BrokerProcess, bucket: Bucket
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    broker, topic, n, cut = tiered_broker, "delete-records", 4000, 1234
    create_topic(broker.bootstrap, topic, tiered_config())
    produce_confluent(broker.bootstrap, topic, records(0, n), PRODUCER)
    before = remote_segments_wait(broker, bucket, topic)
    assert local_log_start(broker, topic) > cut, "the cut is in the remote tier"
    doomed = {s["segment_id"] for s in before if s["end_offset"] < cut}
    assert doomed

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, cut)])
    assert next(iter(futures.values())).result(30).low_watermark == cut
    assert watermarks(broker.bootstrap, topic) == (cut, n)

    def remote_below_gone() -> bool:
        ids = {s["segment_id"] for s in metadata_segments(broker.bootstrap, topic)}
        return not ids & doomed and not any(
            o.key.split("/")[-1].split(".")[0].split("-", 1)[1] in doomed
            for o in bucket.objects(topic)
        )

    wait_until(remote_below_gone, 60, 0.5, what="remote segments below the log start deleted")
    after = remote_segments_wait(broker, bucket, topic)
    assert after[0]["start_offset"] <= cut <= after[0]["end_offset"]
    assert not orphan_report(bucket, {s["segment_id"] for s in after})
    assert_identical(consume_confluent(broker.bootstrap, topic, start=cut), cut, n, "after cut")
    assert_identical(consume_kcat(broker.bootstrap, topic), cut, n, "kcat from beginning")


def test_enabling_tiering_on_an_existing_topic_offloads_it_and_deletion_empties_the_bucket(
    tiered_broker: BrokerProcess, bucket: Bucket
) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    broker, topic, n = tiered_broker, "late-tiering", 3000
    create_topic(
        broker.bootstrap,
        topic,
        {"segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": str(SEGMENT_BYTES)},
    )
    produce_confluent(broker.bootstrap, topic, records(0, n), PRODUCER)
    # The point from which "nothing happened" means something: a tiered topic produced to
    # afterwards has been copied to S3 and deleted locally, so the RLM's copy task and the
    # broker's retention check have both run since the untiered topic got its records.
    control = "tiered-control"
    create_topic(broker.bootstrap, control, tiered_config())
    produce_confluent(broker.bootstrap, control, records(0, n), PRODUCER)
    wait_until(
        lambda: local_log_start(broker, control) > 0, 90, 0.2, what="the control topic offloaded"
    )
    assert bucket.objects(control), "the control topic went to S3"
    assert bucket.objects(topic) == [], "tiering off: nothing goes to S3"
    assert local_log_start(broker, topic) == 0, "tiering off: local.retention.* does not apply"

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry(
        "remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    wait_until(
        lambda: local_log_start(broker, topic) > n * 0.8, 90, 0.5, what="older segments offloaded"
    )
    remote = remote_segments_wait(broker, bucket, topic)
    assert remote[0]["start_offset"] == 0
    assert_no_gap(remote, local_log_start(broker, topic))
    assert watermarks(broker.bootstrap, topic) == (0, n)
    assert_identical(consume_confluent(broker.bootstrap, topic), 0, n, "after offload")

    for future in admin.delete_topics([topic, control]).values():
        future.result(30)
    wait_until(lambda: bucket.objects() == [], 60, 0.5, what="the bucket emptied")
