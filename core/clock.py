"""The wall clock in Kafka's unit: milliseconds since the epoch.

Kafka's record timestamps, commit timestamps, retention and expiry all count in these
milliseconds (``Time.milliseconds()``). Classes that measure time against it take a
``clock: Callable[[], int]`` defaulting to ``now_ms``, so tests can move time by hand.
Durations and deadlines that must not jump with the wall clock use ``time.monotonic()``.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch (Kafka's ``System.currentTimeMillis()``)."""
    return time.time_ns() // 1_000_000
