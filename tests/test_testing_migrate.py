"""`migrate` as managed Redis moves an endpoint: zero failed commands and zero lost
acknowledged writes for clients that follow MOVING (trio_maint, and redis-py's own
maintenance handling), there and back; MOVING for connections opened on the old address
during the window; sequence ids shared across simulators (or per node).

The new endpoint is on another loopback address with the same port (127.0.0.2:<port>), so
a client that ignored MOVING's host and kept only a port would not pass."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
import trio
from redis.backoff import NoBackoff
from redis.maint_notifications import EndpointType, MaintNotificationsConfig
from redis.retry import Retry

import trio_maint
from trio_maint._sansio.resp import is_push
from trio_maint.testing import (
    MaintenanceSimulator,
    RawConnection,
    RedisServer,
    connect_raw,
    migrate,
    moving_scenario,
)

pytestmark = pytest.mark.trio

WORKERS = 20


class Load:
    """``WORKERS`` writers, each incrementing its own key; counts commands and failures and
    remembers the last acknowledged value per key."""

    def __init__(self) -> None:
        self.acked: dict[str, int] = {}
        self.failures: list[str] = []
        self.commands = 0
        self.lock = threading.Lock()

    def record(self, key: str, value: int, error: BaseException | None) -> None:
        with self.lock:
            self.commands += 1
            if error is None:
                self.acked[key] = value
            else:
                self.failures.append(f"{key}={value}: {error!r}")

    async def lost_on(self, server: RedisServer) -> list[str]:
        """Keys whose acknowledged value is not on ``server`` (values only grow)."""
        with self.lock:
            snapshot = dict(self.acked)
        keys = sorted(snapshot)
        async with await connect_raw(server.address) as admin:
            values = await admin.execute("MGET", *keys)
        return [k for k, v in zip(keys, values, strict=True) if int(v or -1) < snapshot[k]]


async def role(server: RedisServer) -> str:
    async with await connect_raw(server.address) as admin:
        reply = await admin.execute("ROLE")
    return bytes(reply[0]).decode()


async def there_and_back(load: Load, a: MaintenanceSimulator, b: MaintenanceSimulator) -> None:
    """A -> B, then B -> A (short windows); the load runs all along."""
    assert a.server is not None and b.server is not None
    await trio.sleep(0.5)
    first = await migrate(a, b, time=2, grace=1.0)
    assert first.paused_for < 1.0
    # both now forward to B's server (A's is its replica), whatever they started with
    assert first.upstream == b.server.address == a.backend_address == b.backend_address
    assert await role(b.server) == "master" and await role(a.server) == "slave"
    assert await load.lost_on(b.server) == []
    await trio.sleep(0.3)
    second = await migrate(b, a, time=2, grace=1.0)
    assert second.seq_id == first.seq_id + 1  # one counter for the two simulators
    assert second.upstream == a.server.address == a.backend_address == b.backend_address
    assert await role(a.server) == "master" and await role(b.server) == "slave"
    await trio.sleep(0.3)


async def trio_maint_writer(r: trio_maint.Redis, index: int, load: Load, stop: trio.Event) -> None:
    key = f"mig:t:{index}"
    value = 0
    while not stop.is_set():
        value += 1
        try:
            await r.set(key, value)
        except Exception as exc:
            load.record(key, value, exc)
        else:
            load.record(key, value, None)
        await trio.sleep(0.002)


async def test_migrate_there_and_back_under_load_trio_maint() -> None:
    load = Load()
    config = trio_maint.MaintConfig(endpoint_type="internal-ip")
    with trio.fail_after(25):
        async with MaintenanceSimulator() as a:
            async with MaintenanceSimulator(host="127.0.0.2", port=a.port) as b:
                async with trio_maint.open_redis(a.url, pool_size=WORKERS, maintenance=config) as r:
                    handler = r.maintenance
                    assert handler is not None
                    stop = trio.Event()
                    async with trio.open_nursery() as nursery:
                        for i in range(WORKERS):
                            nursery.start_soon(trio_maint_writer, r, i, load, stop)
                        await there_and_back(load, a, b)
                        stop.set()
                    assert handler.state.completed_handoffs >= WORKERS * 2
                    assert all(c.host == "127.0.0.1" for c in r.pool.connections)
            assert a.server is not None
            lost = await load.lost_on(a.server)
            print(f"commands={load.commands} failed={len(load.failures)} lost={len(lost)}")
            assert load.failures == []
            assert load.commands > 500
            assert lost == []


def redis_py_writer(client: redis.Redis, index: int, load: Load, stop: threading.Event) -> None:
    key = f"mig:py:{index}"
    value = 0
    while not stop.is_set():
        value += 1
        try:
            client.set(key, value)
        except Exception as exc:
            load.record(key, value, exc)
        else:
            load.record(key, value, None)
        stop.wait(0.002)


async def test_migrate_there_and_back_under_load_redis_py() -> None:
    """redis-py 8's sync client (RESP3, maintenance notifications on, retries off), 20
    worker threads sharing one pool."""
    load = Load()
    with trio.fail_after(25):
        async with MaintenanceSimulator() as a:
            async with MaintenanceSimulator(host="127.0.0.2", port=a.port) as b:
                client = redis.Redis(
                    host=a.host,
                    port=a.port,
                    protocol=3,
                    retry=Retry(NoBackoff(), 0),
                    max_connections=WORKERS + 5,
                    maint_notifications_config=MaintNotificationsConfig(
                        enabled=True, endpoint_type=EndpointType.INTERNAL_IP
                    ),
                )
                stop = threading.Event()
                try:
                    async with trio.open_nursery() as nursery:
                        for i in range(WORKERS):
                            nursery.start_soon(
                                trio.to_thread.run_sync, redis_py_writer, client, i, load, stop
                            )
                        try:
                            await there_and_back(load, a, b)
                        finally:
                            stop.set()
                finally:
                    client.close()
                # the connections were re-established on A (the second move's target)
                assert a.accepted > WORKERS and b.accepted >= WORKERS
            assert a.server is not None
            lost = await load.lost_on(a.server)
            print(f"commands={load.commands} failed={len(load.failures)} lost={len(lost)}")
            assert load.failures == []
            assert load.commands > 500
            assert lost == []


async def handshaken(address: tuple[str, int], endpoint_type: str = "internal-ip") -> RawConnection:
    conn = await connect_raw(address)
    await conn.execute("HELLO", "3")
    reply = await conn.execute(
        "CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", endpoint_type
    )
    assert reply == b"OK"
    return conn


async def next_push(conn: RawConnection) -> list[Any]:
    if conn.pushes:
        return list(conn.pushes.pop(0))
    frame = await conn.read()
    assert is_push(frame), frame
    return list(frame)


async def test_connection_opened_mid_migrate_gets_moving_and_is_served() -> None:
    with trio.fail_after(20):
        async with MaintenanceSimulator() as a:
            async with MaintenanceSimulator(host="127.0.0.2", port=a.port) as b:
                assert b.server is not None
                async with await handshaken(a.address) as old:
                    await old.execute("SELECT", "3")
                    await old.execute("SET", "k", "before")
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(lambda: migrate(a, b, time=2, grace=0.5))
                        push = await next_push(old)
                        assert push[0] == b"MOVING"
                        assert push[3] == f"127.0.0.2:{a.port}".encode()
                        # The old connection keeps serving, on the new primary (its
                        # SELECT replayed there).
                        assert await old.execute("GET", "k") == b"before"
                        assert await old.execute("SET", "k", "old-conn") == b"OK"
                        assert a.connections[0].backend == b.server.address
                        async with await handshaken(a.address, "none") as late:
                            late_push = await next_push(late)
                            assert late_push[:3] == [b"MOVING", push[1], push[2]]
                            assert late_push[3] is None
                            assert await late.execute("SET", "late", "1") == b"OK"
                    async with await connect_raw(b.server.address) as check:
                        assert await check.execute("GET", "late") == b"1"
                        await check.execute("SELECT", "3")
                        assert await check.execute("GET", "k") == b"old-conn"


async def test_connection_opened_mid_window_via_a_chained_simulator_gets_the_window() -> None:
    """moving_scenario with a simulator as target (new connections on the old address pass
    through it): a connection opened during the window still gets the open MIGRATING and
    the MOVING, right after its opt-in's answer."""
    async with RedisServer() as server, MaintenanceSimulator(backend=server) as a:
        async with MaintenanceSimulator(backend=server, host="127.0.0.2", port=a.port) as b:
            with trio.fail_after(15):
                migrating = await a.inject_migrating(remember=True)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(moving_scenario(b, time=2, grace=0.5).run, a)
                    while a.backend_address != b.address:  # the MOVING step ran
                        await trio.sleep(0.01)
                    late = await handshaken(a.address)
                    async with late:
                        pushes = [await next_push(late), await next_push(late)]
                        names = sorted((p[0], p[1]) for p in pushes)
                        assert names == [(b"MIGRATING", migrating), (b"MOVING", migrating + 1)]
                        moving = next(p for p in pushes if p[0] == b"MOVING")
                        assert moving[3] == f"127.0.0.2:{a.port}".encode()
                        assert await late.execute("PING") == b"PONG"
                        # the chained simulator saw the opt-in too
                        assert any(c.maint_enabled for c in b.connections)


async def test_sequence_ids_shared_by_default_and_per_node_as_an_option() -> None:
    async with RedisServer() as server:
        async with (
            MaintenanceSimulator(backend=server) as a,
            MaintenanceSimulator(backend=server) as b,
        ):
            ids = [await a.inject_moving(), await b.inject_moving(), await a.inject_migrating()]
            assert ids == [1001, 1002, 1003]
        async with (
            MaintenanceSimulator(backend=server, seq_start=1001) as a,
            MaintenanceSimulator(backend=server, seq_start=1001) as b,
        ):
            assert [await a.inject_moving(), await b.inject_moving()] == [1001, 1001]
            assert a.next_seq_id() == 1002


async def test_migrate_after_a_moving_is_refused_and_a_failed_catch_up_is_undone() -> None:
    # Found by a fresh-user pass of `trio-maint simulate`: after a MOVING scenario (the old
    # simulator forwards to the new one), migrate made the target's server a replica of
    # itself, timed out, and left it read-only: every write failed with READONLY.
    with trio.fail_after(30):
        async with MaintenanceSimulator() as a:
            async with MaintenanceSimulator(host="127.0.0.2", port=a.port) as b:
                assert a.server is not None and b.server is not None
                a.set_backend(b)  # as a MOVING scenario leaves it
                with pytest.raises(ValueError, match="forwards to") as refused:
                    await migrate(a, b, time=1)
                assert "MaintenanceSimulator" not in str(refused.value)  # a sentence
                assert await role(b.server) == "master"
                a.set_backend(a.server)
                with pytest.raises(TimeoutError):
                    await migrate(a, b, time=1, sync_timeout=0.001)
                assert await role(b.server) == "master"  # the failed switch undone
                assert await role(a.server) == "master"
