"""``LocalDirRemoteStorageManager``: a local directory standing in for a bucket.

The broker's embedded default (``make demo``, tests). Settings (``rsm.config.`` stripped):

* ``storage.root`` (required): the directory; created if missing (Aiven's filesystem
  backend's ``root``, under its ``storage.`` prefix).
* ``key.prefix``: see ``base``.

Objects are files under the root at their keys. Each object is written to a temp name in its
folder (or, in a copy of several objects, to a spare file made ahead in a folder of its own:
``SpareFiles``), fsynced, renamed over the key and the folder fsynced (STYLE.md point 10), so
a reader never sees a partial object and a completed copy survives a crash. Missing means
``FileNotFoundError`` (the file or a folder of its key does not exist); every other
``OSError`` is a ``RemoteStorageError``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from core.config import ConfigKey, ConfigType
from core.fs import fsync_dir
from rsm_plugins.base import ObjectStoreRemoteStorageManager, require, setting
from rsm_plugins.layout import CorruptObjectError, ObjectSuffix, checksum_bytes
from rsm_plugins.store import BoundedReader, ObjectInfo, ObjectStore, buffered
from tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

STORAGE_ROOT = "storage.root"
_TMP_MARK = ".tmp-"
# Empty files kept created ahead of the writes that use them (``SpareFiles``): one batch of
# the copy task (8 segments of 6 objects, 8 manifests) and some.
SPARE_FILES = 64
# Spares are removed (and their thread ends) after this long without a write taking one.
SPARE_IDLE_S = 5.0
# Log objects whose file was checked against its manifest, remembered by segment id.
VERIFIED_FILES_MAX = 10_000

log = logging.getLogger(__name__)


# Threads that fsync the objects of one copy at once (an fsync releases the GIL).
_SYNC_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="local-rsm-sync")


def _copy_fd(source: int, target: int) -> tuple[int, str]:
    """Copy a whole file in the kernel (``copy_file_range``, else ``sendfile``); its
    CRC32C is computed over a read-only mapping of the source, so no byte passes through
    a Python buffer. Returns the size and CRC32C of the bytes copied."""
    size = os.fstat(source).st_size
    if size == 0:
        return 0, checksum_bytes(b"")
    with mmap.mmap(source, size, access=mmap.ACCESS_READ) as view:
        crc = checksum_bytes(view)
    done = 0
    while done < size:
        try:
            n = os.copy_file_range(source, target, size - done, done, done)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            n = os.sendfile(target, source, done, size - done)
        if n == 0:
            raise OSError(errno.EIO, f"the source ended at byte {done} of {size}")
        done += n
    return size, crc


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class SpareFiles:
    """Empty files created ahead, by a background thread, in a folder of their own under
    the store's root; a write takes one, fills and syncs it and renames it over its key.

    Why: creating a file (allocating its inode) costs 0.1-2 ms on this kind of disk, most
    of it waiting for the file system's journal, which the copies' own syncs (and every
    other process's) keep busy, while a rename costs ~20 us. A copy of 8 segments creates
    56 files; with spares their creation overlaps the copies and syncs instead of
    preceding them. A rename within one file system is atomic and the target folder's
    sync makes it durable, as for a temp file made in the target folder.

    The thread starts at a ``take``, which only writes of several objects make (the copy
    task's), so a store that only reads, or writes one object at a time (the tools), never
    makes any. Its folder (``.spare.tmp-<uuid>``: the temp mark keeps it and its files out
    of every listing) is removed with the spares left when no write took one for
    ``SPARE_IDLE_S`` (the thread then ends; the next ``take`` starts another), and by
    ``close``; a crash while copies run leaves it behind with at most ``most`` empty files,
    as a crash during a copy leaves temp files."""

    def __init__(self, root: Path, most: int = SPARE_FILES) -> None:
        self.root = root
        self.most = most
        self._ready: deque[tuple[str, int]] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._last_take = 0.0

    def take(self) -> tuple[str, int] | None:
        """A spare file's path and a descriptor open for writing, or None when none is
        ready (the caller then creates its own)."""
        with self._cond:
            if self._closed:
                return None
            self._last_take = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._fill, name="local-rsm-spares", daemon=True
                )
                self._thread.start()
            spare = self._ready.popleft() if self._ready else None
            self._cond.notify()
            return spare

    def _fill(self) -> None:
        folder = self.root / f".spare{_TMP_MARK}{uuid.uuid4().hex}"
        try:
            folder.mkdir()
        except OSError as e:
            log.warning("no spare files under %s (%s): each write makes its own", self.root, e)
            return
        n = 0
        while True:
            with self._cond:
                while not self._closed and len(self._ready) >= self.most:
                    idle = time.monotonic() - self._last_take
                    if idle >= SPARE_IDLE_S:
                        break
                    self._cond.wait(SPARE_IDLE_S - idle)
                else:
                    if not self._closed:
                        path = str(folder / f"spare{_TMP_MARK}{n}")
                        n += 1
                if self._closed or len(self._ready) >= self.most:
                    # Closed or idle: remove what is left, let the next take start anew.
                    spares = list(self._ready)
                    self._ready.clear()
                    if self._thread is threading.current_thread():
                        self._thread = None
                    break
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except OSError as e:
                log.warning("cannot make a spare file %s (%s): each write makes its own", path, e)
                with self._cond:  # self._thread stays set: no more spares for this store
                    spares = list(self._ready)
                    self._ready.clear()
                break
            with self._cond:
                self._ready.append((path, fd))
        _remove(spares, folder)

    def close(self) -> None:
        """Stop the thread, remove the spares and their folder."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()


def _remove(spares: list[tuple[str, int]], folder: Path) -> None:
    for path, fd in spares:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    with contextlib.suppress(OSError):  # a write's spare still inside: it renames it out
        folder.rmdir()


class LocalDirObjectStore(ObjectStore):
    """Objects as files under ``root``; keys are ``/``-separated relative paths."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = root
        self.durable = durable
        self.spares = SpareFiles(root)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise RemoteStorageError(f"invalid object key {key!r}")
        return self.root.joinpath(*parts)

    def _write(self, key: str, source: bytes | int) -> tuple[int, str]:
        return self._write_all([(key, source)])[0]

    def _write_all(self, items: list[tuple[str, bytes | int]]) -> list[tuple[int, str]]:
        """Write each object (bytes, or a file descriptor to copy whole) to a temp name in
        its folder, (durable) fsync them all, rename each over its key and fsync each folder
        once: a segment's objects share one folder, so a copy pays one directory sync, not
        one per object, and several segments copied together share it too.

        The temp files of a write of several objects (the copy task's) are spares created
        ahead (``SpareFiles``) when there are some, else created here; all before the first
        sync starts: on a journalling file system a file creation waits
        for a commit in progress, so creations interleaved with syncs would each wait for
        one."""
        written: list[tuple[str, str]] = []
        fds: list[int] = []
        results = []
        syncs: list[Future[None]] = []
        parents: set[str] = set()
        token = uuid.uuid4().hex
        try:
            for n, (key, _) in enumerate(items):
                target = str(self._path(key))
                parent = os.path.dirname(target)
                if parent not in parents:
                    self._make_parents(Path(parent))
                    parents.add(parent)
                spare = self.spares.take() if len(items) > 1 else None
                if spare is not None:
                    tmp, fd = spare
                    # Its times are the object's (an audit judges an object's age by its
                    # mtime), not those of the spare's creation, which an empty object
                    # would otherwise keep.
                    os.utime(fd)
                else:
                    tmp = f"{target}{_TMP_MARK}{token}-{n}"
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                fds.append(fd)
                written.append((tmp, target))
            for fd, (_, source) in zip(fds, items, strict=True):
                if isinstance(source, int):
                    results.append(_copy_fd(source, fd))
                else:
                    _write_fd(fd, source)
                    results.append((len(source), checksum_bytes(source)))
                if self.durable:
                    # Synced while the next objects are written; the file system commits
                    # overlapping syncs together.
                    syncs.append(_SYNC_POOL.submit(os.fsync, fd))
            for sync in syncs:
                sync.result()
            for tmp, target in written:
                os.replace(tmp, target)
            if self.durable:
                for folder in parents:
                    fsync_dir(folder)
        except OSError as e:
            key = items[min(len(results), len(items) - 1)][0]
            raise RemoteStorageError(f"cannot write {key}: {e}") from e
        finally:
            for sync in syncs:
                sync.exception()  # done with each fd before it is closed
            for fd in fds:
                os.close(fd)
            for tmp, _ in written:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        return results

    def _make_parents(self, folder: Path) -> None:
        missing: list[Path] = []
        p = folder
        while not p.exists() and p != self.root:
            missing.append(p)
            p = p.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if self.durable:
                for created in reversed(missing):
                    fsync_dir(created.parent)
        except OSError as e:
            raise RemoteStorageError(f"cannot create {folder}: {e}") from e

    def close(self) -> None:
        self.spares.close()

    def put_file(self, key: str, path: Path) -> tuple[int, str]:
        return self.put_objects([(key, path)])[0]

    def put_bytes(self, key: str, data: bytes) -> None:
        self._write(key, data)

    def put_objects(self, items: Sequence[tuple[str, Path | bytes]]) -> list[tuple[int, str]]:
        sources: list[tuple[str, bytes | int]] = []
        fds: list[int] = []
        try:
            for key, source in items:
                if isinstance(source, Path):
                    try:
                        fds.append(os.open(source, os.O_RDONLY))
                    except OSError as e:
                        raise RemoteStorageError(f"cannot read {source}: {e}") from e
                    sources.append((key, fds[-1]))
                else:
                    sources.append((key, source))
            return self._write_all(sources)
        finally:
            for fd in fds:
                os.close(fd)

    def _open(self, key: str) -> BinaryIO:
        path = self._path(key)
        try:
            return open(path, "rb")
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"no object {key} under {self.root}") from e
        except OSError as e:
            raise RemoteStorageError(f"cannot read {path}: {e}") from e

    def get_range(self, key: str, start: int, end: int | None) -> BinaryIO:
        f = self._open(key)
        try:
            f.seek(start)
        except OSError as e:
            f.close()
            raise RemoteStorageError(f"cannot seek {key} to {start}: {e}") from e
        if end is None:
            return f
        return buffered(BoundedReader(f, end - start))

    def object_file(self, key: str) -> str:
        """The path of object ``key``'s file."""
        return str(self._path(key))

    def open_file(self, path: str) -> int:
        """A new read-only descriptor of an object's file (``object_file``), owned by the
        caller.

        Raises:
            RemoteResourceNotFoundError: no such object.
        """
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as e:
            raise RemoteResourceNotFoundError(f"no object {path}") from e
        except OSError as e:
            raise RemoteStorageError(f"cannot read {path}: {e}") from e

    def get_bytes(self, key: str) -> bytes:
        with self._open(key) as f:
            try:
                return f.read()
            except OSError as e:
                raise RemoteStorageError(f"cannot read {key}: {e}") from e

    def delete(self, keys: list[str]) -> None:
        folders: set[Path] = set()
        for key in keys:
            path = self._path(key)
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                raise RemoteStorageError(f"cannot delete {path}: {e}") from e
            folders.add(path.parent)
        for folder in folders:
            if self.durable:
                with contextlib.suppress(FileNotFoundError):
                    fsync_dir(folder)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list_keys(self, prefix: str) -> Iterator[str]:
        for info in self.list_objects(prefix):
            yield info.key

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        # Walk only the folder the prefix names (its part up to the last '/'), not the root:
        # one topic's listing must not cost a walk of every topic.
        parts = prefix.rpartition("/")[0].split("/")
        if any(p in ("", ".", "..") for p in parts):
            parts = []  # no folder (or not a plain one): walk everything under the root
        start = self.root.joinpath(*parts)
        for dirpath, _dirs, files in os.walk(start):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            base = "" if rel == "." else rel + "/"
            for name in files:
                key = base + name
                if not key.startswith(prefix) or _TMP_MARK in name:
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue  # deleted since the walk read its folder
                except OSError as e:
                    raise RemoteStorageError(f"cannot stat {dirpath}/{name}: {e}") from e
                yield ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000)


class LocalDirRemoteStorageManager(ObjectStoreRemoteStorageManager):
    """The RSM over a local directory (``rsm.config.storage.root``).

    It has ``tiered.api.LogSegmentFiles``: the broker sends fetched bytes from the ``.log``
    object's file. Each file is checked whole against its manifest (size and CRC32C) when
    first opened, and again when its identity (device, inode, size, modification time)
    changed since; ranged reads through ``fetch_log_segment`` are not checked here (the
    broker checks each batch's own CRC32C).
    """

    def __init__(self) -> None:
        super().__init__()
        # Segment id -> the log object's path and the identity of the file checked there.
        self._verified: OrderedDict[uuid.UUID, tuple[str, tuple[int, int, int, int]]] = (
            OrderedDict()
        )
        self._verified_lock = threading.Lock()

    CONFIG_KEYS = (
        ConfigKey(
            setting(STORAGE_ROOT),
            ConfigType.STRING,
            None,
            "The directory standing in for a bucket; created if missing.",
        ),
    )

    def create_store(self, values: Mapping[str, Any]) -> ObjectStore:
        root = Path(require(values, STORAGE_ROOT, "the directory standing in for a bucket"))
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RemoteStorageError(
                f"Invalid value {root} for configuration {setting(STORAGE_ROOT)}: {e}"
            ) from e
        if not os.access(root, os.W_OK | os.X_OK):
            raise RemoteStorageError(
                f"Invalid value {root} for configuration {setting(STORAGE_ROOT)}: "
                f"{os.strerror(errno.EACCES)}"
            )
        return LocalDirObjectStore(root.resolve())

    def open_log_segment_file(
        self, metadata: RemoteLogSegmentMetadata, *, only_if_verified: bool = False
    ) -> int | None:
        store = self.store
        if not isinstance(store, LocalDirObjectStore):
            return None  # client-side encryption: the file holds ciphertext
        segment_id = metadata.segment_id
        with self._verified_lock:
            checked = self._verified.get(segment_id)
        # The path of a file checked before is remembered with it (no key to build).
        path = (
            store.object_file(self._key(metadata, ObjectSuffix.LOG))
            if checked is None
            else checked[0]
        )
        fd = store.open_file(path)
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if checked is not None and checked[1] == identity:
                with self._verified_lock:
                    if segment_id in self._verified:
                        self._verified.move_to_end(segment_id)
            else:
                if only_if_verified:
                    os.close(fd)
                    return None
                self._verify_file(metadata, path, fd, st.st_size)
                with self._verified_lock:
                    self._verified[segment_id] = (path, identity)
                    self._verified.move_to_end(segment_id)
                    while len(self._verified) > VERIFIED_FILES_MAX:
                        self._verified.popitem(last=False)
        except (OSError, ValueError) as e:  # ValueError: the file shrank under the mapping
            os.close(fd)
            raise RemoteStorageError(f"cannot read {path}: {e}") from e
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _verify_file(
        self, metadata: RemoteLogSegmentMetadata, path: str, fd: int, size: int
    ) -> None:
        """Check the whole file against the manifest's size and CRC32C (read through a
        mapping: no copy into a Python buffer)."""
        entry = self.manifest(metadata).objects.get(ObjectSuffix.LOG)
        if entry is None:
            raise CorruptObjectError(f"{path}: the manifest has no log entry")
        if size == 0:
            entry.verify(b"", path)
            return
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as view:
            entry.verify(view, path)  # type: ignore[arg-type]  # a mapping is read like bytes
