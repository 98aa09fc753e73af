"""Adversarial review of reply polling (``_sansio/spin.py``, ``_net/wire.py``) and of the
O(1) withdrawal of ``BatchQueue`` (``_sansio/autopipe.py``).

Hostile fake servers (replies dripped, split at every position, an extra reply, push
frames first, an endless bulk, a close mid-reply, no reply), a cancellation at every step
of a command and of a pipeline, exact timeouts under an autojump clock, the event loop's
latency under a huge reply and under 50 tasks polling a slow server, and a stateful model
of ``BatchQueue``. Findings are ``xfail(strict=True)`` with the bug described.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import trio_maint
from trio_maint import MaintConfig
from trio_maint._net.connection import Connection
from trio_maint._sansio.autopipe import BatchQueue

from ._fakeserver import Action, FakeConnection, FakeServer, open_fake_server, push, resp
from .test_cache_tls import TLS, tls  # noqa: F401
from .test_read_spin import reads  # noqa: F401
from .test_robust_cancel import StepCanceller, canceller  # noqa: F401

Handler = Callable[[FakeConnection, list[bytes]], Awaitable["bytes | Action"]]


def value_of(key: bytes) -> bytes:
    """The value the fake GET handlers below answer for ``key`` (with CRLF inside)."""
    return b"v:" + key + b"\r\n" + b"z" * 200


def in_pieces(pieces: int, gap: float = 0.0) -> Handler:
    """GET answered in ``pieces`` writes, a checkpoint (or ``gap`` seconds) apart."""

    async def handler(conn: FakeConnection, args: list[bytes]) -> Action:
        whole = resp(value_of(args[1]))
        step = max(1, len(whole) // pieces)
        for at in range(0, len(whole), step):
            await conn.send(whole[at : at + step])
            if gap:
                await trio.sleep(gap)
            else:
                await trio.lowlevel.checkpoint()
        return Action.NO_REPLY

    return handler


@asynccontextmanager
async def client(
    server: FakeServer, **options: object
) -> AsyncIterator[tuple[trio_maint.Redis, Connection]]:
    """A one-connection client of ``server``, warmed, and its connection."""
    options.setdefault("pool_size", 1)
    options.setdefault("socket_timeout", 5.0)
    async with trio_maint.open_redis(server.url, **options) as r:
        assert await r.ping() is True
        [conn] = r.pool.connections
        yield r, conn


# ----------------------------------------------------------------- deadlines


@pytest.mark.trio
async def test_a_reply_dripped_without_end_still_times_out() -> None:
    """Found in review of d1f8da2..69a5f71 (every read of a single reply polled, and the
    deadline was only checked in the wait, which a read that found bytes skipped: a GET
    hung for as long as the bytes came); fixed in 58f1f2e (the deadline is checked before
    each polled read). Before d1f8da2 it timed out after 0.3 s, as now."""

    async def drip(conn: FakeConnection, args: list[bytes]) -> Action:
        await conn.send(b"$104857600\r\n")
        while True:
            await conn.send(b"x")
            await trio.lowlevel.checkpoint()

    async with open_fake_server() as server:
        server.on("GET", drip)
        async with client(server, socket_timeout=0.3) as (r, conn):
            with trio.move_on_after(3) as outer:
                with pytest.raises(trio_maint.TimeoutError):
                    await r.get("k")
            assert not outer.cancelled_caught, "socket_timeout=0.3 did not hold within 3 s"
            assert conn.broken


@pytest.mark.trio
async def test_a_pipeline_dripped_without_end_times_out() -> None:
    """execute_many waits (under the deadline) for every read after the 4th: it holds."""

    async def drip(conn: FakeConnection, args: list[bytes]) -> Action:
        await conn.send(b"$104857600\r\n")
        while True:
            await conn.send(b"x")
            await trio.lowlevel.checkpoint()

    async with open_fake_server() as server:
        server.on("GET", drip)
        async with client(server, socket_timeout=0.3) as (r, conn):
            with trio.fail_after(5):
                async with r.pipeline(transaction=False) as p:
                    p.get("a").get("b")
                    with pytest.raises(trio_maint.TimeoutError):
                        await p.execute()
            assert conn.broken


@pytest.mark.trio
async def test_an_endless_bulk_dripped_slowly_times_out() -> None:
    """A 100 MiB bulk header, then a byte every 10 ms: polling misses, the back-off sends
    the reads to the wait, whose deadline holds."""

    async def slow(conn: FakeConnection, args: list[bytes]) -> Action:
        await conn.send(b"$104857600\r\n")
        while True:
            await trio.sleep(0.01)
            await conn.send(b"x" * 100)

    async with open_fake_server() as server:
        server.on("GET", slow)
        async with client(server, socket_timeout=0.3) as (r, conn):
            start = trio.current_time()
            with trio.fail_after(5), pytest.raises(trio_maint.TimeoutError):
                await r.get("k")
            assert trio.current_time() - start < 2.0
            assert conn.broken
            assert await r.ping() is True  # a new connection


@pytest.mark.trio
@pytest.mark.parametrize("backing_off", [False, True])
async def test_no_reply_times_out_exactly_under_an_autojump_clock(
    autojump_clock: trio.testing.MockClock, backing_off: bool
) -> None:
    """Polling passes take no (mock) time and never block the jump: a server that never
    answers fails the command exactly at socket_timeout, command after command."""

    async def never(conn: FakeConnection, args: list[bytes]) -> Action:
        return Action.NO_REPLY

    async with open_fake_server() as server:
        server.on("GET", never)
        async with client(server, socket_timeout=2.5) as (r, conn):
            for i in range(6):
                [conn] = r.pool.connections
                if backing_off:
                    conn._spin.skip, conn._spin.misses = 3, 2
                start = trio.current_time()
                with trio.fail_after(60), pytest.raises(trio_maint.TimeoutError):
                    await r.get(f"k{i}")
                assert trio.current_time() - start == pytest.approx(2.5, abs=1e-9)
                assert conn.broken and conn not in r.pool.connections
                assert await r.ping() is True
            # A pipeline too.
            start = trio.current_time()
            with trio.fail_after(60):
                async with r.pipeline(transaction=False) as p:
                    p.ping().get("x")
                    with pytest.raises(trio_maint.TimeoutError):
                        await p.execute()
            assert trio.current_time() - start == pytest.approx(2.5, abs=1e-9)


# ------------------------------------------------------------- hostile replies


@pytest.mark.trio
async def test_a_reply_split_at_every_position_is_read_whole() -> None:
    """A nested RESP3 reply (map, array, bulk with CRLF inside, double, null) cut in two at
    every byte, the halves a pass apart; a PING after each proves the stream in step."""
    value = {"a": [1, b"x\r\ny", None], "b": 1.5, "c": b"\r\n" * 3}
    whole = resp(value)
    cut = {"at": 0}

    async def split(conn: FakeConnection, args: list[bytes]) -> Action:
        at = cut["at"]
        await conn.send(whole[:at])
        await trio.lowlevel.checkpoint()
        await conn.send(whole[at:])
        return Action.NO_REPLY

    async with open_fake_server() as server:
        server.on("HGETALL", split)
        async with client(server) as (r, conn):
            for at in range(1, len(whole)):
                cut["at"] = at
                with trio.fail_after(5):
                    got = await r.execute_command("HGETALL", "h")
                    assert got == {b"a": [1, b"x\r\ny", None], b"b": 1.5, b"c": b"\r\n" * 3}
                    assert await r.ping() is True
            assert r.pool.connections == [conn] and not conn.broken


@pytest.mark.trio
@pytest.mark.parametrize("pieces", [1, 2, 3, 5, 17, 300])
async def test_replies_dripped_in_pieces_single_and_pipelined(pieces: int) -> None:
    async with open_fake_server() as server:
        server.on("GET", in_pieces(pieces))
        async with client(server) as (r, conn):
            with trio.fail_after(20):
                for i in range(5):
                    key = f"k{i}".encode()
                    assert await r.get(key) == value_of(key)
                async with r.pipeline(transaction=False) as p:
                    for i in range(5):
                        p.get(f"p{i}")
                    got = await p.execute()
                assert got == [value_of(f"p{i}".encode()) for i in range(5)]
            assert r.pool.connections == [conn] and not conn.broken


@pytest.mark.trio
async def test_a_reply_dripped_a_byte_a_pass() -> None:
    async def drip(conn: FakeConnection, args: list[bytes]) -> Action:
        for byte in resp(value_of(args[1])):
            await conn.send(bytes([byte]))
            await trio.lowlevel.checkpoint()
        return Action.NO_REPLY

    async with open_fake_server() as server:
        server.on("GET", drip)
        async with client(server) as (r, _conn):
            with trio.fail_after(20):
                assert await r.get("k") == value_of(b"k")
                assert await r.ping() is True


@pytest.mark.trio
async def test_push_frames_before_and_amid_a_split_reply() -> None:
    handled: list[object] = []

    async def pushy(conn: FakeConnection, args: list[bytes]) -> Action:
        whole = resp(value_of(args[1]))
        await conn.send(push("hello", "1") + push("hello", "2") + whole[:3])
        await trio.lowlevel.checkpoint()
        await conn.send(whole[3:])
        await conn.send(push("hello", "3"))  # after the reply: drained before reuse
        return Action.NO_REPLY

    async with open_fake_server() as server:
        server.on("GET", pushy)
        async with client(server) as (r, conn):
            conn.push_handler = lambda _c, frame: handled.append(frame)
            with trio.fail_after(5):
                for i in range(3):
                    key = f"k{i}".encode()
                    assert await r.get(key) == value_of(key)
                    assert await r.ping() is True
            assert len(handled) >= 6
            assert not conn.broken


@pytest.mark.trio
async def test_an_unsolicited_extra_reply_in_the_same_write_never_answers_the_next() -> None:
    async def extra(conn: FakeConnection, args: list[bytes]) -> bytes:
        return resp(value_of(args[1])) + resp(b"UNSOLICITED")

    async with open_fake_server() as server:
        server.on("GET", extra)
        async with client(server) as (r, _conn):
            with trio.fail_after(5):
                for i in range(5):
                    key = f"k{i}".encode()
                    assert await r.get(key) == value_of(key)
                    assert await r.ping() is True
                    assert await r.incr("n") == i + 1


@pytest.mark.trio
@pytest.mark.parametrize("after", [0, 1, 5, 100])
async def test_the_server_closing_mid_reply(after: int) -> None:
    async def cut(conn: FakeConnection, args: list[bytes]) -> Action:
        await conn.send(resp(value_of(args[1]))[:after] if after else b"")
        await trio.lowlevel.checkpoint()
        return Action.CLOSE

    async with open_fake_server() as server:
        server.on("GET", cut)
        async with client(server) as (r, conn):
            with trio.fail_after(5):
                with pytest.raises(trio_maint.ConnectionError):
                    await r.get("k")
                assert conn.broken and conn not in r.pool.connections
                assert await r.ping() is True


# ------------------------------------------------------------------ cancellation


async def _cancel_sweep(
    r: trio_maint.Redis,
    server: FakeServer,
    canceller: StepCanceller,  # noqa: F811
    run: Callable[[str], Awaitable[None]],
    check: Callable[[str], Awaitable[None]],
    steps: int,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, int]:
    """Cancel ``run(tag)`` after each of 1..``steps`` steps; after each, the connection it
    used must be discarded when the command was written (its reply unread), and
    ``check(tag)`` must get its own reply. Returns (cancelled after a write, completed)."""
    written_cancelled = completed = 0
    returned: list[object] = []
    for name in ("execute", "execute_many"):
        real = getattr(Connection, name)

        async def spy(self: Connection, *a: Any, _real: Any = real, **kw: Any) -> Any:
            got = await _real(self, *a, **kw)
            returned.append(got)  # its replies were read whole
            return got

        monkeypatch.setattr(Connection, name, spy)
    for k in range(1, steps + 1):
        tag = f"t{k}"
        [conn] = r.pool.connections
        assert conn.usable
        before = len(server.log)
        task = trio.lowlevel.current_task()
        returned.clear()
        with trio.CancelScope() as scope:
            canceller.targets[task] = [k, scope]
            try:
                await run(tag)
            finally:
                canceller.targets.pop(task, None)
        if scope.cancelled_caught:
            await trio.sleep(0.02)  # the server reads what was written
            written = any(tag.encode() in b" ".join(a) for _c, a in server.log[before:])
            if written and not returned:
                written_cancelled += 1
                assert conn.broken, f"step {k}: written, cancelled, reply unread, not broken"
                assert conn not in r.pool.connections
        else:
            completed += 1
        with trio.fail_after(5):
            await check(tag)
    return written_cancelled, completed


@pytest.mark.trio
@pytest.mark.parametrize("pieces", [1, 3, 9])
async def test_a_command_cancelled_at_every_step(
    canceller: StepCanceller,  # noqa: F811
    pieces: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with open_fake_server() as server:
        server.on("GET", in_pieces(pieces))
        async with client(server) as (r, _conn):

            async def run(tag: str) -> None:
                assert await r.get(tag) == value_of(tag.encode())

            async def check(tag: str) -> None:
                key = tag.encode() + b"-after"
                assert await r.get(key) == value_of(key)

            cancelled, completed = await _cancel_sweep(
                r, server, canceller, run, check, 40, monkeypatch
            )
            assert cancelled >= 3 and completed >= 1


@pytest.mark.trio
@pytest.mark.parametrize("pieces", [1, 4])
async def test_a_pipeline_cancelled_at_every_step(
    canceller: StepCanceller,  # noqa: F811
    pieces: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with open_fake_server() as server:
        server.on("GET", in_pieces(pieces))
        async with client(server) as (r, _conn):

            async def run(tag: str) -> None:
                async with r.pipeline(transaction=False) as p:
                    p.get(tag + "a").get(tag + "b").get(tag + "c")
                    got = await p.execute()
                assert got == [value_of(f"{tag}{s}".encode()) for s in "abc"]

            async def check(tag: str) -> None:
                async with r.pipeline(transaction=False) as p:
                    p.get(tag + "x").ping()
                    assert await p.execute() == [value_of(f"{tag}x".encode()), True]

            cancelled, completed = await _cancel_sweep(
                r, server, canceller, run, check, 50, monkeypatch
            )
            assert cancelled >= 3 and completed >= 1


@pytest.mark.trio
async def test_a_command_cancelled_while_backing_off_waits(
    canceller: StepCanceller,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Polling backed off: the first read waits at once; cancelled in that wait."""
    async with open_fake_server() as server:
        server.on("GET", in_pieces(2, gap=0.01))
        async with client(server) as (r, _conn):

            async def run(tag: str) -> None:
                [conn] = r.pool.connections
                conn._spin.skip = 5
                assert await r.get(tag) == value_of(tag.encode())

            async def check(tag: str) -> None:
                assert await r.get(tag + "-after") == value_of(f"{tag}-after".encode())

            cancelled, _completed = await _cancel_sweep(
                r, server, canceller, run, check, 6, monkeypatch
            )
            assert cancelled >= 2


@pytest.mark.trio
async def test_transactions_and_pubsub_on_a_real_server(r: trio_maint.Redis) -> None:
    with trio.fail_after(10):
        for i in range(50):
            async with r.pipeline() as p:
                p.set(f"tx{i}", i).incr(f"tx{i}").get(f"tx{i}")
                assert await p.execute() == [True, i + 1, str(i + 1).encode()]
        async with r.pubsub() as ps:
            await ps.subscribe("spin-adv")
            first = await ps.get_message(timeout=1)
            assert first is not None and first.type == "subscribe"
            for i in range(20):
                assert await r.publish("spin-adv", str(i)) == 1
            got = [await ps.get_message(timeout=1) for _ in range(20)]
            assert [m.data for m in got if m] == [str(i).encode() for i in range(20)]


# --------------------------------------------------------------- the event loop


class Ticker:
    """Another task's steps: the longest time between two (s) and their count."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.steps = 0
        self.running = True

    async def run(self) -> None:
        last = time.perf_counter()
        while self.running:
            await trio.lowlevel.checkpoint()
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            self.steps += 1
            last = now


@pytest.mark.trio
async def test_huge_replies_never_hold_the_event_loop_long(redis_url: str) -> None:
    value = b"q" * (32 << 20)
    async with trio_maint.open_redis(redis_url, pool_size=1) as r:
        await r.set("spin-adv:huge", value)
        ticker = Ticker()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker.run)
            await trio.lowlevel.checkpoint()
            with trio.fail_after(30):
                assert await r.get("spin-adv:huge") == value
                async with r.pipeline(transaction=False) as p:
                    p.get("spin-adv:huge").get("spin-adv:huge").ping()
                    got = await p.execute()
            ticker.running = False
        await r.delete("spin-adv:huge")
    assert got == [value, value, True]
    assert ticker.steps > 100
    # A pass of 4 reads of 64 KiB and the parse of a 32 MiB bulk: far below 0.25 s.
    assert ticker.longest < 0.25, ticker.longest


@pytest.mark.trio
async def test_fifty_tasks_polling_a_slow_server_back_off(
    reads: list[bool],  # noqa: F811
) -> None:
    """A server answering after 5 ms, 50 tasks on 50 connections: polling misses back
    off (empty reads bounded by the back-off), nobody starves, CPU stays modest."""

    async def late(conn: FakeConnection, args: list[bytes]) -> bytes:
        await trio.sleep(0.005)
        return resp(value_of(args[1]))

    tasks, rounds = 50, 40
    async with open_fake_server() as server:
        server.on("GET", late)
        async with trio_maint.open_redis(server.url, pool_size=tasks, socket_timeout=5.0) as r:

            async def warm(i: int) -> None:
                await r.get(f"warm{i}")

            async with trio.open_nursery() as nursery:
                for i in range(tasks):
                    nursery.start_soon(warm, i)
            conns = r.pool.connections
            for conn in conns:
                conn._spin.skip = conn._spin.misses = 0
            del reads[:]  # (the warm-up's)
            ticker = Ticker()
            cpu = time.process_time()

            async def worker(i: int) -> None:
                for j in range(rounds):
                    key = f"w{i}-{j}".encode()
                    assert await r.get(key) == value_of(key)

            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ticker.run)
                    async with trio.open_nursery() as workers:
                        for i in range(tasks):
                            workers.start_soon(worker, i)
                    ticker.running = False
            cpu = time.process_time() - cpu
    commands = tasks * rounds
    # 40 commands on a connection: polling misses at commands 1, 4, 9, 18, 35 (skips 2,
    # 4, 8, 16), 5 * SPIN_PASSES empty reads, 1 per command; more when the load slows
    # the passes enough that a probe finds a reply (the back-off then starts over).
    assert reads.count(False) <= 2 * commands
    assert reads.count(True) >= commands
    assert ticker.longest < 0.1, ticker.longest
    # Client and fake server in one process: generous, only catches a spinning loop.
    assert cpu / commands < 0.005, cpu / commands


# ------------------------------------------------------------- BatchQueue


class Item:
    """A queued command's record (distinct objects, as the shell's ``_Queued``)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


class BatchQueueMachine(RuleBasedStateMachine):
    """BatchQueue against a plain list model: no item lost or taken twice, withdrawn ones
    never taken, ``waiting`` the live count, order kept (requeued ones first)."""

    def __init__(self) -> None:
        super().__init__()
        self.q: BatchQueue[Item] = BatchQueue(max_batch=4)
        self.model: list[Item] = []  # live, in order
        self.taken: list[Item] = []  # taken by a batch and not requeued
        self.withdrawn: set[int] = set()  # Item.n
        self.ever_taken: list[int] = []
        self.counter = 0

    @rule(count=st.integers(1, 6))
    def enqueue(self, count: int) -> None:
        for _ in range(count):
            item = Item(self.counter)
            self.counter += 1
            woke = self.q.enqueue(item)
            assert woke == (not self.model)
            self.model.append(item)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def withdraw(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(self.model))
        assert self.q.withdraw(item) is True
        self.model.remove(item)
        self.withdrawn.add(item.n)
        del item  # its tombstone in the queue keeps its id from being reused

    @precondition(lambda self: bool(self.taken))
    @rule(data=st.data())
    def withdraw_taken(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(self.taken))
        assert self.q.withdraw(item) is False

    @rule()
    def take(self) -> None:
        batch = self.q.take()
        expect = self.model[: self.q.max_batch]
        assert [i.n for i in batch] == [i.n for i in expect]
        assert all(i.n not in self.withdrawn for i in batch)
        del self.model[: len(batch)]
        self.taken.extend(batch)
        self.ever_taken.extend(i.n for i in batch)

    @precondition(lambda self: bool(self.taken))
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        count = data.draw(st.integers(1, len(self.taken)))
        back = self.taken[-count:]
        del self.taken[-count:]
        for item in back:
            self.ever_taken.remove(item.n)
        self.q.requeue(back)
        self.model[:0] = back

    @rule(count=st.integers(1, 20))
    def churn(self, count: int) -> None:
        """Enqueue and withdraw new items at once (ids freed and reused by CPython)."""
        for _ in range(count):
            item = Item(self.counter)
            self.counter += 1
            self.q.enqueue(item)
            assert self.q.withdraw(item)
            self.withdrawn.add(item.n)

    @invariant()
    def books_balance(self) -> None:
        assert self.q.waiting == len(self.model)
        if not self.model:
            assert not self.q.queue
        assert len(self.ever_taken) == len(set(self.ever_taken))
        live = [i for i in self.q.queue if id(i) not in self.q._withdrawn]
        assert [i.n for i in live] == [i.n for i in self.model]


TestBatchQueueMachine = BatchQueueMachine.TestCase
TestBatchQueueMachine.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)


# ------------------------------------------------------------ TLS and Unix sockets


@pytest.mark.trio
async def test_tls_commands_pipelines_and_transactions_still_work(tls: TLS) -> None:  # noqa: F811
    """TLS streams never take the polling path; they must behave as before."""
    value = b"t" * (3 << 20)
    async with trio_maint.open_redis(
        tls.url, ssl_context=tls.context(), maintenance=MaintConfig(mode="disabled")
    ) as r:
        with trio.fail_after(20):
            assert all(isinstance(c._stream, trio.SSLStream) for c in r.pool.connections)
            await r.set("spin-adv:tls", value)
            assert await r.get("spin-adv:tls") == value
            async with r.pipeline() as p:
                p.incr("spin-adv:n").get("spin-adv:tls").ping()
                got = await p.execute()
            assert got[1:] == [value, True]
            await r.delete("spin-adv:tls", "spin-adv:n")


@pytest.mark.trio
async def test_unix_socket_big_reply_and_pipeline(unix_path: str) -> None:
    value = b"u" * (5 << 20)
    async with trio_maint.open_redis(f"unix://{unix_path}?db=9", pool_size=1) as r:
        with trio.fail_after(20):
            await r.set("spin-adv:unix", value)
            for _ in range(3):
                assert await r.get("spin-adv:unix") == value
            async with r.pipeline(transaction=False) as p:
                p.get("spin-adv:unix").ping().get("spin-adv:unix")
                assert await p.execute() == [value, True, value]
            await r.delete("spin-adv:unix")
            [conn] = r.pool.connections
            assert type(conn._stream) is trio.SocketStream and not conn.broken
