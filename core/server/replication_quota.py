"""Replication throttles: a bound on the bytes/s of replicas being moved (Kafka's
ReplicationQuotaManager).

Which replicas are throttled is a topic's business: ``leader.replication.throttled.replicas``
lists the ``partition:broker`` replicas whose traffic as a *leader* is bounded, and
``follower.replication.throttled.replicas`` those bounded as a *follower* (``*``: every
replica of the topic). Each broker keeps the entries naming its own id (Kafka's
``parseThrottledPartitions``). How much is a broker's business:
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` (bytes/s),
measured over
``replication.quota.window.num`` windows of ``replication.quota.window.size.seconds``, with
the same sampled rate as client quotas (``core.server.sampled_rate``).

Kafka's decisions, which this module makes:

- the leader answers no records for a partition it leads when the fetching follower is not in
  the ISR, the partition is leader-throttled on this broker and the leader quota is exceeded;
  the bytes it does send for throttled partitions are recorded;
- a follower leaves a partition out of its fetch when it has not caught up with the leader's
  high watermark, the partition is follower-throttled on this broker and the follower quota
  is exceeded; the bytes it appends for throttled partitions are recorded.

In-sync replicas are never throttled, so a throttle cannot take a replica out of the ISR.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.server.sampled_rate import SampledStat

# Kafka's default rate: Long.MAX_VALUE, no throttle.
UNLIMITED = 2**63 - 1
ALL_REPLICAS = "*"


def throttled_partitions(entries: Iterable[str], broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas list throttles on ``broker_id``: ``None`` for
    ``*`` (all of them), else the partition ids of the ``partition:broker`` entries naming
    this broker. The list was validated when it was set (core/log/config.py)."""
    values = [e.strip() for e in entries if e.strip()]
    if values == [ALL_REPLICAS]:
        return None
    partitions: set[int] = set()
    for value in values:
        partition, _, broker = value.partition(":")
        if int(broker) == broker_id:
            partitions.add(int(partition))
    return frozenset(partitions)


def is_throttled(entries: Iterable[str], partition: int, broker_id: int) -> bool:
    """Whether ``partition`` of a topic with this throttled-replicas list is throttled on
    ``broker_id``."""
    partitions = throttled_partitions(entries, broker_id)
    return partitions is None or partition in partitions


class ReplicationQuota:
    """One direction's quota (leader or follower) of one broker."""

    def __init__(self, rate: int, samples: int, window_ms: int) -> None:
        self.rate = rate
        self._stat = SampledStat(samples, window_ms)
        # Partition reads held back (tierlog's, on /metrics; Kafka has no such counter). A
        # follower's fetch waiting at the leader is read again on each append, so one fetch
        # may count more than once.
        self.throttled_fetches = 0

    @property
    def enabled(self) -> bool:
        return self.rate < UNLIMITED

    def record(self, size: int, now_ms: int) -> None:
        if size > 0:
            self._stat.record(float(size), now_ms)

    def is_quota_exceeded(self, now_ms: int) -> bool:
        """Kafka's Sensor.checkQuotas: the measured rate above the bound."""
        if not self.enabled:
            return False
        return self._stat.rate(now_ms) > self.rate

    def should_throttle(self, throttled: bool, in_sync: bool, now_ms: int) -> bool:
        """Kafka's shouldLeaderThrottle / shouldFollowerThrottle. Counts each refusal."""
        if in_sync or not throttled or not self.is_quota_exceeded(now_ms):
            return False
        self.throttled_fetches += 1
        return True

    def peek_rate(self, now_ms: int) -> float:
        return self._stat.peek_rate(now_ms)
