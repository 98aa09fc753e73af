"""Client-side caching over TLS (docs/caching.md): the tracking connection keeps its TLS in
a :class:`~trio_maint._net.tls_memory.MemoryTLSStream`, so what its socket holds is read
and decrypted synchronously before a hit. Against a TLS redis-server: hits, misses,
invalidations (also one on the socket that no task has read yet), large replies spanning
many records, a killed tracking connection, cancelled reads; the certificate checked as
for any connection, also at a MOVING. Through a TLS proxy that misbehaves on cue: an
invalidation's record split in two (served until its last byte arrives, never after), a
connection closed mid-record, bytes that are not TLS."""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import CacheConfig, ClientOptions, Endpoint, MaintConfig
from trio_maint._net.stream import open_stream
from trio_maint._net.tls_memory import MemoryTLSStream
from trio_maint.testing import RedisServer, free_port

from .test_cache import ready, until

pytestmark = pytest.mark.trio

OFF = MaintConfig(mode="disabled")


class TLS:
    """A TLS redis-server (plain port too, for the proxy) and a context trusting it."""

    def __init__(self, server: RedisServer, port: int, ca: Any, directory: Path) -> None:
        self.server, self.port, self.ca, self.dir = server, port, ca, directory

    @property
    def url(self) -> str:
        return f"rediss://localhost:{self.port}"

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        return ctx


def _tls_args(ca: Any, d: Path, port: int, *names: str) -> tuple[str, ...]:
    cert = ca.issue_cert(*names)
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    return (
        "--tls-port", str(port),
        "--tls-cert-file", str(d / "cert.pem"),
        "--tls-key-file", str(d / "key.pem"),
        "--tls-ca-cert-file", str(d / "ca.pem"),
        "--tls-auth-clients", "no",
    )  # fmt: skip


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLS]:
    import trustme

    ca = trustme.CA()
    d = tmp_path_factory.mktemp("cache-tls")
    port = free_port()
    with RedisServer(extra_args=_tls_args(ca, d, port, "localhost", "127.0.0.1")) as srv:
        yield TLS(srv, port, ca, d)


@pytest.fixture
async def writer(tls: TLS) -> AsyncIterator[trio_maint.Redis]:
    async with trio_maint.open_redis(tls.url, ssl_context=tls.context(), maintenance=OFF) as w:
        await w.flushall()
        yield w


@asynccontextmanager
async def cached(url: str, ctx: ssl.SSLContext, **kwargs: Any) -> AsyncIterator[trio_maint.Redis]:
    kwargs.setdefault("maintenance", OFF)
    kwargs.setdefault("cache", CacheConfig())
    async with trio_maint.open_redis(url, ssl_context=ctx, **kwargs) as r:
        yield r


def tracking_stream(cache: trio_maint.ClientCache) -> MemoryTLSStream:
    conn = cache.connection
    assert conn is not None
    assert isinstance(conn._stream, MemoryTLSStream)
    return conn._stream


# ------------------------------------------------------------------ a real TLS server


async def test_hits_misses_and_invalidations_over_tls(tls: TLS, writer: trio_maint.Redis) -> None:
    await writer.set("k", "v1")
    await writer.hset("h", mapping={"a": "1"})
    async with cached(tls.url, tls.context()) as r:
        cache = await ready(r)
        tracking_stream(cache)
        assert all(isinstance(c._stream, trio.SSLStream) for c in r.pool.connections)
        assert await r.get("k") == b"v1"
        assert await r.get("k") == b"v1"
        assert await r.hgetall("h") == {b"a": b"1"}
        assert await r.hgetall("h") == {b"a": b"1"}
        assert await r.get("missing") is None
        assert (cache.stats().misses, cache.stats().hits) == (3, 2)
        await writer.set("k", "v2")
        await until(lambda: cache.stats().invalidations == 1)
        assert await r.get("k") == b"v2"
        await writer.delete("k")
        assert await cache.sync()
        assert await r.get("k") is None
        assert cache.stats().invalidations == 2


@pytest.mark.parametrize("mode", ["default", "bcast"])
async def test_invalidation_on_the_socket_but_not_yet_read_over_tls(
    tls: TLS, writer: trio_maint.Redis, mode: str
) -> None:
    """The guarantee over TLS: the invalidation's records are in the tracking socket, no
    task has read them (the event loop is blocked meanwhile), and a cached read that
    starts now decrypts and handles them before it could serve the old value."""
    await writer.set("k", "old")
    config = CacheConfig(mode=mode, prefixes=["k"] if mode == "bcast" else [])  # type: ignore[arg-type]
    async with cached(tls.url, tls.context(), cache=config) as r:
        cache = await ready(r)
        for round in range(20):
            assert await r.get("k") == (b"old" if round == 0 else f"v{round - 1}".encode())
            assert await r.get("k") is not None  # a hit
            hits = cache.stats().hits
            await writer.set("k", f"v{round}")
            time.sleep(0.02)  # noqa: ASYNC251 (the invalidation is on the socket, unread)
            assert await r.get("k") == f"v{round}".encode()
            assert cache.stats().hits == hits  # a miss: the invalidation was read first
            assert cache.stats().invalidations == round + 1


async def test_large_replies_over_tls(tls: TLS, writer: trio_maint.Redis) -> None:
    """Replies of many TLS records, more than one read of the socket, and writes larger
    than one encryption step (``WRITE_CHUNK``)."""
    big = b"x" * 300_000
    await writer.set("big", big)
    key = "k" * 100_000  # a request of two encryption steps
    await writer.set(key, "long key")
    async with cached(tls.url, tls.context()) as r:
        cache = await ready(r)
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(r.get, "big")
        assert await r.get("big") == big
        assert await r.get(key) == b"long key"
        assert await r.get(key) == b"long key"
        assert cache.stats().hits >= 2
        await writer.set("big", b"y" * 300_000)
        time.sleep(0.02)  # noqa: ASYNC251
        assert await r.get("big") == b"y" * 300_000
        assert not tracking_stream(cache).output_pending


async def test_tracking_connection_lost_over_tls(tls: TLS, writer: trio_maint.Redis) -> None:
    await writer.set("k", "v1")
    async with cached(tls.url, tls.context()) as r:
        cache = await ready(r)
        await r.get("k")
        first = cache.connection
        assert first is not None
        await writer.client_kill_filter(_id=first.server_info[b"id"])
        await until(lambda: cache.connection is not first and cache.machine.serving)
        assert cache.stats().flushes.get("tracking_lost") == 1
        await writer.set("k", "v2")
        assert await r.get("k") == b"v2"
        assert await r.get("k") == b"v2"
        tracking_stream(cache)
    assert first.closed and cache.connection is None
    assert len(await writer.client_list()) == 1  # nothing outlives the block


async def test_cancelled_reads_over_tls(tls: TLS, writer: trio_maint.Redis) -> None:
    for i in range(50):
        await writer.set(f"c{i}", i)
    async with cached(tls.url, tls.context()) as r:
        cache = await ready(r)
        for i in range(50):
            with trio.move_on_after(0):
                await r.get(f"c{i}")
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(r.get, f"c{i}")
            await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()  # some cancelled while their reply is owed
        for i in range(50):
            assert await r.get(f"c{i}") == b"%d" % i
        assert cache.machine.serving and cache.machine.store.reads_in_flight() == 0


async def test_the_tracking_connection_verifies_the_certificate(tls: TLS) -> None:
    """The same context and name as any connection: an untrusted certificate, or one not
    valid for the name, fails the dial."""
    opts = ClientOptions(host="localhost", port=tls.port, ssl=True)  # default context
    with pytest.raises(trio_maint.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await open_stream(opts, memory_tls=True)
    wrong = ClientOptions(
        host="localhost", port=tls.port, ssl=True, ssl_context=tls.context(),
        ssl_server_hostname="elsewhere.example",
    )  # fmt: skip
    with pytest.raises(trio_maint.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await open_stream(wrong, memory_tls=True)
    good = ClientOptions(host="localhost", port=tls.port, ssl=True, ssl_context=tls.context())
    stream = await open_stream(good, memory_tls=True)
    assert isinstance(stream, MemoryTLSStream)
    await stream.aclose()


@pytest.fixture(scope="module")
def tls_b(tmp_path_factory: pytest.TempPathFactory, tls: TLS) -> Iterator[int]:
    """A second TLS server from the same CA, whose certificate is only for 127.0.0.1."""
    d = tmp_path_factory.mktemp("cache-tls-b")
    port = free_port()
    with RedisServer(extra_args=_tls_args(tls.ca, d, port, "127.0.0.1")):
        yield port


@pytest.mark.parametrize("trusted", [False, True])
async def test_a_moving_of_the_tracking_connection_checks_the_configured_name(
    tls: TLS, tls_b: int, trusted: bool
) -> None:
    """docs/security.md: a MOVING (fed as if read from the tracking socket) to B, whose
    certificate is not valid for the configured ``localhost``: the tracking connection's
    handoff fails and it stays on A; trusted explicitly, B is checked against its own
    name and the tracking connection moves (a MemoryTLSStream still)."""
    config = MaintConfig(
        endpoint_type="internal-ip", trusted_targets=("127.0.0.1",) if trusted else ()
    )
    with trio.fail_after(10):
        async with cached(tls.url, tls.context(), maintenance=config) as r:
            cache = await ready(r)
            tracker = cache._tracker
            assert tracker is not None
            frame = [b"MOVING", 1, 30, str(Endpoint("127.0.0.1", tls_b)).encode()]
            cache._push(tracker, frame)
            handler = r.maintenance
            await until(lambda: not handler.state.pending_handoffs)
            conn = cache.connection
            assert conn is not None
            if trusted:
                await until(lambda: cache.connection is not None and cache.connection.port == tls_b)
                tracking_stream(cache)
            else:
                assert handler.state.failed_handoffs >= 1
                assert conn.port == tls.port
            await until(lambda: cache.machine.serving)
            await r.set("after", "m")
            assert await r.get("after") == b"m"
            assert await r.get("after") == b"m"


# -------------------------------------------------------------- a hostile TLS proxy


class Proxy:
    """TLS in front of the server's plain port, with a server-side MemoryTLSStream per
    client. The tracking connection (it sent ``CLIENT TRACKING``) can be held: what the
    server sends it is kept in ``held`` instead of forwarded, for the test to release
    as it likes (raw ciphertext, cut anywhere)."""

    def __init__(self, tls: TLS) -> None:
        self.tls = tls
        self.port = 0
        self.tracking: MemoryTLSStream | None = None
        self.hold = False
        self.held = bytearray()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(str(tls.dir / "cert.pem"), str(tls.dir / "key.pem"))

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._one, listeners)

    async def _one(self, client: trio.SocketStream) -> None:
        tls = MemoryTLSStream(client, self.context, server_side=True)
        upstream = await trio.open_tcp_stream(*self.tls.server.address)
        try:
            await tls.do_handshake()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._up, tls, upstream)
                await self._down(tls, upstream)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await upstream.aclose()
            await tls.aclose()

    async def _up(self, tls: MemoryTLSStream, upstream: trio.SocketStream) -> None:
        while data := await tls.receive_some():
            if b"TRACKING" in data:
                self.tracking = tls
            await upstream.send_all(data)
        raise trio.ClosedResourceError

    async def _down(self, tls: MemoryTLSStream, upstream: trio.SocketStream) -> None:
        while data := await upstream.receive_some():
            if self.hold and tls is self.tracking:
                self.held += data
            else:
                await tls.send_all(data)

    def seal_held(self) -> bytes:
        """The held plaintext as TLS records (not sent: the test sends them raw)."""
        tls = self.tracking
        assert tls is not None
        tls._ssl.write(bytes(self.held))
        self.held.clear()
        return tls._outgoing.read()


@pytest.fixture
async def proxy(tls: TLS, nursery: trio.Nursery) -> Proxy:
    p = Proxy(tls)
    await nursery.start(p.serve)
    return p


async def test_a_record_split_in_two_is_handled_once_whole(
    proxy: Proxy, writer: trio_maint.Redis
) -> None:
    """The invalidation's record arrives in two parts. With only the first in the socket
    it cannot be decrypted: the invalidation is not delivered yet, the value may still be
    served (and is: a hit). With the rest in the socket (unread: the loop is blocked),
    the next read decrypts it first and misses."""
    await writer.set("k", "old")
    async with cached(f"rediss://localhost:{proxy.port}", proxy.tls.context()) as r:
        cache = await ready(r)
        assert await r.get("k") == b"old"
        proxy.hold = True
        await writer.set("k", "new")
        await until(lambda: b"invalidate" in proxy.held)
        records = proxy.seal_held()
        raw = proxy.tracking
        assert raw is not None
        half = len(records) // 2
        await raw.transport_stream.send_all(records[:half])
        time.sleep(0.02)  # noqa: ASYNC251
        hits = cache.stats().hits
        assert await r.get("k") == b"old"  # not delivered: its record is not whole
        assert cache.stats().hits == hits + 1
        await raw.transport_stream.send_all(records[half:])
        proxy.hold = False
        time.sleep(0.02)  # noqa: ASYNC251
        assert await r.get("k") == b"new"
        assert cache.stats().hits == hits + 1 and cache.stats().invalidations == 1
        assert cache.machine.serving


@pytest.mark.parametrize("fault", ["closed mid-record", "not TLS"])
async def test_a_hostile_tls_stream_fails_the_tracking_connection(
    proxy: Proxy, writer: trio_maint.Redis, fault: str
) -> None:
    """Half an invalidation record and then the end of the connection, or bytes that are
    not TLS records: the tracking connection fails (the cache is flushed), nothing of the
    partial record is handled, nothing escapes to the caller, tracking is set up again."""
    await writer.set("k", "old")
    async with cached(f"rediss://localhost:{proxy.port}", proxy.tls.context()) as r:
        cache = await ready(r)
        first = cache.connection
        assert await r.get("k") == b"old"
        proxy.hold = True
        await writer.set("k", "new")
        await until(lambda: b"invalidate" in proxy.held)
        records = proxy.seal_held()
        raw = proxy.tracking
        assert raw is not None
        proxy.hold = False
        if fault == "not TLS":
            await raw.transport_stream.send_all(b"\x17\x03\x03\x00\x10" + b"\x00" * 16)
        else:
            await raw.transport_stream.send_all(records[: len(records) // 2])
            await raw.transport_stream.aclose()
        await until(lambda: cache.stats().flushes.get("tracking_lost") == 1)
        assert cache.stats().invalidations == 0  # the partial record was never handled
        assert await r.get("k") == b"new"
        await until(lambda: cache.machine.serving and cache.connection is not first)
        assert await r.get("k") == b"new"
        assert await r.get("k") == b"new"
        assert cache.stats().hits >= 1
