"""Fixtures for the tiering tests (see harness.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from harness import Env, MemoryRSM, tiered_config


@pytest.fixture
def memory_rsm() -> MemoryRSM:
    return MemoryRSM()


@pytest.fixture
def env(tmp_path, memory_rsm) -> Iterator[Env]:
    e = Env(tmp_path, memory_rsm, tiered_config())
    yield e
    e.close()
