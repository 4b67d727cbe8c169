"""The RLMM contract (``rlmm_contract.py``) against TopicBasedRemoteLogMetadataManager over an
in-memory metadata topic, without and with snapshot files in a log dir.

The same contract runs over a real broker's ``__remote_log_metadata`` in
``test_kafka_client.py``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rlmm.manager import (
    LOG_DIR_KEY,
    NUM_PARTITIONS_KEY,
    SNAPSHOT_INTERVAL_KEY,
    TopicBasedRemoteLogMetadataManager,
)
from tests.support.memory_metadata import MemoryTopic, manager

from .rlmm_contract import MakeRlmm, RemoteLogMetadataManagerContract


class TestTopicBasedInMemory(RemoteLogMetadataManagerContract):
    @pytest.fixture
    def make_rlmm(self) -> MakeRlmm:
        topic = MemoryTopic()
        return lambda: manager(topic)


class TestTopicBasedWithSnapshots(RemoteLogMetadataManagerContract):
    """Every instance has its own log dir (as every broker has), writes snapshot files there
    as often as it can, and loads them when a partition is assigned again."""

    @pytest.fixture
    def make_rlmm(self, tmp_path: Path) -> MakeRlmm:
        topic = MemoryTopic()
        count = itertools.count()

        def make() -> TopicBasedRemoteLogMetadataManager:
            m = TopicBasedRemoteLogMetadataManager(topic)
            log_dir = tmp_path / f"broker-{next(count)}"
            m.configure(
                {NUM_PARTITIONS_KEY: "5", LOG_DIR_KEY: str(log_dir), SNAPSHOT_INTERVAL_KEY: "0"}
            )
            return m

        return make
