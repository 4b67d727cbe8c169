"""``dump-log --offsets-decoder``: the records of ``__consumer_offsets`` as readable JSON.

The shape follows Kafka's kafka-dump-log ``--offsets-decoder`` output: the key as
``{"type": "<key version>", "data": {...}}`` and the value as
``{"version": "<value version>", "data": {...}}``; a tombstone's value is ``<DELETE>``.
Subscriptions and assignments are shown as their sizes.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from core.server.coordinator_records import (
    CoordinatorRecordError,
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)

TOMBSTONE = "<DELETE>"


def _compact(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"))


def decode(key: bytes | None, value: bytes | None) -> tuple[str, str]:
    """``(key text, value text)`` of one record; unparseable parts say why."""
    if key is None:
        return "NULL", "NULL" if value is None else f"<{len(value)} bytes>"
    try:
        parsed = decode_key(key)
        (key_version,) = struct.unpack_from(">h", key)
    except (CoordinatorRecordError, struct.error) as e:
        return f"<unparseable key: {e}>", "" if value is None else f"<{len(value)} bytes>"
    if isinstance(parsed, OffsetCommitKey):
        key_doc = {"group": parsed.group, "topic": parsed.topic, "partition": parsed.partition}
    elif isinstance(parsed, GroupMetadataKey):
        key_doc = {"group": parsed.group}
    else:
        return _compact({"type": str(key_version), "data": "unknown"}), (
            TOMBSTONE if value is None else f"<{len(value)} bytes>"
        )
    key_text = _compact({"type": str(key_version), "data": key_doc})
    if value is None:
        return key_text, TOMBSTONE
    try:
        (value_version,) = struct.unpack_from(">h", value)
        if isinstance(parsed, OffsetCommitKey):
            c = decode_offset_commit_value(value)
            data: dict[str, Any] = {
                "offset": c.offset,
                "leaderEpoch": c.leader_epoch,
                "metadata": c.metadata,
                "commitTimestamp": c.commit_timestamp_ms,
            }
        else:
            g = decode_group_metadata_value(value)
            data = {
                "protocolType": g.protocol_type,
                "generation": g.generation,
                "protocol": g.protocol,
                "leader": g.leader,
                "currentStateTimestamp": g.current_state_timestamp_ms,
                "members": [
                    {
                        "memberId": m.member_id,
                        "groupInstanceId": m.group_instance_id,
                        "clientId": m.client_id,
                        "clientHost": m.client_host,
                        "rebalanceTimeout": m.rebalance_timeout_ms,
                        "sessionTimeout": m.session_timeout_ms,
                        "subscriptionBytes": len(m.subscription),
                        "assignmentBytes": len(m.assignment),
                    }
                    for m in g.members
                ],
            }
    except (CoordinatorRecordError, struct.error) as e:
        return key_text, f"<unparseable value: {e}>"
    return key_text, _compact({"version": str(value_version), "data": data})
