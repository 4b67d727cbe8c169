"""Test modules here that decode records use the ``decoder`` fixture (``pytestmark``), so
each of their tests runs once with each record decoder (tests/support/record_decoders.py);
those that decompress use ``gzip_inflater`` too."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.records import codec
from core.records.codec import GZIP_INFLATERS
from tests.support.record_decoders import IMPLEMENTATIONS, using


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    with using(request.param):
        yield request.param


@pytest.fixture(scope="module", params=list(GZIP_INFLATERS))
def gzip_inflater(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each module that uses this runs with each gzip inflater: ISA-L (python-isal, a base
    dependency) and the standard library's zlib, the fallback without it."""
    saved = codec.gzip_inflater
    codec.gzip_inflater = GZIP_INFLATERS[request.param]
    try:
        yield request.param
    finally:
        codec.gzip_inflater = saved
