"""The broker's topic manifests (``tierlog.topic_manifests``): written for tiered topics,
rewritten when configs change, deleted with the topic, retried after a failure."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.server.topics import TopicInfo
from rsm_plugins.local import LocalDirRemoteStorageManager
from rsm_plugins.store import ObjectStore
from tiered.api import RetriableRemoteStorageError
from tierlog.topic_manifests import TopicManifestPublisher


class Registry:
    """The registry's view the publisher reads: topic id -> current entry."""

    def __init__(self) -> None:
        self.topics: dict[uuid.UUID, TopicInfo] = {}

    def lookup(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.topics.get(topic_id)

    def put(self, info: TopicInfo) -> TopicInfo:
        self.topics[info.topic_id] = info
        return info


def tiered(info: TopicInfo) -> bool:
    return info.configs.get("remote.storage.enable") == "true"


class FailingPuts:
    """Wraps the plugin's store: the next ``fail`` puts raise a retriable error."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.fail = 0
        self.puts = 0
        self.lock = threading.Lock()

    def put_bytes(self, key: str, data: bytes) -> None:
        with self.lock:
            self.puts += 1
            if self.fail:
                self.fail -= 1
                raise RetriableRemoteStorageError("503 SlowDown")
        self.inner.put_bytes(key, data)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@pytest.fixture
def rsm(tmp_path: Path) -> Iterator[LocalDirRemoteStorageManager]:
    plugin = LocalDirRemoteStorageManager()
    plugin.configure({"storage.root": str(tmp_path / "bucket")})
    plugin._store_ = FailingPuts(plugin.store)  # type: ignore[assignment]
    yield plugin
    plugin.close()


def info(name: str = "orders", partitions: int = 3, **configs: str) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), partitions, {"remote.storage.enable": "true", **configs})


def test_a_tiered_topic_gets_its_manifest_and_a_config_change_rewrites_it(rsm) -> None:
    registry = Registry()
    publisher = TopicManifestPublisher(rsm, registry.lookup, tiered, 7, clock=lambda: 1234)
    try:
        topic = registry.put(info(**{"retention.ms": "-1"}))
        publisher.topic_changed(topic)
        manifest = rsm.read_topic_manifest(topic.name, topic.topic_id)
        assert manifest is not None
        assert (manifest.partitions, dict(manifest.configs), manifest.broker_id) == (
            3, {"remote.storage.enable": "true", "retention.ms": "-1"}, 7,
        )  # fmt: skip
        puts = rsm.store.puts
        publisher.topic_changed(topic)  # nothing changed: no write
        assert rsm.store.puts == puts
        configs = {**topic.configs, "retention.ms": "60000"}
        registry.put(TopicInfo(topic.name, topic.topic_id, 3, configs))
        publisher.topic_changed(topic)  # the event's snapshot is stale: the registry wins
        manifest = rsm.read_topic_manifest(topic.name, topic.topic_id)
        assert manifest is not None and manifest.configs["retention.ms"] == "60000"
    finally:
        publisher.close()


def test_a_topic_that_is_not_tiered_gets_none(rsm) -> None:
    registry = Registry()
    publisher = TopicManifestPublisher(rsm, registry.lookup, tiered, 1)
    try:
        topic = registry.put(TopicInfo("plain", uuid.uuid4(), 1, {}))
        publisher.topic_changed(topic)
        assert rsm.read_topic_manifest(topic.name, topic.topic_id) is None
    finally:
        publisher.close()


def test_a_deleted_topic_loses_its_manifest(rsm) -> None:
    registry = Registry()
    publisher = TopicManifestPublisher(rsm, registry.lookup, tiered, 1)
    try:
        topic = registry.put(info())
        publisher.topic_changed(topic)
        del registry.topics[topic.topic_id]
        publisher.topic_deleted(topic)
        assert rsm.read_topic_manifest(topic.name, topic.topic_id) is None
        publisher.topic_changed(topic)  # a late creation event: the topic is gone, no write
        assert rsm.read_topic_manifest(topic.name, topic.topic_id) is None
    finally:
        publisher.close()


def test_failed_writes_are_retried_in_the_background(rsm) -> None:
    registry = Registry()
    publisher = TopicManifestPublisher(rsm, registry.lookup, tiered, 1, retry_ms=20)
    try:
        rsm.store.fail = 3
        topics = [registry.put(info(f"t{i}")) for i in range(2)]
        publisher.publish_all(topics)  # start-up: in the background
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
            rsm.read_topic_manifest(t.name, t.topic_id) for t in topics
        ):
            time.sleep(0.02)
        assert all(rsm.read_topic_manifest(t.name, t.topic_id) for t in topics)
        assert rsm.store.fail == 0
    finally:
        publisher.close()
