"""The connection pool against a real redis-server."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import PoolTimeoutError
from trio_maint.lowlevel import Connection, Disposition

pytestmark = pytest.mark.trio


async def test_pool_size_bounds_connections_in_use(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, pool_size=3) as r:
        peak = 0

        async def work() -> None:
            nonlocal peak
            await r.execute_command("BLPOP", "nothing", "0.05")
            peak = max(peak, r.pool.stats().total)

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(work)
        stats = r.pool.stats()
        assert stats.total <= 3 and peak <= 3
        assert stats.created == 3


async def test_pool_timeout(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, pool_size=1, pool_timeout=0.1) as r:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(r.execute_command, "BLPOP", "nothing", "0.5")
            await trio.sleep(0.05)
            with pytest.raises(PoolTimeoutError, match="pool_size=1"):
                await r.ping()
        assert r.pool.stats().timeouts == 1
        assert isinstance(PoolTimeoutError("x"), TimeoutError)


async def test_idle_reuse_is_lifo(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, pool_size=3) as r:
        pool = r.pool
        a, b, c = await pool.acquire(), await pool.acquire(), await pool.acquire()
        for conn in (a, b, c):
            pool.release(conn)
        got = await pool.acquire()
        assert got is c  # the most recently released
        pool.release(got)
        assert pool.stats().hits == 1


async def test_waiters_are_served_fifo(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, pool_size=1) as r:
        pool = r.pool
        held = await pool.acquire()
        order: list[int] = []

        async def waiter(i: int) -> None:
            conn = await pool.acquire()
            order.append(i)
            await trio.sleep(0.01)
            pool.release(conn)

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(waiter, i)
                await trio.testing.wait_all_tasks_blocked()
            pool.release(held)
        assert order == [0, 1, 2, 3, 4]


async def test_max_active_conns_caps_every_open_connection(redis_url: str) -> None:
    async with trio_maint.open_redis(
        redis_url, pool_size=5, max_active_conns=2, pool_timeout=0.2
    ) as r:
        pool = r.pool
        a, b = await pool.acquire(), await pool.acquire()
        with pytest.raises(PoolTimeoutError, match="max_active_conns=2"):
            await pool.acquire()
        pool.release(a)
        c = await pool.acquire()
        assert c is a
        pool.release(b)
        pool.release(c)
        assert pool.stats().total == 2


async def test_min_idle_conns_are_kept_ready(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, pool_size=5, min_idle_conns=2) as r:
        with trio.fail_after(5):
            while r.pool.stats().idle < 2:
                await trio.sleep(0.02)
        assert r.pool.stats().created == 2


async def test_conn_max_idle_time_closes_old_idle_connections(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, conn_max_idle_time=0.1) as r:
        await r.ping()
        [old] = r.pool.connections
        await trio.sleep(0.2)
        await r.ping()
        assert old.closed
        assert r.pool.stats().stale == 1


class RecordingHook:
    def __init__(self) -> None:
        self.get_verdicts: list[Disposition] = []
        self.put_verdicts: list[Disposition] = []
        self.removed: list[tuple[int, str]] = []
        self.taken: list[Connection] = []

    def on_get(self, conn: Connection, is_new: bool) -> Disposition:
        verdict = self.get_verdicts.pop(0) if self.get_verdicts else Disposition.KEEP
        if verdict is Disposition.TAKEN:
            self.taken.append(conn)
        return verdict

    def on_put(self, conn: Connection) -> Disposition:
        verdict = self.put_verdicts.pop(0) if self.put_verdicts else Disposition.KEEP
        if verdict is Disposition.TAKEN:
            self.taken.append(conn)
        return verdict

    def on_remove(self, conn: Connection, reason: str) -> None:
        self.removed.append((conn.id, reason))


async def test_hooks_can_refuse_remove_and_take(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, pool_size=2) as r:
        pool = r.pool
        hook = RecordingHook()
        pool.hooks.append(hook)
        await r.ping()
        [first] = pool.connections
        # on_get REMOVE on the idle one: the pool dials a new connection instead.
        hook.get_verdicts = [Disposition.REMOVE]
        await r.ping()
        assert first.closed
        assert hook.removed == [(first.id, "refused by a pool hook")]
        [second] = pool.connections
        # on_put TAKEN: the hook owns it until it gives it back.
        hook.put_verdicts = [Disposition.TAKEN]
        await r.ping()
        assert hook.taken == [second]
        assert pool.stats().idle == 0 and pool.stats().total == 1
        pool.give_back(second)
        assert pool.idle_connections == [second]
        # on_put REMOVE: closed and forgotten, with a reason.
        hook.put_verdicts = [Disposition.REMOVE]
        await r.ping()
        assert second.closed
        assert hook.removed[-1] == (second.id, "a pool hook asked for removal")


async def test_take_idle_and_discard(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, pool_size=3) as r:
        pool = r.pool
        conns = [await pool.acquire() for _ in range(3)]
        for conn in conns:
            pool.release(conn)
        taken = pool.take_idle()
        assert sorted(c.id for c in taken) == sorted(c.id for c in conns)
        assert pool.stats().idle == 0
        pool.discard(taken[0], "test")
        assert taken[0].closed and pool.stats().total == 2
        for conn in taken[1:]:
            pool.give_back(conn)
        assert pool.stats().idle == 2


async def test_public_async_methods_checkpoint(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url) as r:
        await r.ping()  # warm: the next acquire is a pool hit
        with trio.testing.assert_checkpoints():
            conn = await r.pool.acquire()
        r.pool.release(conn)
        with trio.testing.assert_checkpoints():
            await r.ping()
        with trio.testing.assert_checkpoints():
            await r.pipeline().execute()
        async with r.pipeline() as p:
            p.ping()
            with trio.testing.assert_checkpoints():
                await p.execute()
        with trio.testing.assert_checkpoints():
            await r.pool.connections[0].aclose()


async def test_acquire_for_reply_is_a_cancel_point_and_commands_still_checkpoint(
    redis_url: str,
) -> None:
    async with trio_maint.open_redis(redis_url) as r:
        await r.ping()  # warm: the next acquire is a pool hit
        with trio.CancelScope() as scope:
            scope.cancel()
            await r.pool.acquire_for_reply()
        assert scope.cancelled_caught
        assert r.pool.stats().idle == 1 and r.pool.stats().in_use == 0
        # The commands built on it are whole checkpoints: the reply's wait schedules.
        with trio.testing.assert_checkpoints():
            await r.get("acquire-for-reply")
        async with r.pipeline(transaction=False) as p:
            p.get("acquire-for-reply")
            with trio.testing.assert_checkpoints():
                await p.execute()
        with trio.testing.assert_checkpoints():
            await r.execute_command("ECHO", "x")


async def test_stats_shape(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url) as r:
        await r.ping()
        await r.ping()
        stats = r.pool.stats()
        assert (stats.hits, stats.misses, stats.total, stats.idle, stats.in_use) == (1, 1, 1, 1, 0)


async def test_broken_connection_is_never_reused(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url) as r:
        await r.ping()
        [conn] = r.pool.connections
        with trio.move_on_after(0.05):
            await r.execute_command("BLPOP", "nothing", "1")
        assert conn.broken and conn.closed
        assert await r.ping() is True
        assert conn not in r.pool.connections


async def test_closed_pool_refuses(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url) as r:
        await r.ping()
    assert r.closed
    with pytest.raises(trio_maint.ConnectionClosedError):
        await r.ping()
    assert r.pool.stats().total == 0


async def _unused(*args: Any) -> None:  # pragma: no cover
    pass
