"""The null broker: the baseline of the broker benchmarks.

A minimal in-memory Kafka server built from the same parts as tierlog's network layer
(``core.server.protocol.ProtocolCodec`` and ``core.server.network.SocketServer``: the same
kio codec, frame guard, framing and ordered responses) with handlers that answer only
ApiVersions, Metadata, Produce, Fetch and ListOffsets, from memory. Whatever tierlog spends
beyond it is what its storage, purgatory and bookkeeping cost.

Each partition keeps the appended bytes in memory, one chunk per produce request. Produce
walks the 61-byte batch headers of the request, assigns base offsets as a log does (patched
in place: the CRC does not cover the base offset) and keeps the chunk. Fetch locates the
batch holding the fetch offset by bisecting the batch base offsets and returns whole
batches up to the partition's byte limit (at least one batch), waiting up to ``max_wait``
for data when there is none. No validation, no persistence, no idempotence; auto-created
topics with ``--partitions`` partitions (default 1).

    python -m bench.null_broker [--host 127.0.0.1] [--port 0] [--partitions 1]

prints ``null broker listening on PLAINTEXT://HOST:PORT`` once bound; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import bisect
import contextlib
import datetime
import signal
import struct
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.kio_build import make, nested
from core.server.network import ListenerSpec, SocketServer
from core.server.protocol import ProtocolCodec, RequestContext

# The same version ranges as tierlog, so clients negotiate the same request versions.
SERVED: dict[ApiKey, tuple[int, int]] = {
    key: SUPPORTED_VERSIONS[key]
    for key in (
        ApiKey.API_VERSIONS,
        ApiKey.METADATA,
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
    )
}
NODE_ID = 1
CLUSTER_ID = "null-broker"
NO_THROTTLE = datetime.timedelta(0)
UNKNOWN_OPERATIONS = -(2**31)
HEADER_BYTES = 61  # RecordBatch v2 header
_BASE_AND_LENGTH = struct.Struct(">qi")  # baseOffset; batchLength counts from byte 12 on
_BASE_OFFSET = struct.Struct(">q")
_LAST_OFFSET_DELTA = struct.Struct(">i")
LAST_OFFSET_DELTA_AT = 23


@dataclass(slots=True)
class MemoryPartition:
    """The appended batches of one partition: each produce request's bytes as one chunk.

    Chunks, not one growing ``bytearray``: growing a buffer of a GiB by ``+=`` costs the
    kernel ~2.5 s of system time per GiB here (remapping), three times what fresh chunks
    cost, and would charge the baseline for a storage choice rather than for its work.
    """

    chunks: list[bytearray] = field(default_factory=list)
    # Per batch: base offset, chunk number, position in the chunk, size.
    base_offsets: array.array[int] = field(default_factory=lambda: array.array("q"))
    chunk_ids: array.array[int] = field(default_factory=lambda: array.array("q"))
    positions: array.array[int] = field(default_factory=lambda: array.array("q"))
    sizes: array.array[int] = field(default_factory=lambda: array.array("q"))
    end_offset: int = 0
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def append(self, records: bytearray) -> int | None:
        """Assign offsets to every batch of ``records`` and keep them; the base offset.

        None when the bytes do not frame as batches (nothing is kept then).
        """
        first = self.end_offset
        batches: list[tuple[int, int, int]] = []  # (base offset, position, size)
        pos, end, next_offset = 0, len(records), first
        while pos + HEADER_BYTES <= end:
            size = _BASE_AND_LENGTH.unpack_from(records, pos)[1] + 12
            if size < HEADER_BYTES or pos + size > end:
                return None
            _BASE_OFFSET.pack_into(records, pos, next_offset)
            batches.append((next_offset, pos, size))
            last_delta = _LAST_OFFSET_DELTA.unpack_from(records, pos + LAST_OFFSET_DELTA_AT)[0]
            next_offset += last_delta + 1
            pos += size
        if pos != end or not batches:
            return None
        chunk_id = len(self.chunks)
        self.chunks.append(records)
        for offset, position, size in batches:
            self.base_offsets.append(offset)
            self.chunk_ids.append(chunk_id)
            self.positions.append(position)
            self.sizes.append(size)
        self.end_offset = next_offset
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()
        return first

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``, at least one, up to ``max_bytes``."""
        if offset >= self.end_offset or not self.base_offsets:
            return b""
        i = max(bisect.bisect_right(self.base_offsets, offset) - 1, 0)
        count = len(self.base_offsets)
        parts: list[memoryview] = []
        total = 0
        run_chunk, run_start, run_end = self.chunk_ids[i], self.positions[i], self.positions[i]
        while i < count:
            size = self.sizes[i]
            if total and total + size > max_bytes:
                break
            chunk = self.chunk_ids[i]
            if chunk != run_chunk:  # batches of one chunk are contiguous: slice them at once
                parts.append(memoryview(self.chunks[run_chunk])[run_start:run_end])
                run_chunk, run_start, run_end = chunk, self.positions[i], self.positions[i]
            run_end += size
            total += size
            i += 1
        parts.append(memoryview(self.chunks[run_chunk])[run_start:run_end])
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)


@dataclass(slots=True)
class MemoryTopic:
    name: str
    topic_id: uuid.UUID
    partitions: list[MemoryPartition]


class NullBroker:
    """Topics and handlers; ``handle`` is the SocketServer's handler."""

    def __init__(self, host: str, partitions: int) -> None:
        self.host = host
        self.port = 0
        self.default_partitions = partitions
        self.codec = ProtocolCodec(SERVED)
        self.topics: dict[str, MemoryTopic] = {}
        self.by_id: dict[uuid.UUID, MemoryTopic] = {}
        self.handlers = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
        }

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        return await self.handlers[ApiKey(ctx.api_key)](ctx, request)

    def topic(self, name: str) -> MemoryTopic:
        topic = self.topics.get(name)
        if topic is None:
            parts = [MemoryPartition() for _ in range(self.default_partitions)]
            topic = MemoryTopic(name, uuid.uuid4(), parts)
            self.topics[name] = topic
            self.by_id[topic.topic_id] = topic
        return topic

    def _response_type(self, ctx: RequestContext) -> type:
        return self.codec.response_type(ctx.api_key, ctx.api_version)

    def api_versions_response(self, response_type: type, error: ErrorCode) -> Any:
        version_cls = nested(response_type, "ApiVersion")
        keys = tuple(
            make(version_cls, api_key=int(k), min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(SERVED.items())
        )
        return make(
            response_type,
            error_code=error,
            api_keys=keys,
            throttle_time=NO_THROTTLE,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )

    def unsupported_version(self, ctx: RequestContext) -> Any:
        response_type = self.codec.response_type(ApiKey.API_VERSIONS, 0)
        return self.api_versions_response(response_type, ErrorCode.unsupported_version)

    async def api_versions(self, ctx: RequestContext, request: Any) -> Any:
        return self.api_versions_response(self._response_type(ctx), ErrorCode.none)

    async def metadata(self, ctx: RequestContext, request: Any) -> Any:
        response_type = self._response_type(ctx)
        topic_cls = nested(response_type, "MetadataResponseTopic")
        partition_cls = nested(response_type, "MetadataResponsePartition")
        broker_cls = nested(response_type, "MetadataResponseBroker")
        if request.topics is None or (ctx.api_version == 0 and not request.topics):
            wanted = list(self.topics.values())
        else:
            wanted = []
            for req in request.topics:
                topic_id = getattr(req, "topic_id", None)
                if req.name is None and topic_id is not None and topic_id in self.by_id:
                    wanted.append(self.by_id[topic_id])
                elif req.name is not None:
                    wanted.append(self.topic(req.name))
        topics = tuple(
            make(
                topic_cls,
                error_code=ErrorCode.none,
                name=t.name,
                topic_id=t.topic_id,
                is_internal=False,
                partitions=tuple(
                    make(
                        partition_cls,
                        error_code=ErrorCode.none,
                        partition_index=i,
                        leader_id=NODE_ID,
                        leader_epoch=0,
                        replica_nodes=(NODE_ID,),
                        isr_nodes=(NODE_ID,),
                        offline_replicas=(),
                    )
                    for i in range(len(t.partitions))
                ),
                topic_authorized_operations=UNKNOWN_OPERATIONS,
            )
            for t in wanted
        )
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            brokers=(make(broker_cls, node_id=NODE_ID, host=self.host, port=self.port, rack=None),),
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            topics=topics,
            cluster_authorized_operations=UNKNOWN_OPERATIONS,
            error_code=ErrorCode.none,
        )

    async def produce(self, ctx: RequestContext, request: Any) -> Any:
        response_type = self._response_type(ctx)
        topic_cls = nested(response_type, "TopicProduceResponse")
        partition_cls = nested(response_type, "PartitionProduceResponse")
        responses = []
        for topic_data in request.topic_data:
            topic = self.topics.get(topic_data.name)
            results = []
            for pdata in topic_data.partition_data:
                base, error = -1, ErrorCode.none
                if topic is None or not 0 <= pdata.index < len(topic.partitions):
                    error = ErrorCode.unknown_topic_or_partition
                else:
                    appended = topic.partitions[pdata.index].append(bytearray(pdata.records or b""))
                    if appended is None:
                        error = ErrorCode.corrupt_message
                    else:
                        base = appended
                results.append(
                    make(
                        partition_cls,
                        index=pdata.index,
                        error_code=error,
                        base_offset=base,
                        log_append_time=None,
                        log_start_offset=0,
                        record_errors=(),
                        error_message=None,
                    )
                )
            responses.append(
                make(topic_cls, name=topic_data.name, partition_responses=tuple(results))
            )
        if request.acks == 0:
            return None
        return make(response_type, responses=tuple(responses), throttle_time=NO_THROTTLE)

    async def fetch(self, ctx: RequestContext, request: Any) -> Any:
        response_type = self._response_type(ctx)
        topic_cls = nested(response_type, "FetchableTopicResponse")
        partition_cls = nested(response_type, "PartitionData")
        by_id = ctx.api_version >= 13
        requested = []  # (key for the response, topic or None, partition requests)
        for t in request.topics:
            topic = self.by_id.get(t.topic_id) if by_id else self.topics.get(t.topic)
            requested.append((t.topic_id if by_id else t.topic, topic, t.partitions))

        def read_all() -> tuple[list[Any], int]:
            out, gathered = [], 0
            remaining = getattr(request, "max_bytes", 2**31 - 1)
            for key, topic, partitions in requested:
                parts = []
                for p in partitions:
                    error, records, hw = ErrorCode.none, b"", -1
                    if topic is None or not 0 <= p.partition < len(topic.partitions):
                        error = (
                            ErrorCode.unknown_topic_id
                            if by_id
                            else ErrorCode.unknown_topic_or_partition
                        )
                    else:
                        mp = topic.partitions[p.partition]
                        hw = mp.end_offset
                        if p.fetch_offset > hw or p.fetch_offset < 0:
                            error = ErrorCode.offset_out_of_range
                        elif remaining > 0 or gathered == 0:
                            limit = min(p.partition_max_bytes, max(remaining, 1))
                            records = mp.read(p.fetch_offset, limit)
                            gathered += len(records)
                            remaining -= len(records)
                    parts.append(
                        make(
                            partition_cls,
                            partition_index=p.partition,
                            error_code=error,
                            high_watermark=hw,
                            last_stable_offset=hw,
                            log_start_offset=0 if hw >= 0 else -1,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=records,
                        )
                    )
                out.append(make(topic_cls, topic=key, topic_id=key, partitions=tuple(parts)))
            return out, gathered

        topics, gathered = read_all()
        wait_s = request.max_wait.total_seconds()
        if gathered < max(request.min_bytes, 1) and wait_s > 0:
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            for _, topic, partitions in requested:
                if topic is not None:
                    for p in partitions:
                        if 0 <= p.partition < len(topic.partitions):
                            topic.partitions[p.partition].waiters.append(waiter)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, wait_s)
            topics, gathered = read_all()
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            session_id=0,
            responses=tuple(topics),
            node_endpoints=(),
        )

    async def list_offsets(self, ctx: RequestContext, request: Any) -> Any:
        response_type = self._response_type(ctx)
        topic_cls = nested(response_type, "ListOffsetsTopicResponse")
        partition_cls = nested(response_type, "ListOffsetsPartitionResponse")
        out = []
        for t in request.topics:
            topic = self.topics.get(t.name)
            parts = []
            for p in t.partitions:
                error, offset = ErrorCode.none, -1
                if topic is None or not 0 <= p.partition_index < len(topic.partitions):
                    error = ErrorCode.unknown_topic_or_partition
                else:
                    # EARLIEST (-2) is 0; LATEST (-1) and any timestamp answer the end.
                    end = topic.partitions[p.partition_index].end_offset
                    offset = 0 if p.timestamp == -2 else end
                parts.append(
                    make(
                        partition_cls,
                        partition_index=p.partition_index,
                        error_code=error,
                        timestamp=-1,
                        offset=offset,
                        leader_epoch=0,
                        old_style_offsets=(offset,) if offset >= 0 else (),
                    )
                )
            out.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
        return make(response_type, throttle_time=NO_THROTTLE, topics=tuple(out))


async def serve(host: str, port: int, partitions: int) -> None:
    broker = NullBroker(host, partitions)
    server = SocketServer(broker.codec, broker.handle, broker.unsupported_version)
    bound = await server.start([ListenerSpec("PLAINTEXT", host, port)])
    broker.port = bound[0].port
    print(f"null broker listening on PLAINTEXT://{host}:{broker.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.partitions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
