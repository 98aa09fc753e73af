"""MaintenanceSimulator: a Trio RESP proxy that plays managed Redis's maintenance role.

Each client connection accepted on a loopback port is forwarded to a backend redis-server.
The server's bytes are forwarded untouched; a :class:`~._scanner.RespScanner` tracks where
its top-level frames end, so injected push frames (MOVING, MIGRATING, ...) only ever go
between whole frames. ``CLIENT MAINT_NOTIFICATIONS`` is answered by the proxy, which
remembers each connection's requested ``moving-endpoint-type``. Wire formats and timings:
docs/maintenance.md and docs/testing.md.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Self, TypeAlias

import hiredis
import trio

from ._frames import (
    NullStyle,
    StringStyle,
    failed_over_frame,
    failing_over_frame,
    migrated_frame,
    migrating_frame,
    moving_frame,
    smigrated_frame,
    smigrating_frame,
)
from ._scanner import PUSH, RespScanError, RespScanner
from ._server import RedisServer

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

__all__ = [
    "ENDPOINT_TYPES",
    "Address",
    "ConnectionInfo",
    "ConnectionSelector",
    "MaintenanceSimulator",
    "format_endpoint",
]

#: ``(host, port)``.
Address: TypeAlias = tuple[str, int]

#: What may be given as a backend or a MOVING target: a :class:`RedisServer`, another
#: :class:`MaintenanceSimulator` (its listening address), ``(host, port)`` or ``"host:port"``.
Target: TypeAlias = "RedisServer | MaintenanceSimulator | Address | str"

#: Which client connections an action applies to: ``None`` = every connection that enabled
#: maintenance notifications (as the server sends them), ``"all"`` = every open connection,
#: or an iterable of connection ids.
ConnectionSelector: TypeAlias = "Iterable[int] | Literal['all'] | None"

#: The values ``moving-endpoint-type`` accepts in ``CLIENT MAINT_NOTIFICATIONS ON``.
ENDPOINT_TYPES: Final = frozenset(
    {"internal-ip", "internal-fqdn", "external-ip", "external-fqdn", "none"}
)

_CHUNK: Final = 65536
#: Client frames up to this size are parsed for interception; larger ones stream through.
_CAPTURE_LIMIT: Final = 65536
_OK: Final = b"+OK\r\n"
_NOPROTO: Final = b"-NOPROTO sorry, this protocol version is not supported\r\n"
_SYNTAX: Final = b"-ERR syntax error\r\n"
_SUBSCRIBE: Final = frozenset({b"subscribe", b"psubscribe", b"ssubscribe"})
_UNSUBSCRIBE: Final = {b"unsubscribe": b"subscribe", b"punsubscribe": b"psubscribe"}
_UNSUBSCRIBE[b"sunsubscribe"] = b"ssubscribe"


def format_endpoint(address: Address, endpoint_type: str | None, fqdn: str) -> str | None:
    """Write a MOVING endpoint for a client that asked for ``endpoint_type``.

    :param address: the target's ``(ip, port)``.
    :param endpoint_type: one of :data:`ENDPOINT_TYPES`, or ``None`` (bare ``ON``: the server
        chooses; the simulator writes the IP form).
    :param fqdn: the host name written for the ``*-fqdn`` types (e.g. ``"localhost"``).
    :returns: ``"host:port"``, or ``None`` (the null endpoint) for type ``none``.
    """
    if endpoint_type == "none":
        return None
    host, port = address
    if endpoint_type is not None and endpoint_type.endswith("fqdn"):
        host = fqdn
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def _resolve(target: Target) -> tuple[Address, bool]:
    """``(address, is_simulator)`` of a backend/target specification."""
    if isinstance(target, MaintenanceSimulator):
        return target.address, True
    if isinstance(target, RedisServer):
        return target.address, False
    if isinstance(target, str):
        host_text, sep, port_text = target.rpartition(":")
        if not sep:
            raise ValueError(f"expected 'host:port', got {target!r}")
        return (host_text.strip("[]"), int(port_text)), False
    return (str(target[0]), int(target[1])), False


@dataclass(frozen=True)
class ConnectionInfo:
    """A snapshot of one client connection through the simulator.

    :ivar id: the simulator's connection id (``int``, from 1, never reused).
    :ivar peer: the client's ``(host, port)``.
    :ivar backend: the ``(host, port)`` this connection is forwarded to.
    :ivar maint_enabled: the client sent ``CLIENT MAINT_NOTIFICATIONS ON`` (and not ``OFF``).
    :ivar endpoint_type: the ``moving-endpoint-type`` it asked for (``None``: not given).
    :ivar protocol: 3 after a forwarded ``HELLO 3``, else 2.
    :ivar bytes_from_client: bytes received from the client.
    :ivar bytes_to_client: bytes written to the client (forwarded, injected and answered).
    :ivar frames_from_server: whole top-level frames forwarded from the backend.
    :ivar injected: frames (or raw payloads) injected so far.
    :ivar opened_at: ``trio.current_time()`` when accepted (seconds, ``float``).
    """

    id: int
    peer: Address
    backend: Address
    maint_enabled: bool
    endpoint_type: str | None
    protocol: int
    bytes_from_client: int
    bytes_to_client: int
    frames_from_server: int
    injected: int
    opened_at: float


class _Conn:
    def __init__(self, cid: int, client: trio.SocketStream, peer: Address) -> None:
        self.id = cid
        self.client = client
        self.peer = peer
        self.backend: trio.SocketStream | None = None
        self.backend_address: Address = ("", 0)
        self.passthrough = False
        self.scope = trio.CancelScope()
        self.abort = False
        self.closed = False
        self.write_lock = trio.Lock()
        self.s2c = RespScanner()
        self.c2s = RespScanner(requests=True)
        self.c2s_pending = bytearray()
        self.c2s_streaming = False
        self.scheduled: list[list[Any]] = []  # [frames still to pass, payload]
        self.synthetic: deque[tuple[int, bytes]] = deque()  # (replies to wait for, reply)
        self.expected = 0  # regular replies the backend owes for forwarded commands
        self.replies = 0  # regular (non-push) frames received from the backend
        self.resp3 = False
        self.reply_off = False
        self.skip_next = False
        self.subscriptions: dict[bytes, set[bytes]] = {k: set() for k in _SUBSCRIBE}
        self.maint_enabled = False
        self.endpoint_type: str | None = None
        self.bytes_from_client = 0
        self.bytes_to_client = 0
        self.injected = 0
        self.opened_at = trio.current_time()

    def info(self) -> ConnectionInfo:
        return ConnectionInfo(
            id=self.id,
            peer=self.peer,
            backend=self.backend_address,
            maint_enabled=self.maint_enabled,
            endpoint_type=self.endpoint_type,
            protocol=3 if self.resp3 else 2,
            bytes_from_client=self.bytes_from_client,
            bytes_to_client=self.bytes_to_client,
            frames_from_server=self.s2c.frames,
            injected=self.injected,
            opened_at=self.opened_at,
        )

    def close_now(self, *, abort: bool) -> None:
        self.abort = self.abort or abort
        self.scope.cancel()


_FrameFactory: TypeAlias = Callable[[_Conn], bytes]


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
    :param seq_start: the first sequence id handed out when an ``inject_*`` call gets none.
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
        seq_start: int = 1001,
        server_args: Sequence[str] = (),
    ) -> None:
        self.host = host
        self.maint_notifications = maint_notifications
        self.resp2_only = resp2_only
        self.fqdn = fqdn
        self._port = port
        self._next_seq = seq_start
        self._server_args = tuple(server_args)
        self._backend_spec = backend
        self._own_server: RedisServer | None = None
        self._backend: Address = ("", 0)
        self._backend_is_sim = False
        self._conns: dict[int, _Conn] = {}
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
        self._nursery_cm: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._remembered: dict[str, _FrameFactory] = {}

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._nursery is not None:
            raise RuntimeError("this MaintenanceSimulator is already running")
        if self._backend_spec is None:
            self._own_server = RedisServer(extra_args=self._server_args)
            await self._own_server.__aenter__()
            self.set_backend(self._own_server)
        else:
            self.set_backend(self._backend_spec)
        self._nursery_cm = trio.open_nursery()
        try:
            self._nursery = await self._nursery_cm.__aenter__()
            await self._listen()
        except BaseException as exc:
            await self._shutdown(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return await self._shutdown(exc_type, exc, tb)

    async def _shutdown(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        try:
            if self._nursery is not None and self._nursery_cm is not None:
                self._nursery.cancel_scope.cancel()
                for conn in list(self._conns.values()):
                    conn.close_now(abort=False)
                try:
                    await self._nursery_cm.__aexit__(exc_type, exc, tb)
                except BaseExceptionGroup as group:
                    # The body's own exception comes back wrapped: let it propagate unwrapped.
                    if exc is not None and list(group.exceptions) == [exc]:
                        return False
                    raise
        finally:
            self._nursery = None
            self._nursery_cm = None
            if self._own_server is not None:
                server, self._own_server = self._own_server, None
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(server.stop)
        return False

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
        return f"redis://{self.host}:{self._port}"

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
        """Hand out the next sequence id (counting up from ``seq_start``)."""
        seq = self._next_seq
        self._next_seq += 1
        return seq

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
        conn = _Conn(cid, client, peer)
        conn.backend_address = self._backend
        conn.passthrough = self._backend_is_sim
        self._conns[cid] = conn
        self._notify()
        try:
            with conn.scope:
                try:
                    conn.backend = await trio.open_tcp_stream(*conn.backend_address)
                except OSError:
                    return
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump_client_to_server, conn)
                    nursery.start_soon(self._pump_server_to_client, conn)
        finally:
            conn.closed = True
            del self._conns[cid]
            conn.scheduled.clear()
            conn.synthetic.clear()
            if conn.abort:
                try:
                    client.socket.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                except OSError:
                    pass
            client.socket.close()
            if conn.backend is not None:
                conn.backend.socket.close()
            self._notify()

    async def _gate(self) -> None:
        while self._stalled:
            await self._unstalled.wait()

    async def _pump_server_to_client(self, conn: _Conn) -> None:
        assert conn.backend is not None
        try:
            while True:
                data = await conn.backend.receive_some(_CHUNK)
                if not data:
                    break
                await self._gate()
                if self._latency > 0:
                    await trio.sleep(self._latency)
                async with conn.write_lock:
                    await self._deliver_server_bytes(conn, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, RespScanError):
            pass
        conn.scope.cancel()

    async def _deliver_server_bytes(self, conn: _Conn, data: bytes) -> None:
        out: list[bytes] = []
        if conn.synthetic and conn.s2c.at_boundary:
            out.extend(self._due_answers(conn))
        ends = conn.s2c.feed(data)
        if not conn.scheduled and not conn.synthetic and not out:
            for _, kind in ends:
                if kind != PUSH:
                    conn.replies += 1
            conn.bytes_to_client += len(data)
            await conn.client.send_all(data)
            return
        start = 0
        for end, kind in ends:
            if kind != PUSH:
                conn.replies += 1
            due = self._due(conn)
            if due:
                out.append(data[start:end])
                out.extend(due)
                start = end
        out.append(data[start:])
        payload = b"".join(out)
        conn.bytes_to_client += len(payload)
        await conn.client.send_all(payload)

    def _due(self, conn: _Conn) -> list[bytes]:
        """Payloads to write right after the frame that just ended."""
        due: list[bytes] = []
        if conn.scheduled:
            keep: list[list[Any]] = []
            for item in conn.scheduled:
                item[0] -= 1
                if item[0] <= 0:
                    due.append(item[1])
                    conn.injected += 1
                else:
                    keep.append(item)
            conn.scheduled = keep
        due.extend(self._due_answers(conn))
        return due

    def _due_answers(self, conn: _Conn) -> list[bytes]:
        """The proxy's own answers whose turn has come (all earlier replies went out)."""
        due: list[bytes] = []
        while conn.synthetic and conn.synthetic[0][0] <= conn.replies:
            due.append(conn.synthetic.popleft()[1])
        return due

    async def _pump_client_to_server(self, conn: _Conn) -> None:
        assert conn.backend is not None
        try:
            while True:
                data = await conn.client.receive_some(_CHUNK)
                if not data:
                    try:
                        await conn.backend.send_eof()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        conn.scope.cancel()
                    return
                conn.bytes_from_client += len(data)
                await self._gate()
                if conn.passthrough:
                    await conn.backend.send_all(data)
                    continue
                forward = self._scan_client_bytes(conn, data)
                if forward:
                    await conn.backend.send_all(forward)
                if conn.synthetic:
                    await self._flush_answers(conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, RespScanError):
            conn.scope.cancel()

    async def _flush_answers(self, conn: _Conn) -> None:
        async with conn.write_lock:
            if conn.closed or not conn.s2c.at_boundary:
                return
            due = self._due_answers(conn)
            if due:
                payload = b"".join(due)
                conn.bytes_to_client += len(payload)
                await conn.client.send_all(payload)

    def _scan_client_bytes(self, conn: _Conn, data: bytes) -> bytes:
        """Split client bytes into what to forward and what the proxy answers itself (the
        answers are queued in ``conn.synthetic`` behind the replies owed so far)."""
        forward: list[bytes] = []
        start = 0
        for end, kind in conn.c2s.feed(data):
            piece = data[start:end]
            start = end
            if conn.c2s_streaming:
                conn.c2s_streaming = False
                forward.append(piece)
                conn.expected += 1
                continue
            if conn.c2s_pending:
                frame = bytes(conn.c2s_pending) + piece
                conn.c2s_pending.clear()
            else:
                frame = piece
            args = _parse_request(frame, kind)
            reply = self._intercept(conn, args) if args else None
            if reply is None:
                forward.append(frame)
                self._count_replies(conn, args)
            else:
                conn.synthetic.extend((conn.expected, part) for part in reply)
        tail = data[start:]
        if tail:
            if conn.c2s_streaming:
                forward.append(tail)
            else:
                conn.c2s_pending += tail
                if len(conn.c2s_pending) > _CAPTURE_LIMIT:
                    forward.append(bytes(conn.c2s_pending))
                    conn.c2s_pending.clear()
                    conn.c2s_streaming = True
        return b"".join(forward)

    def _count_replies(self, conn: _Conn, args: list[bytes] | None) -> None:
        """Account for the regular replies the backend owes for a forwarded command."""
        if args is None:
            conn.expected += 1
            return
        if not args:
            return  # a blank inline line gets no reply
        name = args[0].lower()
        sub = args[1].lower() if len(args) > 1 else b""
        owed = 1
        if name == b"hello" and len(args) > 1:
            conn.resp3 = args[1].strip() == b"3"
        elif name in _SUBSCRIBE:
            channels = args[1:]
            conn.subscriptions[name].update(channels)
            owed = 0 if conn.resp3 else len(channels)
        elif name in _UNSUBSCRIBE:
            subs = conn.subscriptions[_UNSUBSCRIBE[name]]
            channels = args[1:]
            owed = len(channels) if channels else max(1, len(subs))
            if channels:
                subs.difference_update(channels)
            else:
                subs.clear()
            if conn.resp3:
                owed = 0
        elif name == b"client" and sub == b"reply" and len(args) > 2:
            mode = args[2].lower()
            if mode == b"on":
                conn.reply_off = False
                conn.skip_next = False
                conn.expected += 1
                return
            if mode == b"off":
                conn.reply_off = True
            elif mode == b"skip":
                conn.skip_next = True
                return
            owed = 0
        if conn.reply_off:
            owed = 0
        elif conn.skip_next:
            conn.skip_next = False
            owed = 0
        conn.expected += owed

    def _intercept(self, conn: _Conn, args: list[bytes]) -> list[bytes] | None:
        """The proxy's own answer to a client command, or ``None`` to forward it."""
        name = args[0].lower()
        if self.resp2_only and name == b"hello" and len(args) > 1 and args[1].strip() == b"3":
            return [_NOPROTO]
        if not self.maint_notifications or self.resp2_only:
            return None
        if name != b"client" or len(args) < 2 or args[1].lower() != b"maint_notifications":
            return None
        sub = args[2].lower() if len(args) > 2 else b""
        if sub == b"off" and len(args) == 3:
            conn.maint_enabled = False
            conn.endpoint_type = None
            self._notify()
            return [_OK]
        if sub != b"on":
            return [_SYNTAX]
        if len(args) == 3:
            endpoint_type = None
        elif len(args) == 5 and args[3].lower() == b"moving-endpoint-type":
            endpoint_type = args[4].decode("utf-8", "replace").lower()
            if endpoint_type not in ENDPOINT_TYPES:
                return [_SYNTAX]
        else:
            return [_SYNTAX]
        conn.maint_enabled = True
        conn.endpoint_type = endpoint_type
        self._notify()
        # Connections opened during a maintenance window get its current notification.
        return [_OK, *(factory(conn) for factory in self._remembered.values())]

    # ------------------------------------------------------------------ injection

    def _select(self, connections: ConnectionSelector) -> list[_Conn]:
        if connections is None:
            return [c for c in self._conns.values() if c.maint_enabled]
        if connections == "all":
            return list(self._conns.values())
        wanted = set(connections)
        return [c for c in self._conns.values() if c.id in wanted]

    async def _inject_into(self, conn: _Conn, payload: bytes, after_frames: int) -> None:
        async with conn.write_lock:
            if conn.closed:
                return
            remaining = after_frames + (0 if conn.s2c.at_boundary else 1)
            if remaining > 0:
                conn.scheduled.append([remaining, payload])
                return
            try:
                await conn.client.send_all(payload)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                conn.close_now(abort=False)
                return
            conn.injected += 1
            conn.bytes_to_client += len(payload)

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
            await self._inject_into(conn, factory(conn), after_frames)
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

        def factory(conn: _Conn) -> bytes:
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
        transparently (its own ``CLIENT MAINT_NOTIFICATIONS`` handling applies).

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

    async def _close_later(self, targets: list[_Conn], after: float) -> None:
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
            f"<MaintenanceSimulator {self.host}:{self._port} -> "
            f"{self._backend[0]}:{self._backend[1]}, {len(self._conns)} connections>"
        )


def _parse_request(frame: bytes, kind: int) -> list[bytes] | None:
    """The arguments of one client command frame (``[]`` for a blank inline line)."""
    if kind == -1:
        return []
    if kind == 0:
        return frame.split()
    reader = hiredis.Reader()
    reader.feed(frame)
    try:
        value = reader.gets()
    except hiredis.ProtocolError:
        return None
    if isinstance(value, list) and all(isinstance(v, bytes) for v in value):
        return value
    return None
