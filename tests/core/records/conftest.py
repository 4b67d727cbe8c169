"""Test modules here that decode records use the ``decoder`` fixture (``pytestmark``), so
each of their tests runs once with each record decoder (tests/support/record_decoders.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.record_decoders import IMPLEMENTATIONS, using


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    with using(request.param):
        yield request.param
