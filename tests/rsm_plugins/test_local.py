"""The RSM contract against LocalDirRemoteStorageManager, plus its own durability rules."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from rsm_plugins.local import LocalDirRemoteStorageManager
from tiered.api import RemoteStorageError

from .contract import KEY_PREFIX, MakeRsm, RemoteStorageManagerContract


class DirBackdoor:
    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self, key: str) -> bytes | None:
        path = self.root / key
        return path.read_bytes() if path.is_file() else None

    def write(self, key: str, data: bytes) -> None:
        (self.root / key).write_bytes(data)

    def all_keys(self) -> set[str]:
        return {p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file()}


class TestLocalDir(RemoteStorageManagerContract):
    @pytest.fixture
    def root(self, tmp_path: Path) -> Path:
        return tmp_path / "bucket" / "not-yet-created"

    @pytest.fixture
    def make_rsm(self, root: Path) -> MakeRsm:
        def make(overrides: Mapping[str, str] | None = None) -> LocalDirRemoteStorageManager:
            plugin = LocalDirRemoteStorageManager()
            configs = {"storage.root": str(root), "key.prefix": KEY_PREFIX}
            plugin.configure({**configs, **(overrides or {})})
            return plugin

        return make

    @pytest.fixture
    def backdoor(self, root: Path, make_rsm: MakeRsm) -> DirBackdoor:
        return DirBackdoor(root)

    @pytest.fixture
    def invalid_settings(self, tmp_path: Path) -> list[tuple[dict[str, str], str]]:
        a_file = tmp_path / "a-file"
        a_file.write_bytes(b"")
        return [
            ({}, "rsm.config.storage.root"),
            ({"storage.root": ""}, "rsm.config.storage.root"),
            ({"storage.root": str(a_file / "sub")}, "rsm.config.storage.root"),
            (
                {"storage.root": str(tmp_path), "fetch.manifest.cache.size": "x"},
                "rsm.config.fetch.manifest.cache.size",
            ),
        ]

    def test_no_temp_files_are_left_behind(self, rsm, copied, backdoor) -> None:
        assert not [k for k in backdoor.all_keys() if ".tmp-" in k]

    def test_a_failed_write_leaves_no_object(self, rsm, copied, backdoor, tmp_path) -> None:
        md, seg = copied
        missing = tmp_path / "gone.log"
        data = seg.data.__class__(
            missing,
            seg.data.offset_index,
            seg.data.time_index,
            None,
            seg.data.producer_snapshot_index,
            seg.data.leader_epoch_index,
        )
        other = seg.metadata(md.topic_id_partition)
        with pytest.raises(RemoteStorageError, match=r"gone\.log"):
            rsm.copy_log_segment_data(other, data)
        assert self.segment_keys(backdoor, other) == set()
