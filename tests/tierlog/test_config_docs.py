"""docs/CONFIGURATION.md shows every key as declared (run `python -m tierlog.config_docs`)."""

from __future__ import annotations

from tierlog.config_docs import DOC, render


def test_configuration_tables_match_the_declarations():
    text = DOC.read_text()
    assert render(text) == text, "stale tables: run `python -m tierlog.config_docs`"
