"""Non-blocking I/O on a client-side cache's tracking connection.

The cache's tracking connection (docs/caching.md) is read by one reader task all the time,
and also *synchronously* by any task about to serve a cached value: whatever the socket
holds is read and handled before the value is served, without a schedule point between
the check and the answer. These helpers give that access to a
:class:`~trio_maint._net.connection.Connection` on a plain TCP or Unix socket, or over TLS
kept in a :class:`~trio_maint._net.tls_memory.MemoryTLSStream` (dialed with
``memory_tls=True``): there a read takes what the socket holds into the stream's incoming
buffer and decrypts every whole record in it, in the same synchronous step. They are the
only code outside :mod:`~trio_maint._net.connection` and :mod:`~trio_maint._net.wire` that
touches a connection's stream and parser.
"""

from __future__ import annotations

import os
from typing import Final

import trio

from .._sansio.errors import ConnectionClosedError, ConnectionError
from .._sansio.resp import PushNotification, RespValue
from .connection import Connection
from .stream import describe_error
from .tls_memory import MemoryTLSStream

__all__ = [
    "READ_SIZE",
    "next_frame",
    "output_pending",
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
    if type(stream) is MemoryTLSStream:
        return stream.transport_stream.socket
    if type(stream) is not trio.SocketStream:
        raise TypeError(
            "the tracking connection must be a plain socket stream or a MemoryTLSStream"
        )
    return stream.socket


def read_nowait(conn: Connection) -> int:
    """Read what ``conn``'s socket holds now (at most :data:`READ_SIZE` bytes) into its
    parser, without blocking. Over TLS, every whole record then in the stream's buffer is
    decrypted into the parser too (a partial one stays, until the rest arrives).

    :returns: the bytes read (``int``; 0 when nothing was waiting; over TLS, the bytes
        read from the socket plus the plaintext fed to the parser: at least
        :data:`READ_SIZE` whenever the socket gave that many).
    :raises ConnectionError: the server closed the connection, or the read failed (over
        TLS: or the bytes are not valid TLS, or it ended mid-record).
    :raises ConnectionClosedError: the connection was closed.
    :raises ProtocolError: the bytes break the parser's caps.
    """
    stream = conn._stream
    if type(stream) is MemoryTLSStream and not conn.closed:
        return _read_tls(conn, stream)
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


def _tls_error(
    conn: Connection, exc: trio.BrokenResourceError | trio.ClosedResourceError
) -> Exception:
    """The memory TLS stream's error as the connection's, to raise: a broken stream is
    a lost connection (``ConnectionError``, chained), a closed one
    ``ConnectionClosedError``."""
    if isinstance(exc, trio.BrokenResourceError):
        lost = ConnectionError(f"lost connection to {conn.endpoint_text}: {describe_error(exc)}")
        lost.__cause__ = exc
        return lost
    closed = ConnectionClosedError(f"connection {conn.id} is closed")
    closed.__suppress_context__ = True
    return closed


def _read_tls(conn: Connection, stream: MemoryTLSStream) -> int:
    try:
        count = stream.pull_nowait(READ_SIZE)
        data = stream.decrypt_nowait()
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise _tls_error(conn, exc)
    if data:
        conn._parser.feed(data)
    elif stream.at_eof:
        raise ConnectionError(f"server {conn.endpoint_text} closed the connection")
    return count + len(data)


def output_pending(conn: Connection) -> bool:
    """Whether bytes already accepted by :func:`write_nowait` still wait for the socket
    (``bool``; over TLS only: their ciphertext, or a TLS answer a read produced). The
    writer then calls ``write_nowait(conn, b"")`` once the socket is writable."""
    stream = conn._stream
    return type(stream) is MemoryTLSStream and stream.output_pending


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
    """Write as much of ``data`` as the socket takes now, without blocking. Over TLS,
    first what earlier calls accepted (:func:`output_pending`); then the start of
    ``data`` is encrypted and accepted whole (its ciphertext is the stream's to write),
    or not at all while earlier ciphertext still waits.

    :returns: the bytes written, or accepted (``int``, possibly 0).
    :raises ConnectionError: the write failed (the connection is lost).
    :raises ConnectionClosedError: the connection was closed.
    """
    stream = conn._stream
    if type(stream) is MemoryTLSStream and not conn.closed:
        try:
            return stream.send_nowait(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _tls_error(conn, exc)
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
