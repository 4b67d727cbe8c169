"""Kafka requests over a raw socket, encoded and decoded with kio.

For what no client library sends: ListOffsets -6 (KIP-1023) at v11, which kafka-python and
librdkafka refuse to put on the wire, and requests pipelined on one connection.
"""

from __future__ import annotations

import datetime
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


def call(bootstrap: str, api_key: int, version: int, request: Any, timeout_s: float = 10) -> Any:
    """Send ``request`` on a fresh connection and return the decoded response body."""
    (response,) = pipeline(bootstrap, [(api_key, version, request)], timeout_s)
    return response


def pipeline(
    bootstrap: str, requests: Sequence[tuple[int, int, Any]], timeout_s: float = 10
) -> list[Any]:
    """Send every ``(api_key, version, request)`` at once on one fresh connection, then read
    the responses (in request order, as Kafka answers them) and return their bodies.

    Raises:
        TimeoutError: a response did not come within ``timeout_s`` of the previous one.
    """
    frames = bytearray()
    for correlation_id, (api_key, version, request) in enumerate(requests, start=1):
        request_cls = load_request_schema(api_key, version)
        header_cls = request_cls.__header_schema__
        out = io.BytesIO()
        entity_writer(header_cls)(
            out,
            header_cls(
                request_api_key=i16(api_key),
                request_api_version=i16(version),
                correlation_id=i32(correlation_id),
                client_id="tierlog-tests",
            ),
        )
        entity_writer(request_cls)(out, request)
        body = out.getvalue()
        frames += SIZE.pack(len(body)) + body
    host, port = bootstrap.rsplit(":", 1)
    responses = []
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(frames)
        for correlation_id, (api_key, version, _) in enumerate(requests, start=1):
            (size,) = SIZE.unpack(_read_exactly(sock, 4))
            answer = _read_exactly(sock, size)
            response_cls = load_response_schema(api_key, version)
            header, used = entity_reader(response_cls.__header_schema__)(answer, 0)
            assert header.correlation_id == correlation_id
            response, _ = entity_reader(response_cls)(answer, used)
            responses.append(response)
    return responses


def list_offset_v11(bootstrap: str, topic: str, partition: int, timestamp: int) -> int:
    """ListOffsets v11 for one partition; the offset answered (fails on an error code)."""
    request = ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(0),  # READ_UNCOMMITTED
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
    response = call(bootstrap, ApiKey.LIST_OFFSETS, 11, request)
    answer = response.topics[0].partitions[0]
    assert answer.error_code.value == 0, f"ListOffsets {timestamp}: {answer.error_code}"
    return int(answer.offset)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)
