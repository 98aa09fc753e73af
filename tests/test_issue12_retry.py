"""Issue 12 (item 8): the cluster client must not send a command again after its reply was
lost (it may have run), and commands redirected with MOVED must reach the new owner in the
order they were queued. Fake cluster nodes (tests/_fakeserver.py) count what they execute.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio

import trio_maint

from ._fakeserver import (
    Action,
    ClusterTopology,
    FakeConnection,
    FakeServer,
    moved,
    open_fake_server,
    resp,
    serve_cluster_commands,
)

pytestmark = pytest.mark.trio

TIMEOUT = 10.0


@asynccontextmanager
async def fake_cluster(count: int) -> AsyncIterator[tuple[ClusterTopology, list[FakeServer]]]:
    """``count`` fake cluster nodes sharing one topology; the first owns every slot."""
    topology = ClusterTopology()
    async with AsyncExitStack() as stack:
        nodes = [await stack.enter_async_context(open_fake_server()) for _ in range(count)]
        for node in nodes:
            serve_cluster_commands(node, topology)
        topology.assign(nodes[0])
        yield topology, nodes


def execute_incr_then_drop(node: FakeServer) -> dict[bytes, int]:
    """Make ``node`` execute ``INCR``/``INCRBY`` and then close the connection without
    replying (after every command received in the same read ran): the replies are lost
    after the commands ran. Returns the executions counted per key."""
    executed: dict[bytes, int] = {}

    async def incr(conn: FakeConnection, args: list[bytes]) -> Action:
        executed[args[1]] = executed.get(args[1], 0) + 1
        node.data[args[1]] = b"%d" % (int(node.data.get(args[1], b"0")) + 1)
        return Action.CLOSE

    node.on("INCR", incr)
    node.on("INCRBY", incr)
    return executed


async def test_cluster_incr_with_lost_reply_is_not_sent_again() -> None:
    """The node runs the INCR and closes the connection before replying: the client must
    raise ConnectionError, and the node must have run the INCR exactly once."""
    async with fake_cluster(1) as (_topology, (node,)):
        executed = execute_incr_then_drop(node)
        async with trio_maint.open_redis_cluster(node.url, retry_timeout=2.0) as rc:
            with trio.fail_after(TIMEOUT):
                with pytest.raises(trio_maint.ConnectionError):
                    await rc.incr("k")
        # The INCR ran once on the node; the client cannot know whether it did, so it must
        # not run it again (before the retry policy was wired in: sent again and again
        # until retry_timeout ran out, 13 times in 2 s).
        assert executed == {b"k": 1}


async def test_cluster_pipeline_with_lost_replies_is_not_sent_again() -> None:
    """The same with a pipeline of 10 INCRs (on 10 keys) sent in one write: the node runs
    all of them, then closes without replying; each must have run exactly once."""
    keys = [f"k{i}".encode() for i in range(10)]
    async with fake_cluster(1) as (_topology, (node,)):
        executed = execute_incr_then_drop(node)
        async with trio_maint.open_redis_cluster(node.url, retry_timeout=2.0) as rc:
            with trio.fail_after(TIMEOUT):
                async with rc.pipeline() as pipe:
                    for key in keys:
                        pipe.incr(key)
                    with pytest.raises(trio_maint.ConnectionError):
                        await pipe.execute()
        assert executed == dict.fromkeys(keys, 1)


async def test_cluster_pipeline_moved_commands_keep_their_order() -> None:
    """A pipeline ``SET k 0`` .. ``SET k 19``, every command answered ``MOVED`` by node X
    (the slot moved to Y): Y must receive the 20 SETs in the order queued, so ``k`` ends
    as ``19`` there."""
    count = 20
    async with fake_cluster(2) as (topology, (x, y)):

        async def set_moved(conn: FakeConnection, args: list[bytes]) -> bytes:
            return moved(trio_maint.key_slot(args[1]), y)

        async def slow_hello_in_reverse(conn: FakeConnection, args: list[bytes]) -> bytes:
            # Connections to Y finish their handshake in the reverse order of their dials,
            # so commands resent concurrently on several new connections come out of order.
            await trio.sleep(max(0.0, 0.01 * (count - conn.id)))
            hello = {"server": "redis", "version": "7.2.0", "proto": 3, "id": conn.id}
            return resp({**hello, "mode": "cluster", "role": "master", "modules": []})

        y.on("HELLO", slow_hello_in_reverse)
        async with trio_maint.open_redis_cluster(x.url) as rc:
            with trio.fail_after(TIMEOUT):
                assert await rc.get("k") is None  # the client knows X, and X owns "k" now
                x.on("SET", set_moved)  # the slot moved to Y: X redirects every write there
                topology.assign(y)
                async with rc.pipeline() as pipe:
                    for i in range(count):
                        pipe.set("k", i)
                    assert await pipe.execute() == [True] * count
        order = [int(args[2]) for args in y.seen("SET")]
        assert (order, y.data.get(b"k")) == (list(range(count)), str(count - 1).encode())
