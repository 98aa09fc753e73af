"""Unit tests of HandoffManager with fake connections, on trio's MockClock."""

from __future__ import annotations

import math

import attrs
import pytest
import trio
import trio.testing

from trio_maint._maint.workers import QUEUE_FULL_MESSAGE, WORKER_IDLE_TIMEOUT, HandoffManager
from trio_maint._sansio.breaker import BreakerRegistry, BreakerState
from trio_maint._sansio.config import MaintConfig
from trio_maint._sansio.endpoint import Endpoint
from trio_maint._sansio.errors import (
    CircuitBreakerOpenError,
    ConnectionClosedError,
    HandoffDialError,
    HandoffQueueFullError,
    HandoffRetriesExhaustedError,
)

pytestmark = pytest.mark.trio

OLD = Endpoint("10.0.0.1", 6379)
NEW = Endpoint("10.0.0.5", 12000)
OTHER = Endpoint("10.0.0.6", 12000)


@attrs.define(eq=False)
class FakeConn:
    id: int
    endpoint: Endpoint = OLD


@attrs.define
class Harness:
    """perform/on_success/on_failure that record what happened."""

    unreachable: set[Endpoint] = attrs.field(factory=set)
    dial_failures_left: int = 0
    duration: float = 0.0
    error: Exception | None = None
    calls: list[tuple[int, Endpoint, float, float]] = attrs.field(factory=list)
    succeeded: list[int] = attrs.field(factory=list)
    failed: list[tuple[int, BaseException]] = attrs.field(factory=list)
    running: int = 0
    max_running: int = 0

    async def perform(self, conn: FakeConn, endpoint: Endpoint) -> None:
        now = trio.current_time()
        self.calls.append((conn.id, endpoint, now, trio.current_effective_deadline()))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await trio.sleep(self.duration)
            if endpoint in self.unreachable:
                raise HandoffDialError(f"connection refused by {endpoint}")
            if self.dial_failures_left > 0:
                self.dial_failures_left -= 1
                raise HandoffDialError("connection refused")
            if self.error is not None:
                raise self.error
            conn.endpoint = endpoint
        finally:
            self.running -= 1

    def on_success(self, conn: FakeConn) -> None:
        self.succeeded.append(conn.id)

    def on_failure(self, conn: FakeConn, error: BaseException) -> None:
        self.failed.append((conn.id, error))

    def manager(
        self,
        config: MaintConfig | None = None,
        *,
        breakers: BreakerRegistry | None = None,
        pool_size: int = 0,
        max_active_conns: int = 0,
    ) -> HandoffManager[FakeConn]:
        return HandoffManager(
            config or MaintConfig(max_workers=4, handoff_queue_size=10),
            perform=self.perform,
            on_success=self.on_success,
            on_failure=self.on_failure,
            breakers=breakers,
            pool_size=pool_size,
            max_active_conns=max_active_conns,
        )


async def wait_settled(manager: HandoffManager[FakeConn]) -> None:
    while manager.stats().pending:
        await trio.sleep(0.01)


async def test_successful_handoff_keeps_the_connection(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=0.2)
    conn = FakeConn(1)
    async with h.manager() as manager:
        assert manager.stats().workers == 0  # workers start on demand
        assert manager.queue_handoff_nowait(conn, NEW, 1001) is True
        assert manager.is_pending(1)
        assert manager.pending_seq_ids() == {1: 1001}
        await trio.sleep(0.1)
        assert manager.stats().running == 1
        await wait_settled(manager)
        assert h.succeeded == [1]
        assert h.failed == []
        assert conn.endpoint == NEW
        stats = manager.stats()
        assert (stats.completed, stats.failed, stats.pending) == (1, 0, 0)
        assert stats.workers == 1
        await trio.sleep(WORKER_IDLE_TIMEOUT + 1)
        assert manager.stats().workers == 0  # idle workers exit
    assert h.failed == []


async def test_perform_runs_under_the_handoff_deadline(autojump_clock: trio.abc.Clock) -> None:
    h = Harness()
    async with h.manager(MaintConfig(handoff_timeout=7.0)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await wait_settled(manager)
    (_, _, started, deadline) = h.calls[0]
    assert deadline == pytest.approx(started + 7.0)


async def test_dial_failures_are_retried_with_backoff(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(dial_failures_left=2)
    async with h.manager() as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.25)
        assert manager.is_pending(1)  # still owned while waiting to retry
        assert manager.stats().retry_waiting == 1
        await wait_settled(manager)
    times = [call[2] - h.calls[0][2] for call in h.calls]
    assert times == pytest.approx([0.0, 0.5, 1.5])
    assert h.succeeded == [1]


async def test_retries_exhausted_fail_the_handoff(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(unreachable={NEW})
    async with h.manager(MaintConfig(max_handoff_retries=3)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await wait_settled(manager)
        assert not manager.is_pending(1)
    assert len(h.calls) == 3
    [(conn_id, error)] = h.failed
    assert conn_id == 1
    assert isinstance(error, HandoffRetriesExhaustedError)
    assert isinstance(error.__cause__, HandoffDialError)


async def test_other_errors_are_not_retried(autojump_clock: trio.abc.Clock) -> None:
    boom = ValueError("handshake refused")
    h = Harness(error=boom)
    async with h.manager() as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await wait_settled(manager)
        [stats] = manager.circuit_breaker_stats()
        assert stats.failures == 0  # not a dial failure
    assert len(h.calls) == 1
    assert h.failed == [(1, boom)]


async def test_timeout_counts_as_dial_failure(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=math.inf)
    config = MaintConfig(handoff_timeout=2.0, max_handoff_retries=2)
    async with h.manager(config) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await wait_settled(manager)
        [stats] = manager.circuit_breaker_stats()
        assert stats.failures == 2
    assert len(h.calls) == 2
    [(_, error)] = h.failed
    assert isinstance(error, HandoffRetriesExhaustedError)


async def test_breaker_opens_fails_fast_and_recovers(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(unreachable={NEW})
    config = MaintConfig(
        max_handoff_retries=1,
        circuit_breaker_failure_threshold=2,
        circuit_breaker_reset_timeout=30.0,
        circuit_breaker_max_requests=1,
    )
    async with h.manager(config) as manager:
        for conn_id in (1, 2):
            manager.queue_handoff_nowait(FakeConn(conn_id), NEW, 1)
            await wait_settled(manager)
        [stats] = manager.circuit_breaker_stats()
        assert stats.state is BreakerState.OPEN
        manager.queue_handoff_nowait(FakeConn(3), NEW, 1)
        await wait_settled(manager)
        assert len(h.calls) == 2  # no dial for conn 3
        assert isinstance(h.failed[-1][1], CircuitBreakerOpenError)
        # Another endpoint is unaffected.
        manager.queue_handoff_nowait(FakeConn(4), OTHER, 1)
        await wait_settled(manager)
        assert h.succeeded == [4]
        # The endpoint comes back: after the reset timeout a trial handoff goes through
        # and closes the breaker (the reference client never recovers here).
        h.unreachable.clear()
        await trio.sleep(30.0)
        manager.queue_handoff_nowait(FakeConn(5), NEW, 1)
        await wait_settled(manager)
        assert h.succeeded == [4, 5]
        assert manager.breaker(NEW).state is BreakerState.CLOSED


async def test_shared_breaker_registry(autojump_clock: trio.abc.Clock) -> None:
    registry = BreakerRegistry(failure_threshold=1)
    h = Harness(unreachable={NEW})
    async with h.manager(MaintConfig(max_handoff_retries=1), breakers=registry) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await wait_settled(manager)
    assert registry.get(NEW, trio.current_time()).state is BreakerState.OPEN


async def test_queue_full_nowait_reports_through_on_failure(
    autojump_clock: trio.abc.Clock,
) -> None:
    h = Harness(duration=10.0)
    config = MaintConfig(max_workers=1, handoff_queue_size=1)
    async with h.manager(config) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)  # conn 1 running
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)  # fills the queue
        start = trio.current_time()
        assert manager.queue_handoff_nowait(FakeConn(3), NEW, 1) is True
        assert manager.is_pending(3)
        while not h.failed:
            await trio.sleep(0.01)
        assert trio.current_time() - start == pytest.approx(0.1, abs=0.02)
        [(conn_id, error)] = h.failed
        assert conn_id == 3
        assert isinstance(error, HandoffQueueFullError)
        assert str(error) == QUEUE_FULL_MESSAGE
        assert manager.stats().queue_full == 1
        await wait_settled(manager)
    assert h.succeeded == [1, 2]


async def test_queue_full_async_raises_after_on_failure(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=10.0)
    config = MaintConfig(max_workers=1, handoff_queue_size=1)
    async with h.manager(config) as manager:
        await manager.queue_handoff(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)
        await manager.queue_handoff(FakeConn(2), NEW, 1)
        with pytest.raises(HandoffQueueFullError, match="consider increasing"):
            await manager.queue_handoff(FakeConn(3), NEW, 1)
        assert [c for c, _ in h.failed] == [3]
        assert not manager.is_pending(3)


async def test_queue_full_async_gets_room_within_grace(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=1.0)
    config = MaintConfig(max_workers=1, handoff_queue_size=1)
    async with h.manager(config) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.95)  # conn 1 finishes at t=1.0
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        assert await manager.queue_handoff(FakeConn(3), NEW, 1) is True
        await wait_settled(manager)
    assert h.succeeded == [1, 2, 3]
    assert h.failed == []


async def test_duplicate_and_stale_requests_are_merged(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=1.0)
    conn = FakeConn(1)
    async with h.manager() as manager:
        assert manager.queue_handoff_nowait(conn, NEW, 5) is True
        assert manager.queue_handoff_nowait(conn, NEW, 5) is False  # replay
        assert manager.queue_handoff_nowait(conn, OTHER, 4) is False  # stale
        assert manager.pending_seq_ids() == {1: 5}
        await wait_settled(manager)
    assert [call[1] for call in h.calls] == [NEW]
    assert h.succeeded == [1]
    assert conn.endpoint == NEW


async def test_newer_moving_while_queued_retargets(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=1.0)
    config = MaintConfig(max_workers=1, handoff_queue_size=5)
    async with h.manager(config) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        conn = FakeConn(2)
        manager.queue_handoff_nowait(conn, NEW, 1)
        manager.queue_handoff_nowait(conn, OTHER, 2)
        await wait_settled(manager)
    assert [(c[0], c[1]) for c in h.calls] == [(1, NEW), (2, OTHER)]
    assert conn.endpoint == OTHER


async def test_newer_moving_while_running_redoes(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=1.0)
    conn = FakeConn(1)
    async with h.manager() as manager:
        manager.queue_handoff_nowait(conn, NEW, 1)
        await trio.sleep(0.5)
        assert manager.queue_handoff_nowait(conn, OTHER, 2) is False
        await wait_settled(manager)
    assert [c[1] for c in h.calls] == [NEW, OTHER]
    assert conn.endpoint == OTHER
    assert h.succeeded == [1]  # one outcome per request


async def test_workers_are_bounded(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=1.0)
    config = MaintConfig(max_workers=3, handoff_queue_size=20)
    async with h.manager(config) as manager:
        for conn_id in range(10):
            manager.queue_handoff_nowait(FakeConn(conn_id), NEW, 1)
        assert manager.stats().workers == 3
        await wait_settled(manager)
    assert h.max_running == 3
    assert sorted(h.succeeded) == list(range(10))


async def test_one_worker_per_request_on_demand(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=1.0)
    async with h.manager(MaintConfig(max_workers=8, handoff_queue_size=20)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        assert manager.stats().workers == 2


async def test_shutdown_fails_everything_still_owned(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=5.0)
    config = MaintConfig(max_workers=1, handoff_queue_size=5)
    manager = h.manager(config)
    async with manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)  # running
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)  # queued
        await trio.sleep(1.0)
        assert h.failed == []
    assert sorted(c for c, _ in h.failed) == [1, 2]
    assert all(isinstance(e, ConnectionClosedError) for _, e in h.failed)
    assert manager.closed
    assert manager.stats().pending == 0
    with pytest.raises(ConnectionClosedError):
        manager.queue_handoff_nowait(FakeConn(3), NEW, 1)
    with pytest.raises(ConnectionClosedError):
        await manager.queue_handoff(FakeConn(3), NEW, 1)
    await trio.sleep(60)  # nothing acts after close
    assert len(h.failed) == 2
    assert h.succeeded == []


async def test_shutdown_during_retry_wait(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(unreachable={NEW})
    async with h.manager() as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.1)
        assert manager.stats().retry_waiting == 1
    [(_, error)] = h.failed
    assert isinstance(error, ConnectionClosedError)
    calls = len(h.calls)
    await trio.sleep(60)
    assert len(h.calls) == calls


async def test_cancel_handoff_withdraws_silently(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=5.0)
    async with h.manager() as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(1.0)
        assert manager.cancel_handoff(1) is True
        assert manager.cancel_handoff(1) is False
        assert not manager.is_pending(1)
        await trio.sleep(10)
        assert manager.stats().running == 0
    assert h.succeeded == []
    assert h.failed == []


async def test_schedule_handoff_claims_then_queues(autojump_clock: trio.abc.Clock) -> None:
    h = Harness()
    claimed: list[int] = []

    def claim(conn: FakeConn) -> bool:
        claimed.append(conn.id)
        return conn.id != 2  # conn 2 is "in use"

    async with h.manager() as manager:
        start = trio.current_time()
        manager.schedule_handoff(FakeConn(1), OLD, 7, delay=7.5, claim=claim)
        manager.schedule_handoff(FakeConn(2), OLD, 7, delay=7.5, claim=claim)
        assert manager.stats().scheduled == 2
        await trio.sleep(7.4)
        assert claimed == []
        assert not manager.is_pending(1)
        await trio.sleep(0.2)
        assert sorted(claimed) == [1, 2]
        await wait_settled(manager)
        assert h.calls[0][2] - start == pytest.approx(7.5)
    assert h.succeeded == [1]
    assert h.failed == []


async def test_schedule_handoff_newer_seq_replaces_and_close_cancels(
    autojump_clock: trio.abc.Clock,
) -> None:
    h = Harness()
    conn = FakeConn(1)
    async with h.manager() as manager:
        manager.schedule_handoff(conn, OLD, 1, delay=5)
        manager.schedule_handoff(conn, OLD, 0, delay=1)  # stale: ignored
        manager.schedule_handoff(conn, NEW, 2, delay=2)
        await trio.sleep(3)
        assert [c[1] for c in h.calls] == [NEW]
        manager.schedule_handoff(FakeConn(2), OLD, 3, delay=100)
        await trio.sleep(10)
    await trio.sleep(200)
    assert [c[0] for c in h.calls] == [1]


async def test_callback_errors_do_not_break_the_manager(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness()

    def bad(conn: FakeConn) -> None:
        raise RuntimeError("owner bug")

    async with HandoffManager(MaintConfig(), perform=h.perform, on_success=bad) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        await wait_settled(manager)
        assert manager.stats().completed == 2
    assert "on_success callback failed" in caplog.text


async def test_body_exception_propagates_unwrapped() -> None:
    h = Harness()
    with pytest.raises(ValueError, match="body"):
        async with h.manager():
            raise ValueError("body")


async def test_must_be_entered_and_only_once() -> None:
    h = Harness()
    manager = h.manager()
    with pytest.raises(RuntimeError):
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
    async with manager:
        pass
    with pytest.raises(RuntimeError):
        async with manager:
            pass


async def test_config_is_resolved_from_the_pool() -> None:
    h = Harness()
    manager = h.manager(MaintConfig(), pool_size=100, max_active_conns=150)
    assert manager.config.max_workers == 33
    assert manager.config.handoff_queue_size == 151
    assert manager.stats().queue_capacity == 151


async def test_queue_handoff_checkpoints() -> None:
    h = Harness()
    async with h.manager() as manager:
        with trio.testing.assert_checkpoints():
            await manager.queue_handoff(FakeConn(1), NEW, 1)
        with trio.testing.assert_checkpoints():
            await manager.queue_handoff(FakeConn(1), NEW, 1)


async def test_cancelled_caller_keeps_the_connection(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=10.0)
    config = MaintConfig(max_workers=1, handoff_queue_size=1)
    async with h.manager(config) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        with trio.move_on_after(0.05):
            await manager.queue_handoff(FakeConn(3), NEW, 1)
        assert not manager.is_pending(3)
        await trio.sleep(1.0)
        assert h.failed == []  # withdrawn, not failed: the caller still owns conn 3
        with trio.CancelScope() as scope:
            scope.cancel()
            await manager.queue_handoff(FakeConn(4), NEW, 1)
        assert not manager.is_pending(4)  # cancelled before anything happened


async def test_cancel_handoff_while_waiting_for_room(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=10.0)
    config = MaintConfig(max_workers=1, handoff_queue_size=1)
    async with h.manager(config) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        manager.queue_handoff_nowait(FakeConn(3), NEW, 1)
        await trio.sleep(0.01)
        assert manager.cancel_handoff(3)
        await trio.sleep(1.0)
        assert h.failed == []
        assert manager.stats().queue_full == 0


async def test_shutdown_returns_half_open_trial_slot(autojump_clock: trio.abc.Clock) -> None:
    registry = BreakerRegistry(failure_threshold=1, reset_timeout=5.0, max_requests=1)
    breaker = registry.get(NEW, trio.current_time())
    breaker.record_failure(trio.current_time())
    await trio.sleep(5.0)
    h = Harness(duration=math.inf)
    async with h.manager(MaintConfig(handoff_timeout=100.0), breakers=registry) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(1.0)
        assert breaker.state is BreakerState.HALF_OPEN
        assert breaker.stats().requests == 1
    assert breaker.stats().requests == 0
