"""The RSM contract against LocalDirRemoteStorageManager, plus its own durability rules."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from rsm_plugins import local
from rsm_plugins.local import LocalDirRemoteStorageManager
from tests.support.waiting import wait_until
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
        # Only the spare files made ahead for the next writes, in their own folder ...
        temps = [k for k in backdoor.all_keys() if ".tmp-" in k]
        assert all(k.startswith(".spare.tmp-") for k in temps), temps
        assert not [k for k in rsm.store.list_objects("") if ".tmp-" in k.key]
        rsm.close()
        # ... which close removes, with their folder.
        assert not [k for k in backdoor.all_keys() if ".tmp-" in k]
        assert not [p for p in backdoor.root.iterdir() if ".tmp-" in p.name]

    def test_each_object_is_synced_before_its_rename_and_its_folder_after(
        self, rsm, copied, backdoor, tp, segments, monkeypatch
    ) -> None:
        """The order a crash of the machine relies on, whether an object's temp file is
        a spare made ahead in another folder or made next to its key: the file's data is
        synced before it is renamed over its key, the key's folder is synced after the
        rename, and the manifest is renamed into place only after every object of its
        segment is durable under its key."""
        wait_until(lambda: len(rsm.store.spares._ready) >= 8, 10, what="spare files made")
        events: list[tuple[str, str]] = []
        lock = threading.Lock()
        fsync, replace, fsync_dir = os.fsync, os.replace, local.fsync_dir

        def note(kind: str, path: str) -> None:
            with lock:
                events.append((kind, os.path.abspath(path)))

        def noting_fsync(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")  # the name it has now
            time.sleep(0.005)  # a slow disk: a rename not waiting for the sync comes first
            fsync(fd)
            note("fsync", path)

        def noting_replace(src: str, dst: str) -> None:
            replace(src, dst)
            note("renamed from", src)
            note("renamed to", dst)

        def noting_fsync_dir(folder: str) -> None:
            fsync_dir(folder)
            note("dir synced", folder)

        monkeypatch.setattr(local.os, "fsync", noting_fsync)
        monkeypatch.setattr(local.os, "replace", noting_replace)
        monkeypatch.setattr(local, "fsync_dir", noting_fsync_dir)
        md = segments[2].metadata(tp)
        rsm.copy_log_segment_data(md, segments[2].data)
        monkeypatch.undo()
        renames = [
            (i, events[i][1], events[i + 1][1])
            for i, (kind, _) in enumerate(events)
            if kind == "renamed from"
        ]
        keys = self.segment_keys(backdoor, md)
        assert {os.path.relpath(dst, backdoor.root) for _, _, dst in renames} == keys
        assert any(".spare.tmp-" in src for _, src, _ in renames), "no spare file was used"
        for i, src, dst in renames:
            assert ("fsync", src) in events[:i], f"{dst} renamed before its data was synced"
            assert ("dir synced", os.path.dirname(dst)) in events[i:], f"{dst}: folder unsynced"
        manifest = next(i for i, _, dst in renames if dst.endswith(".manifest.json"))
        last_object = max(i for i, _, dst in renames if not dst.endswith(".manifest.json"))
        folder = os.path.dirname(renames[0][2])
        assert ("dir synced", folder) in events[last_object:manifest]

    def test_spare_files_go_when_no_write_takes_them(
        self, make_rsm, tp, segments, backdoor, monkeypatch
    ) -> None:
        """The spares made ahead are removed, with their folder, once copies stop (the
        bucket holds nothing but objects then), and made again for the next copy."""
        monkeypatch.setattr(local, "SPARE_IDLE_S", 0.3)
        rsm = make_rsm()
        try:
            rsm.copy_log_segment_data(segments[1].metadata(tp), segments[1].data)
            wait_until(lambda: rsm.store.spares._ready, 10, what="spare files made")
            wait_until(
                lambda: (
                    not [k for k in backdoor.all_keys() if ".tmp-" in k]
                    and not [p for p in backdoor.root.iterdir() if ".tmp-" in p.name]
                ),
                10,
                what="idle spares removed",
            )
            md = segments[2].metadata(tp)
            rsm.copy_log_segment_data(md, segments[2].data)
            wait_until(lambda: rsm.store.spares._ready, 10, what="spare files made again")
            with rsm.fetch_log_segment(md, 0) as f:
                assert f.read() == segments[2].log_bytes()
        finally:
            rsm.close()
        assert not [p for p in backdoor.root.iterdir() if ".tmp-" in p.name]

    def test_a_repeated_copy_replaces_the_objects_made_from_spares(
        self, rsm, copied, backdoor
    ) -> None:
        """Copying the same segment id again (a retried copy) replaces each object with a
        spare renamed over it."""
        md, seg = copied
        wait_until(lambda: len(rsm.store.spares._ready) >= 8, 10, what="spare files made")
        before = {k: backdoor.read(k) for k in self.segment_keys(backdoor, md)}
        rsm.copy_log_segment_data(md, seg.data)
        assert {k: backdoor.read(k) for k in self.segment_keys(backdoor, md)} == before
        with rsm.fetch_log_segment(md, 0) as f:
            assert f.read() == seg.log_bytes()

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
