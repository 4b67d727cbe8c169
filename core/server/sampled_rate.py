"""Kafka's sampled statistics, the arithmetic of client quotas.

Kafka measures a client's use of a quota with a ``Rate`` over a ``WindowedSum``
(``org.apache.kafka.common.metrics.stats``): values are summed into samples of
``quota.window.size.seconds`` each; ``quota.window.num`` samples are kept (one more is
allocated so that the oldest can still cover the start of the window); the rate is the sum
of the samples divided by the time they span. Two rules make the first seconds behave:

- a sample whose last event is ``samples * window`` old or older is reset (purged) before
  anything is measured;
- the span is at least ``samples - 1`` whole windows: an idle client that sends a burst is
  measured as if the earlier windows had been there and empty, so a burst of up to
  ``quota * (samples - 1) * window`` bytes passes before any throttling.

When a recorded value takes the rate above the quota, the throttle time is the delay that
brings the rate back to the quota if nothing else is recorded (Kafka's QuotaUtils): with
``O`` the observed rate, ``T`` the quota and ``W`` the span, ``O * W / (W + X) = T``, so
``X = (O - T) / T * W``, rounded as Java's ``Math.round``.

``SampledStat`` mutates its samples when it measures (the purge), as Kafka's does, which
keeps the quota path exact; ``peek_*`` compute the same values without touching anything,
for readers on other threads (the metrics endpoint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MS_PER_SECOND = 1000.0


@dataclass(slots=True)
class Sample:
    """One window's worth of values (Kafka's SampledStat.Sample)."""

    start_ms: int
    last_event_ms: int
    value: float = 0.0
    events: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0
        self.events = 0


class SampledStat:
    """Values summed into ``samples`` windows of ``window_ms`` each (Kafka's SampledStat with
    a time window only; Kafka's event-count window is unbounded for quotas)."""

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError(f"need at least one sample of 1 ms, got {samples} x {window_ms}")
        self.samples = samples
        self.window_ms = window_ms
        self._ring: list[Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> Sample:
        if not self._ring:
            self._ring.append(Sample(now_ms, now_ms))
        return self._ring[self._current]

    def _advance(self, now_ms: int) -> Sample:
        # One sample more than configured: the oldest one may still overlap the window.
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._ring):
            sample = Sample(now_ms, now_ms)
            self._ring.append(sample)
            return sample
        sample = self._ring[self._current]
        sample.reset(now_ms)
        return sample

    def purge(self, now_ms: int) -> None:
        """Reset the samples with no event within the monitored span."""
        expire_ms = self.samples * self.window_ms
        for sample in self._ring:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.reset(now_ms)

    def _live(self, now_ms: int) -> list[tuple[int, float, int]]:
        """(start, value, events) of each sample as a purge at ``now_ms`` would leave it."""
        expire_ms = self.samples * self.window_ms
        if not self._ring:
            return [(now_ms, 0.0, 0)]
        return [
            (now_ms, 0.0, 0)
            if now_ms - s.last_event_ms >= expire_ms
            else (s.start_ms, s.value, s.events)
            for s in self._ring
        ]

    def _span_ms(self, live: list[tuple[int, float, int]], now_ms: int) -> int:
        """Kafka's Rate.windowSize: the time since the oldest sample began, and at least
        ``samples - 1`` whole windows."""
        elapsed = now_ms - min(start for start, _, _ in live)
        full = elapsed // self.window_ms
        wanted = self.samples - 1
        if full < wanted:
            elapsed += (wanted - full) * self.window_ms
        # With one sample and nothing elapsed the span would be 0 (a rate of 0/0).
        return max(elapsed, 1)

    # -- the quota path (purges, as Kafka's measure does) ---------------------------------------
    def window_size_ms(self, now_ms: int) -> int:
        self.purge(now_ms)
        return self._span_ms(self._live(now_ms), now_ms)

    def rate(self, now_ms: int) -> float:
        """The sum of the samples per second of their span (Kafka's Rate.measure)."""
        self.purge(now_ms)
        live = self._live(now_ms)
        return sum(v for _, v, _ in live) / (self._span_ms(live, now_ms) / MS_PER_SECOND)

    # -- readers that change nothing -----------------------------------------------------------
    def peek_rate(self, now_ms: int) -> float:
        live = self._live(now_ms)
        return sum(v for _, v, _ in live) / (self._span_ms(live, now_ms) / MS_PER_SECOND)

    def peek_average(self, now_ms: int) -> float:
        """Kafka's Avg: the mean of the recorded values (NaN when there are none)."""
        live = self._live(now_ms)
        events = sum(n for _, _, n in live)
        return sum(v for _, v, _ in live) / events if events else math.nan

    def last_event_ms(self) -> int | None:
        return max((s.last_event_ms for s in self._ring), default=None)


def java_round(value: float) -> int:
    """Java's Math.round: halves round up (towards positive infinity)."""
    return math.floor(value + 0.5)


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: the delay ``X`` with ``O * W / (W + X) = T``."""
    return java_round((observed - bound) / bound * window_ms)
