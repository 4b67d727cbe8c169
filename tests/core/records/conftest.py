"""Both record decoders: the compiled one (core.records._native) and the pure-Python one.

Test modules that decode records use the ``decoder`` fixture (``pytestmark``), so each of
their tests runs once per implementation. Under TIERLOG_PURE_PYTHON=1 (a platform without
a C compiler) only the pure-Python one exists and runs; otherwise the compiled module must
have been built (``make native``): ``test_native_decoder`` fails if it was not.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.records import native

_BUILT = native.load()
IMPLEMENTATIONS = ["pure-python"] if _BUILT is None else ["compiled", "pure-python"]


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test with one decoder: ``native.COMPILED`` set, or None for pure Python."""
    saved = native.COMPILED
    native.COMPILED = _BUILT if request.param == "compiled" else None
    try:
        yield request.param
    finally:
        native.COMPILED = saved
