"""A TopicBasedRemoteLogMetadataManager whose metadata topic is shared in memory by every
broker of one process (``rlmm.config.shared.topic`` names it), for in-process clusters.

In a real cluster the brokers share ``__remote_log_metadata`` through replication; here the
test brokers share one ``MemoryTopic`` instead, so that the test exercises the managers'
own rules (readiness, authorship, leadership changes) without a replicated metadata topic.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.topic_client import MetadataRecord, MetadataTopicClient
from tests.support.memory_metadata import MemoryTopic

SHARED_TOPIC_KEY = "shared.topic"
CLASS_NAME = "tests.support.shared_rlmm.SharedTopicRLMM"

_topics: dict[str, MemoryTopic] = {}
_lock = threading.Lock()


def shared_topic(name: str) -> MemoryTopic:
    """The metadata topic every SharedTopicRLMM configured with ``name`` uses."""
    with _lock:
        topic = _topics.get(name)
        if topic is None:
            topic = _topics[name] = MemoryTopic()
        return topic


class _SharedClient:
    """The shared topic, whose ``close`` leaves it open for the other brokers."""

    def __init__(self, topic: MemoryTopic) -> None:
        self.topic = topic

    def ensure_topic(self, num_partitions: int) -> None:
        self.topic.ensure_topic(num_partitions)

    def partition_count(self) -> int:
        return self.topic.partition_count()

    def append(self, partition: int, value: bytes, *, durable: bool = True) -> int:
        return self.topic.append(partition, value, durable=durable)

    def read(self, partition: int, start_offset: int, max_records: int) -> list[MetadataRecord]:
        return self.topic.read(partition, start_offset, max_records)

    def end_offset(self, partition: int) -> int:
        return self.topic.end_offset(partition)

    def close(self) -> None:
        pass


class SharedTopicRLMM(TopicBasedRemoteLogMetadataManager):
    """Ignores the broker's in-process client: reads and writes the shared topic."""

    def attach_client(self, client: MetadataTopicClient) -> None:
        pass

    def configure(self, configs: Mapping[str, str]) -> None:
        self.client = _SharedClient(shared_topic(configs[SHARED_TOPIC_KEY]))
        super().configure(configs)
