"""The Iceberg table the archive is exported to: its schema, partitioning and sort order,
the catalog that holds it, and the export state it records.

Schema: Spark's Kafka source columns plus ``leaderEpoch`` and ``producerId``, with fixed
Iceberg field ids (the ids a fresh Iceberg table assigns to this column order, so a table
created by tierlog, by Spark or by pyiceberg from this schema has the same ids). ``timestamp``
is ``timestamptz``: a Kafka timestamp is an instant (epoch milliseconds), and ``timestamptz``
is the Iceberg type Spark reads as its ``TimestampType``, the type of the Kafka source's
column; ``timestamp`` (without zone) would read as ``TimestampNTZType``.

Partitioned by ``identity(partition)`` and ``day(timestamp)``; sort order ``partition,
offset`` (each data file holds one partition's offsets in increasing order).

Export state: the offsets each partition has had exported, as JSON
(``spark_jobs.offset_ranges``), in every export snapshot's summary under
``tierlog.exported-ranges`` (cumulative) and ``tierlog.added-ranges`` (this snapshot's). The
nearest ancestor of the current snapshot that carries it is authoritative (a rollback rolls
the state back with the data). The same cumulative value is kept in the table property
``tierlog.exported-ranges``, used only when no ancestor carries it: after a compaction
snapshot (which carries no tierlog summary) whose predecessors were expired.

pyiceberg is an optional dependency (``pip install 'tierlog[iceberg]'``); the base install
never imports this module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

from core.extras import requires_extra

with requires_extra("iceberg", "the Iceberg export (tierlog export --format iceberg)"):
    from pyiceberg.catalog import Catalog, load_catalog
    from pyiceberg.exceptions import CommitFailedException, NotInstalledError, RESTError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import ancestors_of
    from pyiceberg.table.sorting import SortField, SortOrder
    from pyiceberg.transforms import DayTransform, IdentityTransform
    from pyiceberg.types import (
        BinaryType,
        IcebergType,
        IntegerType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

from spark_jobs.offset_ranges import ExportedRanges

STATE_KEY = "tierlog.exported-ranges"
ADDED_KEY = "tierlog.added-ranges"
DEFAULT_CATALOG_NAME = "tierlog"
SQLITE_FILE = "tierlog-catalog.db"

SCHEMA = Schema(
    NestedField(1, "key", BinaryType(), required=False),
    NestedField(2, "value", BinaryType(), required=False),
    NestedField(3, "topic", StringType(), required=True),
    NestedField(4, "partition", IntegerType(), required=True),
    NestedField(5, "offset", LongType(), required=True),
    NestedField(6, "timestamp", TimestamptzType(), required=True),
    NestedField(7, "timestampType", IntegerType(), required=True),
    NestedField(
        8,
        "headers",
        ListType(
            11,
            StructType(
                NestedField(12, "key", StringType(), required=True),
                NestedField(13, "value", BinaryType(), required=False),
            ),
            element_required=True,
        ),
        required=False,
    ),
    NestedField(9, "leaderEpoch", IntegerType(), required=True),
    NestedField(10, "producerId", LongType(), required=True),
)
PARTITION_SPEC = PartitionSpec(
    PartitionField(source_id=4, field_id=1000, transform=IdentityTransform(), name="partition"),
    PartitionField(source_id=6, field_id=1001, transform=DayTransform(), name="timestamp_day"),
)
SORT_ORDER = SortOrder(
    SortField(source_id=4, transform=IdentityTransform()),
    SortField(source_id=5, transform=IdentityTransform()),
)
TABLE_PROPERTIES = {"write.parquet.compression-codec": "zstd"}


class IcebergExportError(ValueError):
    """The Iceberg export cannot go on; the message names the table, column or catalog."""


class IcebergSchemaError(IcebergExportError):
    """The existing table does not fit the export's schema or partitioning."""


# -- the catalog ------------------------------------------------------------------------------
@dataclass(frozen=True)
class IcebergTarget:
    """Where to export: a warehouse, a catalog and a table identifier ``namespace.table``.

    ``catalog_uri``: ``sqlite:///path`` (pyiceberg's SQL catalog; any SQLAlchemy URL) or
    ``http(s)://...`` (a REST catalog). Default: a SQLite file in a local warehouse.
    ``catalog_properties``: more pyiceberg catalog properties (``token``, ``credential``,
    ``s3.*``...), winning over those derived from the RSM's S3 settings.
    """

    warehouse: str
    table: str
    catalog_uri: str | None = None
    catalog_properties: Mapping[str, str] = field(default_factory=dict)
    catalog_name: str = DEFAULT_CATALOG_NAME

    def identifier(self) -> tuple[str, ...]:
        """The table identifier as a tuple (namespace levels, then the name).

        Raises:
            IcebergExportError: not ``namespace.table``.
        """
        parts = tuple(self.table.split("."))
        if len(parts) < 2 or not all(parts):
            raise IcebergExportError(f"--table: expected NAMESPACE.TABLE, got {self.table!r}")
        return parts


def _is_local(warehouse: str) -> bool:
    return urlparse(warehouse).scheme in ("", "file")


def _local_path(warehouse: str) -> str:
    parsed = urlparse(warehouse)
    return os.path.abspath(parsed.path if parsed.scheme == "file" else warehouse)


def s3_file_io_properties(options: Mapping[str, str]) -> dict[str, str]:
    """pyiceberg's S3 FileIO properties from the RSM's S3 settings (``rsm.config.*``)."""
    pairs = {
        "rsm.config.storage.s3.endpoint.url": "s3.endpoint",
        "rsm.config.storage.s3.region": "s3.region",
        "rsm.config.storage.aws.access.key.id": "s3.access-key-id",
        "rsm.config.storage.aws.secret.access.key": "s3.secret-access-key",
    }
    out = {ours: options[rsm] for rsm, ours in pairs.items() if options.get(rsm)}
    if options.get("rsm.config.storage.s3.path.style.access.enabled", "").lower() == "false":
        out["s3.force-virtual-addressing"] = "true"
    return out


def catalog_properties(target: IcebergTarget, options: Mapping[str, str]) -> dict[str, str]:
    """pyiceberg catalog properties for ``target``; ``options`` are the archive's (the RSM's
    S3 settings reach the warehouse's FileIO, as for the Parquet export). A local warehouse
    directory is created if missing (the default SQLite catalog lives in it).

    Raises:
        IcebergExportError: no catalog URI for a warehouse that is not a local directory.
    """
    uri = target.catalog_uri
    rest = uri is not None and urlparse(uri).scheme in ("http", "https")
    if rest or not _is_local(target.warehouse):
        warehouse = target.warehouse  # a REST catalog's warehouse may be a name, not a path
    else:
        path = _local_path(target.warehouse)
        os.makedirs(path, exist_ok=True)
        warehouse = "file://" + path
    if uri is None:
        if not _is_local(target.warehouse):
            raise IcebergExportError(
                f"--catalog-uri is needed for the warehouse {target.warehouse}: the default "
                "SQLite catalog lives in a local warehouse only"
            )
        uri = f"sqlite:///{_local_path(target.warehouse)}/{SQLITE_FILE}"
    kind = "rest" if rest else "sql"
    props = {"type": kind, "uri": uri, "warehouse": warehouse}
    if warehouse.startswith(("s3://", "s3a://")):
        props.update(s3_file_io_properties(options))
    props.update(target.catalog_properties)
    return props


def _catalog_errors() -> tuple[type[BaseException], ...]:
    """What opening or asking a catalog raises when the catalog itself is the problem."""
    import requests

    errors: tuple[type[BaseException], ...] = (OSError, RESTError, requests.RequestException)
    try:
        from sqlalchemy.exc import SQLAlchemyError
    except ModuleNotFoundError:
        return errors
    return (*errors, SQLAlchemyError)


def open_catalog(target: IcebergTarget, options: Mapping[str, str]) -> Catalog:
    """The catalog of ``target``, reachable (its first request answered).

    Raises:
        IcebergExportError: it cannot be opened or reached, naming its URI.
    """
    props = catalog_properties(target, options)
    try:
        catalog = load_catalog(target.catalog_name, **props)
        catalog.list_namespaces()
    except _catalog_errors() as e:
        raise IcebergExportError(f"catalog {props['uri']}: cannot be used: {e}") from e
    except (ValueError, NotInstalledError) as e:  # malformed properties, a missing extra
        raise IcebergExportError(f"catalog {props['uri']}: {e}") from e
    return catalog


# -- the table --------------------------------------------------------------------------------
def _shape(t: IcebergType) -> object:
    """``t`` without field ids: what must match between our column and the table's."""
    if isinstance(t, ListType):
        return ("list", t.element_required, _shape(t.element_type))
    if isinstance(t, StructType):
        return ("struct", tuple((f.name, f.required, _shape(f.field_type)) for f in t.fields))
    return t


def check_and_evolve(table: Table) -> Table:
    """Make ``table`` fit the export: columns it lacks are added (optional, ids assigned by
    Iceberg); a column of ours with another type, a required column of the table we could
    leave null, or another partitioning is refused.

    Raises:
        IcebergSchemaError: naming the column or the partition field.
    """
    name = ".".join(table.name())
    schema = table.schema()
    theirs = {f.name: f for f in schema.fields}
    missing = []
    for ours in SCHEMA.fields:
        existing = theirs.get(ours.name)
        if existing is None:
            missing.append(ours)
            continue
        if _shape(existing.field_type) != _shape(ours.field_type):
            raise IcebergSchemaError(
                f"table {name}: column {ours.name!r} is {existing.field_type} in the table, "
                f"tierlog writes {ours.field_type}"
            )
        if existing.required and not ours.required:
            raise IcebergSchemaError(
                f"table {name}: column {ours.name!r} is required in the table, "
                "tierlog writes nulls in it"
            )
    ours_names = {f.name for f in SCHEMA.fields}
    for f in schema.fields:
        if f.required and f.name not in ours_names:
            raise IcebergSchemaError(
                f"table {name}: column {f.name!r} is required and tierlog does not write it"
            )
    _check_partitioning(table, name)
    if missing:
        with table.update_schema() as update:
            for ours in missing:
                update.add_column(ours.name, ours.field_type, required=False)
    return table


def _check_partitioning(table: Table, name: str) -> None:
    schema = table.schema()
    have = sorted(
        (schema.find_column_name(f.source_id) or "?", str(f.transform)) for f in table.spec().fields
    )
    want = sorted(
        (SCHEMA.find_column_name(f.source_id) or "?", str(f.transform))
        for f in PARTITION_SPEC.fields
    )
    if have != want:
        shown = ", ".join(f"{t}({c})" for c, t in have) or "nothing"
        raise IcebergSchemaError(
            f"table {name}: partitioned by {shown}; tierlog writes identity(partition), "
            "day(timestamp)"
        )


def load_or_create_table(catalog: Catalog, target: IcebergTarget) -> Table:
    """The table of ``target``, created (and its namespace) if missing, checked and evolved
    (``check_and_evolve``) if not."""
    identifier = target.identifier()
    namespace = identifier[:-1]
    try:
        catalog.create_namespace_if_not_exists(namespace)
        table = catalog.create_table_if_not_exists(
            identifier,
            schema=SCHEMA,
            partition_spec=PARTITION_SPEC,
            sort_order=SORT_ORDER,
            properties=TABLE_PROPERTIES,
        )
    except _catalog_errors() as e:
        raise IcebergExportError(f"table {target.table}: cannot be created or loaded: {e}") from e
    for _ in range(3):
        try:
            return check_and_evolve(table)
        except CommitFailedException:  # another export evolved it first: look again
            table = catalog.load_table(identifier)
    return check_and_evolve(table)


def exported_ranges(table: Table) -> ExportedRanges:
    """The offsets already exported to ``table`` (see the module docstring).

    Raises:
        IcebergExportError: the table has snapshots but no tierlog state (tierlog did not
            write it), or the state is malformed.
    """
    name = ".".join(table.name())
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        text = snapshot.summary.additional_properties.get(STATE_KEY) if snapshot.summary else None
        if text is not None:
            return ExportedRanges.from_json(
                text, f"table {name}, snapshot {snapshot.snapshot_id}, summary {STATE_KEY}"
            )
    text = table.properties.get(STATE_KEY)
    if text is not None:
        return ExportedRanges.from_json(text, f"table {name}, property {STATE_KEY}")
    if table.current_snapshot() is not None:
        raise IcebergExportError(
            f"table {name} has data but no {STATE_KEY} in its snapshots or properties: "
            "tierlog export did not write it; export to a new table"
        )
    return ExportedRanges.empty()
