"""Regression tests for problems found by a final adversarial review of maintenance
handling (MOVING ping-pong) and the pool (max_active_conns)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

import trio_maint
from trio_maint import ClientOptions, MaintConfig
from trio_maint.testing import MaintenanceSimulator, RedisServer

pytestmark = pytest.mark.trio


@pytest.fixture
async def pair(
    redis_server_process: RedisServer | None, redis_url: str
) -> AsyncIterator[tuple[MaintenanceSimulator, MaintenanceSimulator]]:
    server = ClientOptions.from_url(redis_url)
    async with (
        MaintenanceSimulator(backend=(server.host, server.port)) as a,
        MaintenanceSimulator(backend=(server.host, server.port)) as b,
    ):
        yield a, b


async def test_moving_back_to_the_current_endpoint_cancels_the_handoffs(
    pair: tuple[MaintenanceSimulator, MaintenanceSimulator],
) -> None:
    """A -> B (B stalled, handoffs pending) -> A: every connection stays on A."""
    a, b = pair
    config = MaintConfig(relaxed_timeout=2.0, handoff_timeout=8.0)
    with trio.fail_after(30):
        async with trio_maint.open_redis(f"{a.url}/9", pool_size=4, maintenance=config) as r:
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(r.ping)
            b.stall()
            seq = await a.inject_moving(time=20, target=b, connections="all")
            assert r.maintenance is not None
            with trio.fail_after(5):  # idle connections read it within the pool's sweep
                while r.maintenance.state.pending_handoffs == 0:
                    await trio.sleep(0.02)
            await a.inject_moving(seq_id=seq + 10, time=20, target=a, connections="all")
            for _ in range(3):
                assert await r.ping() is True
            b.unstall()
            with trio.fail_after(10):
                while r.maintenance.state.pending_handoffs:
                    await trio.sleep(0.02)
            await trio.sleep(0.2)
            assert r.pool.connections
            assert all(c.port == a.port for c in r.pool.connections)


async def test_waiting_at_max_active_conns_takes_a_released_connection(redis_url: str) -> None:
    """With max_active_conns < pool_size, a borrower waiting at the cap is served by a
    connection released to the idle list (not only by one being closed)."""
    failures: list[BaseException] = []
    async with trio_maint.open_redis(
        redis_url, pool_size=4, max_active_conns=2, pool_timeout=1.0
    ) as r:
        stop = trio.Event()

        async def worker(i: int) -> None:
            while not stop.is_set():
                try:
                    await r.incr(f"tm:cap:{i}")
                except trio_maint.RedisError as exc:
                    failures.append(exc)

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(worker, i)
            await trio.sleep(2.0)
            stop.set()
        stats = r.pool.stats()
    assert failures == []
    assert stats.timeouts == 0 and stats.created == 2
