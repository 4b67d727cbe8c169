"""The Prometheus endpoint: the tiering metrics under Kafka's names, per topic and partition.

Kafka exports its tiered-storage metrics over JMX as meters and gauges of
``kafka.server:type=BrokerTopicMetrics`` (``name=RemoteCopyBytesPerSec``, ..., with ``topic``
and ``partition`` tags for the per-partition ones). Here they are read from the
RemoteLogManager's ``TieringMetrics`` at scrape time (no second bookkeeping) and named the
way the Prometheus JMX exporter names such beans, lower-cased:

- a meter ``RemoteCopyBytesPerSec`` (a count and its rates in JMX) becomes the counter
  ``kafka_server_brokertopicmetrics_remotecopybytespersec_total``; Prometheus computes the
  rate (``rate(...[1m])``);
- a gauge ``RemoteCopyLagBytes`` becomes ``kafka_server_brokertopicmetrics_remotecopylagbytes``.

Every series carries ``topic`` and ``partition`` labels (Kafka's broker-wide beans are
``sum(...)`` over them). A deleted partition's series disappear with it.
Enabled with ``metrics.prometheus.port`` (-1: off, 0: any free port).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tiered.metrics import COUNTERS, GAUGES, TieringMetrics

log = logging.getLogger(__name__)

PREFIX = "kafka_server_brokertopicmetrics_"


def metric_name(kafka_name: str) -> str:
    """``RemoteCopyBytesPerSec`` -> ``kafka_server_brokertopicmetrics_remotecopybytespersec``."""
    return PREFIX + kafka_name.lower()


class TieringCollector(Collector):
    """Reads ``TieringMetrics`` at each scrape. ``source`` returns the current metrics, or
    None while there is no remote tier."""

    def __init__(self, source: Callable[[], TieringMetrics | None]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        metrics = self.source()
        if metrics is None:
            return
        _, partitions = metrics.snapshot()
        labels = ["topic", "partition"]
        for name in COUNTERS:
            family = CounterMetricFamily(
                metric_name(name), f"Kafka's {name}: a running total", labels=labels
            )
            for tp, values in partitions.items():
                family.add_metric([tp.topic, str(tp.partition)], values.get(name, 0))
            yield family
        for name in GAUGES:
            gauge = GaugeMetricFamily(metric_name(name), f"Kafka's {name}", labels=labels)
            for tp, values in partitions.items():
                if name in values:
                    gauge.add_metric([tp.topic, str(tp.partition)], values[name])
            yield gauge


class PrometheusEndpoint:
    """An HTTP server on a daemon thread serving ``/metrics``."""

    def __init__(self, host: str, port: int, source: Callable[[], TieringMetrics | None]):
        self.registry = CollectorRegistry()
        self.registry.register(TieringCollector(source))
        self._server: Any = None
        self._thread: Any = None
        self.host, self.port = host, port

    def start(self) -> int:
        """Bind and serve; returns the bound port.

        Raises:
            OSError: the address cannot be bound.
        """
        self._server, self._thread = start_http_server(
            self.port, addr=self.host, registry=self.registry
        )
        self.port = self._server.server_port
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
