"""A small scriptable RESP3 server on Trio, for tests that need a server to misbehave on cue.

``async with open_fake_server() as srv:`` listens on a free loopback port (``srv.url``,
``srv.address``) and answers what a client's handshake needs (``HELLO 3`` with a RESP3 map,
``CLIENT MAINT_NOTIFICATIONS ...`` with ``+OK``, ``SELECT``, ``PING``) plus ``SET``, ``GET``,
``INCR`` and ``DEL`` on an in-memory dict. Any command can be scripted with
:meth:`FakeServer.on`: a handler ``async (conn, args) -> bytes | Action`` returns the raw
reply to write (build it with :func:`resp`, :class:`Err`, :class:`Status`, :func:`push`),
:data:`Action.NO_REPLY`, or :data:`Action.CLOSE` (close the connection without replying,
after the commands already received in the same read were handled). A handler may write
push frames first (``await conn.send(push(...))``).

Everything is counted: ``srv.accepted`` (connections accepted), ``srv.log`` (every command,
in arrival order, with its connection id), ``srv.count(name)``, ``srv.connections`` (open
ones). :meth:`FakeServer.push` writes a frame to open connections.

``close_on_accept=True`` makes a listener that accepts and closes at once: it counts dial
attempts to an endpoint that cannot be used.

:class:`ClusterTopology` and :func:`serve_cluster_commands` make fake servers look like
Redis Cluster nodes (``CLUSTER SHARDS``/``CLUSTER SLOTS`` per a shared, mutable topology).
"""

from __future__ import annotations

import enum
import functools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import hiredis
import trio

__all__ = [
    "Action",
    "ClusterTopology",
    "Err",
    "FakeConnection",
    "FakeServer",
    "Handler",
    "Status",
    "moved",
    "open_fake_server",
    "push",
    "resp",
    "serve_cluster_commands",
]


class Action(enum.Enum):
    """What a handler may return instead of reply bytes."""

    NO_REPLY = "no reply"
    CLOSE = "close without replying"


class Status(str):
    """A RESP simple string (``+OK``)."""

    __slots__ = ()


class Err(str):
    """A RESP error reply (``-READONLY ...``)."""

    __slots__ = ()


def resp(value: Any) -> bytes:
    """Encode ``value`` as RESP3: ``None`` (``_``), ``bool``, ``int``, ``float``,
    :class:`Status`, :class:`Err`, ``str``/``bytes`` (bulk), ``list``/``tuple`` (array),
    ``dict`` (map)."""
    if value is None:
        return b"_\r\n"
    if isinstance(value, bool):
        return b"#t\r\n" if value else b"#f\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, float):
        return b",%r\r\n" % value
    if isinstance(value, Status):
        return b"+" + value.encode() + b"\r\n"
    if isinstance(value, Err):
        return b"-" + value.encode() + b"\r\n"
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes | bytearray):
        return b"$%d\r\n%s\r\n" % (len(value), bytes(value))
    if isinstance(value, dict):
        parts = [b"%%%d\r\n" % len(value)]
        for key, item in value.items():
            parts += [resp(key), resp(item)]
        return b"".join(parts)
    if isinstance(value, list | tuple):
        return b"*%d\r\n" % len(value) + b"".join(resp(item) for item in value)
    raise TypeError(f"cannot encode {value!r}")


def push(*items: Any) -> bytes:
    """A RESP3 push frame (``>``) of ``items``."""
    return b">%d\r\n" % len(items) + b"".join(resp(item) for item in items)


OK: bytes = resp(Status("OK"))

#: ``async (conn, args) -> reply``: ``args`` are the command's arguments as ``bytes``
#: (``args[0]`` is the command name as sent).
Handler: TypeAlias = Callable[["FakeConnection", list[bytes]], Awaitable["bytes | Action"]]


class FakeConnection:
    """One client connection of a :class:`FakeServer`."""

    def __init__(self, server: FakeServer, cid: int, stream: trio.SocketStream) -> None:
        self.server = server
        #: The server's id of this connection (``int``, from 1, never reused).
        self.id = cid
        self.stream = stream
        try:
            peer = stream.socket.getpeername()
            self.peer: tuple[str, int] = (str(peer[0]), int(peer[1]))
        except OSError:
            self.peer = ("", 0)
        #: The commands received on this connection, in order.
        self.commands: list[tuple[bytes, ...]] = []
        #: Scratch space for handlers.
        self.state: dict[str, Any] = {}
        self.opened_at = trio.current_time()
        self.closed = False
        self.scope = trio.CancelScope()
        self._write_lock = trio.Lock()

    async def send(self, data: bytes) -> None:
        """Write ``data`` (ignored once the connection is gone)."""
        async with self._write_lock:
            if self.closed:
                return
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self.close()

    def close(self) -> None:
        """Close the connection (its task ends and the socket is closed)."""
        self.scope.cancel()


async def _hello(conn: FakeConnection, args: list[bytes]) -> bytes:
    if len(args) > 1 and args[1] != b"3":
        return resp(Err("NOPROTO this fake server only speaks RESP3"))
    return resp(
        {
            "server": "redis",
            "version": "7.2.0",
            "proto": 3,
            "id": conn.id,
            "mode": conn.server.mode,
            "role": "master",
            "modules": [],
        }
    )


async def _client(conn: FakeConnection, args: list[bytes]) -> bytes:
    sub = args[1].lower() if len(args) > 1 else b""
    if sub == b"maint_notifications":
        if not conn.server.maint_notifications:
            return resp(Err("ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP."))
        conn.state["maint"] = len(args) > 2 and args[2].lower() == b"on"
        return OK
    if sub == b"id":
        return resp(conn.id)
    return OK


async def _ok(conn: FakeConnection, args: list[bytes]) -> bytes:
    return OK


async def _ping(conn: FakeConnection, args: list[bytes]) -> bytes:
    return resp(args[1]) if len(args) > 1 else resp(Status("PONG"))


async def _set(conn: FakeConnection, args: list[bytes]) -> bytes:
    conn.server.data[args[1]] = args[2]
    return OK


async def _get(conn: FakeConnection, args: list[bytes]) -> bytes:
    return resp(conn.server.data.get(args[1]))


async def _incr(conn: FakeConnection, args: list[bytes]) -> bytes:
    """``INCR key`` and ``INCRBY key n``."""
    step = int(args[2]) if len(args) > 2 else 1
    value = int(conn.server.data.get(args[1], b"0")) + step
    conn.server.data[args[1]] = b"%d" % value
    return resp(value)


async def _del(conn: FakeConnection, args: list[bytes]) -> bytes:
    return resp(sum(1 for key in args[1:] if conn.server.data.pop(key, None) is not None))


class FakeServer:
    """See the module docs. Create it with :func:`open_fake_server`."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        maint_notifications: bool = True,
        close_on_accept: bool = False,
        mode: str = "standalone",
    ) -> None:
        self.host = host
        self.port = 0
        self.maint_notifications = maint_notifications
        self.close_on_accept = close_on_accept
        #: ``mode`` in the ``HELLO`` reply (``"standalone"`` or ``"cluster"``).
        self.mode = mode
        #: Connections accepted so far (``int``).
        self.accepted = 0
        #: ``trio.current_time()`` of each accept.
        self.accept_times: list[float] = []
        #: Every command received: ``(connection id, args)``, in arrival order.
        self.log: list[tuple[int, tuple[bytes, ...]]] = []
        #: Command counts by upper-case name (``"SET"``, ``"CLUSTER"``, ...).
        self.commands: Counter[str] = Counter()
        #: The open connections by id.
        self.connections: dict[int, FakeConnection] = {}
        #: The key space of the default ``SET``/``GET``/``INCR``/``DEL`` handlers.
        self.data: dict[bytes, bytes] = {}
        self._handlers: dict[str, Handler] = {
            "HELLO": _hello,
            "CLIENT": _client,
            "SELECT": _ok,
            "READONLY": _ok,
            "PING": _ping,
            "SET": _set,
            "GET": _get,
            "INCR": _incr,
            "INCRBY": _incr,
            "DEL": _del,
        }
        self._next_id = 1
        self._changed = trio.Event()

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)``."""
        return (self.host, self.port)

    @property
    def name(self) -> str:
        """``"host:port"``."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """``redis://host:port``."""
        return f"redis://{self.host}:{self.port}"

    def on(self, name: str, handler: Handler) -> None:
        """Handle the command ``name`` (case-insensitive) with ``handler``."""
        self._handlers[name.upper()] = handler

    def count(self, name: str) -> int:
        """How many ``name`` commands were received (``int``)."""
        return self.commands[name.upper()]

    def seen(self, name: str) -> list[tuple[bytes, ...]]:
        """The arguments of every ``name`` command received, in arrival order."""
        wanted = name.upper()
        return [args for _cid, args in self.log if args[0].decode().upper() == wanted]

    async def push(self, data: bytes, connections: Iterable[FakeConnection] | None = None) -> int:
        """Write ``data`` (e.g. a :func:`push` frame) to ``connections`` (default: every open
        one); returns how many it went to."""
        targets = list(self.connections.values()) if connections is None else list(connections)
        for conn in targets:
            await conn.send(data)
        return len(targets)

    def close_all(self) -> None:
        """Close every open connection."""
        for conn in list(self.connections.values()):
            conn.close()

    async def wait_until(self, predicate: Callable[[FakeServer], bool]) -> None:
        """Wait until ``predicate(self)`` holds (re-checked on every command and
        connection change); bound it with ``trio.fail_after``."""
        while not predicate(self):
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _serve(self, stream: trio.SocketStream) -> None:
        self.accepted += 1
        self.accept_times.append(trio.current_time())
        if self.close_on_accept:
            stream.socket.close()
            self._notify()
            return
        conn = FakeConnection(self, self._next_id, stream)
        self._next_id += 1
        self.connections[conn.id] = conn
        self._notify()
        try:
            with conn.scope:
                await self._run(conn)
        finally:
            conn.closed = True
            del self.connections[conn.id]
            stream.socket.close()
            self._notify()

    async def _run(self, conn: FakeConnection) -> None:
        reader = hiredis.Reader()
        while True:
            try:
                data = await conn.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            if not data:
                return
            reader.feed(data)
            close = False
            while True:
                frame = reader.gets()
                if frame is False:
                    break
                if not isinstance(frame, list) or not frame:
                    continue
                args = [a if isinstance(a, bytes) else str(a).encode() for a in frame]
                conn.commands.append(tuple(args))
                self.log.append((conn.id, tuple(args)))
                name = args[0].decode("utf-8", "replace").upper()
                self.commands[name] += 1
                self._notify()
                handler = self._handlers.get(name)
                if handler is None:
                    reply: bytes | Action = resp(Err(f"ERR unknown command '{name}'"))
                else:
                    reply = await handler(conn, args)
                if reply is Action.CLOSE:
                    close = True
                elif isinstance(reply, bytes):
                    await conn.send(reply)
            if close or conn.closed:
                return


@asynccontextmanager
async def open_fake_server(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    maint_notifications: bool = True,
    close_on_accept: bool = False,
    mode: str = "standalone",
) -> AsyncIterator[FakeServer]:
    """Run a :class:`FakeServer` for the block (on ``port``, or a free one)."""
    server = FakeServer(
        host=host,
        maint_notifications=maint_notifications,
        close_on_accept=close_on_accept,
        mode=mode,
    )
    try:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                functools.partial(trio.serve_tcp, server._serve, port, host=host)
            )
            server.port = int(listeners[0].socket.getsockname()[1])
            try:
                yield server
            finally:
                server.close_all()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The block's own exception comes back wrapped by the nursery: unwrap it.
        real = [e for e in group.exceptions if not isinstance(e, trio.Cancelled)]
        if len(real) == 1:
            raise real[0] from None
        raise


# ------------------------------------------------------------------------------- cluster


class ClusterTopology:
    """Which fake server owns which slots; shared by the fake nodes of one cluster and
    changed by tests (``topology.assign(node)`` gives a node every slot)."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int, FakeServer]] = []

    def assign(self, owner: FakeServer, first: int = 0, last: int = 16383) -> None:
        """Give ``first..last`` to ``owner`` (replacing the whole map when it is 0..16383)."""
        if (first, last) == (0, 16383):
            self.ranges = []
        self.ranges.append((first, last, owner))

    def owners(self) -> list[FakeServer]:
        """Each owning server once, in order."""
        seen: list[FakeServer] = []
        for _first, _last, owner in self.ranges:
            if owner not in seen:
                seen.append(owner)
        return seen

    @staticmethod
    def node_id(server: FakeServer) -> str:
        """A stable 40-character node id for ``server``."""
        return f"{server.port:040d}"


def serve_cluster_commands(server: FakeServer, topology: ClusterTopology) -> None:
    """Make ``server`` answer ``CLUSTER SHARDS``, ``CLUSTER SLOTS``, ``CLUSTER MYID`` and
    ``CLUSTER INFO`` from ``topology`` (its ``HELLO`` then says ``mode cluster``)."""
    server.mode = "cluster"

    def node_entry(owner: FakeServer) -> dict[str, Any]:
        return {
            "id": ClusterTopology.node_id(owner),
            "port": owner.port,
            "ip": owner.host,
            "endpoint": owner.host,
            "role": "master",
            "replication-offset": 0,
            "health": "online",
        }

    async def cluster(conn: FakeConnection, args: list[bytes]) -> bytes:
        sub = args[1].upper() if len(args) > 1 else b""
        if sub == b"SHARDS":
            shards: list[Any] = []
            for owner in topology.owners():
                slots: list[int] = []
                for first, last, who in topology.ranges:
                    if who is owner:
                        slots += [first, last]
                shards.append({"slots": slots, "nodes": [node_entry(owner)]})
            return resp(shards)
        if sub == b"SLOTS":
            return resp(
                [
                    [first, last, [owner.host, owner.port, ClusterTopology.node_id(owner)]]
                    for first, last, owner in topology.ranges
                ]
            )
        if sub == b"MYID":
            return resp(ClusterTopology.node_id(server))
        if sub == b"INFO":
            return resp("cluster_state:ok\r\ncluster_slots_assigned:16384\r\n")
        return resp(Err(f"ERR unknown subcommand '{sub.decode()}'"))

    server.on("CLUSTER", cluster)


def moved(slot: int, target: FakeServer) -> bytes:
    """A ``-MOVED slot host:port`` error reply pointing to ``target``."""
    return resp(Err(f"MOVED {slot} {target.host}:{target.port}"))
