"""``tierlog.cli``: which tokens are options, for every command.

A token is an option only when it names one of the command's options; any other token that
starts with ``-`` is a value (a segment id, a group id, a topic name, a file). The commands'
own tests run these cases end to end; here the rule itself, on the parsers of every command.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import pytest

from tierlog.cli import ArgumentParser, build_parser, main


def parsers(parser: argparse.ArgumentParser, path: str = "tierlog") -> Iterator[tuple[str, Any]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, f"{path} {name}")


def test_every_command_parser_applies_the_rule() -> None:
    # A command added later gets the rule without doing anything (subparsers inherit the
    # class): no parser may be a plain argparse.ArgumentParser.
    found = dict(parsers(build_parser()))
    assert {"tierlog metadata describe", "tierlog groups describe", "tierlog dump-log"} <= set(
        found
    )
    plain = [path for path, p in found.items() if not isinstance(p, ArgumentParser)]
    assert plain == []


@pytest.fixture
def describe() -> ArgumentParser:
    found = dict(parsers(build_parser()))
    return found["tierlog metadata describe"]


@pytest.mark.parametrize(
    ("token", "is_option"),
    [
        ("--json", True),
        ("--log-dirs", True),
        ("--bootstrap-server=h:1", True),  # an option with its value attached
        ("--bootstrap", True),  # an unambiguous abbreviation, as argparse allows
        ("-h", True),
        ("--help", True),
        ("-MdUsmu0RX-gkKOrscJWUA", False),  # a segment id pasted from `metadata list`
        ("--MdUsmu0RX-gkKOrscJWA", False),
        ("-hdUsmu0-X-gkKOrscJWUA", False),  # -h takes no value: not "-h" + "dUs..."
        ("-1", False),
        ("-", False),
        ("--jsn", False),  # not an option of this command
    ],
)
def test_which_tokens_name_an_option(describe: ArgumentParser, token: str, is_option: bool):
    assert describe.names_an_option(token) is is_option


def test_option_values_may_start_with_a_dash() -> None:
    args = build_parser().parse_args(
        ["export", "--config", "s.properties", "--topic", "-orders", "--output=-out"]
    )
    assert (args.topic, args.output) == ("-orders", "-out")
    args = build_parser().parse_args(
        ["metadata", "list", "--bootstrap-server", "h:1", "--topic", "--orders"]
    )
    assert args.topic == "--orders"


def test_help_and_usage_errors_are_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata", "describe", "-h"]) == 0
    assert capsys.readouterr().out.startswith("usage: tierlog metadata describe ")
    assert main(["metadata", "list", "--bootstrap-server", "h:1", "--jsn"]) == 2
    assert capsys.readouterr().err.endswith("error: unrecognized arguments: --jsn\n")
    # An ambiguous abbreviation is still refused (--print-partition, --print-offset, ...).
    assert main(["metadata", "dump", "--bootstrap-server", "h:1", "--print"]) == 2
    assert "ambiguous option: --print could match" in capsys.readouterr().err
