"""Auto-pipelining (``auto_pipeline=True``): concurrent tasks' data commands written
together, one non-transactional pipeline per batch.

The sans-IO decisions (``_sansio/autopipe.py``: :func:`batchable`, :class:`BatchQueue`)
are tested directly; the Trio shell (``_client/autopipe.py``) against real redis-servers
on free loopback ports, directly or through a :class:`MaintenanceSimulator` (in this
process, in this Trio run) whose ``stall()`` holds every byte, both ways, until
``unstall()``: a command is then in flight for as long as the test needs, with no timer.

Trio runs a batch of ready tasks in an order of its own (shuffled here: pytest-trio makes
the scheduler deterministic-but-shuffled when Hypothesis is installed), so a test that
needs a batch of known content and order builds it with :func:`occupy` and
:func:`start_in_order`: every sender busy, then one command queued at a time.

No assertion here is about time: ``trio.fail_after`` only bounds each test (a hang, e.g.
a blocking command batched with others, fails it instead of stalling the suite).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import ClientOptions, MaintConfig
from trio_maint._client.autopipe import BATCH_WORKERS, AutoPipeliner
from trio_maint._sansio.autopipe import (
    BIG_REPLY,
    DIRECT_AFTER_BIG,
    MAX_BATCH,
    MAX_DIRECT_AFTER_BIG,
    BatchQueue,
    batchable,
)
from trio_maint._sansio.encode import CommandArg
from trio_maint.testing import MaintenanceSimulator, RedisServer

TIMEOUT = 30.0
DB = 3  # on this module's own redis-server (the simulators forward to it)

Batches = list[list[tuple[CommandArg, ...]]]
Job = Callable[[], Awaitable[object]]


# ------------------------------------------------------------------ fixtures and helpers


@pytest.fixture(scope="module")
def backend() -> Iterator[RedisServer]:
    """A redis-server of this module's own, behind the simulators."""
    with RedisServer() as server:
        yield server


@pytest.fixture
async def sim(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=backend) as simulator:
        yield simulator


@pytest.fixture
async def sim_b(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    """The endpoint a MOVING sends clients to (the same data behind it)."""
    async with MaintenanceSimulator(backend=backend) as simulator:
        yield simulator


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> Batches:
    """Every batch the batch workers send (each as its commands), in order: a spy on
    ``AutoPipeliner._run_batch`` that changes nothing (it calls the original)."""
    seen: Batches = []
    original = AutoPipeliner._run_batch

    async def spy(self: AutoPipeliner, batch: list[Any], conn: Any) -> None:
        seen.append([item.args for item in batch])
        await original(self, batch, conn)

    monkeypatch.setattr(AutoPipeliner, "_run_batch", spy)
    return seen


def sim_url(simulator: MaintenanceSimulator) -> str:
    return f"{simulator.url}/{DB}"


def stalled_client(simulator: MaintenanceSimulator, **options: Any) -> Any:
    """An auto-pipelining client for the stall tests: no socket timeout (a stalled reply
    is waited for, however slow the machine) and no idle-connection maintenance (nothing
    but the test's own commands is written)."""
    settings: dict[str, Any] = {
        "auto_pipeline": True,
        "pool_size": 16,
        "socket_timeout": None,
        "conn_max_idle_time": None,
    }
    return trio_maint.open_redis(sim_url(simulator), **(settings | options))


async def settle() -> None:
    """Until every task of the run (the client's, the simulator's, the test's) waits: a
    command just started has then been written (and read by the stalled simulator), or
    queued, or parked."""
    await trio.testing.wait_all_tasks_blocked()


def recording(r: trio_maint.Redis, outcomes: dict[str, object]) -> Callable[[str], Awaitable[None]]:
    """A task body: ``GET key`` into ``outcomes[key]``, its reply or the exception."""

    async def run(key: str) -> None:
        try:
            outcomes[key] = await r.get(key)
        except Exception as exc:
            outcomes[key] = exc

    return run


def assert_all_closed(outcomes: dict[str, object]) -> None:
    """Every command of ``outcomes`` raised ConnectionClosedError."""
    failed = {k for k, v in outcomes.items() if isinstance(v, trio_maint.ConnectionClosedError)}
    assert failed == set(outcomes), outcomes


async def warm(r: trio_maint.Redis, count: int) -> None:
    """Open ``count`` idle connections (dialing through a stalled simulator would hang)."""
    conns = [await r.pool.acquire() for _ in range(count)]
    for conn in conns:
        r.pool.release(conn)


def bytes_in(simulator: MaintenanceSimulator) -> dict[int, int]:
    """Bytes each open connection has sent the simulator so far (counted before the
    stall gate: a stalled connection's request is counted, not forwarded)."""
    return {c.id: c.bytes_from_client for c in simulator.connections}


def written_to(simulator: MaintenanceSimulator, before: dict[int, int]) -> set[int]:
    """Connections that sent something since ``before``."""
    return {cid for cid, n in bytes_in(simulator).items() if n != before.get(cid, 0)}


async def occupy(
    r: trio_maint.Redis,
    simulator: MaintenanceSimulator,
    nursery: trio.Nursery,
    run: Callable[[str], Awaitable[object]] | None = None,
) -> None:
    """Stall ``simulator`` and keep every sender of ``r`` busy: the command that goes
    straight out, then one single-command batch per worker, each written (and held) before
    the next starts (``r`` needs ``BATCH_WORKERS + 1`` idle connections: :func:`warm`).
    Commands started next stay queued until ``unstall()``; then the first worker to come
    free takes them all, in the order they were queued, as one batch. ``run(key)`` sends
    each held command (default ``r.get``)."""
    send = r.get if run is None else run
    before = bytes_in(simulator)
    simulator.stall()
    for i in range(BATCH_WORKERS + 1):
        nursery.start_soon(send, f"ap:occupy:{i}")
        await settle()
    assert len(written_to(simulator, before)) == BATCH_WORKERS + 1


async def start_in_order(nursery: trio.Nursery, jobs: Sequence[Job]) -> None:
    """Start ``jobs`` one at a time, each parked (queued) before the next starts."""
    for job in jobs:
        nursery.start_soon(job)
        await settle()


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` (the caller bounds this with ``trio.fail_after``)."""
    while not predicate():
        await trio.sleep(0.01)


# ------------------------------------------------------------------ 1. sans-IO decisions


@pytest.mark.parametrize(
    "args",
    [
        ("GET", "k"),
        ("get", "k"),
        (b"GET", b"k"),
        (b"get", b"k"),
        ("GeT", "k"),
        (b"GeT", b"k"),
        ("SET", "k", "v"),
        ("INCR", "k"),
        ("HGETALL", "h"),
        ("PING",),
    ],
)
def test_batchable_data_commands(args: tuple[CommandArg, ...]) -> None:
    assert batchable(args) is True


@pytest.mark.parametrize(
    "args",
    [
        ("BLPOP", "l", 0),
        ("BRPOP", "l", 0),
        ("XREAD", "STREAMS", "s", "0"),  # without BLOCK too: XREAD is a blocking command
        ("XREAD", "BLOCK", 0, "STREAMS", "s", "$"),
        ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),
        ("WAIT", 1, 0),
        ("SELECT", 1),
        ("WATCH", "k"),
        ("MULTI",),
        ("EXEC",),
        ("EVAL", "return 1", 0),
        ("EVALSHA", "0" * 40, 0),
        ("FCALL", "f", 0),
        ("CLIENT", "SETNAME", "x"),
        ("SUBSCRIBE", "ch"),
        ("AUTH", "pw"),
        ("HELLO", 3),
        ("READONLY",),
        (b"blpop", b"l", b"0"),
        ("select", 1),
        ("G\xc9T".encode("latin-1"), b"k"),  # a non-ASCII bytes name
        (b"\xff\xfe", b"k"),
        (1, "k"),  # an int name
        (),
    ],
)
def test_not_batchable(args: tuple[CommandArg, ...]) -> None:
    assert batchable(args) is False


def test_batchable_writable_memoryview_name_is_false() -> None:
    assert batchable((memoryview(bytearray(b"GET")), b"k")) is False


def test_batch_queue_start_is_true_only_for_the_first_in_flight_command() -> None:
    q: BatchQueue[object] = BatchQueue()
    assert q.start() is True  # nothing else in flight: straight out
    assert q.start() is False
    assert q.start() is False
    assert q.in_flight == 3
    q.done()
    q.done()
    assert q.in_flight == 1
    assert q.start() is False  # one still in flight
    q.done(2)  # done(count) decrements by count
    assert q.in_flight == 0
    assert q.start() is True  # idle again: the next command goes straight out


def test_batch_queue_enqueue_wakes_only_when_the_queue_was_empty() -> None:
    q: BatchQueue[str] = BatchQueue()
    assert q.enqueue("a") is True
    assert q.enqueue("b") is False
    assert q.enqueue("c") is False
    assert q.take() == ["a", "b", "c"]
    assert q.take() == []
    assert q.enqueue("d") is True  # empty again


def test_batch_queue_take_is_oldest_first_and_at_most_max_batch() -> None:
    q: BatchQueue[int] = BatchQueue(max_batch=3)
    for i in range(8):
        q.enqueue(i)
    assert q.take() == [0, 1, 2]
    assert q.take() == [3, 4, 5]
    assert q.take() == [6, 7]
    assert q.take() == []
    assert BatchQueue().max_batch == MAX_BATCH
    big: BatchQueue[int] = BatchQueue()
    for i in range(MAX_BATCH + 5):
        big.enqueue(i)
    assert big.take() == list(range(MAX_BATCH))
    assert big.take() == list(range(MAX_BATCH, MAX_BATCH + 5))


def test_batch_queue_withdraw() -> None:
    q: BatchQueue[object] = BatchQueue()
    a, b, c, stranger = object(), object(), object(), object()
    for item in (a, b, c):
        q.enqueue(item)
    assert q.withdraw(b) is True  # queued: removed, never sent
    assert q.withdraw(b) is False  # already gone
    assert q.withdraw(stranger) is False
    assert q.take() == [a, c]
    assert q.withdraw(a) is False  # a batch took it
    assert q.enqueue(b) is True  # the queue is empty: a wake-up is due again
    assert q.withdraw(b) is True
    assert list(q.queue) == []


def test_batch_queue_withdraw_is_o1_and_take_passes_over_the_withdrawn() -> None:
    q: BatchQueue[object] = BatchQueue(max_batch=4)
    items = [object() for _ in range(10)]
    for item in items:
        q.enqueue(item)
    for item in items[1:9:2]:  # 1, 3, 5, 7
        assert q.withdraw(item) is True
    assert q.waiting == 6
    assert len(q.queue) == 10  # marked, not searched for
    assert q.take() == [items[0], items[2], items[4], items[6]]
    assert q.take() == [items[8], items[9]]
    assert q.waiting == 0 and not q.queue
    # Withdrawn ones left behind a full batch are dropped once nothing waits.
    for item in items[:6]:
        q.enqueue(item)
    assert q.withdraw(items[5]) is True
    assert q.take() == items[:4]
    assert q.withdraw(items[4]) is True  # the last one waiting
    assert not q.queue and q.waiting == 0 and q.take() == []


def test_batch_queue_requeue_puts_taken_items_first_again() -> None:
    q: BatchQueue[str] = BatchQueue()
    for item in "abcd":
        q.enqueue(item)
    taken = q.take()
    assert q.withdraw("b") is False  # taken: no longer waiting
    q.enqueue("e")
    q.requeue(["a", "c", "d"])
    assert q.waiting == 4
    assert q.withdraw("c") is True  # waiting again: may be withdrawn
    assert q.take() == ["a", "d", "e"]
    assert taken == ["a", "b", "c", "d"]


def test_batch_queue_big_replies_send_the_next_commands_straight_out() -> None:
    q: BatchQueue[object] = BatchQueue()
    assert q.start() is True
    assert q.start() is False  # a second command in flight: it would batch
    q.batch_replied(4, 4 * BIG_REPLY)  # on average not past BIG_REPLY: batching goes on
    assert q.start() is False
    q.batch_replied(4, 4 * BIG_REPLY + 1)
    assert [q.start() for _ in range(DIRECT_AFTER_BIG)] == [True] * DIRECT_AFTER_BIG
    assert q.start() is False  # then a batch is tried again
    assert q.in_flight == 3 + DIRECT_AFTER_BIG + 1


def test_batch_queue_big_batches_in_a_row_double_the_direct_run() -> None:
    q: BatchQueue[object] = BatchQueue()
    runs = []
    for _ in range(9):
        q.batch_replied(2, 2 * BIG_REPLY + 2)
        runs.append(q.direct_left)
        q.direct_left = 0
    assert runs[:3] == [DIRECT_AFTER_BIG, 2 * DIRECT_AFTER_BIG, 4 * DIRECT_AFTER_BIG]
    assert runs[-1] == MAX_DIRECT_AFTER_BIG == 64 * DIRECT_AFTER_BIG
    q.batch_replied(2, 20)  # a batch of small replies ends the streak
    q.batch_replied(2, 2 * BIG_REPLY + 2)
    assert q.direct_left == DIRECT_AFTER_BIG
    # Another worker's big batch, taken before the run began, ends during it: no doubling.
    q.start()
    q.batch_replied(2, 2 * BIG_REPLY + 2)
    assert q.direct_left == DIRECT_AFTER_BIG - 1 and q.direct_after_big == DIRECT_AFTER_BIG


# ------------------------------------------------------------------ 2. batching, real server


@pytest.mark.trio
async def test_big_values_stop_batching(redis_url: str, batches: Batches) -> None:
    """After a batch of 100 KiB replies, commands go out on connections of their own (one
    batch, not one per round): 10 tasks x 20 GETs of a 100 KiB value, then the same with
    16-byte values, which keep batching."""
    async with trio_maint.open_redis(redis_url, pool_size=10, auto_pipeline=True) as r:
        with trio.fail_after(TIMEOUT):
            for key, value in (("ap:big", b"b" * 100 * 1024), ("ap:small", b"s" * 16)):
                await r.set(key, value)
                batches.clear()

                async def task(key: str = key, value: bytes = value) -> None:
                    for _ in range(20):
                        assert await r.get(key) == value

                async with trio.open_nursery() as nursery:
                    for _ in range(10):
                        nursery.start_soon(task)
                if key == "ap:big":
                    assert 1 <= len(batches) <= 2  # 200 < DIRECT_AFTER_BIG commands
                else:
                    assert len(batches) > 5


async def _incr_workload(url: str, *, auto: bool) -> trio_maint.lowlevel.PoolStats:
    """50 tasks each INCR their own key 200 times then GET it; returns the pool's stats."""
    async with trio_maint.open_redis(url, pool_size=50, auto_pipeline=auto) as r:
        keys = [f"ap:incr:{i}" for i in range(50)]
        await r.delete(*keys)
        finals: dict[str, object] = {}
        last_incr: dict[str, int] = {}

        async def task(key: str) -> None:
            for _ in range(200):
                last_incr[key] = await r.execute_command("INCR", key)
            finals[key] = await r.get(key)

        async with trio.open_nursery() as nursery:
            for key in keys:
                nursery.start_soon(task, key)
        assert last_incr == dict.fromkeys(keys, 200)
        assert finals == dict.fromkeys(keys, b"200")
        stats: trio_maint.lowlevel.PoolStats = r.pool.stats()
        return stats


@pytest.mark.trio
async def test_concurrent_incr_is_correct_and_batched(redis_url: str, batches: Batches) -> None:
    with trio.fail_after(TIMEOUT):
        batched = await _incr_workload(redis_url, auto=True)
        assert batches and max(len(b) for b in batches) > 1  # commands really shared writes
        batches.clear()
        plain = await _incr_workload(redis_url, auto=False)
        assert batches == []  # no batch without auto_pipeline
    # One connection for the command that goes straight out, one per batch worker.
    assert batched.created <= BATCH_WORKERS + 1
    # The same run without auto-pipelining needs a connection per busy task: the contrast
    # shows the number above measures batching.
    assert plain.created > 10


# ------------------------------------------------------------------ 3. an error reply


async def _error_round(
    r: trio_maint.Redis, sim: MaintenanceSimulator, rnd: int, batches: Batches
) -> None:
    """One batch of 21 commands, queued in a known order: 10 GET, 10 SET and an INCR of
    a text value at place ``5 * rnd`` (first, middle, last, ...)."""
    for i in range(10):
        await r.set(f"ap:err:get:{i}", f"g{rnd}-{i}")
    outcomes: dict[str, object] = {}

    def get(i: int) -> Job:
        async def job() -> None:
            outcomes[f"get{i}"] = await r.get(f"ap:err:get:{i}")

        return job

    def put(i: int) -> Job:
        async def job() -> None:
            outcomes[f"set{i}"] = await r.set(f"ap:err:set:{i}", f"s{rnd}-{i}")

        return job

    async def bad_incr() -> None:
        try:
            await r.execute_command("INCR", "ap:err:text")
        except trio_maint.ResponseError as exc:
            outcomes["incr"] = exc

    jobs: list[Job] = []
    commands: list[tuple[CommandArg, ...]] = []
    for i in range(10):
        jobs += [get(i), put(i)]
        commands += [("GET", f"ap:err:get:{i}"), ("SET", f"ap:err:set:{i}", f"s{rnd}-{i}")]
    jobs.insert(5 * rnd, bad_incr)
    commands.insert(5 * rnd, ("INCR", "ap:err:text"))
    try:
        async with trio.open_nursery() as nursery:
            await occupy(r, sim, nursery)
            batches.clear()
            await start_in_order(nursery, jobs)
            sim.unstall()
    finally:
        sim.unstall()
    assert batches == [commands]  # one batch: the failing INCR among commands that succeed
    error = outcomes.pop("incr")
    assert isinstance(error, trio_maint.ResponseError)
    assert "not an integer" in str(error)
    assert outcomes == {
        **{f"get{i}": f"g{rnd}-{i}".encode() for i in range(10)},
        **{f"set{i}": True for i in range(10)},
    }
    for i in range(10):
        assert await r.get(f"ap:err:set:{i}") == f"s{rnd}-{i}".encode()


@pytest.mark.trio
async def test_error_reply_fails_only_its_own_command(
    sim: MaintenanceSimulator, batches: Batches
) -> None:
    with trio.fail_after(TIMEOUT):
        async with stalled_client(sim) as r:
            await r.set("ap:err:text", "not a number")
            await warm(r, BATCH_WORKERS + 1)
            for rnd in range(5):  # the INCR 1st, 6th, 11th, 16th, 21st of its batch
                await _error_round(r, sim, rnd, batches)
            assert await r.get("ap:err:text") == b"not a number"


# ------------------------------------------------------------------ 4. cancelled while queued


@pytest.mark.trio
async def test_cancelled_while_queued_is_never_sent(sim: MaintenanceSimulator) -> None:
    """Every sender busy on the stalled server (the command that went straight out, a
    batch per worker): a SET stays queued; its task is cancelled; it is never sent.

    Why this fails without ``withdraw`` (``abort`` only marking the command abandoned): the
    cancelled SET would stay in the queue; the marker SET queued after it joins the same
    queue, and the first worker to come free takes both (``take()`` takes everything
    queued, oldest first) into one pipeline, so once the marker's reply is in, the SET of
    ``ap:never`` has run and the key exists. (Checked by running this test against that
    change: it fails on ``exists``.)
    """
    with trio.fail_after(TIMEOUT):
        async with stalled_client(sim) as r:
            await r.delete("ap:never", "ap:after")
            await warm(r, BATCH_WORKERS + 1)
            replies: dict[str, object] = {}
            scope = trio.CancelScope()

            async def never() -> None:
                with scope:
                    replies["never"] = await r.set("ap:never", 1)

            async def after() -> None:
                replies["after"] = await r.set("ap:after", 1)

            try:
                async with trio.open_nursery() as nursery:
                    await occupy(r, sim, nursery)
                    held = bytes_in(sim)
                    nursery.start_soon(never)
                    await settle()
                    assert bytes_in(sim) == held  # queued: no worker is free
                    scope.cancel()
                    await settle()
                    assert scope.cancelled_caught
                    assert "never" not in replies
                    nursery.start_soon(after)  # queued behind where the SET was
                    await settle()
                    assert bytes_in(sim) == held
                    sim.unstall()
            finally:
                sim.unstall()
            assert replies == {"after": True}
            assert await r.exists("ap:never") == 0
            assert await r.get("ap:after") == b"1"


# ------------------------------------------------------------------ 5. cancelled in a batch


async def _drop_round(
    r: trio_maint.Redis,
    sim: MaintenanceSimulator,
    rnd: int,
    batches: Batches,
) -> None:
    keys = [f"ap:drop:{i}" for i in range(5)]
    dropped = keys[2]
    await r.mset({key: f"{key}={rnd}" for key in keys})
    created = r.pool.stats().created
    batches.clear()
    replies: dict[str, object] = {}
    scope = trio.CancelScope()

    async def get(key: str) -> None:
        replies[key] = await r.get(key)

    async def cancelled(key: str) -> None:
        with scope:
            replies[key] = await r.get(key)

    before = bytes_in(sim)
    sim.stall()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(get, "ap:drop:hold")
            await settle()
            # In one go: one batch (the worker runs after all five queued), the cancelled
            # one at a place Trio's scheduler picks (it shuffles), so it varies by round.
            for key in keys:
                nursery.start_soon(cancelled if key == dropped else get, key)
            await settle()
            # Written: one connection for the straight GET, one for the batch.
            assert len(written_to(sim, before)) == 2
            assert [len(b) for b in batches] == [5]
            scope.cancel()
            await settle()
            assert scope.cancelled_caught
            assert replies == {}
            sim.unstall()
    finally:
        sim.unstall()
    assert replies == {
        "ap:drop:hold": None,
        **{key: f"{key}={rnd}".encode() for key in keys if key != dropped},
    }
    stats = r.pool.stats()
    # The batch's connection was kept (its dropped reply read), not replaced: nothing
    # new was dialed, nothing removed, nothing found stale.
    assert (stats.created, stats.removed, stats.stale) == (created, 0, 0)
    assert stats.in_use == 0 and stats.idle == stats.total == 2
    # Every connection answers the next command with that command's reply.
    conns = [await r.pool.acquire() for _ in range(stats.idle)]
    try:
        for conn in conns:
            assert await conn.execute(("GET", keys[3])) == f"{keys[3]}={rnd}".encode()
    finally:
        for conn in conns:
            r.pool.release(conn)
    async with trio.open_nursery() as nursery:
        for key in keys:
            nursery.start_soon(get, key)
    assert replies == {
        "ap:drop:hold": None,
        **{key: f"{key}={rnd}".encode() for key in keys},
    }


@pytest.mark.trio
async def test_cancelled_after_its_batch_took_it_leaves_the_connection_clean(
    sim: MaintenanceSimulator, batches: Batches
) -> None:
    """Each round: a straight command holds the stalled server, then a batch of five GETs
    is written and one task (of ``ap:drop:2``) is cancelled while the replies are held; after
    the stall the other four get their own values (no reply shifted by one), the batch's
    connection goes back to the pool (its dropped reply was read) and every connection of
    the pool answers the next command with that command's reply."""
    with trio.fail_after(TIMEOUT):
        async with stalled_client(sim) as r:
            await warm(r, 2)
            for rnd in range(10):
                await _drop_round(r, sim, rnd, batches)


# ------------------------------------------------------------------ 6. the client closing


@pytest.mark.trio
async def test_closing_fails_queued_and_batched_commands(sim: MaintenanceSimulator) -> None:
    """Commands in flight when the client's block exits (run by tasks of an outer nursery
    that outlives it): those in a batch and those still queued raise
    ConnectionClosedError, none hangs."""
    outcomes: dict[str, object] = {}
    with trio.fail_after(TIMEOUT):
        try:
            async with trio.open_nursery() as outer:
                async with stalled_client(sim) as r:
                    run = recording(r, outcomes)
                    await warm(r, BATCH_WORKERS + 1)
                    await occupy(r, sim, outer, run)
                    held = bytes_in(sim)
                    for i in range(3):
                        outer.start_soon(run, f"ap:queued:{i}")
                    await settle()
                    assert bytes_in(sim) == held  # not written: queued
                    assert outcomes == {}
                # The block has exited: the client is closed.
        finally:
            sim.unstall()
    assert set(outcomes) == {f"ap:occupy:{i}" for i in range(BATCH_WORKERS + 1)} | {
        f"ap:queued:{i}" for i in range(3)
    }
    # Queued, in a batch, and (as without auto-pipelining) the one that went straight out.
    assert_all_closed(outcomes)


@pytest.mark.trio
async def test_closing_fails_batches_waiting_for_a_connection(sim: MaintenanceSimulator) -> None:
    """As above with ``pool_size=2``: one batch written, a worker waiting for a pool
    connection, more commands queued behind it: the client closing
    fails every one with ConnectionClosedError, none hangs."""
    outcomes: dict[str, object] = {}
    with trio.fail_after(TIMEOUT):
        try:
            async with trio.open_nursery() as outer:
                async with stalled_client(sim, pool_size=2) as r:
                    run = recording(r, outcomes)
                    await warm(r, 2)
                    before = bytes_in(sim)
                    sim.stall()
                    for i in range(BATCH_WORKERS + 1):  # straight, then a batch per worker
                        outer.start_soon(run, f"ap:held:{i}")
                        await settle()
                    assert len(written_to(sim, before)) == 2  # the others wait for the pool
                    # A worker waits for a connection before it takes the queued commands.
                    assert r.pool.waiting >= 1
                    held = bytes_in(sim)
                    for i in range(3):
                        outer.start_soon(run, f"ap:queued:{i}")
                    await settle()
                    assert bytes_in(sim) == held
                    assert outcomes == {}
        finally:
            sim.unstall()
    assert set(outcomes) == {f"ap:held:{i}" for i in range(BATCH_WORKERS + 1)} | {
        f"ap:queued:{i}" for i in range(3)
    }
    assert_all_closed(outcomes)


@pytest.mark.trio
async def test_commands_after_close_raise_connection_closed(redis_url: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(redis_url, auto_pipeline=True) as r:
            await r.ping()
        with pytest.raises(trio_maint.ConnectionClosedError):
            await r.get("ap:closed")


# ------------------------------------------------------------------ 7. blocking commands


@pytest.mark.trio
async def test_blocking_command_is_not_batched(
    sim: MaintenanceSimulator, backend: RedisServer, batches: Batches
) -> None:
    """A BLPOP started among 100 GETs while every sender is busy: the GETs queue (and go
    as one batch), the BLPOP goes out at once on a connection of its own and blocks in the
    server until an LPUSH sent after every GET has its reply.

    Queued with the GETs instead, it would be in their batch, whose replies are handed
    out only once all are read: the GETs would wait for the BLPOP, the BLPOP for the
    LPUSH sent after the GETs, a deadlock ``fail_after`` turns into a failure (``BLPOP
    ... 0``, no server-side timeout, makes it a real deadlock rather than a delay).
    """
    key = "ap:blk:list"
    with trio.fail_after(TIMEOUT):
        async with (
            stalled_client(sim) as r,
            trio_maint.open_redis(f"{backend.url}/{DB}") as admin,  # not through the sim
        ):
            await admin.delete(key)
            await admin.mset({f"ap:blk:{i}": f"v{i}" for i in range(100)})
            await warm(r, BATCH_WORKERS + 2)  # one idle connection left for the BLPOP
            got: dict[int, object] = {}
            popped: list[object] = []
            all_got = trio.Event()

            def get(i: int) -> Job:
                async def job() -> None:
                    got[i] = await r.get(f"ap:blk:{i}")
                    if len(got) == 100:
                        all_got.set()

                return job

            async def pop() -> None:
                popped.append(await r.blpop(key, timeout=0))

            try:
                async with trio.open_nursery() as nursery:
                    await occupy(r, sim, nursery)
                    batches.clear()
                    await start_in_order(nursery, [get(i) for i in range(50)])
                    held = bytes_in(sim)
                    await start_in_order(nursery, [pop])
                    assert len(written_to(sim, held)) == 1  # written at once, alone
                    held = bytes_in(sim)
                    await start_in_order(nursery, [get(i) for i in range(50, 100)])
                    assert bytes_in(sim) == held  # the GETs are queued
                    sim.unstall()
                    await all_got.wait()
                    assert popped == []  # the GETs did not wait for the BLPOP
                    blocked = 0
                    while blocked == 0:  # until the server has the BLPOP blocked
                        text = await admin.execute_command("CLIENT", "LIST")
                        assert isinstance(text, bytes)
                        blocked = sum(
                            "cmd=blpop" in line and " flags=b " in line
                            for line in text.decode().splitlines()
                        )
                        if blocked == 0:
                            await trio.sleep(0.01)
                    assert blocked == 1
                    await admin.lpush(key, "woken")
            finally:
                sim.unstall()
            assert popped == [[key.encode(), b"woken"]]
            assert got == {i: f"v{i}".encode() for i in range(100)}
            assert [len(batch) for batch in batches] == [100]  # the GETs, one batch
            assert all(cmd[0] == "GET" for batch in batches for cmd in batch)


# ------------------------------------------------------------------ 8. maintenance


@pytest.mark.trio
async def test_moving_under_auto_pipelined_load_loses_nothing(
    sim: MaintenanceSimulator,
    sim_b: MaintenanceSimulator,
    batches: Batches,
) -> None:
    """20 tasks SET then GET their own key in a loop, auto-pipelined, while the endpoint
    moves (MOVING to B, A's old connections closed after 1 s): no command fails, every
    GET reads its task's last SET, and each acknowledged write is there afterwards."""
    failures: list[BaseException] = []
    acked: dict[str, int] = {}
    ops = 0
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(
            sim_url(sim), pool_size=20, auto_pipeline=True, maintenance=MaintConfig()
        ) as r:
            handler = r.maintenance
            assert handler is not None
            keys = [f"ap:mv:{i}" for i in range(20)]
            await r.delete(*keys)
            stop = trio.Event()

            async def worker(key: str) -> None:
                nonlocal ops
                n = 0
                while not stop.is_set():
                    n += 1
                    try:
                        await r.set(key, n)
                        value = await r.get(key)
                    except Exception as exc:  # counted: the test asserts there are none
                        failures.append(exc)
                        continue
                    if value != str(n).encode():
                        failures.append(AssertionError(f"{key}: read {value!r} after SET {n}"))
                    acked[key] = n
                    ops += 1

            async with trio.open_nursery() as nursery:
                for key in keys:
                    nursery.start_soon(worker, key)
                await wait_until(lambda: ops >= 300)
                # The load is auto-pipelined: a handful of connections for 20 busy tasks.
                assert sim.accepted <= BATCH_WORKERS + 1
                sim.set_backend(sim_b)
                batches_before_moving = len(batches)
                await sim.inject_moving(time=1, target=sim_b, remember=True)
                old = set(sim.close_connections(after=1.0))

                def moved() -> bool:
                    return (
                        handler.state.completed_handoffs >= 1
                        and not old & {c.id for c in sim.connections}
                        and bool(r.pool.connections)
                        and all(c.port == sim_b.port for c in r.pool.connections)
                    )

                await wait_until(moved)
                after_move = ops
                await wait_until(lambda: ops >= after_move + 300)
                stop.set()
            assert failures == []
            assert len(batches) > batches_before_moving  # batches ran through the move
            assert set(acked) == set(keys)
            assert dict(zip(keys, await r.mget(*keys), strict=True)) == {
                key: str(acked[key]).encode() for key in keys
            }
            assert handler.state.failed_handoffs == 0
            assert all(c.port == sim_b.port for c in r.pool.connections)


# ------------------------------------------------------------------ 9. the URL option


def test_url_query_parameter_sets_auto_pipeline() -> None:
    assert ClientOptions.from_url("redis://127.0.0.1:1/0").auto_pipeline is False
    for text in ("true", "1", "yes", "on"):
        assert ClientOptions.from_url(f"redis://127.0.0.1:1/0?auto_pipeline={text}").auto_pipeline
    for text in ("false", "0", "no", "off"):
        url = f"redis://127.0.0.1:1/0?auto_pipeline={text}"
        assert ClientOptions.from_url(url).auto_pipeline is False
    with pytest.raises(ValueError, match="boolean"):
        ClientOptions.from_url("redis://127.0.0.1:1/0?auto_pipeline=maybe")


async def _thirty_gets(url: str) -> tuple[bool, int]:
    """30 GETs started in one go: ``(options.auto_pipeline, connections created)``."""
    async with trio_maint.open_redis(url, pool_size=40) as r:
        await r.set("ap:url", "v")
        got: list[object] = []

        async def get() -> None:
            got.append(await r.get("ap:url"))

        async with trio.open_nursery() as nursery:
            for _ in range(30):
                nursery.start_soon(get)
        assert got == [b"v"] * 30
        return r.options.auto_pipeline, r.pool.stats().created


@pytest.mark.trio
async def test_url_query_parameter_turns_batching_on(redis_url: str, batches: Batches) -> None:
    """30 GETs started in one go: with ``?auto_pipeline=true`` one goes straight out and
    the others share one batch (two connections); with ``=false`` each dials its own."""
    with trio.fail_after(TIMEOUT):
        auto, created_auto = await _thirty_gets(f"{redis_url}?auto_pipeline=true")
        assert auto is True
        assert [len(b) for b in batches] == [29]
        plain, created_plain = await _thirty_gets(f"{redis_url}?auto_pipeline=false")
        assert plain is False
        assert [len(b) for b in batches] == [29]  # nothing batched since
    assert created_auto <= 2
    assert created_plain > 10


# ------------------------------------------------------------------ 10. timeouts, pipelines


@pytest.mark.trio
async def test_explicit_timeouts_and_pipelines_work_alongside(redis_url: str) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(redis_url, auto_pipeline=True, pool_size=30) as r:
            await r.mset({f"ap:mix:{i}": f"m{i}" for i in range(20)})
            results: dict[str, object] = {}

            async def batched(i: int) -> None:
                results[f"get{i}"] = await r.get(f"ap:mix:{i}")

            async def timed(i: int) -> None:
                results[f"timed{i}"] = await r.execute_command("GET", f"ap:mix:{i}", timeout=1.0)

            async def piped(i: int) -> None:
                async with r.pipeline(transaction=i % 2 == 0) as pipe:
                    pipe.set(f"ap:mix:p{i}", i).incr(f"ap:mix:p{i}").get(f"ap:mix:{i}")
                    results[f"pipe{i}"] = await pipe.execute()

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(batched, i)
                    nursery.start_soon(timed, i)
                    if i < 6:
                        nursery.start_soon(piped, i)
            assert results == {
                **{f"get{i}": f"m{i}".encode() for i in range(20)},
                **{f"timed{i}": f"m{i}".encode() for i in range(20)},
                **{f"pipe{i}": [True, i + 1, f"m{i}".encode()] for i in range(6)},
            }
            # A pipeline holding a WATCH (its own connection) while others batch.
            async with r.pipeline() as pipe:
                await pipe.watch("ap:mix:0")
                current = await pipe.get("ap:mix:0")
                pipe.multi()
                pipe.set("ap:mix:0", (current or b"") + b"!")
                async with trio.open_nursery() as nursery:
                    for i in range(1, 20):
                        nursery.start_soon(batched, i)
                assert await pipe.execute() == [True]
            assert await r.get("ap:mix:0") == b"m0!"


@pytest.mark.trio
async def test_explicit_timeout_is_honoured_not_batched(sim: MaintenanceSimulator) -> None:
    """With no socket timeout and a command in flight on the stalled server, a GET with
    ``timeout=0.2`` raises TimeoutError: it went on a connection of its own with its own
    timeout. Batched instead, it would wait (with no timeout) until the test's
    ``fail_after``."""
    with trio.fail_after(TIMEOUT):
        async with stalled_client(sim) as r:
            await r.set("ap:t", "x")
            await warm(r, 2)
            held: list[object] = []

            async def hold() -> None:
                held.append(await r.get("ap:t"))

            sim.stall()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(hold)
                    await settle()
                    with pytest.raises(trio_maint.TimeoutError):
                        await r.execute_command("GET", "ap:t", timeout=0.2)
                    sim.unstall()
            finally:
                sim.unstall()
            assert held == [b"x"]
            assert await r.execute_command("GET", "ap:t", timeout=5.0) == b"x"


# ------------------------------------------------------------------ library bugs found
#
# Strict xfails: each asserts the behaviour auto-pipelining should have and fails today
# for the reason given (remove the marker once fixed: a strict xfail that passes fails).
# The async ones cannot name the exception (``raises=``): pytest-trio hands the failed
# assertion on inside an ExceptionGroup.


@pytest.mark.trio
async def test_unencodable_argument_fails_only_its_own_command(
    sim: MaintenanceSimulator, batches: Batches
) -> None:
    keys = [f"ap:data:{i}" for i in range(10)]
    outcomes: dict[str, object] = {}

    def put(key: str, value: Any) -> Job:
        async def job() -> None:
            try:
                outcomes[key] = await r.set(key, value)
            except trio_maint.DataError as exc:
                outcomes[key] = exc

        return job

    with trio.fail_after(TIMEOUT):
        async with stalled_client(sim) as r:
            await r.delete(*keys)
            await warm(r, BATCH_WORKERS + 1)
            jobs = [put(key, key) for key in keys]
            jobs.insert(5, put("ap:data:bad", None))  # r.set(key, None): refused, not sent
            try:
                async with trio.open_nursery() as nursery:
                    await occupy(r, sim, nursery)
                    batches.clear()
                    await start_in_order(nursery, jobs)
                    sim.unstall()
            finally:
                sim.unstall()
            # The ten valid SETs shared one batch: with the bad one (refused before
            # anything was sent), then sent again without it.
            assert len(batches) in (1, 2)
            batch = batches[-1]
            assert [cmd for cmd in batch if cmd[1] != "ap:data:bad"] == [
                ("SET", key, key) for key in keys
            ]
            assert isinstance(outcomes.pop("ap:data:bad"), trio_maint.DataError)
            assert outcomes == dict.fromkeys(keys, True)  # as without auto_pipeline
            assert await r.mget(*keys) == [key.encode() for key in keys]


@pytest.mark.trio
async def test_reply_over_a_cap_fails_only_its_own_command(
    sim: MaintenanceSimulator, batches: Batches
) -> None:
    outcomes: dict[int, object] = {}
    big: list[BaseException] = []

    def incr(i: int) -> Job:
        async def job() -> None:
            try:
                outcomes[i] = await r.execute_command("INCR", "ap:cap:n")
            except trio_maint.RedisError as exc:
                outcomes[i] = exc

        return job

    async def get_big() -> None:
        try:
            await r.get("ap:cap:big")
        except trio_maint.ProtocolError as exc:
            big.append(exc)

    with trio.fail_after(TIMEOUT):
        async with stalled_client(sim, max_bulk_len=1000) as r:
            await r.delete("ap:cap:n")
            await r.set("ap:cap:big", "x" * 5000)
            await warm(r, BATCH_WORKERS + 1)
            jobs = [incr(i) for i in range(10)]
            jobs.insert(5, get_big)
            try:
                async with trio.open_nursery() as nursery:
                    await occupy(r, sim, nursery)
                    batches.clear()
                    await start_in_order(nursery, jobs)
                    sim.unstall()
            finally:
                sim.unstall()
            assert [len(batch) for batch in batches] == [11]
            assert len(big) == 1  # the GET over the cap fails, as without auto_pipeline
            assert await r.get("ap:cap:n") == b"10"  # every INCR ran
            # The five INCRs ahead of the GET in the batch ran and their replies were read
            # before the oversized one: without auto_pipeline each gets its reply.
            assert [outcomes[i] for i in range(5)] == [1, 2, 3, 4, 5]
