"""Running tests with each record decoder: compiled (core.records._native) and pure Python.

Under TIERLOG_PURE_PYTHON=1 (a platform without a C compiler) only the pure-Python one
exists; otherwise the compiled module must have been built (``make native``), and
tests/core/records/test_native_decoder.py fails if it was not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from core.records import native

BUILT = native.load()
IMPLEMENTATIONS = ["pure-python"] if BUILT is None else ["compiled", "pure-python"]


@contextmanager
def using(implementation: str) -> Iterator[None]:
    """Decode with ``implementation`` ("compiled" or "pure-python") inside the block."""
    saved = native.COMPILED
    native.COMPILED = BUILT if implementation == "compiled" else None
    try:
        yield
    finally:
        native.COMPILED = saved
