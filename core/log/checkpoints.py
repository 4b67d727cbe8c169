"""Kafka's text checkpoint files: one layout, several entry formats.

Every checkpoint Kafka keeps as text (``CheckpointFile`` in server-common) has this layout,
UTF-8, one item per line, each line ended by ``\\n``::

    <version>          int32, decimal
    <count>            int32, decimal: number of entry lines that follow
    <entry>            ``count`` lines, fields separated by one space

Entry formats built on it:

- ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``replication-offset-checkpoint`` (per log dir, version 0): ``<topic> <partition> <offset>``
  (``OffsetCheckpointFile``).
- ``leader-epoch-checkpoint`` (per partition, version 0): ``<epoch> <start offset>``
  (``core.log.leader_epoch.LeaderEpochCheckpointFile``).

Reading follows Kafka's ``CheckpointReadBuffer``: an empty file, or one holding only the
version line, reads as no entries; a wrong version, a malformed line, or a count that differs
from the number of entry lines is an error. Fields are split on runs of whitespace, and
numbers are plain decimal (an optional sign, ASCII digits), as Java's ``parseInt``/``parseLong``
accept them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from core.errors import CorruptCheckpointError, KafkaStorageError
from core.fs import atomic_write

T = TypeVar("T")

OFFSET_CHECKPOINT_VERSION = 0

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Java's BufferedReader.readLine ends a line at \n, \r or \r\n and nothing else; str.splitlines
# would also split at \x0b, \x1c, \u2028, ... and accept files Kafka rejects.
_LINE_END = re.compile(r"\r\n|\r|\n")
# Java's \s: the six ASCII whitespace characters only.
_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def parse_decimal(text: str, lo: int, hi: int) -> int | None:
    """``text`` as an integer in ``[lo, hi]`` with Java's rules, or None if it is not one."""
    if _DECIMAL.fullmatch(text) is None:
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def split_fields(line: str) -> list[str]:
    """Split an entry line like Java's ``Pattern.compile("\\\\s+").split(line)``.

    Leading whitespace yields an empty first field (so the line is malformed, as in Kafka);
    trailing empty fields are dropped, as Java's ``split`` drops them.
    """
    fields = _WHITESPACE.split(line)
    while fields and fields[-1] == "":
        fields.pop()
    return fields


@dataclass(frozen=True, slots=True)
class CheckpointFormat(Generic[T]):
    """How the entries of one kind of checkpoint map to lines.

    Attributes:
        version: the version the file must carry (the first line).
        to_line: an entry as its line, without the line end.
        from_line: a line as an entry, or None when the line is malformed.
    """

    version: int
    to_line: Callable[[T], str]
    from_line: Callable[[str], T | None]

    def encode(self, entries: Iterable[T]) -> bytes:
        """The whole file for ``entries``, byte for byte as Kafka writes it."""
        lines = [self.to_line(e) for e in entries]
        out = [str(self.version), str(len(lines)), *lines]
        return ("\n".join(out) + "\n").encode("utf-8")

    def decode(self, data: bytes, source: str) -> list[T]:
        """Parse a whole file; ``source`` names it in error messages.

        Raises:
            CorruptCheckpointError: bad UTF-8, a wrong version, a malformed line or a count
                that does not match the entry lines; the message names ``source`` and the line.
        """
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError(
                f"checkpoint file {source} is not valid UTF-8 at byte {e.start}"
            ) from e
        if not text:
            return []
        lines = _LINE_END.split(text)
        if lines[-1] == "":  # the end of the last line, not an empty line
            lines.pop()

        def malformed(number: int, what: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(
                f"malformed line {number} in checkpoint file {source}: {what}: "
                f"{lines[number - 1]!r}"
            )

        version = parse_decimal(lines[0], INT32_MIN, INT32_MAX)
        if version is None:
            raise malformed(1, "version is not an int32")
        if version != self.version:
            raise CorruptCheckpointError(
                f"unrecognised version {version} in checkpoint file {source}, "
                f"expected version {self.version}"
            )
        if len(lines) < 2:
            return []
        count = parse_decimal(lines[1], INT32_MIN, INT32_MAX)
        if count is None:
            raise malformed(2, "entry count is not an int32")
        entries: list[T] = []
        for number in range(3, len(lines) + 1):
            entry = self.from_line(lines[number - 1])
            if entry is None:
                raise malformed(number, "not a valid entry")
            entries.append(entry)
        if len(entries) != count:
            raise CorruptCheckpointError(
                f"expected {count} entries in checkpoint file {source}, but found {len(entries)}"
            )
        return entries


class CheckpointFile(Generic[T]):
    """A checkpoint file on disk in a given ``CheckpointFormat``.

    Writes replace the file atomically (``core.fs.atomic_write``): a reader, or a broker
    restarting after a crash, sees the old or the new file, never a torn one. Concurrent
    writers must be serialized by the caller, as Kafka does with a lock per file.
    """

    def __init__(self, path: str | os.PathLike[str], fmt: CheckpointFormat[T]) -> None:
        self.path = Path(path)
        self.format = fmt

    def read(self) -> list[T]:
        """The entries in file order; no file reads as no entries.

        Raises:
            CorruptCheckpointError: the file is malformed (see ``CheckpointFormat.decode``).
            KafkaStorageError: the file exists but cannot be read.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise KafkaStorageError(f"cannot read checkpoint file {self.path}: {e}") from e
        return self.format.decode(data, str(self.path))

    def write(self, entries: Iterable[T], *, durable: bool = True) -> None:
        """Replace the file with ``entries``; with ``durable``, fsync file and directory.

        Raises:
            KafkaStorageError: the file could not be written; the old file is then intact.
        """
        data = self.format.encode(entries)
        try:
            atomic_write(self.path, data, durable=durable)
        except OSError as e:
            raise KafkaStorageError(f"cannot write checkpoint file {self.path}: {e}") from e


# -- offset checkpoints -------------------------------------------------------------------------

TopicPartition = tuple[str, int]


def _offset_to_line(entry: tuple[TopicPartition, int]) -> str:
    (topic, partition), offset = entry
    return f"{topic} {partition} {offset}"


def _offset_from_line(line: str) -> tuple[TopicPartition, int] | None:
    fields = split_fields(line)
    if len(fields) != 3 or not fields[0]:
        return None
    partition = parse_decimal(fields[1], INT32_MIN, INT32_MAX)
    offset = parse_decimal(fields[2], INT64_MIN, INT64_MAX)
    if partition is None or offset is None:
        return None
    return (fields[0], partition), offset


OFFSET_CHECKPOINT_FORMAT: CheckpointFormat[tuple[TopicPartition, int]] = CheckpointFormat(
    OFFSET_CHECKPOINT_VERSION, _offset_to_line, _offset_from_line
)


class OffsetCheckpointFile:
    """A per-log-dir offset checkpoint (recovery point, log start offset, replication offset).

    Line format ``<topic> <partition> <offset>``, version 0, as Kafka's OffsetCheckpointFile.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = CheckpointFile(path, OFFSET_CHECKPOINT_FORMAT)

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> dict[TopicPartition, int]:
        """Offsets by ``(topic, partition)``; a missing file reads as ``{}``.

        A partition listed twice keeps its last offset, as Kafka's map conversion does.

        Raises:
            CorruptCheckpointError: the file is malformed; the message names file and line.
            KafkaStorageError: the file exists but cannot be read.
        """
        return dict(self._file.read())

    def write(self, offsets: Mapping[TopicPartition, int], *, durable: bool = True) -> None:
        """Replace the file with ``offsets``, sorted by topic and partition for stable diffs.

        Raises:
            ValueError: a topic name that is empty or contains whitespace (it could not be
                read back).
            KafkaStorageError: the file could not be written; the old file is then intact.
        """
        for topic, _ in offsets:
            if not topic or _WHITESPACE.search(topic):
                raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
        self._file.write(sorted(offsets.items()), durable=durable)

    @staticmethod
    def encode(offsets: Mapping[TopicPartition, int]) -> bytes:
        """The file's bytes for ``offsets`` (sorted), without writing them."""
        return OFFSET_CHECKPOINT_FORMAT.encode(sorted(offsets.items()))
