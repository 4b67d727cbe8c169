"""The Prometheus endpoint of a real tiered broker, and the structured tiering log lines.

After segments are copied to the remote tier (a local directory), a scrape of /metrics shows
RemoteCopyBytesPerSec for the partition equal to the bytes of the segments the remote log
metadata lists, RemoteLogMetadataCount equal to their number, and the broker's log has one
``event=remote_copy`` line per copied segment.
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.s3_harness import broker_log_lines, metadata_segments
from tests.support.waiting import wait_until

from .test_tiering import TOPIC, create_and_fill, settings

NAME = "kafka_server_brokertopicmetrics_"


def scrape(url: str) -> dict[str, float]:
    """Sample name with labels -> value, for this test's topic."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(NAME) and f'topic="{TOPIC}"' in line:
            series, value = line.rsplit(" ", 1)
            out[series.split("{")[0]] = float(value)
    return out


def test_prometheus_endpoint_and_event_lines_match_the_remote_metadata(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = start_broker(tmp_path / "b", {**settings(tmp_path), "metrics.prometheus.port": "0"})
    brokers.append(broker)
    (line,) = broker_log_lines(broker, "Prometheus metrics on")
    url = re.search(r"(http://\S+/metrics)", line).group(1)
    create_and_fill(broker)

    def copied() -> list[dict]:
        return metadata_segments(broker.bootstrap, TOPIC, "COPY_SEGMENT_FINISHED")

    wait_until(lambda: len(copied()) >= 3, 60, 0.5, what="segments copied")

    def consistent() -> bool:
        segments = copied()
        metrics = scrape(url)
        return (
            metrics.get(NAME + "remotecopybytespersec_total")
            == sum(s["segment_size_in_bytes"] for s in segments)
            and metrics.get(NAME + "remotelogmetadatacount") == len(segments)
            and len(broker_log_lines(broker, "event=remote_copy ")) == len(segments)
        )

    # Copies may still be running: wait for a moment when all three views agree.
    wait_until(consistent, 60, 0.5, what="metrics, metadata and log lines agree")
    (first, *_) = broker_log_lines(broker, "event=remote_copy ")
    assert f"topic={TOPIC} partition=0 segment_id=" in first and " bytes=" in first
