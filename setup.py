"""Builds the compiled modules with Cython: the record decoder (core/records/_native.pyx),
the append steps (core/records/_append.pyx), the common case of a leader append
(core/log/_active_segment.pyx), the recovery walk (core/log/_recovery.pyx) and
the RLMM cache's restore path (rlmm/_native.pyx).

Everything else about the package is in pyproject.toml; setuptools reads both. Cython is a
build requirement there, so ``pip install .`` and ``pip install -e .`` compile the extension;
``make native`` builds it in place for runs from the source tree (PYTHONPATH).

Without a C compiler the build fails, unless TIERLOG_PURE_PYTHON=1 is set: then the
extensions are left out and the package runs their pure-Python twins.
"""

import os

from setuptools import Extension, setup

if os.environ.get("TIERLOG_PURE_PYTHON") == "1":
    ext_modules = []
else:
    from Cython.Build import cythonize

    ext_modules = cythonize(
        [
            Extension("core.records._native", ["core/records/_native.pyx"]),
            Extension("core.records._append", ["core/records/_append.pyx"]),
            Extension("core.log._recovery", ["core/log/_recovery.pyx"]),
            Extension("core.log._active_segment", ["core/log/_active_segment.pyx"]),
            Extension("rlmm._native", ["rlmm/_native.pyx"]),
        ],
        compiler_directives={"language_level": "3"},
    )

setup(ext_modules=ext_modules)
