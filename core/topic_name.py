"""Kafka's rule for topic names (``org.apache.kafka.common.internals.Topic.validate``).

A legal name is 1 to 249 characters, each an ASCII letter or digit, ``.``, ``_`` or ``-``,
and is neither ``.`` nor ``..``. Nothing else may become a topic: a topic name becomes a
directory name (``<topic>-<partition>``) and a field of the whitespace-separated offset
checkpoints, so a name with a newline, a space, a NUL or a path separator would break both.

The character test is a whole-string match over an explicit ASCII class: ``re.match`` with a
``$`` anchor also accepts a name ending in a newline (``$`` matches before a final ``\\n``),
and ``str.isalnum``/``\\w``/``\\d`` accept non-ASCII letters and digits.
"""

from __future__ import annotations

import re

from core.errors import CoreError

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_CHARACTERS = re.compile(r"[a-zA-Z0-9._-]+")


class InvalidTopicError(CoreError):
    """An illegal topic name (INVALID_TOPIC_EXCEPTION)."""

    error_code = 17


def illegal_topic_name_reason(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's messages), or None if it is one."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if _LEGAL_CHARACTERS.fullmatch(name) is None:
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def is_legal_topic_name(name: str) -> bool:
    return illegal_topic_name_reason(name) is None


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: legal characters, length, not '.' or '..'.

    Raises:
        InvalidTopicError: the name is illegal; the message says why.
    """
    reason = illegal_topic_name_reason(name)
    if reason is not None:
        raise InvalidTopicError(reason)
