"""A reply deadline is a deadline (issue 13): push frames never extend a command's wait
beyond the timeout in force measured from when it started waiting. A relaxation a push
frame brings (MIGRATING) counts as in force: it may lengthen the wait up to its start
plus the relaxed timeout, never longer. Before, each push frame re-armed the deadline
from the time it arrived: a server answering a GET with an unknown push frame every
0.3 s held the command forever.

Hostile fake servers; Trio's MockClock (autojump) makes the times exact."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import ClientOptions, MaintConfig
from trio_maint.lowlevel import Connection
from trio_maint.testing import migrated_frame, migrating_frame

from ._fakeserver import Action, FakeConnection, open_fake_server, push, resp

pytestmark = pytest.mark.trio

UNKNOWN = push(b"whatever", 1)


def answering_with_pushes(
    frames: Callable[[int], bytes], every: float
) -> Callable[[FakeConnection, list[bytes]], Awaitable[bytes | Action]]:
    """A GET handler that never replies and writes ``frames(i)`` every ``every`` s."""

    async def handler(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
        if args[1] == b"good":
            return resp(b"fine")
        i = 0
        while not conn.closed:
            await trio.sleep(every)
            await conn.send(frames(i))
            i += 1
        return Action.NO_REPLY

    return handler


async def timed(awaitable: Awaitable[object]) -> tuple[float, BaseException | None]:
    start = trio.current_time()
    try:
        with trio.fail_after(60):
            await awaitable
    except trio.TooSlowError as exc:  # the old behaviour: never ends
        return trio.current_time() - start, exc
    except Exception as exc:
        return trio.current_time() - start, exc
    return trio.current_time() - start, None


@pytest.mark.parametrize("maintenance", ["disabled", "enabled"])
async def test_push_frames_every_0_3_s_never_hold_a_command(
    autojump_clock: trio.abc.Clock, maintenance: str
) -> None:
    async with open_fake_server() as server:
        server.on("GET", answering_with_pushes(lambda i: UNKNOWN, 0.3))
        config = MaintConfig(mode=maintenance)
        async with trio_maint.open_redis(server.url, socket_timeout=2.0, maintenance=config) as r:
            elapsed, error = await timed(r.get("bad"))
            assert isinstance(error, TimeoutError), error
            assert elapsed == pytest.approx(2.0, abs=0.01)
            assert await r.get("good") == b"fine"


async def test_a_pipeline_waiting_among_push_frames_times_out_on_time(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_fake_server() as server:
        server.on("GET", answering_with_pushes(lambda i: UNKNOWN, 0.05))
        async with trio_maint.open_redis(server.url, socket_timeout=1.0) as r:
            async with r.pipeline(transaction=False) as pipe:
                pipe.get("good").get("bad").get("good")
                elapsed, error = await timed(pipe.execute())
            assert isinstance(error, TimeoutError), error
            assert elapsed == pytest.approx(1.0, abs=0.01)


async def test_a_relaxation_mid_wait_lengthens_it_to_start_plus_the_relaxed_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    # MIGRATING at 0.2 s (before the 0.5 s socket timeout): the relaxed timeout (3 s) is
    # in force, measured from the start of the wait: it ends at 3.0 s, although push
    # frames keep coming (and MIGRATED at 1 s restores normal timeouts for what follows).
    def frames(i: int) -> bytes:
        if i == 0:
            return migrating_frame(1)
        if i == 4:
            return migrated_frame(1)
        return UNKNOWN

    async with open_fake_server() as server:
        server.on("GET", answering_with_pushes(frames, 0.2))
        config = MaintConfig(mode="enabled", relaxed_timeout=3.0)
        async with trio_maint.open_redis(server.url, socket_timeout=0.5, maintenance=config) as r:
            assert await r.get("good") == b"fine"
            elapsed, error = await timed(r.get("bad"))
            assert isinstance(error, TimeoutError), error
            assert elapsed == pytest.approx(3.0, abs=0.01)


async def test_a_relaxation_after_the_deadline_comes_too_late(
    autojump_clock: trio.abc.Clock,
) -> None:
    # MIGRATING arrives 0.6 s into a wait whose timeout is 0.5 s: the wait already ended.
    async with open_fake_server() as server:
        server.on("GET", answering_with_pushes(lambda i: migrating_frame(i + 1), 0.6))
        config = MaintConfig(mode="enabled", relaxed_timeout=3.0)
        async with trio_maint.open_redis(server.url, socket_timeout=0.5, maintenance=config) as r:
            elapsed, error = await timed(r.get("bad"))
            assert isinstance(error, TimeoutError), error
            assert elapsed == pytest.approx(0.5, abs=0.01)


class _Flooded(Connection):
    """Its socket is always readable, and every read brings more push frames."""

    async def _receive(self, deadline: float, *, eager: bool = False, now: bool = False) -> None:
        await trio.sleep(0.01)
        self._parser.feed(UNKNOWN * 10)

    def _readable(self) -> bool:
        return True


async def test_push_frames_without_end_on_an_idle_connection(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The pool's health check drains push frames that arrived while a connection was
    # idle; frames that never stop must not keep it draining: it gives up, discarding
    # the connection, at its deadline (socket_timeout).
    ours, theirs = socket.socketpair()
    try:
        conn = _Flooded(ClientOptions(socket_timeout=0.5))
        conn._attach(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
        seen: list[object] = []
        conn.push_handler = lambda c, frame: seen.append(frame)
        elapsed_ok: list[object] = []

        async def check() -> None:
            elapsed_ok.append(await conn.check_idle())

        elapsed, error = await timed(check())
        assert error is None and elapsed_ok == [False] and conn.broken
        assert elapsed == pytest.approx(0.5, abs=0.02)
        assert len(seen) > 100
    finally:
        ours.close()
        theirs.close()
