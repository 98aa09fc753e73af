"""The ``trio-maint demo`` engine: two real redis-servers behind maintenance simulators,
a concurrent workload through :func:`~trio_maint.open_redis`, a maintenance timeline, and
a report (see :func:`run_demo`). Its settings and report are in ``report``, the workload
in ``workload``, the command line in ``main`` and the rendering in ``render``.
"""

from __future__ import annotations

import errno
import math
import random
import socket
from typing import Any

import trio

from .. import (
    CacheConfig,
    CircuitBreakerChanged,
    Endpoint,
    EventsDropped,
    HandoffFailed,
    HandoffSucceeded,
    MaintConfig,
    MaintenanceDisabled,
    MaintenanceEvent,
    MaintenanceHandler,
    MalformedNotification,
    MovingStarted,
    NotificationReceived,
    open_redis,
    parse_info,
)
from ..testing import (
    MaintenanceSimulator,
    RawConnection,
    RedisServer,
    RedisServerNotFoundError,
    connect_raw,
    free_port,
    migrate,
)
from .cache_watch import StaleReadCheck, cache_document, cache_rows
from .metrics import instrumented
from .observe import NotificationLog, Silent, relaxation, workload_snapshot
from .report import (
    FAILOVER_LATENCY,
    LEAD,
    WORK,
    DemoConfig,
    DemoError,
    DemoReport,
    Observer,
    phase_summary,
)
from .workload import WorkloadStats, run_task

__all__ = ["run_demo"]


# ---------------------------------------------------------------------- server helpers


async def _command(conn: RawConnection, *args: str | int) -> Any:
    reply = await conn.execute(*args)
    if isinstance(reply, Exception):
        raise RuntimeError(f"{' '.join(map(str, args))} failed: {reply}")
    return reply


async def _offset(conn: RawConnection) -> int:
    return int(parse_info(await _command(conn, "INFO", "replication")).get("master_repl_offset", 0))


async def _caught_up(replica: RawConnection, offset: int, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while True:
            info = parse_info(await _command(replica, "INFO", "replication"))
            if (
                info.get("master_link_status") == "up"
                and int(info.get("slave_repl_offset", -1)) >= offset
            ):
                return
            await trio.sleep(0.01)


async def _replicate(a: RawConnection, b: RawConnection, a_server: RedisServer) -> None:
    """B becomes a replica of A and catches up."""
    await a.execute("CONFIG", "SET", "repl-diskless-sync-delay", "0")
    await _command(b, "REPLICAOF", a_server.host, a_server.port)
    # A's offset means something only once the link is up (it starts counting when the
    # first replica attaches); then wait for B to reach it, so that the switch later has
    # only the last few writes to wait for.
    await _caught_up(b, 0)
    await _caught_up(b, await _offset(a))


def _starts_in(announced: int, real: float) -> str:
    """When the work starts, in real (``--speed``-scaled) seconds, and the notification's
    ``time`` when it says otherwise (whole seconds, at least 1: faster runs round up)."""
    if announced == real:
        return f"work starts in {real:g} s"
    return f"announced time {announced} s; work starts in {real:g} s"


def _conn_name(conn_id: int) -> str:
    """``conn 3`` for a pooled connection; the demo's only negative id (a link of the
    maintenance handler) is the cache's tracking connection (``--cache``)."""
    return f"conn {conn_id}" if conn_id > 0 else "of the cache's tracking connection"


async def _tracking_clients(conn: RawConnection) -> list[str]:
    """The ids of the server's clients with tracking on (``CLIENT LIST``'s flag ``t``)."""
    listing = await _command(conn, "CLIENT", "LIST")
    text = listing.decode() if isinstance(listing, bytes) else str(listing)
    found = []
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "t" in fields.get("flags", ""):
            found.append(fields["id"])
    return found


async def _promote(
    a: RawConnection, b: RawConnection, a_server: RedisServer, b_server: RedisServer
) -> float:
    """Writes paused on A, B catches up and is promoted, A becomes B's replica (so a late
    write on A fails instead of being lost). Returns the seconds writes were paused."""
    paused = trio.current_time()
    await _command(a, "CLIENT", "PAUSE", 10_000, "WRITE")
    try:
        await _caught_up(b, await _offset(a))
        await _command(b, "REPLICAOF", "NO", "ONE")
        await _command(a, "REPLICAOF", b_server.host, b_server.port)
    finally:
        with trio.CancelScope(shield=True):
            await a.execute("CLIENT", "UNPAUSE")
    return trio.current_time() - paused


# --------------------------------------------------------------------------- the demo


class _Demo:
    def __init__(self, cfg: DemoConfig, observer: Observer) -> None:
        self.cfg = cfg
        self.observer = observer
        self.stats = WorkloadStats(start=trio.current_time())
        self.report = DemoReport(cfg)
        self.names: dict[str, str] = {}
        self.notifications = NotificationLog(observer, self.names)
        self.report.notifications = self.notifications.entries
        self.phase = "starting"
        self.client: Any = None
        self.handoff_failures = 0
        self.sims: tuple[MaintenanceSimulator, MaintenanceSimulator, tuple[str, int]] | None = None
        self.failure_line_at = -math.inf
        self.stale_check = StaleReadCheck() if cfg.cache else None

    def cache_extra(self) -> tuple[tuple[str, str], ...]:
        """The live view's cache rows (``--cache``), else none."""
        cache = None if self.client is None else self.client.cache
        if cache is None or self.stale_check is None:
            return ()
        return tuple(cache_rows(cache_document([cache], self.stale_check)))

    def now(self) -> float:
        return trio.current_time() - self.stats.start

    def step(self, label: str) -> None:
        t = self.now()
        self.report.timeline.append((t, label))
        self.observer.event(t, label)

    # ------------------------------------------------------------------ events

    def on_event(self, event: MaintenanceEvent) -> None:
        t = self.now()
        if isinstance(event, NotificationReceived):
            self.notifications.add(t, event)
        elif isinstance(event, HandoffSucceeded):
            label = self.names.get(event.endpoint, event.endpoint)
            self.observer.event(
                t,
                f"handoff {_conn_name(event.conn_id)} -> {label} done in "
                f"{event.latency * 1e3:.1f} ms",
            )
        elif isinstance(event, HandoffFailed):
            label = self.names.get(event.endpoint, event.endpoint)
            self.handoff_failures += 1
            if self.handoff_failures <= 4:
                self.observer.event(
                    t, f"handoff {_conn_name(event.conn_id)} -> {label} FAILED: {event.error}"
                )
            elif t - self.failure_line_at >= 1.0:
                # a storm of failures gets one line a second, not one line each
                self.failure_line_at = t
                self.observer.event(
                    t, f"{self.handoff_failures} handoffs to {label} failed so far: {event.error}"
                )
        elif isinstance(event, CircuitBreakerChanged):
            # from the event stream, in order with the handoff failures it explains
            self.observer.event(t, self.breaker_text(event))
        elif isinstance(event, MovingStarted):
            pass
        elif isinstance(event, MalformedNotification):
            self.observer.event(t, f"malformed notification ignored: {event.reason}")
        elif isinstance(event, MaintenanceDisabled):
            self.observer.event(t, f"maintenance handling disabled: {event.reply}")
        elif isinstance(event, EventsDropped):
            self.observer.event(t, f"({event.count} events dropped)")

    async def consume(self, handler: MaintenanceHandler) -> None:
        async with handler.events(max_buffer=4096) as events:
            async for event in events:
                self.on_event(event)

    def breaker_text(self, event: CircuitBreakerChanged) -> str:
        """The line of a breaker's change; an opening says which failures opened it (not
        only the handoffs the view shows: the pool's new connections dial there too)."""
        key = event.endpoint
        text = f"circuit breaker for {self.names.get(key, key)} {key} is now {event.new}"
        if event.new == "open" and event.old == "closed":
            config = self.client.maintenance.machine.config
            text += (
                f": {config.circuit_breaker_failure_threshold} dials to it failed in a row "
                "(handoff attempts, which are retried, and new connections, which fell back "
                "to A); handoffs to it now fail at once"
            )
        elif event.new == "open":
            text += ": a trial dial failed"
        return text

    def where_to(self, handler: MaintenanceHandler) -> str:
        """Where the client's connections are and where new ones go, for the live view."""
        endpoint = handler.state.current_endpoint
        name = self.names.get(endpoint, "?")
        where = f"new ones dial {name} {endpoint}"
        if name != "A":
            a_text = self.report.endpoints["A"]
            breakers = handler.circuit_breaker_stats()
            if any(str(b.endpoint) == endpoint and b.state.value == "open" for b in breakers):
                where = f"new ones dial A {a_text} (the breaker of {name} {endpoint} is open)"
            else:
                where += f" (A {a_text} if it cannot be reached)"
        if self.sims is None:
            return where
        sim_a, sim_b, a_server = self.sims
        on_a = sum(1 for c in sim_a.connections if c.backend == a_server)
        pool = self.client.pool.connections
        due = sum(1 for c in pool if handler.handoff_target(c) is not None)
        # why there can be more than pool_size: the pool opens others meanwhile
        waiting = f" ({due} of them waiting for a handoff, the pool opens others)" if due else ""
        return f"A {on_a} / B {len(sim_b.connections)} connections{waiting}, {where}"

    async def refresh(self, handler: MaintenanceHandler, stop: trio.Event) -> None:
        post_handoff = handler.machine.config.post_handoff_relaxed_duration
        while not stop.is_set():
            state = handler.state
            now = self.now()
            relaxed = relaxation([handler], trio.current_time())
            self.report.relaxed_peak = max(self.report.relaxed_peak, relaxed.relaxed)
            where = self.where_to(handler)
            until = relaxed.until
            self.observer.update(
                workload_snapshot(
                    self.stats,
                    now,
                    self.phase,
                    relaxed,
                    handoffs=(
                        state.pending_handoffs,
                        state.completed_handoffs,
                        state.failed_handoffs,
                    ),
                    endpoint=where,
                    relaxed_after_handoff=relaxed.after_handoff,
                    relaxed_until=None if until is None else until - self.stats.start,
                    post_handoff=post_handoff,
                    extra=self.cache_extra(),
                )
            )
            await trio.sleep(0.25)

    # ------------------------------------------------------------------ timeline

    async def window(
        self,
        sim_a: MaintenanceSimulator,
        sim_b: MaintenanceSimulator,
        a_server: RedisServer,
        b_server: RedisServer,
        admin_a: RawConnection,
        admin_b: RawConnection,
    ) -> None:
        cfg = self.cfg
        speed = cfg.speed
        start = trio.current_time()
        lead = cfg.announced_lead
        if cfg.scenario == "failover":
            seq = await sim_a.inject_failing_over(time=lead, remember=True)
            self.step(f"server: FAILING_OVER seq={seq} sent ({_starts_in(lead, LEAD / speed)})")
            await trio.sleep_until(start + LEAD / speed)
            sim_a.set_latency(FAILOVER_LATENCY)
            self.step(f"server: failover work, replies delayed by {FAILOVER_LATENCY:g} s")
            await trio.sleep_until(start + (LEAD + WORK) / speed)
            sim_a.set_latency(0.0)
            closing = await sim_a.inject_failed_over()
            self.step(f"server: FAILED_OVER seq={closing} sent")
            return
        seq = await sim_a.inject_migrating(time=lead, remember=True)
        self.step(f"server: MIGRATING seq={seq} sent")
        if cfg.scenario in ("moving", "none") and cfg.data_move == "stall":
            await _replicate(admin_a, admin_b, a_server)
            self.step("server: B is a replica of A and caught up (the data is copied)")
        await trio.sleep_until(start + (LEAD + WORK) / speed)
        closing = await sim_a.inject_migrated()
        self.step(f"server: MIGRATED seq={closing} sent")
        moving_at = trio.current_time()
        if cfg.scenario == "unreachable":
            dead = ("127.0.0.1", free_port())
            dead_text = str(Endpoint(*dead))
            self.names[dead_text] = "unreachable"
            self.report.connections_moved = len(sim_a.connections)
            seq = await sim_a.inject_moving(time=cfg.announced_time, target=dead, remember=True)
            self.step(f"server: MOVING seq={seq} to {dead_text}, where nothing listens")
            await trio.sleep_until(moving_at + cfg.close_after)
            sim_a.forget("MOVING")
            self.step("server: the MOVING window is over (A kept serving)")
            return
        if cfg.data_move == "migrate":
            self.step("server: trio_maint.testing.migrate(A, B) starts")
            result = await migrate(
                sim_a, sim_b, time=cfg.announced_time, close_after=cfg.close_after
            )
            self.report.connections_moved = len(result.moved)
            self.step(
                f"server: migrate done: MOVING seq={result.seq_id} was sent to "
                f"{len(result.moved)} connections, writes were paused "
                f"{result.paused_for * 1e3:.1f} ms, A's old connections closed"
            )
            return
        await self.move(sim_a, sim_b, a_server, b_server, admin_a, admin_b, moving_at)

    async def move(
        self,
        sim_a: MaintenanceSimulator,
        sim_b: MaintenanceSimulator,
        a_server: RedisServer,
        b_server: RedisServer,
        admin_a: RawConnection,
        admin_b: RawConnection,
        moving_at: float,
    ) -> None:
        """MOVING to B, then the switch of roles once no client connection reaches A's
        server any more. B's endpoint holds traffic (the simulator's ``stall``) until B is
        promoted, so no client ever writes to the replica; A keeps serving the connections
        MOVING has not moved yet, so none of them meets a read-only server."""
        cfg = self.cfg
        null = cfg.scenario == "none"
        if not null:
            sim_b.stall()
            sim_a.set_backend(sim_b)
        moved = [c.id for c in sim_a.connections]
        seq = await sim_a.inject_moving(time=cfg.announced_time, target=sim_b, remember=True)
        self.step(f"server: MOVING seq={seq} sent to {len(moved)} connections of A")
        self.report.connections_moved = len(moved)
        if null:
            # Clients of type "none" reconnect to the same address after time / 2: from a
            # little before then, new connections to A lead to B.
            await trio.sleep_until(moving_at + 0.9 * cfg.announced_time / 2)
            sim_b.stall()
            sim_a.set_backend(sim_b)
            # A's address is B's now (as DNS would have it): B has no MOVING to repeat to
            # the connections that reconnect there
            sim_a.forget("MOVING")
            self.step("server: new connections to A now lead to B (which sends no MOVING)")
        a_address = a_server.address
        pool = self.client.pool
        manager = self.client.maintenance.manager if self.client.maintenance else None

        def busy() -> int:
            # Streams still on A's server, less those of connections the client is
            # handing off (it sends no more commands there): at 0, A can be switched.
            on_a = sum(1 for c in sim_a.connections if c.backend == a_address)
            handing_off = sum(
                1 for c in pool.connections if manager is not None and manager.is_pending(c.id)
            )
            return on_a - handing_off

        deadline = moving_at + cfg.close_after
        tracking: list[str] = []
        with trio.move_on_at(deadline):
            while (left_on_a := busy()) > 0:
                if self.client.cache is not None:
                    # --cache: the tracking connection keeps reading A until its handoff,
                    # held by B's endpoint, is done; A closes it before the switch.
                    tracking = await _tracking_clients(admin_a)
                    if 0 < left_on_a <= len(tracking):
                        break
                    tracking = []
                await trio.sleep(0.002)
        for client_id in tracking:
            await admin_a.execute("CLIENT", "KILL", "ID", client_id)
        self.report.closed_before_handoff = len(tracking)
        if tracking:
            self.step(
                "server: A closed the cache's tracking connection (its handoff waits for B), "
                "so that no read reaches A once it is B's replica"
            )
        left = [c.id for c in sim_a.connections if c.backend == a_address]
        if left and trio.current_time() >= deadline:
            sim_a.close_connections(connections=left)
            self.step(f"server: {len(left)} connections still busy on A closed")
        paused = await _promote(admin_a, admin_b, a_server, b_server)
        sim_b.unstall()
        self.step(f"server: B promoted, A is now its replica (writes paused {paused * 1e3:.1f} ms)")
        await trio.sleep_until(deadline)
        sim_a.forget("MOVING")
        closed = sim_a.close_connections(connections=moved)
        self.step(f"server: A's time is up, {len(closed)} of its old connections still open")

    # ------------------------------------------------------------------ data check

    async def check(self, conn: RawConnection) -> None:
        acked = dict(self.stats.acked)
        keys = sorted(acked)
        report = self.report
        report.keys_checked = len(keys)
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            values = await _command(conn, "MGET", *chunk)
            for key, value in zip(chunk, values, strict=True):
                if value is None:
                    report.keys_missing += 1
                    continue
                counter = int(value.decode().rpartition(":")[2])
                if counter < acked[key]:
                    report.keys_stale += 1
        counts = dict(self.stats.increments)
        report.counters_checked = len(counts)
        for key, expected in counts.items():
            value = await conn.execute("GET", key)
            if value is None or int(value) < expected:
                report.counters_short += 1

    # ------------------------------------------------------------------ summary

    def summarize(self, window: tuple[float, float], end: float) -> None:
        report = self.report
        stats = self.stats
        report.duration = end
        report.window = window
        report.total_commands = len(stats.ops) + len(stats.failed_at)
        report.failed_commands = len(stats.failed_at)
        report.errors = dict(stats.errors)
        report.latency, report.series = phase_summary(stats.ops, stats.failed_at, window, end)


async def run_demo(
    cfg: DemoConfig, observer: Observer | None = None, registry: Any = None
) -> DemoReport:
    """Run the demo and return its :class:`DemoReport`.

    Starts two ``redis-server`` processes (A and B) on free loopback ports, each behind a
    :class:`~trio_maint.testing.MaintenanceSimulator`; runs ``cfg.tasks`` workload tasks
    through one :func:`~trio_maint.open_redis` client on A's endpoint; drives the
    scenario's maintenance timeline; then checks on B that every acknowledged write is
    there. Everything it starts is stopped before it returns.

    :param observer: receives events and live numbers (default: none).
    :param registry: a ``prometheus_client.CollectorRegistry`` to record the client's
        metrics on while it runs (``--metrics-port``), or ``None``.
    :raises DemoError: redis-server is missing or failed to start, or A's port is in use.
    """
    observer = observer if observer is not None else Silent()
    demo = _Demo(cfg, observer)
    rng = random.Random(cfg.seed)
    try:
        server_a = RedisServer()
        server_b = RedisServer()
    except RedisServerNotFoundError as exc:
        raise DemoError(str(exc)) from None
    if cfg.port:
        _check_port(cfg.port)
    entered = False
    report: DemoReport | None = None
    try:
        async with server_a, server_b:
            sim_a = MaintenanceSimulator(server_a, port=cfg.port)
            async with sim_a, MaintenanceSimulator(server_b) as sim_b:
                entered = True
                report = await _drive(demo, cfg, rng, server_a, server_b, sim_a, sim_b, registry)
    except RuntimeError as exc:
        if entered:
            raise
        raise DemoError(f"redis-server failed to start: {exc}") from None
    except OSError as exc:
        if entered:
            raise
        if exc.errno == errno.EADDRINUSE:
            raise DemoError(f"port {cfg.port} is in use (choose another with --port)") from None
        raise DemoError(f"cannot listen on port {cfg.port}: {exc.strerror or exc}") from None
    assert report is not None
    return report


def _check_port(port: int) -> None:
    """Fail early, with one line, when A's port is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DemoError(f"port {port} is in use (choose another with --port)") from None
            raise DemoError(f"cannot listen on port {port}: {exc.strerror or exc}") from None


async def _drive(
    demo: _Demo,
    cfg: DemoConfig,
    rng: random.Random,
    server_a: RedisServer,
    server_b: RedisServer,
    sim_a: MaintenanceSimulator,
    sim_b: MaintenanceSimulator,
    registry: Any,
) -> DemoReport:
    report = demo.report
    a_text = str(Endpoint(*sim_a.address))
    b_text = str(Endpoint(*sim_b.address))
    demo.names.update({a_text: "A", b_text: "B"})
    demo.sims = (sim_a, sim_b, server_a.address)
    report.endpoints = {
        "A": a_text,
        "B": b_text,
        "A_server": str(Endpoint(*server_a.address)),
        "B_server": str(Endpoint(*server_b.address)),
    }
    before, after = cfg.phases
    async with (
        await connect_raw(server_a.address) as admin_a,
        await connect_raw(server_b.address) as admin_b,
    ):
        if cfg.scenario in ("failover", "unreachable"):
            # B follows A all along; the data check reads B once it caught up.
            await _replicate(admin_a, admin_b, server_a)
        # The client's post-handoff relaxation follows the compressed timeline too.
        config = MaintConfig(
            endpoint_type=cfg.endpoint_type, post_handoff_relaxed_duration=cfg.post_handoff_relaxed
        )
        cache = CacheConfig() if cfg.cache else None
        client = open_redis(sim_a.url, pool_size=cfg.pool_size, maintenance=config, cache=cache)
        async with client as r:
            handler = r.maintenance
            assert handler is not None
            demo.client = r
            stop = trio.Event()
            window = (math.nan, math.nan)
            check = demo.stale_check
            async with instrumented(r, registry), trio.open_nursery() as nursery:
                nursery.start_soon(demo.consume, handler)
                if r.cache is not None:
                    await r.cache.sync()  # the tracking connection is up
                await trio.lowlevel.checkpoint()
                demo.stats.start = trio.current_time()
                nursery.start_soon(demo.refresh, handler, stop)
                async with trio.open_nursery() as workers:
                    if check is not None and r.cache is not None:
                        caches = [r.cache]
                        workers.start_soon(check.run_barriers, lambda: caches, stop)
                    for task in range(cfg.tasks):
                        workers.start_soon(
                            run_task,
                            r,
                            demo.stats,
                            task,
                            cfg,
                            stop,
                            random.Random(rng.random()),
                            check,
                        )
                    demo.phase = "before"
                    demo.step(f"workload: {cfg.tasks} tasks, pool of {cfg.pool_size}")
                    await trio.sleep(before)
                    demo.phase = "window"
                    w_start = demo.now()
                    await demo.window(sim_a, sim_b, server_a, server_b, admin_a, admin_b)
                    w_end = demo.now()
                    window = (w_start, w_end)
                    demo.phase = "after"
                    await trio.sleep(after)
                    stop.set()
                end = demo.now()
                demo.phase = "checking"
                state = handler.state
                report.handoffs_completed = state.completed_handoffs
                report.handoffs_failed = state.failed_handoffs
                report.relaxed_at_end = relaxation([handler], trio.current_time()).relaxed
                if handler.manager is not None:
                    report.breakers = [
                        {
                            "endpoint": str(b.endpoint),
                            "state": b.state.value,
                            "opened": b.opened,
                        }
                        for b in handler.circuit_breaker_stats()
                    ]
                if r.cache is not None and check is not None:
                    report.cache = cache_document([r.cache], check)
                nursery.cancel_scope.cancel()
        if cfg.scenario in ("failover", "unreachable"):
            await _caught_up(admin_b, await _offset(admin_a))
        await demo.check(admin_b)
    demo.summarize(window, end)
    return report
