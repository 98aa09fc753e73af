"""Attacks on the ReplyTimer: the one task per client that bounds reply waits on plain
sockets with ``notify_closing`` instead of a cancel scope per reply."""

from __future__ import annotations

import math
import random
import socket
from typing import Any

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import ClientOptions
from trio_maint._net.connection import Connection
from trio_maint._net.timer import ReplyTimer

pytestmark = pytest.mark.trio


def _paired_connection(timer: ReplyTimer | None) -> tuple[Connection, socket.socket]:
    """A connection on one end of a socketpair (no handshake); the test plays the server
    on the other end, synchronously."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    conn = Connection(ClientOptions(socket_timeout=1.0))
    conn._attach(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
    conn.reply_timer = timer
    return conn, theirs


async def test_shielded_command_armed_when_the_timer_stops_still_times_out(
    redis_url: str,
) -> None:
    # The client's nursery is cancelled from outside while a shielded command (a common
    # cleanup pattern) waits for a reply that never comes: the timer task stops with the
    # wait armed. The wait must still end at its deadline, not hang until pool.close().
    ended: list[float] = []
    with trio.fail_after(5):
        with trio.move_on_after(0.2):
            async with trio_maint.open_redis(redis_url, socket_timeout=30.0) as r:
                await r.ping()
                start = trio.current_time()
                with trio.CancelScope(shield=True):
                    with pytest.raises(TimeoutError):
                        await r.execute_command("BLPOP", "never-shielded", "0", timeout=0.6)
                ended.append(trio.current_time() - start)
    assert ended and 0.6 <= ended[0] < 2.5


async def test_timer_stopping_while_armed_falls_back_to_a_cancel_scope(
    autojump_clock: trio.abc.Clock,
) -> None:
    timer = ReplyTimer()
    conn, server = _paired_connection(timer)
    results: list[Any] = []

    async def command() -> None:
        try:
            results.append(await conn.execute(("PING",), timeout=5.0))
        except BaseException as exc:
            results.append(exc)

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(timer.run)
            await trio.testing.wait_all_tasks_blocked()
            t0 = trio.current_time()
            outer.start_soon(command)
            await trio.testing.wait_all_tasks_blocked()
            assert conn in timer._armed
            nursery.cancel_scope.cancel()
        assert not timer.running
    assert isinstance(results[0], TimeoutError)
    assert trio.current_time() == t0 + 5.0
    assert timer._armed == {}
    server.close()
    conn.close_nowait()


async def test_timer_stopping_while_armed_lets_a_late_reply_through(
    autojump_clock: trio.abc.Clock,
) -> None:
    timer = ReplyTimer()
    conn, server = _paired_connection(timer)
    results: list[Any] = []

    async def command() -> None:
        results.append(await conn.execute(("PING",), timeout=5.0))

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(timer.run)
            await trio.testing.wait_all_tasks_blocked()
            outer.start_soon(command)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        await trio.sleep(1)
        server.send(b"+PONG\r\n")
    assert results == [b"PONG"]
    assert conn.usable
    server.close()
    conn.close_nowait()


async def test_reply_and_deadline_in_the_same_scheduler_pass(
    mock_clock: trio.testing.MockClock,
) -> None:
    # The reply becomes readable in the same run-loop pass as the timer's deadline
    # passes: both tasks are rescheduled together, in either order. The command gets its
    # reply or a TimeoutError; either way the connection is sane afterwards: a reused
    # connection (after a reply) serves later commands and still times out on time.
    timer = ReplyTimer()
    outcomes = {"reply": 0, "timeout": 0}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer.run)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(40):
            conn, server = _paired_connection(timer)
            result: list[Any] = []

            async def command(conn: Connection = conn, result: list[Any] = result) -> None:
                try:
                    result.append(await conn.execute(("PING",), timeout=1.0))
                except TimeoutError as exc:
                    result.append(exc)

            nursery.start_soon(command)
            await trio.testing.wait_all_tasks_blocked()
            assert conn in timer._armed
            server.send(b"+PONG\r\n")
            mock_clock.jump(1.0)  # no checkpoint between the two
            await trio.testing.wait_all_tasks_blocked()
            assert len(result) == 1
            assert timer._armed == {}
            if result[0] == b"PONG":
                outcomes["reply"] += 1
                assert conn.usable
                server.recv(100)
                # Reused: a later reply arrives normally...
                nursery.start_soon(command)
                await trio.testing.wait_all_tasks_blocked()
                server.send(b"+PONG\r\n")
                await trio.testing.wait_all_tasks_blocked()
                assert result[1:] == [b"PONG"]
                # ... and a later missing reply still times out, at its deadline.
                nursery.start_soon(command)
                await trio.testing.wait_all_tasks_blocked()
                t0 = trio.current_time()
                mock_clock.jump(0.999)
                await trio.testing.wait_all_tasks_blocked()
                assert len(result) == 2
                mock_clock.jump(0.001)
                await trio.testing.wait_all_tasks_blocked()
                assert isinstance(result[2], TimeoutError)
                assert trio.current_time() == t0 + 1.0
            else:
                outcomes["timeout"] += 1
                assert isinstance(result[0], TimeoutError)
                assert conn.broken
            conn.close_nowait()
            server.close()
        nursery.cancel_scope.cancel()
    assert outcomes["reply"] > 0


async def test_nan_timeout_does_not_wait_forever(redis_url: str) -> None:
    # A NaN timeout must not arm a deadline that never fires (the cancel scope path
    # refused it with ValueError).
    async with trio_maint.open_redis(redis_url) as r:
        await r.ping()
        with trio.fail_after(3):
            with pytest.raises((ValueError, TimeoutError)):
                await r.execute_command("BLPOP", "never-nan", "0", timeout=math.nan)
        assert await r.ping() is True


async def test_hundreds_of_connections_with_mixed_deadlines(
    autojump_clock: trio.abc.Clock,
) -> None:
    # 300 connections, each with its own timeout; about half get their reply before the
    # deadline, the rest time out exactly at it (virtual time).
    rng = random.Random(7)
    timer = ReplyTimer()
    checks: list[tuple[Any, float, float | None, float]] = []

    async def one(i: int) -> None:
        conn, server = _paired_connection(timer)
        timeout = rng.choice([0.5, 1.0, 2.0, 3.0]) + rng.randrange(100) / 100
        reply_after = rng.random() * 2 * timeout if rng.random() < 0.5 else None
        if reply_after is not None and abs(reply_after - timeout) < 0.02:
            reply_after = None

        async def serve() -> None:
            if reply_after is not None:
                await trio.sleep(reply_after)
                server.send(b":%d\r\n" % i)

        start = trio.current_time()
        async with trio.open_nursery() as inner:
            inner.start_soon(serve)
            try:
                got: Any = await conn.execute(("GET", str(i)), timeout=timeout)
            except TimeoutError as exc:
                got = exc
            took = trio.current_time() - start
        checks.append((got, timeout, reply_after, took))
        conn.close_nowait()
        server.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer.run)
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as workers:
            for i in range(300):
                workers.start_soon(one, i)
        assert timer._armed == {}
        nursery.cancel_scope.cancel()
    assert len(checks) == 300
    for got, timeout, reply_after, took in checks:
        if reply_after is not None and reply_after < timeout:
            assert isinstance(got, int)
        else:
            assert isinstance(got, TimeoutError)
            assert took == pytest.approx(timeout)


@pytest.fixture
async def debug_sim() -> Any:
    from trio_maint.testing import MaintenanceSimulator

    async with MaintenanceSimulator(server_args=("--enable-debug-command", "yes")) as sim:
        yield sim


@pytest.mark.parametrize("shape", ["command", "pipeline"])
async def test_migrating_mid_wait_moves_the_armed_deadline_later(
    debug_sim: Any, shape: str
) -> None:
    # MIGRATING arrives while a reply is awaited: the wait re-arms with the relaxed
    # timeout, and the timer must not fire at the earlier (configured) deadline.
    from trio_maint import MaintConfig

    url = debug_sim.url
    config = MaintConfig(relaxed_timeout=3.0)
    with trio.fail_after(10):
        async with trio_maint.open_redis(
            url, pool_size=2, socket_timeout=0.3, maintenance=config
        ) as r:
            await r.ping()
            timer = r.pool.reply_timer
            assert timer is not None and timer.running
            result: list[Any] = []

            async def slow() -> None:
                if shape == "command":
                    result.append(await r.execute_command("DEBUG", "SLEEP", "0.8"))
                else:
                    async with r.pipeline(transaction=False) as pipe:
                        pipe.execute_command("DEBUG", "SLEEP", "0.8")
                        pipe.ping()
                        result.append(await pipe.execute())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow)
                await trio.sleep(0.1)
                await debug_sim.inject_migrating()
            assert len(result) == 1
            assert timer._armed == {}
            assert r.pool.stats().removed == 0
            # After MIGRATED the configured timeout applies again, on a reused connection.
            await debug_sim.inject_migrated()
            await r.ping()
            await r.ping()
            with pytest.raises(TimeoutError):
                await r.execute_command("DEBUG", "SLEEP", "0.8")


async def test_handed_over_connection_times_out_on_its_new_socket() -> None:
    # MOVING hands the pool's connection over to a new endpoint (adopt_stream_of): the
    # timer then wakes the new socket, not the old one, and a later wait neither hangs
    # nor fails early.
    from trio_maint import MaintConfig
    from trio_maint.testing import MaintenanceSimulator

    args = ("--enable-debug-command", "yes")
    async with (
        MaintenanceSimulator(server_args=args) as sim_a,
        MaintenanceSimulator(server_args=args) as sim_b,
    ):
        config = MaintConfig(relaxed_timeout=3.0, post_handoff_relaxed_duration=0.5)
        with trio.fail_after(10):
            async with trio_maint.open_redis(
                sim_a.url, pool_size=1, socket_timeout=0.4, maintenance=config
            ) as r:
                await r.ping()
                (conn,) = r.pool.connections
                old_port = conn.port
                # The MOVING reaches the connection while a command holds it, so that it
                # is read there: sent to the idle connection, it would be read by the next
                # checkout's idle check, which then finds the only connection taken by
                # the handoff and dials another; the handed-over one would be closed on
                # its return to a full pool (as documented).
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(r.execute_command, "DEBUG", "SLEEP", "0.2")
                    while not conn.in_use:
                        await trio.sleep(0.001)
                    await sim_a.inject_moving(time=1, target=sim_b)
                for _ in range(200):  # no command while the handoff runs, for the same reason
                    if conn.port != old_port:
                        break
                    await trio.sleep(0.01)
                assert conn.port == sim_b.port
                assert r.pool.connections == [conn]
                await trio.sleep(0.7)  # past the post-handoff relaxation
                start = trio.current_time()
                with pytest.raises(TimeoutError):
                    await r.execute_command("DEBUG", "SLEEP", "1.5")
                took = trio.current_time() - start
                assert 0.4 <= took < 1.4
                assert r.pool.reply_timer is not None
                assert r.pool.reply_timer._armed == {}
                assert await r.ping() is True


async def test_command_from_another_task_while_the_client_closes(redis_url: str) -> None:
    # A task outside the client's block waits for a reply when the block exits: it gets
    # ConnectionClosedError at once (pool.close), not a hang; the timer task is gone.
    errors: list[BaseException] = []
    async with trio.open_nursery() as outer:
        async with trio_maint.open_redis(redis_url, socket_timeout=30.0) as r:
            await r.ping()
            timer = r.pool.reply_timer
            assert timer is not None

            async def waiting() -> None:
                try:
                    await r.execute_command("BLPOP", "never-closing", "0", timeout=20)
                except BaseException as exc:
                    errors.append(exc)

            outer.start_soon(waiting)
            await trio.sleep(0.1)
            assert len(timer._armed) == 1
        with trio.fail_after(2):
            while not errors:
                await trio.sleep(0.01)
        assert not timer.running and timer._armed == {}
        assert isinstance(errors[0], trio_maint.ConnectionClosedError)
        with pytest.raises(trio_maint.ConnectionClosedError):
            await r.ping()
