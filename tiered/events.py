"""Structured log lines of the tiering events: one line each, ``key=value`` fields in a fixed
order after ``event=<name>``, so that operators can grep and log shippers can parse them::

    event=remote_copy topic=orders partition=3 segment_id=... start_offset=0 end_offset=511
        bytes=1048576 ms=73

Events: ``remote_copy``, ``remote_copy_failed``, ``remote_delete`` (with ``reason``:
retention.ms, retention.bytes, log-start, lineage, failed copy, dangling copy, topic
deleted, ...), ``remote_read_failed``. The same fields also go in the record's ``extra``
(``tierlog_fields``) for structured handlers.
"""

from __future__ import annotations

import logging
from typing import Any

from tiered.api import TopicIdPartition


def _text(value: Any) -> str:
    text = str(value)
    return f'"{text}"' if (" " in text or not text) else text


def event_line(event: str, tp: TopicIdPartition, **fields: Any) -> str:
    """``event=<event> topic=<t> partition=<p> k=v ...`` (values with spaces quoted)."""
    parts = [f"event={event}", f"topic={tp.topic}", f"partition={tp.partition}"]
    parts += [f"{k}={_text(v)}" for k, v in fields.items()]
    return " ".join(parts)


def log_event(
    logger: logging.Logger,
    level: int,
    event: str,
    tp: TopicIdPartition,
    *,
    exc_info: BaseException | None = None,
    **fields: Any,
) -> None:
    """Log one event line at ``level``."""
    logger.log(
        level,
        "%s",
        event_line(event, tp, **fields),
        extra={"tierlog_fields": {"event": event, "tp": str(tp), **fields}},
        exc_info=exc_info,
    )
