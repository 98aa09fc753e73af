"""Scripts across a MOVING handoff (issue 14, item 4): two real redis-servers, each with its
own script cache, behind trio_maint.testing.MaintenanceSimulator. The script is cached on A
only; MOVING sends the pool to B, whose cache is empty: every call still succeeds (EVALSHA
meets NOSCRIPT on B, which proves it did not run, and the call is sent again as EVAL)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import MaintConfig
from trio_maint.testing import MaintenanceSimulator, RedisServer

pytestmark = pytest.mark.trio

TIMEOUT = 60.0
SOURCE = """-- trio_maint scripting across a MOVING
return {KEYS[1], redis.call('INCR', KEYS[1])}
"""


@pytest.fixture
def servers() -> Iterator[tuple[RedisServer, RedisServer]]:
    """Two redis-servers of this test's own (A, then B): separate script caches."""
    with RedisServer() as a, RedisServer() as b:
        yield a, b


@pytest.fixture
async def sims(
    servers: tuple[RedisServer, RedisServer],
) -> AsyncIterator[tuple[MaintenanceSimulator, MaintenanceSimulator]]:
    a, b = servers
    async with MaintenanceSimulator(backend=a) as sim_a, MaintenanceSimulator(backend=b) as sim_b:
        yield sim_a, sim_b


async def exists(server: RedisServer, sha: str) -> bool:
    async with trio_maint.open_redis(server.url) as admin:
        (found,) = await admin.execute_command("SCRIPT", "EXISTS", sha)
        return bool(found)


async def evalsha_stats(server: RedisServer, name: str = "evalsha") -> tuple[int, int]:
    """``(calls, failed calls)`` of ``EVALSHA`` (or ``name``) on ``server`` (INFO
    commandstats)."""
    async with trio_maint.open_redis(server.url) as admin:
        info = await admin.info("commandstats")
    entry = info.get(f"cmdstat_{name}", {"calls": 0, "failed_calls": 0})
    return int(entry["calls"]), int(entry["failed_calls"])


async def wait_until_on(r: trio_maint.Redis, sim: MaintenanceSimulator) -> None:
    """Until every pooled connection talks to ``sim`` (the handoffs are done)."""
    handler = r.maintenance
    while not (
        r.pool.connections
        and handler.state.pending_handoffs == 0
        and all(c.port == sim.port for c in r.pool.connections)
    ):
        await trio.sleep(0.02)


async def test_moved_pool_runs_a_script_cached_on_the_old_endpoint_only(
    servers: tuple[RedisServer, RedisServer],
    sims: tuple[MaintenanceSimulator, MaintenanceSimulator],
) -> None:
    server_a, server_b = servers
    sim_a, sim_b = sims
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(sim_a.url, pool_size=4) as r:
            script = r.register_script(SOURCE)
            # Cache it on A, through every pooled connection.
            async with trio.open_nursery() as nursery:
                for i in range(8):
                    nursery.start_soon(script, [f"a{i}"])
            assert await exists(server_a, script.sha)
            assert not await exists(server_b, script.sha)
            before = r.pool.connections
            # The endpoint moves to B: new connections reach B, MOVING names B.
            sim_a.set_backend(sim_b)
            await sim_a.inject_moving(time=5, target=sim_b, remember=True)
            await wait_until_on(r, sim_b)
            assert r.maintenance.state.completed_handoffs >= 1
            assert {c.id for c in r.pool.connections} & {c.id for c in before}  # handed off
            assert not await exists(server_b, script.sha)  # B's cache is still empty
            with pytest.raises(trio_maint.NoScriptError):  # what a bare EVALSHA meets now
                await r.execute_command("EVALSHA", script.sha, 1, "k")
            # Calls, pipelines and transactions: none fails.
            assert await script(["k"]) == [b"k", 1]
            async with r.pipeline(transaction=False) as pipe:
                await script(["k"], client=pipe)
                pipe.incr("k")
                await script(["k"], client=pipe)
                assert await pipe.execute() == [[b"k", 2], 3, [b"k", 4]]
            async with r.pipeline() as pipe:
                await script(["k"], client=pipe)
                await script(["k"], client=pipe)
                assert await pipe.execute() == [[b"k", 5], [b"k", 6]]
            assert await exists(server_b, script.sha)  # cached on B again
            calls, failed = await evalsha_stats(server_b)
            # The bare EVALSHA's NOSCRIPT and the script's first, cured: later calls find it.
            assert failed == 2
            assert calls >= 4
            assert all(c.port == sim_b.port for c in r.pool.connections)


async def test_script_workload_through_a_moving_fails_nothing(
    servers: tuple[RedisServer, RedisServer],
    sims: tuple[MaintenanceSimulator, MaintenanceSimulator],
) -> None:
    """Tasks keep calling the script (single calls, pipelines, transactions) while the
    endpoint moves and A's old connections are closed: no call fails, and each call ran
    once (every task's counter went up by exactly its acknowledged calls)."""
    server_a, server_b = servers
    sim_a, sim_b = sims
    failures: list[BaseException] = []
    acked: dict[str, int] = {}
    config = MaintConfig(relaxed_timeout=5.0)
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(sim_a.url, pool_size=10, maintenance=config) as r:
            script = r.register_script(SOURCE)
            stop = trio.Event()

            async def worker(i: int) -> None:
                key = f"w{i}"
                while not stop.is_set():
                    try:
                        count = 1 if i % 3 == 0 else 2
                        if i % 3 == 0:
                            reply: Any = [await script([key])]
                        else:
                            async with r.pipeline(transaction=i % 3 == 2) as pipe:
                                await script([key], client=pipe)
                                await script([key], client=pipe)
                                reply = await pipe.execute()
                        assert [k for k, _ in reply] == [key.encode()] * count
                    except Exception as exc:  # counted: the test asserts there are none
                        failures.append(exc)
                    else:
                        acked[key] = acked.get(key, 0) + count
                    await trio.sleep(0.002)

            async with trio.open_nursery() as nursery:
                for i in range(30):
                    nursery.start_soon(worker, i)
                await trio.sleep(0.3)
                sim_a.set_backend(sim_b)
                await sim_a.inject_moving(time=2, target=sim_b, remember=True)
                sim_a.close_connections(after=2.0)
                await wait_until_on(r, sim_b)
                await trio.sleep(2.5)  # past A's closing: everything runs on B
                stop.set()
            assert failures == []
            assert all(c.port == sim_b.port for c in r.pool.connections)
            assert r.maintenance.state.failed_handoffs == 0
        assert await exists(server_b, script.sha)
        # B got the body once it lacked the script (after NOSCRIPT, or a transaction's
        # first call: which came first is a race), then the digest.
        assert (await evalsha_stats(server_b, "eval"))[0] >= 1
        assert (await evalsha_stats(server_b))[0] >= 1
        # Every call was acknowledged (none failed) and ran exactly once: the counters
        # of A (before the move) and B (after it) add up to the calls made.
        async with (
            trio_maint.open_redis(server_a.url) as on_a,
            trio_maint.open_redis(server_b.url) as on_b,
        ):
            for i in range(30):
                key = f"w{i}"
                ran = int(await on_a.get(key) or 0) + int(await on_b.get(key) or 0)
                assert ran == acked[key], key
