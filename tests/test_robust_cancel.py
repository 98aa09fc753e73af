"""Random cancellation: thousands of commands, each cancelled at a random point.

A cancel point is drawn as "after the k-th scheduling step of the task running the
operation" (a Trio instrument cancels the operation's scope then), so it lands on any
checkpoint: waiting for the pool, dialing, the handshake, writing, reading, or releasing.
Operations whose scope is cancelled are counted and ignored; every operation that
completed must have got its own reply. Afterwards the pool's books must balance.
"""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import MaintConfig
from trio_maint.testing import MaintenanceSimulator, RedisServer

from ._robust import scaled

pytestmark = pytest.mark.trio


class StepCanceller(trio.abc.Instrument):
    """Cancels a registered scope after its task has run a given number of steps."""

    def __init__(self) -> None:
        self.targets: dict[trio.lowlevel.Task, list[Any]] = {}

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        entry = self.targets.get(task)
        if entry is not None:
            entry[0] -= 1
            if entry[0] <= 0:
                del self.targets[task]
                entry[1].cancel()


@pytest.fixture
async def canceller() -> AsyncIterator[StepCanceller]:
    instrument = StepCanceller()
    trio.lowlevel.add_instrument(instrument)
    try:
        yield instrument
    finally:
        trio.lowlevel.remove_instrument(instrument)


class Tally:
    def __init__(self) -> None:
        self.completed = 0
        self.cancelled = 0
        self.errors: list[BaseException] = []


async def run_cancellable(
    canceller: StepCanceller,
    rng: random.Random,
    tally: Tally,
    operation: Callable[[], Awaitable[None]],
    *,
    tolerated: tuple[type[BaseException], ...] = (),
    max_steps: int = 14,
) -> None:
    """Run ``operation`` with a cancel point drawn at random (or none, one time in four)."""
    steps = rng.randint(1, max_steps) if rng.random() < 0.75 else 10**9
    task = trio.lowlevel.current_task()
    done = False
    with trio.CancelScope() as scope:
        canceller.targets[task] = [steps, scope]
        try:
            await operation()
            done = True
        except tolerated as exc:
            tally.errors.append(exc)
        finally:
            canceller.targets.pop(task, None)
    if done:
        tally.completed += 1
    elif scope.cancelled_caught:
        tally.cancelled += 1


def check_pool(r: trio_maint.Redis) -> None:
    """No connection leaked, double-counted, or left marked for handoff unowned."""
    pool = r.pool
    stats = pool.stats()
    assert stats.in_use == 0, stats
    idle = pool.idle_connections
    assert len({c.id for c in idle}) == len(idle), "a connection is idle twice"
    manager = r.maintenance.manager if r.maintenance is not None else None
    owned_by_manager = manager.stats().pending if manager is not None else 0
    assert owned_by_manager == 0
    assert stats.total == stats.idle, stats
    assert pool._borrow.value == pool.pool_size, "a borrow slot leaked"
    if pool._active is not None:
        assert pool._active.value == pool.max_active_conns - stats.total
    for conn in pool.connections:
        assert conn.usable and not conn.in_use, conn
        handler = r.maintenance
        assert handler is None or handler.handoff_target(conn) is None, f"{conn} still marked"


async def one_op(r: trio_maint.Redis, token: str, kind: int, acked: dict[str, str]) -> None:
    """One operation whose reply is checked: ECHO, SET, a pipeline of three ECHOs, or a
    MULTI/EXEC transaction; acknowledged writes go to ``acked``."""
    if kind == 0:
        assert await r.echo(token) == token.encode()
    elif kind == 1:
        await r.set(f"rc:{token}", token)
        acked[f"rc:{token}"] = token
    elif kind == 2:
        async with r.pipeline(transaction=False) as pipe:
            pipe.echo(token + "a").echo(token + "b").echo(token + "c")
            got = await pipe.execute()
        assert got == [f"{token}{s}".encode() for s in "abc"]
    else:
        async with r.pipeline() as pipe:
            pipe.echo(token).set(f"rc:{token}", token)
            got = await pipe.execute()
        assert got == [token.encode(), True]
        acked[f"rc:{token}"] = token


async def workload(
    r: trio_maint.Redis,
    canceller: StepCanceller,
    seed: int,
    *,
    workers: int,
    rounds: int,
    tolerated: tuple[type[BaseException], ...] = (),
) -> Tally:
    """Plain commands, pipelines and transactions with random cancel points; returns the
    tally after checking replies and that acknowledged writes are readable."""
    tally = Tally()
    acked: dict[str, str] = {}

    async def worker(w: int) -> None:
        rng = random.Random(seed * 1000 + w)
        for j in range(rounds):
            op = functools.partial(one_op, r, f"{seed}:{w}:{j}", rng.randrange(4), acked)
            await run_cancellable(canceller, rng, tally, op, tolerated=tolerated)

    async with trio.open_nursery() as nursery:
        for w in range(workers):
            nursery.start_soon(worker, w)
    # No acknowledged write was lost.
    keys = list(acked)
    for start in range(0, len(keys), 200):
        batch = keys[start : start + 200]
        values = await r.mget(*batch)
        assert values == [acked[k].encode() for k in batch]
    return tally


async def test_random_cancellation_of_commands_and_pipelines(
    redis_url: str, canceller: StepCanceller
) -> None:
    total = Tally()
    with trio.fail_after(120 if scaled(0, 1) else 40):
        for seed in range(scaled(3, 20)):
            # Every other client re-dials for every command (idle connections expire at
            # once), so cancel points also fall in the dial and the handshake.
            fresh = {"conn_max_idle_time": 1e-9} if seed % 2 == 0 else {}
            async with trio_maint.open_redis(
                redis_url, pool_size=4, max_active_conns=6, pool_timeout=10, **fresh
            ) as r:
                tally = await workload(r, canceller, seed, workers=8, rounds=scaled(90, 250))
                check_pool(r)
                assert await r.ping() is True
                check_pool(r)
                if fresh:
                    assert r.pool.stats().created > 300, r.pool.stats()
            assert r.pool.connections == []
            total.completed += tally.completed
            total.cancelled += tally.cancelled
    # The draw must actually exercise both outcomes.
    assert total.completed > 300 and total.cancelled > 300, vars(total)


async def test_random_cancellation_of_pubsub_reads(
    r: trio_maint.Redis, canceller: StepCanceller
) -> None:
    """Cancelling ``get_message`` anywhere loses and duplicates nothing."""
    count = scaled(400, 3000)
    received: list[int] = []
    tally = Tally()
    rng = random.Random(11)
    with trio.fail_after(60):
        async with r.pubsub(ignore_subscribe_messages=True) as ps:
            await ps.subscribe("rc:chan")

            async def publisher() -> None:
                for i in range(count):
                    await r.publish("rc:chan", str(i))
                    if i % 50 == 0:
                        await trio.sleep(0.001)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(publisher)
                while len(received) < count:

                    async def read() -> None:
                        message = await ps.get_message(timeout=5)
                        assert message is not None
                        received.append(int(message.data))

                    await run_cancellable(canceller, rng, tally, read, max_steps=3)
    assert received == list(range(count))
    assert tally.cancelled > count // 10, vars(tally)


# ------------------------------------------------------------------ during handoffs


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


async def settle(r: trio_maint.Redis) -> None:
    """Wait until the HandoffManager owns nothing and no delayed handoff is pending, then
    let every marked idle connection reach the manager and come back."""
    manager = r.maintenance.manager if r.maintenance is not None else None
    assert manager is not None
    with trio.fail_after(20):
        while True:
            assert r.maintenance is not None
            handler = r.maintenance
            if manager.stats().pending == 0 and handler.state.pending_handoffs == 0:
                # A marked idle connection is queued when next borrowed: borrow them all.
                marked = [c for c in r.pool.idle_connections if handler.handoff_target(c)]
                if not marked:
                    return
                async with trio.open_nursery() as nursery:
                    for _ in marked:
                        nursery.start_soon(r.ping)
            await trio.sleep(0.02)


async def publish_forever(url: str, channel: str) -> None:
    """Publish 0, 1, 2... from a client of its own (straight to the server), so the pool
    under test stays idle between phases."""
    async with trio_maint.open_redis(url, maintenance=MaintConfig(mode="disabled")) as r:
        for i in range(10**9):
            await r.publish(channel, str(i))
            await trio.sleep(0.002)


async def read_forever(
    ps: Any, canceller: StepCanceller, received: list[int], tally: Tally
) -> None:
    """Read pub/sub messages with random cancel points, forever."""
    rng = random.Random(3)

    async def read() -> None:
        message = await ps.get_message(timeout=0.5)
        if message is not None:
            received.append(int(message.data))

    while True:
        await run_cancellable(canceller, rng, tally, read, max_steps=4)
        await trio.lowlevel.checkpoint()


async def test_random_cancellation_during_handoffs(
    backend: RedisServer,
    sims: tuple[MaintenanceSimulator, MaintenanceSimulator],
    canceller: StepCanceller,
) -> None:
    """MOVING flips the client between two endpoints while cancelled commands run and a
    subscriber (its reads cancelled at random too) follows along."""
    a, b = sims
    config = MaintConfig(endpoint_type="internal-ip", relaxed_timeout=5.0, handoff_timeout=5.0)
    total = Tally()
    with trio.fail_after(120 if scaled(0, 1) else 45):
        async with trio_maint.open_redis(
            f"{a.url}/11", pool_size=6, max_active_conns=10, pool_timeout=10, maintenance=config
        ) as r:
            await r.flushdb()
            received: list[int] = []
            async with r.pubsub(ignore_subscribe_messages=True) as ps, trio.open_nursery() as bg:
                await ps.subscribe("rc:moving")
                bg.start_soon(publish_forever, backend.url, "rc:moving")
                bg.start_soon(read_forever, ps, canceller, received, total)
                for phase in range(scaled(8, 40)):
                    source, target = (a, b) if phase % 2 == 0 else (b, a)

                    async def flip(source: MaintenanceSimulator = source, t: Any = target) -> None:
                        await trio.sleep(0.01)
                        await source.inject_moving(time=15, target=t)

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(flip)
                        tally = await workload(
                            r, canceller, phase, workers=6, rounds=scaled(40, 120)
                        )
                    await settle(r)
                    check_pool(r)
                    total.completed += tally.completed
                    total.cancelled += tally.cancelled
                # The subscriber followed every MOVING and still receives.
                seen = len(received)
                with trio.fail_after(10):
                    while len(received) < seen + 5:
                        await trio.sleep(0.01)
                bg.cancel_scope.cancel()
            # Messages may be lost while the subscriber reconnects, never duplicated or
            # reordered.
            assert received == sorted(set(received)), received
            assert r.maintenance is not None
            state = r.maintenance.state
            assert state.completed_handoffs > 5, state
            assert await r.ping() is True
            check_pool(r)
        assert r.pool.connections == []
    assert total.completed > 500 and total.cancelled > 150, vars(total)


async def test_pubsub_resubscribes_after_a_cancelled_reconnect(r: trio_maint.Redis) -> None:
    """Regression: cancelling the reconnect of a PubSub (after a MOVING or a lost
    connection) forgot that it had to subscribe again, so it went deaf."""
    from trio_maint import PubSub
    from trio_maint.lowlevel import Connection

    delay = [0.0]

    async def factory() -> Connection:
        await trio.sleep(delay[0])
        return await Connection.open(r.options)

    with trio.fail_after(10):
        async with PubSub(
            r.options, ignore_subscribe_messages=True, connection_factory=factory
        ) as ps:
            await ps.subscribe("rc:deaf")
            assert await ps.get_message(timeout=0.2) is None
            for cancel_in in ("connect", "resubscribe"):
                assert ps.connection is not None
                ps.connection.close_nowait()  # lost: reconnect and resubscribe
                if cancel_in == "connect":
                    delay[0] = 5.0
                    with trio.move_on_after(0.1):
                        await ps.get_message()
                else:
                    with trio.CancelScope() as scope:
                        real = ps._subscribe_all  # the resubscription after a reconnect

                        async def cancelled_resubscribe(
                            conn: Connection, scope: trio.CancelScope = scope, real: Any = real
                        ) -> None:
                            scope.cancel()
                            await real(conn)

                        ps._subscribe_all = cancelled_resubscribe  # type: ignore[method-assign]
                        await ps.get_message()
                    del ps._subscribe_all
                delay[0] = 0.0
                assert await ps.get_message(timeout=0.2) is None  # reconnects
                await r.publish("rc:deaf", cancel_in)
                message = await ps.get_message(timeout=2)
                assert message is not None and message.data == cancel_in.encode()


async def test_cancelled_in_the_first_polling_pass_discards_the_connection(
    canceller: StepCanceller, r: trio_maint.Redis
) -> None:
    """The first read after a command was written polls: it passes through the scheduler
    before it reads (``_sansio/spin.py``). Cancelled in that first pass, with the command
    written and its reply unread, the connection is discarded: the next command never
    reads that reply (tests/test_read_spin.py cancels in later passes too).
    """
    await r.set("eager:a", "reply-for-a")
    await r.set("eager:b", "reply-for-b")
    [conn] = r.pool.connections
    conn._spin.skip = 0
    task = trio.lowlevel.current_task()
    with trio.CancelScope() as scope:
        # Step 1 runs from here to the first schedule point: taking the idle connection
        # is only a cancel point (nothing else in use), the write is none, so it is the
        # first polling pass's checkpoint, after the write.
        canceller.targets[task] = [1, scope]
        await r.get("eager:a")
    assert scope.cancelled_caught
    assert conn.broken and conn not in r.pool.connections
    assert await r.get("eager:b") == b"reply-for-b"
