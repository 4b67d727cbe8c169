"""``tierlog dump-log``: print the contents of segment files, like Kafka's ``kafka-dump-log.sh``.

The file type comes from the name, as in Kafka (a ``.deleted``/``.cleaned``/``.swap`` suffix
after it is ignored, and remote-tier object names ``<offset>-<segmentId>.<suffix>`` work too):

- ``.log``: one line per batch (Kafka's fields and wording); records with
  ``--deep-iteration``, their keys and values with ``--print-data``.
- ``.index`` / ``.timeindex``: the entries, each checked against the batches of the sibling
  ``.log`` (Kafka always does this; ``--verify-index-only`` checks without listing).
- ``.txnindex``: aborted transactions. ``.snapshot``: producer state rows.
  ``leader-epoch-checkpoint``: epoch entries.

Every file is read through core's own readers (FileRecords, OffsetIndex, TimeIndex,
TransactionIndex, read_snapshot, LeaderEpochCheckpointFile), so the tool sees exactly what
the broker would. A problem with one file is reported (one ``tierlog: error:`` line naming
the file and, for a log, the byte position) and the tool goes on with the next file; the
exit status is then 1. Output formats are described in ``tierlog.dump_output``.
"""

from __future__ import annotations

import argparse
import mmap
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import CoreError
from core.log.file_records import FileRecords
from core.log.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
)
from core.log.leader_epoch import LeaderEpochCheckpointFile
from core.log.offset_index import OffsetIndex
from core.log.producer_state import read_snapshot
from core.log.time_index import TimeIndex
from core.log.txn_index import CURRENT_VERSION as TXN_INDEX_VERSION
from core.log.txn_index import TransactionIndex
from core.records.batch import (
    HEADER_SIZE,
    MAGIC_V2,
    NO_SEQUENCE,
    Attributes,
    Compression,
    RecordBatchHeader,
    TimestampType,
)
from core.records.record import (
    ControlRecordType,
    EndTransactionMarker,
    Record,
    decode_records,
    parse_control_type,
)
from tierlog import offsets_decoder
from tierlog.cli import EXIT_BAD_DATA, EXIT_OK, Subparsers, positive_int
from tierlog.dump_log_index import dump_offset_index, dump_time_index
from tierlog.dump_output import JsonReport, Report, TextReport, text_bytes

# Kafka's names for the timestamp type, as DumpLogSegments prints them.
TIMESTAMP_TYPE_NAMES = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}
RECORD_INDENT = "|"  # Kafka's RecordIndent
SEQUENCE_MODULUS = 1 << 31  # sequences wrap from Int32.MAX to 0, as in Kafka

_LEADING_OFFSET = re.compile(r"[0-9]+")  # \d would also take non-ASCII digits


@dataclass(frozen=True, slots=True)
class DumpOptions:
    deep_iteration: bool
    print_data: bool
    verify_index_only: bool
    index_sanity_check: bool
    max_bytes: int | None
    offsets_decoder: bool = False


@dataclass(frozen=True, slots=True)
class FileKind:
    """What a file name says the file is."""

    name: str  # the JSON "type"
    suffix: str
    items_key: str


LOG = FileKind("log", LOG_SUFFIX, "batches")
INDEX = FileKind("index", INDEX_SUFFIX, "entries")
TIME_INDEX = FileKind("timeindex", TIME_INDEX_SUFFIX, "entries")
TXN_INDEX = FileKind("txnindex", TXN_INDEX_SUFFIX, "entries")
SNAPSHOT = FileKind("snapshot", SNAPSHOT_SUFFIX, "entries")
LEADER_EPOCH = FileKind("leader-epoch-checkpoint", LEADER_EPOCH_CHECKPOINT, "entries")
UNKNOWN = FileKind("unknown", "", "entries")
KINDS = (LOG, INDEX, TIME_INDEX, TXN_INDEX, SNAPSHOT, LEADER_EPOCH)
_EXTRA_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)


@dataclass(frozen=True, slots=True)
class NamedFile:
    """A file with what its name tells: the kind, the base offset, the sibling ``.log``."""

    path: Path
    kind: FileKind
    base_offset: int | None  # the leading digits of the name, if any
    sibling_log: Path


def classify(path: Path) -> NamedFile | None:
    """Read the kind and base offset from the file name; None for an unknown kind."""
    name = path.name
    extra = next((s for s in _EXTRA_SUFFIXES if name.endswith(s)), "")
    name = name.removesuffix(extra) if extra else name
    for kind in KINDS:
        if name == kind.suffix or name.endswith(kind.suffix):
            stem = name.removesuffix(kind.suffix)
            if kind is LEADER_EPOCH and stem and not stem.endswith("."):
                continue  # "foo-leader-epoch-checkpoint" is not one
            match = _LEADING_OFFSET.match(stem)
            return NamedFile(
                path,
                kind,
                int(match.group()) if match else None,
                path.with_name(f"{stem}{LOG_SUFFIX}{extra}"),
            )
    return None


# -- command ---------------------------------------------------------------------------------


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "dump-log",
        help="print the contents of log segment, index, snapshot and checkpoint files",
        description=(
            "Print the contents of segment files, like Kafka's kafka-dump-log.sh. The type "
            "comes from the file name: .log, .index, .timeindex, .txnindex, .snapshot, "
            "leader-epoch-checkpoint. Problems are reported on stderr, one line per problem "
            "naming the file and byte position; the exit status is then 1."
        ),
    )
    parser.add_argument("files", nargs="+", metavar="FILE", type=Path, help="files to dump")
    parser.add_argument(
        "--deep-iteration",
        action="store_true",
        help="also list every record of each batch (.log)",
    )
    parser.add_argument(
        "--print-data",
        action="store_true",
        help="also print record keys and values; implies --deep-iteration (.log)",
    )
    parser.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode records as __consumer_offsets records (group offsets and metadata); "
        "implies --print-data (.log)",
    )
    parser.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the sibling .log without listing them "
        "(.index, .timeindex)",
    )
    parser.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only run the sanity check the broker runs when it loads the index "
        "(.index, .timeindex, .txnindex)",
    )
    parser.add_argument(
        "--max-bytes",
        type=positive_int,
        metavar="N",
        help="read at most the first N bytes of each .log (whole batches only)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON document per file on stdout, one per line (see tierlog.dump_output)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    options = DumpOptions(
        deep_iteration=args.deep_iteration or args.print_data or args.offsets_decoder,
        print_data=args.print_data or args.offsets_decoder,  # as Kafka's options imply
        offsets_decoder=args.offsets_decoder,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        max_bytes=args.max_bytes,
    )
    failed = False
    for path in args.files:
        failed |= not dump_file(path, options, json_output=args.json)
    return EXIT_BAD_DATA if failed else EXIT_OK


def dump_file(path: Path, options: DumpOptions, *, json_output: bool = False) -> bool:
    """Dump one file to stdout, problems to stderr.

    Returns:
        True when the file was read without finding any problem.
    """
    named = classify(path)
    report_type = JsonReport if json_output else TextReport
    kind = named.kind if named else UNKNOWN
    report = report_type(str(path), kind.name, kind.items_key, sys.stdout, sys.stderr)
    try:
        problem = _unreadable(path)
        if problem is not None:
            report.error(problem)
        elif named is None:
            report.error(
                "unknown file type: the name must end in .log, .index, .timeindex, "
                ".txnindex, .snapshot or be leader-epoch-checkpoint"
            )
        else:
            report.begin(baseOffset=named.base_offset)
            _DUMPERS[named.kind.name](named, report, options)
    except CoreError as e:
        # Core's readers name the file and what is wrong with it; that is the whole story.
        report.error(str(e), getattr(e, "position", None))
    except BrokenPipeError:
        raise  # stdout's reader went away (`| head`): main() ends the run quietly
    except OSError as e:
        report.error(f"cannot read: {e.strerror or e}")
    finally:
        report.end()
    return not report.failed


def _unreadable(path: Path) -> str | None:
    if not path.exists():
        return "no such file"
    if path.is_dir():
        return "is a directory, not a file"
    return None


def _require_base_offset(named: NamedFile, report: Report) -> int | None:
    if named.base_offset is None:
        report.error(
            f"cannot tell the segment's base offset: a {named.kind.suffix} file is named "
            "by the 20-digit offset of the segment's first record"
        )
    return named.base_offset


# -- .log ------------------------------------------------------------------------------------


def dump_log(named: NamedFile, report: Report, options: DumpOptions) -> None:
    if named.base_offset is not None:
        report.note(f"Log starting offset: {named.base_offset}")
    records = FileRecords(named.path, create=False)
    try:
        file_size = records.size
        if file_size == 0:
            return
        with open(named.path, "rb") as f:
            # Whole batches are viewed through a read-only mapping of the file, so that a
            # header's position is its position in the file: core's error messages ("batch
            # at byte N") then name the right byte, and no batch is copied.
            data = mmap.mmap(f.fileno(), file_size, access=mmap.ACCESS_READ)
        try:
            _dump_batches(named, records, data, report, options)
        finally:
            data.close()
    finally:
        records.close()


def _dump_batches(
    named: NamedFile,
    records: FileRecords,
    data: mmap.mmap,
    report: Report,
    options: DumpOptions,
) -> None:
    file_size = len(data)
    end = file_size if options.max_bytes is None else min(file_size, options.max_bytes)
    limited = end < file_size
    valid_bytes = 0
    broken: str | None = None  # why the data stops being batches, if it does
    last_offset: int | None = None
    gaps: list[tuple[int, int]] = []
    for position, header in records.batch_headers(0, end):
        size = header.size_in_bytes
        if size < HEADER_SIZE:
            broken = (
                f"the batch there claims a length of {header.batch_length} bytes, less than "
                "a batch header"
            )
            break
        if position + size > end:
            if limited and position + size <= file_size:
                break  # cut by --max-bytes, not by a torn write
            broken = (
                f"the batch there claims {size} bytes, past the end of the file ({file_size} bytes)"
            )
            break
        if header.magic != MAGIC_V2:
            broken = f"the batch there has magic {header.magic}; only magic 2 is supported"
            break
        batch = RecordBatchHeader(data, position)
        stored, computed = batch.crc, batch.compute_crc()
        fields = _batch_fields(batch, valid=stored == computed)
        lines = [_format_batch(fields)]
        if stored != computed:
            report.error(
                f"batch at byte {position} (offsets {batch.base_offset}..{batch.last_offset}) "
                f"is corrupt: CRC mismatch, stored {stored}, computed {computed}",
                position,
            )
        elif options.deep_iteration:
            try:
                decoded = decode_records(batch, verify=False)
            except CoreError as e:
                report.error(
                    f"records of the batch at byte {position} cannot be read: {e}", position
                )
            else:
                rows = [_record_fields(batch, r, options) for r in decoded]
                fields["records"] = rows
                lines += [_format_record(batch, row) for row in rows]
                for record in decoded:
                    if last_offset is not None and record.offset != last_offset + 1:
                        gaps.append((last_offset, record.offset))
                    last_offset = record.offset
        report.item(fields, lines)
        valid_bytes = position + size
    if broken is None and valid_bytes < end and not limited:
        broken = f"{end - valid_bytes} bytes are too few for a batch header of {HEADER_SIZE}"
    if broken is not None:
        trailing = file_size - valid_bytes
        report.note(f"Found {trailing} invalid bytes at the end of {named.path.name}")
        report.error(
            f"torn or corrupt data at byte {valid_bytes}: {broken}; the {trailing} bytes from "
            "there on are not record batches",
            valid_bytes,
        )
    if gaps:
        # Normal in a compacted log, a sign of trouble otherwise: worth a word, not a failure.
        report.warning(
            "non-consecutive offsets: "
            + ", ".join(f"{a} is followed by {b}" for a, b in gaps[:10])
            + (f" (and {len(gaps) - 10} more)" if len(gaps) > 10 else "")
        )
        report.set(nonConsecutiveOffsets=[list(gap) for gap in gaps])
    report.set(validBytes=valid_bytes, sizeInBytes=file_size)


def _batch_fields(batch: RecordBatchHeader, *, valid: bool) -> dict[str, Any]:
    codec = batch.compression
    delete_horizon = batch.base_timestamp if batch.attributes & Attributes.DELETE_HORIZON else None
    return {
        "baseOffset": batch.base_offset,
        "lastOffset": batch.last_offset,
        "count": batch.records_count,
        "baseSequence": batch.base_sequence,
        "lastSequence": batch.last_sequence,
        "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional,
        "isControl": batch.is_control,
        "deleteHorizonMs": delete_horizon,
        "position": batch.position,
        "timestampType": TIMESTAMP_TYPE_NAMES[batch.timestamp_type],
        "maxTimestamp": batch.max_timestamp,
        "size": batch.size_in_bytes,
        "magic": batch.magic,
        "compresscodec": (
            Compression(codec).name.lower()
            if codec in Compression._value2member_map_
            else f"unknown({codec})"
        ),
        "crc": batch.crc,
        "isvalid": valid,
    }


def _format_batch(b: dict[str, Any]) -> str:
    horizon = "none" if b["deleteHorizonMs"] is None else b["deleteHorizonMs"]
    return (
        f"baseOffset: {b['baseOffset']} lastOffset: {b['lastOffset']} count: {b['count']} "
        f"baseSequence: {b['baseSequence']} lastSequence: {b['lastSequence']} "
        f"producerId: {b['producerId']} producerEpoch: {b['producerEpoch']} "
        f"partitionLeaderEpoch: {b['partitionLeaderEpoch']} "
        f"isTransactional: {_bool(b['isTransactional'])} isControl: {_bool(b['isControl'])} "
        f"deleteHorizonMs: {horizon} position: {b['position']} "
        f"{b['timestampType']}: {b['maxTimestamp']} size: {b['size']} magic: {b['magic']} "
        f"compresscodec: {b['compresscodec']} crc: {b['crc']} isvalid: {_bool(b['isvalid'])}"
    )


def _record_fields(
    batch: RecordBatchHeader, record: Record, options: DumpOptions
) -> dict[str, Any]:
    base_sequence = batch.base_sequence
    fields: dict[str, Any] = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "sequence": (
            NO_SEQUENCE
            if base_sequence == NO_SEQUENCE
            else (base_sequence + record.offset - batch.base_offset) % SEQUENCE_MODULUS
        ),
        "headerKeys": [key for key, _ in record.headers],
    }
    if batch.is_control:
        fields.update(_control_fields(record))
    elif options.offsets_decoder:
        key_text, value_text = offsets_decoder.decode(record.key, record.value)
        fields["key"] = key_text.encode("utf-8")
        fields["value"] = value_text.encode("utf-8")
    elif options.print_data:
        fields["key"] = record.key
        fields["value"] = record.value
        fields["headers"] = [{"key": k, "value": v} for k, v in record.headers]
    return fields


def _control_fields(record: Record) -> dict[str, Any]:
    """Kafka shows the marker of a control record instead of its data."""
    try:
        type_id = parse_control_type(record.key)
        if type_id in ControlRecordType._value2member_map_:
            marker = EndTransactionMarker.from_record(record)
            return {"endTxnMarker": marker.type.name, "coordinatorEpoch": marker.coordinator_epoch}
    except CoreError as e:
        return {"controlType": f"INVALID({e})"}
    return {"controlType": f"UNKNOWN({type_id})"}


def _format_record(batch: RecordBatchHeader, r: dict[str, Any]) -> str:
    line = (
        f"{RECORD_INDENT} offset: {r['offset']} "
        f"{TIMESTAMP_TYPE_NAMES[batch.timestamp_type]}: {r['timestamp']} "
        f"keySize: {r['keySize']} valueSize: {r['valueSize']} sequence: {r['sequence']} "
        f"headerKeys: [{','.join(r['headerKeys'])}]"
    )
    if "endTxnMarker" in r:
        line += f" endTxnMarker: {r['endTxnMarker']} coordinatorEpoch: {r['coordinatorEpoch']}"
    elif "controlType" in r:
        line += f" controlType: {r['controlType']}"
    # Kafka prints neither a null key nor a null payload.
    if r.get("key") is not None:
        line += f" key: {text_bytes(r['key'])}"
    if r.get("value") is not None:
        line += f" payload: {text_bytes(r['value'])}"
    return line


def _bool(value: bool) -> str:
    return "true" if value else "false"  # Java's spelling, as in Kafka's output


# -- indexes ---------------------------------------------------------------------------------


def dump_index(named: NamedFile, report: Report, options: DumpOptions) -> None:
    base_offset = _require_base_offset(named, report)
    if base_offset is not None:
        index = OffsetIndex(named.path, base_offset, writable=False)
        try:
            dump_offset_index(
                index,
                named.sibling_log,
                report,
                options.index_sanity_check,
                options.verify_index_only,
            )
        finally:
            index.close()


def dump_timeindex(named: NamedFile, report: Report, options: DumpOptions) -> None:
    base_offset = _require_base_offset(named, report)
    if base_offset is not None:
        index = TimeIndex(named.path, base_offset, writable=False)
        try:
            dump_time_index(
                index,
                named.sibling_log,
                report,
                options.index_sanity_check,
                options.verify_index_only,
            )
        finally:
            index.close()


def dump_txnindex(named: NamedFile, report: Report, options: DumpOptions) -> None:
    base_offset = _require_base_offset(named, report)
    if base_offset is None:
        return
    index = TransactionIndex(named.path, base_offset)
    try:
        if options.index_sanity_check:
            index.sanity_check()
            report.note(f"{named.path} passed sanity check.")
            report.set(sanityCheck="passed")
            return
        for txn in index.all_aborted_txns():
            fields = {
                "version": TXN_INDEX_VERSION,  # the only version the reader accepts
                "producerId": txn.producer_id,
                "firstOffset": txn.first_offset,
                "lastOffset": txn.last_offset,
                "lastStableOffset": txn.last_stable_offset,
            }
            report.item(fields, [" ".join(f"{k}: {v}" for k, v in fields.items())])
        # all_aborted_txns skips a torn trailing entry, as the broker does; say so here.
        index.sanity_check()
    finally:
        index.close()


# -- producer snapshot and leader epochs ------------------------------------------------------


def dump_snapshot(named: NamedFile, report: Report, options: DumpOptions) -> None:
    for row in read_snapshot(named.path):
        state = row.to_state()
        txn = state.current_txn_first_offset
        fields: dict[str, Any] = {
            "producerId": row.producer_id,
            "producerEpoch": row.producer_epoch,
            "coordinatorEpoch": row.coordinator_epoch,
            "currentTxnFirstOffset": txn,
            "lastTimestamp": state.last_timestamp,
        }
        line = " ".join(f"{k}: {'none' if v is None else v}" for k, v in fields.items())
        if state.batches:  # Kafka prints the batch only when the snapshot kept one
            batch = state.batches[0]
            batch_fields = {
                "firstSequence": batch.first_seq,
                "lastSequence": batch.last_seq,
                "lastOffset": batch.last_offset,
                "offsetDelta": batch.offset_delta,
                "timestamp": batch.timestamp,
            }
            fields.update(batch_fields)
            line += " " + " ".join(f"{k}: {v}" for k, v in batch_fields.items())
        report.item(fields, [line])


def dump_leader_epochs(named: NamedFile, report: Report, options: DumpOptions) -> None:
    entries = LeaderEpochCheckpointFile(named.path).read()
    if not entries:
        report.note(f"{named.path} is empty.")
    for entry in entries:
        report.item(
            {"epoch": entry.epoch, "startOffset": entry.start_offset},
            [f"epoch: {entry.epoch} startOffset: {entry.start_offset}"],
        )


_DUMPERS: dict[str, Callable[[NamedFile, Report, DumpOptions], None]] = {
    LOG.name: dump_log,
    INDEX.name: dump_index,
    TIME_INDEX.name: dump_timeindex,
    TXN_INDEX.name: dump_txnindex,
    SNAPSHOT.name: dump_snapshot,
    LEADER_EPOCH.name: dump_leader_epochs,
}

__all__ = ["DumpOptions", "classify", "dump_file", "register", "run"]
