"""Maintenance handling end to end: real redis-servers, clients through
trio_maint.testing.MaintenanceSimulator (a RESP proxy that injects notifications)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest
import trio

import trio_maint
from trio_maint import (
    EndpointType,
    HandoffFailed,
    HandoffSucceeded,
    MaintConfig,
    MaintenanceNotSupportedError,
    MaintMode,
    MovingStarted,
)
from trio_maint._maint.workers import QUEUE_FULL_MESSAGE
from trio_maint._net.stream import socket_of
from trio_maint.lowlevel import BreakerState
from trio_maint.testing import MaintenanceSimulator, RedisServer, free_port, migrate

pytestmark = pytest.mark.trio

TIMEOUT = 30.0
DB = 10


@pytest.fixture(scope="module")
def backend() -> Iterator[RedisServer]:
    """A redis-server of this module's own (the simulators forward to it)."""
    with RedisServer(extra_args=("--enable-debug-command", "yes")) as server:
        yield server


@pytest.fixture
async def sim_a(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=backend) as sim:
        yield sim


@pytest.fixture
async def sim_b(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    """The endpoint MOVING sends clients to (the same data behind it, as after a move)."""
    async with MaintenanceSimulator(backend=backend) as sim:
        yield sim


def url(sim: MaintenanceSimulator | RedisServer) -> str:
    return f"{sim.url}/{DB}"


def trio_maint_records(caplog: pytest.LogCaptureFixture, above: int) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name.startswith("trio_maint") and not r.name.startswith("trio_maint.testing")
        if r.levelno > above
    ]


def local_port(conn: trio_maint.lowlevel.Connection) -> int:
    stream = conn._stream
    assert stream is not None
    return int(socket_of(stream).getsockname()[1])


def sim_id(sim: MaintenanceSimulator, conn: trio_maint.lowlevel.Connection) -> int:
    """The simulator's id of the client connection ``conn``."""
    port = local_port(conn)
    (cid,) = [i.id for i in sim.connections if i.peer[1] == port]
    return cid


async def wait_for(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


# --- handshake ----------------------------------------------------------------------------


async def test_auto_mode_on_unmodified_redis_is_quiet(
    backend: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_maint")
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(backend), pool_size=8) as r:
            async with trio.open_nursery() as nursery:
                for i in range(8):
                    nursery.start_soon(r.set, f"tm:auto:{i}", i)
            assert [
                int(v or -1) for v in await r.mget(*[f"tm:auto:{i}" for i in range(8)])
            ] == list(range(8))
            assert r.maintenance is not None
            assert r.maintenance.mode is MaintMode.DISABLED
            assert r.maintenance.state.mode is MaintMode.DISABLED
            for conn in r.pool.connections:
                assert not conn.maint_enabled
            async with r.pubsub() as ps:
                await ps.subscribe("tm:auto")
                assert (await ps.get_message(timeout=5)) is not None
    assert trio_maint_records(caplog, logging.DEBUG) == []
    unsupported = [r for r in caplog.records if "does not support maintenance" in r.getMessage()]
    assert len(unsupported) == 1  # one line per client, not per connection


async def test_enabled_mode_on_unmodified_redis_fails_clearly(backend: RedisServer) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(
            url(backend), maintenance=MaintConfig(mode="enabled")
        ) as r:
            with pytest.raises(MaintenanceNotSupportedError, match="MAINT_NOTIFICATIONS"):
                await r.ping()


async def test_disabled_mode_sends_nothing(sim_a: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        config = MaintConfig(mode="disabled")
        async with trio_maint.open_redis(url(sim_a), maintenance=config) as r:
            assert await r.ping() is True
            assert [c.maint_enabled for c in sim_a.connections] == [False]
            assert r.maintenance is not None
            assert r.maintenance.endpoint_type is EndpointType.AUTO  # no detection
            assert r.maintenance.manager is None


async def test_handshake_opts_in_with_detected_endpoint_type(sim_a: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a)) as r:
            assert await r.ping() is True
            (info,) = sim_a.connections
            assert info.maint_enabled
            assert info.endpoint_type == "internal-ip"
            assert r.maintenance is not None
            assert r.maintenance.mode is MaintMode.AUTO
            assert all(c.maint_enabled for c in r.pool.connections)


async def test_unix_socket_client_handshakes() -> None:
    with RedisServer(unix_socket=True) as server:
        assert server.unix_path is not None
        with trio.fail_after(TIMEOUT):
            async with trio_maint.open_redis(f"unix://{server.unix_path}") as r:
                assert await r.ping() is True
                assert r.maintenance is not None
                assert r.maintenance.endpoint_type is EndpointType.INTERNAL_IP


# --- notifications ------------------------------------------------------------------------


async def test_malformed_notification_is_logged_and_ignored(
    sim_a: MaintenanceSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_maint")
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a), pool_size=1) as r:
            await r.set("tm:mal", "v")
            await sim_a.inject_raw(b">2\r\n$6\r\nMOVING\r\n$3\r\nabc\r\n")
            assert await r.get("tm:mal") == b"v"
            assert await r.get("tm:mal") == b"v"
    warnings = [
        rec for rec in caplog.records if rec.levelno == logging.WARNING and "malformed" in rec.msg
    ]
    assert len(warnings) == 1
    assert "[bytes(6), bytes(3)]" in warnings[0].getMessage()


async def test_migrating_relaxes_and_migrated_restores(sim_a: MaintenanceSimulator) -> None:
    config = MaintConfig(relaxed_timeout=3.0)
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(
            url(sim_a), pool_size=1, socket_timeout=0.3, maintenance=config
        ) as r:
            handler = r.maintenance
            assert handler is not None
            await r.set("tm:relax", "1")
            (conn,) = r.pool.connections
            await sim_a.inject_migrating()
            await r.get("tm:relax")  # the frame is drained before the reply
            state = handler.state
            assert state.in_window
            assert state.relaxed_connections == 1
            assert conn.timeouts is not None
            assert conn.timeouts.effective(0.3, trio.current_time()) == 3.0
            assert conn.timeouts.effective(None, trio.current_time()) is None
            # A slow server during the window: the relaxed timeout covers it.
            sim_a.set_latency(1.0)
            assert await r.get("tm:relax") == b"1"
            sim_a.set_latency(0.0)
            await sim_a.inject_migrated()
            await r.get("tm:relax")
            state = handler.state  # a new snapshot
            assert not state.in_window
            assert state.relaxed_connections == 0
            # The policy is removed: no cost per command (a fresh look at the connection).
            assert r.pool.connections[0] is conn and r.pool.connections[0].timeouts is None
            # Outside a window the configured timeout applies again.
            sim_a.set_latency(1.0)
            with pytest.raises(trio_maint.TimeoutError):
                await r.get("tm:relax")
            sim_a.set_latency(0.0)


async def test_failing_over_relaxes_and_failed_over_restores(
    sim_a: MaintenanceSimulator,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a), pool_size=1) as r:
            assert r.maintenance is not None
            await r.ping()
            await sim_a.inject_failing_over()
            await r.ping()
            assert r.maintenance.state.relaxed_connections == 1
            await sim_a.inject_failed_over()
            await r.ping()
            assert r.maintenance.state.relaxed_connections == 0


# --- MOVING -------------------------------------------------------------------------------


async def run_workload(
    r: trio_maint.Redis,
    tasks: int,
    stop: trio.Event,
    failures: list[BaseException],
    acked: dict[str, int],
    mixed: bool = True,
) -> None:
    async def worker(i: int) -> None:
        # With ``mixed``, a third of the tasks send single commands, a third pipelines and a
        # third MULTI/EXEC; otherwise all send single commands.
        key = f"tm:load:{i}"
        while not stop.is_set():
            try:
                if not mixed or i % 3 == 0:
                    value = await r.incr(key)
                else:
                    async with r.pipeline(transaction=i % 3 == 2) as pipe:
                        pipe.incr(key).get(key)
                        value, _ = await pipe.execute()
            except Exception as exc:  # counted, the test asserts there are none
                failures.append(exc)
            else:
                acked[key] = value
            await trio.sleep(0.002)

    async with trio.open_nursery() as nursery:
        for i in range(tasks):
            nursery.start_soon(worker, i)


async def moving_timeline(
    sim_a: MaintenanceSimulator,
    sim_b: MaintenanceSimulator,
    *,
    opening: str,
    endpoint_type: str = "auto",
    tasks: int = 200,
) -> None:
    config = MaintConfig(endpoint_type=endpoint_type, relaxed_timeout=5.0)
    failures: list[BaseException] = []
    acked: dict[str, int] = {}
    with trio.fail_after(60):
        async with trio_maint.open_redis(url(sim_a), pool_size=20, maintenance=config) as r:
            handler = r.maintenance
            assert handler is not None
            for i in range(tasks):
                await r.delete(f"tm:load:{i}")
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_workload, r, tasks, stop, failures, acked)
                await trio.sleep(0.3)
                if opening == "MIGRATING":
                    await sim_a.inject_migrating(remember=True)
                    await trio.sleep(0.2)
                    await sim_a.inject_migrated()
                else:
                    await sim_a.inject_failing_over(remember=True)
                    await trio.sleep(0.2)
                    await sim_a.inject_failed_over()
                await trio.sleep(0.2)
                # The endpoint moves: new connections to A reach B, MOVING names B (or
                # nothing, for type none), and A's old connections close after `time`.
                sim_a.set_backend(sim_b)
                await sim_a.inject_moving(time=2, target=sim_b, remember=True)
                sim_a.close_connections(after=2.0)
                await trio.sleep(3.0)
                stop.set()
            assert failures == []
            # No acknowledged write was lost.
            for key, value in acked.items():
                assert int(await r.get(key) or -1) >= value
            # Every connection now ends on B (directly, or through A's new forwarding).
            conns = r.pool.connections
            assert conns
            if endpoint_type == "none":
                # Reconnected to the configured address, which now forwards to B.
                via_b = {i.peer[1] for i in sim_a.connections if i.backend == sim_b.address}
                assert all(c.port == sim_a.port for c in conns)
                assert all(local_port(c) in via_b for c in conns)
            else:
                assert all(c.port == sim_b.port for c in conns)
                assert handler.state.current_endpoint == f"127.0.0.1:{sim_b.port}"
            state = handler.state
            assert state.failed_handoffs == 0
            assert state.completed_handoffs >= 1
            assert state.last_moving_seq is not None


async def test_moving_under_load_migrating(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    await moving_timeline(sim_a, sim_b, opening="MIGRATING")


async def test_moving_under_load_failing_over(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    await moving_timeline(sim_a, sim_b, opening="FAILING_OVER")


async def test_moving_under_load_null_endpoint(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    await moving_timeline(sim_a, sim_b, opening="MIGRATING", endpoint_type="none", tasks=100)


async def test_idle_connections_are_handed_off_without_being_used(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a), pool_size=4) as r:
            handler = r.maintenance
            assert handler is not None
            events = handler.events()
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(r.execute_command, "DEBUG", "SLEEP", "0.05")
            assert len(r.pool.idle_connections) == 4
            ids = {c.id for c in r.pool.connections}
            # MOVING arrives on one connection only (the next one used); the others stay
            # idle and are handed off without being used.
            first = sim_id(sim_a, r.pool.idle_connections[-1])
            seq = await sim_a.inject_moving(time=5, target=sim_b, connections=[first])
            # A replay of the same MOVING from A, and an older one, change nothing.
            await sim_a.inject_moving(seq_id=seq, time=5, target=sim_b, connections=[first])
            await sim_a.inject_moving(seq_id=seq - 1, time=5, target=sim_a, connections=[first])
            await r.ping()
            await wait_for(lambda: handler.state.completed_handoffs == 4)
            # Same connection objects with new streams (the ping got a fresh connection
            # to B meanwhile; the pool keeps at most pool_size idle ones).
            assert len({c.id for c in r.pool.connections} & ids) >= 3
            assert all(c.port == sim_b.port for c in r.pool.connections)
            assert len(sim_b.connections) >= 4
            for _ in range(4):
                await r.ping()
            await trio.sleep(0.1)
            assert all(c.port == sim_b.port for c in r.pool.connections)
            assert handler.state.completed_handoffs == 4
            seen = []
            with trio.move_on_after(0.2):
                async for event in events:
                    seen.append(event)
            assert sum(isinstance(e, MovingStarted) for e in seen) == 1
            assert sum(isinstance(e, HandoffSucceeded) for e in seen) == 4
            await events.aclose()


async def test_unreachable_endpoint_opens_breaker_and_workload_continues(
    sim_a: MaintenanceSimulator,
) -> None:
    dead = ("127.0.0.1", free_port())
    config = MaintConfig(
        max_handoff_retries=2, handoff_timeout=1.0, circuit_breaker_failure_threshold=3
    )
    failures: list[BaseException] = []
    acked: dict[str, int] = {}
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a), pool_size=8, maintenance=config) as r:
            handler = r.maintenance
            assert handler is not None and handler.manager is not None
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                # Single commands only: every connection is then released (and queued for
                # its handoff) before the breaker opens; once it is open, MOVINGs to the
                # dead endpoint mark nothing more (docs/maintenance.md).
                nursery.start_soon(run_workload, r, 30, stop, failures, acked, False)
                await trio.sleep(0.3)
                before = {c.id for c in r.pool.connections}
                await sim_a.inject_moving(time=15, target=dead)

                def breaker_open() -> bool:
                    assert handler.manager is not None
                    return any(
                        s.endpoint.port == dead[1] and s.state is BreakerState.OPEN
                        for s in handler.circuit_breaker_stats()
                    )

                await wait_for(breaker_open)
                await wait_for(lambda: handler.state.pending_handoffs == 0)
                await trio.sleep(0.3)
                stop.set()
            assert failures == []
            (stats,) = [s for s in handler.circuit_breaker_stats() if s.endpoint.port == dead[1]]
            assert stats.state is BreakerState.OPEN
            assert stats.opened >= 1
            # Usually every connection reads its MOVING before the breaker opens; one that
            # reads it later is not marked (an open breaker marks nothing more) and stays
            # on A. The handed-off connections were removed; all serve from A.
            failed = handler.state.failed_handoffs
            assert failed >= config.circuit_breaker_failure_threshold
            assert len(before - {c.id for c in r.pool.connections}) >= failed
            assert all(c.port == sim_a.port for c in r.pool.connections)
            assert handler.state.pending_handoffs == 0
            assert await r.ping() is True
        assert r.pool.connections == []


async def test_queue_full_storm_recovers(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_maint")
    config = MaintConfig(max_workers=1, handoff_queue_size=1)
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a), pool_size=10, maintenance=config) as r:
            handler = r.maintenance
            assert handler is not None
            events = handler.events(max_buffer=1000)
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(r.execute_command, "DEBUG", "SLEEP", "0.05")
            assert len(r.pool.idle_connections) == 10
            sim_b.set_latency(0.3)  # a slow new endpoint: handoffs take a while
            next_id = sim_id(sim_a, r.pool.idle_connections[-1])
            await sim_a.inject_moving(time=15, target=sim_b, connections=[next_id])
            await r.ping()
            await wait_for(
                lambda: handler.state.completed_handoffs + handler.state.failed_handoffs >= 10
            )
            sim_b.set_latency(0.0)
            assert handler.state.failed_handoffs >= 1
            assert handler.manager is not None
            assert handler.manager.stats().queue_full >= 1
            assert any(QUEUE_FULL_MESSAGE in rec.getMessage() for rec in caplog.records)
            failed = []
            with trio.move_on_after(0.2):
                async for event in events:
                    if isinstance(event, HandoffFailed):
                        failed.append(event)
            assert failed and all("HandoffQueueFullError" in e.error for e in failed)
            # The pool recovers: commands work, on B.
            for i in range(20):
                await r.set(f"tm:storm:{i}", i)
            assert all(c.port == sim_b.port for c in r.pool.connections)
            await events.aclose()


async def test_pubsub_follows_moving_and_resubscribes_once(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a)) as r:
            async with r.pubsub(ignore_subscribe_messages=True) as ps:
                await ps.subscribe("tm:ps:a", "tm:ps:b")
                await ps.psubscribe("tm:ps:p*")
                await r.publish("tm:ps:a", "before")
                message = await ps.get_message(timeout=5)
                assert message is not None and message.data == b"before"
                old = ps.connection
                assert old is not None
                sub_id = sim_id(sim_a, old)
                await sim_a.inject_moving(time=5, target=sim_b, connections=[sub_id])
                await sim_a.inject_moving(time=5, target=sim_b, connections=[sub_id])
                await r.publish("tm:ps:a", "during")
                got = []
                while True:
                    message = await ps.get_message(timeout=0.5)
                    if message is None:
                        break
                    got.append(message.data)
                assert ps.connection is not old and old.closed
                assert ps.connection is not None and ps.connection.port == sim_b.port
                # Reconnected once; the pool followed the same MOVING (it acts client-wide).
                assert len([c for c in sim_b.connections if c.opened_at]) == 2
                for channel in ("tm:ps:a", "tm:ps:b", "tm:ps:px"):
                    await r.publish(channel, "after")
                after = []
                while True:
                    message = await ps.get_message(timeout=0.5)
                    if message is None:
                        break
                    after.append((message.channel, message.data))
                assert sorted(after) == [
                    (b"tm:ps:a", b"after"),
                    (b"tm:ps:b", b"after"),
                    (b"tm:ps:px", b"after"),
                ]


@pytest.mark.parametrize("endpoint_type", ["auto", "none"])
async def test_real_migration_under_load_loses_nothing(endpoint_type: str) -> None:
    """200 tasks through MIGRATING -> MIGRATED -> a real data move (replication,
    switch-over) -> MOVING(B) -> old endpoint closed: no failed command, no acknowledged
    write lost, every connection ends on B."""
    failures: list[BaseException] = []
    acked: dict[str, int] = {}
    config = MaintConfig(endpoint_type=endpoint_type)
    with trio.fail_after(60):
        async with MaintenanceSimulator() as a, MaintenanceSimulator() as b:
            assert b.server is not None
            async with trio_maint.open_redis(a.url, pool_size=20, maintenance=config) as r:
                handler = r.maintenance
                assert handler is not None
                stop = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(run_workload, r, 200, stop, failures, acked)
                    await trio.sleep(0.5)
                    await a.inject_migrating(remember=True)
                    await trio.sleep(0.3)
                    await a.inject_migrated()
                    result = await migrate(a, b, time=2)
                    await trio.sleep(0.5)
                    stop.set()
                assert failures == []
                assert len(result.moved) >= 1
                conns = r.pool.connections
                assert conns
                if endpoint_type == "none":
                    via_b = {i.peer[1] for i in a.connections if i.backend == b.home_address}
                    assert all(local_port(c) in via_b for c in conns)
                else:
                    assert all(c.port == b.port for c in conns)
                assert handler.state.failed_handoffs == 0
            # Every acknowledged write is on B's server.
            async with trio_maint.open_redis(b.server.url) as admin:
                keys = sorted(acked)
                values = await admin.mget(*keys)
                lost = [k for k, v in zip(keys, values, strict=True) if int(v or -1) < acked[k]]
                assert lost == []


async def test_new_endpoint_refusing_the_opt_in_downgrades_auto_mode(
    backend: RedisServer, sim_a: MaintenanceSimulator
) -> None:
    """The re-handshake of a handoff meets a server without maintenance support: the
    handoffs still succeed (no deadlock), and the client turns the feature off."""
    metrics = trio_maint.MetricsHook()
    async with MaintenanceSimulator(backend=backend, maint_notifications=False) as plain:
        with trio.fail_after(TIMEOUT):
            async with trio_maint.open_redis(url(sim_a), pool_size=3) as r:
                handler = r.maintenance
                assert handler is not None
                handler.add_hook(metrics)
                async with trio.open_nursery() as nursery:
                    for _ in range(3):
                        nursery.start_soon(r.execute_command, "DEBUG", "SLEEP", "0.05")
                first = sim_id(sim_a, r.pool.idle_connections[-1])
                await sim_a.inject_moving(time=5, target=plain, connections=[first])
                await r.ping()
                await wait_for(lambda: handler.state.completed_handoffs == 3)
                assert handler.mode is MaintMode.DISABLED
                assert handler.state.failed_handoffs == 0
                assert all(c.port == plain.port for c in r.pool.connections)
                assert not any(c.maint_enabled for c in r.pool.connections)
                for i in range(10):
                    await r.set(f"tm:plain:{i}", i)
    data = metrics.get_metrics()
    assert data["notification_counts"] == {"MOVING": 1}
    assert data["processing_times"]["MOVING"]["count"] == 1
    assert data["handoff_successes"] == 3
    assert data["handoff_latency"]["count"] == 3
    assert data["handoff_failures"] == 0


async def test_enabled_mode_handoff_to_a_refusing_endpoint_fails_cleanly(
    backend: RedisServer, sim_a: MaintenanceSimulator
) -> None:
    async with MaintenanceSimulator(backend=backend, maint_notifications=False) as plain:
        with trio.fail_after(TIMEOUT):
            config = MaintConfig(mode="enabled")
            async with trio_maint.open_redis(url(sim_a), pool_size=2, maintenance=config) as r:
                handler = r.maintenance
                assert handler is not None
                events = handler.events()
                await r.ping()
                await sim_a.inject_moving(time=5, target=plain)
                # The idle connection reads MOVING and is handed off (and fails: the new
                # endpoint refuses the opt-in); the command needs a new connection: the
                # new endpoint refuses it too, so it falls back to the configured one.
                # The bad MOVING costs the moved connection, not the command.
                assert await r.ping() is True
                await wait_for(lambda: handler.state.failed_handoffs == 1)
                failed = []
                with trio.move_on_after(0.2):
                    async for event in events:
                        if isinstance(event, HandoffFailed):
                            failed.append(event)
                assert len(failed) == 1 and "MaintenanceNotSupportedError" in failed[0].error
                assert handler.mode is MaintMode.ENABLED
                assert handler.state.pending_handoffs == 0


async def test_moving_on_an_idle_pool_is_acted_on_without_traffic(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    """No command runs after the MOVING: the pool's maintenance round drains the idle
    connections and hands them off before the old endpoint closes them."""
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a), pool_size=4) as r:
            handler = r.maintenance
            assert handler is not None
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(r.execute_command, "DEBUG", "SLEEP", "0.05")
            ids = {c.id for c in r.pool.connections}
            assert len(ids) == 4
            await sim_a.inject_moving(time=15, target=sim_b)
            await wait_for(lambda: handler.state.completed_handoffs == 4, timeout=5)
            assert {c.id for c in r.pool.connections} == ids
            assert all(c.port == sim_b.port for c in r.pool.idle_connections)
            assert len(r.pool.idle_connections) == 4
