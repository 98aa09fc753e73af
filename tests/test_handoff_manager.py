"""Unit tests of the HandoffManager (running attempts and reporting outcomes) with fake
connections, on trio's MockClock. What to retry, where to go and what becomes of a
connection are the MaintenanceMachine's decisions (tests/test_maint_machine.py)."""

from __future__ import annotations

import math
from contextlib import AbstractAsyncContextManager

import attrs
import pytest
import trio
import trio.testing

from trio_maint._maint.workers import (
    QUEUE_FULL_MESSAGE,
    WORKER_IDLE_TIMEOUT,
    HandoffManager,
    open_handoff_manager,
)
from trio_maint._sansio.config import MaintConfig
from trio_maint._sansio.endpoint import Endpoint
from trio_maint._sansio.errors import (
    ConnectionClosedError,
    HandoffDialError,
    HandoffQueueFullError,
)

pytestmark = pytest.mark.trio

OLD = Endpoint("10.0.0.1", 6379)
NEW = Endpoint("10.0.0.5", 12000)


@attrs.define(eq=False)
class FakeConn:
    id: int
    endpoint: Endpoint = OLD


@attrs.define
class Harness:
    """A ``perform`` and an ``on_outcome`` that record what happened."""

    duration: float = 0.0
    error: Exception | None = None
    calls: list[tuple[int, Endpoint, float, float]] = attrs.field(factory=list)
    outcomes: list[tuple[int, BaseException | None]] = attrs.field(factory=list)
    running: int = 0
    max_running: int = 0

    async def perform(self, conn: FakeConn, endpoint: Endpoint) -> None:
        self.calls.append(
            (conn.id, endpoint, trio.current_time(), trio.current_effective_deadline())
        )
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await trio.sleep(self.duration)
            if self.error is not None:
                raise self.error
            conn.endpoint = endpoint
        finally:
            self.running -= 1

    def on_outcome(self, conn: FakeConn, error: BaseException | None) -> None:
        self.outcomes.append((conn.id, error))

    def open(
        self, config: MaintConfig | None = None, *, pool_size: int = 0, max_active_conns: int = 0
    ) -> AbstractAsyncContextManager[HandoffManager[FakeConn]]:
        return open_handoff_manager(
            config or MaintConfig(max_workers=4, handoff_queue_size=10),
            perform=self.perform,
            on_outcome=self.on_outcome,
            pool_size=pool_size,
            max_active_conns=max_active_conns,
        )


async def wait_settled(manager: HandoffManager[FakeConn]) -> None:
    while manager.stats().pending:
        await trio.sleep(0.01)


async def test_a_successful_attempt_is_reported_once(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=0.2)
    conn = FakeConn(1)
    async with h.open() as manager:
        assert manager.stats().workers == 0  # workers start on demand
        assert manager.queue_handoff_nowait(conn, NEW, 1001) is True
        assert manager.is_pending(1)
        await trio.sleep(0.1)
        assert manager.stats().running == 1
        await wait_settled(manager)
        assert h.outcomes == [(1, None)]
        assert conn.endpoint == NEW
        stats = manager.stats()
        assert (stats.completed, stats.failed, stats.pending, stats.workers) == (1, 0, 0, 1)
        await trio.sleep(WORKER_IDLE_TIMEOUT + 1)
        assert manager.stats().workers == 0  # idle workers exit
    assert h.outcomes == [(1, None)]


async def test_perform_runs_under_the_handoff_deadline(autojump_clock: trio.abc.Clock) -> None:
    h = Harness()
    async with h.open(MaintConfig(handoff_timeout=7.0)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await wait_settled(manager)
    (_, _, started, deadline) = h.calls[0]
    assert deadline == pytest.approx(started + 7.0)


async def test_running_out_of_time_is_a_dial_failure(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=math.inf)
    async with h.open(MaintConfig(handoff_timeout=2.0)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await wait_settled(manager)
    [(cid, error)] = h.outcomes
    assert cid == 1 and isinstance(error, HandoffDialError)
    assert "did not finish within 2.0 s" in str(error)


async def test_errors_are_reported_as_raised(autojump_clock: trio.abc.Clock) -> None:
    for error in (HandoffDialError("refused"), RuntimeError("handshake refused")):
        h = Harness(error=error)
        async with h.open() as manager:
            manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
            await wait_settled(manager)
            assert manager.stats().failed == 1
        assert h.outcomes == [(1, error)]


async def test_workers_are_bounded_and_started_on_demand(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=1.0)
    async with h.open(MaintConfig(max_workers=3, handoff_queue_size=20)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)
        assert manager.stats().workers == 1  # one request, one worker
        for i in range(2, 11):
            manager.queue_handoff_nowait(FakeConn(i), NEW, 1)
        await wait_settled(manager)
        assert h.max_running == 3
        assert manager.stats().completed == 10
    assert sorted(cid for cid, _ in h.outcomes) == list(range(1, 11))


async def test_a_second_request_for_a_connection_is_ignored(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=1.0)
    conn = FakeConn(1)
    async with h.open() as manager:
        assert manager.queue_handoff_nowait(conn, NEW, 1)
        assert not manager.queue_handoff_nowait(conn, OLD, 2)
        await wait_settled(manager)
    assert h.outcomes == [(1, None)] and conn.endpoint == NEW


async def test_queue_full_nowait_is_reported_after_the_grace(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(duration=10.0)
    async with h.open(MaintConfig(max_workers=1, handoff_queue_size=1)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)  # running
        await trio.sleep(0.01)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)  # queued
        manager.queue_handoff_nowait(FakeConn(3), NEW, 1)  # waits for room
        await trio.sleep(0.05)
        assert h.outcomes == []
        await trio.sleep(0.1)
        [(cid, error)] = h.outcomes
        assert cid == 3 and isinstance(error, HandoffQueueFullError)
        assert manager.stats().queue_full == 1
    assert QUEUE_FULL_MESSAGE in caplog.text


async def test_queue_full_async_raises_after_reporting(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=10.0)
    async with h.open(MaintConfig(max_workers=1, handoff_queue_size=1)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        with pytest.raises(HandoffQueueFullError):
            await manager.queue_handoff(FakeConn(3), NEW, 1)
        assert [cid for cid, _ in h.outcomes] == [3]


async def test_queue_full_async_gets_room_within_grace(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=0.05)
    async with h.open(MaintConfig(max_workers=1, handoff_queue_size=1)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        assert await manager.queue_handoff(FakeConn(3), NEW, 1) is True
        await wait_settled(manager)
    assert sorted(h.outcomes, key=lambda o: o[0]) == [(1, None), (2, None), (3, None)]


async def test_cancel_handoff_withdraws_silently(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=10.0)
    async with h.open(MaintConfig(max_workers=1, handoff_queue_size=1)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)  # running
        await trio.sleep(0.01)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)  # queued
        manager.queue_handoff_nowait(FakeConn(3), NEW, 1)  # waiting for room
        await trio.sleep(0.01)
        assert manager.cancel_handoff(1) and manager.cancel_handoff(2)
        assert manager.cancel_handoff(3)
        assert not manager.cancel_handoff(3)
        await trio.sleep(1.0)
        assert manager.stats().pending == 0
        assert manager.stats().queue_full == 0
    assert h.outcomes == []  # withdrawn: no report, the caller has them back


async def test_shutdown_reports_everything_still_owned(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=60.0)
    async with h.open(MaintConfig(max_workers=1, handoff_queue_size=1)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        manager.queue_handoff_nowait(FakeConn(3), NEW, 1)
        await trio.sleep(0.01)
    assert manager.closed
    assert sorted(cid for cid, _ in h.outcomes) == [1, 2, 3]
    assert all(isinstance(e, ConnectionClosedError) for _, e in h.outcomes)
    with pytest.raises(ConnectionClosedError):
        manager.queue_handoff_nowait(FakeConn(4), NEW, 1)
    await trio.sleep(100)
    assert len(h.outcomes) == 3  # nothing runs afterwards


async def test_callback_errors_do_not_break_the_manager(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness()

    def bad(conn: FakeConn, error: BaseException | None) -> None:
        raise RuntimeError("owner bug")

    async with open_handoff_manager(MaintConfig(), perform=h.perform, on_outcome=bad) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        await wait_settled(manager)
        assert manager.stats().completed == 2
    assert "on_outcome callback failed" in caplog.text


async def test_body_exception_propagates_unwrapped() -> None:
    h = Harness()
    with pytest.raises(ValueError, match="body"):
        async with h.open():
            raise ValueError("body")


async def test_config_is_resolved_from_the_pool() -> None:
    h = Harness()
    async with h.open(MaintConfig(), pool_size=100, max_active_conns=150) as manager:
        assert manager.config.max_workers == 33
        assert manager.config.handoff_queue_size == 151
        assert manager.stats().queue_capacity == 151


async def test_a_manager_needs_a_resolved_config() -> None:
    h = Harness()
    async with trio.open_nursery() as nursery:
        with pytest.raises(ValueError, match="resolved"):
            HandoffManager(MaintConfig(), nursery, perform=h.perform, on_outcome=h.on_outcome)


async def test_queue_handoff_checkpoints() -> None:
    h = Harness()
    async with h.open() as manager:
        with trio.testing.assert_checkpoints():
            await manager.queue_handoff(FakeConn(1), NEW, 1)
        with trio.testing.assert_checkpoints():
            await manager.queue_handoff(FakeConn(1), NEW, 1)


async def test_cancelled_caller_keeps_the_connection(autojump_clock: trio.abc.Clock) -> None:
    h = Harness(duration=10.0)
    async with h.open(MaintConfig(max_workers=1, handoff_queue_size=1)) as manager:
        manager.queue_handoff_nowait(FakeConn(1), NEW, 1)
        await trio.sleep(0.01)
        manager.queue_handoff_nowait(FakeConn(2), NEW, 1)
        with trio.move_on_after(0.05):
            await manager.queue_handoff(FakeConn(3), NEW, 1)
        assert not manager.is_pending(3)
        await trio.sleep(1.0)
        assert all(cid != 3 for cid, _ in h.outcomes)  # withdrawn: still the caller's
        with trio.CancelScope() as scope:
            scope.cancel()
            await manager.queue_handoff(FakeConn(4), NEW, 1)
        assert not manager.is_pending(4)  # cancelled before anything happened
