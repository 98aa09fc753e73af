"""Unit tests of the maintenance glue (MaintenanceHandler, hooks, events) on trio's
MockClock: connections sit on socketpairs, handoffs are faked."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import attrs
import pytest
import trio

from trio_maint import (
    ClientOptions,
    EndpointType,
    EventsDropped,
    HandoffDialError,
    HandoffFailed,
    HandoffQueued,
    HandoffSucceeded,
    LoggingHook,
    MaintConfig,
    MaintenanceHandler,
    MaintenanceNotSupportedError,
    MaintMode,
    MetricsHook,
    MovingStarted,
    Notification,
    NotificationReceived,
    ResponseError,
)
from trio_maint._maint.link import PubSubLink
from trio_maint._net.wire import TimeoutPolicy
from trio_maint._sansio.endpoint import Endpoint
from trio_maint._sansio.errors import CircuitBreakerOpenError
from trio_maint._sansio.timeouts import RelaxedTimeouts
from trio_maint.lowlevel import Connection, ConnectionPool

pytestmark = pytest.mark.trio

OPTIONS = ClientOptions(host="10.0.0.1", port=6379, socket_timeout=1.0)
NEW = Endpoint("10.0.0.5", 7000)


def moving(seq: int, time: int, endpoint: str | None) -> list[Any]:
    frame: list[Any] = [b"MOVING", seq, time]
    if endpoint is not None:
        frame.append(endpoint.encode())
    return frame


class FakeHandler(MaintenanceHandler):
    """Dials make connections on socketpairs (to whatever endpoint the machine picks) and
    handoffs only record and retarget the connection (no network)."""

    def __init__(self, config: MaintConfig | None = None) -> None:
        super().__init__(OPTIONS, config or MaintConfig(max_workers=4, handoff_queue_size=10))
        self.performed: list[tuple[int, Endpoint, float]] = []
        self.unreachable: set[Endpoint] = set()
        self.duration = 0.1
        self.dial_delay = 0.0
        self.peers: list[Any] = []

    def socket_connection(self, endpoint: Endpoint, push: Any = None) -> Connection:
        """A Connection on one end of a socketpair (nothing is ever written to it)."""
        a, b = trio.socket.socketpair()
        self.peers.append(b)
        conn = Connection(OPTIONS, host=endpoint.host, port=endpoint.port)
        conn.push_handler = push or self.push_handler
        conn.maint_enabled = True  # as if the opt-in was accepted
        conn._attach(trio.SocketStream(a))
        return conn

    async def _connect(
        self, push: Any = None, *, memory_tls: bool = False
    ) -> tuple[Connection, Endpoint, bool]:
        target = self.machine.dial_target(trio.current_time())
        await trio.sleep(self.dial_delay)
        return self.socket_connection(target, push), target, False

    async def _perform(self, item: Any, endpoint: Endpoint) -> None:
        target = self.machine.attempt_started(item.id, trio.current_time())
        if target is None:
            raise CircuitBreakerOpenError(f"circuit breaker for {endpoint} is open")
        self.performed.append((item.id, target, trio.current_time()))
        await trio.sleep(self.duration)
        if target in self.unreachable:
            raise HandoffDialError(f"{target} refused")
        if isinstance(item, PubSubLink):
            await item.adopt(self.socket_connection(target, item.push))
        else:
            item.host, item.port = target.host, target.port

    def close_peers(self) -> None:
        for peer in self.peers:
            peer.close()


@asynccontextmanager
async def harness(
    handler: FakeHandler | None = None, pool_size: int = 4
) -> AsyncIterator[tuple[FakeHandler, ConnectionPool]]:
    handler = handler or FakeHandler()
    pool = ConnectionPool(handler.dial, pool_size=pool_size)
    handler.attach(pool)
    async with trio.open_nursery() as nursery, handler.running():
        try:
            yield handler, pool
        finally:
            pool.close()
            handler.close_peers()
            nursery.cancel_scope.cancel()


async def fill(pool: ConnectionPool, count: int) -> list[Connection]:
    conns = [await pool.acquire() for _ in range(count)]
    for conn in conns:
        pool.release(conn)
    return conns


def target_of(handler: MaintenanceHandler, conn: Connection) -> Endpoint | None:
    return handler.handoff_target(conn)


# --- handshake ----------------------------------------------------------------------------


@attrs.define
class FakeHandshakeConn:
    reply: Any = "OK"
    sent: list[tuple[Any, ...]] = attrs.field(factory=list)
    maint_enabled: bool = False
    endpoint_text: str = "10.0.0.1:6379"

    async def handshake_command(self, *args: Any) -> Any:
        await trio.lowlevel.checkpoint()
        self.sent.append(args)
        return self.reply


def policy_of(conn: Connection) -> TimeoutPolicy | None:
    """``conn.timeouts``, read afresh (a push handler call changes it behind mypy's back)."""
    return conn.timeouts


async def handshake(handler: MaintenanceHandler, conn: FakeHandshakeConn) -> None:
    """Run the handler's handshake hook on a fake with the attributes the hook uses."""
    await handler.handshake_hook(cast(Connection, conn))


async def test_handshake_sends_the_opt_in_with_the_detected_type() -> None:
    handler = MaintenanceHandler(OPTIONS)
    assert handler.endpoint_type is EndpointType.INTERNAL_IP
    conn = FakeHandshakeConn()
    await handshake(handler, conn)
    assert conn.sent == [
        ("client", "maint_notifications", "on", "moving-endpoint-type", "internal-ip")
    ]
    assert conn.maint_enabled
    assert handler.mode is MaintMode.AUTO  # auto is not promoted to enabled


@pytest.mark.parametrize(
    ("host", "tls", "expected"),
    [
        ("10.0.0.1", False, EndpointType.INTERNAL_IP),
        ("10.0.0.1", True, EndpointType.INTERNAL_FQDN),
        ("8.8.8.8", False, EndpointType.EXTERNAL_IP),
        ("redis.example.invalid", False, EndpointType.EXTERNAL_IP),  # no DNS lookup
        ("localhost", True, EndpointType.INTERNAL_FQDN),
    ],
)
async def test_endpoint_type_detection(host: str, tls: bool, expected: EndpointType) -> None:
    handler = MaintenanceHandler(ClientOptions(host=host, ssl=tls))
    assert handler.endpoint_type is expected


async def test_explicit_endpoint_type_is_kept_and_disabled_detects_nothing() -> None:
    explicit = MaintenanceHandler(OPTIONS, MaintConfig(endpoint_type="external-fqdn"))
    assert explicit.endpoint_type is EndpointType.EXTERNAL_FQDN
    disabled = MaintenanceHandler(OPTIONS, MaintConfig(mode="disabled"))
    assert disabled.endpoint_type is EndpointType.AUTO
    assert disabled.manager is None
    assert disabled.push_handler_or_none is None


async def test_auto_mode_downgrades_once_quietly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_maint")
    handler = MaintenanceHandler(OPTIONS)
    events = handler.events()
    refused = ResponseError("ERR unknown subcommand 'maint_notifications'")
    first, second = FakeHandshakeConn(refused), FakeHandshakeConn(refused)
    await handshake(handler, first)
    await handshake(handler, second)  # already in flight
    assert handler.mode is MaintMode.DISABLED
    assert not first.maint_enabled
    later = FakeHandshakeConn()
    await handshake(handler, later)
    assert later.sent == []  # never flips back on its own
    lines = [r for r in caplog.records if r.name.startswith("trio_maint")]
    assert len(lines) == 1 and lines[0].levelno == logging.DEBUG
    assert handler.state.mode is MaintMode.DISABLED
    with trio.move_on_after(0.01):
        event = await events.__anext__()
        assert event.__class__.__name__ == "MaintenanceDisabled"


async def test_enabled_mode_refusal_fails_the_connection() -> None:
    handler = MaintenanceHandler(OPTIONS, MaintConfig(mode="enabled"))
    conn = FakeHandshakeConn(ResponseError("ERR unknown subcommand"))
    with pytest.raises(MaintenanceNotSupportedError, match="refused CLIENT MAINT_NOTIFICATIONS"):
        await handshake(handler, conn)
    assert handler.mode is MaintMode.ENABLED


async def test_disabled_mode_sends_nothing() -> None:
    handler = MaintenanceHandler(OPTIONS, MaintConfig(mode="disabled"))
    conn = FakeHandshakeConn()
    await handshake(handler, conn)
    assert conn.sent == []


# --- relaxation ---------------------------------------------------------------------------


async def test_windows_relax_restore_and_nest(autojump_clock: trio.abc.Clock) -> None:
    async with harness(FakeHandler(MaintConfig(relaxed_timeout=10.0))) as (handler, pool):
        conn = await pool.acquire()
        assert policy_of(conn) is None  # nothing per command until a notification arrives
        handler.push_handler(conn, [b"MIGRATING", 1, 5, b"1"])
        handler.push_handler(conn, [b"FAILING_OVER", 2, 5, b"1"])
        timeouts = policy_of(conn)
        assert isinstance(timeouts, RelaxedTimeouts)
        now = trio.current_time()
        assert timeouts.effective(1.0, now) == 10.0
        assert timeouts.effective(30.0, now) == 30.0  # a floor, never a tightening
        assert timeouts.effective(None, now) is None  # no deadline where none existed
        state = handler.state
        assert state.in_window and state.relaxed_connections == 1
        handler.push_handler(conn, [b"MIGRATED", 3, b"1"])
        assert timeouts.effective(1.0, trio.current_time()) == 10.0  # one window still open
        handler.push_handler(conn, [b"FAILED_OVER", 4, b"1"])
        assert policy_of(conn) is None  # restored: the policy is removed
        state = handler.state  # a new snapshot
        assert not state.in_window and state.relaxed_connections == 0
        # A window whose closing never comes ends at the backstop (10 x relaxed_timeout).
        handler.push_handler(conn, [b"SMIGRATING", 5, b"0-100"])
        backstop = policy_of(conn)
        assert isinstance(backstop, RelaxedTimeouts)
        await trio.sleep(99)
        assert backstop.effective(1.0, trio.current_time()) == 10.0
        await trio.sleep(2)
        assert backstop.effective(1.0, trio.current_time()) == 1.0
        pool.release(conn)


async def test_malformed_frames_warn_once_with_shape(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_maint")
    handler = MaintenanceHandler(OPTIONS)
    conn = Connection(OPTIONS)
    handler.push_handler(conn, [b"MOVING", b"x", 15])
    handler.push_handler(conn, [b"message", b"ch", b"data"])  # not ours: ignored silently
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "[bytes(6), bytes(1), int]" in warnings[0].getMessage()


# --- hooks --------------------------------------------------------------------------------


@attrs.define
class RecordingHook:
    keep: bool = True
    fail: bool = False
    seen: list[tuple[str, str, Any]] = attrs.field(factory=list)

    def pre(self, conn: Connection, notification: Notification) -> bool:
        self.seen.append(("pre", notification.NAME, None))
        if self.fail:
            raise RuntimeError("hook bug")
        return self.keep

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        self.seen.append(("post", notification.NAME, error))
        if self.fail:
            raise RuntimeError("hook bug")


async def test_pre_hook_may_drop() -> None:
    async with harness() as (handler, pool):
        dropper, later = RecordingHook(keep=False), RecordingHook()
        handler.add_hook(dropper)
        handler.add_hook(later)
        conn = await pool.acquire()
        handler.push_handler(conn, [b"MIGRATING", 1, 5, b"1"])
        assert conn.timeouts is None  # not handled
        assert dropper.seen == [("pre", "MIGRATING", None)]
        assert later.seen == []
        pool.release(conn)


async def test_failing_hook_is_logged_and_never_breaks_handling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with harness() as (handler, pool):
        broken, after = RecordingHook(fail=True), RecordingHook()
        handler.add_hook(broken)
        handler.add_hook(after)
        conn = await pool.acquire()
        handler.push_handler(conn, [b"MIGRATING", 1, 5, b"1"])
        assert isinstance(conn.timeouts, RelaxedTimeouts)
        assert conn.timeouts.open_windows == 1
        assert after.seen == [("pre", "MIGRATING", None), ("post", "MIGRATING", None)]
        pool.release(conn)
    assert sum("hook" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records) == 2


async def test_post_hook_sees_the_handling_error(monkeypatch: pytest.MonkeyPatch) -> None:
    handler = MaintenanceHandler(OPTIONS)
    hook = RecordingHook()
    handler.add_hook(hook)

    def boom(conn_id: int, n: Notification, now: float) -> None:
        raise ValueError("bad")

    monkeypatch.setattr(handler.machine, "notification", boom)
    handler.push_handler(Connection(OPTIONS), [b"MIGRATED", 1, b"1"])
    assert isinstance(hook.seen[-1][2], ValueError)


async def test_logging_hook(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_maint")
    handler = MaintenanceHandler(OPTIONS)
    handler.add_hook(LoggingHook())
    conn = Connection(OPTIONS)
    handler.push_handler(conn, [b"MIGRATING", 42, 5, b"1"])
    (started,) = [r for r in caplog.records if getattr(r, "event", "") == "notification_started"]
    assert started.levelno == logging.INFO
    fields = vars(started)  # the hook's ``extra`` payload is stored on the record
    assert (fields["conn_id"], fields["seq_id"], fields["notification_name"]) == (
        conn.id,
        42,
        "MIGRATING",
    )
    assert any(getattr(r, "event", "") == "notification_succeeded" for r in caplog.records)


async def test_metrics_hook_fills_everything_in(autojump_clock: trio.abc.Clock) -> None:
    metrics = MetricsHook()
    async with harness() as (handler, pool):
        handler.add_hook(metrics)
        conns = await fill(pool, 2)
        handler.push_handler(conns[0], [b"MIGRATING", 1, 5, b"1"])
        handler.push_handler(conns[0], [b"MIGRATED", 2, b"1"])
        busy = await pool.acquire()
        handler.push_handler(busy, moving(3, 15, "10.0.0.5:7000"))
        pool.release(busy)
        await trio.sleep(1)
        handler.push_handler(Connection(OPTIONS), [b"MOVING", b"bad"])
    data = metrics.get_metrics()
    assert data["notification_counts"] == {"MIGRATING": 1, "MIGRATED": 1, "MOVING": 1}
    assert data["processing_times"]["MOVING"]["count"] == 1
    assert data["handoffs_queued"] == 2
    assert data["handoff_successes"] == 2
    assert data["handoff_latency"]["count"] == 2
    assert data["handoff_latency"]["min"] >= 0.1
    assert data["malformed"] == 1
    assert metrics.error_counts == {}


# --- events -------------------------------------------------------------------------------


async def test_slow_consumer_loses_oldest_and_is_told() -> None:
    handler = MaintenanceHandler(OPTIONS)
    events = handler.events(max_buffer=3)
    conn = Connection(OPTIONS)
    for seq in range(1, 6):
        handler.push_handler(conn, [b"MIGRATING", seq, 5, b"1"])
    got = [await events.__anext__() for _ in range(4)]
    assert got[0] == EventsDropped(2)
    seqs = [e.notification.seq_id for e in got[1:] if isinstance(e, NotificationReceived)]
    assert seqs == [3, 4, 5]
    assert events.dropped == 2
    await events.aclose()
    handler.push_handler(conn, [b"MIGRATED", 6, b"1"])  # no subscriber left: fine


async def test_event_streams_end_when_the_client_closes() -> None:
    handler = MaintenanceHandler(OPTIONS)
    async with handler.running():
        events = handler.events()
    with trio.fail_after(1):
        assert [e async for e in events] == []


# --- MOVING -------------------------------------------------------------------------------


async def test_explicit_moving_hands_off_idle_and_released_connections(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with harness() as (handler, pool):
        events = handler.events()
        idle = await fill(pool, 3)
        busy = await pool.acquire()  # the most recently used idle one
        assert busy is idle[-1]
        handler.push_handler(busy, moving(5, 15, "10.0.0.5:7000"))
        # Idle connections go at once, without waiting for their next use.
        assert pool.idle_connections == []
        await trio.sleep(1)
        assert {p[0] for p in handler.performed} == {idle[0].id, idle[1].id}
        assert busy.port == 6379  # in use: finishes on the old socket
        pool.release(busy)  # ... and is handed off when released
        await trio.sleep(1)
        assert {p[0] for p in handler.performed} == {c.id for c in idle}
        assert {c.id for c in pool.idle_connections} == {c.id for c in idle}
        assert all((c.host, c.port) == ("10.0.0.5", 7000) for c in pool.connections)
        assert all(target_of(handler, c) is None for c in pool.connections)
        state = handler.state
        assert state.completed_handoffs == 3 and state.failed_handoffs == 0
        assert state.current_endpoint == "10.0.0.5:7000"
        assert state.last_moving_seq == 5
        assert state.relaxed_connections == 3  # post-handoff relaxation
        kinds = []
        with trio.move_on_after(0.1):
            async for event in events:
                kinds.append(type(event))
        assert kinds.count(MovingStarted) == 1
        assert kinds.count(HandoffQueued) == 3
        assert kinds.count(HandoffSucceeded) == 3


async def test_stale_and_replayed_moving_are_ignored(autojump_clock: trio.abc.Clock) -> None:
    async with harness() as (handler, pool):
        conns = await fill(pool, 2)
        conn = await pool.acquire()
        handler.push_handler(conn, moving(5, 15, "10.0.0.5:7000"))
        # The same seqID from the same endpoint (a replay) and an older one: nothing.
        handler.push_handler(conn, moving(5, 15, "10.0.0.6:7000"))
        handler.push_handler(conn, moving(4, 15, "10.0.0.6:7000"))
        pool.release(conn)
        await trio.sleep(1)
        assert len(handler.performed) == 2
        assert {p[1] for p in handler.performed} == {NEW}
        assert handler.state.last_moving_seq == 5
        assert {c.port for c in conns} == {7000}


async def test_null_endpoint_reconnects_after_half_the_time(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with harness() as (handler, pool):
        idle = await fill(pool, 2)
        busy = await pool.acquire()
        start = trio.current_time()
        handler.push_handler(busy, moving(9, 3, None))
        assert handler.state.pending_handoffs == 2  # scheduled, not due yet
        await trio.sleep(1.4)
        assert handler.performed == []
        await trio.sleep(0.2)  # time / 2 = 1.5 s, fractional
        performed = {p[0]: p for p in handler.performed}
        assert set(performed) == {idle[0].id}  # busy is idle[1]: still in use
        assert performed[idle[0].id][1] == Endpoint("10.0.0.1", 6379)  # the same address
        assert performed[idle[0].id][2] - start == pytest.approx(1.5)
        assert target_of(handler, busy) is not None  # claimed when released
        pool.release(busy)
        await trio.sleep(1)
        assert {p[0] for p in handler.performed} == {idle[0].id, busy.id}


async def test_failed_handoff_removes_the_connection(autojump_clock: trio.abc.Clock) -> None:
    config = MaintConfig(max_workers=2, handoff_queue_size=4, max_handoff_retries=2)
    async with harness(FakeHandler(config)) as (handler, pool):
        handler.unreachable.add(NEW)
        events = handler.events()
        conns = await fill(pool, 2)
        busy = await pool.acquire()
        handler.push_handler(busy, moving(1, 15, str(NEW)))
        pool.release(busy)
        await trio.sleep(5)
        assert pool.connections == []
        assert handler.state.failed_handoffs == 2
        assert len(handler.performed) == 4  # two dial attempts each
        failed = []
        with trio.move_on_after(0.1):
            async for event in events:
                if isinstance(event, HandoffFailed):
                    failed.append(event)
        assert {e.conn_id for e in failed} == {c.id for c in conns}
        assert all("HandoffRetriesExhaustedError" in e.error for e in failed)


async def test_removed_connection_withdraws_its_handoff(autojump_clock: trio.abc.Clock) -> None:
    async with harness() as (handler, pool):
        handler.duration = 5.0
        conns = await fill(pool, 2)
        busy = await pool.acquire()
        handler.push_handler(busy, moving(1, 15, str(NEW)))
        pool.release(busy)
        await trio.sleep(0.1)
        assert handler.state.pending_handoffs == 2
        pool.discard(conns[0], "test")
        await trio.sleep(10)
        assert handler.state.pending_handoffs == 0
        assert handler.state.completed_handoffs == 1
        assert pool.connections == [conns[1]]


async def test_close_with_pending_handoffs_leaks_nothing(autojump_clock: trio.abc.Clock) -> None:
    async with harness() as (handler, pool):
        handler.duration = 60.0
        conns = await fill(pool, 3)
        busy = await pool.acquire()
        handler.push_handler(busy, moving(1, 15, str(NEW)))
        pool.release(busy)
        await trio.sleep(0.1)
        assert handler.state.pending_handoffs == 3
    assert all(c.closed for c in conns)
    assert pool.connections == []


@attrs.define
class FakePubSub:
    """What a PubSubLink needs of its PubSub."""

    connection: Connection | None = None
    adopted: list[Connection] = attrs.field(factory=list)

    async def adopt_connection(self, conn: Connection) -> None:
        await trio.lowlevel.checkpoint()
        self.adopted.append(conn)
        self.connection = conn


async def test_moving_on_pubsub_moves_it_once_make_before_break(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with harness() as (handler, _pool):
        link = handler.pubsub_link()
        ps = FakePubSub()
        link.attach(ps)
        ps.connection = conn = await link.connect()
        link.push(conn, moving(3, 15, str(NEW)))
        link.push(conn, moving(3, 15, str(NEW)))  # replayed
        link.push(conn, moving(2, 15, "10.0.0.6:7000"))  # stale
        await trio.sleep(1)
        assert [(c.host, c.port) for c in ps.adopted] == [("10.0.0.5", 7000)]
        assert [p[1] for p in handler.performed] == [NEW]
        new = ps.adopted[0]
        link.push(new, [b"MIGRATING", 4, 5, b"1"])
        assert isinstance(new.timeouts, RelaxedTimeouts)
        link.close()
        for c in (conn, new):
            c.close_nowait()


async def test_pubsub_null_endpoint_moves_at_half_the_time(autojump_clock: trio.abc.Clock) -> None:
    async with harness() as (handler, _pool):
        link = handler.pubsub_link()
        ps = FakePubSub()
        link.attach(ps)
        ps.connection = conn = await link.connect()
        link.push(conn, moving(3, 10, None))
        await trio.sleep(4.9)
        assert ps.adopted == []
        await trio.sleep(0.3)
        assert [(c.host, c.port) for c in ps.adopted] == [("10.0.0.1", 6379)]
        for c in (conn, *ps.adopted):
            c.close_nowait()


async def test_pubsub_stays_when_the_new_endpoint_is_unreachable(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with harness() as (handler, _pool):
        handler.unreachable.add(NEW)
        link = handler.pubsub_link()
        ps = FakePubSub()
        link.attach(ps)
        ps.connection = conn = await link.connect()
        link.push(conn, moving(3, 15, str(NEW)))
        await trio.sleep(10)
        assert ps.adopted == [] and ps.connection is conn  # kept its connection
        assert len(handler.performed) == 3  # three dial attempts, with backoff
        attempts = [p[2] for p in handler.performed]
        assert attempts[1] - attempts[0] >= 0.5 and attempts[2] - attempts[1] >= 1.0
        assert handler.state.failed_handoffs == 1
        conn.close_nowait()


# --- READONLY during a move, dials racing a MOVING, retargeting --------------------------


async def test_readonly_waits_for_moving(autojump_clock: trio.abc.Clock) -> None:
    async with harness() as (handler, pool):
        conn = (await fill(pool, 1))[0]
        # No MOVING follows: the READONLY is genuine, raised after the grace period.
        start = trio.current_time()
        assert await handler.wait_for_moving(conn) is False
        assert trio.current_time() - start == pytest.approx(1.0)
        # A MOVING arriving meanwhile (on another connection) allows the retry.
        other = await pool.acquire()
        result: list[bool] = []

        async def waiter() -> None:
            result.append(await handler.wait_for_moving(conn))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(0.3)
            handler.push_handler(other, moving(2, 15, str(NEW)))
        assert result == [True]
        # A connection already marked for a handoff retries at once.
        assert target_of(handler, other) is not None
        before = trio.current_time()
        assert await handler.wait_for_moving(other) is True
        assert trio.current_time() == before
        pool.release(other)


async def test_readonly_expedites_null_endpoint_handoffs(autojump_clock: trio.abc.Clock) -> None:
    async with harness() as (handler, pool):
        await fill(pool, 3)
        busy = await pool.acquire()
        handler.push_handler(busy, moving(1, 30, None))  # due in 15 s
        pool.release(busy)
        await trio.sleep(0.1)
        assert handler.performed == []
        assert await handler.wait_for_moving(busy) is True
        await trio.sleep(0.5)
        assert len(handler.performed) == 3  # all of them, now
        await trio.sleep(20)
        assert len(handler.performed) == 3  # and the timers are gone


async def test_dial_that_raced_a_moving_is_handed_off(autojump_clock: trio.abc.Clock) -> None:
    handler = FakeHandler()
    async with harness(handler) as (handler, pool):
        first = await pool.acquire()  # configured address
        handler.dial_delay = 1.0
        raced: list[Connection] = []

        async def acquire() -> None:
            raced.append(await pool.acquire())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(acquire)  # dialing the old endpoint...
            await trio.sleep(0.5)
            handler.push_handler(first, moving(3, 15, str(NEW)))  # ... when MOVING comes
        (conn,) = raced
        assert (conn.host, conn.port) == ("10.0.0.1", 6379)
        assert target_of(handler, conn) == NEW  # used once, handed off when released
        handler.dial_delay = 0.0
        pool.release(conn)
        pool.release(first)
        await trio.sleep(1)
        assert {p[0] for p in handler.performed} == {first.id, conn.id}


async def test_newer_moving_retargets_a_running_handoff(autojump_clock: trio.abc.Clock) -> None:
    async with harness() as (handler, pool):
        handler.duration = 5.0
        conns = await fill(pool, 2)
        busy = await pool.acquire()
        handler.push_handler(busy, moving(1, 15, str(NEW)))
        pool.release(busy)
        await trio.sleep(0.1)
        other = Endpoint("10.0.0.7", 7000)
        # The newer MOVING is read on a connection being handed off (its old stream).
        handler.push_handler(conns[0], moving(2, 15, str(other)))
        await trio.sleep(15)
        assert all((c.host, c.port) == (other.host, other.port) for c in pool.connections)
        assert handler.state.failed_handoffs == 0
        assert handler.state.current_endpoint == str(other)


async def test_no_churn_while_the_target_breaker_is_open(autojump_clock: trio.abc.Clock) -> None:
    config = MaintConfig(
        max_workers=4,
        handoff_queue_size=10,
        max_handoff_retries=1,
        circuit_breaker_failure_threshold=2,
        circuit_breaker_reset_timeout=30,
    )
    async with harness(FakeHandler(config)) as (handler, pool):
        handler.unreachable.add(NEW)
        await fill(pool, 2)
        busy = await pool.acquire()
        handler.push_handler(busy, moving(1, 15, str(NEW)))
        pool.release(busy)
        await trio.sleep(1)
        assert handler.state.failed_handoffs == 2  # the breaker is open now
        performed = len(handler.performed)
        # The server keeps replaying the MOVING to connections opened meanwhile: they stay
        # where they are instead of being marked, failed fast and discarded.
        for seq_conn in range(3):
            conn = await pool.acquire()
            handler.push_handler(conn, moving(1, 15, str(NEW)))
            pool.release(conn)
            assert conn in pool.idle_connections, seq_conn
        assert len(handler.performed) == performed
        assert handler.state.failed_handoffs == 2
        # Once the reset timeout passed, handoffs are tried again.
        await trio.sleep(31)
        handler.unreachable.clear()
        conn = await pool.acquire()
        handler.push_handler(conn, moving(2, 15, str(NEW)))
        pool.release(conn)
        await trio.sleep(1)
        assert (conn.host, conn.port) == (NEW.host, NEW.port)
