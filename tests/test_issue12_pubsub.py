"""Issue 12 (items 1-3): pub/sub subscribers and MOVING.

* A null-endpoint MOVING means "reconnect to the same address after ``time / 2``"; a
  subscriber must not reconnect at once (the address still leads to the old node, and the
  client's own publishers move only at ``time / 2``).
* A MOVING to an endpoint that cannot be reached must not break a subscriber whose old
  endpoint still works, nor make it redial without backoff.
* A PubSub created before a MOVING but first used after it must dial the new endpoint.

Real redis-servers behind :class:`~trio_maint.testing.MaintenanceSimulator` proxies; the
unreachable endpoint is a tiny listener that accepts and closes (tests/_fakeserver.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

import trio_maint
from trio_maint import MaintConfig
from trio_maint.testing import MaintenanceSimulator, RawConnection, RedisServer, connect_raw

from ._fakeserver import open_fake_server

pytestmark = pytest.mark.trio

TIMEOUT = 15.0


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[RedisServer, RedisServer]]:
    """Two redis-servers of this module's own: the old node and the new one."""
    with RedisServer() as old, RedisServer() as new:
        yield old, new


async def subscribers(admin: RawConnection, channel: str) -> int:
    """``PUBSUB NUMSUB channel`` on the server behind ``admin``."""
    reply = await admin.execute("PUBSUB", "NUMSUB", channel)
    return int(reply[1])


class Collector:
    """Reads a PubSub in a task: the data of each message, and the errors raised to it."""

    def __init__(self, ps: trio_maint.PubSub) -> None:
        self.ps = ps
        self.data: list[bytes] = []
        self.errors: list[str] = []

    async def run(self) -> None:
        while True:
            try:
                message = await self.ps.get_message(timeout=0.2)
            except trio_maint.RedisError as exc:
                self.errors.append(repr(exc))
                await trio.sleep(0.01)  # an application's retry loop, with a short pause
                continue
            if message is not None and message.type == "message":
                self.data.append(message.data)


# --- item 1 -----------------------------------------------------------------------------


@pytest.mark.slow
async def test_pubsub_null_endpoint_moving_reconnects_at_half_time(
    servers: tuple[RedisServer, RedisServer],
) -> None:
    """MOVING with a null endpoint and ``time`` T: the address now leads to the new node
    (the simulator forwards new connections there) and the old node closes the old
    connections at T. The subscriber must move at about T/2, as the pool does, and no
    message published through the client's pool outside the move itself may be lost.

    Delivery asserted: *exactly once* for every message published before 0.4 T or after
    0.8 T (relative to the MOVING). Each message is published once on one server and the
    subscriber holds at most one subscription per server, so a loss means the subscriber
    was not where the publisher was, and a duplicate a doubled subscription. Messages
    published while the two connections change nodes (0.4 T .. 0.8 T) are not checked:
    the publisher and the subscriber move at independent instants then.
    """
    old_server, new_server = servers
    time_ = 2  # MOVING's time, whole seconds
    channel = "i12:null-moving"
    async with MaintenanceSimulator(backend=old_server) as sim:
        config = MaintConfig(endpoint_type="none")
        async with (
            trio_maint.open_redis(sim.url, maintenance=config) as r,
            r.pubsub(ignore_subscribe_messages=True) as ps,
            await connect_raw(old_server.address) as old_admin,
            await connect_raw(new_server.address) as new_admin,
        ):
            with trio.fail_after(TIMEOUT):
                await ps.subscribe(channel)
                assert await r.ping() is True
                await sim.wait_for_connections(2, maint_enabled=True)
                while await subscribers(old_admin, channel) != 1:
                    await trio.sleep(0.01)
                collector = Collector(ps)
                # (seconds after the MOVING, old node's subscribers, new node's subscribers)
                timeline: list[tuple[float, int, int]] = []
                published: list[tuple[bytes, float]] = []
                accepted_before = sim.accepted
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(collector.run)
                    await trio.sleep(0.1)
                    old_ids = [c.id for c in sim.connections]
                    sim.set_backend(new_server)  # the address now leads to the new node
                    t0 = trio.current_time()
                    await sim.inject_moving(time=time_)  # null endpoint for type "none"
                    sim.close_connections(after=time_, connections=old_ids)

                    async def watch() -> None:
                        while True:
                            old_n = await subscribers(old_admin, channel)
                            new_n = await subscribers(new_admin, channel)
                            timeline.append((trio.current_time() - t0, old_n, new_n))
                            await trio.sleep(0.01)

                    nursery.start_soon(watch)
                    accepted_early = 0
                    i = 0
                    while (elapsed := trio.current_time() - t0) < time_ + 0.6:
                        if elapsed < 0.4 * time_:
                            accepted_early = sim.accepted - accepted_before
                        data = b"%d" % i
                        await r.publish(channel, data)
                        published.append((data, elapsed))
                        i += 1
                        await trio.sleep(0.01)
                    await trio.sleep(0.5)  # let the last messages arrive
                    nursery.cancel_scope.cancel()
    moved_at = next((t for t, _old, new in timeline if new > 0), None)
    checked = [d for d, t in published if not 0.4 * time_ <= t <= 0.8 * time_]
    wrong = {d: collector.data.count(d) for d in checked if collector.data.count(d) != 1}
    # Before the fix: the subscriber reconnects (to the new node) as soon as it reads the
    # MOVING, while the pool's publisher stays on the old node until T/2: every message
    # published in between is lost.
    assert collector.errors == []
    assert moved_at is not None and 0.4 * time_ <= moved_at <= 0.75 * time_, (
        f"the subscriber reached the new node {moved_at} s after the MOVING (T = {time_} s); "
        f"{accepted_early} connection(s) opened before 0.4 T"
    )
    assert wrong == {}, f"{len(wrong)} of {len(checked)} messages not received exactly once"


# --- item 2 -----------------------------------------------------------------------------


@pytest.mark.slow
async def test_pubsub_moving_to_unreachable_endpoint_keeps_old_connection(
    servers: tuple[RedisServer, RedisServer],
) -> None:
    """The subscriber reads MOVING to an endpoint that accepts and closes every connection,
    while its old endpoint stays up (``time`` = 15 s, not over during the test). Messages
    keep arriving on the old connection, no error reaches the reader, and the endpoint is
    not redialed without backoff (at most 10 dials in 3 s)."""
    server, _new = servers
    channel = "i12:unreachable"
    async with (
        MaintenanceSimulator(backend=server) as sim,
        open_fake_server(close_on_accept=True) as dead,
    ):
        config = MaintConfig(endpoint_type="internal-ip")
        async with (
            trio_maint.open_redis(sim.url, maintenance=config) as r,
            r.pubsub(ignore_subscribe_messages=True) as ps,
        ):
            with trio.fail_after(TIMEOUT):
                await ps.subscribe(channel)
                await sim.wait_for_connections(1, maint_enabled=True)
                (subscriber,) = [c.id for c in sim.connections]
                assert await r.ping() is True  # the pool's connection (not moved)
                collector = Collector(ps)
                published: list[bytes] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(collector.run)
                    await trio.sleep(0.1)
                    # Only the subscriber's connection is told to move.
                    await sim.inject_moving(time=15, target=dead.address, connections=[subscriber])
                    t0 = trio.current_time()
                    i = 0
                    while trio.current_time() - t0 < 3.0:
                        data = b"%d" % i
                        await r.publish(channel, data)
                        published.append(data)
                        i += 1
                        await trio.sleep(0.05)
                    await trio.sleep(0.3)
                    nursery.cancel_scope.cancel()
    lost = [d for d in published if d not in collector.data]
    # Before the fix: the subscriber drops its old connection at once and dials the endpoint
    # on every get_message(), each failing with ConnectionError.
    assert (collector.errors[:3], len(collector.errors)) == ([], 0)
    assert dead.accepted <= 10, f"{dead.accepted} dials to the unreachable endpoint in 3 s"
    assert lost == [], f"{len(lost)} of {len(published)} messages lost"


# --- item 3 -----------------------------------------------------------------------------


async def test_pubsub_created_before_moving_first_used_after_dials_new_endpoint(
    servers: tuple[RedisServer, RedisServer],
) -> None:
    server, _new = servers
    channel = "i12:late-pubsub"
    async with (
        MaintenanceSimulator(backend=server) as a,
        MaintenanceSimulator(backend=server) as b,
    ):
        config = MaintConfig(endpoint_type="internal-ip")
        async with trio_maint.open_redis(a.url, maintenance=config) as r:
            async with r.pubsub(ignore_subscribe_messages=True) as ps:  # made, not used yet
                handler = r.maintenance
                assert handler is not None
                with trio.fail_after(TIMEOUT):
                    assert await r.ping() is True
                    await a.inject_moving(time=15, target=b)
                    assert await r.ping() is True  # reads the MOVING: hand-off to B
                    while handler.state.completed_handoffs < 1:
                        await trio.sleep(0.01)
                    assert [c.id for c in b.connections] != []
                    before = (a.accepted, b.accepted)
                    await ps.subscribe(channel)  # the PubSub's first connection
                    dialed = (a.accepted - before[0], b.accepted - before[1])
                    conn = ps.connection
                    assert conn is not None
                    landed = (conn.host, conn.port)
                    await trio.sleep(0.1)
                    assert await r.publish(channel, "hello") == 1
                    message = await ps.get_message(timeout=5)
    assert message is not None and message.data == b"hello"
    # Before the fix: the PubSub's connection factory kept the endpoint of the moment it was
    # made.
    assert (dialed, landed) == ((0, 1), b.address)
