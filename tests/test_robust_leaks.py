"""Leaks: after ``open_redis``'s block exits (normally, by an error, by cancellation),
nothing it created remains: no task, no socket (counted in /proc/self/fd), no timer
(Trio deadline), no subprocess.

The whole suite also runs with ``filterwarnings = error`` (so an unclosed socket's
ResourceWarning fails the test that leaked it), and under ``PYTHONDEVMODE=1`` in the
``tests`` session.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import AsyncIterator, Iterator

import attrs
import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import MaintConfig
from trio_maint.testing import MaintenanceSimulator, RedisServer

pytestmark = pytest.mark.trio


def _tasks() -> set[trio.lowlevel.Task]:
    found: set[trio.lowlevel.Task] = set()
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None:
            continue
        found.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


def _fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def _active_deadlines() -> int:
    # A Trio internal (there is no public API for it): active cancel-scope deadlines.
    from trio._core._run import GLOBAL_RUN_CONTEXT

    return int(GLOBAL_RUN_CONTEXT.runner.deadlines._active)


def _children() -> set[int]:
    children: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                children.update(int(pid) for pid in f.read().split())
        except OSError:
            pass
    return children


@attrs.frozen
class Snapshot:
    tasks: frozenset[trio.lowlevel.Task]
    fds: frozenset[int]
    deadlines: int
    children: frozenset[int]

    @classmethod
    def take(cls) -> Snapshot:
        gc.collect()
        return cls(
            frozenset(_tasks()), frozenset(_fds()), _active_deadlines(), frozenset(_children())
        )

    def leaks(self, later: Snapshot) -> dict[str, object]:
        found: dict[str, object] = {}
        if later.tasks - self.tasks:
            found["tasks"] = sorted(t.name for t in later.tasks - self.tasks)
        if later.fds - self.fds:
            found["fds"] = {fd: _describe_fd(fd) for fd in later.fds - self.fds}
        if later.deadlines > self.deadlines:
            found["deadlines"] = later.deadlines - self.deadlines
        if later.children - self.children:
            found["children"] = sorted(later.children - self.children)
        return found


def _describe_fd(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


async def assert_nothing_left(before: Snapshot) -> None:
    """The simulators' per-connection tasks end once they see the client's sockets close,
    so allow them a moment; then nothing new may remain."""
    give_up = trio.current_time() + 5  # no cancel scope here: it would be a deadline
    while True:
        await trio.testing.wait_all_tasks_blocked(0.01)
        leaks = before.leaks(Snapshot.take())
        if not leaks:
            return
        if trio.current_time() > give_up:
            raise AssertionError(f"left behind: {leaks}")
        await trio.sleep(0.02)


@pytest.fixture(scope="module")
def backend() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
async def sims(backend: RedisServer) -> AsyncIterator[tuple[MaintenanceSimulator, ...]]:
    async with (
        MaintenanceSimulator(backend=backend) as a,
        MaintenanceSimulator(backend=backend) as b,
    ):
        yield a, b


async def busy_client_body(
    r: trio_maint.Redis,
    a: MaintenanceSimulator,
    b: MaintenanceSimulator,
    nursery: trio.Nursery,
) -> None:
    """Leave everything in flight: commands blocked in the server (their tasks in
    ``nursery``, outside the client's block), an event stream, handoffs stuck in their
    handshake (B stalled)."""
    await r.set("leak:k", "v")
    async with r.pipeline() as pipe:
        await pipe.incr("leak:n").execute()

    async def blocked() -> None:
        try:
            await r.execute_command("BLPOP", "leak:never", "0")
        except trio_maint.RedisError:
            pass

    for _ in range(3):
        nursery.start_soon(blocked)
    assert r.maintenance is not None
    events = r.maintenance.events()
    async with trio.open_nursery() as pings:
        for _ in range(4):
            pings.start_soon(r.execute_command, "PING")
    await a.wait_for_connections(5, maint_enabled=True)
    b.stall()
    await a.inject_moving(time=30, target=b)
    # The blocked BLPOPs read MOVING: idle connections are handed off (to a stalled B).
    manager = r.maintenance.manager
    assert manager is not None
    with trio.fail_after(5):
        while manager.stats().running == 0:
            await trio.sleep(0.01)
    del events


async def subscriber(r: trio_maint.Redis) -> None:
    async with r.pubsub() as ps:
        await ps.subscribe("leak:chan")
        async for _ in ps:
            pass


def _client(a: MaintenanceSimulator) -> contextlib.AbstractAsyncContextManager[trio_maint.Redis]:
    config = MaintConfig(endpoint_type="internal-ip", handoff_timeout=30)
    return trio_maint.open_redis(
        f"{a.url}/13", pool_size=8, min_idle_conns=1, connect_timeout=20, maintenance=config
    )


@pytest.mark.parametrize("how", ["normally", "error", "cancelled"])
async def test_open_redis_leaves_nothing_behind(
    sims: tuple[MaintenanceSimulator, MaintenanceSimulator], how: str
) -> None:
    a, b = sims
    with trio.fail_after(30):
        before = Snapshot.take()
        with contextlib.ExitStack() as stack:
            if how == "error":
                # (wrapped in a group by the test's own nursery ``outer``)
                stack.enter_context(
                    pytest.RaisesGroup(ValueError, allow_unwrapped=True, flatten_subgroups=True)
                )
            async with trio.open_nursery() as outer:
                with trio.CancelScope() as scope:
                    async with _client(a) as r, trio.open_nursery() as inner:
                        inner.start_soon(subscriber, r)  # a pub/sub reader in flight
                        await busy_client_body(r, a, b, outer)
                        if how == "error":
                            raise ValueError("boom")
                        if how == "cancelled":
                            scope.cancel()
                            await trio.sleep_forever()
                        inner.cancel_scope.cancel()
                assert how != "cancelled" or scope.cancelled_caught
        b.unstall()
        assert r.pool.connections == []
        await assert_nothing_left(before)


async def test_error_in_block_during_a_handoff_is_not_wrapped(
    sims: tuple[MaintenanceSimulator, MaintenanceSimulator],
) -> None:
    a, b = sims

    async def fail_during_a_handoff() -> None:
        async with _client(a) as r:
            async with trio.open_nursery() as inner:
                await busy_client_body(r, a, b, inner)
                inner.cancel_scope.cancel()
            assert r.maintenance is not None and r.maintenance.manager is not None
            assert r.maintenance.manager.stats().running > 0
            raise ValueError("boom")

    with trio.fail_after(30):
        with pytest.raises(ValueError, match="boom"):
            await fail_during_a_handoff()
        b.unstall()


async def test_null_endpoint_timer_dies_with_the_client(
    sims: tuple[MaintenanceSimulator, MaintenanceSimulator],
) -> None:
    """A MOVING with a null endpoint schedules delayed handoffs (time / 2): leaving the
    block before they fire cancels them."""
    a, _ = sims
    config = MaintConfig(endpoint_type="none")
    with trio.fail_after(20):
        before = Snapshot.take()
        async with trio_maint.open_redis(f"{a.url}/13", maintenance=config) as r:
            await r.ping()
            await a.inject_moving(time=60)
            await r.ping()
            assert r.maintenance is not None
            assert r.maintenance.state.pending_handoffs >= 1  # scheduled at time / 2
        await assert_nothing_left(before)


async def test_pubsub_is_closed_when_the_client_exits(redis_url: str) -> None:
    """Regression: a PubSub made by ``r.pubsub()`` kept its own connection open after
    ``open_redis``'s block exited, and a reader iterating it outside the block never
    ended."""
    ended = trio.Event()
    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            async with trio_maint.open_redis(redis_url) as r:
                ps = r.pubsub()
                await ps.subscribe("leak:outlives")
                conn = ps.connection
                assert conn is not None

                async def reader() -> None:
                    async for _ in ps:
                        pass
                    ended.set()

                outer.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked(0.01)
            assert conn.closed
            await ended.wait()  # iteration ended
        # A PubSub asked for after the block is closed from the start.
        late = r.pubsub()
        with pytest.raises(trio_maint.ConnectionClosedError):
            await late.subscribe("leak:late")
