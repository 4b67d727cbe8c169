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

Values that start with ``-``: every parser is a ``cli.ArgumentParser`` (subparsers inherit
the class), which reads a token as an option only when it names an option of the parser at
hand: exactly (``--json``, ``-h``), before ``=`` (``--topic=orders``), as an unambiguous
abbreviation of a long option (``--bootstrap``), or as a short option that takes a value
with the value attached (``-n5``). Any other token is a value, wherever it stands: a Kafka
segment id pasted from ``metadata list`` (one in 64 starts with ``-``, e.g.
``-MdUsmu0RX-gkKOrscJWUA``), a group id or topic name such as ``-orders``, a file such as
``-1.log``. Plain argparse takes such a token for an unknown option and fails with a usage
error. A value that does collide with an option (a group named ``--json``) goes after
``--``, which ends the options as usual: ``tierlog groups describe --bootstrap-server H:P
-- --json``. Short options cannot be bundled (``-hv``); no tierlog command has two.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

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
    "tierlog.restore_cmd",
    "tierlog.cluster_cmd",
    "tierlog.transactions_cmd",
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


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but a token is an option only if it names one of this parser's
    options (see the module docstring); anything else starting with ``-`` is a value."""

    def _parse_optional(self, arg_string: str) -> Any:
        # argparse's one hook deciding "option or value" for each token (it returns None
        # for a value). It is private, but subclasses overriding it only to return None
        # earlier stay correct whatever shape its other results take.
        if arg_string[:1] == "-" and arg_string != "--" and not self.names_an_option(arg_string):
            return None
        return super()._parse_optional(arg_string)

    def names_an_option(self, token: str) -> bool:
        """Whether ``token`` is read as one of this parser's options."""
        options = self._option_string_actions
        if token in options:
            return True
        if token.startswith("--"):
            name = token.split("=", 1)[0]
            return name in options or (
                self.allow_abbrev and any(o.startswith(name) for o in options)
            )
        short = options.get(token[:2])
        return short is not None and short.nargs != 0  # -n5: -n with its value attached


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand of ``COMMANDS`` registered.

    Subcommand parsers are made with the parent's class (argparse's default), so they
    are ``cli.ArgumentParser`` too.
    """
    parser = ArgumentParser(
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
