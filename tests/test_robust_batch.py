"""Attacks on the pipeline's batch reply path (``RespParser.take_replies``,
``Connection._take_replies``, ``push_credit``) and on the checkpoints of commands that
take their connection with ``ConnectionPool.acquire_for_reply``.

A fake server on a socket pair plays scripted bytes (chunks, each written once the client
is blocked); the rest runs against the suite's redis-server or a MaintenanceSimulator.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import ClientOptions, DataError, ProtocolError
from trio_maint._sansio.resp import PushNotification, RespParser
from trio_maint.lowlevel import Connection
from trio_maint.testing import MaintenanceSimulator, RedisServer

pytestmark = pytest.mark.trio

PUSH = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
#: An invalidation of a key that is not UTF-8 (client tracking of a binary key).
BAD_PUSH = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\n\xff\xfe\r\n"


class Fake:
    """A Connection attached to one end of a socket pair; the test writes the other."""

    def __init__(self, decode: bool = False) -> None:
        self.seen: list[Any] = []
        options = ClientOptions(host="fake", port=1, socket_timeout=5.0, decode_responses=decode)
        self.conn = Connection(options, push_handler=lambda c, f: self.seen.append(list(f)))
        self.client, self.server = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.setblocking(False)
        self.conn._attach(trio.SocketStream(trio.socket.from_stdlib_socket(self.client)))

    def close(self) -> None:
        self.conn.close_nowait()
        self.client.close()
        self.server.close()

    async def run(self, commands: int, chunks: list[bytes], *, single: bool = False) -> Any:
        """A pipeline of ``commands`` PINGs (or one command), ``chunks`` written one by
        one, each once the client is blocked; returns the replies or the exception."""
        result: list[Any] = []

        async def client() -> None:
            try:
                if single:
                    result.append(await self.conn.execute(("PING",)))
                else:
                    result.append(await self.conn.execute_many([("PING",)] * commands))
            except trio_maint.RedisError as exc:
                result.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(client)
            for chunk in chunks:
                await trio.testing.wait_all_tasks_blocked()
                self.server.send(chunk)
        return result[0]


@pytest.fixture
def fake() -> Iterator[Fake]:
    f = Fake()
    yield f
    f.close()


@pytest.fixture
def fake_decode() -> Iterator[Fake]:
    f = Fake(decode=True)
    yield f
    f.close()


def splits(data: bytes, step: int = 1) -> Iterator[list[bytes]]:
    """``data`` whole, then cut in two at every ``step``-th byte."""
    yield [data]
    for cut in range(1, len(data), step):
        yield [data[:cut], data[cut:]]


# ------------------------------------------------------------- undecodable frames


async def test_undecodable_push_in_a_pipeline_never_takes_a_reply_slot(fake_decode: Fake) -> None:
    # Regression: hiredis skipped an undecodable frame whole and could not say what it
    # was; taken as a DataError reply, an invalidation push shifted every later reply by
    # one (and then, issue 13, cost the connection a ProtocolError). It is now handed on
    # with the key as bytes, and every reply is the command's own.
    got = await fake_decode.run(3, [b"+a\r\n" + BAD_PUSH + b"+b\r\n+c\r\n"])
    assert got == ["a", "b", "c"]
    assert fake_decode.seen == [["invalidate", [b"\xff\xfe"]]]
    assert not fake_decode.conn.broken


async def test_undecodable_push_before_a_single_reply(fake_decode: Fake) -> None:
    got = await fake_decode.run(1, [BAD_PUSH, b"+b\r\n"], single=True)
    assert got == "b"
    assert fake_decode.seen == [["invalidate", [b"\xff\xfe"]]]
    assert not fake_decode.conn.broken


async def test_undecodable_reply_is_a_dataerror_in_place_when_no_push_is_owed(
    fake_decode: Fake,
) -> None:
    bad = b"$2\r\n\xff\xfe\r\n"
    for chunks in splits(b"+a\r\n" + bad + b"+c\r\n" + bad):
        got = await fake_decode.run(4, chunks)
        assert got[0] == "a" and got[2] == "c"
        assert isinstance(got[1], DataError) and isinstance(got[3], DataError)
        assert not fake_decode.conn.broken
    # A push frame handed on pays its credit back: DataError values in place again.
    got = await fake_decode.run(2, [PUSH + bad + b"+c\r\n"])
    assert isinstance(got[0], DataError) and got[1] == "c"
    assert fake_decode.seen == [["invalidate", ["k"]]]
    assert fake_decode.conn._parser.push_credit == 0
    got = await fake_decode.run(1, [bad], single=True)
    assert isinstance(got, DataError) and not fake_decode.conn.broken


async def test_tracking_a_binary_key_with_decode_responses_never_misaligns(
    redis_url: str,
) -> None:
    # The same against redis-server: this connection tracks a key that is not UTF-8,
    # and a pipeline's SET of it makes the server send an invalidation mid-pipeline.
    async with trio_maint.open_redis(redis_url, decode_responses=True, pool_size=1) as r:
        await r.set("tb:a", "A")
        await r.execute_command("CLIENT", "TRACKING", "ON")
        assert await r.get(b"tb:\xff") is None
        pipe = r.pipeline(transaction=False)
        pipe.set(b"tb:\xff", "x")
        pipe.get("tb:a")
        pipe.get("tb:a")
        try:
            replies = await pipe.execute()
        except ProtocolError:
            pass  # the connection is discarded: fine
        else:
            assert replies == [True, "A", "A"]
        assert await r.get("tb:a") == "A"
        await r.delete(b"tb:\xff", "tb:a")


# ------------------------------------------------------- push frames at every position


def _script(with_pushes: list[int], values: list[bytes]) -> tuple[bytes, list[Any]]:
    """Replies (``values`` as bulk strings) with a push frame before reply ``i`` for
    each ``i`` in ``with_pushes`` (``len(values)``: after the last reply)."""
    out = []
    for i, value in enumerate(values):
        if i in with_pushes:
            out.append(PUSH)
        out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    if len(values) in with_pushes:
        out.append(PUSH)
    return b"".join(out), values


@pytest.mark.parametrize("decode", [False, True])
async def test_push_frames_anywhere_and_split_anywhere_keep_replies_aligned(
    decode: bool,
) -> None:
    values = [b"a>b", b">2", b"", b">"]  # '>' inside values: over-counted, never harmful
    for count in range(0, len(values) + 1):
        for positions in itertools.combinations(range(len(values) + 1), count):
            data, expected = _script(list(positions), values)
            for chunks in splits(data, step=3):
                f = Fake(decode)
                try:
                    got = await f.run(len(values), chunks)
                    want = [v.decode() for v in expected] if decode else expected
                    assert got == want, (positions, chunks)
                    # Push frames after the last reply: never taken by the pipeline.
                    late = int(len(values) in positions)
                    assert len(f.seen) == len(positions) - late
                    # The next command gets its own reply, whatever was left over.
                    f.server.send(b"+next\r\n")
                    got = await f.conn.execute(("PING",))
                    assert got == ("next" if decode else b"next")
                    assert len(f.seen) == len(positions)
                finally:
                    f.close()


async def test_push_split_across_the_last_reply_stays_for_the_health_check(fake: Fake) -> None:
    # The pipeline's last reply and half a push frame arrive together: the pipeline
    # returns, and the half push is completed and dispatched later, not taken as a reply.
    got = await fake.run(2, [b"+a\r\n+b\r\n" + PUSH[:9]])
    assert got == [b"a", b"b"]
    assert fake.conn._parser.has_data()
    fake.server.send(PUSH[9:])
    assert await fake.conn.check_idle() is True
    assert fake.seen == [[b"invalidate", [b"k"]]]
    assert fake.conn._parser.push_credit == 0


async def test_more_replies_than_commands_are_caught_by_the_health_check(fake: Fake) -> None:
    got = await fake.run(2, [b"+a\r\n+b\r\n+extra\r\n"])
    assert got == [b"a", b"b"]
    assert await fake.conn.check_idle() is False
    assert fake.conn.broken


async def test_fewer_replies_than_commands_time_out_and_break() -> None:
    f = Fake()
    try:
        f.conn.options = ClientOptions(host="fake", port=1, socket_timeout=0.05)
        got = await f.run(3, [b"+a\r\n+b\r\n"])
        assert isinstance(got, trio_maint.TimeoutError)
        assert f.conn.broken
    finally:
        f.close()


async def test_malformed_frame_mid_batch_breaks_the_parser(fake: Fake) -> None:
    got = await fake.run(3, [b"+a\r\n" + PUSH + b"?oops\r\n+c\r\n"])
    assert isinstance(got, ProtocolError)
    assert fake.conn.broken and fake.conn._parser.broken


async def test_push_credit_counts_every_push_frame_fed() -> None:
    # Any chunking, bytes or bytearray or memoryview: while credit is 0 no push comes out.
    data = (b"+a\r\n" + PUSH) * 3 + b"$3\r\n>>>\r\n" + PUSH
    for cut in range(1, len(data)):
        for kind in (bytes, bytearray, memoryview):
            parser = RespParser()
            parser.feed(kind(data[:cut]))
            parser.feed(kind(data[cut:]))
            taken: list[Any] = []
            while True:
                before = len(taken)
                may = parser.take_replies(taken, 1)
                if len(taken) == before:
                    break
                if type(taken[-1]) is PushNotification:
                    assert may
                    parser.pushes_taken(1)
            assert len(taken) == 8
            # The '>' bytes of the bulk string are never taken back (a memoryview counts
            # its whole length): an upper bound, never below what is owed.
            assert parser.push_credit == 3 if kind is not memoryview else parser.push_credit >= 3


# ------------------------------------------------------------------- cancellation


async def test_cancel_at_every_wait_of_a_pipeline_discards_the_connection() -> None:
    data = b"+a\r\n" + PUSH + b"+b\r\n+c\r\n"
    chunks = [data[i : i + 5] for i in range(0, len(data), 5)]
    for stop in range(len(chunks)):
        f = Fake()
        try:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(f.conn.execute_many, [("PING",)] * 3)
                    for chunk in chunks[:stop]:
                        await trio.testing.wait_all_tasks_blocked()
                        f.server.send(chunk)
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()
            assert scope.cancelled_caught
            assert f.conn.broken and not f.conn.in_use
        finally:
            f.close()


async def test_cancelled_pipeline_connection_is_never_reused(r: trio_maint.Redis) -> None:
    await r.set("cp:k", "v")
    [conn] = r.pool.connections
    with trio.move_on_after(0.05):
        async with r.pipeline(transaction=False) as pipe:
            pipe.get("cp:k")
            pipe.blpop(["cp:nothing"], 1)
            await pipe.execute()
    assert conn.closed
    assert await r.get("cp:k") == b"v"


# ------------------------------------------------------------------- checkpoints


async def test_unencodable_argument_is_still_a_full_checkpoint(r: trio_maint.Redis) -> None:
    # Regression: with acquire_for_reply's cancel point only, a command raising
    # DataError before it was sent never scheduled (and a loop of them starved others).
    await r.ping()
    with trio.testing.assert_checkpoints():
        with pytest.raises(DataError):
            await r.set("k", None)  # type: ignore[arg-type]
    with trio.testing.assert_checkpoints():
        with pytest.raises(DataError):
            await r.execute_command("SET", "k", None)  # type: ignore[arg-type]
    async with r.pipeline(transaction=False) as pipe:
        pipe.set("k", None)  # type: ignore[arg-type]
        with trio.testing.assert_checkpoints():
            with pytest.raises(DataError):
                await pipe.execute()
    assert r.pool.stats().in_use == 0 and r.pool.stats().idle == 1


async def test_a_loop_of_failing_commands_does_not_starve_other_tasks(
    r: trio_maint.Redis,
) -> None:
    await r.ping()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        before = ticks
        for _ in range(100):
            with pytest.raises(DataError):
                await r.set("k", None)  # type: ignore[arg-type]
        ran = ticks - before
        nursery.cancel_scope.cancel()
    assert ran >= 50


async def test_failed_write_is_still_a_full_checkpoint(fake: Fake) -> None:
    # The fast path's write is only a cancel point, as is acquire_for_reply: a write
    # that fails at once must schedule on its own (the pool's health check misses a
    # peer that goes away between it and the write).
    fake.client.shutdown(socket.SHUT_WR)  # the next write fails at once (EPIPE)
    with trio.testing.assert_checkpoints():
        with pytest.raises(trio_maint.ConnectionError):
            await fake.conn.execute(("PING",))
    assert fake.conn.broken


async def test_sequential_commands_let_other_tasks_run(r: trio_maint.Redis) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    await r.ping()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        before = ticks
        for _ in range(50):
            await r.get("k")
            async with r.pipeline(transaction=False) as pipe:
                pipe.get("k")
                await pipe.execute()
        ran = ticks - before
        nursery.cancel_scope.cancel()
    assert ran >= 100


# ------------------------------------------------------- maintenance mid-pipeline


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


async def test_moving_and_migrating_in_the_middle_of_pipelines(
    sims: tuple[MaintenanceSimulator, MaintenanceSimulator],
) -> None:
    sim_a, sim_b = sims
    with trio.fail_after(30):
        async with trio_maint.open_redis(f"{sim_a.url}/3", pool_size=1) as r:
            await r.mset({f"mp:{i}": str(i) for i in range(8)})
            for after in range(0, 9, 2):
                await sim_a.inject_migrating(after_frames=after)
                await sim_a.inject_migrated(after_frames=after + 1)
                async with r.pipeline(transaction=after % 4 == 0) as pipe:
                    for i in range(8):
                        pipe.get(f"mp:{i}")
                    assert await pipe.execute() == [str(i).encode() for i in range(8)]
            await sim_a.inject_moving(target=sim_b.address, time=1, after_frames=3)
            async with r.pipeline(transaction=False) as pipe:
                for i in range(8):
                    pipe.get(f"mp:{i}")
                assert await pipe.execute() == [str(i).encode() for i in range(8)]
            for _ in range(20):
                assert await r.get("mp:7") == b"7"
                async with r.pipeline(transaction=False) as pipe:
                    pipe.get("mp:1")
                    pipe.get("mp:2")
                    assert await pipe.execute() == [b"1", b"2"]
                await trio.sleep(0.05)
            assert r.maintenance is not None
            assert any(c.port == sim_b.port for c in r.pool.connections)


async def test_binary_key_invalidations_with_decode_responses_on_a_real_server(
    redis_url: str,
) -> None:
    """Issue 13, item 6, end to end: ``CLIENT TRACKING ON`` with ``decode_responses``; a
    key that is not UTF-8 is read, then changed by another client. Its invalidation (a
    push frame holding the key) reaches the push handler with the key as ``bytes``, and
    the single command and the pipeline in flight get their own replies on the same
    connection."""
    seen: list[Any] = []
    options = ClientOptions.from_url(redis_url, decode_responses=True)
    conn = Connection(options, push_handler=lambda c, f: seen.append(list(f)))
    keys = [b"trio_maint:test:tracking:\xff\xfe", b"trio_maint:test:tracking:\xfe\xff"]
    await conn.connect()
    try:
        assert await conn.execute(("CLIENT", "TRACKING", "ON")) == "OK"
        async with trio_maint.open_redis(redis_url) as other:
            for key, in_flight in zip(keys, ("single", "pipeline"), strict=True):
                await other.set(key, "v1")
                reply = await conn.execute(("GET", key))
                assert reply == "v1"  # the key is tracked from now on
                await other.set(key, "v2")  # the server writes the invalidation now
                with trio.fail_after(5):
                    while not conn.has_input():
                        await trio.sleep(0.01)
                if in_flight == "single":
                    assert await conn.execute(("ECHO", "mine")) == "mine"
                else:
                    assert await conn.execute_many([("ECHO", "a"), ("ECHO", "b")]) == ["a", "b"]
                assert seen[-1] == ["invalidate", [key]]
            await other.delete(*keys)
        assert len(seen) == 2
        assert not conn.broken and conn.usable
        assert await conn.execute(("PING",)) == "PONG"
    finally:
        await conn.aclose()
