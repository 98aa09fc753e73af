"""Adversarial tests: a hostile server floods a client with maintenance notifications.

The promise (docs/maintenance.md, "Bounds on churn"; the robustness goals): bounded
memory and CPU under floods of MOVINGs and hostile frames, and the event loop is never
blocked for long.
"""

from __future__ import annotations

import time

import pytest
import trio

import trio_maint
from trio_maint.testing import moving_frame, smigrated_frame

from ._fakeserver import (
    Action,
    ClusterTopology,
    FakeConnection,
    Status,
    open_fake_server,
    push,
    resp,
    serve_cluster_commands,
)

pytestmark = pytest.mark.trio

POOL = 50
PAIRS = 400  # 800 MOVING frames, about 40 KB


@pytest.mark.slow
async def test_an_alternating_moving_flood_is_cheap() -> None:
    """One reply preceded by 400 pairs of MOVING (A -> B, then A -> A: "never mind"),
    about 40 KB, read by a client with 50 idle connections. No handoff is ever due to
    complete (each one is withdrawn before it starts), yet the client spawns tens of
    thousands of tasks at once and blocks the event loop for about a second or more
    (measured: 34,000 tasks and 2.6 s for 700 pairs)."""
    async with open_fake_server() as a, open_fake_server() as b:
        burst = b"".join(
            moving_frame(seq, 30, name)
            for i in range(PAIRS)
            for seq, name in ((2 * i + 1, b.name), (2 * i + 2, a.name))
        )
        sent: list[int] = []

        async def ping(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
            if not sent:
                sent.append(1)
                await conn.send(burst)
            return resp(Status("PONG"))

        a.on("PING", ping)
        async with trio_maint.open_redis(a.url, pool_size=POOL) as r:
            async with trio.open_nursery() as nursery:  # POOL idle connections on A
                for i in range(POOL):
                    nursery.start_soon(r.set, f"k{i}", "v")
            gaps: list[float] = []
            tasks: list[int] = []

            async def ticker() -> None:
                last = time.perf_counter()
                while True:
                    await trio.lowlevel.checkpoint()
                    now = time.perf_counter()
                    gaps.append(now - last)
                    tasks.append(trio.lowlevel.current_statistics().tasks_living)
                    last = now

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker)
                with trio.fail_after(60):
                    assert await r.ping() is True
                nursery.cancel_scope.cancel()
            assert max(tasks) < 10 * POOL, f"{max(tasks)} tasks alive at once"
            assert max(gaps) < 0.5, f"the event loop was blocked for {max(gaps):.2f} s"


# ------------------------------------------------------------------ cluster: SMIGRATED

ENTRIES = 80  # a 3 KB frame


@pytest.mark.slow
async def test_a_hostile_smigrated_does_not_block_the_event_loop() -> None:
    """A node sends one ``SMIGRATED`` of 80 entries ``[target_i, "0-16383"]`` (the
    two-element shape counts as this node's), 3 KB in all. The cluster client freezes
    for about 4 s while handling it (quadratic in the number of entries: 1.5 KB costs
    about 1 s, 30 KB would cost minutes)."""
    topology = ClusterTopology()
    async with open_fake_server() as node:
        serve_cluster_commands(node, topology)
        topology.assign(node)
        async with trio_maint.open_redis_cluster(node.url) as rc:
            with trio.fail_after(60):
                assert await rc.set("k", "v") is True
            frame = smigrated_frame(
                1, [(f"10.9.{i // 250}.{i % 250}:7000", "0-16383") for i in range(ENTRIES)]
            )
            gaps: list[float] = []

            async def ticker() -> None:
                last = time.perf_counter()
                while True:
                    await trio.lowlevel.checkpoint()
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker)
                await trio.sleep(0.05)
                await node.push(frame)  # read with the next reply
                with trio.fail_after(60):
                    await rc.get("k")
                nursery.cancel_scope.cancel()
            assert max(gaps) < 1.0, f"the event loop was blocked for {max(gaps):.2f} s"


class _StepCounter(trio.abc.Instrument):
    """Counts the steps (schedule points passed) of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


FLOOD = 100_000


@pytest.mark.parametrize("size", [1, 3, 40])
async def test_a_small_pipeline_behind_a_push_flood_gets_its_replies(size: int) -> None:
    """A pipeline's replies come after 100,000 unknown push frames: the client hands
    them on a burst (``PUSH_BURST``, 32) at a time between checkpoints, whatever the
    pipeline's length. A pipeline of ``n`` commands used to take ``n`` frames per
    checkpoint: 100,000 passes through the scheduler for one command, so that behind a
    big enough flood it timed out."""
    flood = push("noise", "frame", "x") * FLOOD
    async with open_fake_server() as server:

        async def get(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
            if args[1] == b"first":
                await conn.send(flood)
            return resp(args[1])

        server.on("GET", get)
        async with trio_maint.open_redis(server.url, socket_timeout=None) as r:
            keys = ["first"] + [f"k{i}" for i in range(1, size)]
            counter = _StepCounter(trio.lowlevel.current_task())
            trio.lowlevel.add_instrument(counter)
            try:
                with trio.fail_after(60):
                    pipe = r.pipeline(transaction=False)
                    for key in keys:
                        pipe.get(key)
                    replies = await pipe.execute()
            finally:
                trio.lowlevel.remove_instrument(counter)
            assert replies == [k.encode() for k in keys]
            # A burst per checkpoint (3,125), the socket's reads, a little slack.
            assert counter.steps < FLOOD // 32 * 2
            assert counter.steps > FLOOD // 32 // 2  # never one long run without any
            assert await r.get("after") == b"after"
