"""Blocking commands (issue 14, item 6): the reply wait is the command's own timeout plus
the socket timeout; ``0`` waits forever; relaxed timeouts never shorten it.

The sans-IO decision (``_sansio/blocking.py``) is tested directly; the client, pipelines
and the cluster client are tested against scripted fake servers under Trio's MockClock
(times exact), and against real redis-servers (no timed assertions there: only that
the server's own timeout reply arrives instead of a ``TimeoutError``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import MaintConfig
from trio_maint._sansio.blocking import (
    BLOCKING_COMMANDS,
    command_timeout,
    pipeline_reply_timeout,
    reply_timeout,
    to_seconds,
)
from trio_maint.testing import LocalCluster, MaintenanceSimulator, migrating_frame

from ._fakeserver import (
    Action,
    ClusterTopology,
    FakeConnection,
    open_fake_server,
    resp,
    serve_cluster_commands,
)

# ------------------------------------------------------------------ the decision


def test_reply_timeout_adds_the_socket_timeout() -> None:
    assert reply_timeout(2, 1.0) == 3.0
    assert reply_timeout(0.5, 0.25) == 0.75
    assert reply_timeout(1500, 1.0, "ms") == 2.5
    assert to_seconds(250, "ms") == 0.25


def test_reply_timeout_zero_or_no_socket_timeout_waits_forever() -> None:
    assert reply_timeout(0, 1.0) is None
    assert reply_timeout(0, 1.0, "ms") is None
    assert reply_timeout(2, None) is None  # the client never bounds replies: neither here


def test_reply_timeout_of_a_command_that_does_not_block() -> None:
    assert reply_timeout(None, 1.0) == 1.0
    assert reply_timeout(None, None) is None
    assert reply_timeout(-1, 1.0) == 1.0  # refused by the server at once


def test_reply_timeout_rejects_an_unknown_unit() -> None:
    with pytest.raises(ValueError, match="unit"):
        reply_timeout(1, 1.0, "us")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("BLPOP", "a", "b", 2), 2.0),
        (("blpop", "a", "1.5"), 1.5),
        ((b"BRPOP", b"a", b"0"), 0.0),
        (("BLMOVE", "a", "b", "LEFT", "RIGHT", 3), 3.0),
        (("BRPOPLPUSH", "a", "b", 4), 4.0),
        (("BZPOPMIN", "z", 0.5), 0.5),
        (("BzPopMax", "z", 5), 5.0),
        (("BLMPOP", 2, 1, "a", "LEFT"), 2.0),
        (("BZMPOP", 0, 1, "z", "MIN", "COUNT", 3), 0.0),
        (("XREAD", "COUNT", 5, "BLOCK", 1500, "STREAMS", "s", "$"), 1.5),
        (("XREAD", "STREAMS", "block", "0"), None),  # a stream called "block"
        (("XREADGROUP", "GROUP", "block", "streams", "BLOCK", 0, "STREAMS", "s", ">"), 0.0),
        (("XREADGROUP", "GROUP", "g", "c", "NOACK", "STREAMS", "s", ">"), None),
        (("WAIT", 1, 2000), 2.0),
        (("GET", "k"), None),
        ((b"SET", b"k", b"v"), None),
        (("BLPOP", "a", "soon"), None),  # not a number: refused at once
        (("BLPOP",), None),
    ],
)
def test_command_timeout_reads_the_arguments(
    args: tuple[str | bytes | int | float, ...], expected: float | None
) -> None:
    assert command_timeout(args) == expected


def test_every_blocking_command_is_known() -> None:
    assert {
        "BLPOP",
        "BRPOP",
        "BLMOVE",
        "BRPOPLPUSH",
        "BZPOPMIN",
        "BZPOPMAX",
        "BLMPOP",
        "BZMPOP",
        "XREAD",
        "XREADGROUP",
        "WAIT",
    } == BLOCKING_COMMANDS


def test_a_pipeline_waits_for_the_sum_of_its_blocking_commands() -> None:
    commands = [("BLPOP", "a", 2), ("GET", "k"), ("XREAD", "BLOCK", 500, "STREAMS", "s", "$")]
    assert pipeline_reply_timeout(commands, 1.0) == 3.5
    assert pipeline_reply_timeout([("GET", "k")], 1.0) == 1.0
    assert pipeline_reply_timeout([("BLPOP", "a", 2), ("BLPOP", "b", 0)], 1.0) is None
    assert pipeline_reply_timeout([("ASKING",), ("BLPOP", "a", 2)], 1.0) == 3.0


def test_nothing_blocks_inside_multi() -> None:
    commands = [("MULTI",), ("BLPOP", "a", 0), ("BLPOP", "a", 5), ("EXEC",)]
    assert pipeline_reply_timeout(commands, 1.0) == 1.0
    after = [*commands, ("BLPOP", "a", 2)]
    assert pipeline_reply_timeout(after, 1.0) == 3.0


# ---------------------------------------------------- fake servers, MockClock

Handler = Callable[[FakeConnection, list[bytes]], Awaitable["bytes | Action"]]


def blocking_handler(
    *, answer: bool = True, unit: float = 1.0, at: int = -1, wake: trio.Event | None = None
) -> Handler:
    """A blocking command that waits its timeout (``args[at] * unit`` seconds) and then
    answers nil as Redis does (``answer=False``: never answers); timeout 0 waits until
    ``wake`` is set, then answers ``[key, b"pushed"]``."""

    async def handler(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
        seconds = float(args[at]) * unit
        if seconds == 0:
            assert wake is not None
            await wake.wait()
            return resp([args[1], b"pushed"])
        if not answer:
            await trio.sleep_forever()
        await trio.sleep(seconds)
        return resp(None)

    return handler


async def timed(awaitable: Awaitable[object]) -> tuple[float, object]:
    """(seconds taken, the result or the exception raised)."""
    start = trio.current_time()
    try:
        with trio.fail_after(1000):
            result = await awaitable
    except Exception as exc:
        return trio.current_time() - start, exc
    return trio.current_time() - start, result


@pytest.mark.trio
async def test_blpop_longer_than_the_socket_timeout_gets_the_servers_nil(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_fake_server() as server:
        server.on("BLPOP", blocking_handler())
        async with trio_maint.open_redis(server.url, socket_timeout=1.0) as r:
            took, got = await timed(r.blpop("k", timeout=2))
            assert got is None and took == pytest.approx(2.0)
            took, got = await timed(r.execute_command("BLPOP", "k", 2))
            assert got is None and took == pytest.approx(2.0)


@pytest.mark.trio
async def test_a_silent_server_times_out_after_timeout_plus_socket_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_fake_server() as server:
        server.on("BLPOP", blocking_handler(answer=False))
        async with trio_maint.open_redis(server.url, socket_timeout=1.0) as r:
            took, got = await timed(r.blpop("k", timeout=2))
            assert isinstance(got, trio_maint.TimeoutError)
            assert took == pytest.approx(3.0)
            took, got = await timed(r.execute_command("BLPOP", "k", "2.5"))
            assert isinstance(got, trio_maint.TimeoutError)
            assert took == pytest.approx(3.5)


@pytest.mark.trio
async def test_timeout_zero_waits_forever(autojump_clock: trio.abc.Clock) -> None:
    async with open_fake_server() as server:
        wake = trio.Event()
        server.on("BLPOP", blocking_handler(wake=wake))
        async with trio_maint.open_redis(server.url, socket_timeout=0.5) as r:
            async with trio.open_nursery() as nursery:

                async def push_later() -> None:
                    await trio.sleep(500)
                    wake.set()

                nursery.start_soon(push_later)
                took, got = await timed(r.blpop("k", timeout=0))
            assert got == [b"k", b"pushed"] and took == pytest.approx(500.0)


@pytest.mark.trio
async def test_without_a_socket_timeout_the_reply_is_not_raced(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Before: socket_timeout=None bounded BLPOP 2 at exactly 2 s, racing the reply.
    async with open_fake_server() as server:
        server.on("BLPOP", blocking_handler())
        async with trio_maint.open_redis(server.url, socket_timeout=None) as r:
            took, got = await timed(r.blpop("k", timeout=2))
            assert got is None and took == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("command", "unit", "at", "expected"),
    [
        (("XREAD", "BLOCK", "1500", "STREAMS", "s", "$"), 0.001, 2, 2.5),
        (("XREADGROUP", "GROUP", "g", "c", "BLOCK", "2000", "STREAMS", "s", ">"), 0.001, 5, 3.0),
        (("WAIT", "1", "2500"), 0.001, 2, 3.5),
        (("BLMPOP", "3", "1", "a", "LEFT"), 1.0, 1, 4.0),
        (("BZMPOP", "1", "1", "z", "MIN"), 1.0, 1, 2.0),
        (("BZPOPMIN", "z", "2"), 1.0, -1, 3.0),
    ],
)
@pytest.mark.trio
async def test_milliseconds_and_other_timeout_positions(
    autojump_clock: trio.abc.Clock,
    command: tuple[str, ...],
    unit: float,
    at: int,
    expected: float,
) -> None:
    async with open_fake_server() as server:
        server.on(command[0], blocking_handler(answer=False, unit=unit, at=at))
        async with trio_maint.open_redis(server.url, socket_timeout=1.0) as r:
            took, got = await timed(r.execute_command(*command))
            assert isinstance(got, trio_maint.TimeoutError)
            assert took == pytest.approx(expected)


@pytest.mark.parametrize(("relaxed", "expected"), [(1.0, 3.0), (10.0, 10.0)])
@pytest.mark.trio
async def test_a_relaxed_window_never_shortens_the_wait(
    autojump_clock: trio.abc.Clock, relaxed: float, expected: float
) -> None:
    # MIGRATING 0.5 s into BLPOP 2 (socket timeout 1): a relaxed timeout below the wait
    # (1 s < 3 s) leaves it at 3 s; one above it (10 s) lengthens it.
    async def silent_after_migrating(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
        await trio.sleep(0.5)
        await conn.send(migrating_frame(1))
        await trio.sleep(10_000)  # never answers (the client gives up long before)
        return Action.NO_REPLY

    async with open_fake_server() as server:
        server.on("BLPOP", silent_after_migrating)
        config = MaintConfig(mode="enabled", relaxed_timeout=relaxed)
        async with trio_maint.open_redis(server.url, socket_timeout=1.0, maintenance=config) as r:
            took, got = await timed(r.blpop("k", timeout=2))
            assert isinstance(got, trio_maint.TimeoutError)
            assert took == pytest.approx(expected)


@pytest.mark.trio
async def test_a_relaxed_window_open_before_the_command(autojump_clock: trio.abc.Clock) -> None:
    async def migrating(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
        await conn.send(migrating_frame(1))
        return resp(args[1])

    async with open_fake_server() as server:
        server.on("BLPOP", blocking_handler())
        server.on("ECHO", migrating)
        config = MaintConfig(mode="enabled", relaxed_timeout=0.5)
        async with trio_maint.open_redis(server.url, socket_timeout=1.0, maintenance=config) as r:
            await r.execute_command("ECHO", "x")  # opens the window on this connection
            took, got = await timed(r.blpop("k", timeout=4))
            assert got is None and took == pytest.approx(4.0)


@pytest.mark.trio
async def test_a_pipeline_waits_for_each_blocking_command(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_fake_server() as server:
        server.on("BLPOP", blocking_handler())
        async with trio_maint.open_redis(server.url, socket_timeout=1.0) as r:
            pipe = r.pipeline(transaction=False)
            pipe.blpop("a", timeout=2)
            pipe.execute_command("BLPOP", "b", 3)
            pipe.get("k")
            took, got = await timed(pipe.execute())
            assert got == [None, None, None] and took == pytest.approx(5.0)
            # The next pipeline, without blocking commands, has the socket timeout again.
            server.on("GET", blocking_handler(answer=False, at=1))
            took, got = await timed(r.pipeline(transaction=False).get("7").execute())
            assert isinstance(got, trio_maint.TimeoutError) and took == pytest.approx(1.0)


@pytest.mark.trio
async def test_a_silent_pipeline_times_out_after_the_sum(autojump_clock: trio.abc.Clock) -> None:
    async with open_fake_server() as server:
        server.on("BLPOP", blocking_handler(answer=False))
        async with trio_maint.open_redis(server.url, socket_timeout=1.0) as r:
            pipe = r.pipeline(transaction=False).blpop("a", timeout=2).blpop("b", timeout=3)
            took, got = await timed(pipe.execute())
            assert isinstance(got, trio_maint.TimeoutError) and took == pytest.approx(6.0)


async def _fake_cluster_node_test(pipeline: bool) -> tuple[float, object]:
    topology = ClusterTopology()
    async with open_fake_server() as node:
        serve_cluster_commands(node, topology)
        topology.assign(node)
        node.on("BLPOP", blocking_handler(answer=False))
        async with trio_maint.open_redis_cluster(node.url, socket_timeout=1.0) as rc:
            if pipeline:
                pipe = rc.pipeline().blpop("a", timeout=2).execute_command("BLPOP", "a", 1.5)
                return await timed(pipe.execute())
            return await timed(rc.blpop("a", timeout=2))


@pytest.mark.trio
@pytest.mark.parametrize(("pipeline", "expected"), [(False, 3.0), (True, 4.5)])
async def test_the_cluster_client_waits_as_long(
    autojump_clock: trio.abc.Clock, pipeline: bool, expected: float
) -> None:
    # A silent node: the wait ends at the commands' timeouts plus the socket timeout.
    took, got = await _fake_cluster_node_test(pipeline)
    assert isinstance(got, trio_maint.TimeoutError)
    assert took == pytest.approx(expected)


# ---------------------------------------------------------------- real servers


@pytest.mark.trio
async def test_blpop_on_a_real_server(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, socket_timeout=1.0) as r:
        await r.delete("blk:list")
        with trio.fail_after(30):
            assert await r.blpop("blk:list", timeout=2) is None  # no TimeoutError


@pytest.mark.trio
async def test_timeout_zero_waits_for_another_clients_push(redis_url: str) -> None:
    async with (
        trio_maint.open_redis(redis_url, socket_timeout=0.5) as r,
        trio_maint.open_redis(redis_url) as other,
    ):
        await r.delete("blk:wait")
        got: list[object] = []

        async def waiter() -> None:
            got.append(await r.blpop("blk:wait", timeout=0))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                # Well past the socket timeout, then push (once the BLPOP is blocked).
                while True:
                    await trio.sleep(0.5)
                    clients = await other.execute_command("INFO", "clients")
                    if b"blocked_clients:1" in clients:
                        break
                await trio.sleep(1.0)
                await other.rpush("blk:wait", "v")
        assert got == [[b"blk:wait", b"v"]]


@pytest.mark.trio
async def test_every_blocking_command_on_a_real_server(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, socket_timeout=0.3) as r:
        await r.execute_command("DEL", "blk:l", "blk:l2", "blk:z", "blk:s")
        await r.execute_command("XGROUP", "CREATE", "blk:s", "g", "$", "MKSTREAM")
        commands: list[tuple[str | int | float, ...]] = [
            ("BLPOP", "blk:l", 0.6),
            ("BRPOP", "blk:l", 0.6),
            ("BLMOVE", "blk:l", "blk:l2", "LEFT", "RIGHT", 0.6),
            ("BRPOPLPUSH", "blk:l", "blk:l2", 0.6),
            ("BZPOPMIN", "blk:z", 0.6),
            ("BZPOPMAX", "blk:z", 0.6),
            ("BLMPOP", 0.6, 1, "blk:l", "LEFT"),
            ("BZMPOP", 0.6, 1, "blk:z", "MIN"),
            ("XREAD", "BLOCK", 600, "STREAMS", "blk:s", "$"),
            ("XREADGROUP", "GROUP", "g", "c", "BLOCK", 600, "STREAMS", "blk:s", ">"),
        ]
        with trio.fail_after(60):
            for command in commands:
                assert await r.execute_command(*command) is None, command
            assert await r.execute_command("WAIT", 1, 600) == 0  # no replica: 0 after 0.6 s
            assert await r.blpop(["blk:l", "blk:l2"], timeout=0.6) is None


@pytest.mark.trio
async def test_a_pipeline_with_blocking_commands_on_a_real_server(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, socket_timeout=0.3) as r:
        await r.delete("blk:p")
        with trio.fail_after(30):
            pipe = r.pipeline(transaction=False)
            pipe.blpop("blk:p", timeout=0.5).execute_command("BRPOP", "blk:p", 0.5)
            assert await pipe.execute() == [None, None]
            # In a transaction nothing blocks: nil at once.
            assert await r.pipeline().blpop("blk:p", timeout=0).execute() == [None]


@pytest.mark.trio
async def test_a_relaxed_window_on_a_real_server_does_not_shorten_blpop() -> None:
    async with MaintenanceSimulator() as sim:
        config = MaintConfig(mode="enabled", relaxed_timeout=0.2)
        async with trio_maint.open_redis(sim.url, socket_timeout=0.3, maintenance=config) as r:
            await r.delete("blk:relaxed")
            got: list[object] = ["not yet"]

            async def waiter() -> None:
                got[0] = await r.blpop("blk:relaxed", timeout=1.5)

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(waiter)
                    await trio.sleep(0.2)
                    await sim.inject_migrating()
            assert got == [None]


@pytest.mark.trio
async def test_blocking_commands_on_the_cluster(redis_cluster: LocalCluster) -> None:
    async with trio_maint.open_redis_cluster(redis_cluster.url, socket_timeout=0.3) as rc:
        with trio.fail_after(30):
            await rc.execute_command("DEL", "blk:{c}")
            assert await rc.blpop("blk:{c}", timeout=0.6) is None
            assert await rc.execute_command("BZPOPMIN", "blk:{c}z", 0.6) is None
            assert (
                await rc.execute_command("XREAD", "BLOCK", 600, "STREAMS", "blk:{c}s", "$") is None
            )
            pipe = rc.pipeline()
            pipe.blpop("blk:{c}", timeout=0.5).blpop("blk:{c}2", timeout=0.5)
            assert await pipe.execute() == [None, None]
