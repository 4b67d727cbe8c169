"""LogManager: several log dirs, checkpoints, clean shutdown, locking, identity."""

from __future__ import annotations

import pytest

from core.errors import InvalidConfigError, LogDirNotUsableError
from core.log.checkpoints import OffsetCheckpointFile
from core.log.config import LogConfig
from core.log.log_manager import LogManager, LogManagerConfig
from core.records.batch import RecordBatchHeader
from core.records.record import decode_records
from core.topic_name import InvalidTopicError


def manager(dirs, **kw) -> LogManager:
    return LogManager(LogManagerConfig(log_dirs=tuple(dirs), **kw))


def test_partitions_spread_over_log_dirs_and_reload(tmp_path, batch):
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs)
    for p in range(4):
        plog = lm.get_or_create_log("orders", p)
        plog.append_as_leader(batch([f"p{p}".encode()] * (p + 1)), 0)
    assert sorted(c.name for c in dirs[0].iterdir() if c.is_dir()) == ["orders-0", "orders-2"]
    assert sorted(c.name for c in dirs[1].iterdir() if c.is_dir()) == ["orders-1", "orders-3"]
    lm.shutdown()
    for d in dirs:
        assert (d / ".kafka_cleanshutdown").exists()
        assert (d / "meta.properties").exists()
        assert OffsetCheckpointFile(d / "recovery-point-offset-checkpoint").read()
    again = manager(dirs)
    assert {(p.topic, p.partition): p.log_end_offset for p in again.all_logs()} == {
        ("orders", 0): 1,
        ("orders", 1): 2,
        ("orders", 2): 3,
        ("orders", 3): 4,
    }
    # The marker is consumed at start-up: a crash from now on means recovery.
    assert not (dirs[0] / ".kafka_cleanshutdown").exists()
    again.shutdown()


def test_partitions_created_together_spread_and_existing_ones_are_kept(tmp_path, batch):
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = manager(dirs)
    first = lm.get_or_create_log("wide", 0)
    first.append_as_leader(batch([b"kept"]), 0)
    logs = lm.get_or_create_logs("wide", range(5))
    assert [p.partition for p in logs] == [0, 1, 2, 3, 4]
    assert logs[0] is first and logs[0].log_end_offset == 1
    assert sorted(c.name for c in dirs[0].iterdir() if c.is_dir()) == ["wide-0", "wide-2", "wide-4"]
    assert sorted(c.name for c in dirs[1].iterdir() if c.is_dir()) == ["wide-1", "wide-3"]
    lm.shutdown()


def test_a_log_without_a_checkpointed_high_watermark_starts_at_zero(tmp_path, batch):
    """Kafka's rule: no checkpointed high watermark means 0. Taking the log end instead
    would count offsets no other replica may have as committed after a crash."""
    lm = manager([tmp_path / "d"])
    lm.get_or_create_log("t", 0).append_as_leader(batch([b"a", b"b"]), 0)
    lm.close_without_marker()  # a crash before the first high-watermark checkpoint
    again = manager([tmp_path / "d"])
    plog = again.get_log("t", 0)
    assert (plog.log_end_offset, plog.high_watermark) == (2, 0)
    again.shutdown()


def test_checkpoints_hold_recovery_points_log_start_and_high_watermarks(tmp_path, batch):
    lm = manager([tmp_path / "d"])
    plog = lm.get_or_create_log("t", 0)
    plog.append_as_leader(batch([b"a", b"b"]), 0)
    plog.flush()
    plog.update_high_watermark(2)
    lm.checkpoint_recovery_points()
    lm.checkpoint_log_start_offsets()
    lm.checkpoint_high_watermarks()
    d = tmp_path / "d"
    assert OffsetCheckpointFile(d / "recovery-point-offset-checkpoint").read() == {("t", 0): 2}
    assert OffsetCheckpointFile(d / "log-start-offset-checkpoint").read() == {("t", 0): 0}
    assert OffsetCheckpointFile(d / "replication-offset-checkpoint").read() == {("t", 0): 2}
    text = (d / "recovery-point-offset-checkpoint").read_text()
    assert text == "0\n1\nt 0 2\n"
    lm.shutdown()


@pytest.mark.parametrize(
    "damaged", ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint"]
)
def test_a_corrupt_offset_checkpoint_is_ignored_with_a_warning(tmp_path, batch, caplog, damaged):
    """Kafka's rule: a recovery-point or log-start-offset checkpoint that cannot be read is
    treated as absent (recover every segment; start at the first segment); start-up goes on
    and every record stays readable, including those written after the last flush."""
    d = tmp_path / "d"
    config = LogConfig.from_props({"segment.bytes": 200})
    lm = manager([d])
    plog = lm.get_or_create_log("t", 0, config)
    values = [b"record-%02d" % i for i in range(30)]
    for v in values[:20]:
        plog.append_as_leader(batch([v]), 0)
    plog.flush()
    lm.checkpoint_recovery_points()
    lm.checkpoint_log_start_offsets()
    for v in values[20:]:
        plog.append_as_leader(batch([v]), 0)  # not flushed: recovery must find them
    assert len(plog.segments()) > 3
    lm.close_without_marker()  # a crash: recovery runs from the recovery point
    (d / damaged).write_bytes(b"\x00\xffnot a checkpoint\n7\n")

    with caplog.at_level("WARNING", logger="core.log.log_manager"):
        again = manager([d])
    assert any(damaged in r.getMessage() for r in caplog.records), "no warning names the file"
    plog = again.get_log("t", 0)
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 30)
    got = [
        r.value
        for segment in plog.segments()
        for position, header in segment.log.scan_batches(0)
        for r in decode_records(RecordBatchHeader(segment.log.read(position, header.size_in_bytes)))
    ]
    assert got == values
    again.shutdown()


def test_a_second_manager_on_the_same_dir_is_refused(tmp_path):
    lm = manager([tmp_path / "d"])
    with pytest.raises(LogDirNotUsableError, match="locked"):
        manager([tmp_path / "d"])
    lm.shutdown()


def test_unusable_log_dir_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with pytest.raises(LogDirNotUsableError, match=str(blocker)):
        manager([blocker / "logs"])


def test_node_id_mismatch_is_refused(tmp_path):
    manager([tmp_path / "d"], node_id=1).shutdown()
    with pytest.raises(LogDirNotUsableError, match="node"):
        manager([tmp_path / "d"], node_id=2)


def test_retention_task_applies_topic_configs(tmp_path, batch):
    small = LogConfig(segment_bytes=300, retention_bytes=300, file_delete_delay_ms=0)
    lm = LogManager(
        LogManagerConfig(log_dirs=(tmp_path / "d",)),
        topic_config=lambda topic: small if topic == "small" else LogConfig(),
    )
    for topic in ("small", "big"):
        plog = lm.get_or_create_log(topic, 0)
        for _ in range(20):
            plog.append_as_leader(batch([b"x" * 80], timestamp=2**40), 0)
        plog.update_high_watermark(plog.log_end_offset)
    assert lm.cleanup_logs() > 0
    assert lm.get_log("small", 0).log_start_offset > 0
    assert lm.get_log("big", 0).log_start_offset == 0
    lm.shutdown()


def test_deleted_log_leaves_nothing(tmp_path, batch):
    lm = manager([tmp_path / "d"])
    lm.get_or_create_log("gone", 0).append_as_leader(batch([b"a"]), 0)
    assert lm.delete_log("gone", 0)
    assert lm.get_log("gone", 0) is None
    assert not [c for c in (tmp_path / "d").iterdir() if c.name.startswith("gone")]
    lm.shutdown()


def test_topic_config_errors_name_the_key():
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes"):
        LogConfig.from_props({"segment.bytes": "lots"})
    with pytest.raises(InvalidConfigError, match=r"Unknown configuration segment\.byte"):
        LogConfig.from_props({"segment.byte": "100"})
    with pytest.raises(InvalidConfigError, match=r"message\.timestamp\.type"):
        LogConfig.from_props({"message.timestamp.type": "WallClock"})
    with pytest.raises(InvalidConfigError, match=r"local\.retention\.bytes"):
        LogConfig.from_props({"retention.bytes": "100", "local.retention.bytes": "200"})
    with pytest.raises(InvalidConfigError, match=r"cleanup\.policy"):
        LogConfig.from_props({"remote.storage.enable": "true", "cleanup.policy": "compact"})


def test_topic_config_round_trips_through_properties():
    cfg = LogConfig.from_props(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "cleanup.policy": "delete",
            "remote.storage.enable": "true",
            "local.retention.ms": "60000",
        }
    )
    assert cfg.segment_bytes == 1048576 and cfg.remote_storage_enable
    assert cfg.effective_local_retention_ms == 60000
    assert cfg.effective_local_retention_bytes == -1  # -2 means "as retention.bytes"
    assert LogConfig.from_props(cfg.to_props()) == cfg
    assert cfg.with_overrides({"segment.ms": "1000"}).segment_ms == 1000


STRAY_DIRS = ["evil\n-0", "notapartition", "x-abc", "t-01", "t-\u0663", "a b-0", "backup-delete"]


def test_stray_directories_are_logged_by_path_skipped_and_left_alone(tmp_path, batch, caplog):
    d = tmp_path / "d"
    lm = manager([d])
    lm.get_or_create_log("orders", 0).append_as_leader(batch([b"a", b"b"]), 0)
    lm.shutdown()
    for name in STRAY_DIRS:
        (d / name).mkdir()
        (d / name / "00000000000000000000.log").write_bytes(b"junk")
    (d / "remote-log-index-cache").mkdir()  # the remote tier's, not a stray

    with caplog.at_level("WARNING", logger="core.log.log_manager"):
        again = manager([d])
    assert {(p.topic, p.partition) for p in again.all_logs()} == {("orders", 0)}
    assert again.get_log("orders", 0).log_end_offset == 2
    warned = "\n".join(r.getMessage() for r in caplog.records)
    for name in STRAY_DIRS:
        assert repr(str(d / name)) in warned
    assert "remote-log-index-cache" not in warned
    # A name with a newline is logged escaped: it cannot forge a line of the broker's log.
    assert all("\n" not in r.getMessage() for r in caplog.records)

    # The checkpoints hold the real partition only, and stay readable.
    again.checkpoint_high_watermarks()
    again.shutdown()
    for checkpoint in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint"):
        assert set(OffsetCheckpointFile(d / checkpoint).read()) == {("orders", 0)}
    for name in STRAY_DIRS:  # untouched, including the one that looks like a deleted dir
        assert (d / name / "00000000000000000000.log").read_bytes() == b"junk"


@pytest.mark.parametrize("topic", ["evil\n", "a\rb", "a\tb", "a\x00b", "t\u0435st", "", ".."])
def test_no_partition_directory_is_made_for_an_illegal_topic_name(tmp_path, topic):
    d = tmp_path / "d"
    lm = manager([d])
    with pytest.raises(InvalidTopicError):
        lm.get_or_create_log(topic, 0)
    assert not [c for c in d.iterdir() if c.is_dir()]
    lm.checkpoint_high_watermarks()  # nothing illegal to break it
    lm.shutdown()


def test_idle_producers_are_forgotten_every_check_interval(tmp_path, batch):
    """producer.id.expiration.check.interval.ms: the LogManager's periodic task drops the
    producers idle for producer.id.expiration.ms (Kafka's PeriodicProducerExpirationCheck);
    a producer still active stays."""
    import time

    now = [1_700_000_000_000]
    lm = LogManager(
        LogManagerConfig(
            log_dirs=(tmp_path / "d",),
            producer_id_expiration_ms=60_000,
            producer_id_expiration_check_interval_ms=20,
        ),
        clock=lambda: now[0],
    )
    plog = lm.get_or_create_log("t", 0)
    for pid, timestamp in ((7, now[0] - 120_000), (8, now[0])):
        idempotent = batch(
            [b"v"], timestamp=timestamp, producer_id=pid, producer_epoch=0, base_sequence=0
        )
        plog.append_as_leader(idempotent, 0)
    assert set(plog.producer_state.active_producers) == {7, 8}
    lm.startup()
    deadline = time.monotonic() + 10
    while 7 in plog.producer_state.active_producers:
        assert time.monotonic() < deadline, "the idle producer was never expired"
        time.sleep(0.01)
    assert set(plog.producer_state.active_producers) == {8}
    lm.shutdown()
