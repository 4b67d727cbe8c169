"""The RSM contract against FsspecRemoteStorageManager: file://, memory://, WebHDFS, HDFS.

WebHDFS runs against ``webhdfs_emulator`` (an in-memory server following the WebHDFS REST
specification on 127.0.0.1; no HDFS cluster can run here). Set ``TIERLOG_HDFS_URL`` (e.g.
``hdfs://namenode:8020/tmp/tierlog-test`` with hdfs-native installed, or
``webhdfs://namenode:9870/tmp/tierlog-test``) to run the same suite against a real cluster.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import fsspec
import pytest

from rsm_plugins.fsspec import FsspecRemoteStorageManager

from .contract import KEY_PREFIX, MakeRsm, RemoteStorageManagerContract
from .webhdfs_emulator import WebHdfsEmulator

HDFS_URL = os.environ.get("TIERLOG_HDFS_URL")


class FsBackdoor:
    """The storage through its own fsspec file system (not the plugin)."""

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")

    def read(self, key: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(f"{self.root}/{key}"))
        except FileNotFoundError:
            return None

    def write(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(f"{self.root}/{key}", data)

    def all_keys(self) -> set[str]:
        base = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        return {p[len(base) :] for p in self.fs.find(self.root)}


class EmulatorBackdoor:
    def __init__(self, hdfs: WebHdfsEmulator, root: str) -> None:
        self.hdfs = hdfs
        self.root = root.rstrip("/")

    def read(self, key: str) -> bytes | None:
        return self.hdfs.read(f"{self.root}/{key}")

    def write(self, key: str, data: bytes) -> None:
        self.hdfs.write(f"{self.root}/{key}", data)

    def all_keys(self) -> set[str]:
        return {p[len(self.root) + 1 :] for p in self.hdfs.files(self.root)}


def _maker(url: str, options: str = "{}") -> Iterator[MakeRsm]:
    made: list[FsspecRemoteStorageManager] = []

    def make(overrides: Mapping[str, str] | None = None) -> FsspecRemoteStorageManager:
        plugin = FsspecRemoteStorageManager()
        configs = {"storage.url": url, "storage.fsspec.options": options, "key.prefix": KEY_PREFIX}
        plugin.configure({**configs, **(overrides or {})})
        made.append(plugin)
        return plugin

    yield make
    for plugin in made:
        plugin.close()


COMMON_INVALID = [
    ({}, "rsm.config.storage.url"),
    ({"storage.url": "nosuchproto://x/y"}, "rsm.config.storage.url"),
    ({"storage.url": "memory://x", "storage.fsspec.options": "[1]"},
     "rsm.config.storage.fsspec.options"),
    ({"storage.url": "memory://x", "storage.fsspec.options": "{bad"},
     "rsm.config.storage.fsspec.options"),
]  # fmt: skip


class TestFsspecFile(RemoteStorageManagerContract):
    @pytest.fixture
    def root(self, tmp_path: Path) -> Path:
        return tmp_path / "remote"

    @pytest.fixture
    def make_rsm(self, root: Path) -> Iterator[MakeRsm]:
        yield from _maker(root.as_uri())

    @pytest.fixture
    def backdoor(self, root: Path, make_rsm: MakeRsm) -> FsBackdoor:
        return FsBackdoor(fsspec.filesystem("file"), str(root))

    @pytest.fixture
    def invalid_settings(self, tmp_path: Path) -> list[tuple[dict[str, str], str]]:
        a_file = tmp_path / "a-file"
        a_file.write_bytes(b"")
        return [*COMMON_INVALID, ({"storage.url": (a_file / "sub").as_uri()}, "storage.url")]


class TestFsspecMemory(RemoteStorageManagerContract):
    @pytest.fixture
    def root(self) -> Iterator[str]:
        root = f"/tierlog-{uuid.uuid4().hex}"
        yield root
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)

    @pytest.fixture
    def make_rsm(self, root: str) -> Iterator[MakeRsm]:
        yield from _maker(f"memory://{root}")

    @pytest.fixture
    def backdoor(self, root: str) -> FsBackdoor:
        return FsBackdoor(fsspec.filesystem("memory"), root)

    @pytest.fixture
    def invalid_settings(self) -> list[tuple[dict[str, str], str]]:
        return COMMON_INVALID


@pytest.fixture(scope="module")
def webhdfs() -> Iterator[WebHdfsEmulator]:
    with WebHdfsEmulator() as emulator:
        yield emulator


class TestFsspecWebHdfsEmulator(RemoteStorageManagerContract):
    @pytest.fixture
    def root(self) -> str:
        return f"/tierlog/{uuid.uuid4().hex}"

    @pytest.fixture
    def make_rsm(self, webhdfs: WebHdfsEmulator, root: str) -> Iterator[MakeRsm]:
        yield from _maker(webhdfs.url(root), '{"user": "kafka"}')

    @pytest.fixture
    def backdoor(self, webhdfs: WebHdfsEmulator, root: str) -> EmulatorBackdoor:
        return EmulatorBackdoor(webhdfs, root)

    @pytest.fixture
    def invalid_settings(self) -> list[tuple[dict[str, str], str]]:
        with WebHdfsEmulator() as gone:
            closed = gone.url("/tierlog")
        return [*COMMON_INVALID, ({"storage.url": closed}, "rsm.config.storage.url")]

    def test_objects_are_plain_hdfs_files(self, rsm, copied, webhdfs, root) -> None:
        _, seg = copied
        logs = [p for p in webhdfs.files(root) if p.endswith(".log")]
        assert len(logs) == 1
        assert webhdfs.read(logs[0]) == seg.log_bytes()


@pytest.mark.skipif(HDFS_URL is None, reason="TIERLOG_HDFS_URL is not set (no HDFS cluster)")
class TestFsspecRealHdfs(RemoteStorageManagerContract):
    @pytest.fixture
    def root_url(self) -> Iterator[str]:
        assert HDFS_URL is not None
        url = f"{HDFS_URL.rstrip('/')}/{uuid.uuid4().hex}"
        yield url
        fs, path = fsspec.core.url_to_fs(url)
        if fs.exists(path):
            fs.rm(path, recursive=True)

    @pytest.fixture
    def make_rsm(self, root_url: str) -> Iterator[MakeRsm]:
        yield from _maker(root_url)

    @pytest.fixture
    def backdoor(self, root_url: str, make_rsm: MakeRsm) -> FsBackdoor:
        fs, path = fsspec.core.url_to_fs(root_url)
        return FsBackdoor(fs, path)

    @pytest.fixture
    def invalid_settings(self) -> list[tuple[dict[str, str], str]]:
        return COMMON_INVALID
