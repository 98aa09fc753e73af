"""Faults injected through the MaintenanceSimulator (real redis-server behind it).

Each test breaks the network in one way, checks that the client obeys its timeouts and
fails the affected command with a clear error (or not at all), and that the workload
recovers with no acknowledged write lost.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import MaintConfig, MovingStarted
from trio_maint.lowlevel import BreakerState
from trio_maint.testing import MaintenanceSimulator, RedisServer, free_port

from ._stallproxy import open_silent_server

pytestmark = pytest.mark.trio

DB = 12
BIG = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def backend() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--enable-debug-command", "yes")) as server:
        yield server


@pytest.fixture
async def sim(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=backend) as s:
        yield s


@pytest.fixture
async def sim_b(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=backend) as s:
        yield s


def url(s: MaintenanceSimulator) -> str:
    return f"{s.url}/{DB}"


class Workload:
    """INCRs on private keys from several tasks until stopped; remembers what was
    acknowledged and every error."""

    def __init__(self, r: trio_maint.Redis, tasks: int = 8) -> None:
        self.r = r
        self.tasks = tasks
        self.acked: dict[str, int] = {}
        self.errors: list[BaseException] = []
        self.stop = trio.Event()

    async def run(self) -> None:
        async def worker(i: int) -> None:
            key = f"rf:{id(self)}:{i}"
            while not self.stop.is_set():
                try:
                    self.acked[key] = await self.r.incr(key)
                except trio_maint.RedisError as exc:
                    self.errors.append(exc)
                await trio.sleep(0.003)

        async with trio.open_nursery() as nursery:
            for i in range(self.tasks):
                nursery.start_soon(worker, i)

    async def check_no_write_lost(self) -> None:
        assert self.acked, "the workload never ran"
        for key, value in self.acked.items():
            assert int(await self.r.get(key) or -1) == value


async def wait_for(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.005)


def check_pool(r: trio_maint.Redis) -> None:
    stats = r.pool.stats()
    assert stats.in_use == 0 and stats.total == stats.idle, stats
    handler = r.maintenance
    assert all(c.usable for c in r.pool.connections)
    assert handler is None or all(handler.handoff_target(c) is None for c in r.pool.connections)


# ---------------------------------------------------------------------- mid-reply


async def _read_big_while(sim: MaintenanceSimulator, r: trio_maint.Redis, fault: str) -> float:
    """GET a 4 MiB value, apply ``fault`` once part of the reply reached the client;
    returns how long the GET took to fail."""
    await r.set("rf:big", b"x" * BIG)
    sim.set_latency(0.02)  # the reply trickles in, chunk by chunk
    started = trio.current_time()
    failed_at: list[float] = []

    async def reader() -> None:
        with pytest.raises(trio_maint.RedisError) as info:
            await r.get("rf:big")
        failed_at.append(trio.current_time())
        expected = trio_maint.TimeoutError if fault == "stall" else trio_maint.ConnectionError
        assert isinstance(info.value, expected), repr(info.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await wait_for(lambda: any(100_000 < c.bytes_to_client < BIG for c in sim.connections))
        if fault == "close":
            sim.close_connections()
        else:
            sim.stall()
    sim.set_latency(0)
    sim.unstall()
    return failed_at[0] - started


async def test_server_closes_mid_reply(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(20):
        async with trio_maint.open_redis(url(sim), socket_timeout=5) as r:
            took = await _read_big_while(sim, r, "close")
            assert took < 4  # the close is noticed at once, not at the timeout
            check_pool(r)  # the half-read connection was discarded
            assert r.pool.stats().total == 0
            assert await r.get("rf:big") == b"x" * BIG


async def test_server_stalls_forever_mid_reply(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(20):
        async with trio_maint.open_redis(url(sim), socket_timeout=0.5) as r:
            took = await _read_big_while(sim, r, "stall")
            assert 0.5 <= took < 4
            check_pool(r)
            assert r.pool.stats().total == 0
            assert await r.echo("after") == b"after"


# ---------------------------------------------------------------------- handshake


async def test_reset_during_the_handshake(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(20):
        async with trio_maint.open_redis(url(sim), connect_timeout=5) as r:
            sim.stall()  # HELLO reaches the proxy, no answer comes back
            errors: list[BaseException] = []

            async def command() -> None:
                try:
                    await r.ping()
                except trio_maint.RedisError as exc:
                    errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(command)
                await sim.wait_for_connections(1)
                await trio.testing.wait_all_tasks_blocked(0.05)
                await sim.drop_connections()
            sim.unstall()
            assert len(errors) == 1 and isinstance(errors[0], trio_maint.ConnectionError)
            check_pool(r)
            assert r.pool.stats().total == 0
            assert await r.ping() is True


async def test_stalled_handshake_obeys_connect_timeout(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(20):
        async with trio_maint.open_redis(url(sim), connect_timeout=1.0) as r:
            sim.stall()
            started = trio.current_time()
            with pytest.raises(trio_maint.TimeoutError):
                await r.ping()
            assert 1.0 <= trio.current_time() - started < 4
            sim.unstall()
            check_pool(r)
            assert await r.ping() is True


# ------------------------------------------------------------------------ MOVING


async def test_new_endpoint_refuses_maint_notifications(
    backend: RedisServer, sim: MaintenanceSimulator
) -> None:
    """Only the new endpoint rejects CLIENT MAINT_NOTIFICATIONS (``auto`` mode): the
    handoffs still succeed, maintenance handling is switched off, and nothing fails."""
    async with MaintenanceSimulator(backend=backend, maint_notifications=False) as plain:
        with trio.fail_after(30):
            config = MaintConfig(endpoint_type="internal-ip")
            async with trio_maint.open_redis(url(sim), pool_size=6, maintenance=config) as r:
                handler = r.maintenance
                assert handler is not None
                load = Workload(r)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(load.run)
                    await sim.wait_for_connections(3, maint_enabled=True)
                    # remember: connections opened meanwhile get it when they opt in
                    await sim.inject_moving(time=2, target=plain, remember=True)
                    await wait_for(lambda: handler.state.completed_handoffs >= 1)
                    await trio.sleep(0.2)
                    load.stop.set()
                assert load.errors == []
                await load.check_no_write_lost()
                assert handler.mode is trio_maint.MaintMode.DISABLED
                # Connections that opted in after the MOVING got it replayed behind the
                # handshake's +OK; an idle connection reads it when next used.
                async with trio.open_nursery() as nursery:
                    for _ in range(6):
                        nursery.start_soon(r.execute_command, "DEBUG", "SLEEP", "0.05")
                await wait_for(lambda: handler.state.pending_handoffs == 0)
                assert all(c.port == plain.port for c in r.pool.connections)
                assert not any(c.maint_enabled for c in r.pool.connections)
                check_pool(r)


async def _moving_to_bad_endpoint(sim: MaintenanceSimulator, port: int) -> trio_maint.Redis:
    config = MaintConfig(
        endpoint_type="internal-ip",
        handoff_timeout=0.5,
        max_handoff_retries=2,
        circuit_breaker_failure_threshold=3,
        circuit_breaker_reset_timeout=60,
    )
    async with trio_maint.open_redis(
        url(sim), pool_size=6, connect_timeout=1.0, maintenance=config
    ) as r:
        handler = r.maintenance
        assert handler is not None and handler.manager is not None
        load = Workload(r)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(load.run)
            await sim.wait_for_connections(3, maint_enabled=True)
            before = {c.id for c in r.pool.connections}
            await sim.inject_moving(time=15, target=("127.0.0.1", port))
            await wait_for(lambda: handler.state.failed_handoffs >= len(before), timeout=15)
            # Connections opened meanwhile got the MOVING too: let their handoffs fail.
            await wait_for(lambda: handler.state.pending_handoffs == 0, timeout=15)
            await trio.sleep(0.5)  # new dials: the breaker sends them back home
            load.stop.set()
        assert load.errors == []
        await load.check_no_write_lost()
        (stats,) = [s for s in handler.circuit_breaker_stats() if s.endpoint.port == port]
        assert stats.state is BreakerState.OPEN, stats
        assert all(c.port == sim.port for c in r.pool.connections)
        assert handler.state.pending_handoffs == 0
        check_pool(r)
    return r


async def test_moving_to_an_endpoint_where_nothing_listens(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(30):
        r = await _moving_to_bad_endpoint(sim, free_port())
    assert r.pool.connections == []


async def test_moving_to_an_endpoint_that_never_answers_the_handshake(
    sim: MaintenanceSimulator,
) -> None:
    with trio.fail_after(30):
        async with open_silent_server() as port:
            r = await _moving_to_bad_endpoint(sim, port)
    assert r.pool.connections == []


async def test_moving_while_a_handoff_to_another_endpoint_is_in_flight(
    backend: RedisServer, sim: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    """MOVING to B, whose handshake hangs; MOVING (newer seq) to C meanwhile: every
    connection ends on C, none fails, and the workload never notices."""
    async with MaintenanceSimulator(backend=backend) as sim_c:
        config = MaintConfig(endpoint_type="internal-ip", handoff_timeout=1.0)
        with trio.fail_after(30):
            async with trio_maint.open_redis(
                url(sim), pool_size=4, connect_timeout=2, maintenance=config
            ) as r:
                handler = r.maintenance
                assert handler is not None and handler.manager is not None
                load = Workload(r, tasks=4)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(load.run)
                    await sim.wait_for_connections(2, maint_enabled=True)
                    sim_b.stall()  # handoffs to B hang in the handshake
                    # remember=True: as managed Redis, connections opened during the
                    # window get the current MOVING (the connections owned by the
                    # HandoffManager are not read, so they cannot see the second one).
                    seq = await sim.inject_moving(time=15, target=sim_b, remember=True)
                    await wait_for(lambda: handler.manager.stats().running >= 1)
                    sim.set_backend(sim_c)
                    await sim.inject_moving(seq_id=seq + 1, time=15, target=sim_c, remember=True)
                    await wait_for(
                        lambda: (
                            handler.manager.stats().pending == 0
                            and all(c.port == sim_c.port for c in r.pool.connections)
                        ),
                        timeout=15,
                    )
                    load.stop.set()
                sim_b.unstall()
                assert load.errors == []
                await load.check_no_write_lost()
                assert handler.state.failed_handoffs == 0
                # A connection dialed to B before the second MOVING falls back to A when
                # its connect times out; A replays the window's MOVING (to C) to it, as
                # managed Redis does to connections opened during a window: it ends on C.
                await wait_for(
                    lambda: (
                        handler.manager.stats().pending == 0
                        and all(c.port == sim_c.port for c in r.pool.connections)
                    ),
                    timeout=15,
                )
                assert handler.state.failed_handoffs == 0
                check_pool(r)


async def test_the_same_moving_delivered_twice(
    sim: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    config = MaintConfig(endpoint_type="internal-ip")
    with trio.fail_after(30):
        async with trio_maint.open_redis(url(sim), pool_size=4, maintenance=config) as r:
            handler = r.maintenance
            assert handler is not None
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(r.execute_command, "PING")
            conns = {c.id for c in r.pool.connections}
            events = handler.events()
            seq = await sim.inject_moving(time=15, target=sim_b)
            await sim.inject_moving(seq_id=seq, time=15, target=sim_b)
            await r.ping()  # reads the frames on one connection
            await wait_for(lambda: handler.state.completed_handoffs >= len(conns))
            await trio.sleep(0.1)
            seen = []
            with trio.move_on_after(0.2):
                async for event in events:
                    seen.append(event)
            await events.aclose()
            assert sum(isinstance(e, MovingStarted) for e in seen) == 1
            state = handler.state
            assert state.completed_handoffs == len(conns), state
            assert state.failed_handoffs == 0
            # (one more connection was dialed for the PING: the idle list overflowed)
            assert len(r.pool.connections) <= 4
            assert all(c.port == sim_b.port for c in r.pool.connections)
            check_pool(r)


# --------------------------------------------------------------- relaxation backstop


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


async def test_migrating_without_migrated_backstop_restores_timeouts(
    sim: MaintenanceSimulator, autojump_clock: trio.testing.MockClock
) -> None:
    """MIGRATING relaxes the timeout to 5 s; no MIGRATED ever comes; the backstop (10 x
    relaxed_timeout) restores the configured 0.5 s. Timed with the autojump clock."""
    config = MaintConfig(relaxed_timeout=5.0)
    with trio.fail_after(200):
        async with trio_maint.open_redis(
            url(sim), pool_size=2, socket_timeout=0.5, maintenance=config
        ) as r:
            async with r.pool.connection() as c1, r.pool.connection() as c2:
                pass
            await sim.inject_migrating()
            async with r.pool.connection() as c1, r.pool.connection() as c2:
                sim.stall()
                for conn, expected in ((c1, 5.0), (c2, None)):
                    if expected is None:
                        await trio.sleep(60)  # past the 50 s backstop
                        expected = 0.5
                    started = trio.current_time()
                    with pytest.raises(trio_maint.TimeoutError):
                        await conn.execute(("PING",))
                    assert trio.current_time() - started == pytest.approx(expected, abs=0.2)
                sim.unstall()
            check_pool(r)
            assert await r.ping() is True


# ------------------------------------------------------------- simulator regression


async def test_remembered_moving_reaches_connections_opting_in_during_the_injection(
    sim: MaintenanceSimulator,
) -> None:
    """Regression: ``inject_moving(remember=True)`` registered the replay only after
    writing to every target, so a connection that opted in meanwhile got no MOVING."""
    from contextlib import AsyncExitStack

    from trio_maint.testing import connect_raw

    with trio.fail_after(20):
        async with AsyncExitStack() as stack:
            others = []
            for _ in range(30):
                raw = await stack.enter_async_context(await connect_raw(sim.address))
                await raw.execute("HELLO", "3")
                assert await raw.execute("CLIENT", "MAINT_NOTIFICATIONS", "ON") == b"OK"
                others.append(raw)
            late = []
            for _ in range(10):
                raw = await stack.enter_async_context(await connect_raw(sim.address))
                await raw.execute("HELLO", "3")
                late.append(raw)
            async with trio.open_nursery() as nursery:
                for raw in late:
                    nursery.start_soon(raw.send, ("CLIENT", "MAINT_NOTIFICATIONS", "ON"))
                nursery.start_soon(functools.partial(sim.inject_moving, time=15, remember=True))
            for raw in late:
                assert await raw.read_reply() == b"OK"
                assert await raw.execute("PING") == b"PONG"
                assert [p[0] for p in raw.pushes] == [b"MOVING"], raw.pushes


async def test_no_connection_churn_while_the_moving_target_is_broken(
    sim: MaintenanceSimulator,
) -> None:
    dead = ("127.0.0.1", free_port())
    config = MaintConfig(
        endpoint_type="internal-ip",
        handoff_timeout=0.5,
        max_handoff_retries=2,
        circuit_breaker_failure_threshold=3,
    )
    with trio.fail_after(30):
        async with trio_maint.open_redis(
            url(sim), pool_size=6, connect_timeout=0.3, maintenance=config
        ) as r:
            load = Workload(r)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(load.run)
                await sim.wait_for_connections(3, maint_enabled=True)
                await sim.inject_moving(time=15, target=dead, remember=True)
                await trio.sleep(2.0)  # the breaker is open by now
                created = r.pool.stats().created
                await trio.sleep(1.0)
                load.stop.set()
            assert load.errors == []
            assert r.pool.stats().created - created < 20, r.pool.stats()
