"""Kafka's rate and throttle arithmetic, checked against examples worked by hand (the same
ones Kafka's ClientQuotaManagerTest and ClientRequestQuotaManagerTest use)."""

from __future__ import annotations

import math

import pytest

from core.server.quota_entity import QuotaEntity
from core.server.quotas import ClientQuotaManager, QuotaType
from core.server.sampled_rate import SampledStat, java_round, throttle_time_ms


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms

    def sleep(self, ms: int) -> None:
        self.ms += ms


def manager(quota_type: QuotaType = QuotaType.PRODUCE, **kw) -> tuple[ClientQuotaManager, Clock]:
    clock = Clock()
    bounded = quota_type is QuotaType.REQUEST
    m = ClientQuotaManager(quota_type, 11, 1000, bounded=bounded, clock=clock, **kw)
    return m, clock


def test_a_spike_after_ten_quiet_seconds_is_throttled_as_kafka_computes_it() -> None:
    # Quota 500 B/s. Ten windows at 400 B/s, then half a window later 2300 bytes:
    # 400*10 + 2300 = 6300 bytes over 10.5 s = 600 B/s; (600 - 500) / 500 * 10500 = 2100 ms.
    m, clock = manager()
    m.set_limit(QuotaEntity.of(client_id=None), 500)
    for _ in range(10):
        assert m.record("ANONYMOUS", "unknown", 400) == 0
        clock.sleep(1000)
    clock.sleep(500)
    throttle = m.record("ANONYMOUS", "unknown", 2300)
    assert throttle == 2100
    clock.sleep(throttle)
    # The burst stays in the samples for the next eleven seconds: still over the quota.
    assert m.record("ANONYMOUS", "unknown", 400) > 0
    for _ in range(10):
        m.record("ANONYMOUS", "unknown", 400)
        clock.sleep(1000)
    assert m.record("ANONYMOUS", "unknown", 0) == 0  # the burst has rolled out


def test_request_time_spike_is_throttled_and_capped_at_one_window() -> None:
    # Quota 1% = 10 ms per second. 4 ms a second for ten seconds, then 67.1 ms:
    # (40 + 67.1) / 10.5 = 10.2 ms/s; (10.2 - 10) / 10 * 10500 = 210 ms.
    m, clock = manager(QuotaType.REQUEST)
    m.set_limit(QuotaEntity.of(user="ANONYMOUS", client_id="test-client"), 1)

    def percent(ms: float) -> float:
        return ms * 1_000_000 * 100 / 1_000_000_000

    for _ in range(10):
        assert m.record("ANONYMOUS", "test-client", percent(4)) == 0
        clock.sleep(1000)
    clock.sleep(500)
    assert m.record("ANONYMOUS", "test-client", percent(67.1)) == 210
    # A huge violation: the uncapped time would be seconds; a request quota caps it at the
    # window (quota.window.size.seconds).
    assert m.record("ANONYMOUS", "test-client", percent(5000)) == 1000


def test_an_idle_client_may_burst_quota_times_ten_windows() -> None:
    # Before ten windows have passed, the span counts as ten windows: 5000 bytes at once
    # is exactly 500 B/s over 10 s; one byte more is over, by 0.1 B/s: 0.1/500 * 10000 = 2 ms.
    m, _ = manager()
    m.set_limit(QuotaEntity.of(client_id="c"), 500)
    assert m.record("u", "c", 5000) == 0
    assert m.record("u", "c", 1) == 2
    assert m.max_value_in_window("u", "c") == 500 * 10


def test_samples_expire_after_the_whole_span() -> None:
    stat = SampledStat(samples=3, window_ms=1000)
    stat.record(3000, 0)
    # 3000 over the minimum span of two windows.
    assert stat.rate(0) == pytest.approx(1500)
    assert stat.rate(2999) == pytest.approx(3000 / 2.999)
    # 3 s after its last event the sample is purged: nothing left.
    assert stat.rate(3000) == 0
    assert stat.window_size_ms(3000) == 2000


def test_peek_measures_like_rate_without_changing_the_samples() -> None:
    stat = SampledStat(samples=3, window_ms=1000)
    stat.record(100, 0)
    stat.record(200, 1500)
    for now in (1500, 2200, 4000, 6000):
        peeked = stat.peek_rate(now)
        assert peeked == pytest.approx(stat.rate(now))
    assert math.isnan(SampledStat(2, 1000).peek_average(0))


def test_throttle_time_formula_and_java_rounding() -> None:
    assert throttle_time_ms(600, 500, 10_500) == 2100
    assert throttle_time_ms(500.25, 500, 1000) == 1  # 0.5 ms rounds up, as Math.round
    assert java_round(-0.5) == 0
    assert java_round(2.5) == 3


def test_no_quota_records_nothing() -> None:
    m, _ = manager()
    assert not m.enabled
    assert m.record("u", "c", 10**12) == 0
    assert m.metrics() == []
    assert m.max_value_in_window("u", "c") == math.inf
