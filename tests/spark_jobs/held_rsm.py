"""An RSM plugin that holds an export mid-run, for the kill test of ``test_export``.

The local-directory plugin, but a read of a segment's log waits while a run has staged files
already (under ``hold.staging.dir``): the export is then held with some ranges written to
staging and nothing committed, so a kill lands there for certain. When it starts waiting it
creates ``hold.held.file``; it goes on once ``hold.release.file`` exists (the test creates
it after the kill, so that no orphaned Spark worker waits for long) or after
``HOLD_LIMIT_S``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rsm_plugins.local import LocalDirRemoteStorageManager

HOLD_LIMIT_S = 300.0


class HeldLocalDirRemoteStorageManager(LocalDirRemoteStorageManager):
    def configure(self, configs: Mapping[str, str]) -> None:
        own = dict(configs)
        self.staging = Path(own.pop("hold.staging.dir"))
        self.held = Path(own.pop("hold.held.file"))
        self.release = Path(own.pop("hold.release.file"))
        super().configure(own)

    def fetch_log_segment(self, metadata: Any, start_position: int, end_position: Any = None):
        if self.staging.exists() and any(self.staging.rglob("*.parquet")):
            self.held.touch()
            deadline = time.monotonic() + HOLD_LIMIT_S
            while not self.release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return super().fetch_log_segment(metadata, start_position, end_position)
