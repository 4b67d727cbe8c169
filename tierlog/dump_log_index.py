"""``.index`` and ``.timeindex`` for ``tierlog dump-log``: listing, sanity check, verification.

As Kafka's DumpLogSegments does, every entry is checked against the segment's ``.log``:

- offset index: the batch starting at the entry's position must end at the entry's offset
  (the segment writes ``(last offset of the batch, its position)``);
- time index: the batch ending at the entry's offset must have the entry's timestamp as its
  max timestamp, and timestamps must increase.

Mismatches are printed on stderr in Kafka's words ("Mismatches in :FILE", "Index offset: X,
log offset: Y", ...) followed by one ``tierlog: error:`` line; in JSON they are the document's
``mismatches`` list. An index that fails the broker's sanity check is reported and not listed:
its reader only exposes the entries before the damage, and the broker would rebuild the file.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.log.file_records import FileRecords
from core.log.offset_index import OffsetIndex
from core.log.time_index import NO_TIMESTAMP, TimeIndex
from core.records.batch import HEADER_SIZE
from tierlog.dump_output import Report


@dataclass(frozen=True, slots=True)
class ScannedBatch:
    position: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class LogScan:
    """The batch headers of a ``.log``, up to where the data stops framing as batches."""

    batches: list[ScannedBatch] = field(default_factory=list)
    torn_at: int | None = None  # byte position where framing breaks, if it does


def scan_log(path: Path) -> LogScan:
    """Read the header of every batch of ``path`` (headers only: CRCs are not checked).

    Raises:
        KafkaStorageError: the file cannot be opened.
    """
    records = FileRecords(path, create=False)
    scan = LogScan()
    try:
        end = records.size
        valid = 0
        for position, header in records.batch_headers():
            size = header.size_in_bytes
            if size < HEADER_SIZE or position + size > end:
                break
            scan.batches.append(ScannedBatch(position, header.last_offset, header.max_timestamp))
            valid = position + size
        if valid < end:
            scan.torn_at = valid
    finally:
        records.close()
    return scan


def _scan_sibling(log_path: Path, report: Report, verify_only: bool) -> LogScan | None:
    """The sibling log's batches, or None (reported) when there is no log to check against."""
    if not log_path.is_file():
        message = f"the entries cannot be checked: the log {log_path} does not exist"
        if verify_only:
            report.error(message)
        else:
            report.warning(message)
        return None
    scan = scan_log(log_path)
    if scan.torn_at is not None:
        report.warning(
            f"the log {log_path} stops framing as batches at byte {scan.torn_at}; "
            "entries beyond it cannot match"
        )
    return scan


def _start(index: OffsetIndex | TimeIndex, report: Report, sanity_only: bool) -> bool:
    """Run the sanity check; True when the entries should be listed and verified."""
    index.sanity_check()  # raises CorruptIndexError naming the file and the problem
    if sanity_only:
        report.note(f"{index.path} passed sanity check.")
        report.set(sanityCheck="passed")
        return False
    if index.entries == 0:
        report.note(f"{index.path} is empty.")
        return False
    return True


def dump_offset_index(
    index: OffsetIndex, log_path: Path, report: Report, sanity_only: bool, verify_only: bool
) -> None:
    if not _start(index, report, sanity_only):
        return
    scan = _scan_sibling(log_path, report, verify_only)
    by_position = {b.position: b for b in scan.batches} if scan else {}
    mismatches: list[dict[str, Any]] = []
    for i in range(index.entries):
        entry = index.entry(i)
        if not verify_only:
            report.item(
                {"offset": entry.offset, "position": entry.position},
                [f"offset: {entry.offset} position: {entry.position}"],
            )
        # A negative position is wrong whatever the log holds (the reader lets it through).
        if scan is None and entry.position >= 0:
            continue
        batch = by_position.get(entry.position)
        if batch is None or batch.last_offset != entry.offset:
            mismatches.append(
                {
                    "entry": i,
                    "indexOffset": entry.offset,
                    "position": entry.position,
                    "logOffset": batch.last_offset if batch else None,
                }
            )
    report.set(mismatches=mismatches)
    if not mismatches:
        if verify_only and scan is not None:
            report.note(f"All {index.entries} entries of {index.path} match {log_path}.")
        return
    lines = [f"Mismatches in :{index.path.absolute()}"]
    for m in mismatches:
        why = "is negative" if m["position"] < 0 else "is not the start of a batch"
        log_offset = (
            m["logOffset"]
            if m["logOffset"] is not None
            else f"none (position {m['position']} {why})"
        )
        lines.append(f"  Index offset: {m['indexOffset']}, log offset: {log_offset}")
    report.detail(lines)
    first = mismatches[0]
    report.error(
        f"{len(mismatches)} of {index.entries} index entries do not match the log {log_path} "
        f"(first: entry {first['entry']}, offset {first['indexOffset']} at position "
        f"{first['position']})"
    )


def dump_time_index(
    index: TimeIndex, log_path: Path, report: Report, sanity_only: bool, verify_only: bool
) -> None:
    if not _start(index, report, sanity_only):
        return
    scan = _scan_sibling(log_path, report, verify_only)
    batches = scan.batches if scan else []
    last_offsets = [b.last_offset for b in batches]
    problems: list[dict[str, Any]] = []
    previous = NO_TIMESTAMP
    for i in range(index.entries):
        entry = index.entry(i)
        if not verify_only:
            report.item(
                {"timestamp": entry.timestamp, "offset": entry.offset},
                [f"timestamp: {entry.timestamp} offset: {entry.offset}"],
            )
        base = {"entry": i, "indexTimestamp": entry.timestamp, "indexOffset": entry.offset}
        if previous >= entry.timestamp:
            problems.append(
                {**base, "problem": "outOfOrderTimestamp", "previousTimestamp": previous}
            )
        previous = entry.timestamp
        if scan is None:
            continue
        # Kafka's rule: the first batch ending at or after the offset must end exactly there.
        k = bisect.bisect_left(last_offsets, entry.offset)
        if k == len(batches) or batches[k].last_offset != entry.offset:
            found = batches[k].last_offset if k < len(batches) else -1
            problems.append({**base, "problem": "offsetNotFound", "logOffset": found})
        elif batches[k].max_timestamp != entry.timestamp:
            problems.append(
                {**base, "problem": "timestampMismatch", "logTimestamp": batches[k].max_timestamp}
            )
    report.set(mismatches=problems)
    if not problems:
        if verify_only and scan is not None:
            report.note(f"All {index.entries} entries of {index.path} match {log_path}.")
        return
    report.detail(_kafka_time_index_report(index.path.absolute(), problems))
    report.error(
        f"{len(problems)} problems in {index.entries} time index entries "
        f"(first: entry {problems[0]['entry']}, {problems[0]['problem']})"
    )


def _kafka_time_index_report(path: Path, problems: list[dict[str, Any]]) -> list[str]:
    """Kafka's TimeIndexDumpErrors wording, grouped the way it prints them."""
    lines: list[str] = []
    mismatched = [p for p in problems if p["problem"] == "timestampMismatch"]
    if mismatched:
        lines.append(f"Found timestamp mismatch in :{path}")
        lines += [
            f"  Index timestamp: {p['indexTimestamp']}, log timestamp: {p['logTimestamp']}"
            for p in mismatched
        ]
    out_of_order = [p for p in problems if p["problem"] == "outOfOrderTimestamp"]
    if out_of_order:
        lines.append(f"Found out of order timestamp in :{path}")
        lines += [
            f"  Index timestamp: {p['indexTimestamp']}, "
            f"Previously indexed timestamp: {p['previousTimestamp']}"
            for p in out_of_order
        ]
    not_found = [p for p in problems if p["problem"] == "offsetNotFound"]
    if not_found:
        lines.append("The following indexed offsets are not found in the log.")
        lines += [
            f"Indexed offset: {p['indexOffset']}, found log offset: {p['logOffset']}"
            for p in not_found
        ]
    return lines
