"""The consumer-group helper through maintenance (issue 14, item 5): a
:class:`~trio_maint.StreamConsumer` blocked in ``XREADGROUP`` rides through a relaxed
window (MIGRATING/MIGRATED), a real move of the data and the clients to another
redis-server (``trio_maint.testing.migrate``: replication, switch-over, MOVING, the old
connections closed) and a real cluster slot migration (``LocalCluster.migrate_slots``:
ASK, then MOVED). In each, a producer adds entries all along and the test counts: every
entry produced is handed out and acknowledged, none twice, none lost."""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import pytest
import trio

import trio_maint
from trio_maint import MaintConfig, StreamConsumer, StreamEntry, key_slot
from trio_maint._client.streams import TRANSIENT_CODES
from trio_maint.testing import (
    LocalCluster,
    MaintenanceSimulator,
    RedisServer,
    maintenance_scenario,
    migrate,
)

pytestmark = pytest.mark.trio

STREAM = "tm:orders"


@attrs.define
class Ledger:
    """What the producer added and what the consumer handed out and acknowledged."""

    produced: list[str] = attrs.Factory(list)
    handed_out: list[str] = attrs.Factory(list)
    acked: list[str] = attrs.Factory(list)
    redelivered_after_ack: list[str] = attrs.Factory(list)
    done: trio.Event = attrs.Factory(trio.Event)

    def check(self) -> None:
        assert self.redelivered_after_ack == []
        assert len(self.acked) == len(set(self.acked)), "an entry was acknowledged twice"
        assert sorted(self.acked, key=_order) == self.produced, "entries lost"
        # Handed out again only if it was not acknowledged yet (at least once delivery).
        assert set(self.handed_out) == set(self.produced)


def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def produce(
    client: trio_maint.Redis | trio_maint.RedisCluster,
    ledger: Ledger,
    count: int,
    every: float,
    stream: str = STREAM,
) -> None:
    """Add ``count`` entries with explicit ids (so a retry after a lost reply cannot add
    one twice: the server refuses an id not above the last)."""
    for i in range(count):
        entry_id = f"{i + 1}-1"
        for _attempt in range(100):
            try:
                await client.execute_command("XADD", stream, entry_id, "n", i)
                break
            except trio_maint.ResponseError as exc:
                if "equal or smaller" in str(exc):
                    break  # an earlier attempt added it (its reply was lost)
                if exc.code not in TRANSIENT_CODES:
                    raise
            except (trio_maint.ConnectionError, trio_maint.TimeoutError):
                pass
            await trio.sleep(0.05)
        else:
            raise AssertionError(f"could not add {entry_id}")
        ledger.produced.append(entry_id)
        await trio.sleep(every)


async def consume(consumer: StreamConsumer, ledger: Ledger, count: int) -> None:
    acked: set[str] = set()
    entry: StreamEntry
    async for entry in consumer:
        entry_id = _text(entry.id)
        if entry_id in acked:
            ledger.redelivered_after_ack.append(entry_id)
        ledger.handed_out.append(entry_id)
        await consumer.ack(entry)
        acked.add(entry_id)
        ledger.acked.append(entry_id)
        if len(acked) == count:
            ledger.done.set()
            return


# ------------------------------------------------------------------- standalone


@pytest.fixture
def two_servers() -> Iterator[tuple[RedisServer, RedisServer]]:
    with RedisServer() as a, RedisServer() as b:
        yield a, b


async def test_a_relaxed_window_does_not_disturb_the_consumer() -> None:
    count = 120
    ledger = Ledger()
    async with MaintenanceSimulator() as sim:
        # The relaxed timeout (0.1 s) is below the read's wait (0.4 s + 0.2 s): never
        # shortened, so no read times out.
        config = MaintConfig(mode="enabled", relaxed_timeout=0.1)
        async with (
            trio_maint.open_redis(sim.url, socket_timeout=0.2, maintenance=config) as r,
            trio_maint.open_redis(sim.url) as producer,
        ):
            with trio.fail_after(60):
                async with (
                    r.stream_consumer(STREAM, "g", "c1", create=True, block=0.4) as consumer,
                    trio.open_nursery() as nursery,
                ):
                    nursery.start_soon(consume, consumer, ledger, count)
                    nursery.start_soon(produce, producer, ledger, count, 0.01)
                    for _ in range(3):
                        await trio.sleep(0.3)
                        await sim.inject_migrating()
                        await trio.sleep(0.5)  # the consumer blocks inside the window
                        await sim.inject_migrated()
                    await ledger.done.wait()
    ledger.check()
    assert consumer.recovered == 0


async def test_the_consumer_follows_a_real_move_to_another_server(
    two_servers: tuple[RedisServer, RedisServer],
) -> None:
    count = 150
    ledger = Ledger()
    server_a, server_b = two_servers
    config = MaintConfig(endpoint_type="internal-ip")
    async with (
        MaintenanceSimulator(backend=server_a) as a,
        MaintenanceSimulator(backend=server_b) as b,
    ):
        async with (
            trio_maint.open_redis(a.url, socket_timeout=1.0, maintenance=config) as r,
            trio_maint.open_redis(a.url, socket_timeout=1.0, maintenance=config) as producer,
        ):
            with trio.fail_after(90):
                async with (
                    r.stream_consumer(STREAM, "g", "c1", create=True, block=0.3) as consumer,
                    trio.open_nursery() as nursery,
                ):
                    nursery.start_soon(consume, consumer, ledger, count)
                    nursery.start_soon(produce, producer, ledger, count, 0.02)
                    await trio.sleep(0.8)
                    result = await migrate(a, b, time=2, close_after=1.0)
                    assert result.moved  # the consumer's and producer's connections
                    await ledger.done.wait()
            assert b.accepted > 0  # the clients moved
    # Everything ended up on B's server, nothing left pending there.
    async with trio_maint.open_redis(server_b.url) as direct:
        assert await direct.execute_command("XPENDING", STREAM, "g") == [0, None, None, None]
        assert await direct.execute_command("XLEN", STREAM) == count
    ledger.check()


async def test_the_consumer_is_handed_off_by_a_moving(
    two_servers: tuple[RedisServer, RedisServer],
) -> None:
    # The endpoint moves (MIGRATING, MIGRATED, MOVING to B, the old connections closed
    # 1.5 s later) with the same data behind both simulators, as a managed Redis
    # proxy move: the blocked read ends, then its connection is handed off to B.
    count = 120
    ledger = Ledger()
    server, _unused = two_servers
    config = MaintConfig(endpoint_type="internal-ip", relaxed_timeout=0.2)
    async with MaintenanceSimulator(backend=server) as a, MaintenanceSimulator(backend=server) as b:
        async with (
            trio_maint.open_redis(a.url, socket_timeout=0.5, maintenance=config) as r,
            trio_maint.open_redis(a.url, maintenance=config) as producer,
        ):
            with trio.fail_after(60):
                async with (
                    r.stream_consumer(STREAM, "g", "c1", create=True, block=0.3) as consumer,
                    trio.open_nursery() as nursery,
                ):
                    nursery.start_soon(consume, consumer, ledger, count)
                    nursery.start_soon(produce, producer, ledger, count, 0.02)
                    await trio.sleep(0.5)
                    scenario = maintenance_scenario(b, lead=0.3, work=0.3, time=1, grace=0.5)
                    await scenario.run(a)
                    await ledger.done.wait()
            # The consumer's connections were handed off to B.
            assert r.pool.connections and all(c.port == b.port for c in r.pool.connections)
    ledger.check()


# ---------------------------------------------------------------------- cluster


async def test_the_consumer_rides_through_a_cluster_slot_migration(
    redis_cluster: LocalCluster,
) -> None:
    count = 150
    ledger = Ledger()
    stream = "{tm:orders}stream"
    slot = key_slot(stream)
    source = redis_cluster.master_of_slot(slot)
    target = next(m for m in redis_cluster.masters if m is not source)
    async with (
        trio_maint.open_redis_cluster(redis_cluster.url, socket_timeout=1.0) as rc,
        trio_maint.open_redis_cluster(redis_cluster.url, socket_timeout=1.0) as producer,
    ):
        await rc.execute_command("DEL", stream)
        with trio.fail_after(90):
            async with (
                rc.stream_consumer(stream, "g", "c1", create=True, block=0.3) as consumer,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(consume, consumer, ledger, count)
                nursery.start_soon(produce, producer, ledger, count, 0.02, stream)
                await trio.sleep(0.5)
                await redis_cluster.migrate_slots_async([slot], source, target, pause=0.5)
                await trio.sleep(0.5)
                await redis_cluster.migrate_slots_async([slot], target, source, pause=0.3)
                await ledger.done.wait()
        assert await rc.execute_command("XPENDING", stream, "g") == [0, None, None, None]
        await rc.execute_command("DEL", stream)
    ledger.check()
