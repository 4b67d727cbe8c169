"""Which record decoder runs: the compiled one (``core.records._native``) or pure Python.

The compiled module is built from ``_native.pyx`` by ``make native`` or ``pip install``. It is
used when it imports; TIERLOG_PURE_PYTHON=1 in the environment forces the pure-Python decoder
(to compare, or to rule the extension out). Both decide the same format rules; the Python
one is the reference and words every error (see ``core.records.record``). The tests switch
between them by setting ``COMPILED`` (tests/support/record_decoders.py).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON_ENV = "TIERLOG_PURE_PYTHON"


def load_compiled(module: str) -> ModuleType | None:
    """The compiled module named ``module`` (e.g. ``core.records._native``), or None when
    TIERLOG_PURE_PYTHON=1 forces the pure-Python twins or the module was not built. Every
    compiled module of the package is loaded through this one rule."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def load() -> ModuleType | None:
    """The compiled decoder, or None when forced off or not built."""
    return load_compiled("core.records._native")


COMPILED: ModuleType | None = load()
"""The compiled decoder this process uses, or None for the pure-Python one."""


def implementation() -> str:
    """ "compiled" or "pure-python", for tools and benchmarks to report."""
    return "pure-python" if COMPILED is None else "compiled"
