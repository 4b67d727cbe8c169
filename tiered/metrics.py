"""The tiering metrics: Kafka's tiered-storage metric names, per partition and broker-wide.

Counters are monotonic totals (an exporter turns them into rates, as Kafka's meters are);
gauges are the current value of one partition, summed over partitions for the broker.
``tierlog/metrics_http.py`` serves them in the Prometheus text format.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from tiered.api import TopicIdPartition

# Kafka's tiered-storage metric names (BrokerTopicStats / RemoteStorageMetrics).
REMOTE_COPY_BYTES = "RemoteCopyBytesPerSec"
REMOTE_COPY_REQUESTS = "RemoteCopyRequestsPerSec"
REMOTE_COPY_ERRORS = "RemoteCopyErrorsPerSec"
REMOTE_FETCH_BYTES = "RemoteFetchBytesPerSec"
REMOTE_FETCH_REQUESTS = "RemoteFetchRequestsPerSec"
REMOTE_FETCH_ERRORS = "RemoteFetchErrorsPerSec"
REMOTE_DELETE_REQUESTS = "RemoteDeleteRequestsPerSec"
REMOTE_DELETE_ERRORS = "RemoteDeleteErrorsPerSec"
REMOTE_COPY_LAG_BYTES = "RemoteCopyLagBytes"
REMOTE_COPY_LAG_SEGMENTS = "RemoteCopyLagSegments"
REMOTE_DELETE_LAG_BYTES = "RemoteDeleteLagBytes"
REMOTE_LOG_SIZE_BYTES = "RemoteLogSizeBytes"
REMOTE_LOG_METADATA_COUNT = "RemoteLogMetadataCount"

COUNTERS = (
    REMOTE_COPY_BYTES,
    REMOTE_COPY_REQUESTS,
    REMOTE_COPY_ERRORS,
    REMOTE_FETCH_BYTES,
    REMOTE_FETCH_REQUESTS,
    REMOTE_FETCH_ERRORS,
    REMOTE_DELETE_REQUESTS,
    REMOTE_DELETE_ERRORS,
)
GAUGES = (
    REMOTE_COPY_LAG_BYTES,
    REMOTE_COPY_LAG_SEGMENTS,
    REMOTE_DELETE_LAG_BYTES,
    REMOTE_LOG_SIZE_BYTES,
    REMOTE_LOG_METADATA_COUNT,
)


class TieringMetrics:
    """Counters (monotonic totals; an exporter turns them into rates) and gauges, per
    partition and broker-wide. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.broker: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.partitions: defaultdict[TopicIdPartition, dict[str, int]] = defaultdict(dict)

    def inc(self, name: str, tp: TopicIdPartition | None, n: int = 1) -> None:
        with self._lock:
            self.broker[name] = self.broker.get(name, 0) + n
            if tp is not None:
                per = self.partitions[tp]
                per[name] = per.get(name, 0) + n

    def set(self, name: str, tp: TopicIdPartition, value: int) -> None:
        with self._lock:
            self.partitions[tp][name] = value

    def get(self, name: str, tp: TopicIdPartition | None = None) -> int:
        with self._lock:
            if tp is None:
                if name in GAUGES:
                    return sum(p.get(name, 0) for p in self.partitions.values())
                return self.broker.get(name, 0)
            return self.partitions.get(tp, {}).get(name, 0)

    def remove(self, tp: TopicIdPartition) -> None:
        with self._lock:
            self.partitions.pop(tp, None)

    def snapshot(self) -> tuple[dict[str, int], dict[TopicIdPartition, dict[str, int]]]:
        """A consistent copy: broker-wide counters, and every partition's values."""
        with self._lock:
            return dict(self.broker), {tp: dict(v) for tp, v in self.partitions.items()}
