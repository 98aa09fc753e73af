"""Auto-pipelining bounds a command's wait in the queue by ``pool_timeout``, as the pool
bounds a command's wait for a connection: when every batch worker is busy (a stalled
server), a queued command fails with ``PoolTimeoutError`` after ``pool_timeout`` seconds,
unsent, instead of waiting for batch after batch to time out (found by a fresh user's
run: with ``socket_timeout=0.5`` and a paused server, the last of 3,000 commands waited
6 s, twelve reply timeouts).

The decision (``BatchQueue.front``/``expire``) as plain calls; the shell against a fake
server that never answers, on Trio's MockClock (autojump), so the times are exact."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint._sansio.autopipe import BatchQueue

from ._fakeserver import Action, FakeConnection, FakeServer, open_fake_server


def sent(n: int) -> Callable[[FakeServer], bool]:
    """Whether the fake server has read ``n`` GETs."""
    return lambda server: server.count("GET") == n


class Item:
    def __init__(self, name: str, deadline: float) -> None:
        self.name = name
        self.deadline = deadline

    def __repr__(self) -> str:
        return self.name


def test_expire_takes_the_expired_front_and_passes_over_the_withdrawn() -> None:
    q: BatchQueue[Item] = BatchQueue()
    a, b, c, d = Item("a", 1.0), Item("b", 2.0), Item("c", 3.0), Item("d", 4.0)
    for item in (a, b, c, d):
        q.enqueue(item)
    assert q.withdraw(a) is True
    assert q.front() is b  # the withdrawn one in front is passed over (and dropped)
    assert q.expire(lambda item: item.deadline <= 2.5) == [b]
    assert q.waiting == 2 and q.front() is c
    assert q.expire(lambda item: item.deadline <= 2.5) == []  # c has not expired
    assert q.withdraw(c) is True
    assert q.expire(lambda item: item.deadline <= 10.0) == [d]
    assert q.front() is None and q.waiting == 0 and not q.queue


def test_expire_never_returns_a_taken_item() -> None:
    q: BatchQueue[Item] = BatchQueue(max_batch=2)
    items = [Item(str(i), float(i)) for i in range(4)]
    for item in items:
        q.enqueue(item)
    assert q.take() == items[:2]
    assert q.expire(lambda item: True) == items[2:]
    assert q.take() == []


async def never_answer(conn: FakeConnection, args: list[bytes]) -> Action:
    await trio.sleep_forever()


@pytest.mark.trio
async def test_a_command_queued_past_pool_timeout_fails_unsent(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_fake_server() as server:
        server.on("GET", never_answer)
        async with trio_maint.open_redis(
            server.url, auto_pipeline=True, pool_size=10, socket_timeout=30.0, pool_timeout=1.0
        ) as r:
            batcher = r._batcher
            assert batcher is not None
            state = batcher._state
            outcomes: dict[str, tuple[float, BaseException | None]] = {}

            async def get(key: str) -> None:
                start = trio.current_time()
                try:
                    await r.get(key)
                except Exception as exc:
                    outcomes[key] = (trio.current_time() - start, exc)
                else:  # pragma: no cover - the server never answers
                    outcomes[key] = (trio.current_time() - start, None)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(get, "direct")  # straight out: nothing else in flight
                await server.wait_until(lambda s: s.count("GET") == 1)
                for i in range(4):  # one batch per worker, each stuck on its reply
                    nursery.start_soon(get, f"batch{i}")
                    await server.wait_until(sent(i + 2))
                for i in range(10):  # no worker free: these wait in the queue
                    nursery.start_soon(get, f"queued{i}")
                with trio.fail_after(5):
                    while state.waiting < 10:
                        await trio.lowlevel.checkpoint()
                    while len(outcomes) < 10:
                        await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
            assert server.count("GET") == 5  # the queued ten were never sent
            for i in range(10):
                waited, error = outcomes[f"queued{i}"]
                assert isinstance(error, trio_maint.PoolTimeoutError), error
                assert waited == pytest.approx(1.0, abs=0.02)
                assert "pool_timeout" in str(error) and "not sent" in str(error)
            assert state.waiting == 0


@pytest.mark.trio
async def test_without_pool_timeout_a_queued_command_waits_for_a_worker(
    autojump_clock: trio.abc.Clock,
) -> None:
    """``pool_timeout=None`` (wait for ever) bounds nothing: the queued command is sent
    once a worker is free (here when the batches before it timed out)."""
    async with open_fake_server() as server:
        server.on("GET", never_answer)
        async with trio_maint.open_redis(
            server.url, auto_pipeline=True, pool_size=10, socket_timeout=2.0, pool_timeout=None
        ) as r:
            assert r._batcher is not None

            async def timing_out(key: str) -> None:
                with pytest.raises(trio_maint.TimeoutError):
                    await r.get(key)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(timing_out, "direct")
                await server.wait_until(lambda s: s.count("GET") == 1)
                for i in range(4):
                    nursery.start_soon(timing_out, f"batch{i}")
                    await server.wait_until(sent(i + 2))
                start = trio.current_time()
                with pytest.raises(trio_maint.TimeoutError), trio.fail_after(10):
                    await r.get("late")  # sent at 2 s, its own reply timeout 2 s later
                assert trio.current_time() - start == pytest.approx(4.0, abs=0.05)
                nursery.cancel_scope.cancel()
