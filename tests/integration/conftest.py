"""Fixtures for integration tests: real broker processes on 127.0.0.1 (ZooKeeper and S3 come
from tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, start_broker


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
