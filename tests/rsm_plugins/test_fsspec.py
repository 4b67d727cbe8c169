"""The RSM contract against FsspecRemoteStorageManager: file://, memory://, WebHDFS, HDFS.

WebHDFS runs against ``webhdfs_emulator`` (an in-memory server following the WebHDFS REST
specification on 127.0.0.1; no HDFS cluster can run here). Set ``TIERLOG_HDFS_URL`` (e.g.
``hdfs://namenode:8020/tmp/tierlog-test``, read by hdfs-native from the ``hdfs`` extra, or
``webhdfs://namenode:9870/tmp/tierlog-test``) to run the same suite against a real cluster.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import fsspec
import pytest

from rsm_plugins.fsspec import FsspecRemoteStorageManager
from tiered.api import RemoteStorageError

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
        fs, path = fsspec.core.url_to_fs(url, skip_instance_cache=True)  # as the plugin does
        if fs.exists(path):
            fs.rm(path, recursive=True)

    @pytest.fixture
    def make_rsm(self, root_url: str) -> Iterator[MakeRsm]:
        yield from _maker(root_url)

    @pytest.fixture
    def backdoor(self, root_url: str, make_rsm: MakeRsm) -> FsBackdoor:
        fs, path = fsspec.core.url_to_fs(root_url, skip_instance_cache=True)
        return FsBackdoor(fs, path)

    @pytest.fixture
    def invalid_settings(self) -> list[tuple[dict[str, str], str]]:
        return COMMON_INVALID


# -- hdfs:// through hdfs-native (the hdfs extra) --------------------------------------------
# No NameNode can run here: these check that hdfs:// reaches hdfs-native and that an
# unreachable NameNode is a clear configure-time error. A real round trip runs in
# TestFsspecRealHdfs when TIERLOG_HDFS_URL names a cluster.

# One attempt instead of Hadoop's 15 with backoff (about three minutes on a closed port).
ONE_ATTEMPT = '{"dfs.client.failover.max.attempts": "1"}'


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hdfs_urls_resolve_to_hdfs_native() -> None:
    from hdfs_native.fsspec import HdfsFileSystem, ViewfsFileSystem

    assert fsspec.get_filesystem_class("hdfs") is HdfsFileSystem
    assert fsspec.get_filesystem_class("viewfs") is ViewfsFileSystem
    # Never in fsspec's instance cache: see FsspecRemoteStorageManager.create_store.
    url = "hdfs://namenode.invalid:8020/tierlog/remote"
    fs, root = fsspec.core.url_to_fs(url, skip_instance_cache=True)
    assert isinstance(fs, HdfsFileSystem)
    assert (fs.host, fs.port, root) == ("namenode.invalid", 8020, "/tierlog/remote")


@pytest.mark.timeout(60)
def test_an_unreachable_namenode_fails_configure_naming_the_url() -> None:
    url = f"hdfs://127.0.0.1:{closed_port()}/tierlog"
    plugin = FsspecRemoteStorageManager()
    with pytest.raises(RemoteStorageError) as raised:
        plugin.configure({"storage.url": url, "storage.fsspec.options": ONE_ATTEMPT})
    message = str(raised.value)
    assert message.startswith(f"Invalid value {url} for configuration rsm.config.storage.url: ")
    assert "cannot reach the file system" in message and "Connection refused" in message


def exits_after_fork(deadline_s: float = 30.0) -> bool:
    """Whether a forked child (which runs the os.register_at_fork handlers) gets to exit."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


@pytest.mark.timeout(90)
def test_a_process_that_configured_an_hdfs_plugin_can_still_fork() -> None:
    # fsspec empties its instance cache in a forked child; an hdfs-native file system
    # dropped there waited forever (pyspark could then not start its JVM).
    plugin = FsspecRemoteStorageManager()
    url = f"hdfs://127.0.0.1:{closed_port()}/tierlog"
    with pytest.raises(RemoteStorageError):
        plugin.configure({"storage.url": url, "storage.fsspec.options": ONE_ATTEMPT})
    assert exits_after_fork(), "a forked child hung in fsspec's at-fork handler"


def test_hdfs_options_that_are_not_strings_name_the_options_key() -> None:
    options = '{"dfs.client.failover.max.attempts": 1}'
    plugin = FsspecRemoteStorageManager()
    with pytest.raises(RemoteStorageError) as raised:
        plugin.configure({"storage.url": "hdfs://127.0.0.1:1/t", "storage.fsspec.options": options})
    assert str(raised.value).startswith(
        f"Invalid value {options} for configuration rsm.config.storage.fsspec.options: "
    )


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("hdfs://namenode:8020/t", "hdfs_native", "hdfs"),
        ("viewfs://cluster/t", "hdfs_native", "hdfs"),
        ("webhdfs://namenode:9870/t", "requests", "hdfs"),
        ("s3://bucket/t", "s3fs", "s3"),
    ],
)
def test_a_url_whose_client_is_missing_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, url: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import and find_spec: "not installed"
    plugin = FsspecRemoteStorageManager()
    with pytest.raises(RemoteStorageError) as raised:
        plugin.configure({"storage.url": url})
    protocol = url.partition("://")[0]
    assert str(raised.value) == (
        f"Invalid value {url} for configuration rsm.config.storage.url: {protocol}:// needs "
        f"{module}, which is not installed: pip install 'tierlog[{extra}]'"
    )
