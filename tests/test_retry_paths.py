"""The one retry policy (trio_maint._sansio.retry) wired into every path: the connection's
``written`` flag, standalone commands, pipelines and transactions, and the cluster client's
commands, pipelines and transactions. Fake servers (tests/_fakeserver.py) count what they
execute, so each test checks both the reply and what ran where."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import ClientOptions
from trio_maint.lowlevel import Connection
from trio_maint.testing import moving_frame

from ._fakeserver import (
    Action,
    ClusterTopology,
    Err,
    FakeConnection,
    FakeServer,
    Status,
    open_fake_server,
    resp,
    serve_cluster_commands,
)

pytestmark = pytest.mark.trio

TIMEOUT = 10.0
READONLY = "READONLY You can't write against a read only replica."


def incrs(server: FakeServer) -> int:
    """How many ``INCR``/``INCRBY`` ``server`` received."""
    return server.count("INCR") + server.count("INCRBY")


def kill_writes(conn: Connection) -> None:
    """Make ``conn``'s next write fail at once, with nothing handed to the kernel (as a
    pooled connection whose socket died while idle)."""
    stream = conn._stream
    assert isinstance(stream, trio.SocketStream)
    stream.socket.shutdown(socket.SHUT_WR)


def run_then_close(server: FakeServer) -> dict[bytes, int]:
    """``server`` runs ``INCR``/``INCRBY`` and closes the connection without replying: the
    reply is lost after the command ran. Returns the executions per key."""
    executed: dict[bytes, int] = {}

    async def incr(conn: FakeConnection, args: list[bytes]) -> Action:
        executed[args[1]] = executed.get(args[1], 0) + 1
        server.data[args[1]] = b"%d" % (int(server.data.get(args[1], b"0")) + 1)
        return Action.CLOSE

    server.on("INCR", incr)
    server.on("INCRBY", incr)
    return executed


# -------------------------------------------------------------------- the written flag


async def test_connection_says_when_nothing_was_written() -> None:
    async with open_fake_server() as server:
        executed = run_then_close(server)
        options = ClientOptions.from_url(server.url)
        conn = await Connection.open(options)
        kill_writes(conn)
        with pytest.raises(trio_maint.ConnectionError) as info:
            await conn.execute(("SET", "k", "v"))
        assert info.value.written is False  # the first write failed at once
        assert conn.broken
        with pytest.raises(trio_maint.ConnectionError) as info:
            await conn.execute_many([("GET", "k")])
        assert info.value.written is False  # broken: refused before writing
        conn.close_nowait()
        with pytest.raises(trio_maint.ConnectionClosedError) as info:
            await conn.execute(("GET", "k"))
        assert info.value.written is False
        assert server.count("SET") == server.count("GET") == 0

        conn = await Connection.open(options)
        with pytest.raises(trio_maint.ConnectionError) as info:
            await conn.execute(("INCR", "n"))
        assert info.value.written is True  # sent, then the reply was lost
        assert executed == {b"n": 1}
        conn.close_nowait()


# ------------------------------------------------------------------------ standalone


async def test_standalone_resends_what_was_not_written() -> None:
    async with open_fake_server() as server, trio_maint.open_redis(server.url) as r:
        with trio.fail_after(TIMEOUT):
            await r.set("n", 0)
            (idle,) = r.pool.idle_connections
            kill_writes(idle)
            assert await r.incr("n") == 1
            (idle,) = r.pool.idle_connections
            kill_writes(idle)
            async with r.pipeline(transaction=False) as pipe:
                pipe.incr("n").incr("n")
                assert await pipe.execute() == [2, 3]
            assert incrs(server) == 3


async def test_standalone_unsent_resends_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    execute = Connection.execute

    async def dead(self: Connection, args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        if args[0] != "GET":  # the handshake's commands
            return await execute(self, args, **kwargs)
        calls += 1
        await trio.lowlevel.checkpoint()
        self.broken = True
        error = trio_maint.ConnectionError("dead before the write")
        error.written = False
        raise error

    async with open_fake_server() as server, trio_maint.open_redis(server.url) as r:
        monkeypatch.setattr(Connection, "execute", dead)
        with pytest.raises(trio_maint.ConnectionError) as info:
            await r.get("k")
    assert calls == 3  # the attempt and two resends
    assert "max_unsent_retries=2" in " ".join(info.value.__notes__)


async def test_standalone_lost_reply_is_not_resent() -> None:
    async with open_fake_server() as server, trio_maint.open_redis(server.url) as r:
        executed = run_then_close(server)
        with trio.fail_after(TIMEOUT), pytest.raises(trio_maint.ConnectionError):
            await r.incr("n")
        async with r.pipeline(transaction=False) as pipe:
            pipe.incr("a").incr("b")
            with trio.fail_after(TIMEOUT), pytest.raises(trio_maint.ConnectionError):
                await pipe.execute()
    assert executed == {b"n": 1, b"a": 1, b"b": 1}


def transactions(server: FakeServer, refuse: set[bytes], to: FakeServer | None = None) -> None:
    """MULTI/EXEC/WATCH on ``server``; ``SET`` of a key in ``refuse`` is answered (once per
    key) by a MOVING to ``to`` and READONLY, in or out of a transaction."""
    refused: set[bytes] = set()

    async def multi(conn: FakeConnection, args: list[bytes]) -> bytes:
        conn.state["queue"] = []
        return resp(Status("OK"))

    async def ok(conn: FakeConnection, args: list[bytes]) -> bytes:
        return resp(Status("OK"))

    async def set_(conn: FakeConnection, args: list[bytes]) -> bytes:
        key = args[1]
        if key in refuse and key not in refused and to is not None:
            refused.add(key)
            await conn.send(moving_frame(len(refused), 15, to.name))
            if "queue" in conn.state:
                conn.state["abort"] = True
            return resp(Err(READONLY))
        if "queue" in conn.state:
            conn.state["queue"].append(args)
            return resp(Status("QUEUED"))
        server.data[key] = args[2]
        return resp(Status("OK"))

    async def exec_(conn: FakeConnection, args: list[bytes]) -> bytes:
        queue = conn.state.pop("queue")
        if conn.state.pop("abort", False):
            return resp(Err("EXECABORT Transaction discarded because of previous errors."))
        for queued in queue:
            server.data[queued[1]] = queued[2]
        return resp([Status("OK")] * len(queue))

    server.on("MULTI", multi)
    server.on("EXEC", exec_)
    server.on("SET", set_)
    server.on("WATCH", ok)
    server.on("UNWATCH", ok)


def keys_set(server: FakeServer) -> list[bytes]:
    """The keys of every SET ``server`` received, in order (queued ones included)."""
    return [args[1] for args in server.seen("SET")]


async def test_standalone_pipeline_resends_only_readonly_refused_after_moving() -> None:
    async with open_fake_server() as one, open_fake_server() as two:
        transactions(one, {b"b", b"d"}, to=two)
        transactions(two, set())
        async with trio_maint.open_redis(one.url) as r:
            async with r.pipeline(transaction=False) as pipe:
                pipe.set("a", 1).set("b", 2).set("c", 3).set("d", 4)
                with trio.fail_after(TIMEOUT):
                    assert await pipe.execute() == [True] * 4
    assert keys_set(one) == [b"a", b"b", b"c", b"d"]
    assert keys_set(two) == [b"b", b"d"]  # only the refused ones, in order, in one write
    assert two.data == {b"b": b"2", b"d": b"4"}


async def test_standalone_transaction_refused_is_resent_whole() -> None:
    async with open_fake_server() as one, open_fake_server() as two:
        transactions(one, {b"b"}, to=two)
        transactions(two, set())
        async with trio_maint.open_redis(one.url) as r:
            async with r.pipeline() as pipe:
                pipe.set("a", 1).set("b", 2)
                with trio.fail_after(TIMEOUT):
                    assert await pipe.execute() == [True, True]
    assert one.data == {}  # EXECABORT: nothing ran there
    assert two.data == {b"a": b"1", b"b": b"2"}
    assert two.count("MULTI") == two.count("EXEC") == 1


async def test_standalone_watched_transaction_is_never_resent() -> None:
    async with open_fake_server() as one, open_fake_server() as two:
        transactions(one, {b"b"}, to=two)
        transactions(two, set())
        async with trio_maint.open_redis(one.url) as r:
            async with r.pipeline() as pipe:
                await pipe.watch("a")
                pipe.multi()
                pipe.set("a", 1).set("b", 2)
                with trio.fail_after(TIMEOUT), pytest.raises(trio_maint.ReadOnlyError):
                    await pipe.execute()
    assert one.data == two.data == {}
    assert two.count("EXEC") == 0


async def test_standalone_genuine_readonly_is_raised() -> None:
    """A read-only server without MOVING (maintenance disabled): raised at once."""
    async with open_fake_server() as server:

        async def readonly(conn: FakeConnection, args: list[bytes]) -> bytes:
            return resp(Err(READONLY))

        server.on("SET", readonly)
        async with trio_maint.open_redis(
            server.url, maintenance=trio_maint.MaintConfig(mode="disabled")
        ) as r:
            with trio.fail_after(TIMEOUT), pytest.raises(trio_maint.ReadOnlyError) as info:
                await r.set("k", "v")
    assert server.count("SET") == 1
    assert "not moving" in " ".join(info.value.__notes__)


# --------------------------------------------------------------------------- cluster


@asynccontextmanager
async def fake_cluster(count: int) -> AsyncIterator[tuple[ClusterTopology, list[FakeServer]]]:
    """``count`` fake cluster nodes sharing one topology: slots split evenly, in order."""
    topology = ClusterTopology()
    async with AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(open_fake_server()) for _ in range(count)]
        for node in nodes:
            serve_cluster_commands(node, topology)
        step = 16384 // count
        for i, node in enumerate(nodes):
            topology.assign(node, i * step, 16383 if i == count - 1 else (i + 1) * step - 1)
        yield topology, nodes


def key_on(half: int, prefix: str = "k") -> str:
    """A key whose slot is in the first (``half=0``) or second half of the slots."""
    for i in range(1000):
        key = f"{prefix}{i}"
        if (trio_maint.key_slot(key) >= 8192) == bool(half):
            return key
    raise AssertionError("unreachable")  # pragma: no cover


async def test_cluster_resends_what_was_not_written() -> None:
    async with fake_cluster(1) as (_topology, (node,)):
        async with trio_maint.open_redis_cluster(node.url) as rc:
            with trio.fail_after(TIMEOUT):
                await rc.set("n", 0)
                for conn in rc.nodes[node.name].pool.idle_connections:
                    kill_writes(conn)
                assert await rc.incr("n") == 1
                assert rc.redirections["connection"] == 1
                for conn in rc.nodes[node.name].pool.idle_connections:
                    kill_writes(conn)
                async with rc.pipeline() as pipe:
                    pipe.incr("n").incr("n")
                    assert await pipe.execute() == [2, 3]
                for conn in rc.nodes[node.name].pool.idle_connections:
                    kill_writes(conn)
                async with rc.pipeline(transaction=True) as pipe:
                    pipe.get("n")
                    # The fake has no MULTI: the transaction reaches it once, whole.
                    with pytest.raises(trio_maint.ResponseError, match="unknown command"):
                        await pipe.execute()
        assert incrs(node) == 3
        assert node.count("MULTI") == 1


async def test_cluster_pipeline_lost_reply_is_its_reply() -> None:
    """One node loses its replies after running the commands, the other answers: the
    lost ones are not resent; their error is their reply."""
    async with fake_cluster(2) as (_topology, (x, y)):
        executed = run_then_close(x)
        a, b = key_on(0), key_on(1)
        async with trio_maint.open_redis_cluster(x.url) as rc:
            with trio.fail_after(TIMEOUT):
                async with rc.pipeline() as pipe:
                    pipe.incr(a).incr(b).incr(b)
                    replies = await pipe.execute(raise_on_error=False)
                assert isinstance(replies[0], trio_maint.ConnectionError)
                assert replies[1:] == [1, 2]
                async with rc.pipeline() as pipe:
                    pipe.incr(b).incr(a)
                    with pytest.raises(trio_maint.ConnectionError):
                        await pipe.execute()
        assert executed == {a.encode(): 2}
        assert incrs(y) == 3


async def test_cluster_pipeline_follows_ask_and_tryagain_in_order() -> None:
    async with fake_cluster(2) as (_topology, (x, y)):
        a = key_on(0)
        slot = trio_maint.key_slot(a)
        tries = 0

        async def ask(conn: FakeConnection, args: list[bytes]) -> bytes:
            return resp(Err(f"ASK {slot} {y.host}:{y.port}"))

        async def tryagain(conn: FakeConnection, args: list[bytes]) -> bytes:
            nonlocal tries
            tries += 1
            if tries <= 2:
                return resp(Err("TRYAGAIN Multiple keys request during rehashing of slot"))
            return resp([x.data.get(key) for key in args[1:]])

        async def asking(conn: FakeConnection, args: list[bytes]) -> bytes:
            return resp(Status("OK"))

        y.on("ASKING", asking)
        async with trio_maint.open_redis_cluster(x.url) as rc:
            with trio.fail_after(TIMEOUT):
                x.on("SET", ask)
                x.on("MGET", tryagain)
                async with rc.pipeline() as pipe:
                    for i in range(5):
                        pipe.set(a, i)
                    pipe.mget(a)
                    assert await pipe.execute() == [True] * 5 + [[None]]
        assert rc.redirections["ask"] == 5
        assert rc.redirections["tryagain"] == 2
        # Y got the five SETs in one write, each after its ASKING, in the order queued.
        names = [args[0].upper() for _cid, args in y.log if args[0].upper() != b"HELLO"]
        names = [n for n in names if n in (b"ASKING", b"SET")]
        assert names == [b"ASKING", b"SET"] * 5
        assert [int(args[2]) for args in y.seen("SET")] == list(range(5))
        assert y.data[a.encode()] == b"4"


async def test_cluster_readonly_of_a_failed_over_master_is_retried() -> None:
    async with fake_cluster(1) as (_topology, (node,)):
        refused = 0

        async def set_(conn: FakeConnection, args: list[bytes]) -> bytes:
            nonlocal refused
            if refused < 2:
                refused += 1
                return resp(Err(READONLY))
            node.data[args[1]] = args[2]
            return resp(Status("OK"))

        node.on("SET", set_)
        async with trio_maint.open_redis_cluster(node.url) as rc:
            with trio.fail_after(TIMEOUT):
                assert await rc.set("k", "v") is True
                assert rc.redirections["readonly"] == 2
                refused = -1000  # a master that stays read-only: raised after retry_timeout
                rc.retry_timeout = 0.2
                with pytest.raises(trio_maint.ReadOnlyError) as info:
                    await rc.set("k", "w")
        assert "time budget spent" in " ".join(info.value.__notes__)
