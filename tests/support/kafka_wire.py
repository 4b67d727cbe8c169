"""Kafka requests over a raw socket, encoded and decoded with kio.

For what no client library sends: ListOffsets -6 (KIP-1023) at v11, which kafka-python and
librdkafka refuse to put on the wire (and the timestamp and leader epoch of an answer, which
clients do not all show), Metadata requests for topic names clients would refuse to send
(control characters, non-ASCII look-alikes), and requests pipelined on one connection.
"""

from __future__ import annotations

import datetime
import importlib
import io
import socket
import struct
from collections.abc import Sequence
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.list_offsets.v11.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from core.server.api_keys import ApiKey

SIZE = struct.Struct(">i")


class Connection:
    """One connection: requests sent one at a time (a SASL exchange needs it) or several
    in one write (pipelined)."""

    def __init__(
        self, bootstrap: str, timeout_s: float = 10, client_id: str = "tierlog-tests"
    ) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation_id = 0
        self.client_id = client_id

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, request: Any) -> int:
        """Send ``request`` without waiting; returns its correlation id."""
        return self.send_all([(api_key, version, request)])[0]

    def send_all(self, requests: Sequence[tuple[int, int, Any]]) -> list[int]:
        """Send every ``(api_key, version, request)`` in one write, so that the broker
        receives them together; returns their correlation ids."""
        frames = bytearray()
        sent = []
        for api_key, version, request in requests:
            self.correlation_id += 1
            frames += self._frame(api_key, version, request)
            sent.append(self.correlation_id)
        self.sock.sendall(frames)
        return sent

    def _frame(self, api_key: int, version: int, request: Any) -> bytes:
        request_cls = load_request_schema(api_key, version)
        header_cls = request_cls.__header_schema__
        out = io.BytesIO()
        entity_writer(header_cls)(
            out,
            header_cls(
                request_api_key=i16(api_key),
                request_api_version=i16(version),
                correlation_id=i32(self.correlation_id),
                client_id=self.client_id,
            ),
        )
        entity_writer(request_cls)(out, request)
        body = out.getvalue()
        return SIZE.pack(len(body)) + body

    def receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        """Read the next response, which must answer ``correlation_id``, and decode it."""
        (size,) = SIZE.unpack(_read_exactly(self.sock, 4))
        answer = _read_exactly(self.sock, size)
        response_cls = load_response_schema(api_key, version)
        header, used = entity_reader(response_cls.__header_schema__)(answer, 0)
        assert header.correlation_id == correlation_id
        response, _ = entity_reader(response_cls)(answer, used)
        return response

    def request(self, api_key: int, version: int, request: Any) -> Any:
        """Send ``request`` and return the decoded response body."""
        return self.receive(api_key, version, self.send(api_key, version, request))


def call(bootstrap: str, api_key: int, version: int, request: Any, timeout_s: float = 10) -> Any:
    """Send ``request`` on a fresh connection and return the decoded response body."""
    with Connection(bootstrap, timeout_s) as connection:
        return connection.request(api_key, version, request)


def pipeline(
    bootstrap: str, requests: Sequence[tuple[int, int, Any]], timeout_s: float = 10
) -> list[Any]:
    """Send every ``(api_key, version, request)`` at once (in one write) on one fresh
    connection, then read the responses (in request order, as Kafka answers them) and
    return their bodies.

    Raises:
        TimeoutError: a response did not come within ``timeout_s`` of the previous one.
    """
    with Connection(bootstrap, timeout_s) as connection:
        sent = connection.send_all(requests)
        return [
            connection.receive(k, v, correlation_id)
            for (k, v, _), correlation_id in zip(requests, sent, strict=True)
        ]


def list_offsets_request(
    topic: str, partition: int, timestamp: int, isolation_level: int = 0
) -> ListOffsetsRequest:
    """ListOffsets v11 for one partition at ``timestamp`` (-1 latest, -2 earliest, ...);
    ``isolation_level`` 0 READ_UNCOMMITTED, 1 READ_COMMITTED."""
    return ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(isolation_level),
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=(
                    ListOffsetsPartition(
                        partition_index=i32(partition),
                        current_leader_epoch=i32(-1),
                        timestamp=i64(timestamp),
                    ),
                ),
            ),
        ),
        timeout=datetime.timedelta(seconds=30),
    )


def list_offset_v11(bootstrap: str, topic: str, partition: int, timestamp: int) -> int:
    """ListOffsets v11 for one partition; the offset answered (fails on an error code)."""
    return list_offset_answer(bootstrap, topic, partition, timestamp)[1]


def list_offset_answer(
    bootstrap: str, topic: str, partition: int, timestamp: int, isolation_level: int = 0
) -> tuple[int, int, int]:
    """ListOffsets v11 for one partition: ``(timestamp, offset, leader epoch)`` answered
    (fails on an error code)."""
    request = list_offsets_request(topic, partition, timestamp, isolation_level)
    response = call(bootstrap, ApiKey.LIST_OFFSETS, 11, request)
    answer = response.topics[0].partitions[0]
    assert answer.error_code.value == 0, f"ListOffsets {timestamp}: {answer.error_code}"
    return int(answer.timestamp), int(answer.offset), int(answer.leader_epoch)


def metadata_request(names: Sequence[str], version: int = 12, *, auto_create: bool = True) -> Any:
    """A Metadata request for ``names``. Versions below 4 always allow auto-creation; from 4
    on, ``auto_create`` says."""
    schema = importlib.import_module(f"kio.schema.metadata.v{version}.request")
    topics = tuple(
        schema.MetadataRequestTopic(name=name)
        if version < 10
        else schema.MetadataRequestTopic(topic_id=None, name=name)
        for name in names
    )
    fields: dict[str, Any] = {"topics": topics}
    if version >= 4:
        fields["allow_auto_topic_creation"] = auto_create
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = False
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
    return schema.MetadataRequest(**fields)


def metadata_errors(
    bootstrap: str, names: list[str], version: int = 12, *, auto_create: bool = True
) -> list[tuple[str, int]]:
    """Metadata for ``names``: each topic's name and error code (see ``metadata_request``)."""
    request = metadata_request(names, version, auto_create=auto_create)
    response = call(bootstrap, ApiKey.METADATA, version, request)
    return [(t.name, t.error_code.value) for t in response.topics]


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)
