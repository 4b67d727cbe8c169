"""Where ``tierlog metadata`` reads ``__remote_log_metadata`` from: a running cluster
(``--bootstrap-server``, with ``--command-config``) or a stopped broker's log dirs
(``--log-dirs``), and each user partition's log end offset from the same place.

Shared by the actions of ``tierlog.metadata_cmd`` and by ``tierlog.verify_cmd``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import CoreError
from core.log.file_records import FileRecords
from core.server.topics import read_partition_metadata
from rlmm.topic_client import (
    METADATA_TOPIC,
    LogDirMetadataTopicReader,
    MetadataTopicClient,
    MetadataTopicError,
)
from tiered.api import RemoteStorageError, TopicIdPartition
from tierlog.cli import CommandError

READ_BATCH = 10_000  # records per read of a metadata partition
MAX_WARNINGS_SHOWN = 50


@dataclass
class Source:
    client: MetadataTopicClient
    num_partitions: int
    log_dirs: list[Path] | None
    end_offset_of: Callable[[TopicIdPartition], int | None]

    def close(self) -> None:
        self.client.close()


def open_source(args: argparse.Namespace) -> Source:
    """The metadata-topic client named by the arguments.

    Raises:
        CommandError: the source cannot be opened or the topic does not exist there.
    """
    client: MetadataTopicClient
    try:
        if args.bootstrap_server:
            from rlmm.kafka_client import KafkaMetadataTopicClient

            settings = client_properties(args.command_config) if args.command_config else {}
            kafka = KafkaMetadataTopicClient(
                args.bootstrap_server, timeout_s=args.timeout, **settings
            )
            client = kafka
            log_dirs = None

            def end_offset_of(tp: TopicIdPartition) -> int | None:
                try:
                    return kafka.high_watermark(tp.topic, tp.partition)
                except MetadataTopicError:
                    return None  # the topic is gone or unreachable: lag unknown

        else:
            log_dirs = list(args.log_dirs)
            client = LogDirMetadataTopicReader(log_dirs)

            def end_offset_of(tp: TopicIdPartition) -> int | None:
                return _log_dir_end_offset(log_dirs, tp)

        num = args.num_partitions or client.partition_count()
    except RemoteStorageError as e:
        raise CommandError(str(e)) from e
    return Source(client, num, log_dirs, end_offset_of)


def _log_dir_end_offset(log_dirs: Sequence[Path], tp: TopicIdPartition) -> int | None:
    """The log end offset of a user partition from its ``.log`` files, if a log dir has them
    (and, when it says so, for the same topic id)."""
    for log_dir in log_dirs:
        directory = Path(log_dir) / f"{tp.topic}-{tp.partition}"
        logs = sorted(directory.glob("*.log"))
        if not logs:
            continue
        try:
            topic_id = read_partition_metadata(directory)
        except (OSError, ValueError, CoreError):
            topic_id = None
        if topic_id is not None and topic_id != tp.topic_id:
            continue  # a topic of the same name, created again
        for path in reversed(logs):
            last = -1
            records = FileRecords(path, create=False, writable=False)
            try:
                size = records.size
                for position, header in records.batch_headers():
                    if position + header.size_in_bytes > size:
                        break  # a torn tail: the batches before it count
                    last = header.last_offset
            except CoreError:
                pass  # an unreadable header: the batches before it count
            finally:
                records.close()
            if last >= 0:
                return last + 1
        return int(logs[-1].name.split(".", 1)[0])  # empty segments: the newest base offset
    return None


def read_records(source: Source) -> Iterator[tuple[int, int, bytes]]:
    """``(partition, offset, value)`` of every record, partition by partition, in offset order.

    Raises:
        CommandError: a partition cannot be read.
    """
    client = source.client
    for partition in range(source.num_partitions):
        try:
            end = client.end_offset(partition)
            offset = 0
            while offset < end:
                batch = client.read(partition, offset, READ_BATCH)
                if not batch:
                    break
                for record in batch:
                    yield partition, record.offset, record.value
                offset = batch[-1].offset + 1
        except RemoteStorageError as e:
            raise CommandError(f"{METADATA_TOPIC}-{partition}: {e}") from e


def print_warnings(warnings: Sequence[str]) -> None:
    for w in warnings[:MAX_WARNINGS_SHOWN]:
        print(f"tierlog: warning: {w}", file=sys.stderr)
    if len(warnings) > MAX_WARNINGS_SHOWN:
        print(
            f"tierlog: warning: ... and {len(warnings) - MAX_WARNINGS_SHOWN} more",
            file=sys.stderr,
        )


def client_properties(path: Path) -> dict[str, str]:
    """Kafka client properties from a ``--command-config`` file, for librdkafka.

    Kafka's Java tools take SASL credentials as a JAAS entry (``sasl.jaas.config=...
    PlainLoginModule required username="u" password="p";``); librdkafka takes
    ``sasl.username`` / ``sasl.password``: the entry is translated.

    Raises:
        CommandError: the file cannot be read, or its JAAS entry cannot be parsed.
    """
    from core.properties import PropertiesFileError, read_properties
    from core.server.sasl import JaasConfigError, parse_jaas

    try:
        props = read_properties(path)
    except PropertiesFileError as e:
        raise CommandError(str(e)) from e
    jaas = props.pop("sasl.jaas.config", None)
    if jaas is not None:
        try:
            _, options = parse_jaas(jaas)
        except JaasConfigError as e:
            raise CommandError(f"{path}: sasl.jaas.config: {e}") from e
        if "username" in options:
            props.setdefault("sasl.username", options["username"])
        if "password" in options:
            props.setdefault("sasl.password", options["password"])
    return props
