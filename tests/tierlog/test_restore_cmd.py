"""``tierlog restore``: a topic recreated from the bucket alone in a stopped broker's storage.

The bucket is written as a broker writes it (``tiered_data``), the restore runs in process,
and the result is read back the way the next broker start reads it: the registry, the
partition logs loaded by core's LogManager, ``__remote_log_metadata`` replayed. Real broker
processes serving the restored topic over S3 are in tests/integration/test_remote_tools.py.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.kafka_uuid import uuid_to_base64
from core.log.log_manager import LOCK_FILE
from core.server.config import load_broker_config
from core.server.topics import TopicRegistry
from rlmm.replay import replay
from rlmm.topic_client import LogDirMetadataTopicReader
from tests.support.tiered_data import (
    BROKER_ID,
    METADATA_PARTITIONS,
    Producer,
    TieredTopic,
    TierWriter,
    local_rsm_props,
    write_diverged,
    write_tiered_topic,
)
from tiered.api import RemoteLogSegmentState
from tierlog.cli import main
from tierlog.metadata_source import Source, read_records
from tierlog.offline_storage import OfflineBrokerStorage

S = RemoteLogSegmentState
PRODUCER_ID = 7


@dataclass
class Env:
    root: Path
    bucket: Path
    props: dict[str, str]
    topic: TieredTopic
    new_dir: Path

    def config(self, **overrides: str) -> Path:
        settings = {
            **self.props,
            "node.id": str(BROKER_ID),
            "log.dirs": str(self.new_dir),
            "remote.log.storage.system.enable": "true",
            "rlmm.config.remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
            **overrides,
        }
        path = self.root / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if v is not None))
        return path


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    bucket = tmp_path / "bucket"
    props = local_rsm_props(bucket)
    writer = TierWriter(tmp_path, props, tmp_path / "lost-broker")
    topic = write_tiered_topic(
        writer,
        batches=15,
        producer=Producer(PRODUCER_ID),
        configs={
            "remote.storage.enable": "true",
            "retention.ms": "-1",
            "max.message.bytes": "5000",
        },
    )
    writer.close()
    yield Env(tmp_path, bucket, props, topic, tmp_path / "new-broker")


def restore(env: Env, *args: str, capsys: pytest.CaptureFixture[str], config: Path | None = None
            ) -> tuple[int, Any, str]:  # fmt: skip
    argv = ["restore", "--config", str(config or env.config()), "--json", *args]
    if "--topic" not in args:
        argv += ["--topic", env.topic.topic]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else out), err


def metadata_of(log_dir: Path) -> dict[Any, list[Any]]:
    reader = LogDirMetadataTopicReader([log_dir])
    n = reader.partition_count()
    replayed = replay(read_records(Source(reader, n, None, lambda tp: None)), n)
    assert replayed.warnings == []
    return {tp: list(replayed.cache(tp).entries()) for tp in replayed.partitions()}


def test_restore_recreates_the_topic_as_the_broker_will_load_it(env: Env, capsys) -> None:
    code, doc, err = restore(env, capsys=capsys)
    assert code == 0, err
    assert "tierlog: restore:" in err  # progress lines
    (topic,) = doc["topics"]
    t = env.topic
    assert topic["topic_id"] == uuid_to_base64(t.topic_id) and topic["partitions"] == 2
    assert topic["segments"] == sum(len(s) for s in t.segments.values())
    details = {p["partition"]: p for p in topic["partition_details"]}
    for p in range(2):
        assert details[p]["log_start_offset"] == 0
        assert details[p]["next_offset"] == max(t.remote[p]) + 1
    assert details[0]["producer_state_restored"] and not details[1]["producer_state_restored"]

    config = load_broker_config(env.config())
    storage = OfflineBrokerStorage.of_broker(config)  # what the broker's start loads
    try:
        info = storage.registry.get(t.topic)
        assert info is not None
        assert (info.topic_id, info.partitions, dict(info.configs)) == (
            t.topic_id, 2, t.configs,
        )  # fmt: skip
        assert info.leader_epochs == (0, 0)
        for p in range(2):
            plog = storage.log_manager.get_log(t.topic, p)
            assert plog is not None
            end = max(t.remote[p]) + 1
            assert (plog.log_start_offset, plog.local_log_start_offset) == (0, end)
            assert (plog.log_end_offset, plog.high_watermark) == (end, end)
            assert [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()] == [
                (0, 0)
            ]
        producer = storage.log_manager.get_log(t.topic, 0).producer_state.last_entry(PRODUCER_ID)
        assert producer is not None
        assert producer.last_seq == max(t.remote[0]) - min(t.remote[0])  # one record per seq
        assert storage.registry.allocate_producer_id() > PRODUCER_ID
    finally:
        storage.close()
    restored = metadata_of(env.new_dir)
    for p in range(2):
        (tp,) = [tp for tp in restored if tp.partition == p]
        got = {(md.segment_id, md.start_offset, md.end_offset, md.state) for md in restored[tp]}
        want = {(md.segment_id, md.start_offset, md.end_offset, S.COPY_SEGMENT_FINISHED)
                for md in t.segments[p]}  # fmt: skip
        assert got == want
    # The restored storage and the bucket agree.
    rsm_config = env.root / "rsm.properties"
    rsm_config.write_text("".join(f"{k}={v}\n" for k, v in env.props.items()))
    assert main(["metadata", "verify", "--log-dirs", str(env.new_dir),
                 "--rsm-config", str(rsm_config)]) == 0  # fmt: skip


def test_a_topic_that_exists_is_refused_by_name(env: Env, capsys) -> None:
    assert restore(env, capsys=capsys)[0] == 0
    code, _, err = restore(env, capsys=capsys)
    assert code == 1 and f"topic {env.topic.topic} exists" in err


def test_a_running_broker_is_refused(env: Env, capsys) -> None:
    env.new_dir.mkdir()
    fd = os.open(env.new_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, _, err = restore(env, capsys=capsys)
    finally:
        os.close(fd)
    assert code == 1 and "locked" in err and "stopped" in err
    assert TopicRegistry(env.new_dir, {}).get(env.topic.topic) is None


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"remote.log.storage.system.enable": "false"}, "remote.log.storage.system.enable"),
        ({"remote.log.metadata.manager.class.name": "x.Y"}, "remote.log.metadata.manager"),
    ],
)
def test_a_broker_config_that_would_not_serve_it_is_refused(
    env: Env, capsys, overrides: dict[str, str], named: str
) -> None:
    code, _, err = restore(env, capsys=capsys, config=env.config(**overrides))
    assert code == 1 and named in err


def test_a_topic_the_bucket_does_not_hold_is_refused(env: Env, capsys) -> None:
    code, _, err = restore(env, "--topic", "ord", capsys=capsys)
    assert code == 1 and "topic ord: nothing under" in err


def test_usage_errors(env: Env, capsys) -> None:
    code, _, _ = restore(env, "--topic", "orders", "--topic", "orders", capsys=capsys)
    assert code == 2
    code, _, _ = restore(env, "--topic-config", "novalue", capsys=capsys)
    assert code == 2


def test_a_bucket_without_topic_manifests_needs_the_partition_count(env: Env, capsys) -> None:
    (manifest,) = env.bucket.rglob("topic-manifest.json")
    manifest.unlink()
    code, _, err = restore(env, capsys=capsys)
    assert code == 1 and "no topic manifest" in err and "--partitions" in err
    code, doc, err = restore(
        env, "--partitions", "3", "--topic-config", "retention.ms=86400000", capsys=capsys
    )
    assert code == 0, err
    (topic,) = doc["topics"]
    assert not topic["from_manifest"] and topic["partitions"] == 3
    assert topic["configs"] == {"retention.ms": "86400000", "remote.storage.enable": "true"}
    assert [p["segments"] > 0 for p in topic["partition_details"]] == [True, True, False]


def test_a_diverged_branch_is_left_out_and_verify_then_names_it(tmp_path: Path, capsys) -> None:
    props = local_rsm_props(tmp_path / "bucket")
    writer = TierWriter(tmp_path, props, tmp_path / "lost-broker")
    try:
        branches = write_diverged(writer)
    finally:
        writer.close()
    env = Env(tmp_path, tmp_path / "bucket", props, None, tmp_path / "new-broker")  # type: ignore[arg-type]
    code, doc, err = restore(env, "--topic", branches.tp.topic, capsys=capsys)
    assert code == 0, err
    (detail,) = doc["topics"][0]["partition_details"]
    assert detail["left_out"] == len(branches.diverged)
    assert detail["next_offset"] == max(branches.canonical) + 1 and detail["latest_epoch"] == 1
    restored = metadata_of(env.new_dir)[branches.tp]
    assert not {md.segment_id for md in restored} & {md.segment_id for md in branches.diverged}
    storage = OfflineBrokerStorage.of_broker(load_broker_config(env.config()))
    try:
        plog = storage.log_manager.get_log(branches.tp.topic, 0)
        assert [(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries()] == [
            (0, 0),
            (1, 30),
        ]
        assert storage.registry.get(branches.tp.topic).leader_epochs == (1,)
    finally:
        storage.close()
    rsm_config = tmp_path / "rsm.properties"
    rsm_config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    verify = ["metadata", "verify", "--log-dirs", str(env.new_dir), "--rsm-config",
              str(rsm_config), "--grace-period", "0", "--json"]  # fmt: skip
    assert main(verify) == 1
    orphans = {f["key"] for f in json.loads(capsys.readouterr().out)["findings"]}
    diverged_ids = {uuid_to_base64(md.segment_id) for md in branches.diverged}
    assert orphans and all(any(i in key for i in diverged_ids) for key in orphans)
    assert main([*verify, "--repair", "--yes"]) == 0
    capsys.readouterr()
    assert main(verify) == 0


def test_a_restore_cut_short_before_the_commit_runs_again(
    env: Env, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_create = TopicRegistry.create

    def crash(self: TopicRegistry, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == env.topic.topic and not kwargs.get("validate_only"):
            raise KeyboardInterrupt  # killed just before the topic is registered
        return real_create(self, name, *args, **kwargs)

    monkeypatch.setattr(TopicRegistry, "create", crash)
    code, _, _ = restore(env, capsys=capsys)
    assert code == 130
    monkeypatch.setattr(TopicRegistry, "create", real_create)
    # The half-restored partitions are not a topic the broker would serve or adopt.
    assert TopicRegistry(env.new_dir, {}).get(env.topic.topic) is None
    assert not any(env.new_dir.glob(f"{env.topic.topic}-*/partition.metadata"))
    code, doc, err = restore(env, capsys=capsys)
    assert code == 0, err
    restored = metadata_of(env.new_dir)
    assert sum(len(v) for v in restored.values()) == doc["topics"][0]["segments"]
    assert all(md.state == S.COPY_SEGMENT_FINISHED for v in restored.values() for md in v)
    storage = OfflineBrokerStorage.of_broker(load_broker_config(env.config()))
    try:
        plog = storage.log_manager.get_log(env.topic.topic, 0)
        end = max(env.topic.remote[0]) + 1
        assert (plog.log_start_offset, plog.log_end_offset) == (0, end)
        assert plog.producer_state.last_entry(PRODUCER_ID) is not None
    finally:
        storage.close()


def test_several_topics_in_one_run(tmp_path: Path, capsys) -> None:
    props = local_rsm_props(tmp_path / "bucket")
    writer = TierWriter(tmp_path, props, tmp_path / "lost-broker")
    try:
        a = write_tiered_topic(writer, "alpha", partitions=1)
        b = write_tiered_topic(writer, "alpha-beta", partitions=3)  # a name extending the other
    finally:
        writer.close()
    env = Env(tmp_path, tmp_path / "bucket", props, a, tmp_path / "new-broker")
    code, doc, err = restore(env, "--topic", "alpha", "--topic", "alpha-beta", capsys=capsys)
    assert code == 0, err
    got = {t["topic"]: (t["topic_id"], t["partitions"]) for t in doc["topics"]}
    assert got == {
        "alpha": (uuid_to_base64(a.topic_id), 1),
        "alpha-beta": (uuid_to_base64(b.topic_id), 3),
    }
