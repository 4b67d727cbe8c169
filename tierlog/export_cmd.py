"""``tierlog export``: a tiered topic's archive to Parquet with Spark (spark_jobs.export).

    tierlog export --config server.properties --topic T [--partitions 0,1] --output PATH_OR_URI
                   [--since TS] [--until TS] [--master local[*]]

The broker's config file gives the RSM plugin and its ``rsm.config.*`` settings (the export
reads the bucket directly, no broker needs to run). ``--since`` / ``--until`` take epoch
milliseconds or an ISO date/time (UTC unless it says otherwise). Also runnable as
``spark-submit spark_jobs/export.py OUTPUT topic=T rsm.config.storage.root=...``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from tierlog.cli import EXIT_OK, CommandError, Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a tiered topic's archive to Parquet (Spark)",
        description="Export a tiered topic's archive to hive-partitioned zstd Parquet with Spark.",
    )
    p.add_argument("--config", type=Path, required=True, help="the broker's server.properties")
    p.add_argument("--topic", required=True, help="topic(s), comma-separated")
    p.add_argument("--partitions", help="partitions, comma-separated (default: all)")
    p.add_argument("--output", required=True, help="a directory or fsspec URL (s3://...)")
    p.add_argument("--since", help="first timestamp: epoch ms or ISO date/time")
    p.add_argument("--until", help="end timestamp (exclusive): epoch ms or ISO date/time")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.set_defaults(handler=run_export)


def timestamp_ms(text: str, option: str) -> int:
    """Epoch milliseconds from ``text`` (a number, or an ISO date or date/time).

    Raises:
        CommandError: neither, naming the option.
    """
    if text.isascii() and text.isdigit():  # isdigit alone also accepts "²", which int() refuses
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"{option}: expected epoch milliseconds or an ISO date/time, got {text!r}",
            exit_code=2,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def run_export(args: argparse.Namespace) -> int:
    from core.properties import PropertiesFileError, read_properties

    try:
        props = read_properties(args.config)
    except PropertiesFileError as e:
        raise CommandError(str(e)) from e
    options = {
        k: v
        for k, v in props.items()
        if k.startswith("rsm.config.") or k == "remote.log.storage.manager.class.name"
    }
    options["topic"] = args.topic
    if args.partitions:
        options["partitions"] = args.partitions
    if args.since:
        options["startingTimestamp"] = str(timestamp_ms(args.since, "--since"))
    if args.until:
        options["endingTimestamp"] = str(timestamp_ms(args.until, "--until"))
    from core.extras import MissingExtraError
    from tiered.api import RSM_CLASS_NAME, RemoteStorageError, RemoteStorageManager, load_plugin

    try:
        from spark_jobs.archive import ArchiveConfig
        from spark_jobs.export import run_export as export
        from spark_jobs.export import spark_session
    except MissingExtraError as e:
        raise CommandError(str(e)) from e
    # A plugin that cannot load (its extra missing, say) is reported before Spark starts.
    try:
        load_plugin(
            ArchiveConfig.from_options(options).rsm_class, RemoteStorageManager, key=RSM_CLASS_NAME
        )
    except RemoteStorageError as e:
        raise CommandError(str(e)) from e

    spark = spark_session(args.master)
    try:
        summary = export(spark, options, args.output)
    except (ValueError, RemoteStorageError) as e:
        # RemoteStorageError: the plugin cannot load (its extra is missing, the message says
        # which) or configure, or the remote tier cannot be read from the driver.
        raise CommandError(str(e)) from e
    finally:
        spark.stop()
    print(summary.line())
    return EXIT_OK
