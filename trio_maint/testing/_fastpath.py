"""The simulator's fast path: one Trio task per running simulator (:class:`Dispatcher`)
waits on a private ``epoll`` set holding the sockets of every connection that has nothing
special going on, and handles each ready socket synchronously — read, the connection's
usual bookkeeping (frame boundaries, requests, replies owed), a write that does not block —
with no task switch, no ``epoll_ctl`` and no failed ``recv()`` per chunk, as a task per
direction waiting with ``wait_readable`` costs.

A chunk the fast path cannot finish is handed to the connection's task for that direction
(:func:`fast_wait` returns it), which goes on with the general path: ``("raw", data)``
(bytes still to process: end of stream, a stall, latency, a client write under way, the
upstream moved), ``("sent", rest)`` (processed; ``rest`` is still to write) or
``("error", exc)``. Nothing is reordered: a direction's task parks only while its socket is
registered, and the bytes a client write could not take wait in
``ProxyConnection.client_backlog``, which every later client write sends first.

Linux only (``select.epoll``); elsewhere :func:`dispatcher_for` gives ``None`` and the
connections forward with a task per direction, as on the general path.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeAlias

import trio

from ._scanner import RespScanError

if TYPE_CHECKING:
    from ._proxy import ProxyConnection

__all__ = ["C2S", "S2C", "Dispatcher", "Handoff", "dispatcher_for", "fast_wait", "stop_wait"]

#: Directions: client to server, server to client.
C2S: Final = 0
S2C: Final = 1
#: What the fast path hands a direction's task (see the module docstring).
Handoff: TypeAlias = tuple[str, "bytes | BaseException"]

_CHUNK: Final = 262144
_EVENTS_PER_ROUND: Final = 256
_RUNNING: dict[int, Dispatcher] = {}


class Dispatcher:
    """Readiness of registered file descriptors, each with a synchronous handler. It runs
    while connections use it (:func:`dispatcher_for` to :meth:`release`), so a simulator
    with no connection has no dispatcher task and no epoll descriptor."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._handlers: dict[int, Callable[[], None]] = {}
        self._scope = trio.CancelScope()
        self.users = 0
        self.closed = False

    def release(self) -> None:
        """One user less; the last one stops the dispatcher."""
        self.users -= 1
        if self.users <= 0:
            self.closed = True
            self._scope.cancel()

    def register(self, fd: int, handler: Callable[[], None]) -> None:
        """Call ``handler()`` whenever ``fd`` is readable, until :meth:`unregister`."""
        if not self.closed:
            self._epoll.register(fd, select.EPOLLIN)
            self._handlers[fd] = handler

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd`` (no-op when it is not registered)."""
        if self._handlers.pop(fd, None) is not None and not self.closed:
            try:
                self._epoll.unregister(fd)
            except OSError:
                pass

    async def run(self) -> None:
        """Dispatch until cancelled; closes the epoll set on the way out."""
        epoll = self._epoll
        handlers = self._handlers
        try:
            with self._scope:
                while True:
                    await trio.lowlevel.wait_readable(epoll.fileno())
                    for fd, _ in epoll.poll(0, _EVENTS_PER_ROUND):
                        handler = handlers.get(fd)
                        if handler is not None:
                            handler()
        finally:
            self.closed = True
            handlers.clear()
            epoll.close()


def dispatcher_for(nursery: trio.Nursery | None) -> Dispatcher | None:
    """The dispatcher running in ``nursery`` (started there when none runs), with one more
    user (:meth:`Dispatcher.release`); ``None`` without a nursery or ``select.epoll``."""
    if nursery is None or not hasattr(select, "epoll"):
        return None
    key = id(nursery)
    dispatcher = _RUNNING.get(key)
    if dispatcher is None or dispatcher.closed:
        new = dispatcher = Dispatcher()
        _RUNNING[key] = new

        async def run() -> None:
            try:
                await new.run()
            finally:
                if _RUNNING.get(key) is new:
                    del _RUNNING[key]

        nursery.start_soon(run)
    dispatcher.users += 1
    return dispatcher


class _Park:
    """One parked direction: its socket, and what the fast path hands it."""

    __slots__ = ("event", "fd", "value")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.event = trio.Event()
        self.value: Handoff | None = None


async def fast_wait(conn: ProxyConnection, direction: int, sock: trio.SocketStream) -> Handoff:
    """Park ``conn``'s task for ``direction`` (reading ``sock``) until the fast path hands
    it something (see the module docstring)."""
    dispatcher = conn.dispatcher
    assert dispatcher is not None
    park = _Park(sock.socket.fileno())
    conn.parked[direction] = park
    if direction == C2S:
        dispatcher.register(park.fd, lambda: _client_readable(conn, park))
    else:
        dispatcher.register(park.fd, lambda: _server_readable(conn, park, sock))
    try:
        await park.event.wait()
    finally:
        dispatcher.unregister(park.fd)
        if conn.parked[direction] is park:
            conn.parked[direction] = None
    assert park.value is not None
    return park.value


def stop_wait(conn: ProxyConnection, direction: int) -> None:
    """Hand a parked direction the end of its stream (its socket is being replaced)."""
    park = conn.parked[direction]
    if park is not None:
        _wake(conn, park, ("raw", b""))


def _wake(conn: ProxyConnection, park: _Park, handoff: Handoff) -> None:
    assert conn.dispatcher is not None
    conn.dispatcher.unregister(park.fd)
    park.value = handoff
    park.event.set()


def _write(fd: int, data: bytes) -> int:
    """Write without blocking; how many bytes went (0 when the buffer is full)."""
    if not data:
        return 0
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


def _client_readable(conn: ProxyConnection, park: _Park) -> None:
    try:
        data = os.read(park.fd, _CHUNK)
    except BlockingIOError:
        return
    except OSError as exc:
        _wake(conn, park, ("error", exc))
        return
    if not data or not conn.fast_ok():
        _wake(conn, park, ("raw", data))
        return
    conn.bytes_from_client += len(data)
    backend = conn.backend
    assert backend is not None
    try:
        forward = conn._scan_client_bytes(data)
        sent = _write(backend.socket.fileno(), forward)
    except (OSError, RespScanError) as exc:
        _wake(conn, park, ("error", exc))
        return
    if sent < len(forward) or conn.synthetic:
        _wake(conn, park, ("sent", forward[sent:]))


def _server_readable(conn: ProxyConnection, park: _Park, backend: trio.SocketStream) -> None:
    try:
        data = os.read(park.fd, _CHUNK)
    except BlockingIOError:
        return
    except OSError as exc:
        _wake(conn, park, ("error", exc))
        return
    if (
        not data
        or backend is not conn.backend
        or not conn.fast_ok()
        or conn.write_lock.locked()
        or conn.client_backlog
    ):
        _wake(conn, park, ("raw", data))
        return
    try:
        payload = conn._server_payload(data)
        sent = _write(conn.client.socket.fileno(), payload)
    except (OSError, RespScanError) as exc:
        _wake(conn, park, ("error", exc))
        return
    if conn.drained is not None and conn.replies >= conn.expected:
        conn.drained.set()
    if sent < len(payload):
        conn.client_backlog = payload[sent:]  # first in line for every later client write
        _wake(conn, park, ("sent", b""))
