"""Circuit breakers (sans-IO; time passed in)."""

from __future__ import annotations

import pytest

from trio_maint._sansio.breaker import BreakerRegistry, BreakerState, CircuitBreaker
from trio_maint._sansio.config import MaintConfig
from trio_maint._sansio.endpoint import Endpoint

EP = Endpoint("10.0.0.5", 12000)


def state(breaker: CircuitBreaker) -> BreakerState:
    # A call, so that the type checker does not narrow the property across calls.
    return breaker.state


def make(**kwargs: float) -> CircuitBreaker:
    return CircuitBreaker(EP, **kwargs)  # type: ignore[arg-type]


def test_starts_closed_and_success_keeps_it_closed() -> None:
    breaker = make()
    assert state(breaker) is BreakerState.CLOSED
    assert breaker.allow(0.0)
    breaker.record_success(0.0)
    assert state(breaker) is BreakerState.CLOSED


def test_opens_after_threshold_consecutive_failures() -> None:
    breaker = make()
    for i in range(4):
        assert breaker.allow(float(i))
        breaker.record_failure(float(i))
    assert state(breaker) is BreakerState.CLOSED
    breaker.record_failure(4.0)
    assert state(breaker) is BreakerState.OPEN
    assert not breaker.allow(5.0)


def test_success_resets_the_failure_count() -> None:
    breaker = make()
    breaker.record_failure(0.0)
    breaker.record_failure(0.0)
    assert breaker.stats().failures == 2
    assert breaker.stats().state is BreakerState.CLOSED
    assert breaker.stats().endpoint == EP
    breaker.record_success(1.0)
    assert breaker.stats().failures == 0
    for _ in range(4):
        breaker.record_failure(2.0)
    assert state(breaker) is BreakerState.CLOSED


def test_threshold_ten() -> None:
    breaker = make(failure_threshold=10)
    for _ in range(9):
        breaker.record_failure(0.0)
    assert state(breaker) is BreakerState.CLOSED
    breaker.record_failure(0.0)
    assert state(breaker) is BreakerState.OPEN


def open_breaker(breaker: CircuitBreaker, now: float = 0.0) -> None:
    for _ in range(breaker.failure_threshold):
        breaker.record_failure(now)
    assert state(breaker) is BreakerState.OPEN


def test_half_open_after_reset_timeout_then_closes() -> None:
    breaker = make(reset_timeout=0.1)
    open_breaker(breaker)
    assert not breaker.allow(0.05)
    assert breaker.allow(0.15)
    assert state(breaker) is BreakerState.HALF_OPEN
    breaker.record_success(0.16)
    assert breaker.allow(0.17)
    breaker.record_success(0.18)
    assert breaker.allow(0.19)
    assert state(breaker) is BreakerState.HALF_OPEN
    breaker.record_success(0.2)
    assert state(breaker) is BreakerState.CLOSED
    assert breaker.stats().failures == 0


def test_failure_in_half_open_reopens() -> None:
    breaker = make(reset_timeout=10.0)
    open_breaker(breaker)
    assert breaker.allow(10.0)
    breaker.record_failure(10.5)
    assert state(breaker) is BreakerState.OPEN
    assert breaker.stats().opened == 2
    assert not breaker.allow(20.0)  # the wait restarts from the latest failure
    assert breaker.allow(20.5)


def test_half_open_quota() -> None:
    breaker = make(reset_timeout=10.0, max_requests=2)
    open_breaker(breaker)
    assert breaker.allow(10.0)
    assert breaker.allow(10.0)
    assert not breaker.allow(10.0)  # quota used, outcomes pending
    breaker.release()  # one trial ended without a verdict
    assert breaker.allow(11.0)
    assert not breaker.allow(11.0)


def test_half_open_never_stuck_when_outcomes_are_lost() -> None:
    breaker = make(reset_timeout=10.0, max_requests=1)
    open_breaker(breaker)
    assert breaker.allow(10.0)
    assert not breaker.allow(15.0)
    assert breaker.allow(20.0)  # a new episode after another reset_timeout


def test_open_records_extend_the_wait() -> None:
    breaker = make(reset_timeout=10.0)
    open_breaker(breaker)
    breaker.record_failure(5.0)
    assert not breaker.allow(12.0)
    assert breaker.allow(15.0)


def test_reset_and_stats_times() -> None:
    breaker = make()
    open_breaker(breaker, now=3.0)
    breaker.record_success(4.0)
    stats = breaker.stats()
    assert (stats.last_failure_time, stats.last_success_time) == (3.0, 4.0)
    breaker.reset()
    stats = breaker.stats()
    assert stats.state is BreakerState.CLOSED
    assert stats.failures == 0
    assert stats.last_failure_time is None


@pytest.mark.parametrize(
    "kwargs", [{"failure_threshold": 0}, {"reset_timeout": -1}, {"max_requests": 0}]
)
def test_invalid_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        make(**kwargs)
    with pytest.raises(ValueError):
        BreakerRegistry(**kwargs)  # type: ignore[arg-type]


def test_registry_same_and_distinct_breakers() -> None:
    registry = BreakerRegistry()
    a = registry.get(EP, 0.0)
    assert registry.get(Endpoint("10.0.0.5", 12000), 1.0) is a
    b = registry.get(Endpoint("10.0.0.6", 12000), 1.0)
    assert b is not a
    a.record_failure(1.0)
    stats = registry.stats()
    assert [s.endpoint for s in stats] == [EP, Endpoint("10.0.0.6", 12000)]
    assert stats[0].failures == 1
    open_breaker(b)
    registry.reset()
    assert all(s.state is BreakerState.CLOSED and s.failures == 0 for s in registry.stats())


def test_registry_from_config() -> None:
    registry = BreakerRegistry.from_config(
        MaintConfig(circuit_breaker_failure_threshold=10, circuit_breaker_max_requests=1)
    )
    breaker = registry.get(EP, 0.0)
    assert breaker.failure_threshold == 10
    assert breaker.max_requests == 1
    assert breaker.reset_timeout == 60.0


def test_registry_prunes_idle_breakers() -> None:
    registry = BreakerRegistry(idle_ttl=100.0)
    registry.get(EP, 0.0)
    other = Endpoint("10.0.0.6", 1)
    registry.get(other, 250.0)
    assert len(registry) == 2
    registry.get(other, 301.0)  # prune interval passed: EP idle 301 s > 100 s
    assert len(registry) == 1
    assert registry.prune(1000.0) == 1
    assert len(registry) == 0
