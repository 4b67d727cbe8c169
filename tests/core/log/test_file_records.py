"""FileRecords: reads racing a close on another thread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from core.errors import KafkaStorageError
from core.log.file_records import FileRecords


def test_a_close_on_another_thread_waits_for_a_read_in_progress(tmp_path: Path, monkeypatch):
    # Retention or a truncation may close a segment while a fetch reads it. The read must
    # never use the descriptor after close() released it: its number may already belong to
    # another file, whose bytes the fetch would then serve.
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append(b"segment bytes")
    closer = threading.Thread(target=records.close)
    real_pread = os.pread
    seen: list[bool] = []

    def pread_while_closing(fd: int, size: int, position: int) -> bytes:
        closer.start()
        # A close that does not wait for this read finishes well within this bound.
        closer.join(timeout=0.5)
        seen.append(closer.is_alive())
        return real_pread(fd, size, position)

    monkeypatch.setattr(os, "pread", pread_while_closing)
    assert records.read(0, 7) == b"segment"
    assert seen == [True]  # close() was still waiting when the read used the descriptor
    closer.join(timeout=10)
    assert not closer.is_alive()
    with pytest.raises(KafkaStorageError):
        records.read(0, 7)
