"""The broker's allocator tuning: applied on glibc, never over the operator's own setting."""

from __future__ import annotations

import platform

import pytest

from tierlog.allocator import pad_heap_top


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_heap_top_pad_is_set_on_glibc() -> None:
    assert pad_heap_top()


def test_an_operator_setting_in_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TOP_PAD_", "0")
    assert not pad_heap_top()
