"""The pieces of a :class:`~trio_maint.testing.LocalCluster`: free port pairs for cluster
nodes, :class:`ClusterNode`, :class:`ClusterError`, and a minimal blocking RESP2 connection
for the cluster helpers (which run in worker threads)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import hiredis
import trio

from .._sansio.endpoint import format_host_port
from .._sansio.resp import encode_command
from ._server import RedisServer

__all__ = [
    "SLOT_COUNT",
    "ClusterError",
    "ClusterNode",
    "SyncConnection",
    "cluster_free_port",
    "in_thread",
    "server_call",
    "text",
]

SLOT_COUNT: Final = 16384
_BUS_OFFSET: Final = 10000
_MAX_PORT: Final = 65535 - _BUS_OFFSET

T = TypeVar("T")


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def cluster_free_port(host: str = "127.0.0.1", exclude: Sequence[int] = ()) -> int:
    """A TCP port on ``host`` that is free together with its cluster bus port
    (``port + 10000``), below 55535, and not in ``exclude``.

    :raises RuntimeError: none found after 200 attempts.
    """
    taken = set(exclude)
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port >= _MAX_PORT or port in taken or port + _BUS_OFFSET in taken:
            continue
        if _port_free(host, port + _BUS_OFFSET):
            return port
    raise RuntimeError("no free port pair (port, port + 10000) found for a cluster node")


class ClusterError(RuntimeError):
    """A cluster helper failed (a node refused a command, or a state was not reached)."""


class SyncConnection:
    """A minimal blocking RESP2 connection for the cluster helpers."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = hiredis.Reader(replyError=ClusterError)

    def close(self) -> None:
        self.sock.close()

    def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        self.sock.sendall(b"".join(encode_command(tuple(c)) for c in commands))
        replies: list[Any] = []
        while len(replies) < len(commands):
            reply = self.reader.gets()
            if reply is False:
                data = self.sock.recv(65536)
                if not data:
                    raise ClusterError("connection closed by the node")
                self.reader.feed(data)
                continue
            replies.append(reply)
        return replies

    def call(self, *args: Any) -> Any:
        reply = self.pipeline([args])[0]
        if isinstance(reply, ClusterError):
            raise ClusterError(f"{args[0]} {args[1] if len(args) > 1 else ''}: {reply}")
        return reply


def text(value: Any) -> str:
    """A reply as ``str`` (``bytes`` decoded)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class ClusterNode:
    """One node of a :class:`LocalCluster`: a running :class:`RedisServer` and its id.

    :ivar server: the :class:`RedisServer` (``server.port`` is the client port).
    :ivar node_id: the 40-character cluster node id (``str``).
    """

    def __init__(self, server: RedisServer, node_id: str) -> None:
        self.server = server
        self.node_id = node_id

    @property
    def host(self) -> str:
        """The node's loopback address (``str``)."""
        return self.server.host

    @property
    def port(self) -> int:
        """The node's client port (``int``; its bus port is ``port + 10000``)."""
        return self.server.port

    @property
    def name(self) -> str:
        """``"host:port"``, as the cluster announces the node."""
        return format_host_port(self.host, self.port)

    @property
    def url(self) -> str:
        """``redis://host:port``."""
        return self.server.url

    def call(self, *args: Any, timeout: float = 10.0) -> Any:
        """Run one command on this node (blocking, RESP2) and return its reply.

        :raises ClusterError: the node answered with an error.
        :raises OSError: the node cannot be reached.
        """
        conn = SyncConnection(self.host, self.port, timeout)
        try:
            return conn.call(*args)
        finally:
            conn.close()

    def __repr__(self) -> str:
        return f"<ClusterNode {self.name} {self.node_id[:8]}>"


def server_call(server: RedisServer, *args: Any) -> Any:
    """Run one command on ``server`` (blocking, RESP2) and return its reply.

    :raises ClusterError: the server answered with an error.
    """
    conn = SyncConnection(server.host, server.port)
    try:
        return conn.call(*args)
    finally:
        conn.close()


def setslot(slot: int, state: str, node_id: str) -> tuple[Any, ...]:
    """``CLUSTER SETSLOT slot state node_id``."""
    return ("CLUSTER", "SETSLOT", slot, state, node_id)


def check_replies(replies: list[Any]) -> None:
    """Raise the first :class:`ClusterError` among pipeline ``replies``."""
    for reply in replies:
        if isinstance(reply, ClusterError):
            raise reply


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run the blocking ``fn(*args)`` in a worker thread (not abandoned on cancel)."""
    return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=False)
