"""MaintenanceSimulator: transparency, injection, handshake interception, traffic actions,
and that nothing leaks. Clients here are raw sockets with hiredis-parsed replies."""

from __future__ import annotations

import gc
import os
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import hiredis
import pytest
import trio

from trio_maint._sansio.resp import encode_command, is_push
from trio_maint.testing import (
    MaintenanceSimulator,
    RawConnection,
    RedisServer,
    connect_raw,
    golden_payloads,
)

pytestmark = pytest.mark.trio

TIMEOUT = 15.0


# --- helpers ------------------------------------------------------------------------------


class Wire:
    """A raw RESP client that keeps both the parsed frames and the exact bytes received."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = hiredis.Reader(notEnoughData=Ellipsis)
        self.raw = bytearray()

    @classmethod
    async def open(cls, address: tuple[str, int]) -> Wire:
        return cls(await trio.open_tcp_stream(*address))

    async def send(self, *commands: Sequence[Any]) -> None:
        await self.stream.send_all(b"".join(encode_command(tuple(c)) for c in commands))

    async def frames(self, count: int) -> list[Any]:
        out: list[Any] = []
        while len(out) < count:
            value = self.reader.gets()
            if value is not Ellipsis:
                out.append(value)
                continue
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.raw += data
            self.reader.feed(data)
        return out

    async def call(self, *args: Any) -> Any:
        await self.send(args)
        (reply,) = await self.frames(1)
        return reply

    async def hello3(self, endpoint_type: str | None = None) -> None:
        assert (await self.call("HELLO", "3"))[b"proto"] == 3
        if endpoint_type is not None:
            args = ["CLIENT", "MAINT_NOTIFICATIONS", "ON"]
            if endpoint_type != "":
                args += ["moving-endpoint-type", endpoint_type]
            assert await self.call(*args) == b"OK"
        self.raw.clear()

    async def eof(self) -> bool:
        """True when the peer closed (EOF or reset) before any more data arrived."""
        try:
            return await self.stream.receive_some(65536) == b""
        except trio.BrokenResourceError:
            return True

    async def aclose(self) -> None:
        await self.stream.aclose()


@pytest.fixture
async def sim(redis_server: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=redis_server) as s:
        yield s


@pytest.fixture(scope="module")
def second_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def _names(frames: list[Any]) -> list[Any]:
    return [f[0] if is_push(f) else f for f in frames]


# --- transparency -------------------------------------------------------------------------


async def _script(w: Wire, prefix: str) -> bytes:
    """A deterministic suite of commands; returns the exact bytes of all replies."""
    rng = random.Random(7)
    big = rng.randbytes(3 * 1024 * 1024 + 17)
    steps: list[list[Any]] = [
        ["SET", f"{prefix}big", big],
        ["GET", f"{prefix}big"],
        ["STRLEN", f"{prefix}big"],
        ["GET", f"{prefix}missing"],
        ["LPUSH", f"{prefix}l", "a", "b", "c"],
        ["LRANGE", f"{prefix}l", 0, -1],
        ["HSET", f"{prefix}h", "f1", "1", "f2", "2"],
        ["HGETALL", f"{prefix}h"],
        ["INCRBYFLOAT", f"{prefix}f", "1.5"],
        ["SADD", f"{prefix}s", "x"],
        ["SMEMBERS", f"{prefix}s"],
        ["NOSUCHCOMMAND"],
        ["INCR", f"{prefix}h"],
        ["DEL", f"{prefix}big", f"{prefix}l", f"{prefix}h", f"{prefix}f", f"{prefix}s"],
    ]
    for cmd in steps:  # one at a time
        await w.send(cmd)
        await w.frames(1)
    burst = [["SET", f"{prefix}k{i}", rng.randbytes(rng.randint(0, 3000))] for i in range(200)]
    burst += [["GET", f"{prefix}k{i}"] for i in range(200)]
    burst += [["DEL", *[f"{prefix}k{i}" for i in range(200)]]]
    await w.send(*burst)  # one pipelined burst
    await w.frames(len(burst))
    return bytes(w.raw)


async def test_transparent_byte_for_byte(
    sim: MaintenanceSimulator, redis_server: RedisServer
) -> None:
    with trio.fail_after(TIMEOUT):
        direct = await Wire.open(redis_server.address)
        proxied = await Wire.open(sim.address)
        for w in (direct, proxied):
            await w.hello3()
        direct_bytes = await _script(direct, "tm:t:")
        proxied_bytes = await _script(proxied, "tm:t:")
        assert len(proxied_bytes) > 3 * 1024 * 1024
        assert direct_bytes == proxied_bytes
        await direct.aclose()
        await proxied.aclose()


async def test_exact_bytes_of_known_replies(
    sim: MaintenanceSimulator, redis_server: RedisServer
) -> None:
    value = b"v" * (5 * 1024 * 1024)
    with trio.fail_after(TIMEOUT):
        setup = await Wire.open(redis_server.address)
        assert await setup.call("SET", "tm:exact", value) == b"OK"
        direct = await Wire.open(redis_server.address)
        proxied = await Wire.open(sim.address)
        commands = [["GET", "tm:exact"], ["PING"], ["ECHO", "x" * 70000], ["BADCMD"]] * 5
        for w in (direct, proxied):
            await w.hello3()
            await w.send(*commands)
            await w.frames(len(commands))
        assert direct.raw == proxied.raw
        assert len(proxied.raw) > 25 * 1024 * 1024
        await setup.call("DEL", "tm:exact")
        for w in (setup, direct, proxied):
            await w.aclose()


async def test_pubsub_resp3_and_resp2(sim: MaintenanceSimulator, redis_server: RedisServer) -> None:
    with trio.fail_after(TIMEOUT):
        pub = await Wire.open(redis_server.address)
        sub3 = await Wire.open(sim.address)
        await sub3.hello3("internal-ip")
        await sub3.send(["SUBSCRIBE", "tm:ch"], ["PING"])
        assert _names(await sub3.frames(2)) == [b"subscribe", b"PONG"]
        sub2 = await Wire.open(sim.address)
        await sub2.send(["SUBSCRIBE", "tm:ch", "tm:ch2"])
        assert [f[0] for f in await sub2.frames(2)] == [b"subscribe", b"subscribe"]
        assert await pub.call("PUBLISH", "tm:ch", "hello") == 2
        (msg,) = await sub3.frames(1)
        assert is_push(msg)
        assert list(msg) == [b"message", b"tm:ch", b"hello"]
        assert await sub2.frames(1) == [[b"message", b"tm:ch", b"hello"]]
        # A notification and pub/sub traffic interleave whole.
        await sim.inject_migrating(seq_id=5)
        await pub.call("PUBLISH", "tm:ch", "again")
        frames = await sub3.frames(2)
        assert sorted(bytes(f[0]) for f in frames) == [b"MIGRATING", b"message"]
        for w in (pub, sub3, sub2):
            await w.aclose()


async def test_blocking_pop(sim: MaintenanceSimulator, redis_server: RedisServer) -> None:
    with trio.fail_after(TIMEOUT):
        pusher = await Wire.open(redis_server.address)
        w = await Wire.open(sim.address)
        await w.hello3("none")
        await w.send(["BLPOP", "tm:q", 5])

        async def push_later() -> None:
            await trio.sleep(0.2)
            await pusher.call("RPUSH", "tm:q", "item")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(push_later)
            # An injection while BLPOP blocks arrives before its reply, whole.
            await trio.sleep(0.05)
            await sim.inject_failing_over()
            frames = await w.frames(2)
        assert frames[0][0] == b"FAILING_OVER"
        assert frames[1] == [b"tm:q", b"item"]
        await pusher.aclose()
        await w.aclose()


# --- injection ----------------------------------------------------------------------------


@pytest.mark.parametrize("position", range(0, 21))
async def test_injection_at_every_point_of_a_burst(
    sim: MaintenanceSimulator, position: int
) -> None:
    n = 20
    with trio.fail_after(TIMEOUT):
        w = await Wire.open(sim.address)
        await w.hello3("internal-ip")
        await w.call("DEL", "tm:ctr")
        (cid,) = [c.id for c in sim.connections]
        await sim.inject_moving(seq_id=99, time=15, connections=[cid], after_frames=position)
        await w.send(*[["INCR", "tm:ctr"]] * n)
        frames = await w.frames(n + 1)
        assert is_push(frames[position])
        assert list(frames[position]) == [b"MOVING", 99, 15, f"127.0.0.1:{sim.port}".encode()]
        replies = frames[:position] + frames[position + 1 :]
        assert replies == list(range(1, n + 1))
        await w.aclose()


async def test_concurrent_injections_under_load_stay_whole(sim: MaintenanceSimulator) -> None:
    rng = random.Random(3)
    values = [os.urandom(rng.choice([10, 1000, 70000, 400000])) for _ in range(60)]
    with trio.fail_after(TIMEOUT):
        w = await Wire.open(sim.address)
        await w.hello3("external-ip")
        commands: list[list[Any]] = []
        for i, v in enumerate(values):
            commands += [["SET", f"tm:load{i}", v], ["GET", f"tm:load{i}"]]
        received: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def injector() -> None:
                for seq in range(40):
                    await sim.inject_migrating(seq_id=seq)
                    await trio.sleep(rng.random() * 0.004)

            async def reader() -> None:
                received.extend(await w.frames(len(commands) + 40))

            nursery.start_soon(injector)
            nursery.start_soon(reader)
            await w.send(*commands)
        flags = [is_push(f) for f in received]
        triples = zip(flags, flags[1:], flags[2:], strict=False)
        assert any(not a and b and not c for a, b, c in triples)  # some landed mid-burst
        pushes = [f for f in received if is_push(f)]
        replies = [f for f in received if not is_push(f)]
        assert [list(p) for p in pushes] == [[b"MIGRATING", s, 2, b"1"] for s in range(40)]
        expected: list[Any] = []
        for v in values:
            expected += [b"OK", v]
        assert replies == expected
        await w.call("DEL", *[f"tm:load{i}" for i in range(len(values))])
        await w.aclose()


async def test_raw_injection_arrives_byte_for_byte(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        w = await Wire.open(sim.address)
        await w.hello3("internal-ip")
        for payload in golden_payloads().values():
            await sim.inject_raw(payload.data)
            (frame,) = await w.frames(1)
            assert bytes(w.raw) == payload.data
            w.raw.clear()
            assert is_push(frame)
        garbage = b"\x00not RESP at all\r\n>9\r\n"
        await sim.inject_raw(garbage)
        got = b""
        while len(got) < len(garbage):
            got += await w.stream.receive_some(100)
        assert got == garbage
        await w.aclose()


async def test_every_notification_type_and_moving_endpoint_per_type(
    sim: MaintenanceSimulator, second_server: RedisServer
) -> None:
    types = ["internal-ip", "external-fqdn", "none", "", "internal-fqdn"]
    with trio.fail_after(TIMEOUT):
        async with MaintenanceSimulator(backend=second_server) as target:
            wires = []
            for t in types:
                w = await Wire.open(sim.address)
                await w.hello3(t)
                wires.append(w)
            plain = await Wire.open(sim.address)  # never enabled notifications
            infos = {c.id: c for c in sim.connections}
            assert [infos[i].endpoint_type for i in sorted(infos)] == [
                "internal-ip",
                "external-fqdn",
                "none",
                None,
                "internal-fqdn",
                None,
            ]
            assert [infos[i].maint_enabled for i in sorted(infos)] == [True] * 5 + [False]
            await sim.inject_moving(seq_id=7, time=15, target=target)
            ip = f"127.0.0.1:{target.port}".encode()
            fqdn = f"localhost:{target.port}".encode()
            got = [list((await w.frames(1))[0]) for w in wires]
            assert got == [
                [b"MOVING", 7, 15, ip],
                [b"MOVING", 7, 15, fqdn],
                [b"MOVING", 7, 15, None],
                [b"MOVING", 7, 15, ip],
                [b"MOVING", 7, 15, fqdn],
            ]
            none_wire = wires[2]
            (none_id,) = [c.id for c in sim.connections if c.endpoint_type == "none"]
            await sim.inject_moving(seq_id=8, time=15, null="omit", connections=[none_id])
            await sim.inject_moving(seq_id=9, time=15, null="$-1", connections=[none_id])
            await none_wire.frames(2)
            assert bytes(none_wire.raw).endswith(
                b">3\r\n$6\r\nMOVING\r\n:8\r\n:15\r\n>4\r\n$6\r\nMOVING\r\n:9\r\n:15\r\n$-1\r\n"
            )
            w = wires[0]
            await sim.inject_migrating(seq_id=10, connections=[1])
            await sim.inject_migrated(seq_id=11, connections=[1])
            await sim.inject_failing_over(seq_id=12, connections=[1])
            await sim.inject_failed_over(seq_id=13, connections=[1])
            await sim.inject_smigrating(seq_id=14, slots="123,789-1000", connections=[1])
            await sim.inject_smigrated(
                [("127.0.0.1:1", "127.0.0.1:2", "0-100")], seq_id=15, connections=[1]
            )
            await sim.inject_smigrated(
                [("127.0.0.1:2", "0-100")], seq_id=16, connections=[1], strings="simple"
            )
            frames = [list(f) for f in await w.frames(7)]
            assert frames == [
                [b"MIGRATING", 10, 2, b"1"],
                [b"MIGRATED", 11, b"1"],
                [b"FAILING_OVER", 12, 2, b"1"],
                [b"FAILED_OVER", 13, b"1"],
                [b"SMIGRATING", 14, b"123,789-1000"],
                [b"SMIGRATED", 15, [[b"127.0.0.1:1", b"127.0.0.1:2", b"0-100"]]],
                [b"SMIGRATED", 16, [[b"127.0.0.1:2", b"0-100"]]],
            ]
            # The never-enabled connection got nothing; "all" reaches it.
            await sim.inject_raw(b">1\r\n+x\r\n", connections="all")
            assert list((await plain.frames(1))[0]) == [b"x"]
            assert plain.raw == b">1\r\n+x\r\n"
            # Sequence ids count up from 1001 when not given.
            assert await sim.inject_migrating(connections=[]) == 1001
            for w in [*wires, plain]:
                await w.aclose()


async def test_remembered_notification_reaches_new_connections(
    sim: MaintenanceSimulator,
) -> None:
    with trio.fail_after(TIMEOUT):
        await sim.inject_moving(seq_id=50, time=15, remember=True)
        w = await Wire.open(sim.address)
        assert (await w.call("HELLO", "3"))[b"proto"] == 3
        await w.send(["CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "none"])
        assert _names(await w.frames(2)) == [b"OK", b"MOVING"]
        sim.forget()
        w2 = await Wire.open(sim.address)
        await w2.hello3("none")
        await w2.send(["PING"])
        assert await w2.frames(1) == [b"PONG"]
        await w.aclose()
        await w2.aclose()


# --- handshake interception ---------------------------------------------------------------


async def test_maint_handshake_answers_in_order_with_pipelined_replies(
    sim: MaintenanceSimulator, redis_server: RedisServer
) -> None:
    with trio.fail_after(TIMEOUT):
        pusher = await Wire.open(redis_server.address)
        w = await Wire.open(sim.address)
        maint_on = ["client", "maint_notifications", "on", "moving-endpoint-type", "none"]
        # HELLO, a BLPOP that blocks 0.3 s, the handshake, then a PING: the +OK must come
        # after BLPOP's reply even though the proxy could answer at once.
        await w.send(["HELLO", "3"], ["BLPOP", "tm:nothing", "0.3"], maint_on, ["PING"])
        frames = await w.frames(4)
        assert frames[1:] == [None, b"OK", b"PONG"]
        # Same with latency on the server's replies.
        sim.set_latency(0.05)
        await w.send(["SET", "tm:a", "1"], maint_on, ["GET", "tm:a"], maint_on, ["INCR", "tm:a"])
        assert await w.frames(5) == [b"OK", b"OK", b"1", b"OK", 2]
        sim.set_latency(0)
        # Inline commands are scanned too.
        await w.stream.send_all(b"PING\r\nCLIENT MAINT_NOTIFICATIONS OFF\r\nPING\r\n")
        assert await w.frames(3) == [b"PONG", b"OK", b"PONG"]
        assert not sim.connections[0].maint_enabled
        # Errors for bad forms.
        err = await w.call("CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "x")
        assert isinstance(err, hiredis.ReplyError)
        await pusher.call("DEL", "tm:a")
        await pusher.aclose()
        await w.aclose()


async def test_oss_mode_rejects_like_redis_open_source(redis_server: RedisServer) -> None:
    with trio.fail_after(TIMEOUT):
        async with MaintenanceSimulator(backend=redis_server, maint_notifications=False) as s:
            w = await Wire.open(s.address)
            await w.call("HELLO", "3")
            err = await w.call("CLIENT", "MAINT_NOTIFICATIONS", "ON")
            assert isinstance(err, hiredis.ReplyError)
            assert "unknown subcommand" in str(err).lower()
            assert not s.connections[0].maint_enabled
            await w.aclose()


async def test_resp2_only_mode(redis_server: RedisServer) -> None:
    with trio.fail_after(TIMEOUT):
        async with MaintenanceSimulator(backend=redis_server, resp2_only=True) as s:
            w = await Wire.open(s.address)
            err = await w.call("HELLO", "3")
            assert isinstance(err, hiredis.ReplyError)
            assert str(err).startswith("NOPROTO")
            assert isinstance(await w.call("HELLO", "2"), list)  # RESP2 map-as-array
            assert s.connections[0].protocol == 2
            err = await w.call("CLIENT", "MAINT_NOTIFICATIONS", "ON")
            assert "unknown subcommand" in str(err).lower()
            await w.aclose()


# --- traffic actions ----------------------------------------------------------------------


async def test_set_backend_for_new_connections(
    sim: MaintenanceSimulator, second_server: RedisServer
) -> None:
    with trio.fail_after(TIMEOUT):
        async with await connect_raw(second_server.address) as admin:
            assert await admin.execute("SET", "tm:where", "second") == b"OK"
        old = await Wire.open(sim.address)
        assert await old.call("GET", "tm:where") is None
        sim.set_backend(second_server)
        new = await Wire.open(sim.address)
        assert await new.call("GET", "tm:where") == b"second"
        assert await old.call("GET", "tm:where") is None  # open connections keep theirs
        assert {c.backend for c in sim.connections} == {
            sim.server.address if sim.server else (),
            second_server.address,
        }
        await old.aclose()
        await new.aclose()


async def test_chained_simulator_backend(
    sim: MaintenanceSimulator, second_server: RedisServer
) -> None:
    with trio.fail_after(TIMEOUT):
        async with MaintenanceSimulator(backend=second_server) as target:
            sim.set_backend(target)
            w = await Wire.open(sim.address)
            await w.hello3("internal-ip")  # answered by the target simulator
            with trio.fail_after(2):
                await target.wait_for_connections(1, maint_enabled=True)
            # both ends know: the first simulator forwarded the opt-in (the target answered
            # it) and can still notify the connection, as the old endpoint does in a window
            assert sim.connections[0].maint_enabled
            assert sim.connections[0].endpoint_type == "internal-ip"
            await target.inject_migrating(seq_id=1)
            assert (await w.frames(1))[0][0] == b"MIGRATING"
            await sim.inject_migrated(seq_id=2)
            assert (await w.frames(1))[0][:2] == [b"MIGRATED", 2]
            await w.aclose()


async def test_delayed_close(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        w = await Wire.open(sim.address)
        assert await w.call("PING") == b"PONG"
        started = trio.current_time()
        assert sim.close_connections(after=0.3) == [sim.connections[0].id]
        later = await Wire.open(sim.address)  # opened after the call: kept
        assert await w.eof()
        assert trio.current_time() - started >= 0.29
        assert await later.call("PING") == b"PONG"
        await w.aclose()
        await later.aclose()


async def test_latency(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        w = await Wire.open(sim.address)
        await w.call("PING")
        sim.set_latency(0.2)
        started = trio.current_time()
        assert await w.call("PING") == b"PONG"
        assert trio.current_time() - started >= 0.19
        sim.set_latency(0)
        started = trio.current_time()
        await w.call("PING")
        assert trio.current_time() - started < 0.15
        with pytest.raises(ValueError):
            sim.set_latency(-1)
        await w.aclose()


async def test_stall_and_unstall(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        w = await Wire.open(sim.address)
        await w.hello3("internal-ip")
        sim.stall()
        await w.send(["PING"])
        with trio.move_on_after(0.3) as cancel:
            await w.frames(1)
        assert cancel.cancelled_caught
        await sim.inject_migrating(seq_id=3)  # notifications still flow during a stall
        assert (await w.frames(1))[0][0] == b"MIGRATING"
        sim.unstall()
        assert await w.frames(1) == [b"PONG"]
        await w.aclose()


async def test_refuse_new_and_accept_again(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        w = await Wire.open(sim.address)
        await sim.refuse_new(True)
        with pytest.raises(OSError):
            await trio.open_tcp_stream(*sim.address)
        assert await w.call("PING") == b"PONG"
        await sim.refuse_new(False)
        w2 = await Wire.open(sim.address)
        assert await w2.call("PING") == b"PONG"
        await w.aclose()
        await w2.aclose()


async def test_drop_connections(sim: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        w = await Wire.open(sim.address)
        await w.call("PING")
        assert len(await sim.drop_connections()) == 1
        assert sim.connections == []
        assert await w.eof()
        await w.aclose()


async def test_backend_unreachable_closes_client(redis_server: RedisServer) -> None:
    with trio.fail_after(TIMEOUT):
        async with MaintenanceSimulator(backend=redis_server) as s:
            s.set_backend(("127.0.0.1", 1))
            w = await Wire.open(s.address)
            assert await w.eof()
            await w.aclose()


# --- lifetimes ----------------------------------------------------------------------------


def _open_fds() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def _task_count() -> int:
    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(walk(t) for n in task.child_nurseries for t in n.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None  # inside trio.run
    return walk(root)


async def test_nothing_leaks() -> None:
    with trio.fail_after(TIMEOUT):
        fds = _open_fds()
        tasks = _task_count()
        async with MaintenanceSimulator() as s:  # owns its redis-server
            server = s.server
            assert server is not None and server.process is not None
            wires = [await Wire.open(s.address) for _ in range(3)]
            for w in wires:
                await w.hello3("internal-ip")
            s.close_connections(after=30)  # a pending timer must not outlive the simulator
            s.stall()
            await wires[0].send(["PING"])  # a stalled, in-flight command
            assert _task_count() > tasks
            address = s.address
        assert server.process.poll() is not None  # reaped
        assert _task_count() == tasks
        for w in wires:
            assert await w.eof()
            await w.aclose()
        assert _open_fds() == fds
        with pytest.raises(OSError):
            await trio.open_tcp_stream(*address)


async def test_body_exception_propagates_unwrapped(redis_server: RedisServer) -> None:
    with trio.fail_after(TIMEOUT), pytest.raises(KeyError):
        async with MaintenanceSimulator(backend=redis_server):
            raise KeyError("boom")


async def test_plugin_fixture(maintenance_simulator: MaintenanceSimulator) -> None:
    with trio.fail_after(TIMEOUT):
        conn: RawConnection = await connect_raw(maintenance_simulator.address)
        async with conn:
            assert await conn.execute("PING") == b"PONG"
            await conn.execute("HELLO", "3")
            await conn.execute("CLIENT", "MAINT_NOTIFICATIONS", "ON")
            await maintenance_simulator.inject_migrating(seq_id=1)
            assert await conn.execute("PING") == b"PONG"
            assert [list(p) for p in conn.pushes] == [[b"MIGRATING", 1, 2, b"1"]]
