"""Which restore path the RLMM cache runs: the compiled one (``rlmm._native``) or pure Python.

The compiled module is built from ``_native.pyx`` by ``make native`` or ``pip install``; it is
used when it imports, unless TIERLOG_PURE_PYTHON=1 (as for ``core.records.native``). Callers
read ``COMPILED`` at each call, so that the tests can switch implementations by setting it.
"""

from __future__ import annotations

from types import ModuleType

from core.records.native import load_compiled


def load() -> ModuleType | None:
    """The compiled module, or None when forced off or not built."""
    return load_compiled("rlmm._native")


COMPILED: ModuleType | None = load()
"""The compiled restore path this process uses, or None for the pure-Python one."""
