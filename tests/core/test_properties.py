"""core.properties: Java-properties reading and writing, as java.util.Properties does it."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InvalidConfigError
from core.properties import (
    PropertiesFileError,
    PropertiesSyntaxError,
    escape,
    format_properties,
    parse_properties,
    read_properties,
)


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# hash comment\n! bang comment\n\n   \n  # indented comment\na=1\n"
    assert parse_properties(text) == {"a": "1"}


@pytest.mark.parametrize(
    "line",
    ["key=value", "key:value", "key value", "key = value", "key\t:\tvalue", "  key   value"],
)
def test_separators(line: str) -> None:
    assert parse_properties(line) == {"key": "value"}


def test_only_the_first_separator_counts() -> None:
    assert parse_properties("a = = b\nc::d\nurl=PLAINTEXT://h:1") == {
        "a": "= b",
        "c": ":d",
        "url": "PLAINTEXT://h:1",
    }


def test_key_without_value() -> None:
    assert parse_properties("lonely\nempty=\n") == {"lonely": "", "empty": ""}


def test_escapes_in_keys_and_values() -> None:
    text = r"a\=b\:c\ d=x\ty\nz\\w\#\!" + "\n" + r"e=\ leading"
    assert parse_properties(text) == {"a=b:c d": "x\ty\nz\\w#!", "e": " leading"}


def test_unicode_escapes_and_surrogate_pairs() -> None:
    text = "name=caf\\u00e9 \\u2603\nemoji=\\uD83D\\uDE00\nraw=caf\u00e9\n"
    assert parse_properties(text) == {
        "name": "caf\u00e9 \u2603",
        "emoji": "\U0001f600",
        "raw": "caf\u00e9",
    }


def test_malformed_unicode_escape_is_an_error() -> None:
    with pytest.raises(PropertiesSyntaxError, match="uxxxx"):
        parse_properties("a=\\u12G4")


def test_continuation_lines() -> None:
    text = "list=a,\\\n     b,\\\n\tc\nnext=1\n"
    assert parse_properties(text) == {"list": "a,b,c", "next": "1"}


def test_even_backslashes_do_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}


def test_continued_line_is_not_a_comment_and_comment_does_not_continue() -> None:
    text = "a=1\\\n# not a comment\n# comment \\\nb=2\n"
    assert parse_properties(text) == {"a": "1# not a comment", "b": "2"}


def test_continuation_at_end_of_input() -> None:
    assert parse_properties("a=1\\") == {"a": "1"}


def test_line_endings() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\n") == {"a": "1", "b": "2", "c": "3"}


def test_trailing_whitespace_of_a_value_is_kept_as_java_keeps_it() -> None:
    assert parse_properties("a=value  \t\nb   \n") == {"a": "value  \t", "b": ""}


def test_last_duplicate_wins() -> None:
    assert parse_properties("a=1\na=2") == {"a": "2"}


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        " leading space",
        "a=b:c#d!e",
        "tab\there",
        "line\nbreak\r\f",
        "back\\slash",
        "caf\u00e9 \u2603",
        "ctrl\x01",
        "trailing  ",
    ],
)
def test_format_round_trips(value: str) -> None:
    props = {"k": value, "key with spaces=:": value}
    assert parse_properties(format_properties(props)) == props


def test_format_layout() -> None:
    text = format_properties({"a": "1", "b": " x"}, header_comment="\nWritten by tierlog")
    assert text == "#\n#Written by tierlog\na=1\nb=\\ x\n"
    assert escape("a b", key=True) == "a\\ b" and escape("a b") == "a b"


def test_read_properties(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# c\nnode.id=3\n", encoding="utf-8")
    assert read_properties(path) == {"node.id": "3"}


def test_read_missing_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "nope.properties"
    with pytest.raises(PropertiesFileError, match=r"nope\.properties") as info:
        read_properties(path)
    assert isinstance(info.value, InvalidConfigError)


def test_read_unreadable_or_bad_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(PropertiesFileError, match=str(tmp_path)):
        read_properties(tmp_path)  # a directory
    bad = tmp_path / "latin1.properties"
    bad.write_bytes(b"a=caf\xe9\n")
    with pytest.raises(PropertiesFileError, match=r"latin1\.properties.*UTF-8"):
        read_properties(bad)
    bad.write_bytes(b"a=\\uZZZZ\n")
    with pytest.raises(PropertiesFileError, match=r"latin1\.properties"):
        read_properties(bad)
