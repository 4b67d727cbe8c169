"""Byte-rate quotas for remote copies and fetches (KIP-956).

The quota is a token bucket in "debt" form: bytes are recorded after they move, and a new
transfer is allowed while the bucket is not in debt. One transfer may therefore overshoot
by its own size, as Kafka's quota managers do, and a segment larger than the rate still
moves (after the debt of the previous one is paid).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` bytes per second with a burst of one second's worth."""

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = float(rate)
        self._clock = clock
        self._tokens = float(rate)
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def is_exceeded(self) -> bool:
        """True while earlier transfers have used more than the rate allows."""
        with self._lock:
            self._refill()
            return self._tokens < 0

    def record(self, nbytes: int) -> None:
        with self._lock:
            self._refill()
            self._tokens -= nbytes

    def wait_time_s(self) -> float:
        """Seconds until the bucket is out of debt (0 when it is not in debt)."""
        with self._lock:
            self._refill()
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
