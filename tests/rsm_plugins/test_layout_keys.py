"""Parsing object keys of the layout (what verify and restore read a listing with)."""

from __future__ import annotations

import uuid

import pytest

from core.kafka_uuid import uuid_to_base64
from rsm_plugins.layout import (
    ManifestError,
    ObjectSuffix,
    TopicManifest,
    object_key,
    parse_key,
    topic_manifest_key,
)
from tiered.api import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition

TOPIC_ID = uuid.UUID("3f1c2e4a-9b7d-4c1e-8f00-123456789abc")
SEGMENT_ID = uuid.UUID("00000000-0000-4000-8000-0000000000ff")
# A topic whose name ends like a topic id: the folder's last 22 characters are the id.
TRICKY = "orders-" + uuid_to_base64(uuid.UUID(int=5))


@pytest.mark.parametrize("topic", ["orders", TRICKY, "a.b_c-d"])
@pytest.mark.parametrize("prefix", ["", "tier/", "x"])
@pytest.mark.parametrize("suffix", list(ObjectSuffix))
def test_every_key_the_layout_writes_parses_back(topic: str, prefix: str, suffix) -> None:
    tp = TopicIdPartition(TOPIC_ID, topic, 12)
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tp, SEGMENT_ID), 1234, 2000, 0, 1, 0, 10, {0: 1234}
    )
    parsed = parse_key(prefix, object_key(prefix, md, suffix))
    assert parsed is not None
    assert (parsed.topic, parsed.topic_id, parsed.partition) == (topic, TOPIC_ID, 12)
    assert parsed.stem == (1234, SEGMENT_ID) and parsed.suffix == suffix.value
    manifest = parse_key(prefix, topic_manifest_key(prefix, topic, TOPIC_ID))
    assert manifest is not None and manifest.is_topic_manifest and manifest.topic == topic


@pytest.mark.parametrize(
    "key",
    [
        "other/orders-{id}/0/{off}-{sid}.log",  # another prefix
        "tier/orders/0/{off}-{sid}.log",  # no topic id
        "tier/orders-{id}/007/{off}-{sid}.log",  # not a partition number as written
        "tier/orders-{id}/0/{off}-{sid}",  # no suffix
        "tier/orders-{id}/0/123-{sid}.log",  # offset not 20 digits
        "tier/orders-{id}/0/sub/{off}-{sid}.log",  # a deeper folder
        "tier/orders-{id}/README.txt",
        "tier/bad name-{id}/0/{off}-{sid}.log",  # illegal topic name
        "tier/orders-{badid}/0/{off}-{sid}.log",  # not the canonical text of a uuid
    ],
)
def test_keys_the_layout_never_writes_are_not_parsed(key: str) -> None:
    text = uuid_to_base64(TOPIC_ID)
    # The last character carries 2 bits and 4 zero bits: setting one names the same 128 bits.
    bad = text[:-1] + chr(ord(text[-1]) + 1)
    key = key.format(id=text, badid=bad, off=f"{1:020d}", sid=uuid_to_base64(SEGMENT_ID))
    assert parse_key("tier/", key) is None


def test_topic_manifest_round_trip_and_validation() -> None:
    manifest = TopicManifest(TOPIC_ID, "orders", 3, {"b": "2", "a": "1"}, 99, 4)
    assert TopicManifest.from_json(manifest.to_json()) == manifest
    for broken in (b"{", b'{"version": 2}', b'{"version": 1, "topicId": "x"}'):
        with pytest.raises(ManifestError):
            TopicManifest.from_json(broken)
    doc = manifest.to_json().replace(b'"partitions": 3', b'"partitions": "3"')
    with pytest.raises(ManifestError, match="partitions"):
        TopicManifest.from_json(doc)
