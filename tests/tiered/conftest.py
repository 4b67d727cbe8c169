"""Fixtures for the tiering tests (see harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .harness import Env, MemoryRSM, tiered_config


@pytest.fixture
def memory_rsm() -> MemoryRSM:
    return MemoryRSM()


@pytest.fixture
def env(tmp_path, memory_rsm) -> Iterator[Env]:
    e = Env(tmp_path, memory_rsm, tiered_config())
    yield e
    e.close()
