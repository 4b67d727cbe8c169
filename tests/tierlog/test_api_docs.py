"""README.md lists what ApiVersions advertises (`python -m tierlog.api_docs` renders it)."""

from __future__ import annotations

from tierlog.api_docs import README, render


def test_readme_lists_the_advertised_api_versions():
    text = README.read_text()
    assert render(text) == text, "stale README table: run `python -m tierlog.api_docs`"
