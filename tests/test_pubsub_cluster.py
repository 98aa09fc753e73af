"""ClusterPubSub on fake cluster nodes (tests/_fakeserver.py): one ``SSUBSCRIBE`` per slot,
at first and after a lost connection; ``MOVED`` answered by subscribing on the new owner
(bounded); error replies raised to the caller; the ``async with rc.pubsub()`` block.
"""

from __future__ import annotations

import pytest
import trio

import trio_maint
from trio_maint import key_slot
from trio_maint._cluster.pubsub import SUBSCRIBE_ATTEMPTS

from ._fakeserver import (
    ClusterTopology,
    Err,
    FakeConnection,
    FakeServer,
    moved,
    open_fake_server,
    push,
    resp,
    serve_cluster_commands,
)
from .test_pubsub_acks import confirm, serve_pubsub

pytestmark = pytest.mark.trio

TIMEOUT = 10.0
#: Three shard channels in two slots (a hash tag keeps two together).
CHANNELS = ("{u1}.a", "{u1}.b", "solo")


def ssubscribes(server: FakeServer) -> list[frozenset[bytes]]:
    """The channels of each ``SSUBSCRIBE`` ``server`` received, in order."""
    return [frozenset(args[1:]) for args in server.seen("SSUBSCRIBE")]


PER_SLOT = sorted([frozenset({b"{u1}.a", b"{u1}.b"}), frozenset({b"solo"})], key=len)


async def test_ssubscribe_is_one_command_per_slot_and_after_a_lost_connection() -> None:
    topology = ClusterTopology()
    async with open_fake_server() as node:
        serve_cluster_commands(node, topology)
        serve_pubsub(node)
        topology.assign(node)
        async with (
            trio_maint.open_redis_cluster(node.url) as rc,
            rc.pubsub(ignore_subscribe_messages=True) as ps,
        ):
            with trio.fail_after(TIMEOUT):
                await ps.ssubscribe(*CHANNELS)
                assert sorted(ssubscribes(node), key=len) == PER_SLOT
                node.close_all()  # every connection lost: the subscriber's too
                await node.wait_until(lambda s: len(ssubscribes(s)) >= 4)
                await node.push(push("smessage", "solo", "back"))
                message = await ps.get_message(timeout=5)
            assert ps.resubscriptions == 3
    assert sorted(ssubscribes(node)[2:], key=len) == PER_SLOT
    assert message is not None and (message["channel"], message["data"]) == (b"solo", b"back")


async def test_moved_reply_subscribes_on_the_new_owner() -> None:
    """The map says A; A answers MOVED (its slots went to B): the map is refreshed and
    the channel subscribed on B, once."""
    topology = ClusterTopology()
    async with open_fake_server() as a, open_fake_server() as b:
        for node in (a, b):
            serve_cluster_commands(node, topology)
            serve_pubsub(node)
        topology.assign(a)

        async def moved_away(conn: FakeConnection, args: list[bytes]) -> bytes:
            topology.assign(b)
            return moved(key_slot(args[1]), b)

        a.on("SSUBSCRIBE", moved_away)
        async with trio_maint.open_redis_cluster(a.url) as rc, rc.pubsub() as ps:
            with trio.fail_after(TIMEOUT):
                await ps.ssubscribe("orders")
                message = await ps.get_message(timeout=5)
                await b.push(push("smessage", "orders", "created"))
                data = await ps.get_message(timeout=5)
    assert (a.count("SSUBSCRIBE"), b.count("SSUBSCRIBE")) == (1, 1)
    assert message is not None and (message["type"], message["channel"]) == (
        "ssubscribe",
        b"orders",
    )
    assert data is not None and data["data"] == b"created"


async def test_moved_reply_that_persists_is_raised() -> None:
    topology = ClusterTopology()
    async with open_fake_server() as a, open_fake_server() as b:
        for node in (a, b):
            serve_cluster_commands(node, topology)
        topology.assign(a)

        async def to_b(conn: FakeConnection, args: list[bytes]) -> bytes:
            return moved(key_slot(args[1]), b)  # but the map keeps saying A

        a.on("SSUBSCRIBE", to_b)
        async with trio_maint.open_redis_cluster(a.url) as rc, rc.pubsub() as ps:
            with trio.fail_after(TIMEOUT), pytest.raises(trio_maint.MovedError):
                await ps.ssubscribe("orders")
            assert ps.shard_channels == set()
    assert a.count("SSUBSCRIBE") == SUBSCRIBE_ATTEMPTS


async def test_error_reply_of_one_slot_is_raised_and_the_others_stay() -> None:
    topology = ClusterTopology()
    async with open_fake_server() as node:
        serve_cluster_commands(node, topology)
        serve_pubsub(node)
        topology.assign(node)

        async def no_solo(conn: FakeConnection, args: list[bytes]) -> bytes:
            if b"solo" in args:
                return resp(Err("NOPERM this user has no permissions to access 'solo'"))
            return await confirm(conn, args)

        node.on("SSUBSCRIBE", no_solo)
        async with trio_maint.open_redis_cluster(node.url) as rc, rc.pubsub() as ps:
            with trio.fail_after(TIMEOUT):
                with pytest.raises(trio_maint.NoPermissionError, match="solo"):
                    await ps.ssubscribe(*CHANNELS)
                assert ps.shard_channels == {"{u1}.a", "{u1}.b"}


async def test_exception_in_the_block_comes_out_unwrapped_and_tasks_end() -> None:
    topology = ClusterTopology()
    async with open_fake_server() as node:
        serve_cluster_commands(node, topology)
        serve_pubsub(node)
        topology.assign(node)
        async with trio_maint.open_redis_cluster(node.url) as rc:
            held: list[trio_maint.ClusterPubSub] = []

            async def block() -> None:
                async with rc.pubsub() as ps:
                    held.append(ps)
                    await ps.ssubscribe("x")
                    raise KeyError("mine")

            with trio.fail_after(TIMEOUT):
                with pytest.raises(KeyError, match="mine"):
                    await block()
                with pytest.raises(trio_maint.ConnectionClosedError):
                    await held[0].get_message(timeout=1)
                await node.wait_until(
                    lambda s: (
                        not any(
                            b"SSUBSCRIBE" in [a[0] for a in c.commands]
                            for c in s.connections.values()
                        )
                    )
                )
                async with rc.pubsub() as again:  # a new one works
                    await again.ssubscribe("y")
