"""The topics of a consumer group member's subscription (Kafka's ConsumerProtocolSubscription).

A classic group's members send their subscription as opaque protocol metadata; for groups
of protocol type ``consumer`` it is Kafka's ConsumerProtocolSubscription, versions 0 to 3,
none of them flexible: an int16 version, then the topics as an int32 count of int16-length
UTF-8 strings (user data, owned partitions, generation and rack follow; they are not read).
The coordinator needs only the topics (OffsetDelete refuses to delete the offsets of a
topic a live member is subscribed to).
"""

from __future__ import annotations

import struct

from core.errors import CoreError


class SubscriptionFormatError(CoreError):
    """Metadata that is not a ConsumerProtocolSubscription."""


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription.

    Raises:
        SubscriptionFormatError: truncated, a negative version or count, or not UTF-8.
    """
    try:
        (version,) = struct.unpack_from(">h", metadata, 0)
        if version < 0:
            raise SubscriptionFormatError(f"subscription version {version}")
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0 or count > len(metadata):
            raise SubscriptionFormatError(f"subscription topic count {count}")
        position, topics = 6, []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                raise SubscriptionFormatError(f"subscription topic name length {length}")
            topics.append(metadata[position : position + length].decode("utf-8"))
            position += length
        return topics
    except (struct.error, UnicodeDecodeError) as e:
        raise SubscriptionFormatError(f"not a consumer subscription: {e}") from e
