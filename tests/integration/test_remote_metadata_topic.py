"""The broker's remote tier creates __remote_log_metadata, and refuses a changed size."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.broker_process import restart, start_broker

TIERED = {
    "remote.log.storage.system.enable": "true",
    "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
}


def tiered(tmp_path) -> dict[str, str]:
    return {**TIERED, "rsm.config.storage.root": str(tmp_path / "bucket")}


def metadata_partitions(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20).topics
    return len(topics["__remote_log_metadata"].partitions)


def test_metadata_topic_created_at_start_and_kept_across_restarts(tmp_path):
    broker = start_broker(tmp_path / "b", tiered(tmp_path))
    try:
        assert metadata_partitions(broker.bootstrap) == 5
        assert broker.stop() == 0
        broker = restart(broker)
        assert metadata_partitions(broker.bootstrap) == 5
    finally:
        broker.kill()


def test_a_partition_count_mismatch_stops_start_up_naming_the_key(tmp_path):
    broker = start_broker(tmp_path / "b", tiered(tmp_path))
    assert broker.stop() == 0
    settings = dict(broker.settings)
    settings["rlmm.config.remote.log.metadata.topic.num.partitions"] = "7"
    args = [sys.executable, "-m", "tierlog", "broker", "start"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "listening on" not in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("tierlog: error:")
    assert "__remote_log_metadata has 5 partitions" in last
    assert "remote.log.metadata.topic.num.partitions=7" in last


@pytest.mark.parametrize("value", ["rlmm.nope.Missing", "tiered.api.TopicIdPartition"])
def test_an_unloadable_rlmm_class_stops_start_up(tmp_path, value):
    settings = {
        **TIERED,
        "remote.log.metadata.manager.class.name": value,
        "node.id": "1",
        "log.dirs": str(tmp_path / "d"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
    }
    args = [sys.executable, "-m", "tierlog", "broker", "start"]
    for key, v in settings.items():
        args += ["--set", f"{key}={v}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "remote.log.metadata.manager.class.name" in result.stderr.strip().splitlines()[-1]


def test_a_missing_rsm_setting_stops_start_up_naming_it(tmp_path):
    settings = {
        **TIERED,
        "node.id": "1",
        "log.dirs": str(tmp_path / "d"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
    }
    args = [sys.executable, "-m", "tierlog", "broker", "start"]
    for key, v in settings.items():
        args += ["--set", f"{key}={v}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "listening on" not in result.stdout
    assert "rsm.config.storage.root" in result.stderr.strip().splitlines()[-1]
