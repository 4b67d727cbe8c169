"""``FsspecRemoteStorageManager``: segments on any fsspec file system; the HDFS path.

Settings (``rsm.config.`` stripped):

* ``storage.url`` (required): the root, any fsspec URL: ``file:///var/tierlog/remote``,
  ``memory://tierlog``, ``s3://bucket/prefix`` (s3fs, the ``s3`` extra),
  ``webhdfs://namenode:9870/tierlog`` (fsspec's WebHDFS client over requests, no libhdfs),
  ``hdfs://namenode:8020/tierlog`` (hdfs-native, a native HDFS RPC client with no JVM; both
  with the ``hdfs`` extra). A URL whose client is not installed fails at configure time
  naming the pip command.
* ``storage.fsspec.options`` (tierlog's own): a JSON object of extra file-system options,
  e.g. ``{"user": "kafka"}`` for WebHDFS or ``{"endpoint_url": "http://127.0.0.1:4566"}``
  for s3fs. For ``hdfs://`` they are hdfs-native's Hadoop configuration, string values:
  it retries an unreachable NameNode as Hadoop does (``dfs.client.failover.max.attempts``
  15, with backoff: about three minutes before the broker's start-up fails on a closed
  port), and ``{"dfs.client.failover.max.attempts": "1"}`` makes that about a second.
* ``key.prefix``: see ``base``.

Writes: on file systems with folders and renames (file, WebHDFS, HDFS) an object is written to
a temp name beside its key and renamed over it; HDFS refuses a rename onto an existing file,
so a repeated copy deletes the old object first. On object stores (s3, gcs, azure, memory) a
write is already all-or-nothing and goes straight to the key. ``file://`` through fsspec
does not fsync; ``LocalDirRemoteStorageManager`` is the durable local choice.

What counts as missing: ``FileNotFoundError`` (fsspec's convention, which its WebHDFS client
raises for HDFS's FileNotFoundException). Builtin and ``requests`` connection errors and
timeouts are ``RetriableRemoteStorageError``; other ``OSError``, ``ValueError`` and
``RuntimeError`` (what fsspec's WebHDFS client raises for other remote exceptions) are
``RemoteStorageError``.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from core.config import ConfigKey, ConfigType
from core.extras import install_command, is_installed, requires_extra
from rsm_plugins.base import ObjectStoreRemoteStorageManager, require, setting
from rsm_plugins.layout import RunningChecksum
from rsm_plugins.store import BoundedReader, ObjectInfo, ObjectStore, buffered
from tiered.api import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RetriableRemoteStorageError,
)

# fsspec comes with the hdfs extra (and the s3 and spark ones), not the base install.
with requires_extra("hdfs", "the fsspec RemoteStorageManager (rsm_plugins.fsspec)"):
    import fsspec
    from fsspec.spec import AbstractFileSystem

STORAGE_URL = "storage.url"
OPTIONS = "storage.fsspec.options"
OBJECT_STORE_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "memory"})
PROTOCOL_EXTRAS: dict[str, tuple[str, str]] = {
    "hdfs": ("hdfs_native", "hdfs"),
    "viewfs": ("hdfs_native", "hdfs"),
    "webhdfs": ("requests", "hdfs"),
    "swebhdfs": ("requests", "hdfs"),
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
}
"""Protocol -> (the module its file system needs, the tierlog extra that installs it).

Checked before fsspec resolves the URL: without hdfs-native, fsspec maps ``hdfs://`` to
pyarrow's libhdfs client (a JVM and Hadoop's jars), which is not what tierlog documents."""
_CHUNK = 4 * 1024 * 1024
_TMP_MARK = ".tmp-"

_MISSING: tuple[type[BaseException], ...] = (FileNotFoundError,)
_RETRIABLE: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
try:
    import requests

    _RETRIABLE += (requests.ConnectionError, requests.Timeout)
except ImportError:  # pragma: no cover - fsspec's HTTP-based backends bring requests
    pass
_FAILURES: tuple[type[BaseException], ...] = (OSError, ValueError, RuntimeError)

T = TypeVar("T")


def _guard(what: str, call: Callable[[], T]) -> T:
    """Run ``call``, converting the file system's errors to ours (``raise ... from e``)."""
    try:
        return call()
    except _MISSING as e:
        raise RemoteResourceNotFoundError(f"{what}: not found") from e
    except _RETRIABLE as e:
        raise RetriableRemoteStorageError(f"{what}: {e}") from e
    except _FAILURES as e:
        raise RemoteStorageError(f"{what}: {type(e).__name__}: {e}") from e


class _Guarded(BoundedReader):
    """A bounded reader whose read errors are converted too."""

    def __init__(self, raw: BinaryIO, limit: int, what: str) -> None:
        super().__init__(raw, limit)
        self._what = what

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        return _guard(self._what, lambda: super(_Guarded, self).readinto(buffer))


class FsspecObjectStore(ObjectStore):
    """Objects as files under ``root`` of an fsspec file system."""

    def __init__(self, fs: AbstractFileSystem, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
        self.renames = not (protocols & OBJECT_STORE_PROTOCOLS)

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _write(
        self, key: str, fill: Callable[[BinaryIO, RunningChecksum], None]
    ) -> tuple[int, str]:
        fs, path = self.fs, self._path(key)
        checksum = RunningChecksum()
        if not self.renames:
            with _guard(f"write {path}", lambda: fs.open(path, "wb")) as f:
                _guard(f"write {path}", lambda: fill(f, checksum))
            return checksum.result()
        parent = path.rsplit("/", 1)[0]
        tmp = f"{path}{_TMP_MARK}{uuid.uuid4().hex}"
        _guard(f"mkdir {parent}", lambda: fs.makedirs(parent, exist_ok=True))
        try:
            with _guard(f"write {tmp}", lambda: fs.open(tmp, "wb")) as f:
                _guard(f"write {tmp}", lambda: fill(f, checksum))
            _guard(f"rename {tmp}", lambda: fs.mv(tmp, path))
            if _guard(f"stat {tmp}", lambda: fs.exists(tmp)):
                # HDFS does not rename onto an existing file: replace it (a repeated copy).
                _guard(f"delete {path}", lambda: fs.rm_file(path))
                _guard(f"rename {tmp}", lambda: fs.mv(tmp, path))
        except BaseException:
            try:
                self.fs.rm_file(tmp)
            except (*_MISSING, *_RETRIABLE, *_FAILURES):
                pass
            raise
        return checksum.result()

    def put_file(self, key: str, path: Path) -> tuple[int, str]:
        def fill(out: BinaryIO, checksum: RunningChecksum) -> None:
            with open(path, "rb") as source:
                while chunk := source.read(_CHUNK):
                    checksum.update(chunk)
                    out.write(chunk)

        return self._write(key, fill)

    def put_bytes(self, key: str, data: bytes) -> None:
        def fill(out: BinaryIO, checksum: RunningChecksum) -> None:
            checksum.update(data)
            out.write(data)

        self._write(key, fill)

    def get_range(self, key: str, start: int, end: int | None) -> BinaryIO:
        path = self._path(key)
        f = _guard(f"open {path}", lambda: self.fs.open(path, "rb"))
        try:
            _guard(f"seek {path}", lambda: f.seek(start))
        except RemoteStorageError:
            f.close()
            raise
        limit = (1 << 63) if end is None else end - start
        return buffered(_Guarded(f, limit, f"read {path}"))

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        return _guard(f"read {path}", lambda: bytes(self.fs.cat_file(path)))

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            path = self._path(key)
            with contextlib.suppress(RemoteResourceNotFoundError):
                _guard(f"delete {path}", lambda p=path: self.fs.rm_file(p))  # type: ignore[misc]

    def exists(self, key: str) -> bool:
        path = self._path(key)
        return bool(_guard(f"stat {path}", lambda: self.fs.exists(path)))

    def list_keys(self, prefix: str) -> Iterator[str]:
        for info in self.list_objects(prefix):
            yield info.key

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        root = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        found = _guard(f"list {self.root}", lambda: self.fs.find(self.root, detail=True))
        for name, info in found.items():
            key = name[len(root) :] if name.startswith(root) else name
            if key.startswith(prefix) and _TMP_MARK not in key:
                size = info.get("size")
                yield ObjectInfo(key, None if size is None else int(size), _mtime_ms(info))


def _mtime_ms(info: Mapping[str, Any]) -> int | None:
    """The modification time of a listing entry in ms, under whichever name the file
    system gives it (None if it gives none)."""
    for name, scale in (
        ("mtime", 1000),  # local: seconds (float)
        ("modificationTime", 1),  # WebHDFS: ms
        ("modification_time", 1),  # hdfs-native: ms
        ("created", 1000),  # memory: seconds (float)
    ):
        value = info.get(name)
        if isinstance(value, int | float):
            return int(value * scale)
    modified = info.get("LastModified")  # s3fs: a datetime
    if modified is not None and hasattr(modified, "timestamp"):
        return int(modified.timestamp() * 1000)
    return None


class FsspecRemoteStorageManager(ObjectStoreRemoteStorageManager):
    """The RSM over an fsspec URL (``rsm.config.storage.url``)."""

    CONFIG_KEYS = (
        ConfigKey(setting(STORAGE_URL), ConfigType.STRING, None, "Root URL (any fsspec URL)."),
        ConfigKey(setting(OPTIONS), ConfigType.STRING, "{}", "JSON object of file-system options."),
    )

    def create_store(self, values: Mapping[str, Any]) -> ObjectStore:
        url = require(values, STORAGE_URL, "the root URL of remote storage (any fsspec URL)")
        try:
            options = json.loads(values[OPTIONS])
            if not isinstance(options, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            raise RemoteStorageError(
                f"Invalid value {values[OPTIONS]} for configuration {setting(OPTIONS)}: {e}"
            ) from e
        protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
        needed = PROTOCOL_EXTRAS.get(protocol)
        if needed is not None and not is_installed(needed[0]):
            module, extra = needed
            raise RemoteStorageError(
                f"Invalid value {url} for configuration {setting(STORAGE_URL)}: {protocol}:// "
                f"needs {module}, which is not installed: {install_command(extra)}"
            )
        try:
            # The plugin owns its file system, outside fsspec's shared instance cache: fsspec
            # empties that cache in a forked child (os.register_at_fork), and an hdfs-native
            # client dropped there waits forever for tokio threads that only the parent has,
            # so the child of any later fork with a preexec_fn (pyspark starting its JVM, in
            # the same process) hung before its exec.
            fs, root = fsspec.core.url_to_fs(url, **{**options, "skip_instance_cache": True})
        except ImportError as e:
            raise RemoteStorageError(
                f"Invalid value {url} for configuration {setting(STORAGE_URL)}: its file "
                f"system needs a package that is not installed ({e})"
            ) from e
        except TypeError as e:
            # The options go to the file system's constructor: an unknown name, or a value of
            # the wrong type (hdfs-native takes strings only).
            key, value = (OPTIONS, values[OPTIONS]) if options else (STORAGE_URL, url)
            raise RemoteStorageError(
                f"Invalid value {value} for configuration {setting(key)}: {e}"
            ) from e
        except _FAILURES as e:
            raise RemoteStorageError(
                f"Invalid value {url} for configuration {setting(STORAGE_URL)}: {e}"
            ) from e
        store = FsspecObjectStore(fs, root)
        # Report an unreachable file system now, by name, not at the first copy.
        try:
            if store.renames:
                _guard(f"mkdir {root}", lambda: fs.makedirs(root, exist_ok=True))
            _guard(f"stat {root}", lambda: fs.exists(root))
        except RemoteStorageError as e:
            raise RemoteStorageError(
                f"Invalid value {url} for configuration {setting(STORAGE_URL)}: cannot reach "
                f"the file system ({e})"
            ) from e
        return store
