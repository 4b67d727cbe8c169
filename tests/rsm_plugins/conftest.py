"""Fixtures shared by the RSM plugin tests: real segment files (see segment_files.py); the S3
endpoint is tests/conftest.py's."""

from __future__ import annotations

import pytest

from .segment_files import SegmentFiles, write_segments


@pytest.fixture(scope="session")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[SegmentFiles]:
    """Three rolled segments; the first has a transaction index."""
    return write_segments(tmp_path_factory.mktemp("segments"))
