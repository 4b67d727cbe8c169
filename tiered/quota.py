"""Byte-rate quotas for remote copies and fetches (KIP-956), and the tiering metrics.

The quota is a token bucket in "debt" form: bytes are recorded after they move, and a new
transfer is allowed while the bucket is not in debt. One transfer may therefore overshoot
by its own size, as Kafka's quota managers do, and a segment larger than the rate still
moves (after the debt of the previous one is paid).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

from tiered.api import TopicIdPartition


class TokenBucket:
    """``rate`` bytes per second with a burst of one second's worth."""

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = float(rate)
        self._clock = clock
        self._tokens = float(rate)
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def is_exceeded(self) -> bool:
        """True while earlier transfers have used more than the rate allows."""
        with self._lock:
            self._refill()
            return self._tokens < 0

    def record(self, nbytes: int) -> None:
        with self._lock:
            self._refill()
            self._tokens -= nbytes

    def wait_time_s(self) -> float:
        """Seconds until the bucket is out of debt (0 when it is not in debt)."""
        with self._lock:
            self._refill()
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


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
