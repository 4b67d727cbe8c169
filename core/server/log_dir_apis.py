"""DescribeLogDirs: the log dirs of this broker, the partitions in each and their sizes.

As Kafka answers it: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and no
dirs; every log dir is listed (by absolute path) with the requested partitions it holds
(null topics: every partition; a partition this broker does not hold is left out). A
partition's size is its local segments' bytes (remote copies are not counted, as Kafka's
field says); its offset lag is the log end offset's distance behind the high watermark, 0
on a leader. ``is_future_key`` is false: tierlog does not move replicas between dirs
(AlterReplicaLogDirs). From v4 each dir has its volume's total and usable bytes.

Sizes come from the segments held in memory and the volume's figures from ``statvfs``; the
whole description runs on an executor thread.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from core.log.partition_log import PartitionLog
from core.server.api_keys import ApiKey
from core.server.authorizer import Operation
from core.server.handler_support import NO_THROTTLE, BrokerServices, Handler, cluster_allowed
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext


def _describe(
    response_type: type, log_dirs: Iterable[Path], logs: list[PartitionLog], wanted: Any
) -> tuple[Any, ...]:
    """One result per log dir (blocking: reads the volumes' usage)."""
    result_cls = nested(response_type, "DescribeLogDirsResult")
    topic_cls = nested(response_type, "DescribeLogDirsTopic")
    partition_cls = nested(response_type, "DescribeLogDirsPartition")
    selected: set[tuple[str, int]] | None = None
    if wanted is not None:
        selected = {(t.topic, p) for t in wanted for p in t.partitions}
    results = []
    for directory in log_dirs:
        path = Path(os.path.abspath(directory))
        by_topic: dict[str, list[Any]] = {}
        for plog in sorted(logs, key=lambda lg: (lg.topic, lg.partition)):
            if Path(os.path.abspath(plog.dir.parent)) != path:
                continue
            if selected is not None and (plog.topic, plog.partition) not in selected:
                continue
            by_topic.setdefault(plog.topic, []).append(
                make(
                    partition_cls,
                    partition_index=plog.partition,
                    partition_size=plog.size,
                    offset_lag=max(plog.high_watermark - plog.log_end_offset, 0),
                    is_future_key=False,
                )
            )
        error, total, usable = ErrorCode.none, -1, -1
        try:
            usage = shutil.disk_usage(path)
            total, usable = usage.total, usage.free
        except OSError:
            # Kafka answers an offline dir with KAFKA_STORAGE_ERROR and nothing in it.
            error, by_topic = ErrorCode.kafka_storage_error, {}
        results.append(
            make(
                result_cls,
                error_code=error,
                log_dir=str(path),
                topics=tuple(
                    make(topic_cls, name=name, partitions=tuple(partitions))
                    for name, partitions in by_topic.items()
                ),
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return tuple(results)


async def handle_describe_log_dirs(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    log_manager = broker.replica_manager.log_manager
    results = await asyncio.get_running_loop().run_in_executor(
        None,
        _describe,
        response_type,
        list(log_manager.log_dirs),
        log_manager.all_logs(),
        request.topics,
    )
    return make(
        response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=results
    )


HANDLERS: dict[int, Handler] = {ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs}
