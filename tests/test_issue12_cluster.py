"""Issue 12 (item 7): sharded pub/sub on a cluster.

Redis Cluster refuses ``SSUBSCRIBE a b c`` with ``-CROSSSLOT`` when the channels hash to
different slots, even when one master serves all of them: a subscription must be sent per
slot, both at first and when the client subscribes again after losing its connection. An
error reply to a subscribe command must reach the caller, not only a log line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import testing
from trio_maint.testing import connect_raw

from ._fakeserver import (
    ClusterTopology,
    Err,
    FakeConnection,
    open_fake_server,
    resp,
    serve_cluster_commands,
)

pytestmark = pytest.mark.trio

#: ``trio_maint.testing.RedisCluster`` is being renamed ``LocalCluster``: either works.
LocalCluster: Any = getattr(testing, "LocalCluster", None) or getattr(testing, "RedisCluster", None)
#: A running ``LocalCluster`` (typed loosely, as the class's name is changing).
Cluster = Any

TIMEOUT = 15.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A cluster of its own (2 masters, no replica): the tests kill client connections."""
    with LocalCluster(masters=2, replicas=0) as started:
        yield started


def channels_on_one_master(cluster: Cluster, count: int = 3) -> list[str]:
    """``count`` channel names in ``count`` different slots, all served by one master."""
    master = cluster.masters[0]
    owned = set(cluster.slots_of(master))
    names: list[str] = []
    slots: set[int] = set()
    i = 0
    while len(names) < count:
        name = f"i12:ch:{i}"
        slot = trio_maint.key_slot(name)
        if slot in owned and slot not in slots:
            names.append(name)
            slots.add(slot)
        i += 1
    return names


async def receive(ps: trio_maint.ClusterPubSub, count: int, within: float) -> list[tuple[str, str]]:
    """Up to ``count`` ``smessage`` messages as ``(channel, data)``, waiting at most
    ``within`` seconds."""
    got: list[tuple[str, str]] = []
    with trio.move_on_after(within):
        while len(got) < count:
            message = await ps.get_message(timeout=within)
            if message is not None and message.type == "smessage":
                got.append((message.channel.decode(), message.data.decode()))
    return got


async def publish_each(rc: trio_maint.RedisCluster, channels: list[str], data: str) -> list[int]:
    """SPUBLISH ``data`` to every channel; the receiver counts the node reported."""
    return [int(await rc.execute_command("SPUBLISH", channel, data)) for channel in channels]


@pytest.mark.slow
async def test_ssubscribe_channels_of_several_slots_on_one_master(
    cluster: Cluster,
) -> None:
    channels = channels_on_one_master(cluster)
    assert len({trio_maint.key_slot(c) for c in channels}) == 3
    async with trio_maint.open_redis_cluster(cluster.url) as rc:
        async with rc.pubsub(ignore_subscribe_messages=True) as ps:
            with trio.fail_after(TIMEOUT):
                await ps.ssubscribe(*channels)
                await trio.sleep(0.2)  # the confirmations (if any) come back meanwhile
                receivers = await publish_each(rc, channels, "one")
                got = await receive(ps, 3, within=3.0)
    # Before the fix: the node answers -CROSSSLOT to the single SSUBSCRIBE of all three, the
    # client only logs it, nobody is subscribed (SPUBLISH reports 0 receivers) and nothing
    # arrives.
    assert (receivers, sorted(got)) == ([1, 1, 1], sorted((c, "one") for c in channels))


@pytest.mark.slow
async def test_sharded_resubscribe_after_lost_connection_covers_every_slot(
    cluster: Cluster,
) -> None:
    channels = channels_on_one_master(cluster)
    master = cluster.masters[0]
    async with trio_maint.open_redis_cluster(cluster.url) as rc:
        async with rc.pubsub(ignore_subscribe_messages=True) as ps:
            with trio.fail_after(TIMEOUT):
                for channel in channels:  # one slot per command: works today
                    await ps.ssubscribe(channel)
                await trio.sleep(0.2)
                assert await publish_each(rc, channels, "before") == [1, 1, 1]
                assert sorted(await receive(ps, 3, within=3.0)) == sorted(
                    (c, "before") for c in channels
                )
                # Drop the subscriber's connection on the node (as a failover or a network
                # cut would); the client must subscribe again to all three channels.
                async with await connect_raw(master.server.address) as admin:
                    killed = await admin.execute("CLIENT", "KILL", "TYPE", "pubsub")
                    assert killed == 1
                    # Wait (bounded) until the node has subscribers again, or give up.
                    with trio.move_on_after(8.0):
                        while await shard_subscribers(admin, channels) != [1, 1, 1]:
                            await trio.sleep(0.1)
                after = await publish_each(rc, channels, "after")
                got = await receive(ps, 3, within=3.0)
    # Before the fix: the resubscription sends SSUBSCRIBE with all three channels at once, the
    # node answers -CROSSSLOT (logged only) and no channel is subscribed again.
    assert (after, sorted(got)) == ([1, 1, 1], sorted((c, "after") for c in channels))


async def shard_subscribers(admin: testing.RawConnection, channels: list[str]) -> list[int]:
    """How many clients the node of ``admin`` has subscribed to each channel."""
    reply = await admin.execute("PUBSUB", "SHARDNUMSUB", *channels)
    return [int(n) for n in reply[1::2]]


async def test_ssubscribe_error_reply_reaches_the_caller() -> None:
    topology = ClusterTopology()
    async with open_fake_server() as node:
        serve_cluster_commands(node, topology)
        topology.assign(node)

        async def crossslot(conn: FakeConnection, args: list[bytes]) -> bytes:
            return resp(Err("CROSSSLOT Keys in request don't hash to the same slot"))

        node.on("SSUBSCRIBE", crossslot)
        async with trio_maint.open_redis_cluster(node.url) as rc:
            async with rc.pubsub() as ps:
                with trio.fail_after(TIMEOUT):
                    # An error reply is a ResponseError; CrossSlotError also names CROSSSLOT.
                    errors = (trio_maint.ResponseError, trio_maint.CrossSlotError)
                    with pytest.raises(errors, match="CROSSSLOT"):
                        await ps.ssubscribe("i12:x")
        assert node.count("SSUBSCRIBE") == 1
