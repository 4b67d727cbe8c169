"""Kafka's Uuid text form: base64url without padding, as the JDK prints it."""

from __future__ import annotations

import uuid

import pytest

from core.kafka_uuid import uuid_from_base64, uuid_to_base64


def test_text_is_base64url_without_padding() -> None:
    value = uuid.UUID(bytes=bytes(range(16)))
    assert uuid_to_base64(value) == "AAECAwQFBgcICQoLDA0ODw"
    assert uuid_from_base64("AAECAwQFBgcICQoLDA0ODw") == value
    assert uuid_from_base64("AAECAwQFBgcICQoLDA0ODw==") == value  # Java's decoder pads
    url_chars = uuid.UUID(bytes=b"\xfb\xff" * 8)
    assert uuid_to_base64(url_chars) == "-__7__v_-__7__v_-__7_w"  # no "+" or "/"


def test_matches_kafkas_uuid_to_string() -> None:
    # Uuid.toString() of these ids, computed with the JDK.
    assert uuid_to_base64(uuid.UUID("123e4567-e89b-12d3-a456-426614174000")) == (
        "Ej5FZ-ibEtOkVkJmFBdAAA"
    )
    assert uuid_to_base64(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"


@pytest.mark.parametrize(
    "bad", ["", "AAECAwQFBgcICQoLDA0OD", "AAECAwQFBgcICQoLDA0OD+", "x" * 23, "x" * 25]
)
def test_from_text_rejects_what_is_not_a_uuid(bad: str) -> None:
    with pytest.raises(ValueError):
        uuid_from_base64(bad)
