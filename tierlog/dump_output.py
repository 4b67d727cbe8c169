"""How ``tierlog dump-log`` writes what it finds: Kafka-style text, or one JSON document per file.

Both forms stream: a dumper hands over one item (a batch, an index entry) at a time, so a
1 GiB segment never sits in memory as a list of dicts.

Text (the default) mirrors Kafka's ``kafka-dump-log.sh``: ``Dumping FILE`` then one line per
item on stdout; problems go to stderr as ``tierlog: error: FILE: ...`` (and ``tierlog:
warning: ...``), with Kafka's multi-line mismatch reports for index verification. Record keys
and values are shown as UTF-8 text, with invalid bytes as ``\\xNN`` and control characters
escaped (``\\n``, ``\\t``, ``\\x00``), so that one record stays one line. Text is for
people: use ``--json`` for exact bytes.

JSON (``--json``): one document per file, each on one line of stdout (JSON Lines)::

    {"file": "<path as given>", "type": "log" | "index" | "timeindex" | "txnindex" |
     "snapshot" | "leader-epoch-checkpoint", "baseOffset": <int or null>,
     "batches" | "entries": [...],      # "batches" for .log files, "entries" otherwise
     ...                                # per type: "sanityCheck", "mismatches", ...
     "errors": [{"message": str, "position": <byte position or null>}],
     "warnings": [str]}

Field names are those of the text form (camelCase, as Kafka prints them). Bytes (record keys,
values, header values) follow one rule: null stays null; bytes that are valid UTF-8 become a
JSON string of that text (``"abc"``); anything else becomes ``{"base64": "<standard base64>"}``.
A string thus always round-trips with ``.encode("utf-8")``, and a reader tells the two apart
by the JSON type alone.
"""

from __future__ import annotations

import base64
import json
from abc import ABC, abstractmethod
from typing import Any, TextIO

from tierlog.cli import error_line

# Control characters would break the one-line-per-record layout of the text form.
_ESCAPES = {i: f"\\x{i:02x}" for i in [*range(0x20), 0x7F]}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def text_bytes(data: bytes) -> str:
    """``data`` as printable one-line text: UTF-8, invalid bytes and controls escaped."""
    return data.decode("utf-8", "backslashreplace").translate(_ESCAPES)


def json_bytes(data: bytes) -> str | dict[str, str]:
    """``data`` in the JSON form described in the module docstring."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _json_default(obj: object) -> Any:
    if isinstance(obj, bytes | bytearray | memoryview):
        return json_bytes(bytes(obj))
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def to_json(value: Any) -> str:
    """Compact JSON with bytes encoded by ``json_bytes``."""
    return json.dumps(value, default=_json_default, separators=(",", ":"))


class Report(ABC):
    """What the dump of one file prints. Dumpers call, in order: ``begin``, then any of
    ``item``/``note``/``detail``/``set``/``error``/``warning``, then ``end`` (always).

    Args:
        path: the file as the user named it; messages and documents use it as given.
        kind: the file type (the JSON ``type``).
        items_key: the name of the JSON list of items ("batches" or "entries").
        out, err: stdout and stderr.
    """

    def __init__(self, path: str, kind: str, items_key: str, out: TextIO, err: TextIO) -> None:
        self.path = path
        self.kind = kind
        self.items_key = items_key
        self.out = out
        self.err = err
        self.failed = False

    def _named(self, message: str) -> str:
        # Core's messages usually name the file already; saying it twice reads badly.
        return message if self.path in message else f"{self.path}: {message}"

    @abstractmethod
    def begin(self, **fields: Any) -> None:
        """Start the file; ``fields`` precede the list of items in the JSON document."""

    @abstractmethod
    def item(self, fields: dict[str, Any], lines: list[str]) -> None:
        """One batch or entry: ``fields`` for JSON, ``lines`` for text."""

    @abstractmethod
    def note(self, line: str) -> None:
        """An informational line of the text form (JSON carries the same fact in a field)."""

    @abstractmethod
    def detail(self, lines: list[str]) -> None:
        """Lines for stderr in the text form only (Kafka's mismatch reports)."""

    @abstractmethod
    def set(self, **fields: Any) -> None:
        """Fields of the JSON document that follow the items."""

    def error(self, message: str, position: int | None = None) -> None:
        """A problem with the file: printed on stderr; the exit status becomes 1."""
        self.failed = True
        print(error_line(self._named(message)), file=self.err)

    def warning(self, message: str) -> None:
        """Something worth knowing that is not wrong with the file (exit status unchanged)."""
        print(f"tierlog: warning: {self._named(message)}", file=self.err)

    @abstractmethod
    def end(self) -> None:
        """Finish the file (the JSON document is written out)."""


class TextReport(Report):
    """Kafka's ``kafka-dump-log.sh`` layout, streamed line by line."""

    def begin(self, **fields: Any) -> None:
        print(f"Dumping {self.path}", file=self.out)

    def item(self, fields: dict[str, Any], lines: list[str]) -> None:
        for line in lines:
            print(line, file=self.out)

    def note(self, line: str) -> None:
        print(line, file=self.out)

    def detail(self, lines: list[str]) -> None:
        for line in lines:
            print(line, file=self.err)

    def set(self, **fields: Any) -> None:
        pass

    def end(self) -> None:
        self.out.flush()


class JsonReport(Report):
    """One JSON document per file, on one line; the item list is streamed as it grows."""

    def __init__(self, path: str, kind: str, items_key: str, out: TextIO, err: TextIO) -> None:
        super().__init__(path, kind, items_key, out, err)
        self._started = False
        self._items = 0
        self._tail: dict[str, Any] = {}
        self._errors: list[dict[str, Any]] = []
        self._warnings: list[str] = []

    def begin(self, **fields: Any) -> None:
        head = to_json({"file": self.path, "type": self.kind, **fields})
        self.out.write(f"{head[:-1]},{to_json(self.items_key)}:[")
        self._started = True

    def item(self, fields: dict[str, Any], lines: list[str]) -> None:
        self.out.write(("," if self._items else "") + to_json(fields))
        self._items += 1

    def note(self, line: str) -> None:
        pass

    def detail(self, lines: list[str]) -> None:
        pass

    def set(self, **fields: Any) -> None:
        self._tail.update(fields)

    def error(self, message: str, position: int | None = None) -> None:
        super().error(message, position)
        self._errors.append({"message": self._named(message), "position": position})

    def warning(self, message: str) -> None:
        super().warning(message)
        self._warnings.append(self._named(message))

    def end(self) -> None:
        if not self._started:  # the file could not even be opened: an empty document
            self.begin()
        tail = to_json({**self._tail, "errors": self._errors, "warnings": self._warnings})
        self.out.write(f"],{tail[1:]}\n")
        self.out.flush()
