"""Kafka's ``Uuid`` as text: base64url of the 16 bytes without padding, 22 characters.

Topic ids, segment ids, directory ids and cluster ids appear in this form wherever Kafka
prints or stores them (``meta.properties``, ``partition.metadata``, ZooKeeper, the remote
storage layout, the metadata formatter), so tierlog reads and writes them through here.
"""

from __future__ import annotations

import base64
import re
import uuid

_TEXT = re.compile(r"[A-Za-z0-9_-]{22}(==)?")


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: base64url of the 16 bytes, no padding (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_base64(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``: base64url of 16 bytes, padding optional.

    Raises:
        ValueError: not base64url, or not 16 bytes.
    """
    if _TEXT.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not a base64url-encoded 16-byte uuid")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text[:22] + "=="))
