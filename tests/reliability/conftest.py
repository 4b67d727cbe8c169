"""Fixtures of the reliability suites: an S3 endpoint on 127.0.0.1, a bucket per test, and
broker processes that are SIGKILLed at the end if still running.

The suites run short in ``make test``; ``make soak`` sets ``TIERLOG_SOAK=1`` for the long
versions (more kills, longer load) whose figures docs/RELIABILITY.md reports.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_process import BrokerProcess
from s3_harness import Bucket, launcher


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[Any]:
    endpoint = launcher.start_s3_endpoint()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def bucket(s3_endpoint: Any) -> Iterator[Bucket]:
    name = f"tierlog-rel-{uuid.uuid4().hex[:10]}"
    s3_endpoint.create_bucket(name)
    client = s3_endpoint.client()
    yield Bucket(client, name)
    client.close()


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for b in started:
        b.kill()
