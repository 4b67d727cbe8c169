"""The topic registry refuses illegal names, and drops one a registry file already holds."""

from __future__ import annotations

import json
import uuid

import pytest

from core.server.topics import REGISTRY_FILE, InvalidTopicError, TopicRegistry

HOSTILE = ["evil\n", "a\rb", "a\tb", "a\x00b", "t\u0435st", "\uff54", "t\u0663", ".."]


@pytest.mark.parametrize("name", HOSTILE)
def test_create_refuses_illegal_names_and_records_nothing(tmp_path, name):
    registry = TopicRegistry(tmp_path, {})
    with pytest.raises(InvalidTopicError) as caught:
        registry.create(name, 1, {})
    assert caught.value.error_code == 17
    assert registry.get(name) is None
    assert not (tmp_path / REGISTRY_FILE).exists()


def test_an_illegal_name_in_the_registry_file_is_dropped_with_a_warning(tmp_path, caplog):
    registry = TopicRegistry(tmp_path, {})
    registry.create("orders", 2, {})
    doc = json.loads((tmp_path / REGISTRY_FILE).read_text())
    # What a tierlog that checked names with a "$"-anchored re.match could have written.
    doc["topics"]["evil\n"] = dict(doc["topics"]["orders"], id=str(uuid.uuid4()))
    (tmp_path / REGISTRY_FILE).write_text(json.dumps(doc))

    with caplog.at_level("WARNING", logger="core.server.topics"):
        reloaded = TopicRegistry(tmp_path, {})
    assert [t.name for t in reloaded.all()] == ["orders"]
    assert "'evil\\n' has an illegal name" in caplog.text
    reloaded.bump_leader_epochs()  # the broker saves at every start
    assert list(json.loads((tmp_path / REGISTRY_FILE).read_text())["topics"]) == ["orders"]
