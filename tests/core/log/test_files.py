"""Names of partition directories and segment files: parsed whole, ASCII digits only.

Property: a directory name is parsed as a partition exactly when it is what
``partition_dir_name`` makes of a legal topic name and a partition in 0..2^31-1, so the
loader never takes a stray directory (``evil\\n-0``, ``x-abc``, ``topic-٣``) for a partition.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from core.log.files import (
    deleted_dir_name,
    filename_prefix,
    is_deleted_partition_dir,
    parse_offset_file,
    parse_partition_dir,
    partition_dir_name,
)
from core.topic_name import is_legal_topic_name

LEGAL = sorted(string.ascii_letters + string.digits + "._-")
LEGAL_TOPICS = st.text(st.sampled_from(LEGAL), min_size=1, max_size=249).filter(
    lambda t: t not in (".", "..")
)
PARTITIONS = st.integers(0, (1 << 31) - 1)
HOSTILE = st.one_of(
    st.characters(categories=["Cc", "Cf", "Zs", "Zl", "Zp", "Nd", "No"]),
    st.characters(min_codepoint=0x80),
    st.sampled_from(LEGAL + list("-\n\r\t\x00 /")),
)


@given(LEGAL_TOPICS, PARTITIONS)
def test_legal_partition_dirs_round_trip(topic: str, partition: int) -> None:
    assert parse_partition_dir(partition_dir_name(topic, partition)) == (topic, partition)


@given(st.text(HOSTILE, max_size=60))
@example("evil\n-0")
@example("evil-0\n")
@example("x-abc")
@example("notapartition")
@example("t-01")
@example("t-+1")
@example("t-\u0663")  # Arabic-Indic three
@example("t-\uff11")  # fullwidth one
@example("t-2147483648")
@example("-0")
@example(".-0")
def test_a_directory_is_a_partition_only_if_the_broker_could_have_made_it(name: str) -> None:
    parsed = parse_partition_dir(name)
    if parsed is not None:
        topic, partition = parsed
        assert is_legal_topic_name(topic)
        assert 0 <= partition < 1 << 31
        assert partition_dir_name(topic, partition) == name


@pytest.mark.parametrize(
    "name",
    [
        "evil\n-0",
        "evil-0\n",
        "a\rb-0",
        "a\tb-0",
        "a\x00b-0",
        "t\u0435st-0",
        "x-abc",
        "notapartition",
        "t-01",
        "t-\u0663",
        "t-2147483648",
        "..-0",
    ],
)
def test_stray_directories_are_not_partitions(name: str) -> None:
    assert parse_partition_dir(name) is None


def test_partition_numbers_and_topics_with_dashes() -> None:
    assert parse_partition_dir("a-b-1") == ("a-b", 1)
    assert parse_partition_dir("t--1") == ("t-", 1)
    assert parse_partition_dir("t-2147483647") == ("t", (1 << 31) - 1)


@given(st.integers(0, (1 << 63) - 1), st.sampled_from([".log", ".index", ".timeindex"]))
def test_segment_file_names_round_trip(offset: int, suffix: str) -> None:
    assert parse_offset_file(filename_prefix(offset) + suffix) == (offset, suffix, "")
    assert parse_offset_file(filename_prefix(offset) + suffix + ".deleted") == (
        offset,
        suffix,
        ".deleted",
    )


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000000.log\n",
        "00000000000000000000.log.deleted\n",
        "\u0660" * 20 + ".log",  # Arabic-Indic zeros
        "0000000000000000000\u0661.log",
        "00000000000000000000.LOG",
        "0000000000000000000.log",
    ],
)
def test_segment_file_names_are_matched_whole_with_ascii_digits(name: str) -> None:
    assert parse_offset_file(name) is None


def test_deleted_dirs_are_recognised_only_in_the_form_the_broker_makes() -> None:
    name = deleted_dir_name("orders-3", "0123456789abcdef0123456789abcdef")
    assert name == "orders-3.0123456789abcdef0123456789abcdef-delete"
    assert is_deleted_partition_dir(name)
    for other in ("backup-delete", "orders-3.xyz-delete", "evil\n-0." + "0" * 32 + "-delete"):
        assert not is_deleted_partition_dir(other)
