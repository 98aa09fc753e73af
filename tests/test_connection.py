"""Connections against a real redis-server: transports, handshake, timeouts, cancel safety."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import (
    AuthenticationError,
    ClientOptions,
    ConnectionBusyError,
    ConnectionError,
    ResponseError,
    TimeoutError,
)
from trio_maint._net.timer import ReplyTimer
from trio_maint._net.wire import PUSH_BURST
from trio_maint.lowlevel import Connection
from trio_maint.testing import RedisServer, free_port

from ._stallproxy import open_scripted_server, open_silent_server, open_stall_proxy

pytestmark = pytest.mark.trio


def opts(url: str, **kw: Any) -> ClientOptions:
    return ClientOptions.from_url(url, **kw)


async def test_tcp_handshake_is_resp3(redis_url: str) -> None:
    conn = await Connection.open(opts(redis_url, client_name="trio-maint-test"))
    try:
        assert conn.server_info[b"proto"] == 3
        assert await conn.execute(("CLIENT", "GETNAME")) == b"trio-maint-test"
        assert await conn.execute(("PING",)) == b"PONG"
    finally:
        await conn.aclose()
    assert conn.closed


async def test_select_db_in_handshake(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, db=3) as r:
        info = await r.execute_command("CLIENT", "INFO")
        assert b" db=3 " in info


async def test_unix_socket(unix_path: str) -> None:
    async with trio_maint.open_redis(f"unix://{unix_path}?db=4") as r:
        assert await r.ping() is True
        assert b" db=4 " in await r.execute_command("CLIENT", "INFO")


async def test_server_refusing_hello3_gives_clear_error() -> None:
    async with open_scripted_server(b"-ERR unknown command 'HELLO'\r\n") as port:
        with pytest.raises(ConnectionError, match="RESP3"):
            await Connection.open(ClientOptions(host="127.0.0.1", port=port))


async def test_unreachable_endpoint_is_connection_error() -> None:
    port = free_port()
    with pytest.raises(ConnectionError, match="cannot connect"):
        await Connection.open(ClientOptions(host="127.0.0.1", port=port))


@pytest.fixture(scope="module")
def auth_server() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--requirepass", "s3cret")) as srv:
        yield srv


async def test_auth_with_password(auth_server: RedisServer) -> None:
    async with trio_maint.open_redis(f"redis://:s3cret@127.0.0.1:{auth_server.port}") as r:
        assert await r.ping() is True


async def test_auth_with_acl_user(auth_server: RedisServer) -> None:
    async with trio_maint.open_redis(f"redis://:s3cret@127.0.0.1:{auth_server.port}") as r:
        await r.execute_command("ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all")
    async with trio_maint.open_redis(f"redis://alice:pw@127.0.0.1:{auth_server.port}") as r:
        assert await r.execute_command("ACL", "WHOAMI") == b"alice"


async def test_wrong_password_is_authentication_error(auth_server: RedisServer) -> None:
    async with trio_maint.open_redis(f"redis://:nope@127.0.0.1:{auth_server.port}") as r:
        with pytest.raises(AuthenticationError):
            await r.ping()
    async with trio_maint.open_redis(f"redis://127.0.0.1:{auth_server.port}") as r:
        with pytest.raises(AuthenticationError):
            await r.ping()


# ------------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, int, Any]]:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    d = tmp_path_factory.mktemp("tls")
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    tls_port = free_port()
    args = (
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(d / "cert.pem"),
        "--tls-key-file", str(d / "key.pem"),
        "--tls-ca-cert-file", str(d / "ca.pem"),
        "--tls-auth-clients", "no",
    )  # fmt: skip
    with RedisServer(extra_args=args) as srv:
        yield srv, tls_port, ca


async def test_tls_rediss(tls_server: tuple[RedisServer, int, Any]) -> None:
    _, port, ca = tls_server
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    async with trio_maint.open_redis(f"rediss://localhost:{port}", ssl_context=ctx) as r:
        assert await r.set("tls", "yes") is True
        assert await r.get("tls") == b"yes"
        conn = r.pool.connections[0]
        assert isinstance(conn._stream, trio.SSLStream)


async def test_tls_untrusted_certificate_fails(tls_server: tuple[RedisServer, int, Any]) -> None:
    _, port, _ = tls_server
    async with trio_maint.open_redis(f"rediss://localhost:{port}", connect_timeout=5) as r:
        with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await r.ping()


# ------------------------------------------------------------------- timeouts


async def test_timeout_error_is_builtin_timeout(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, socket_timeout=0.2) as r:
        with pytest.raises(TimeoutError) as info:
            # (A blocking command's reply wait is its own timeout plus socket_timeout:
            # an explicit timeout shorter than the command's makes it time out.)
            await r.execute_command("BLPOP", "never-filled", "1", timeout=0.2)
        assert isinstance(info.value, builtins_timeout())
        # The connection that timed out was discarded; the next command is fine.
        assert await r.ping() is True
        assert r.pool.stats().removed == 1


def builtins_timeout() -> type[BaseException]:
    import builtins

    return builtins.TimeoutError


async def test_per_command_timeout(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url) as r:
        with pytest.raises(TimeoutError):
            await r.execute_command("BLPOP", "never", "0", timeout=0.1)


async def test_reply_timeouts_go_through_the_pools_timer(redis_url: str) -> None:
    # The client's ReplyTimer bounds reply waits (no cancel scope per reply): a shorter
    # per-command timeout arriving while a longer one waits fires on time, the longer
    # one at its own deadline, and nothing stays armed.
    async with trio_maint.open_redis(redis_url, socket_timeout=30.0, pool_size=3) as r:
        await r.ping()
        timer = r.pool.reply_timer
        assert timer is not None and timer.running
        assert all(c.reply_timer is timer for c in r.pool.connections)
        ended: dict[str, float] = {}

        async def blpop(name: str, timeout: float) -> None:
            with pytest.raises(TimeoutError, match="within the socket timeout"):
                await r.execute_command("BLPOP", f"never-{name}", "0", timeout=timeout)
            ended[name] = trio.current_time()

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(blpop, "long", 1.2)
            await trio.sleep(0.1)  # "long" is waiting for its reply
            nursery.start_soon(blpop, "short", 0.3)
        # Real time (a real server): bounds loose enough for a loaded machine.
        assert 0.3 <= ended["short"] - start < 0.9
        assert 1.2 <= ended["long"] - start < 2.5
        assert timer._armed == {}
        assert r.pool.stats().removed == 2  # each timed-out connection was discarded
        assert await r.ping() is True


async def test_a_cancelled_reply_wait_leaves_nothing_armed(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, socket_timeout=30.0) as r:
        await r.ping()
        timer = r.pool.reply_timer
        assert timer is not None and timer.running
        with trio.move_on_after(0.2) as scope:
            await r.execute_command("BLPOP", "never-cancelled", "0")
        assert scope.cancelled_caught
        assert timer._armed == {}
        assert r.pool.stats().removed == 1  # cancelled mid-reply: discarded, not reused
        assert await r.ping() is True


async def test_connect_timeout_on_silent_server() -> None:
    async with open_silent_server() as port:
        with trio.fail_after(5):
            with pytest.raises(TimeoutError, match="connecting"):
                await Connection.open(
                    ClientOptions(host="127.0.0.1", port=port, connect_timeout=0.2)
                )


async def test_blocking_pop_zero_waits_without_socket_timeout(redis_url: str) -> None:
    # socket_timeout is small but not tiny, so a loaded machine does not time out the
    # other commands; the pop waits three times longer than it.
    async with trio_maint.open_redis(redis_url, socket_timeout=0.5) as r:
        await r.delete("bq")
        async with trio.open_nursery() as nursery:
            result: list[Any] = []

            async def pop() -> None:
                result.append(await r.blpop("bq", 0))

            nursery.start_soon(pop)
            await trio.sleep(1.5)  # longer than socket_timeout
            await r.rpush("bq", "x")
        assert result == [[b"bq", b"x"]]
        assert await r.blpop("bq", 0.1) is None


# --------------------------------------------------------------- cancel safety


async def test_cancel_during_connect_leaves_nothing_open() -> None:
    async with open_silent_server() as port:
        with trio.move_on_after(0.1) as scope:
            await Connection.open(ClientOptions(host="127.0.0.1", port=port, connect_timeout=None))
        assert scope.cancelled_caught


async def test_cancel_during_handshake_discards_connection(redis_url: str) -> None:
    server = ClientOptions.from_url(redis_url)
    async with open_stall_proxy(server.host, server.port) as proxy:
        async with trio_maint.open_redis(f"redis://127.0.0.1:{proxy.port}/9") as r:
            proxy.stall()
            with trio.move_on_after(0.2) as scope:
                await r.ping()
            assert scope.cancelled_caught
            assert r.pool.stats().total == 0
            proxy.resume()
            assert await r.ping() is True


async def test_cancel_during_send_discards_connection(redis_url: str) -> None:
    server = ClientOptions.from_url(redis_url)
    async with open_stall_proxy(server.host, server.port) as proxy:
        async with trio_maint.open_redis(
            f"redis://127.0.0.1:{proxy.port}/9", socket_timeout=None
        ) as r:
            await r.set("big", "0")
            [conn] = r.pool.connections
            proxy.stall()
            big = b"x" * (32 * 1024 * 1024)
            with trio.move_on_after(0.3) as scope:
                await r.set("big", big)
            assert scope.cancelled_caught
            assert conn.broken and conn.closed
            proxy.resume()
            assert await r.get("k-after") is None
            assert await r.set("k-after", "v") is True
            assert await r.get("k-after") == b"v"
            assert conn not in r.pool.connections


async def test_cancel_during_read_never_leaks_stale_reply(r: trio_maint.Redis) -> None:
    await r.set("a", "reply-for-a")
    [conn] = r.pool.connections
    with trio.move_on_after(0.1) as scope:
        await r.execute_command("BLPOP", "slow-list", "1")
    assert scope.cancelled_caught
    assert conn.broken
    await r.rpush("slow-list", "late")
    # A fresh connection is used: the old BLPOP reply can never show up here.
    assert await r.get("a") == b"reply-for-a"
    assert await r.lrange("slow-list", 0, -1) in ([b"late"], [])
    assert conn not in r.pool.connections


async def test_two_tasks_on_one_connection_is_an_error(redis_url: str) -> None:
    conn = await Connection.open(opts(redis_url))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.execute, ("BLPOP", "nothing-here", "0.3"))
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(ConnectionBusyError):
                await conn.execute(("PING",))
        # The first command finished normally and the connection is still usable.
        assert await conn.execute(("PING",)) == b"PONG"
    finally:
        await conn.aclose()


async def test_error_reply_keeps_connection(r: trio_maint.Redis) -> None:
    with pytest.raises(ResponseError, match="unknown command"):
        await r.execute_command("NOSUCHCOMMAND")
    assert await r.ping() is True
    assert r.pool.stats().created == 1


# ------------------------------------------------------- stale pooled connections


async def test_server_closed_idle_connection_is_replaced(r: trio_maint.Redis) -> None:
    await r.ping()
    [conn] = r.pool.connections
    cid = await r.client_id()
    async with trio_maint.open_redis(r.options) as other:
        await other.execute_command("CLIENT", "KILL", "ID", cid)
    await trio.sleep(0.05)
    assert await r.ping() is True
    stats = r.pool.stats()
    assert stats.stale == 1
    assert conn.closed and conn not in r.pool.connections


async def test_push_bytes_ahead_of_eof_are_dispatched_then_replaced(r: trio_maint.Redis) -> None:
    await r.ping()
    [conn] = r.pool.connections
    seen: list[Any] = []
    conn.push_handler = lambda c, frame: seen.append(list(frame))
    await r.execute_command("CLIENT", "TRACKING", "ON")
    await r.get("tracked")
    cid = await r.client_id()
    async with trio_maint.open_redis(r.options) as other:
        await other.set("tracked", "changed")  # invalidation push to `conn`
        await trio.sleep(0.05)
        await other.execute_command("CLIENT", "KILL", "ID", cid)  # then EOF
    await trio.sleep(0.05)
    assert await r.get("tracked") == b"changed"
    assert seen == [[b"invalidate", [b"tracked"]]]
    assert conn.closed


async def test_push_frames_between_replies_go_to_handler(r: trio_maint.Redis) -> None:
    await r.ping()
    [conn] = r.pool.connections
    seen: list[Any] = []
    conn.push_handler = lambda c, frame: seen.append(list(frame))
    await r.execute_command("CLIENT", "TRACKING", "ON")
    await r.get("k1")
    async with trio_maint.open_redis(r.options) as other:
        await other.set("k1", "v")
    # The invalidation arrives ahead of this reply; the reply is still ours.
    await trio.sleep(0.05)
    assert await r.execute_command("ECHO", "mine") == b"mine"
    assert seen == [[b"invalidate", [b"k1"]]]


async def test_push_handler_failure_is_logged_not_raised(
    r: trio_maint.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    await r.ping()
    [conn] = r.pool.connections

    def bad(c: Connection, frame: Any) -> None:
        raise RuntimeError("boom")

    conn.push_handler = bad
    await r.execute_command("CLIENT", "TRACKING", "ON")
    await r.get("k2")
    async with trio_maint.open_redis(r.options) as other:
        await other.set("k2", "v")
    await trio.sleep(0.05)
    with caplog.at_level(logging.ERROR, logger="trio_maint.connection"):
        assert await r.execute_command("ECHO", "still-mine") == b"still-mine"
    assert "push handler failed" in caplog.text


async def test_pipeline_path_hands_push_frames_on_and_stops_at_its_last_reply() -> None:
    seen: list[Any] = []
    conn = Connection(ClientOptions(), push_handler=lambda c, frame: seen.append(list(frame)))
    push = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
    conn._parser.feed(push + b"+a\r\n" + push + push + b":2\r\n+b\r\n" + push + b"+next\r\n")
    replies: list[Any] = []
    # Batches until the replies are complete (or PUSH_BURST push frames were handed on).
    assert conn._take_replies(replies, 3) is True
    assert replies == [b"a", 2, b"b"]
    assert seen == [[b"invalidate", [b"k"]]] * 3
    # The push after the third reply, and the next command's reply, are left buffered.
    assert conn._parser.has_data()
    replies = []
    assert conn._take_replies(replies, 1) is True
    assert replies == [b"next"]
    assert len(seen) == 4
    assert conn._take_replies(replies, 1) is False  # already complete: nothing taken
    # Every push frame fed was handed on: the next batch is not looked at type by type.
    assert conn._parser.push_credit == 0
    conn._parser.feed(b"+x\r\n")
    assert conn._parser.take_replies([], 1) is False


async def test_pipeline_path_stops_after_a_burst_of_push_frames() -> None:
    """Behind more than ``PUSH_BURST`` push frames a call stops after that many, so that
    the caller checkpoints between bursts; the next call goes on."""
    seen: list[Any] = []
    conn = Connection(ClientOptions(), push_handler=lambda c, frame: seen.append(frame))
    push = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
    conn._parser.feed(push * (PUSH_BURST + 8) + b"+a\r\n")
    replies: list[Any] = []
    assert conn._take_replies(replies, 1) is True
    assert (replies, len(seen)) == ([], PUSH_BURST)
    assert conn._parser.has_data()
    assert conn._take_replies(replies, 1) is True
    assert (replies, len(seen)) == ([b"a"], PUSH_BURST + 8)


async def test_pipeline_replies_stay_in_order_with_push_frames_among_them(
    r: trio_maint.Redis,
) -> None:
    await r.ping()
    [conn] = r.pool.connections
    seen: list[Any] = []
    conn.push_handler = lambda c, frame: seen.append(list(frame))
    await r.execute_command("CLIENT", "TRACKING", "ON")
    keys = [f"pipe-track-{i}" for i in range(50)]
    async with r.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.get(key)
        await pipe.execute()
    async with r.pipeline(transaction=False) as pipe:
        # Each SET invalidates a key this connection tracks: the server sends an
        # invalidation push ahead of each SET's reply, in the middle of the pipeline.
        for i, key in enumerate(keys):
            pipe.set(key, i)
            pipe.get(key)
        replies = await pipe.execute()
    assert replies == [v for i in range(50) for v in (True, str(i).encode())]
    assert sorted(k for frame in seen for k in frame[1]) == sorted(k.encode() for k in keys)


async def test_reply_timer_wakes_each_armed_wait_at_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    fired: list[tuple[str, float]] = []

    class Waiter:
        def __init__(self, name: str) -> None:
            self.name = name

        def _wake_reply_wait(self, *, timed_out: bool) -> None:
            assert timed_out  # nothing is armed when the timer stops
            fired.append((self.name, trio.current_time()))

    timer = ReplyTimer()
    a, b, c, d = Waiter("a"), Waiter("b"), Waiter("c"), Waiter("d")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer.run)
        await trio.testing.wait_all_tasks_blocked()
        assert timer.running
        t0 = trio.current_time()
        timer.arm(a, t0 + 5)
        timer.arm(b, t0 + 2)  # earlier: the timer re-arms
        timer.arm(c, t0 + 3)
        timer.disarm(c)  # its wait ended: never fires
        await trio.sleep(2.5)
        timer.arm(d, t0 + 2.75)  # shorter than a's, armed later
        await trio.sleep(10)
        assert timer._armed == {}
        nursery.cancel_scope.cancel()
    assert fired == [("b", t0 + 2), ("d", t0 + 2.75), ("a", t0 + 5)]
    assert not timer.running
