"""Scenario timelines (real time, compressed, and on MockClock) and the real `migrate`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

from trio_maint import parse_info
from trio_maint._sansio.endpoint import split_host_port
from trio_maint._sansio.resp import is_push
from trio_maint.testing import (
    MaintenanceSimulator,
    RawConnection,
    RedisServer,
    Scenario,
    connect_raw,
    failover_scenario,
    maintenance_scenario,
    migrate,
    migrating_scenario,
    moving_scenario,
    slot_migration_scenario,
)

pytestmark = pytest.mark.trio

TIMEOUT = 20.0


@pytest.fixture(scope="module")
def second_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def slow_autojump_clock() -> trio.testing.MockClock:
    """Virtual time that jumps only when every task waited 250 ms of real time, so loopback
    I/O to real servers completes before timers fire (threshold 0 would race it; 0.25 s
    leaves room on a loaded machine)."""
    return trio.testing.MockClock(autojump_threshold=0.25)


async def handshaken(address: tuple[str, int], endpoint_type: str) -> RawConnection:
    conn = await connect_raw(address)
    await conn.execute("HELLO", "3")
    assert (
        await conn.execute(
            "CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", endpoint_type
        )
        == b"OK"
    )
    return conn


async def next_push(conn: RawConnection) -> list[Any]:
    frame = await conn.read()
    assert is_push(frame), frame
    return list(frame)


async def wait_eof(conn: RawConnection) -> None:
    try:
        while True:
            await conn.read()
    except (EOFError, trio.BrokenResourceError):
        return


async def test_scenario_building() -> None:
    async def noop(sim: MaintenanceSimulator) -> None:
        return None

    s = Scenario("x").at(2.0, noop).at(1.0, noop, "first")
    assert s.duration == 2.0
    assert [st.at for st in s.compressed(4).steps] == [0.5, 0.25]
    with pytest.raises(ValueError):
        s.at(-1, noop)
    with pytest.raises(ValueError):
        s.compressed(0)


async def test_moving_scenario_full_timeline_on_mock_clock(
    slow_autojump_clock: trio.testing.MockClock,
    redis_server: RedisServer,
    second_server: RedisServer,
) -> None:
    with trio.fail_after(60):  # virtual seconds
        async with (
            MaintenanceSimulator(backend=redis_server) as a,
            MaintenanceSimulator(backend=second_server) as b,
        ):
            async with await connect_raw(second_server.address) as admin:
                await admin.execute("SET", "tm:scn:where", "B")
            ip_conn = await handshaken(a.address, "internal-ip")
            none_conn = await handshaken(a.address, "none")
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                records: list[Any] = []

                async def run() -> None:
                    records.extend(await moving_scenario(b).run(a))

                nursery.start_soon(run)
                moving = await next_push(ip_conn)
                assert moving == [b"MOVING", 1001, 15, f"127.0.0.1:{b.port}".encode()]
                assert trio.current_time() - start < 1.0
                # The ip client follows the endpoint at once.
                moved = await handshaken(("127.0.0.1", b.port), "internal-ip")
                assert await moved.execute("GET", "tm:scn:where") == b"B"
                # The none client got a null endpoint and reconnects to the same address
                # at time/2; the old address now leads to B.
                assert await next_push(none_conn) == [b"MOVING", 1001, 15, None]
                await trio.sleep(7.5)
                again = await handshaken(a.address, "none")
                assert await again.execute("GET", "tm:scn:where") == b"B"
                await wait_eof(ip_conn)
                closed_at = trio.current_time() - start
                await wait_eof(none_conn)
            assert 16.9 <= closed_at <= 17.5
            assert [(r.label, r.planned) for r in records] == [
                ("MOVING", 0.0),
                ("null-endpoint clients reconnect (still open)", 7.5),
                ("old endpoint closes", 17.0),
            ]
            assert await again.execute("PING") == b"PONG"  # new connections are kept
            for conn in (ip_conn, none_conn, moved, again):
                await conn.aclose()


async def test_maintenance_scenario_sequence_on_mock_clock(
    slow_autojump_clock: trio.testing.MockClock,
    redis_server: RedisServer,
    second_server: RedisServer,
) -> None:
    with trio.fail_after(60):
        async with (
            MaintenanceSimulator(backend=redis_server) as a,
            MaintenanceSimulator(backend=second_server) as b,
        ):
            conn = await handshaken(a.address, "external-ip")
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(maintenance_scenario(b, seq_id=500).run, a)
                seen = []
                for _ in range(3):
                    push = await next_push(conn)
                    seen.append((push[0], push[1], round(trio.current_time() - start, 1)))
                await wait_eof(conn)
                closed = trio.current_time() - start
            assert seen == [
                (b"MIGRATING", 500, 0.0),
                (b"MIGRATED", 501, 3.0),
                (b"MOVING", 1001, 3.0),
            ]
            assert 19.9 <= closed <= 20.5
            await conn.aclose()


async def test_compressed_migration_in_real_time(redis_server: RedisServer) -> None:
    with trio.fail_after(TIMEOUT):
        async with MaintenanceSimulator(backend=redis_server) as sim:
            conn = await handshaken(sim.address, "internal-ip")
            scenario = migrating_scenario(lead=2.0, work=1.0, latency=0.05, seq_id=10, compress=10)
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(scenario.run, sim)
                assert await next_push(conn) == [b"MIGRATING", 10, 1, b"1"]
                # A connection opened during the window gets the current notification.
                late = await connect_raw(sim.address)
                await late.execute("HELLO", "3")
                await late.send(("CLIENT", "MAINT_NOTIFICATIONS", "ON"))
                assert await late.read() == b"OK"
                assert (await next_push(late))[0] == b"MIGRATING"
                await trio.sleep(0.22)  # inside the work window: latency applies
                t0 = trio.current_time()
                assert await late.execute("PING") == b"PONG"
                assert trio.current_time() - t0 >= 0.04
                assert await next_push(conn) == [b"MIGRATED", 11, b"1"]
            assert 0.28 <= trio.current_time() - start < 1.5
            assert await late.execute("PING") == b"PONG"
            await conn.aclose()
            await late.aclose()


async def test_failover_and_slot_migration_scenarios(redis_server: RedisServer) -> None:
    with trio.fail_after(TIMEOUT):
        async with MaintenanceSimulator(backend=redis_server) as sim:
            conn = await handshaken(sim.address, "none")
            await failover_scenario(seq_id=1, compress=20).run(sim)
            assert await next_push(conn) == [b"FAILING_OVER", 1, 1, b"1"]
            assert await next_push(conn) == [b"FAILED_OVER", 2, b"1"]
            entries = [("127.0.0.1:7000", "127.0.0.1:7001", "0-100")]
            await slot_migration_scenario(entries, slots="0-100", seq_id=5, compress=20).run(sim)
            assert await next_push(conn) == [b"SMIGRATING", 5, b"0-100"]
            assert await next_push(conn) == [
                b"SMIGRATED",
                6,
                [[b"127.0.0.1:7000", b"127.0.0.1:7001", b"0-100"]],
            ]
            await conn.aclose()


# --- migrate: real data, no acknowledged write lost ----------------------------------------


def _parse_endpoint(endpoint: bytes) -> tuple[str, int]:
    return split_host_port(endpoint.decode(), require_port=True)


async def writer(
    name: str,
    start_address: tuple[str, int],
    endpoint_type: str,
    acked: dict[str, int],
    stop: trio.Event,
    moved_to: list[tuple[str, int]],
) -> None:
    """A minimal maintenance-aware writer: SET name:i i in a loop, follows MOVING."""
    address = start_address
    conn = await handshaken(address, endpoint_type)
    reconnect_at: float | None = None
    i = 0
    try:
        while not stop.is_set():
            i += 1
            key = f"{name}:{i}"
            try:
                await conn.send(("SET", key, i))
                reply = await conn.read_reply()
            except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
                await conn.aclose()
                conn = await handshaken(address, endpoint_type)
                continue
            if reply == b"OK":
                acked[key] = i
            for push in conn.pushes:
                if push[0] == b"MOVING":
                    if len(push) > 3 and push[3] is not None:
                        address = _parse_endpoint(push[3])
                        moved_to.append(address)
                        reconnect_at = trio.current_time()
                    else:
                        reconnect_at = trio.current_time() + push[2] / 2
            conn.pushes.clear()
            if reconnect_at is not None and trio.current_time() >= reconnect_at:
                reconnect_at = None
                await conn.aclose()
                conn = await handshaken(address, endpoint_type)
            await trio.sleep(0.002)
    finally:
        await conn.aclose()


@pytest.mark.slow
async def test_migrate_moves_data_and_loses_no_acknowledged_write() -> None:
    with trio.fail_after(30):
        async with MaintenanceSimulator() as a, MaintenanceSimulator() as b:
            assert a.server is not None and b.server is not None
            acked: dict[str, int] = {}
            moved_to: list[tuple[str, int]] = []
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer, "ip", a.address, "internal-ip", acked, stop, moved_to)
                nursery.start_soon(writer, "none", a.address, "none", acked, stop, moved_to)
                await a.wait_for_connections(2, maint_enabled=True)
                await trio.sleep(0.2)
                before = len(acked)
                result = await migrate(a, b, time=1)
                after_migration = len(acked)
                await trio.sleep(0.3)
                stop.set()
            assert before > 10
            assert len(acked) > after_migration  # traffic kept flowing on B
            assert moved_to == [b.address]
            assert result.paused_for < 1.0
            assert len(result.moved) == 2
            async with await connect_raw(b.server.address) as admin:
                info = parse_info(await admin.execute("INFO", "replication"))
                assert info["role"] == "master"
                keys = sorted(acked)
                values = []
                for start in range(0, len(keys), 500):
                    values += await admin.execute("MGET", *keys[start : start + 500])
                lost = [k for k, v in zip(keys, values, strict=True) if v != str(acked[k]).encode()]
                assert lost == []
                for name in ("ip", "none"):
                    assert any(k.startswith(name + ":") for k in keys)
            async with await connect_raw(a.server.address) as admin:
                assert parse_info(await admin.execute("INFO", "replication"))["role"] == "slave"
