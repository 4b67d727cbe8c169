"""Fixtures for the core.server tests: a real ZooKeeper (tests/integration/zookeeper_server.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
from zookeeper_server import (  # noqa: F401 - fixtures
    zk_chroot,
    zookeeper,
    zookeeper_factory,
    zookeeper_server,
)
