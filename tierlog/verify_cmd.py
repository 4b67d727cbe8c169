"""``tierlog metadata verify``: audit the remote tier against ``__remote_log_metadata``.

The metadata is read as ``tierlog metadata`` reads it (``--bootstrap-server`` or
``--log-dirs``), the bucket through the RSM plugin of ``--rsm-config FILE`` (a properties
file with ``remote.log.storage.manager.class.name`` and ``rsm.config.*``: a broker's
``server.properties`` works as it is). The checks are ``tierlog.bucket_audit``'s.

Exit status: 0 consistent, 1 something found (or, with ``--repair --yes``, something found
that was not repaired), 2 a usage error. ``--json`` prints one document for scripts; long
runs print a progress line on stderr every few seconds.

``--repair`` deletes orphans and finishes stuck deletions, as a dry run unless ``--yes`` is
given. Finishing a deletion writes DELETE_SEGMENT_FINISHED to ``__remote_log_metadata``:
that takes ``--log-dirs`` with the broker stopped (the log dirs are locked while the tool
works, and the broker reads the events at its next start). A running tierlog broker
accepts metadata events for the partitions it leads from itself only, so with
``--bootstrap-server`` stuck deletions are reported, not finished; orphans are deleted in
both modes. Running the repair again resumes one cut short.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.kafka_uuid import uuid_to_base64
from rlmm.manager import BROKER_ID_KEY, NUM_PARTITIONS_KEY, TopicBasedRemoteLogMetadataManager
from rlmm.replay import replay
from tiered.api import RemoteLogSegmentState, RemoteStorageError, TopicIdPartition
from tierlog.bucket_audit import (
    AuditOptions,
    AuditReport,
    Finding,
    FindingKind,
    RepairResult,
    audit,
    repair,
)
from tierlog.cli import EXIT_BAD_DATA, EXIT_OK, EXIT_USAGE, CommandError, Subparsers, positive_int

DEFAULT_GRACE_S = 3600.0
# Below the S3 plugin's connection pool (10): more threads would open and drop connections.
DEFAULT_READ_THREADS = 8
PROGRESS_EVERY_S = 2.0
RLMM_READY_TIMEOUT_S = 60.0
NOT_WRITABLE_OVER_KAFKA = (
    "finishing a deletion writes DELETE_SEGMENT_FINISHED to __remote_log_metadata, which a "
    "running tierlog broker accepts for the partitions it leads from itself only: stop the "
    "broker and run the repair with --log-dirs"
)

EPILOG = """\
checks, per partition:
  - COPY_SEGMENT_FINISHED segments: every object present and of the size its manifest
    records (with --deep, read and its CRC32C compared); the manifest agrees with the
    metadata;
  - orphans: objects that belong to no segment in COPY_SEGMENT_STARTED,
    COPY_SEGMENT_FINISHED or DELETE_SEGMENT_STARTED, written before the grace period;
  - segments stuck in COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED longer than the grace
    period;
  - gaps and overlaps of finished segments along the leader-epoch lineage (segments of a
    diverged branch are noted, not counted);
  - each tiered topic's topic-manifest.json (what tierlog restore needs).

exit status: 0 consistent, 1 something found, 2 usage error.

--repair deletes orphans and finishes stuck deletions; a dry run unless --yes. Finishing a
deletion needs --log-dirs with the broker stopped.
"""


def register(actions: Subparsers, source: argparse.ArgumentParser) -> None:
    """Add ``verify`` to ``tierlog metadata``'s actions; ``source`` is their shared parent
    parser (``--bootstrap-server`` | ``--log-dirs``, ``--command-config``, ``--json``...)."""
    p = actions.add_parser(
        "verify",
        parents=[source],
        help="audit the remote tier against the metadata (orphans, missing objects...)",
        description=(
            "Compare __remote_log_metadata with the objects of the remote tier, per "
            "partition, and report every inconsistency by object key or segment id."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--rsm-config",
        type=Path,
        required=True,
        metavar="FILE",
        help="properties with remote.log.storage.manager.class.name and rsm.config.* "
        "(a broker's server.properties works as it is)",
    )
    p.add_argument("--topic", metavar="T", help="only this topic (by name)")
    p.add_argument("--partition", type=int, metavar="P", help="only this partition number")
    p.add_argument("--deep", action="store_true", help="read every object and check its CRC32C")
    p.add_argument(
        "--grace-period",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help="objects younger than this are not orphans, segments younger than this are not "
        f"stuck (default {DEFAULT_GRACE_S:g})",
    )
    p.add_argument(
        "--repair",
        action="store_true",
        help="delete orphans and finish stuck deletions (a dry run without --yes)",
    )
    p.add_argument("--yes", action="store_true", help="with --repair: apply the repair")
    p.add_argument(
        "--threads",
        type=positive_int,
        default=DEFAULT_READ_THREADS,
        metavar="N",
        help=f"parallel reads of the bucket (default {DEFAULT_READ_THREADS})",
    )
    p.set_defaults(handler=run_verify)


class ProgressLine:
    """A progress line on stderr at most every ``PROGRESS_EVERY_S``, once the run has lasted
    that long (short runs print none)."""

    def __init__(self) -> None:
        self._start = self._last = time.monotonic()

    def __call__(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_S:
            self._last = now
            print(f"tierlog: verify: {message} ({now - self._start:.0f} s)", file=sys.stderr)


def run_verify(args: argparse.Namespace) -> int:
    from core.properties import PropertiesFileError, read_properties
    from tierlog.metadata_source import Source, open_source, print_warnings, read_records
    from tierlog.offline_storage import OfflineBrokerStorage, OfflineStorageError
    from tierlog.remote_storage_config import open_object_store_rsm

    if args.partition is not None and args.partition < 0:
        raise CommandError(f"--partition must not be negative, got {args.partition}", EXIT_USAGE)
    if args.grace_period < 0:
        message = f"--grace-period must not be negative, got {args.grace_period}"
        raise CommandError(message, EXIT_USAGE)
    if args.yes and not args.repair:
        raise CommandError("--yes applies a --repair: give both", EXIT_USAGE)
    try:
        props = read_properties(args.rsm_config)
    except PropertiesFileError as e:
        raise CommandError(str(e)) from e
    progress = ProgressLine()
    writable = bool(args.repair and args.yes and args.log_dirs)
    storage = None
    rlmm = None
    try:
        rsm = open_object_store_rsm(props)
    except RemoteStorageError as e:
        raise CommandError(str(e)) from e
    try:
        if writable:
            # Locks the log dirs for the whole run: the broker must be stopped, and stays so.
            try:
                storage = OfflineBrokerStorage.of_log_dirs(list(args.log_dirs))
            except OfflineStorageError as e:
                raise CommandError(str(e)) from e
            client = storage.metadata_client()
            try:
                num = args.num_partitions or client.partition_count()
            except RemoteStorageError as e:
                raise CommandError(str(e)) from e
            source = Source(client, num, list(args.log_dirs), lambda tp: None)
        else:
            source = open_source(args)
        try:
            replayed = replay(_counted(read_records(source), progress), source.num_partitions)
        finally:
            if storage is None:
                source.close()
        print_warnings(replayed.warnings)
        metadata = {}
        for tp in replayed.partitions():
            cache = replayed.cache(tp)
            if cache is not None:
                metadata[tp] = list(cache.entries())
        options = AuditOptions(
            topic=args.topic,
            partition=args.partition,
            deep=args.deep,
            grace_ms=int(args.grace_period * 1000),
            threads=args.threads,
        )
        try:
            report = audit(
                rsm, metadata, options, deleted=replayed.delete_states, progress=progress
            )
        except RemoteStorageError as e:
            raise CommandError(f"cannot audit the remote tier: {e}") from e
        if args.bootstrap_server and any(f.kind in SEGMENT_KINDS for f in report.findings):
            _drop_segments_gone_since(report, args, progress)
        result = None
        if args.repair:
            unwritable = None if args.log_dirs else NOT_WRITABLE_OVER_KAFKA
            if storage is not None:
                rlmm = _metadata_writer(storage, source.num_partitions, report)
            try:
                result = repair(
                    rsm,
                    report,
                    rlmm=rlmm,
                    broker_id=storage.node_id if storage is not None else -1,
                    dry_run=not args.yes,
                    metadata_unwritable=unwritable,
                    progress=progress,
                )
            except RemoteStorageError as e:
                raise CommandError(f"repair failed (running it again resumes it): {e}") from e
    finally:
        if rlmm is not None:
            rlmm.close()
        if storage is not None:
            storage.close()
        rsm.close()
    if args.json:
        print(json.dumps(report_json(report, result), separators=(",", ":")))
    else:
        print_report(report, result)
    if report.consistent or (result is not None and result.complete):
        return EXIT_OK
    return EXIT_BAD_DATA


# Findings about a finished segment's objects: a running broker may have deleted the
# segment (retention) between the metadata read and the listing.
SEGMENT_KINDS = frozenset(
    {
        FindingKind.MISSING_OBJECT,
        FindingKind.WRONG_SIZE,
        FindingKind.WRONG_CHECKSUM,
        FindingKind.BAD_MANIFEST,
        FindingKind.MANIFEST_MISMATCH,
    }
)


def _drop_segments_gone_since(
    report: AuditReport, args: argparse.Namespace, progress: ProgressLine
) -> None:
    """Read the metadata again and drop the findings about segments that are no longer
    COPY_SEGMENT_FINISHED: the broker deleted them while the bucket was being read."""
    from tierlog.metadata_source import open_source, read_records

    source = open_source(args)
    try:
        again = replay(_counted(read_records(source), progress), source.num_partitions)
    finally:
        source.close()
    finished = {
        md.segment_id
        for tp in again.partitions()
        if (cache := again.cache(tp)) is not None
        for md in cache.entries()
        if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    }
    report.findings = [
        f
        for f in report.findings
        if f.kind not in SEGMENT_KINDS or f.segment is None or f.segment_id in finished
    ]
    counts = Counter((f.topic, f.topic_id, f.partition) for f in report.findings)
    for p in report.partitions:
        p.findings = counts[(p.topic, p.topic_id, p.partition)]


def _counted(records: Iterator[tuple[int, int, bytes]], progress: ProgressLine) -> Iterator[Any]:
    for n, record in enumerate(records, 1):
        if n % 10_000 == 0:
            progress(f"read {n} metadata events")
        yield record


def _metadata_writer(
    storage: Any, num_partitions: int, report: AuditReport
) -> TopicBasedRemoteLogMetadataManager | None:
    """The RLMM over the stopped broker's metadata topic, with the partitions of the stuck
    deletions loaded (an update needs the segment's current state)."""
    tps = {
        TopicIdPartition(f.topic_id, f.topic, f.partition)
        for f in report.findings
        if f.repairable and f.kind is FindingKind.STUCK and f.partition is not None
    }
    if not tps:
        return None
    rlmm = TopicBasedRemoteLogMetadataManager(storage.metadata_client())
    rlmm.configure({NUM_PARTITIONS_KEY: str(num_partitions), BROKER_ID_KEY: str(storage.node_id)})
    rlmm.on_partition_leadership_changes(set(), tps)
    for tp in tps:
        if not rlmm.wait_ready(tp, RLMM_READY_TIMEOUT_S):
            rlmm.close()
            raise CommandError(f"the metadata of {tp} did not load in {RLMM_READY_TIMEOUT_S} s")
    return rlmm


# -- output -------------------------------------------------------------------------------------


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.kind.value,
        "topic": f.topic,
        "topic_id": uuid_to_base64(f.topic_id),
        "partition": f.partition,
        "key": f.key,
        "segment_id": None if f.segment_id is None else uuid_to_base64(f.segment_id),
        "state": None if f.segment is None else f.segment.state.name,
        "message": f.message,
    }


def report_json(report: AuditReport, result: RepairResult | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "consistent": report.consistent,
        "objects_listed": report.objects_listed,
        "segments_checked": report.segments_checked,
        "objects_read": report.objects_read,
        "partitions": [
            {
                "topic": p.topic,
                "topic_id": uuid_to_base64(p.topic_id),
                "partition": p.partition,
                "segments": p.segments,
                "objects": p.objects,
                "remote_bytes": p.remote_bytes,
                "findings": p.findings,
            }
            for p in report.partitions
        ],
        "findings": [finding_json(f) for f in report.findings],
        "notes": [
            {"kind": n.kind, "topic": n.topic, "partition": n.partition, "message": n.message}
            for n in report.notes
        ],
        "repair": None,
    }
    if result is not None:
        doc["repair"] = {
            "dry_run": result.dry_run,
            "complete": result.complete,
            "deleted_objects": result.deleted_objects,
            "finished_deletions": [
                uuid_to_base64(md.segment_id) for md in result.finished_deletions
            ],
            "not_repaired": [
                {**finding_json(f), "reason": reason} for f, reason in result.not_repaired
            ],
        }
    return doc


def _where(f: Finding) -> str:
    return f.topic if f.partition is None else f"{f.topic}-{f.partition}"


def print_report(report: AuditReport, result: RepairResult | None) -> None:
    segments = sum(sum(p.segments.values()) for p in report.partitions)
    print(
        f"verified {len(report.partitions)} partitions, {segments} segments, "
        f"{report.objects_listed} objects listed"
        + (f", {report.objects_read} objects read" if report.objects_read else "")
    )
    for f in report.findings:
        what = f.key if f.key is not None else f"segment {uuid_to_base64(f.segment_id)}"
        print(f"{_where(f)}: {f.kind.value}: {what}: {f.message}")
    for n in report.notes:
        where = (
            ""
            if n.topic is None
            else f" {n.topic}" + ("" if n.partition is None else f"-{n.partition}")
        )
        print(f"note{where}: {n.message}")
    if report.consistent:
        print("consistent")
    else:
        counts = Counter(f.kind.value for f in report.findings)
        print(
            f"{len(report.findings)} findings ("
            + ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
            + ")"
        )
    if result is None:
        return
    verb = "would delete" if result.dry_run else "deleted"
    head = "repair (dry run: add --yes to apply)" if result.dry_run else "repair"
    print(f"{head}:")
    print(f"  {verb} {len(result.deleted_objects)} orphan objects")
    for key in result.deleted_objects:
        print(f"    {key}")
    finish = "would finish" if result.dry_run else "finished"
    print(f"  {finish} {len(result.finished_deletions)} stuck deletions")
    for md in result.finished_deletions:
        tp = md.topic_id_partition
        print(f"    segment {uuid_to_base64(md.segment_id)} of {tp.topic}-{tp.partition}")
    if result.not_repaired:
        print(f"  not repaired: {len(result.not_repaired)} findings")
        for f, reason in result.not_repaired:
            what = f.key if f.key is not None else f"segment {uuid_to_base64(f.segment_id)}"
            print(f"    {_where(f)}: {f.kind.value}: {what}: {reason}")
