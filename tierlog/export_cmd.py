"""``tierlog export``: a tiered topic's archive to Parquet (spark_jobs.export) or to an
Iceberg table (spark_jobs.iceberg_export) with Spark.

    tierlog export --config server.properties --topic T [--partitions 0,1] --output PATH_OR_URI
                   [--since TS] [--until TS] [--master local[*]]
                   [--format parquet|iceberg --table NAMESPACE.TABLE [--catalog-uri URI]
                    [--catalog-property k=v ...]]

With ``--format iceberg`` the output is the warehouse; the catalog is pyiceberg's SQL catalog
on a SQLite file in the warehouse unless ``--catalog-uri`` names another (``sqlite:///...``,
any SQLAlchemy URL, or ``http(s)://...`` for a REST catalog).

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
        help="export a tiered topic's archive to Parquet or an Iceberg table (Spark)",
        description="Export a tiered topic's archive with Spark: to hive-partitioned zstd "
        "Parquet, or appended exactly once to an Iceberg table.",
    )
    p.add_argument("--config", type=Path, required=True, help="the broker's server.properties")
    p.add_argument("--topic", required=True, help="topic(s), comma-separated")
    p.add_argument("--partitions", help="partitions, comma-separated (default: all)")
    p.add_argument(
        "--output",
        required=True,
        help="a directory or fsspec URL (s3://...); with --format iceberg, the warehouse",
    )
    p.add_argument("--since", help="first timestamp: epoch ms or ISO date/time")
    p.add_argument("--until", help="end timestamp (exclusive): epoch ms or ISO date/time")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument(
        "--format", choices=("parquet", "iceberg"), default="parquet", help="default parquet"
    )
    p.add_argument("--table", help="with --format iceberg: the table, NAMESPACE.TABLE")
    p.add_argument(
        "--catalog-uri",
        help="with --format iceberg: sqlite:///PATH (default: in the warehouse) or http(s)://... "
        "(a REST catalog)",
    )
    p.add_argument(
        "--catalog-property",
        action="append",
        default=[],
        metavar="K=V",
        help="with --format iceberg: a pyiceberg catalog property (repeatable)",
    )
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
    if args.format != "iceberg" and (args.table or args.catalog_uri or args.catalog_property):
        raise CommandError(
            "--table, --catalog-uri and --catalog-property need --format iceberg", exit_code=2
        )
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
    if args.format == "iceberg":
        return run_iceberg(args, options)

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


def run_iceberg(args: argparse.Namespace, options: dict[str, str]) -> int:
    if not args.table:
        raise CommandError("--format iceberg needs --table NAMESPACE.TABLE", exit_code=2)
    properties = {}
    for pair in args.catalog_property:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--catalog-property: expected K=V, got {pair!r}", exit_code=2)
        properties[key] = value
    from core.extras import MissingExtraError

    try:
        from spark_jobs.iceberg_export import run_iceberg_export
        from spark_jobs.iceberg_table import IcebergTarget
    except MissingExtraError as e:
        raise CommandError(str(e)) from e
    from spark_jobs.export import spark_session

    target = IcebergTarget(args.output, args.table, args.catalog_uri, properties)
    try:
        target.identifier()  # a malformed --table fails before Spark starts
    except ValueError as e:
        raise CommandError(str(e), exit_code=2) from e
    spark = spark_session(args.master, "tierlog-iceberg-export")
    try:
        summary = run_iceberg_export(spark, options, target)
    except ValueError as e:
        raise CommandError(str(e)) from e
    finally:
        spark.stop()
    print(summary.line())
    return EXIT_OK
