"""The ``tierlog`` command line: one argparse subcommand per module.

Each subcommand lives in its own module, listed in ``COMMANDS``, which exposes::

    def register(subparsers: Subparsers) -> None

``register`` adds the command's parser and sets its handler with
``parser.set_defaults(handler=run)``, where ``run(args: argparse.Namespace) -> int`` returns
the exit status. Every module is imported to build the parser, so a command that needs heavy
dependencies (pyspark, boto3) imports them inside its handler: ``tierlog dump-log`` must not
pay for starting Spark.

Exit statuses: 0 success; 1 the input was bad (a missing or corrupt file, data that fails a
check); 2 a usage error (argparse's convention); 130 interrupted. A problem the user can fix
is printed as one line on stderr, ``tierlog: error: ...``, never as a traceback: handlers
raise ``CommandError`` for it, or report it themselves and return 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

PROG = "tierlog"

EXIT_OK = 0
EXIT_BAD_DATA = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

COMMANDS: tuple[str, ...] = (
    "tierlog.broker_cmd",
    "tierlog.dump_log",
    "tierlog.metadata_cmd",
    "tierlog.export_cmd",
    "tierlog.groups_cmd",
)
"""Modules that register a subcommand, in the order ``--help`` lists them."""

# argparse exposes no public name for the object add_subparsers returns.
Subparsers = argparse._SubParsersAction


class CommandError(Exception):
    """A problem the user can fix; ``main`` prints it as one line and exits with ``exit_code``.

    Args:
        message: what is wrong, naming the file or option concerned.
        exit_code: ``EXIT_BAD_DATA`` (the default) or ``EXIT_USAGE``.
    """

    def __init__(self, message: str, exit_code: int = EXIT_BAD_DATA) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def positive_int(text: str) -> int:
    """An argparse ``type`` for options that take a count."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def error_line(message: str) -> str:
    """The one-line form every user-facing error takes on stderr."""
    return f"{PROG}: error: {message}"


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand of ``COMMANDS`` registered."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A Kafka-compatible log broker with KIP-405 tiered storage.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tierlog`` command with ``argv`` (default ``sys.argv[1:]``).

    Returns:
        The exit status; the console script passes it to ``sys.exit``.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        # argparse exits on --help (0) and on usage errors (2, after printing the usage
        # and a "tierlog: error: ..." line); return the status so that callers and tests
        # embedding main() are not torn down by SystemExit.
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        return int(args.handler(args))
    except CommandError as e:
        print(error_line(str(e)), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(error_line("interrupted"), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`tierlog dump-log ... | head`): not an error worth a
        # traceback. Point stdout at /dev/null so the interpreter's final flush does not
        # raise again (the recipe of the Python docs on SIGPIPE).
        _silence_stdout()
        return EXIT_BAD_DATA


def _silence_stdout() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (captured in tests): nothing will be flushed to a pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
