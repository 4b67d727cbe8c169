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

Client quotas (``QuotaCollector``): Kafka's ``kafka.server:type={Produce,Fetch,Request},
user=<user>,client-id=<client-id>`` metrics, one series per quota sensor in use, labelled
``user`` and ``client_id`` (``""`` for a level the quota does not name):
``kafka_server_produce_byte_rate``, ``kafka_server_fetch_byte_rate`` (bytes per second over
the quota's samples), ``kafka_server_request_request_time`` (percent of the event loop) and
``kafka_server_{produce,fetch,request}_throttle_time`` (mean throttle time in ms).

Replication throttles (``ReplicationCollector``): ``kafka_server_leaderreplication_byte_rate``
and ``kafka_server_followerreplication_byte_rate`` (Kafka's LeaderReplication and
FollowerReplication byte-rate), and the counters
``kafka_server_{leader,follower}replication_throttled_partitions_total``.

Enabled with ``metrics.prometheus.port`` (-1: off, 0: any free port).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.server.quotas import QuotaMetric, QuotaType
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


# Kafka's name of the rate attribute of each quota type's sensors.
_RATE_NAMES = {
    QuotaType.PRODUCE: "byte_rate",
    QuotaType.FETCH: "byte_rate",
    QuotaType.REQUEST: "request_time",
}


class QuotaCollector(Collector):
    """Reads the client quota sensors at each scrape (``ClientQuotas.metrics``)."""

    def __init__(self, source: Callable[[], Sequence[QuotaMetric]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        metrics = self.source()
        labels = ["user", "client_id"]
        for quota_type in QuotaType:
            prefix = f"kafka_server_{quota_type.value.lower()}_"
            rate = GaugeMetricFamily(
                prefix + _RATE_NAMES[quota_type],
                f"Kafka's {quota_type.value} {_RATE_NAMES[quota_type].replace('_', '-')} "
                "per user/client-id",
                labels=labels,
            )
            throttle = GaugeMetricFamily(
                prefix + "throttle_time",
                f"Kafka's {quota_type.value} throttle-time: mean throttle in ms",
                labels=labels,
            )
            for m in metrics:
                if m.quota_type is quota_type:
                    rate.add_metric([m.user, m.client_id], m.rate)
                    throttle.add_metric([m.user, m.client_id], m.throttle_time_avg_ms)
            yield rate
            yield throttle


class ReplicationCollector(Collector):
    """The replication throttles (``ReplicaManager.leader_quota`` / ``follower_quota``):
    Kafka's ``kafka.server:type=LeaderReplication,name=byte-rate`` and
    ``type=FollowerReplication`` as ``kafka_server_{leader,follower}replication_byte_rate``
    (bytes/s of throttled replicas over the throttle's samples), and tierlog's count of
    partition reads the throttle answered empty (leader) or left out (follower),
    ``kafka_server_{leader,follower}replication_throttled_partitions_total``."""

    def __init__(self, source: Callable[[], Sequence[tuple[str, float, int]]]) -> None:
        self.source = source  # (LeaderReplication | FollowerReplication, rate, throttled)

    def collect(self) -> Iterator[Metric]:
        for kind, rate, throttled in self.source():
            prefix = f"kafka_server_{kind.lower()}_"
            gauge = GaugeMetricFamily(prefix + "byte_rate", f"Kafka's {kind} byte-rate")
            gauge.add_metric([], rate)
            yield gauge
            counter = CounterMetricFamily(
                prefix + "throttled_partitions",
                f"Partition reads the {kind} throttle held back",
            )
            counter.add_metric([], throttled)
            yield counter


class PrometheusEndpoint:
    """An HTTP server on a daemon thread serving ``/metrics``."""

    def __init__(
        self,
        host: str,
        port: int,
        source: Callable[[], TieringMetrics | None],
        collectors: Sequence[Collector] = (),
    ):
        self.registry = CollectorRegistry()
        self.registry.register(TieringCollector(source))
        for collector in collectors:
            self.registry.register(collector)
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
