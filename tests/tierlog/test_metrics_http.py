"""The Prometheus collector: Kafka's tiering metric names, topic/partition labels, removal."""

from __future__ import annotations

import uuid

from prometheus_client import CollectorRegistry, generate_latest

from tiered.api import TopicIdPartition
from tiered.metrics import (
    REMOTE_COPY_BYTES,
    REMOTE_COPY_LAG_SEGMENTS,
    REMOTE_FETCH_ERRORS,
    TieringMetrics,
)
from tierlog.metrics_http import TieringCollector


def scrape(metrics: TieringMetrics | None) -> str:
    registry = CollectorRegistry()
    registry.register(TieringCollector(lambda: metrics))
    return generate_latest(registry).decode()


def test_counters_and_gauges_per_partition_under_kafkas_names():
    metrics = TieringMetrics()
    a = TopicIdPartition(uuid.uuid4(), "orders", 0)
    b = TopicIdPartition(uuid.uuid4(), "orders", 1)
    metrics.inc(REMOTE_COPY_BYTES, a, 1000)
    metrics.inc(REMOTE_COPY_BYTES, a, 24)
    metrics.inc(REMOTE_FETCH_ERRORS, b)
    metrics.set(REMOTE_COPY_LAG_SEGMENTS, b, 3)
    text = scrape(metrics)
    name = "kafka_server_brokertopicmetrics_"
    assert f'{name}remotecopybytespersec_total{{partition="0",topic="orders"}} 1024.0' in text
    assert f'{name}remotefetcherrorspersec_total{{partition="1",topic="orders"}} 1.0' in text
    assert f'{name}remotecopylagsegments{{partition="1",topic="orders"}} 3.0' in text
    assert "# TYPE kafka_server_brokertopicmetrics_remotecopybytespersec_total counter" in text
    metrics.remove(a)
    assert 'partition="0"' not in scrape(metrics)


def test_no_remote_tier_exports_nothing():
    assert "kafka_server" not in scrape(None)
