"""Polling for a reply before waiting for it (``_sansio/spin.py``, issue 18).

After a command is written on a plain socket, the connection passes through Trio's
scheduler up to ``SPIN_PASSES`` times, reading after each pass, before it waits for
readability; polling that misses backs off (2, 4, ... up to ``MAX_SKIP`` polling reads
wait at once). The decision is tested as plain calls; the shell against small fake servers
on loopback (a server in the same Trio run answers within a few passes; a slow one never
does), and a cancellation in any polling pass discards the connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint._net import wire
from trio_maint._sansio.spin import MAX_SKIP, READS_NOW, SPIN_PASSES, ReadSpin, read_now

from ._fakeserver import Action, FakeConnection, open_fake_server, resp
from .test_robust_cancel import StepCanceller, canceller  # noqa: F401

# ------------------------------------------------------------------------ the decision


def test_a_new_connection_polls_the_full_passes() -> None:
    assert ReadSpin().passes() == SPIN_PASSES


def test_misses_in_a_row_back_off_2_4_8_up_to_max_skip() -> None:
    spin = ReadSpin()
    skips = []
    for _ in range(10):
        assert spin.passes() == SPIN_PASSES  # a probe after each back-off
        spin.missed()
        skips.append(spin.skip)
        waited = [spin.passes() for _ in range(spin.skip)]
        assert waited == [0] * len(waited)  # these wait at once
    assert skips == [2, 4, 8, 16, 32, 64, 64, 64, 64, 64]
    assert MAX_SKIP == 64


def test_a_found_reply_ends_the_back_off() -> None:
    spin = ReadSpin()
    for _ in range(4):
        spin.passes()
        spin.missed()
        spin.skip = 0
    spin.found()
    assert spin.misses == 0
    spin.missed()
    assert spin.skip == 2  # back to the first step


# ------------------------------------------------------------------------ the shell


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every non-blocking read of a reply: ``True`` if it found bytes."""
    seen: list[bool] = []
    real = wire._read_now

    def counting(sock: trio.socket.SocketType) -> bytes | None:
        got = real(sock)
        seen.append(got is not None)
        return got

    monkeypatch.setattr(wire, "_read_now", counting)
    return seen


def delayed_get(delay: float) -> Callable[[FakeConnection, list[bytes]], Awaitable[bytes]]:
    async def handler(conn: FakeConnection, args: list[bytes]) -> bytes:
        await trio.sleep(delay)
        return resp(b"late:" + args[1])

    return handler


@pytest.mark.trio
async def test_a_prompt_server_is_polled_and_never_waited_for(
    reads: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = 0
    real_wait = wire.StreamIO._wait_readable

    async def counting_wait(self: wire.StreamIO, *args: object) -> bool:
        nonlocal waits
        waits += 1
        return await real_wait(self, *args)  # type: ignore[arg-type]

    async with open_fake_server() as server:
        async with trio_maint.open_redis(server.url, pool_size=1) as r:
            await r.set("k", "v")
            [conn] = r.pool.connections
            monkeypatch.setattr(wire.StreamIO, "_wait_readable", counting_wait)
            del reads[:]
            for _ in range(50):
                assert await r.get("k") == b"v"
            assert waits == 0
            assert reads.count(True) == 50  # one read found each reply
            assert len(reads) <= 50 * SPIN_PASSES
            assert conn._spin.misses == 0


@pytest.mark.trio
async def test_a_slow_server_costs_one_polling_burst_per_back_off(
    reads: list[bool], autojump_clock: trio.abc.Clock
) -> None:
    async with open_fake_server() as server:
        server.on("GET", delayed_get(0.02))
        async with trio_maint.open_redis(server.url, pool_size=1, socket_timeout=5.0) as r:
            await r.set("k", "v")
            [conn] = r.pool.connections
            conn._spin = ReadSpin()
            del reads[:]
            for i in range(127):
                assert await r.get(f"k{i}") == b"late:k" + str(i).encode()
            # Misses at commands 1, 4, 9, 18, 35, 68 (after skips of 2, 4, 8, 16, 32):
            # 6 bursts of SPIN_PASSES empty reads; every reply was read after a wait.
            assert reads.count(False) == 6 * SPIN_PASSES
            assert reads.count(True) == 127
            assert conn._spin.misses == 6 and conn._spin.skip == 64 - (127 - 68)


@pytest.mark.trio
@pytest.mark.parametrize("cancel_at", [1, 2, SPIN_PASSES // 2, SPIN_PASSES])
async def test_cancelled_in_any_polling_pass_the_connection_is_discarded(
    cancel_at: int,
    canceller: StepCanceller,  # noqa: F811
    reads: list[bool],
) -> None:
    """A command cancelled while polling has been written and its reply is unread: its
    connection is never reused, so the next command never reads that reply."""

    async def never_the_first(conn: FakeConnection, args: list[bytes]) -> bytes:
        if args[1] == b"first":
            await trio.sleep_forever()  # no reply, whatever the machine's load
        return resp(b"late:" + args[1])

    async with open_fake_server() as server:
        server.on("GET", never_the_first)
        async with trio_maint.open_redis(server.url, pool_size=1, socket_timeout=5.0) as r:
            await r.set("k", "v")
            [conn] = r.pool.connections
            conn._spin = ReadSpin()
            del reads[:]
            with trio.CancelScope() as scope:
                # Step k of this task ends in polling pass k's checkpoint (taking the idle
                # connection and the write are no schedule points).
                canceller.targets[trio.lowlevel.current_task()] = [cancel_at, scope]
                await r.get("first")
            assert scope.cancelled_caught
            assert reads == [False] * (cancel_at - 1)  # cancelled in pass cancel_at
            with trio.fail_after(5):  # it was written: the server reads it
                await server.wait_until(lambda s: s.count("GET") == 1)
            assert conn.broken and conn not in r.pool.connections
            with trio.fail_after(5):
                assert await r.get("second") == b"late:second"


@pytest.mark.trio
async def test_the_server_closing_while_polled_is_a_connection_error() -> None:
    async def close(conn: FakeConnection, args: list[bytes]) -> Action:
        return Action.CLOSE

    async with open_fake_server() as server:
        server.on("GET", close)
        async with trio_maint.open_redis(server.url, pool_size=1) as r:
            with pytest.raises(trio_maint.ConnectionError), trio.fail_after(5):
                await r.get("k")


# ------------------------------------------------------- the rest of a reply begun


class ReadsPerStep(trio.abc.Instrument):
    """The most reads one step of ``task`` made (a step: from one schedule point to the
    next, during which no other task runs)."""

    def __init__(self) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.now = 0
        self.most = 0

    def read(self) -> None:
        if trio.lowlevel.current_task() is self.task:
            self.now += 1
            self.most = max(self.most, self.now)

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.now = 0


@pytest.mark.trio
async def test_a_huge_reply_lets_other_tasks_run_between_its_reads(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reads of one reply after the first try the socket before passing through the
    scheduler, but only up to ``READS_NOW``: a 4 MiB value (64 reads and more) is never
    read more than that many reads in one step of its task."""
    steps = ReadsPerStep()
    count = 0
    real = wire._read_now

    def logged(sock: trio.socket.SocketType) -> bytes | None:
        nonlocal count
        got = real(sock)
        if got is not None:
            count += 1
            steps.read()
        return got

    value = b"x" * (4 << 20)
    async with trio_maint.open_redis(redis_url, pool_size=1) as r:
        await r.set("spin:huge", value)
        monkeypatch.setattr(wire, "_read_now", logged)
        steps.task = trio.lowlevel.current_task()
        trio.lowlevel.add_instrument(steps)
        try:
            with trio.fail_after(10):
                got = await r.get("spin:huge")
        finally:
            trio.lowlevel.remove_instrument(steps)
        await r.delete("spin:huge")
    assert got == value
    assert count >= 64
    assert 1 <= steps.most <= READS_NOW


def test_read_now_is_the_2nd_to_reads_now_th_read() -> None:
    assert [read_now(reads) for reads in range(6)] == [False, True, True, True, False, False]
    assert READS_NOW == 4


@pytest.mark.trio
async def test_a_reply_in_pieces_apart_in_time_is_read_whole() -> None:
    """A reply whose parts come 20 ms apart (the rest not there when tried at once, nor
    while polling) is read whole, and the connection stays in step."""

    async def in_pieces(conn: FakeConnection, args: list[bytes]) -> Action:
        whole = resp(b"y" * 300_000)
        for at in range(0, len(whole), 100_000):
            await conn.send(whole[at : at + 100_000])
            await trio.sleep(0.02)
        return Action.NO_REPLY

    async with open_fake_server() as server:
        server.on("GET", in_pieces)
        async with trio_maint.open_redis(server.url, pool_size=1, socket_timeout=5.0) as r:
            with trio.fail_after(5):
                assert await r.get("k") == b"y" * 300_000
                assert await r.ping() is True  # the connection is still in step


@pytest.mark.trio
@pytest.mark.parametrize("how", ["command", "pipeline"])
async def test_a_reply_dripping_without_end_still_times_out(how: str) -> None:
    """A server that sends a 100 MiB bulk string's header, then one byte per pass of
    the scheduler: polling always finds a byte, but the reply's deadline (socket_timeout)
    holds all the same."""

    async def drip(conn: FakeConnection, args: list[bytes]) -> Action:
        await conn.send(b"$104857600\r\n")
        while not conn.closed:
            await conn.send(b"x")
            await trio.lowlevel.checkpoint()
        return Action.NO_REPLY

    async with open_fake_server() as server:
        server.on("GET", drip)
        async with trio_maint.open_redis(server.url, pool_size=1, socket_timeout=0.3) as r:

            async def run() -> object:
                if how == "command":
                    return await r.get("k")
                pipe = r.pipeline(transaction=False)
                pipe.get("k")
                return await pipe.execute()

            start = trio.current_time()
            with pytest.raises(trio_maint.TimeoutError), trio.fail_after(10):
                await run()
            assert trio.current_time() - start >= 0.3
            assert r.pool.connections == []  # discarded
