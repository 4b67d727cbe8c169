"""``tierlog metadata``: inspect ``__remote_log_metadata`` (list, describe, dump, summary, verify).

Every action reads the topic from exactly one source:

- ``--bootstrap-server HOST:PORT``: over the Kafka protocol with a real client
  (``rlmm.kafka_client``), so any broker holding the topic will do, Apache Kafka included;
- ``--log-dirs DIR [DIR ...]``: offline, from the ``__remote_log_metadata-N/*.log`` files of
  Kafka-format log dirs (``rlmm.topic_client.LogDirMetadataTopicReader``); indexes and
  checkpoints are not needed.

``list``, ``describe`` and ``summary`` replay every event of every metadata partition, in
offset order per partition, into one ``RemoteLogMetadataCache`` per user partition (the
RLMM's own cache, so the tool sees what a broker would). Events that do not apply (an
update of an unknown segment, an invalid state transition, an undecodable value) are
reported on stderr as ``tierlog: warning: ...`` and skipped. ``dump`` prints the raw records
with ``rlmm.formatter``, like Kafka's RemoteLogMetadataFormatter.

Output is an aligned table for people, or JSON with ``--json`` (one document on stdout;
``dump --json`` writes one document per record, JSON Lines). Identifiers are printed in
Kafka's Uuid form (URL-safe base64, 22 characters); ``describe`` accepts that form or the
dashed one.

The paged listing (``list``) works like Redis SCAN; see ``LIST_EPILOG``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import datetime
import json
import struct
import sys
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.kafka_uuid import uuid_from_base64, uuid_to_base64
from rlmm.formatter import FormatterConfig, RemoteLogMetadataFormatter
from rlmm.metadata_cache import RemoteLogMetadataCache
from rlmm.metadata_cache import decode_cursor as decode_cache_cursor
from rlmm.metadata_cache import encode_cursor as encode_cache_cursor
from rlmm.partitioner import metadata_partition
from rlmm.replay import Replay, TracedEvent, partition_key, replay
from rlmm.serde import MetadataSerdeError, RemoteLogSegmentMetadataSnapshot, decode
from rlmm.topic_client import (
    METADATA_TOPIC,
)
from tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemoteStorageError,
    TopicIdPartition,
)
from tierlog import verify_cmd
from tierlog.cli import (
    EXIT_BAD_DATA,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    Subparsers,
    positive_int,
)
from tierlog.metadata_source import open_source, print_warnings, read_records

DEFAULT_COUNT = 10_000
DONE_CURSOR = "0"

LIST_EPILOG = """\
paging (like Redis SCAN):
  Each call prints at most --count segments and a cursor: pass it to --cursor to get the
  next page; the cursor is 0 when the scan is complete (start with no --cursor, or 0).
  --count also bounds the work of one call, so a page may hold fewer segments than
  --count (even none when filters reject what was examined) before the scan is complete:
  go on until the cursor is 0.
  Segments come ordered by (topic, partition, topic id), then by (start offset, segment
  id). A cursor is such a position, not a snapshot: it stays valid while metadata changes
  (segments copied or deleted, partitions created or deleted, the tool run against a
  newer copy of the topic). Guarantee: every segment present for the whole scan, from
  the first call to the last, is returned at least once (with this order, in fact
  exactly once); a segment added or removed during the scan may or may not be returned.
  Segments whose deletion finished (DELETE_SEGMENT_FINISHED) are forgotten, as by a
  broker, and never listed.
"""

_STATE_NAMES = {s.name: s for s in RemoteLogSegmentState}


# -- command line ----------------------------------------------------------------------------


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "metadata",
        help="inspect the remote log metadata (__remote_log_metadata)",
        description=(
            "Inspect __remote_log_metadata, read over the Kafka protocol (--bootstrap-server) "
            "or offline from log dirs (--log-dirs). Events that do not apply are reported on "
            "stderr as warnings and skipped."
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    source = argparse.ArgumentParser(add_help=False)
    group = source.add_argument_group(
        "source", "read from exactly one of --bootstrap-server and --log-dirs"
    )
    one = group.add_mutually_exclusive_group(required=True)
    one.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="read the topic over the Kafka protocol from this broker (any Kafka broker)",
    )
    one.add_argument(
        "--log-dirs",
        nargs="+",
        type=Path,
        metavar="DIR",
        help=f"read the {METADATA_TOPIC}-N/*.log files of these log dirs (offline)",
    )
    group.add_argument(
        "--num-partitions",
        type=positive_int,
        metavar="N",
        help="partitions of the metadata topic (default: the topic's partition count)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="bound of each request with --bootstrap-server (default 30)",
    )
    group.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client properties for --bootstrap-server (security.protocol, sasl.*, ssl.*), "
        "as Kafka's tools take them",
    )
    source.add_argument("--json", action="store_true", help="JSON on stdout, for scripts")

    p = actions.add_parser(
        "list",
        parents=[source],
        help="list remote segments, a page at a time",
        description="List remote segments, a page at a time, with optional filters.",
        epilog=LIST_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topic", metavar="T", help="only this topic (by name)")
    p.add_argument("--partition", type=int, metavar="P", help="only this partition number")
    p.add_argument(
        "--state",
        metavar="S",
        help="only this state: COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED, "
        "DELETE_SEGMENT_STARTED (or its id 0-2; case-insensitive)",
    )
    p.add_argument("--epoch", type=int, metavar="E", help="only segments with offsets of epoch E")
    p.add_argument("--cursor", metavar="C", help="the cursor printed by the previous page")
    p.add_argument(
        "--count",
        type=int,
        default=DEFAULT_COUNT,
        metavar="N",
        help=f"at most N segments per page, and a bound on the work (default {DEFAULT_COUNT})",
    )
    p.set_defaults(handler=run_list)

    p = actions.add_parser(
        "describe",
        parents=[source],
        help="every field of one segment and every event seen for it",
        description=(
            "Every field of one segment and every event seen for it, in the order of the "
            "topic. Give SEGMENT_ID before --log-dirs (which takes several values) or "
            "after --. An id starting with '-', as one in 64 does, is taken as it is."
        ),
    )
    p.add_argument("segment_id", metavar="SEGMENT_ID", help="Kafka's base64 form or a dashed uuid")
    p.set_defaults(handler=run_describe)

    p = actions.add_parser(
        "dump",
        parents=[source],
        help="print every record of the topic, like Kafka's RemoteLogMetadataFormatter",
        description=(
            "Print every record of every metadata partition, partition by partition in "
            "offset order, in the line format of Kafka's RemoteLogMetadataFormatter "
            "(partition: P, offset: O, value: ...). Undecodable records are reported on "
            "stderr; the exit status is then 1."
        ),
    )
    p.add_argument(
        "--print-partition",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print the partition (default: yes, as Kafka)",
    )
    p.add_argument(
        "--print-offset",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print the offset (default: yes, as Kafka)",
    )
    p.add_argument(
        "--print-version", action="store_true", help="print the frame's api key and version"
    )
    p.add_argument(
        "--all-fields",
        action="store_true",
        help="print every field of the record as written (state ids, custom metadata bytes)",
    )
    p.add_argument("--separator", default=", ", metavar="S", help="between parts (default ', ')")
    p.set_defaults(handler=run_dump)

    p = actions.add_parser(
        "summary",
        parents=[source],
        help="per user partition: segments, remote bytes and offsets, states, copy lag",
        description=(
            "Per user partition: segment count, remote bytes and offset range (of "
            "COPY_SEGMENT_FINISHED segments), segments per state, and the copy lag (log end "
            "offset minus the offset after the highest remote offset; the active segment "
            "counts) when the log end offset is known: from the broker with "
            "--bootstrap-server, from the partition's .log files when a log dir holds them."
        ),
    )
    p.set_defaults(handler=run_summary)

    verify_cmd.register(actions, source)


def _load(args: argparse.Namespace, trace: uuid.UUID | None = None) -> Replay:
    source = open_source(args)
    try:
        result = replay(read_records(source), source.num_partitions, trace)
    finally:
        source.close()
    print_warnings(result.warnings)
    return result


# -- rendering ---------------------------------------------------------------------------------


def segment_json(md: RemoteLogSegmentMetadata) -> dict[str, Any]:
    tp = md.topic_id_partition
    return {
        "topic": tp.topic,
        "topic_id": uuid_to_base64(tp.topic_id),
        "partition": tp.partition,
        "segment_id": uuid_to_base64(md.segment_id),
        "state": md.state.name,
        "start_offset": md.start_offset,
        "end_offset": md.end_offset,
        "segment_size_in_bytes": md.segment_size_in_bytes,
        "segment_leader_epochs": {str(e): o for e, o in md.segment_leader_epochs.items()},
        "max_timestamp_ms": md.max_timestamp_ms,
        "event_timestamp_ms": md.event_timestamp_ms,
        "broker_id": md.broker_id,
        "txn_index_empty": md.txn_index_empty,
        "custom_metadata": _b64(md.custom_metadata),
    }


def event_json(event: object) -> dict[str, Any]:
    """Every field of a deserialized event, with its type."""
    out: dict[str, Any] = {"type": type(event).__name__}
    if isinstance(event, RemoteLogSegmentMetadata):
        out.update(segment_json(event))
    elif isinstance(event, RemoteLogSegmentMetadataUpdate):
        tp = event.topic_id_partition
        out.update(
            topic=tp.topic,
            topic_id=uuid_to_base64(tp.topic_id),
            partition=tp.partition,
            segment_id=uuid_to_base64(event.remote_log_segment_id.id),
            state=event.state.name,
            event_timestamp_ms=event.event_timestamp_ms,
            broker_id=event.broker_id,
            custom_metadata=_b64(event.custom_metadata),
        )
    elif isinstance(event, RemotePartitionDeleteMetadata):
        tp = event.topic_id_partition
        out.update(
            topic=tp.topic,
            topic_id=uuid_to_base64(tp.topic_id),
            partition=tp.partition,
            state=event.state.name,
            event_timestamp_ms=event.event_timestamp_ms,
            broker_id=event.broker_id,
        )
    elif isinstance(event, RemoteLogSegmentMetadataSnapshot):
        out.update(
            segment_id=uuid_to_base64(event.segment_id),
            state=event.state.name,
            start_offset=event.start_offset,
            end_offset=event.end_offset,
            segment_size_in_bytes=event.segment_size_in_bytes,
            segment_leader_epochs={str(e): o for e, o in event.segment_leader_epochs.items()},
            max_timestamp_ms=event.max_timestamp_ms,
            event_timestamp_ms=event.event_timestamp_ms,
            broker_id=event.broker_id,
            txn_index_empty=event.txn_index_empty,
            custom_metadata=_b64(event.custom_metadata),
        )
    return out


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _epochs_text(epochs: dict[int, int] | Any) -> str:
    return ",".join(f"{e}@{o}" for e, o in epochs.items())


def _time_text(ms: int) -> str:
    try:
        t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Aligned columns; numbers to the right."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        bool(rows) and all(isinstance(row[i], int) or row[i] == "-" for row in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    print(line(headers))
    for row in cells:
        print(line(row))


def _dump_json(value: Any) -> None:
    print(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


# -- list ----------------------------------------------------------------------------------------

_CURSOR_PREFIX = "m1."
# The user partition: topic id, partition, topic name length (the name follows); then,
# within the partition, the cache's position (start offset, segment id) or nothing when
# the cursor is past the partition.
_CURSOR_HEAD = struct.Struct(">16siH")
_CURSOR_INNER = struct.Struct(">q16s")


def encode_cursor(tp: TopicIdPartition, inner: str | None) -> str:
    """The opaque cursor: a user partition and the cache cursor within it (None: after it).

    Raises:
        ValueError: ``inner`` is not a cursor of ``RemoteLogMetadataCache.list_page``.
    """
    topic = tp.topic.encode("utf-8")
    raw = _CURSOR_HEAD.pack(tp.topic_id.bytes, tp.partition, len(topic)) + topic
    if inner is not None:
        raw += _CURSOR_INNER.pack(*decode_cache_cursor(inner))
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[tuple[str, int, bytes], str | None]:
    """``(partition key, cache cursor or None)`` of a cursor.

    Raises:
        ValueError: not a cursor printed by ``tierlog metadata list``.
    """
    if not cursor.startswith(_CURSOR_PREFIX):
        raise ValueError(f"invalid cursor {cursor!r}: not one printed by 'tierlog metadata list'")
    body = cursor[len(_CURSOR_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        topic_id, partition, length = _CURSOR_HEAD.unpack_from(raw)
        end = _CURSOR_HEAD.size + length
        if len(raw) not in (end, end + _CURSOR_INNER.size) or partition < 0 or not length:
            raise ValueError("wrong length")
        topic = raw[_CURSOR_HEAD.size : end].decode("utf-8")
        inner = None
        if len(raw) > end:
            start, segment_id = _CURSOR_INNER.unpack_from(raw, end)
            if start < 0:
                raise ValueError("negative offset")
            inner = encode_cache_cursor(start, segment_id)
    except (binascii.Error, struct.error, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"invalid cursor {cursor!r}: {e}") from e
    return (topic, partition, topic_id), inner


@dataclass(frozen=True, slots=True)
class ListFilter:
    topic: str | None = None
    partition: int | None = None
    state: RemoteLogSegmentState | None = None
    epoch: int | None = None

    def partition_matches(self, tp: TopicIdPartition) -> bool:
        return (self.topic is None or tp.topic == self.topic) and (
            self.partition is None or tp.partition == self.partition
        )

    def segment_matches(self, md: RemoteLogSegmentMetadata) -> bool:
        return (self.state is None or md.state == self.state) and (
            self.epoch is None or self.epoch in md.segment_leader_epochs
        )


def parse_state(text: str) -> RemoteLogSegmentState:
    """A state filter: a name (case-insensitive) or a byte id.

    Raises:
        CommandError: an unknown state, or DELETE_SEGMENT_FINISHED (never listed) (exit 2).
    """
    name = text.strip().upper()
    state = _STATE_NAMES.get(name)
    if (
        state is None
        and name.isascii()
        and name.isdigit()
        and int(name) in RemoteLogSegmentState._value2member_map_
    ):
        state = RemoteLogSegmentState(int(name))
    listable = ", ".join(s.name for s in RemoteLogSegmentState if s.value < 3)
    if state is None:
        raise CommandError(f"--state {text!r}: unknown state; one of {listable}", EXIT_USAGE)
    if state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
        raise CommandError(
            f"--state {state.name}: such segments are forgotten and never listed; "
            f"one of {listable}",
            EXIT_USAGE,
        )
    return state


def list_page(
    replayed: Replay, flt: ListFilter, cursor: str | None, count: int
) -> tuple[list[RemoteLogSegmentMetadata], str | None]:
    """One page of the listing (see ``LIST_EPILOG``).

    Returns:
        ``(segments, next_cursor)``; ``next_cursor`` is None when the scan is complete.

    Raises:
        ValueError: a malformed cursor, or ``count`` < 1.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    after: tuple[str, int, bytes] | None = None
    inner: str | None = None
    if cursor is not None:
        after, inner = decode_cursor(cursor)
    partitions = [tp for tp in replayed.partitions() if flt.partition_matches(tp)]
    out: list[RemoteLogSegmentMetadata] = []
    budget = count
    for i, tp in enumerate(partitions):
        key = partition_key(tp)
        start: str | None = None
        if after is not None:
            if key < after or (key == after and inner is None):
                continue  # before the cursor, or the cursor is past this partition
            if key == after:
                start = inner
        cache = replayed.cache(tp)
        if cache is None:
            continue
        while budget > 0:
            page, nxt = cache.list_page(start, budget)
            budget -= len(page)
            out.extend(md for md in page if flt.segment_matches(md))
            if nxt is None:
                break
            if len(page) == 0 or budget == 0:
                return out, encode_cursor(tp, nxt)  # the work bound of this call
            start = nxt
        if budget == 0:
            return out, (encode_cursor(tp, None) if i + 1 < len(partitions) else None)
    return out, None


def run_list(args: argparse.Namespace) -> int:
    flt = ListFilter(
        topic=args.topic,
        partition=_non_negative("--partition", args.partition),
        state=None if args.state is None else parse_state(args.state),
        epoch=_non_negative("--epoch", args.epoch),
    )
    if args.count < 1:
        raise CommandError(f"--count must be at least 1, got {args.count}", EXIT_USAGE)
    cursor = None if args.cursor in (None, "", DONE_CURSOR) else args.cursor
    if cursor is not None:
        try:
            decode_cursor(cursor)
        except ValueError as e:
            raise CommandError(str(e), EXIT_USAGE) from e
    replayed = _load(args)
    segments, nxt = list_page(replayed, flt, cursor, args.count)
    next_cursor = nxt or DONE_CURSOR
    if args.json:
        _dump_json(
            {
                "segments": [segment_json(md) for md in segments],
                "count": len(segments),
                "next_cursor": next_cursor,
            }
        )
        return EXIT_OK
    if segments:
        print_table(
            ("TOPIC", "PARTITION", "SEGMENT ID", "STATE", "START", "END", "SIZE", "EPOCHS",
             "MAX TIMESTAMP"),
            [
                (
                    md.topic_id_partition.topic,
                    md.topic_id_partition.partition,
                    uuid_to_base64(md.segment_id),
                    md.state.name,
                    md.start_offset,
                    md.end_offset,
                    md.segment_size_in_bytes,
                    _epochs_text(md.segment_leader_epochs),
                    _time_text(md.max_timestamp_ms),
                )
                for md in segments
            ],
        )  # fmt: skip
    else:
        print("(no segments on this page)")
    print(f"next cursor: {next_cursor}")
    return EXIT_OK


def _non_negative(option: str, value: int | None) -> int | None:
    if value is not None and value < 0:
        raise CommandError(f"{option} must not be negative, got {value}", EXIT_USAGE)
    return value


# -- describe ------------------------------------------------------------------------------------


def parse_segment_id(text: str) -> uuid.UUID:
    """Kafka's Uuid form (22 URL-safe base64 characters) or any form ``uuid.UUID`` takes.

    Raises:
        CommandError: neither (exit 2).
    """
    text = text.strip()
    try:
        # 22 or 24 characters can only be Kafka's form: a dashed uuid has 36, a bare one 32.
        # (A '-' anywhere, even where a dashed uuid has its first one, is base64url.)
        if len(text) in (22, 24):
            return uuid_from_base64(text)
        return uuid.UUID(text)
    except ValueError:
        raise CommandError(
            f"invalid segment id {text!r}: expected Kafka's base64 form "
            "(22 characters) or a dashed uuid",
            EXIT_USAGE,
        ) from None


def _fold(events: Sequence[TracedEvent]) -> RemoteLogSegmentMetadata | None:
    """The segment as its applied events leave it (for a segment the cache forgot)."""
    md: RemoteLogSegmentMetadata | None = None
    for t in events:
        if not t.applied:
            continue
        if isinstance(t.event, RemoteLogSegmentMetadata):
            md = t.event
        elif isinstance(t.event, RemoteLogSegmentMetadataUpdate) and md is not None:
            try:
                md = md.create_with_update(t.event)
            except (RemoteStorageError, ValueError):
                continue
    return md


def run_describe(args: argparse.Namespace) -> int:
    segment_id = parse_segment_id(args.segment_id)
    replayed = _load(args, trace=segment_id)
    if not replayed.traced:
        raise CommandError(f"segment {uuid_to_base64(segment_id)} ({segment_id}) not found")
    md = None
    for tp in replayed.partitions():
        cache = replayed.cache(tp)
        if cache is not None and (md := cache.describe(segment_id)) is not None:
            break
    in_cache = md is not None
    if md is None:
        md = _fold(replayed.traced)
    if md is None:
        raise CommandError(
            f"segment {uuid_to_base64(segment_id)}: updates were found but no "
            "COPY_SEGMENT_STARTED event"
        )
    tp = md.topic_id_partition
    fields = segment_json(md)
    fields["segment_uuid"] = str(md.segment_id)
    fields["topic_uuid"] = str(tp.topic_id)
    fields["metadata_partition"] = metadata_partition(tp, replayed.num_partitions)
    fields["in_cache"] = in_cache
    if not in_cache:
        fields["state"] = _final_state(replayed.traced, md)
    events = [
        {
            "metadata_partition": t.partition,
            "offset": t.offset,
            "api_key": t.api_key,
            "version": t.version,
            "applied": t.applied,
            "problem": t.problem,
            "event": event_json(t.event),
        }
        for t in replayed.traced
    ]
    if args.json:
        _dump_json({"segment": fields, "events": events})
        return EXIT_OK
    labels = {
        "max_timestamp_ms": f"{md.max_timestamp_ms} ({_time_text(md.max_timestamp_ms)})",
        "event_timestamp_ms": f"{md.event_timestamp_ms} ({_time_text(md.event_timestamp_ms)})",
        "segment_leader_epochs": "{"
        + ", ".join(f"{e}={o}" for e, o in md.segment_leader_epochs.items())
        + "}",
        "custom_metadata": (
            "none"
            if md.custom_metadata is None
            else f"{len(md.custom_metadata)} bytes, hex {md.custom_metadata.hex()}"
        ),
    }
    width = max(len(k) for k in fields)
    for key, value in fields.items():
        shown = labels.get(key, value)
        if isinstance(shown, bool):
            shown = "true" if shown else "false"
        print(f"{key.ljust(width)}  {shown}")
    print()
    print_table(
        ("PARTITION", "OFFSET", "EVENT", "STATE", "BROKER", "EVENT TIME", "NOTE"),
        [
            (
                t.partition,
                t.offset,
                type(t.event).__name__,
                getattr(t.event, "state", RemoteLogSegmentState.COPY_SEGMENT_STARTED).name,
                getattr(t.event, "broker_id", "-"),
                _time_text(getattr(t.event, "event_timestamp_ms", 0)),
                t.problem or "",
            )
            for t in replayed.traced
        ],
    )
    return EXIT_OK


def _final_state(events: Sequence[TracedEvent], md: RemoteLogSegmentMetadata) -> str:
    """A segment the cache no longer holds: DELETE_SEGMENT_FINISHED if that was applied."""
    for t in reversed(events):
        if (
            isinstance(t.event, RemoteLogSegmentMetadataUpdate)
            and t.event.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
            and t.applied
        ):
            return t.event.state.name
    return md.state.name


# -- dump ------------------------------------------------------------------------------------------


def run_dump(args: argparse.Namespace) -> int:
    formatter = RemoteLogMetadataFormatter(
        FormatterConfig(
            print_partition=args.print_partition,
            print_message_offset=args.print_offset,
            print_version=args.print_version,
            print_all_event_value_fields=args.all_fields,
            separator=args.separator,
        )
    )
    source = open_source(args)
    bad = 0
    try:
        for partition, offset, value in read_records(source):
            try:
                decoded = decode(value)
            except MetadataSerdeError as e:
                bad += 1
                print(
                    f"tierlog: warning: {METADATA_TOPIC}-{partition} offset {offset}: "
                    f"cannot decode the value: {e}",
                    file=sys.stderr,
                )
                continue
            if args.json:
                _dump_json(
                    {
                        "partition": partition,
                        "offset": offset,
                        "api_key": decoded.api_key,
                        "version": decoded.version,
                        "event": event_json(decoded.event),
                    }
                )
            else:
                print(formatter.format_decoded(partition, offset, decoded))
    finally:
        source.close()
    return EXIT_BAD_DATA if bad else EXIT_OK


# -- summary ---------------------------------------------------------------------------------------


def partition_summary(
    tp: TopicIdPartition,
    cache: RemoteLogMetadataCache | None,
    replayed: Replay,
    end_offset: int | None,
) -> dict[str, Any]:
    states: Counter[str] = Counter()
    remote_bytes = 0
    first: int | None = None
    last: int | None = None
    segments = 0
    for md in cache.entries() if cache is not None else ():
        segments += 1
        states[md.state.name] += 1
        if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            remote_bytes += md.segment_size_in_bytes
            first = md.start_offset if first is None else min(first, md.start_offset)
            last = md.end_offset if last is None else max(last, md.end_offset)
    delete_state = replayed.delete_states.get(tp)
    out: dict[str, Any] = {
        "topic": tp.topic,
        "topic_id": uuid_to_base64(tp.topic_id),
        "partition": tp.partition,
        "metadata_partition": metadata_partition(tp, replayed.num_partitions),
        "segments": segments,
        "remote_bytes": remote_bytes,
        "remote_start_offset": first,
        "remote_end_offset": last,
        "states": {s.name: states.get(s.name, 0) for s in RemoteLogSegmentState if s.value < 3},
        "partition_delete_state": None if delete_state is None else delete_state.name,
    }
    if end_offset is not None:
        out["log_end_offset"] = end_offset
        if last is not None:
            out["copy_lag"] = max(0, end_offset - (last + 1))
    return out


def run_summary(args: argparse.Namespace) -> int:
    source = open_source(args)
    try:
        replayed = replay(read_records(source), source.num_partitions)
        print_warnings(replayed.warnings)
        rows = [
            partition_summary(tp, replayed.cache(tp), replayed, source.end_offset_of(tp))
            for tp in replayed.partitions()
        ]
    finally:
        source.close()
    if args.json:
        _dump_json({"partitions": rows})
        return EXIT_OK
    if not rows:
        print("(no remote log metadata)")
        return EXIT_OK
    with_delete = any(r["partition_delete_state"] for r in rows)
    headers = ["TOPIC", "PARTITION", "SEGMENTS", "REMOTE BYTES", "REMOTE OFFSETS", "STARTED",
               "FINISHED", "DELETING", "COPY LAG"]  # fmt: skip
    if with_delete:
        headers.append("PARTITION DELETE")
    table = []
    for r in rows:
        offsets = (
            "-"
            if r["remote_start_offset"] is None
            else f"{r['remote_start_offset']}-{r['remote_end_offset']}"
        )
        row: list[object] = [
            r["topic"],
            r["partition"],
            r["segments"],
            r["remote_bytes"],
            offsets,
            r["states"]["COPY_SEGMENT_STARTED"],
            r["states"]["COPY_SEGMENT_FINISHED"],
            r["states"]["DELETE_SEGMENT_STARTED"],
            r.get("copy_lag", "-"),
        ]
        if with_delete:
            row.append(r["partition_delete_state"] or "-")
        table.append(row)
    print_table(headers, table)
    return EXIT_OK
