"""Kafka's topic name rule, checked against an independent oracle on arbitrary unicode.

The oracle is Kafka's rule spelled with set membership instead of a regex: 1 to 249
characters, each in ASCII [a-zA-Z0-9._-], and not "." or "..". Hostile names (control
characters, separators, a trailing newline, look-alikes of legal letters and digits) are
generated on purpose, since a regex anchored with ``$`` and applied with ``re.match``
accepted "evil\\n".
"""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from core.server.topics import InvalidTopicError as ServerInvalidTopicError
from core.server.topics import validate_topic_name as server_validate_topic_name
from core.topic_name import (
    MAX_TOPIC_NAME_LENGTH,
    InvalidTopicError,
    illegal_topic_name_reason,
    is_legal_topic_name,
    validate_topic_name,
)

LEGAL_CHARACTERS = frozenset(string.ascii_letters + string.digits + "._-")

# Characters a hostile name is made of: control characters (C*), separators (Z*: spaces,
# line and paragraph separators), anything non-ASCII, and the legal ones to mix them with.
HOSTILE_CHARACTERS = st.one_of(
    st.characters(categories=["Cc", "Cf", "Co", "Cs", "Zs", "Zl", "Zp"]),
    st.characters(min_codepoint=0x80),
    st.sampled_from(sorted(LEGAL_CHARACTERS) + list("\n\r\t\x00\x0b\x0c /\\:;,")),
)
ANY_TEXT = st.text(HOSTILE_CHARACTERS, max_size=300)
LEGAL_NAMES = st.text(st.sampled_from(sorted(LEGAL_CHARACTERS)), min_size=1, max_size=249)

LOOK_ALIKES = [
    "t\u0435st",  # Cyrillic small ie
    "\uff54\uff45\uff53\uff54",  # fullwidth "test"
    "topic\u0663",  # Arabic-Indic digit three
    "topic\u00b2",  # superscript two: str.isdigit() is true
    "t\u0131tle",  # dotless i
    "caf\u00e9",
    "a\u200bb",  # zero-width space
    "a\u2028b",  # line separator
    "a\u00a0b",  # no-break space
]
CONTROL_NAMES = ["evil\n", "evil\r", "evil\r\n", "a\rb", "a\tb", "a\x00b", "\nevil", "a b"]


def kafka_accepts(name: str) -> bool:
    return (
        1 <= len(name) <= MAX_TOPIC_NAME_LENGTH
        and name not in (".", "..")
        and all(c in LEGAL_CHARACTERS for c in name)
    )


@given(ANY_TEXT)
@example("evil\n")
@example("a" * 249)
@example("a" * 250)
@example(".")
@example("..")
@example("...")
def test_exactly_kafkas_names_are_accepted(name: str) -> None:
    assert is_legal_topic_name(name) is kafka_accepts(name)
    if kafka_accepts(name):
        validate_topic_name(name)
    else:
        with pytest.raises(InvalidTopicError) as caught:
            validate_topic_name(name)
        assert caught.value.error_code == 17
        assert str(caught.value) == illegal_topic_name_reason(name)


@given(LEGAL_NAMES, st.sampled_from(["\n", "\r", "\r\n", "\t", "\x00", " ", "\u2028", "\x85"]))
def test_a_legal_name_with_a_control_character_or_separator_anywhere_is_refused(
    name: str, bad: str
) -> None:
    for at in (0, len(name) // 2, len(name)):
        with pytest.raises(InvalidTopicError):
            validate_topic_name(name[:at] + bad + name[at:])


@pytest.mark.parametrize("name", CONTROL_NAMES + LOOK_ALIKES)
def test_hostile_names_are_refused_with_kafkas_message(name: str) -> None:
    with pytest.raises(InvalidTopicError, match="contains a character other than ASCII"):
        validate_topic_name(name)


def test_the_server_uses_the_same_rule() -> None:
    assert server_validate_topic_name is validate_topic_name
    assert ServerInvalidTopicError is InvalidTopicError
