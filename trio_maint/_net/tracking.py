"""Non-blocking I/O on a client-side cache's tracking connection.

The cache's tracking connection (docs/caching.md) is read by one reader task all the time,
and also *synchronously* by any task about to serve a cached value: whatever the socket
holds is read and handled before the value is served, without a schedule point between
the check and the answer. These helpers give that access to a
:class:`~trio_maint._net.connection.Connection` (plain TCP or Unix sockets; the cache
refuses TLS, whose records a synchronous read cannot take apart). They are the only code
outside :mod:`~trio_maint._net.connection` and :mod:`~trio_maint._net.wire` that touches a
connection's stream and parser.
"""

from __future__ import annotations

import os
from typing import Final

import trio

from .._sansio.errors import ConnectionClosedError, ConnectionError
from .._sansio.resp import PushNotification, RespValue
from .connection import Connection
from .stream import describe_error

__all__ = [
    "READ_SIZE",
    "next_frame",
    "read_nowait",
    "wait_readable",
    "wait_writable",
    "write_nowait",
]

#: Bytes asked of the kernel per read (``int``).
READ_SIZE: Final = 65536


def _socket(conn: Connection) -> trio.socket.SocketType:
    stream = conn._stream
    if stream is None or conn.closed:
        raise ConnectionClosedError(f"connection {conn.id} is closed")
    if type(stream) is not trio.SocketStream:
        raise TypeError("the tracking connection must be a plain TCP or Unix socket stream")
    return stream.socket


def read_nowait(conn: Connection) -> int:
    """Read what ``conn``'s socket holds now (at most :data:`READ_SIZE` bytes) into its
    parser, without blocking.

    :returns: the bytes read (``int``; 0 when nothing was waiting).
    :raises ConnectionError: the server closed the connection, or the read failed.
    :raises ConnectionClosedError: the connection was closed.
    :raises ProtocolError: the bytes break the parser's caps.
    """
    fd = _socket(conn).fileno()
    if fd < 0:
        raise ConnectionClosedError(f"connection {conn.id} is closed")
    try:
        data = os.read(fd, READ_SIZE)
    except BlockingIOError:
        return 0
    except OSError as exc:
        raise ConnectionError(
            f"lost connection to {conn.endpoint_text}: {describe_error(exc)}"
        ) from exc
    if not data:
        raise ConnectionError(f"server {conn.endpoint_text} closed the connection")
    conn._parser.feed(data)
    return len(data)


def next_frame(conn: Connection) -> RespValue:
    """The next whole frame in ``conn``'s parser (a reply, or a push frame), or
    :data:`~trio_maint._sansio.resp.NEED_DATA`. A push frame is counted as taken.

    :raises ProtocolError: the bytes are not RESP.
    """
    frame = conn._next_parsed()
    if frame.__class__ is PushNotification:
        conn._parser.pushes_taken(1)
    return frame


def write_nowait(conn: Connection, data: bytes | bytearray | memoryview) -> int:
    """Write as much of ``data`` as the socket takes now, without blocking.

    :returns: the bytes written (``int``, possibly 0).
    :raises ConnectionError: the write failed (the connection is lost).
    :raises ConnectionClosedError: the connection was closed.
    """
    fd = _socket(conn).fileno()
    if fd < 0:
        raise ConnectionClosedError(f"connection {conn.id} is closed")
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
    except OSError as exc:
        raise ConnectionError(
            f"lost connection to {conn.endpoint_text}: {describe_error(exc)}"
        ) from exc


async def wait_readable(conn: Connection) -> None:
    """Wait until ``conn``'s socket has bytes (or is closed).

    :raises ConnectionClosedError: the connection is or was closed meanwhile.
    """
    try:
        await trio.lowlevel.wait_readable(_socket(conn))
    except trio.ClosedResourceError:
        raise ConnectionClosedError(f"connection {conn.id} was closed") from None


async def wait_writable(conn: Connection) -> None:
    """Wait until ``conn``'s socket takes bytes again.

    :raises ConnectionClosedError: the connection is or was closed meanwhile.
    """
    try:
        await trio.lowlevel.wait_writable(_socket(conn))
    except trio.ClosedResourceError:
        raise ConnectionClosedError(f"connection {conn.id} was closed") from None
