"""Fixtures for integration tests: real broker processes and ZooKeeper on 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from broker_process import BrokerProcess, start_broker
from s3_harness import brokers, bucket, s3_endpoint  # noqa: F401 - shared fixtures
from zookeeper_server import (  # noqa: F401 - shared fixtures
    zk_chroot,
    zookeeper,
    zookeeper_factory,
    zookeeper_server,
)


@pytest.fixture
def broker(tmp_path: Path):
    """A running broker with auto topic creation, stopped cleanly after the test."""
    b = start_broker(tmp_path / "broker")
    yield b
    if b.proc.poll() is None:
        code = b.stop()
        assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"


@pytest.fixture
def broker_factory(tmp_path: Path):
    """Start brokers with settings; every one still running is killed at the end."""
    started: list[BrokerProcess] = []

    def factory(settings: dict[str, str] | None = None, name: str = "broker") -> BrokerProcess:
        b = start_broker(tmp_path / name, settings)
        started.append(b)
        return b

    yield factory
    for b in started:
        b.kill()
