"""Fixtures shared by the RSM plugin tests: real segment files (see segment_files.py)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from segment_files import SegmentFiles, write_segments


@pytest.fixture(scope="session")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[SegmentFiles]:
    """Three rolled segments; the first has a transaction index."""
    return write_segments(tmp_path_factory.mktemp("segments"))


def _load_launcher() -> ModuleType:
    """localstack/launcher.py, loaded by path (the folder shares LocalStack's package name)."""
    path = Path(__file__).resolve().parents[2] / "localstack" / "launcher.py"
    spec = importlib.util.spec_from_file_location("tierlog_localstack_launcher", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


launcher = _load_launcher()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[Any]:
    """moto's server on 127.0.0.1, or the endpoint named by TIERLOG_S3_ENDPOINT."""
    endpoint = launcher.start_s3_endpoint()
    yield endpoint
    endpoint.stop()
