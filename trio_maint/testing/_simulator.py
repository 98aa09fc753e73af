"""MaintenanceSimulator: a Trio RESP proxy that plays managed Redis's maintenance role.

Each client connection accepted on a loopback port is forwarded to a backend redis-server
(:class:`~trio_maint.testing._proxy.ProxyConnection` does the forwarding). The server's
bytes are forwarded untouched; a :class:`~._scanner.RespScanner` tracks where its top-level
frames end, so injected push frames (MOVING, MIGRATING, ...) only ever go between whole
frames. ``CLIENT MAINT_NOTIFICATIONS`` is answered by the proxy, which remembers each
connection's requested ``moving-endpoint-type``. Wire formats and timings:
docs/maintenance.md and docs/testing.md.

Structure: everything the simulator runs lives in one ``async with`` block,
:meth:`MaintenanceSimulator.running` (the private redis-server, then the nursery of the
accept loop and of the forwarding tasks); ``__aenter__`` and ``__aexit__`` only enter and
exit it, so no ``__aenter__`` of a nursery or server is called by hand. An exception of
the caller's block comes out unwrapped (not in the nursery's exception group).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Final, Literal, Self, TypeAlias

import trio

from .._net.groups import open_nursery_unwrapped
from .._sansio.endpoint import format_host_port, split_host_port
from ._frames import (
    NullStyle,
    StringStyle,
    failed_over_frame,
    failing_over_frame,
    format_endpoint,
    migrated_frame,
    migrating_frame,
    moving_frame,
    smigrated_frame,
    smigrating_frame,
)
from ._proxy import ENDPOINT_TYPES, Address, ConnectionInfo, ProxyConnection
from ._server import RedisServer

__all__ = [
    "ENDPOINT_TYPES",
    "Address",
    "ConnectionInfo",
    "ConnectionSelector",
    "MaintenanceSimulator",
]

#: What may be given as a backend or a MOVING target: a :class:`RedisServer`, another
#: :class:`MaintenanceSimulator` (its listening address), ``(host, port)`` or ``"host:port"``.
Target: TypeAlias = "RedisServer | MaintenanceSimulator | Address | str"

#: Which client connections an action applies to: ``None`` = every connection that enabled
#: maintenance notifications (as the server sends them), ``"all"`` = every open connection,
#: or an iterable of connection ids.
ConnectionSelector: TypeAlias = "Iterable[int] | Literal['all'] | None"


def _resolve(target: Target) -> tuple[Address, bool]:
    """``(address, is_simulator)`` of a backend/target specification."""
    if isinstance(target, MaintenanceSimulator):
        return target.address, True
    if isinstance(target, RedisServer):
        return target.address, False
    if isinstance(target, str):
        return split_host_port(target, require_port=True), False
    return (str(target[0]), int(target[1])), False


_FrameFactory: TypeAlias = Callable[[ProxyConnection], bytes]

# The next id of the simulators sharing one counter (``seq_start=None``), per Trio run:
# each pytest-trio test (its own ``trio.run``) numbers from 1001 again.
_SHARED_SEQ: trio.lowlevel.RunVar[int] = trio.lowlevel.RunVar("trio_maint_shared_seq")
_SHARED_SEQ_START: Final = 1001


class MaintenanceSimulator:
    """A RESP proxy on a loopback port that simulates managed Redis's maintenance behaviour.

    Use as ``async with MaintenanceSimulator(backend=server) as sim:``; it owns a nursery
    (its accept loop and two forwarding tasks per client connection) and, when ``backend``
    is ``None``, a :class:`RedisServer` of its own. Leaving the block closes every socket,
    cancels every task and stops (and reaps) the owned server.

    Byte-exact: the server's bytes are never re-encoded; frame boundaries come from a
    :class:`~trio_maint.testing.RespScanner` and injected frames go only between whole
    frames. ``CLIENT MAINT_NOTIFICATIONS ON [moving-endpoint-type T]`` and ``... OFF`` are
    answered ``+OK`` by the proxy (in order with the replies to earlier pipelined commands);
    everything else is forwarded.

    :param backend: where client connections are forwarded: a :class:`RedisServer`, another
        simulator, ``(host, port)`` or ``"host:port"``; ``None`` starts a private
        :class:`RedisServer` (with ``server_args``) for the simulator's lifetime.
    :param host: the loopback address to listen on.
    :param port: the port; ``0`` picks a free one.
    :param maint_notifications: answer ``CLIENT MAINT_NOTIFICATIONS`` (as managed Redis);
        ``False`` forwards it, so the backend rejects it as Redis Open Source does
        (``-ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP.``).
    :param resp2_only: behave as a RESP2-only server: ``HELLO 3`` is answered
        ``-NOPROTO sorry, this protocol version is not supported``.
    :param fqdn: the host name written in MOVING for clients that asked for an ``*-fqdn``
        endpoint type (it must resolve to the target's address for clients to follow it).
    :param seq_start: ``None``: sequence ids (when an ``inject_*`` call gets none) come
        from a counter shared by the simulators of the Trio run (from 1001), so a chain of
        moves never repeats one; an ``int``: this simulator's own counter from that value,
        as separate nodes may number them (test a client against both).
    :param server_args: extra ``redis-server`` arguments when ``backend`` is ``None``.
    """

    def __init__(
        self,
        backend: Target | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        maint_notifications: bool = True,
        resp2_only: bool = False,
        fqdn: str = "localhost",
        seq_start: int | None = None,
        server_args: Sequence[str] = (),
    ) -> None:
        self.host = host
        self.maint_notifications = maint_notifications
        self.resp2_only = resp2_only
        self.fqdn = fqdn
        self._port = port
        self._next_seq = seq_start
        self._home: Address | None = None
        self._epoch = 0  # upstream generation; bumped when migrate re-points connections
        self._switching: trio.Event | None = None
        self._server_args = tuple(server_args)
        self._backend_spec = backend
        self._own_server: RedisServer | None = None
        self._backend: Address = ("", 0)
        self._backend_is_sim = False
        self._conns: dict[int, ProxyConnection] = {}
        self._next_id = 1
        self._accepted = 0
        self._latency = 0.0
        self._stalled = False
        self._unstalled = trio.Event()
        self._unstalled.set()
        self._changed = trio.Event()
        self._accept_scope: trio.CancelScope | None = None
        self._accept_done: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._running: AbstractAsyncContextManager[Self] | None = None
        self._remembered: dict[str, _FrameFactory] = {}

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._running is not None:
            raise RuntimeError("this MaintenanceSimulator is already running")
        running = self.running()
        self._running = running
        try:
            return await running.__aenter__()
        except BaseException:
            self._running = None
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        running, self._running = self._running, None
        if running is not None:
            # running() never suppresses an exception: its result is always false.
            await running.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Self]:
        """Run the simulator for the duration of an ``async with`` block (what ``async with
        MaintenanceSimulator(...) as sim:`` does): its private redis-server when
        ``backend`` is ``None``, the listening socket, the accept loop and every forwarding
        task. Leaving the block closes every socket, cancels every task and stops (and
        reaps) the owned server; an exception of the block propagates unwrapped.

        :raises RuntimeError: the simulator is already running.
        """
        if self._nursery is not None:
            raise RuntimeError("this MaintenanceSimulator is already running")
        async with self._backend_server():
            self._home = self._backend
            try:
                async with open_nursery_unwrapped() as nursery:
                    self._nursery = nursery
                    try:
                        await self._listen()
                        yield self
                    finally:
                        nursery.cancel_scope.cancel()
                        for conn in list(self._conns.values()):
                            conn.close_now(abort=False)
            finally:
                self._nursery = None

    @asynccontextmanager
    async def _backend_server(self) -> AsyncIterator[None]:
        """Forward to the given backend, or to a redis-server of its own while it runs."""
        if self._backend_spec is not None:
            self.set_backend(self._backend_spec)
            yield
            return
        async with RedisServer(extra_args=self._server_args) as server:
            self._own_server = server
            try:
                self.set_backend(server)
                yield
            finally:
                self._own_server = None

    async def _listen(self) -> None:
        assert self._nursery is not None
        listeners = await trio.open_tcp_listeners(self._port, host=self.host)
        listener = listeners[0]
        for extra in listeners[1:]:
            await extra.aclose()
        self._port = listener.socket.getsockname()[1]
        await self._nursery.start(self._accept_loop, listener)

    async def _accept_loop(
        self,
        listener: trio.SocketListener,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        done = trio.Event()
        self._accept_done = done
        try:
            with trio.CancelScope() as scope:
                self._accept_scope = scope
                task_status.started()
                while True:
                    stream = await listener.accept()
                    assert self._nursery is not None
                    self._nursery.start_soon(self._handle, stream)
        finally:
            listener.socket.close()
            done.set()

    # ------------------------------------------------------------------ properties

    @property
    def address(self) -> Address:
        """``(host, port)`` the simulator listens on (the port is known once entered)."""
        return (self.host, self._port)

    @property
    def port(self) -> int:
        """The listening port (``int``)."""
        return self._port

    @property
    def url(self) -> str:
        """``redis://host:port`` of the simulator."""
        return f"redis://{format_host_port(self.host, self._port)}"

    @property
    def server(self) -> RedisServer | None:
        """The :class:`RedisServer` behind the simulator, when it was given one or owns one."""
        if self._own_server is not None:
            return self._own_server
        spec = self._backend_spec
        return spec if isinstance(spec, RedisServer) else None

    @property
    def backend_address(self) -> Address:
        """``(host, port)`` new client connections are forwarded to."""
        return self._backend

    @property
    def connections(self) -> list[ConnectionInfo]:
        """Snapshots of the open client connections, oldest first."""
        return [c.info() for c in self._conns.values()]

    @property
    def accepted(self) -> int:
        """How many client connections were accepted so far (``int``)."""
        return self._accepted

    def next_seq_id(self) -> int:
        """Hand out the next sequence id (shared counter, or its own: ``seq_start``)."""
        if self._next_seq is None:
            seq = _SHARED_SEQ.get(_SHARED_SEQ_START)
            _SHARED_SEQ.set(seq + 1)
            return seq
        seq = self._next_seq
        self._next_seq += 1
        return seq

    @property
    def home_address(self) -> Address:
        """``(host, port)`` of the server it was started in front of (whatever happened
        since): where :func:`migrate` moves the data when this simulator is its target."""
        return self._home if self._home is not None else self._backend

    async def wait_until(self, predicate: Callable[[MaintenanceSimulator], bool]) -> None:
        """Wait until ``predicate(sim)`` is true; re-checked whenever a connection opens,
        closes or changes state. Wrap it in :func:`trio.fail_after` to bound it."""
        while not predicate(self):
            await self._changed.wait()

    async def wait_for_connections(self, count: int, *, maint_enabled: bool = False) -> None:
        """Wait until at least ``count`` connections are open (that enabled notifications,
        with ``maint_enabled``)."""
        await self.wait_until(
            lambda s: (
                sum(1 for c in s._conns.values() if c.maint_enabled or not maint_enabled) >= count
            )
        )

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ------------------------------------------------------------------ connection handling

    async def _handle(self, client: trio.SocketStream) -> None:
        cid = self._next_id
        self._next_id += 1
        self._accepted += 1
        try:
            peer_raw = client.socket.getpeername()
            peer: Address = (str(peer_raw[0]), int(peer_raw[1]))
        except OSError:
            peer = ("", 0)
        conn = ProxyConnection(self, cid, client, peer)
        self._conns[cid] = conn
        self._notify()
        try:
            await self._switch_done()  # not before the new primary is promoted
            conn.backend_address = self._backend
            conn.passthrough = self._backend_is_sim
            conn.epoch = self._epoch
            await conn.forward()
        finally:
            conn.closed = True
            del self._conns[cid]
            conn.release()
            self._notify()

    async def _switch_done(self) -> None:
        """Wait while :func:`migrate` is switching the upstream."""
        while self._switching is not None:
            await self._switching.wait()

    async def _gate(self) -> None:
        """Wait while forwarding is stalled (:meth:`stall`)."""
        while self._stalled:
            await self._unstalled.wait()

    # ------------------------------------------------------------------ injection

    def _select(self, connections: ConnectionSelector) -> list[ProxyConnection]:
        if connections is None:
            return [c for c in self._conns.values() if c.maint_enabled]
        if connections == "all":
            return list(self._conns.values())
        wanted = set(connections)
        return [c for c in self._conns.values() if c.id in wanted]

    async def _inject(
        self,
        factory: _FrameFactory,
        connections: ConnectionSelector,
        after_frames: int,
        remember: str | None = None,
    ) -> list[int]:
        targets = self._select(connections)
        if remember is not None:
            # Before the first await: a connection that opts in while the frames are being
            # written is not a target, so it must get the replay.
            self._remembered[remember] = factory
        for conn in targets:
            await conn.inject(factory(conn), after_frames)
        return [c.id for c in targets]

    def forget(self, name: str | None = None) -> None:
        """Stop replaying a remembered notification (by name, e.g. ``"MOVING"``; ``None``:
        all) to connections that enable notifications later."""
        if name is None:
            self._remembered.clear()
        else:
            self._remembered.pop(name, None)

    async def inject_raw(
        self, data: bytes, *, connections: ConnectionSelector = "all", after_frames: int = 0
    ) -> list[int]:
        """Write ``data`` byte for byte to client connections, between whole server frames.

        :param data: any bytes (also malformed RESP, for error-path tests).
        :param connections: see :data:`ConnectionSelector` (default: every connection).
        :param after_frames: let this many more server frames through first (``0``: at the
            next frame boundary, i.e. now when the connection is idle).
        :returns: the ids of the connections it was written (or queued) to.
        """
        return await self._inject(lambda _c: data, connections, after_frames)

    async def inject_moving(
        self,
        *,
        seq_id: int | None = None,
        time: int = 15,
        target: Target | None = None,
        connections: ConnectionSelector = None,
        strings: StringStyle = "bulk",
        null: NullStyle = "_",
        remember: bool = False,
        after_frames: int = 0,
    ) -> int:
        """Send ``MOVING seq time endpoint`` (as Redis's MOVING notification, see
        docs/maintenance.md): the endpoint moves to ``target`` within ``time`` seconds.

        The endpoint is written per connection from the type it asked for: ``*-ip`` and a
        bare ``ON`` get ``ip:port``, ``*-fqdn`` get ``<fqdn>:port``, ``none`` gets a null
        (written per ``null``). This only notifies: pair it with :meth:`set_backend` and
        :meth:`close_connections` (or use :func:`~trio_maint.testing.moving_scenario`).

        :param seq_id: the sequence id (default: :meth:`next_seq_id`).
        :param time: whole seconds (``int``).
        :param target: where to move (default: this simulator's own address).
        :param connections: see :data:`ConnectionSelector`.
        :param strings: write texts as ``"bulk"`` or ``"simple"`` strings.
        :param null: ``"_"``, ``"$-1"`` or ``"omit"`` for the null endpoint.
        :param remember: also send it to connections that enable notifications later,
            until :meth:`forget` (managed Redis does so during a maintenance window).
        :param after_frames: see :meth:`inject_raw`.
        :returns: the sequence id used.
        :raises ValueError: a bad ``target`` string.
        """
        seq = self.next_seq_id() if seq_id is None else seq_id
        address = self.address if target is None else _resolve(target)[0]
        fqdn = self.fqdn

        def factory(conn: ProxyConnection) -> bytes:
            endpoint = format_endpoint(address, conn.endpoint_type, fqdn)
            return moving_frame(seq, time, endpoint, strings=strings, null=null)

        await self._inject(factory, connections, after_frames, "MOVING" if remember else None)
        return seq

    async def inject_migrating(
        self,
        *,
        seq_id: int | None = None,
        time: int | None = 2,
        shard_ids: str | None = "1",
        connections: ConnectionSelector = None,
        strings: StringStyle = "bulk",
        remember: bool = False,
        after_frames: int = 0,
    ) -> int:
        """Send ``MIGRATING seq time shard_ids`` (the shard migrates within ``time`` seconds;
        ``None`` omits an element). See :meth:`inject_moving` for the common parameters.

        :returns: the sequence id used.
        """
        seq = self.next_seq_id() if seq_id is None else seq_id
        frame = migrating_frame(seq, time=time, shard_ids=shard_ids, strings=strings)
        await self._inject(
            lambda _c: frame, connections, after_frames, "MIGRATING" if remember else None
        )
        return seq

    async def inject_migrated(
        self,
        *,
        seq_id: int | None = None,
        shard_ids: str | None = "1",
        connections: ConnectionSelector = None,
        strings: StringStyle = "bulk",
        after_frames: int = 0,
    ) -> int:
        """Send ``MIGRATED seq shard_ids`` (the migration finished); forgets a remembered
        MIGRATING. :returns: the sequence id used."""
        seq = self.next_seq_id() if seq_id is None else seq_id
        frame = migrated_frame(seq, shard_ids=shard_ids, strings=strings)
        self.forget("MIGRATING")
        await self._inject(lambda _c: frame, connections, after_frames)
        return seq

    async def inject_failing_over(
        self,
        *,
        seq_id: int | None = None,
        time: int | None = 2,
        shard_ids: str | None = "1",
        connections: ConnectionSelector = None,
        strings: StringStyle = "bulk",
        remember: bool = False,
        after_frames: int = 0,
    ) -> int:
        """Send ``FAILING_OVER seq time shard_ids`` (a failover starts within ``time``
        seconds). :returns: the sequence id used."""
        seq = self.next_seq_id() if seq_id is None else seq_id
        frame = failing_over_frame(seq, time=time, shard_ids=shard_ids, strings=strings)
        await self._inject(
            lambda _c: frame, connections, after_frames, "FAILING_OVER" if remember else None
        )
        return seq

    async def inject_failed_over(
        self,
        *,
        seq_id: int | None = None,
        shard_ids: str | None = "1",
        connections: ConnectionSelector = None,
        strings: StringStyle = "bulk",
        after_frames: int = 0,
    ) -> int:
        """Send ``FAILED_OVER seq shard_ids`` (the failover finished); forgets a remembered
        FAILING_OVER. :returns: the sequence id used."""
        seq = self.next_seq_id() if seq_id is None else seq_id
        frame = failed_over_frame(seq, shard_ids=shard_ids, strings=strings)
        self.forget("FAILING_OVER")
        await self._inject(lambda _c: frame, connections, after_frames)
        return seq

    async def inject_smigrating(
        self,
        *,
        seq_id: int | None = None,
        slots: str | Sequence[str] = "0-16383",
        connections: ConnectionSelector = None,
        strings: StringStyle = "bulk",
        remember: bool = False,
        after_frames: int = 0,
    ) -> int:
        """Send ``SMIGRATING seq slots`` (cluster slots about to migrate; ``slots`` is one
        text like ``"123,789-1000"`` or several specs). :returns: the sequence id used."""
        seq = self.next_seq_id() if seq_id is None else seq_id
        frame = smigrating_frame(seq, slots, strings=strings)
        await self._inject(
            lambda _c: frame, connections, after_frames, "SMIGRATING" if remember else None
        )
        return seq

    async def inject_smigrated(
        self,
        entries: Sequence[tuple[str, str, str] | tuple[str, str]],
        *,
        seq_id: int | None = None,
        connections: ConnectionSelector = None,
        strings: StringStyle = "bulk",
        after_frames: int = 0,
    ) -> int:
        """Send ``SMIGRATED seq [[source, target, slots], ...]`` (or the older pair shape
        ``[[endpoint, slots], ...]`` when ``entries`` are pairs); forgets a remembered
        SMIGRATING. :returns: the sequence id used."""
        seq = self.next_seq_id() if seq_id is None else seq_id
        frame = smigrated_frame(seq, entries, strings=strings)
        self.forget("SMIGRATING")
        await self._inject(lambda _c: frame, connections, after_frames)
        return seq

    # ------------------------------------------------------------------ traffic actions

    def set_backend(self, backend: Target) -> None:
        """Forward *new* client connections to ``backend`` (open ones keep theirs), as the
        endpoint does once managed Redis moved it. A simulator as backend is chained to
        transparently (it answers ``CLIENT MAINT_NOTIFICATIONS``; this one sees the opt-in
        too, so its injections and remembered window still reach the connection).

        :raises ValueError: a bad ``"host:port"`` string.
        """
        self._backend, self._backend_is_sim = _resolve(backend)

    def close_connections(
        self, *, after: float = 0.0, connections: ConnectionSelector = "all"
    ) -> list[int]:
        """Close client connections gracefully (FIN) after ``after`` seconds, as the server
        does when MOVING's ``time`` runs out. The set is fixed now: connections opened later
        are kept.

        :param after: delay in seconds (``float``; trio's clock, so MockClock applies).
        :param connections: see :data:`ConnectionSelector` (default: every open connection).
        :returns: the ids that will be closed.
        :raises RuntimeError: the simulator is not running.
        """
        targets = self._select(connections)
        if after <= 0:
            for conn in targets:
                conn.close_now(abort=False)
        else:
            if self._nursery is None:
                raise RuntimeError("the simulator is not running")
            self._nursery.start_soon(self._close_later, targets, after)
        return [c.id for c in targets]

    async def _close_later(self, targets: list[ProxyConnection], after: float) -> None:
        await trio.sleep(after)
        for conn in targets:
            conn.close_now(abort=False)

    async def drop_connections(self, connections: ConnectionSelector = "all") -> list[int]:
        """Reset client connections abruptly (RST, as a crashed node or a network cut) and
        wait until they are gone. :returns: the ids dropped."""
        targets = self._select(connections)
        for conn in targets:
            conn.close_now(abort=True)
        ids = {c.id for c in targets}
        await self.wait_until(lambda s: not ids & s._conns.keys())
        return sorted(ids)

    def set_latency(self, seconds: float) -> None:
        """Delay each chunk of server-to-client traffic by ``seconds`` (``float``; 0 = off).
        Injected frames and the proxy's own answers are not delayed."""
        if seconds < 0:
            raise ValueError("latency must be >= 0")
        self._latency = seconds

    def stall(self) -> None:
        """Stop forwarding in both directions (bytes are held, not lost) until
        :meth:`unstall`; injections still go through. Connections stay open."""
        if not self._stalled:
            self._stalled = True
            self._unstalled = trio.Event()

    def unstall(self) -> None:
        """Resume forwarding after :meth:`stall`."""
        self._stalled = False
        self._unstalled.set()

    async def refuse_new(self, refuse: bool = True) -> None:
        """Refuse new connections (``True``: the listening socket is closed, so connecting
        fails with ``ConnectionRefusedError``) or accept them again (``False``: listen on the
        same port again). Open connections are not affected.

        :raises OSError: re-listening failed (the port was taken meanwhile).
        """
        if refuse:
            if self._accept_scope is not None and self._accept_done is not None:
                self._accept_scope.cancel()
                await self._accept_done.wait()
                self._accept_scope = None
        elif self._accept_scope is None:
            await self._listen()

    def __repr__(self) -> str:
        return (
            f"<MaintenanceSimulator {format_host_port(self.host, self._port)} -> "
            f"{format_host_port(*self._backend)}, {len(self._conns)} connections>"
        )
