"""docs/CONFIGURATION.md shows every key as declared (run `python -m tierlog.config_docs`)."""

from __future__ import annotations

from tierlog.config_docs import DOC, render


def test_configuration_tables_match_the_declarations():
    text = DOC.read_text()
    assert render(text) == text, "stale tables: run `python -m tierlog.config_docs`"


def test_inert_keys_and_only_they_read_accepted_no_effect():
    from core.log.config import TOPIC_CONFIG
    from core.server.config import BROKER_CONFIG

    rows = {}
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            rows.setdefault(line.split("`")[1], []).append(line)
    for key in [*BROKER_CONFIG, *TOPIC_CONFIG]:
        assert rows[key.name], key.name
        for row in rows[key.name]:
            assert ("accepted, no effect" in row) == key.inert, row
    assert BROKER_CONFIG["num.io.threads"].inert
    assert not BROKER_CONFIG["log.cleaner.enable"].inert  # the cleaner reads it
