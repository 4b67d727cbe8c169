"""Java-properties text (``java.util.Properties``): reading and writing, as Kafka's files use it.

One implementation for every properties file tierlog reads or writes: the broker's
``server.properties`` and each log dir's ``meta.properties``.

Reading follows ``Properties.load``:

- Lines are ended by ``\\n``, ``\\r`` or ``\\r\\n``. Leading whitespace (space, tab, form
  feed) is ignored. A line whose first non-blank character is ``#`` or ``!`` is a comment;
  blank lines are skipped.
- A line ending in an odd number of backslashes continues on the next line; the backslash
  and the next line's leading whitespace are dropped. A comment line never continues.
- The key ends at the first unescaped ``=``, ``:`` or whitespace. The separator is any run
  of whitespace, then at most one ``=`` or ``:``, then any whitespace. ``key`` alone on a
  line has the value ``""``.
- Escapes in keys and values: ``\\t \\n \\r \\f``, ``\\uXXXX`` (UTF-16 code units; a
  surrogate pair becomes one character), and a backslash before any other character stands
  for that character (``\\=``, ``\\:``, ``\\#``, ``\\ ``, ``\\\\``). A ``\\u`` not followed by
  four hex digits is an error, as in Java.
- Trailing whitespace of a value is kept, as Java keeps it; typed config parsing trims it.
- A key given twice: the last value wins.

Files are read as UTF-8 (Java's ``load(InputStream)`` assumes ISO-8859-1; UTF-8 is what
people write today, and ``\\uXXXX`` escapes read the same either way).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from core.errors import InvalidConfigError

__all__ = [
    "PropertiesFileError",
    "PropertiesSyntaxError",
    "escape",
    "format_properties",
    "parse_properties",
    "read_properties",
]

_WHITESPACE = " \t\f"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPED_ON_WRITE = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


class PropertiesSyntaxError(ValueError):
    """Text that ``Properties.load`` would reject (a malformed ``\\uXXXX`` escape)."""


class PropertiesFileError(InvalidConfigError):
    """A properties file that is missing, unreadable, not UTF-8 or malformed; names the file."""


# -- reading ----------------------------------------------------------------------------------


def _logical_lines(text: str) -> list[str]:
    """Join continuation lines and drop comments and blank lines."""
    result: list[str] = []
    pending: str | None = None
    for raw in _LINE_BREAK.split(text):
        line = raw.lstrip(_WHITESPACE)
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        result.append((pending or "") + line)
        pending = None
    if pending is not None:
        result.append(pending)
    return result


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 == len(text):  # a lone trailing backslash (end of input) is dropped
            break
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if _HEX4.fullmatch(digits) is None:
                raise PropertiesSyntaxError(f"malformed \\uxxxx escape: {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    result = "".join(out)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in result):
        # Java strings are UTF-16: a \uD83D\uDE00 pair is one character.
        result = result.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return result


def _split_key(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    j = i
    while j < len(line) and line[j] in _WHITESPACE:
        j += 1
    if j < len(line) and line[j] in "=:":
        j += 1
    while j < len(line) and line[j] in _WHITESPACE:
        j += 1
    return key, line[j:]


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text into a dict, in file order (module docstring for the rules).

    Raises:
        PropertiesSyntaxError: a malformed ``\\uXXXX`` escape.
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key(line)
        props[_unescape(key)] = _unescape(value)
    return props


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a UTF-8 Java-properties file.

    Raises:
        PropertiesFileError: the file is missing, unreadable, not UTF-8 or malformed; the
            message names the file.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise PropertiesFileError(f"properties file {path} does not exist") from e
    except OSError as e:
        raise PropertiesFileError(f"cannot read properties file {path}: {e.strerror}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PropertiesFileError(
            f"properties file {path} is not valid UTF-8 (byte {e.start})"
        ) from e
    try:
        return parse_properties(text)
    except PropertiesSyntaxError as e:
        raise PropertiesFileError(f"properties file {path}: {e}") from e


# -- writing ----------------------------------------------------------------------------------


def escape(text: str, *, key: bool = False) -> str:
    """Escape a key or value as ``Properties.store`` does; ``parse_properties`` reads it back.

    Backslash, tab, line breaks, form feed and ``= : # !`` are escaped everywhere; a space
    everywhere in a key but only at the start of a value; other control characters as
    ``\\uXXXX``. Non-ASCII characters are written as they are (the file is UTF-8).
    """
    out: list[str] = []
    for i, c in enumerate(text):
        if c in _ESCAPED_ON_WRITE:
            out.append(_ESCAPED_ON_WRITE[c])
        elif c in "=:#!":
            out.append("\\" + c)
        elif c == " " and (key or i == 0):
            out.append("\\ ")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def format_properties(props: Mapping[str, str], header_comment: str | None = None) -> str:
    """Properties text: the header comment (each of its lines prefixed ``#``), then one
    ``key=value`` line per entry in the mapping's order, each line ending in ``\\n``.
    """
    lines: list[str] = []
    if header_comment is not None:
        lines += ["#" + line for line in _LINE_BREAK.split(header_comment)]
    lines += [f"{escape(k, key=True)}={escape(v)}" for k, v in props.items()]
    return "".join(line + "\n" for line in lines)
