"""Optional dependencies: the pip extras of tierlog, and the error that names the one to install.

A plain ``pip install tierlog`` runs a broker with the local-directory tier and the command
line tools. Everything heavier comes with an extra (see ``pyproject.toml``):

===========  ====================================  ========================================
extra        packages                              used by
===========  ====================================  ========================================
``s3``       boto3, s3fs, fsspec                   ``rsm_plugins.s3``; ``s3://`` URLs
``hdfs``     fsspec, hdfs-native, requests         ``rsm_plugins.fsspec``: ``hdfs://``,
                                                   ``webhdfs://``
``spark``    pyspark, pyarrow, fsspec              ``spark_jobs``, ``tierlog export``
``iceberg``  pyiceberg (SQL catalog on SQLite)     ``tierlog export --format iceberg``
``all``      all of the above
===========  ====================================  ========================================

A module that needs an extra imports it inside ``requires_extra``, so that a missing package
fails the import with a message naming the command that fixes it (as fsspec names the package
a protocol needs), not with a bare "No module named ...".
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator

DISTRIBUTION = "tierlog"


def install_command(extra: str) -> str:
    """The pip command that installs ``extra``, quoted for a POSIX shell."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class MissingExtraError(ModuleNotFoundError):
    """A package of an optional extra is not installed; the message says how to install it.

    A ``ModuleNotFoundError``, so code that falls back on a missing module still does.
    """

    def __init__(self, module: str, extra: str, needed_by: str) -> None:
        super().__init__(
            f"{needed_by} needs {module}, which is not installed: {install_command(extra)}",
            name=module,
        )
        self.extra = extra


@contextlib.contextmanager
def requires_extra(extra: str, needed_by: str) -> Iterator[None]:
    """Run the imports of the block, turning a missing module into ``MissingExtraError``.

    Args:
        extra: the pip extra that brings the modules imported in the block.
        needed_by: what needs them, for the message (e.g. "the S3 RemoteStorageManager").
    """
    try:
        yield
    except MissingExtraError:
        raise
    except ModuleNotFoundError as e:
        raise MissingExtraError(e.name or str(e), extra, needed_by) from e


def is_installed(module: str) -> bool:
    """Whether the top-level ``module`` can be imported (without importing it)."""
    return importlib.util.find_spec(module) is not None
