"""A log dir's ``meta.properties``, as Kafka in KRaft mode writes it (MetaProperties, v1).

A Java properties file, UTF-8::

    #
    #<comment, Java writes the date here>
    version=1
    node.id=<int32>
    cluster.id=<string, Kafka uses a base64url uuid>
    directory.id=<uuid: 16 bytes, base64url, 22 characters, no padding>

``version=1`` requires ``node.id`` and ``cluster.id``; ``directory.id`` is optional (Kafka
assigns one when it formats the dir). Version 0 (ZooKeeper mode, ``broker.id``) is read too,
so that a dir from an old broker is reported rather than silently accepted.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from core.errors import InvalidMetaPropertiesError, KafkaStorageError
from core.fs import atomic_write
from core.kafka_uuid import uuid_from_base64, uuid_to_base64
from core.properties import PropertiesSyntaxError, format_properties, parse_properties

META_PROPERTIES_FILE = "meta.properties"
VERSION_PROP = "version"
NODE_ID_PROP = "node.id"
BROKER_ID_PROP = "broker.id"
CLUSTER_ID_PROP = "cluster.id"
DIRECTORY_ID_PROP = "directory.id"

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_DECIMAL = re.compile(r"[+-]?[0-9]+")
# Kafka's DirectoryId reserves the uuids whose 128-bit value is below 100 (UNASSIGNED, LOST,
# MIGRATING, ...); a real directory never gets one.
_RESERVED_DIRECTORY_IDS = 100


def random_directory_id() -> str:
    """A new directory id as Kafka picks one: random, not reserved, not starting with '-'.

    Kafka avoids a leading '-' so that the id can be passed on a command line.
    """
    while True:
        value = uuid.uuid4()
        text = uuid_to_base64(value)
        if value.int >= _RESERVED_DIRECTORY_IDS and not text.startswith("-"):
            return text


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The identity stored in one log dir.

    Attributes:
        node_id: the broker's ``node.id`` (``broker.id`` in a version-0 file).
        cluster_id: the cluster the dir was formatted for.
        directory_id: this dir's uuid in Kafka's base64url form, or None.
        version: 1 (KRaft) or 0 (ZooKeeper era, read only).
    """

    node_id: int
    cluster_id: str
    directory_id: str | None = None
    version: int = 1

    def __post_init__(self) -> None:
        if self.version not in (0, 1):
            raise ValueError(f"meta.properties version {self.version} is not 0 or 1")
        if not INT32_MIN <= self.node_id <= INT32_MAX:
            raise ValueError(f"node.id {self.node_id} is not an int32")
        if self.version == 1 and not self.cluster_id:
            raise ValueError("cluster.id must not be empty")
        if any(c in self.cluster_id for c in "\r\n"):
            raise ValueError(f"cluster.id {self.cluster_id!r} contains a line break")
        if self.directory_id is not None:
            uuid_from_base64(self.directory_id)  # raises ValueError naming the value

    def to_properties(self) -> dict[str, str]:
        props = {VERSION_PROP: str(self.version)}
        props[NODE_ID_PROP if self.version == 1 else BROKER_ID_PROP] = str(self.node_id)
        if self.cluster_id:
            props[CLUSTER_ID_PROP] = self.cluster_id
        if self.directory_id is not None:
            props[DIRECTORY_ID_PROP] = self.directory_id
        return props

    def encode(self) -> bytes:
        """The file's bytes: a comment header, then one ``key=value`` line per property."""
        # Java's Properties.store writes an empty comment line, then the date; we write a
        # note in place of the date.
        return format_properties(self.to_properties(), "\nWritten by tierlog").encode("utf-8")


# -- file I/O ---------------------------------------------------------------------------------


def _int_prop(props: dict[str, str], key: str, source: Path) -> int:
    value = props.get(key)
    if value is None:
        raise InvalidMetaPropertiesError(f"{source}: {key} was not found")
    if _DECIMAL.fullmatch(value) is None or not INT32_MIN <= int(value) <= INT32_MAX:
        raise InvalidMetaPropertiesError(f"{source}: {key}={value!r} is not a base-10 int32")
    return int(value)


def decode(data: bytes, source: Path) -> MetaProperties:
    """Parse the bytes of a meta.properties file; ``source`` names it in errors.

    Raises:
        InvalidMetaPropertiesError: not UTF-8, an unknown version, a missing or malformed
            property; the message names ``source`` and the property.
    """
    try:
        props = parse_properties(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InvalidMetaPropertiesError(f"{source}: not valid UTF-8 at byte {e.start}") from e
    except PropertiesSyntaxError as e:
        raise InvalidMetaPropertiesError(f"{source}: {e}") from e
    version_text = props.get(VERSION_PROP, "0")
    if version_text not in ("0", "1"):
        raise InvalidMetaPropertiesError(f"{source}: unknown version={version_text!r}")
    version = int(version_text)
    cluster_id = props.get(CLUSTER_ID_PROP)
    if version == 1:
        node_id = _int_prop(props, NODE_ID_PROP, source)
        if not cluster_id:
            raise InvalidMetaPropertiesError(f"{source}: {CLUSTER_ID_PROP} was not found")
    else:
        node_id = _int_prop(props, BROKER_ID_PROP, source)
    directory_id = props.get(DIRECTORY_ID_PROP)
    if directory_id is not None:
        try:
            uuid_from_base64(directory_id)
        except ValueError as e:
            raise InvalidMetaPropertiesError(
                f"{source}: unable to read {DIRECTORY_ID_PROP} as a uuid: {e}"
            ) from e
    return MetaProperties(node_id, cluster_id or "", directory_id, version)


def read(path: str | os.PathLike[str]) -> MetaProperties | None:
    """Read ``path`` (the file, not the dir); None if it does not exist.

    Raises:
        InvalidMetaPropertiesError: the file is malformed (see ``decode``).
        KafkaStorageError: the file exists but cannot be read.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KafkaStorageError(f"cannot read {path}: {e}") from e
    return decode(data, path)


def write(path: str | os.PathLike[str], mp: MetaProperties) -> None:
    """Replace ``path`` with ``mp`` atomically and durably.

    Raises:
        KafkaStorageError: the file could not be written; the old file is then intact.
    """
    try:
        atomic_write(path, mp.encode())
    except OSError as e:
        raise KafkaStorageError(f"cannot write {path}: {e}") from e


def check_matches(
    log_dir: str | os.PathLike[str],
    mp: MetaProperties,
    *,
    node_id: int,
    cluster_id: str | None = None,
) -> None:
    """Refuse a log dir whose stored identity differs from this broker's.

    Args:
        log_dir: the dir the properties were read from (named in the error).
        mp: what the dir's meta.properties holds.
        node_id: this broker's configured ``node.id``.
        cluster_id: the cluster this broker belongs to, if known.

    Raises:
        InvalidMetaPropertiesError: a different node id or cluster id; a version-0 dir.
    """
    where = Path(log_dir) / META_PROPERTIES_FILE
    if mp.version != 1:
        raise InvalidMetaPropertiesError(
            f"{where}: version {mp.version} (ZooKeeper mode) is not supported; "
            "the dir must be formatted for KRaft (version=1)"
        )
    if mp.node_id != node_id:
        raise InvalidMetaPropertiesError(
            f"{where}: stored node.id {mp.node_id} does not match the configured "
            f"node.id {node_id}; this log dir belongs to another broker"
        )
    if cluster_id is not None and mp.cluster_id != cluster_id:
        raise InvalidMetaPropertiesError(
            f"{where}: stored cluster.id {mp.cluster_id!r} does not match the cluster id "
            f"{cluster_id!r}; this log dir belongs to another cluster"
        )
