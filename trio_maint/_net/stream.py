"""Dialing a transport (TCP, TLS over TCP, a Unix socket) and the small helpers around a
Trio stream: the socket under it, closing it at once, a readable error message."""

from __future__ import annotations

import logging
import os
import ssl
from typing import Any

import trio

from .._sansio.endpoint import format_host_port
from .._sansio.errors import ConnectionError, RedisError
from .._sansio.options import ClientOptions
from .tls_memory import MemoryTLSStream

__all__ = ["close_stream", "describe_error", "open_stream", "socket_of"]

logger = logging.getLogger("trio_maint.connection")


def socket_of(stream: trio.abc.Stream) -> trio.socket.SocketType:
    """The socket under ``stream`` (through TLS layers).

    :raises TypeError: another kind of stream.
    """
    inner: Any = stream
    while isinstance(inner, trio.SSLStream | MemoryTLSStream):
        inner = inner.transport_stream
    if isinstance(inner, trio.SocketStream):
        return inner.socket
    raise TypeError(f"unsupported stream type {type(stream).__name__}")


async def open_stream(
    options: ClientOptions,
    host: str | None = None,
    port: int | None = None,
    *,
    unix_path: str | None = None,
    memory_tls: bool = False,
) -> trio.abc.Stream:
    """Dial a transport: TCP, TLS over TCP (``options.ssl``), or a Unix socket.

    No timeout is applied here; the caller wraps it. ``host``/``port`` default to the
    options' address. ``memory_tls``: TLS in a
    :class:`~trio_maint._net.tls_memory.MemoryTLSStream` (readable without blocking: a
    cache's tracking connection) instead of a :class:`trio.SSLStream`; the same context
    and the same name to verify the certificate against.

    :raises ConnectionError: the dial or the TLS handshake failed, or the address cannot
        be used at all (a host name that cannot be encoded, such as ``a..b``, or a port
        out of range: trio raises ``UnicodeError``/``ValueError``/``OverflowError`` for
        those, which a MOVING or a MOVED from a hostile server can name).
    """
    host = options.host if host is None else host
    port = options.port if port is None else port
    try:
        if unix_path is not None:
            return await trio.open_unix_socket(unix_path)
        tcp = await trio.open_tcp_stream(host, port)
        if not options.ssl:
            return tcp
        context = options.make_ssl_context()
        name = options.ssl_server_hostname or host
        tls: trio.SSLStream[trio.SocketStream] | MemoryTLSStream
        if memory_tls:
            tls = MemoryTLSStream(tcp, context, server_hostname=name)
        else:
            tls = trio.SSLStream(tcp, context, server_hostname=name)
        try:
            await tls.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(tcp)
            raise
        return tls
    except RedisError:
        raise
    except (
        OSError,
        trio.BrokenResourceError,
        ssl.SSLError,
        UnicodeError,
        ValueError,
        OverflowError,
    ) as exc:
        where = unix_path if unix_path is not None else format_host_port(host, port)
        raise ConnectionError(f"cannot connect to {where}: {describe_error(exc)}") from exc


def describe_error(exc: BaseException) -> str:
    """A useful message for ``exc``, looking into its cause (trio's BrokenResourceError
    wraps the real ``OSError``/``SSLError`` without a message of its own)."""
    text = str(exc)
    cause = exc.__cause__ or exc.__context__
    if (
        isinstance(cause, BaseExceptionGroup)
        and text.startswith("all attempts to connect")
        and cause.exceptions
    ):
        # trio's open_tcp_stream: the attempts' own errors say why (refused, unreachable),
        # and the address is named by the caller already.
        reasons = dict.fromkeys(_reason(e) for e in cause.exceptions)
        return "; ".join(reasons)
    if cause is not None and (not text or isinstance(exc, trio.BrokenResourceError)):
        inner = describe_error(cause)
        return f"{text}: {inner}" if text else inner
    return text or type(exc).__name__


def _reason(exc: BaseException) -> str:
    """The OS's words for a failed connection attempt (its errno's) where it has them."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return describe_error(exc)


def close_stream(stream: trio.abc.Stream) -> None:
    """Close ``stream``'s socket at once (no TLS close_notify); never raises."""
    try:
        socket_of(stream).close()
    except Exception:  # pragma: no cover - closing must never raise
        logger.debug("error closing a stream", exc_info=True)
