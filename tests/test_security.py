"""docs/security.md: a MOVING is followed only to endpoints the user trusts, credentials go
only where the policy allows, and over TLS the new endpoint must prove to be the
configured server. Fake servers and redis-servers on loopback."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import Endpoint, MaintConfig, MovingRefused
from trio_maint.testing import RedisServer, free_port, moving_frame

from ._fakeserver import Action, FakeConnection, FakeServer, Status, open_fake_server, resp

pytestmark = pytest.mark.trio

TIMEOUT = 10.0


def moving_on_first_ping(server: FakeServer, target: str, time: int = 1) -> None:
    """``server`` answers the first PING after pushing ``MOVING 1 <time> <target>``."""
    sent: list[int] = []

    async def ping(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
        if not sent:
            sent.append(1)
            await conn.send(moving_frame(1, time, target))
        return resp(Status("PONG"))

    server.on("PING", ping)


async def refused_events(r: trio_maint.Redis, stream: trio_maint.EventStream) -> list[str]:
    found: list[str] = []
    with trio.move_on_after(0.1):
        async for event in stream:
            if isinstance(event, MovingRefused):
                found.append(event.endpoint)
    return found


async def test_an_untrusted_target_gets_no_connection_and_no_credentials() -> None:
    """A MOVING to an IP while the client opted in for host names (internal-fqdn): the
    target is never dialed — it never sees the password — and the client reconnects to
    the configured address after time / 2 instead."""
    async with open_fake_server() as a, open_fake_server() as b:
        moving_on_first_ping(a, b.name, time=1)
        config = MaintConfig(endpoint_type="internal-fqdn")
        url = f"redis://app:s3cret@{a.name}"
        with trio.fail_after(TIMEOUT):
            async with trio_maint.open_redis(url, pool_size=2, maintenance=config) as r:
                events = r.maintenance.events()
                assert await r.ping() is True  # reads the MOVING
                assert r.maintenance.state.current_endpoint == a.name
                before = a.accepted
                for _ in range(20):  # the workload goes on, on A
                    assert await r.set("k", "v") is True
                await trio.sleep(0.7)  # time / 2 passed: the connection reconnected to A
                assert await r.get("k") == b"v"
                assert await refused_events(r, events) == [b.name]
                assert a.accepted > before
        assert b.accepted == 0  # never dialed: it saw neither the handshake nor the password


async def test_a_trusted_target_is_followed_with_the_credentials() -> None:
    async with open_fake_server() as a, open_fake_server() as b:
        moving_on_first_ping(a, b.name, time=30)
        config = MaintConfig(endpoint_type="internal-fqdn", trusted_targets=("127.0.0.1",))
        url = f"redis://app:s3cret@{a.name}"
        with trio.fail_after(TIMEOUT):
            async with trio_maint.open_redis(url, pool_size=2, maintenance=config) as r:
                assert await r.ping() is True
                await b.wait_until(lambda s: s.count("HELLO") >= 1)
                assert r.maintenance.state.current_endpoint == b.name
        (hello,) = b.seen("HELLO")[:1]
        assert b"s3cret" in hello  # it was trusted: it got the handshake


async def test_the_default_policy_follows_an_internal_ip() -> None:
    """The default for a loopback configuration is internal-ip: another loopback address
    is consistent with it and followed (as managed Redis's own MOVINGs are)."""
    async with open_fake_server() as a, open_fake_server() as b:
        moving_on_first_ping(a, b.name, time=30)
        with trio.fail_after(TIMEOUT):
            async with trio_maint.open_redis(a.url, pool_size=2) as r:
                events = r.maintenance.events()
                assert await r.ping() is True
                await b.wait_until(lambda s: s.count("HELLO") >= 1)
                assert await refused_events(r, events) == []


# ------------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def two_tls_servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[int, int, Any]]:
    """Two TLS redis-servers: A's certificate is for ``localhost``, B's only for
    ``127.0.0.1`` (a host with a valid certificate for its own name, not A's)."""
    import trustme

    ca = trustme.CA()
    ports: list[int] = []
    servers: list[RedisServer] = []
    for index, names in enumerate((("localhost",), ("127.0.0.1",))):
        cert = ca.issue_cert(*names)
        d: Path = tmp_path_factory.mktemp(f"tls{index}")
        cert.private_key_pem.write_to_path(str(d / "key.pem"))
        cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
        ca.cert_pem.write_to_path(str(d / "ca.pem"))
        port = free_port()
        args = (
            "--tls-port", str(port),
            "--tls-cert-file", str(d / "cert.pem"),
            "--tls-key-file", str(d / "key.pem"),
            "--tls-ca-cert-file", str(d / "ca.pem"),
            "--tls-auth-clients", "no",
        )  # fmt: skip
        server = RedisServer(extra_args=args)
        server.__enter__()
        servers.append(server)
        ports.append(port)
    try:
        yield ports[0], ports[1], ca
    finally:
        for server in servers:
            server.__exit__(None, None, None)


@pytest.mark.parametrize("trusted", [False, True])
async def test_over_tls_the_new_endpoint_must_prove_to_be_the_configured_server(
    two_tls_servers: tuple[int, int, Any], trusted: bool
) -> None:
    """A MOVING (here fed to the handler as if read from the socket: a real redis-server
    sends none) to B, whose certificate is valid for its own name but not for the
    configured ``localhost``: the handoff's TLS handshake fails (the certificate is
    checked against the configured name) and the workload stays on A; trusted explicitly,
    B is checked against its own name and the connection moves."""
    port_a, port_b, ca = two_tls_servers
    context = ssl.create_default_context()
    ca.configure_trust(context)
    trust = ("127.0.0.1",) if trusted else ()
    config = MaintConfig(endpoint_type="internal-ip", trusted_targets=trust)
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(
            f"rediss://localhost:{port_a}", ssl_context=context, maintenance=config, pool_size=1
        ) as r:
            assert await r.set("tls", "a") is True
            handler = r.maintenance
            (conn,) = r.pool.connections
            # Redis Open Source refuses the opt-in (auto mode turns it off); feed the
            # MOVING as the connection's push handler would have.
            endpoint = Endpoint("127.0.0.1", port_b)
            handler.process(conn.id, conn, [b"MOVING", 1, 30, str(endpoint).encode()], pubsub=False)
            while handler.state.pending_handoffs:
                await trio.sleep(0.01)
            (after,) = r.pool.connections or [conn]
            if trusted:
                assert handler.state.completed_handoffs == 1
                assert (after.host, after.port) == ("127.0.0.1", port_b)
            else:
                assert handler.state.failed_handoffs == 1
                assert await r.get("tls") == b"a"  # the workload goes on, on A
                assert all(c.port == port_a for c in r.pool.connections)
